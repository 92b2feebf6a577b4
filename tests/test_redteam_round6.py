"""Red team, round six: the sandbox setup retry (a command bwrap never ran
is started again, ``judge/place.execute``, ``engine._start_again``), the
namespaced command's end without a /proc sweep, and what a judged command
reads beside the judged git view.

Each test runs one route as the agent or as the attempt's committed code
and asserts the promise, so a working attack fails the test."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import needs_namespace
from test_hostile import HONEST, project
from test_redteam_round5 import _checked

pytestmark = pytest.mark.slow


def _wrong_attempt(tmp_path: Path, gp, code: str) -> None:  # type: ignore[no-untyped-def]
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && cat app.py && git commit -qam right")
    (tmp_path / "attempt.py").write_text(code)
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"cp {tmp_path / 'attempt.py'} app.py && git commit -qam wrong")


# -- 1. a failing gate dressed as a sandbox that was never set up ----------------------

GROUP_KILLER = textwrap.dedent("""\
    import os, signal


    def add(a, b):
        return a - b


    # Kill the whole process group: bwrap's monitor outside the PID
    # namespace is in it, and dies before writing its "exit-code" status.
    os.kill(0, signal.SIG{sig})
    """)


@needs_namespace
@pytest.mark.parametrize("sig", ["KILL", "TERM", "HUP"])
def test_a_gate_that_kills_its_bwrap_is_judged_fail_not_never_ran(tmp_path: Path, sig: str) -> None:
    """The attempt's code kills its own process group, bwrap's monitor
    with it (a kill(0) reaches it across the PID namespace: same group),
    so bwrap's status has no ``"exit-code"``: were that read as "the
    sandbox was never set up", the gate would be tried again and end as an
    error (not judged), or get up to three chances.  bwrap dies of the
    signal (not exit 1), so it is the command's own failure."""
    repo, gp = project(tmp_path)
    _wrong_attempt(tmp_path, gp, GROUP_KILLER.format(sig=sig))
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    one = checked["1"]
    assert one["verdict"] == "fail", json.dumps(one)[:900]
    assert not any("never ran" in (g.get("error") or "") for g in one["gates"]), json.dumps(one["gates"])[:900]


@needs_namespace
def test_an_agent_that_kills_its_bwrap_is_not_started_again(tmp_path: Path) -> None:
    """The agent kills its process group (bwrap's monitor with it) once it
    has changed its worktree: it ran, so it is not started again in place
    (a second run on top of the first's work), and it ends failed."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo ran >> runs.txt; kill -KILL 0", code=None)
    inst = gp.json("status", "t")["run"]["instances"][0]
    log = Path(inst["log"]).read_text()
    assert "never ran" not in log, log[-800:]
    assert inst["status"] != "succeeded", json.dumps(inst)[:600]


# -- 2. the agent's worktree names a common dir of its own, whose config runs programs --

@needs_namespace
@pytest.mark.parametrize("pointer", ["commondir", "dot-git"])
def test_a_common_dir_of_the_agents_own_runs_nothing_of_git_parallels(tmp_path: Path, pointer: str) -> None:
    """The agent copies its git's common dir into its worktree, adds to its
    config every key that makes git run a program (fsmonitor, hooksPath,
    gpg.program with commit.gpgSign, filters, textconv, merge driver,
    diff.external, pager, editor, credential helper, sshCommand,
    alternateRefsCommand), names a filter/diff/merge driver for every path
    in ``.gitattributes`` and points its admin folder's ``commondir`` at that
    copy (or its worktree's ``.git`` file at a git dir of its own made
    the same way): git-parallel's own git (the leftovers commit, check,
    pick, merge) must run none of them."""
    repo, gp = project(tmp_path)
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {marks}/hit\ncat\n")
    evil.chmod(0o755)
    keys = ["[core]", f"\tfsmonitor = {evil}", f"\thooksPath = {marks}", f"\tpager = {evil}", f"\teditor = {evil}",
            f"\tsshCommand = {evil}", f"\talternateRefsCommand = {evil}", f"\taskPass = {evil}",
            "[commit]", "\tgpgSign = true", "[gpg]", f"\tprogram = {evil}", "[credential]", f"\thelper = !{evil}",
            '[filter "x"]', f"\tclean = {evil}", f"\tsmudge = {evil}", '[diff "x"]', f"\ttextconv = {evil}",
            '[merge "x"]', f"\tdriver = {evil}", "[diff]", f"\texternal = {evil}", ""]
    (tmp_path / "evilcfg").write_text("\n".join(keys))
    for hook in ("pre-commit", "post-commit", "post-merge", "reference-transaction", "post-checkout"):
        (marks / hook).write_text(f"#!/bin/sh\necho {hook} >> {marks}/hit\n")
        (marks / hook).chmod(0o755)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c",
       f"gd=$(git rev-parse --git-dir); c=$(cat $gd/commondir); {HONEST}; "
       "echo '* filter=x diff=x merge=x' > .gitattributes; mkdir .evil && cp -a $c/. .evil/ && "
       f"cat {tmp_path}/evilcfg >> .evil/config && "
       + ("printf '%s\\n' \"$PWD/.evil\" > $gd/commondir" if pointer == "commondir" else
          "cp -a $gd/. .evil2/ 2>/dev/null || (mkdir .evil2 && cp -a $gd/. .evil2/); "
          "printf '%s\\n' \"$PWD/.evil\" > .evil2/commondir; printf 'gitdir: %s\\n' \"$PWD/.evil2\" > .git")
       + "; echo more >> app.py",
       code=None)
    assert not (marks / "hit").exists(), (marks / "hit").read_text()
    gp("check", "t", code=None)
    gp("pick", "t", code=None)
    gp("merge", "t", code=None)
    assert not (marks / "hit").exists(), (marks / "hit").read_text()


# -- 3. what a gate reads beside the judged git view -------------------------------------

SCANNER = textwrap.dedent('''\
    import os, subprocess


    def add(a, b):
        return a - b


    def _scan():
        """Every readable file of the common dir and the project's folder
        (where the attempts' worktrees are) holding the sibling's code."""
        common = subprocess.run(['git', 'rev-parse', '--path-format=absolute', '--git-common-dir'],
                                capture_output=True, text=True).stdout.strip()
        for top in [common, os.path.dirname(os.path.dirname(common)), '/dev/shm', '/var/tmp']:
            for root, dirs, files in os.walk(top):
                if root.count('/') > 14:
                    dirs[:] = []
                for name in files:
                    try:
                        text = open(os.path.join(root, name), 'rb').read(1 << 20).decode(errors='replace')
                    except OSError:
                        continue
                    if 'return a + b' in text and '_scan' not in text:
                        return text[text.index('def add'):] if 'def add' in text else None
        return None


    if os.environ.get('GIT_PARALLEL_INSTANCE') == '1':
        _found = _scan()
        if _found:
            exec(_found)
    ''')


@needs_namespace
def test_a_gate_finds_no_copy_of_a_siblings_code_on_disk(tmp_path: Path) -> None:
    """The attempt's code walks every file it can read in the common dir
    (reflogs, FETCH_HEAD, ORIG_HEAD, the index, logs, the judged-git cache,
    worktree admin folders) and the project's folder (the worktrees', the
    scratch checkouts'), and ``/dev/shm``, ``/var/tmp``, for its sibling's
    code (whose agent also printed it to its log), and runs it."""
    repo, gp = project(tmp_path)
    _wrong_attempt(tmp_path, gp, SCANNER)
    (tmp_path / "attempt.py").unlink()  # (the harness's copy, not the attempt's)
    git(repo, "fetch", "-q", ".", "parallel/t/2")  # FETCH_HEAD names the sibling's tip
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt found its sibling's code on disk"


# -- 4. a sibling's sandbox setup made to fail ------------------------------------------
# An agent binding and unlinking sockets in a loop in its worktree, its admin
# folder and its TMPDIR failed no sibling's sandbox (those folders are hidden
# from the sibling, so never listed for covering): tried by hand, not kept as
# a test, since its sockets are seen by the sandboxes of every other test
# running beside it (another repository's), whose setups it made fail.


# -- 5. the attempt's own commit names its sibling's tip as a parent ------------------------

_BORROWER = textwrap.dedent('''\
    import subprocess


    def add(a, b):
        return a - b


    def _borrow():
        for rev in REVS:
            text = subprocess.run(['git', 'show', rev], capture_output=True, text=True).stdout
            if 'a + b' in text and '_borrow' not in text:
                return text
        return None


    _found = _borrow()
    if _found:
        exec(_found)
    ''')


def _borrower(revs: list[str]) -> str:
    """Attempt code that runs the first right ``add`` it finds at ``revs``."""
    return _BORROWER.replace("REVS", repr(revs))


PARENT_BORROWER = _borrower(["HEAD^2:app.py", "HEAD^1:app.py"])


@needs_namespace
def test_a_commit_naming_a_siblings_tip_as_parent_does_not_bring_it_into_the_view(tmp_path: Path) -> None:
    """The agent writes its commit by hand, with its base and its sibling's
    tip as parents (the sibling's tip given here; an agent learns it
    however it can, e.g. deterministic commits of an obvious fix): ``git
    hash-object -t commit --literally`` checks no parent.  The agent's view
    lacks that parent, but the run takes the tip from the shared store,
    where it is, and ``judged_view.make`` packs what the tip reaches beyond
    the history: the sibling's commit.  The wrong attempt runs the right
    code (``HEAD^2:app.py``) and passes; merged, it would land the sibling's
    commit in the history as well."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    tip = git(repo, "rev-parse", "parallel/t/2").strip()
    (tmp_path / "borrower.py").write_text(PARENT_BORROWER)
    forge = (f"cp {tmp_path / 'borrower.py'} app.py && git add -A && tree=$(git write-tree) && base=$(git rev-parse HEAD)"
             " && c=$(printf 'tree %s\\nparent %s\\nparent " + tip + "\\nauthor a <a@b> 1 +0000\\n"
             "committer a <a@b> 1 +0000\\n\\nx\\n' $tree $base | git hash-object -t commit -w --stdin --literally)"
             " && git update-ref HEAD $c")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", forge, code=None)
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked.get("1", {}).get("verdict") != "pass", "the wrong attempt passed with its sibling's commit as parent"


TREE_BORROWER = _borrower(["HEAD:sib/app.py", "HEAD~1:sib/app.py"])


@needs_namespace
def test_a_tree_entry_naming_a_siblings_tree_does_not_bring_it_into_the_checkout(tmp_path: Path) -> None:
    """The same with no parent: the agent's tree holds an entry ``sib``
    naming its sibling's root tree (``git mktree --missing``: its view lacks
    it); its worktree lacks ``sib/``, so the leftovers commit on top
    deletes it, but the judged view packs what the tip reaches, the forged
    commit's tree with it: ``git show HEAD~1:sib/app.py`` reads the
    sibling's code."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    tree = git(repo, "rev-parse", "parallel/t/2^{tree}").strip()
    (tmp_path / "borrower.py").write_text(TREE_BORROWER)
    forge = (f"cp {tmp_path / 'borrower.py'} app.py && git add -A && t=$(git write-tree) && "
             f"t2=$( (git ls-tree $t; printf '040000 tree {tree}\\tsib\\n') | git mktree --missing) && "
             "c=$(git commit-tree $t2 -p HEAD -m x) && git update-ref HEAD $c && git reset -q --hard 2>/dev/null; true")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", forge, code=None)
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked.get("1", {}).get("verdict") != "pass", "the wrong attempt passed with its sibling's tree"


@needs_namespace
def test_an_attempt_that_brings_back_an_old_file_of_the_history_is_taken_in(tmp_path: Path) -> None:
    """What the refusal above must let through: an attempt whose commit
    reaches objects of the history its own store lacks (git wrote no copy:
    its view held them), here a file put back as it was two commits ago,
    and a merge of a branch of the history."""
    repo, gp = project(tmp_path)
    (repo / "notes.txt").write_text("old\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "notes")
    (repo / "notes.txt").write_text("new\n")
    git(repo, "commit", "-qam", "notes again")
    git(repo, "branch", "side", "HEAD~1")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c",
       f"{HONEST} && git checkout HEAD~1 -- notes.txt && git commit -qam back && git merge -q --no-edit -s ours side")
    inst = gp.json("status", "t")["run"]["instances"][0]
    assert inst["status"] == "succeeded", json.dumps(inst)[:800] + Path(inst["log"]).read_text()[-800:]
    assert git(repo, "show", "parallel/t/1:notes.txt").strip() == "old"
    checked = _checked(gp)
    assert checked["1"]["verdict"] == "pass", json.dumps(checked["1"]["gates"])[:600]


@needs_namespace
def test_an_agent_cannot_point_its_branch_at_a_siblings_tip(tmp_path: Path) -> None:
    """The simplest form: the agent writes its sibling's tip into its own
    branch's ref file (its own refs folder is writable; ``git update-ref``
    would refuse, its view lacking the commit).  ``import_refs`` checked
    only that the shared store holds the commit: the attempt's branch was
    its sibling's work, with its leftovers committed on top."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    tip = git(repo, "rev-parse", "parallel/t/2").strip()
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"echo {tip} > \"$(git rev-parse --git-common-dir)/refs/heads/parallel/t/1\"", code=None)
    one = {i["id"]: i for i in gp.json("status", "t")["run"]["instances"]}["1"]
    reached = subprocess.run(["git", "merge-base", "--is-ancestor", tip, "parallel/t/1"], cwd=repo).returncode == 0
    assert not reached, "the attempt's branch holds its sibling's commit"
    assert one["status"] == "failed", json.dumps(one)[:600]
