"""The agent cannot touch what judges it: git-parallel's own git runs
nothing an agent configured (fsmonitor, hooks, includes, filters), what an
attempt may not change is snapshotted around it and restored, and where
the kernel has Landlock each attempt and each gate runs fenced."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from conftest import GP, git
from test_hostile import APP_BUGGY, APP_FIXED, HONEST, act, project


# The tamper check alone, without the Landlock fence (which would refuse the
# writes in the first place).
UNFENCED = {"GIT_PARALLEL_SANDBOX": "off"}
# The suite runs unfenced (conftest); the fence's own tests ask for it.
FENCED = {"GIT_PARALLEL_SANDBOX": "auto"}


def _status(gp: GP, task: str) -> dict[str, dict]:
    return {i["id"]: i for i in gp.json("status", task)["run"]["instances"]}


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_smudge_filter_cannot_land_a_failing_tree(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    good = tmp_path / "good.py"
    good.write_text(APP_FIXED)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    # The attempt keeps the bug, and asks git to write the fixed file
    # whenever app.py is checked out.
    smudge = (f"echo '# mine' >> app.py; common=$(git rev-parse --git-common-dir); "
              f"echo 'app.py filter=hp' >> \"$common/info/attributes\"; "
              f"git config filter.hp.smudge 'cat {good}; cat >/dev/null'")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", smudge, code=None, env=FENCED)
    result = gp.json("check", "t", code=None, env=FENCED)
    verdicts = {i["id"]: i["verdict"] for i in result["instances"]}
    assert verdicts.get("1") == "pass" and verdicts.get("2") != "pass", result
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    gp("merge", "t")
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()
    assert (repo / "app.py").read_text() == APP_FIXED


def _hijacks(tmp_path: Path) -> tuple[Path, str]:
    """Scripts that leave a marker when run, and an agent script that
    configures git to run them (and then leaves a change uncommitted)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = tmp_path / "evil"
    (evil / "hooks").mkdir(parents=True)
    for name in ("fsmonitor", "included", "post-checkout", "reference-transaction", "pre-merge-commit",
                 "hookspath-post-checkout", "hookspath-reference-transaction"):
        script = evil / name
        script.write_text(f"#!/bin/sh\ntouch {marks}/{name}\nexit 1\n")
        script.chmod(0o755)
    for hook in ("post-checkout", "reference-transaction"):
        (evil / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/hookspath-{hook}\n")
        (evil / "hooks" / hook).chmod(0o755)
    (evil / "include.cfg").write_text(f"[core]\n\tfsmonitor = {evil}/included\n")
    agent = (f"echo '# mine' >> app.py; printf '{APP_FIXED}' > app.py; common=$(git rev-parse --git-common-dir); "
             f"for h in post-checkout reference-transaction pre-merge-commit; do "
             f"cp {evil}/$h \"$common/hooks/$h\"; done; "
             f"git config --file \"$common/config\" core.fsmonitor {evil}/fsmonitor; "
             f"git config --file \"$common/config\" --add include.path {evil}/include.cfg; "
             f"git config --file \"$common/config\" core.hooksPath {evil}/hooks")
    return marks, agent


def test_nothing_an_agent_configures_runs_during_check_pick_or_merge(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    marks, agent = _hijacks(tmp_path)
    config_before = (repo / ".git" / "config").read_bytes()
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", agent, code=None, env=UNFENCED)
    # The hooks it wrote are gone, and so is what it put in the config.
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    hijacker = _status(gp, "t")["2"]
    assert hijacker["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in hijacker["error"]
    assert {"config", "hooks/post-checkout", "hooks/reference-transaction"} <= set(hijacker["tampered"])
    gp("check", "t", code=None)
    gp("pick", "t")
    gp("merge", "t")
    assert sorted(p.name for p in marks.iterdir()) == []
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()


FORGER = """\
echo '# mine' >> app.py && git commit -qam mine &&
git update-ref refs/heads/main HEAD &&
git update-ref "refs/parallel/evidence/$GIT_PARALLEL_RUN_ID/1/0" HEAD &&
git update-ref refs/notes/parallel HEAD
"""


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_refs_an_agent_moves_or_forges_are_restored_and_its_attempt_fails(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    base = git(repo, "rev-parse", "main")
    notes = git(repo, "rev-parse", "refs/notes/parallel")
    ran = gp("run", "t", "--instance", "2", "--", "sh", "-c", FORGER, code=1, env=UNFENCED)
    assert "PARALLEL_AGENT_TAMPERED" in ran.stdout, ran.stdout
    forger = _status(gp, "t")["2"]
    assert forger["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in forger["error"], forger
    run_id = gp.json("status", "t")["run"]["run_id"]
    assert sorted(forger["tampered"]) == sorted(["refs/heads/main", f"refs/parallel/evidence/{run_id}/1/0",
                                                 "refs/notes/parallel"])
    assert git(repo, "rev-parse", "main") == base
    # Restored, then the run's own notes commit went on top of it.
    assert git(repo, "rev-parse", "refs/notes/parallel^") == notes
    assert git(repo, "for-each-ref", "refs/parallel/evidence") == ""
    events = [json.loads(line) for line in Path(forger["events"]).read_text().splitlines()]
    [tampered] = [e for e in events if e["event"] == "engine_tampered"]
    assert tampered["code"] == "PARALLEL_AGENT_TAMPERED" and len(tampered["restored"]) == 3
    # Nothing it forged is used: the honest attempt is checked, picked and landed.
    result = gp.json("check", "t")
    assert [(i["id"], i["verdict"]) for i in result["instances"]] == [("1", "pass")]
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()


def test_a_user_committing_on_main_meanwhile_is_no_tampering(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    # The agent waits until the user has committed on main in the main worktree.
    mark = tmp_path / "committed"
    agent = f"while [ ! -e {mark} ]; do sleep 0.05; done; printf '{APP_FIXED}' > app.py"
    import subprocess

    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                              env=dict(os.environ, **UNFENCED))
    (repo / "notes.txt").write_text("mine\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "the user's own work")
    mark.write_text("")
    assert runner.wait(timeout=120) == 0
    assert _status(gp, "t")["1"]["status"] == "succeeded"
    assert git(repo, "log", "-1", "--format=%s", "main") == "the user's own work"


# -- the Landlock fence ----------------------------------------------------------------
from gitflow_parallel.proc import landlock  # noqa: E402


needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock (Linux 5.13+, enabled "
                                    "at boot); the fence cannot be shown here")

from gitflow_parallel.proc import namespace  # noqa: E402

# The sandbox's two forms: the namespace layer (bwrap) where the machine
# allows it, and Landlock alone, its fallback (GIT_PARALLEL_NAMESPACE=off).
LAYERS = [pytest.param("namespace", marks=pytest.mark.skipif(namespace.unavailable() is not None,
                                                             reason=f"no namespace layer: {namespace.unavailable()}")),
          pytest.param("landlock", marks=[needs_landlock, pytest.mark.slow])]


def fenced(layer: str) -> dict[str, str]:
    return {**FENCED, "GIT_PARALLEL_NAMESPACE": "on" if layer == "namespace" else "off"}


def refusals(text: str) -> int:
    """How often a write or read was refused, as either layer says it: the
    namespace's read-only mounts and hidden folders, or Landlock's EACCES."""
    return sum(text.count(m) for m in ("Permission denied", "Read-only file system", "No such file or directory"))


def _events(gp: GP, task: str, inst: str) -> list[dict]:
    path = Path(_status(gp, task)[inst]["events"])
    return [json.loads(line) for line in path.read_text().splitlines()]


HONEST_GIT = """\
set -e
echo one > a.txt && git add a.txt && git commit -qm one
echo two >> a.txt && git commit -qa --amend -m one-amended
echo three > b.txt && git add b.txt && git commit -qm three && git reset -q --hard HEAD~1
git switch -qc "$(git branch --show-current)+wip" && echo wip > w.txt && git add w.txt && git commit -qm wip
git switch -q -
git switch -qc "$(git branch --show-current)+gone" && git switch -q - && git branch -qD "$(git branch --show-current)+gone"
test -z "$(git stash list)"
echo stashed > s.txt && git add s.txt && git stash push -qm mine && test ! -e s.txt
echo "stashes: $(git stash list | wc -l)"
git stash pop -q && test -f s.txt && git add s.txt && git commit -qm popped
"{py}" -m pip install -q --no-index --target vendor "{wheel}"
mkdir jspkg && echo '{{"name": "jspkg", "version": "1.0.0"}}' > jspkg/package.json
npm install --offline --no-audit --no-fund ./jspkg > /dev/null
test -f vendor/tinypkg.py && test -f node_modules/jspkg/package.json
rm -rf jspkg && echo 'vendor/' > .gitignore && echo 'node_modules/' >> .gitignore
echo "TMPDIR=$TMPDIR"
"""


@pytest.mark.parametrize("layer", LAYERS)
def test_an_honest_agent_works_as_usual_inside_the_fence(tmp_path: Path, layer: str) -> None:
    import sys

    import zipfile

    repo, gp = project(tmp_path)
    # The user's own stash, which no agent may see, pop or drop.
    (repo / "app.py").write_text("user's work in progress\n")
    git(repo, "stash", "push", "-q", "-m", "the user's")
    users = git(repo, "stash", "list", "--format=%H %gs")
    wheel = tmp_path / "tinypkg-1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tinypkg.py", "X = 1\n")
        zf.writestr("tinypkg-1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1\n")
        zf.writestr("tinypkg-1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n")
        zf.writestr("tinypkg-1.dist-info/RECORD", "")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST_GIT.format(py=sys.executable, wheel=wheel), env=fenced(layer))
    inst = _status(gp, "t")["1"]
    assert inst["status"] == "succeeded", Path(inst["log"]).read_text()
    [dispatched] = [e for e in _events(gp, "t", "1") if e["event"] == "engine_dispatched"]
    assert dispatched["sandbox"] == layer and dispatched["network"] == "on"
    assert ("pid" in dispatched["layers"]) == (layer == "namespace")
    log = Path(inst["log"]).read_text()
    tmp = log.split("TMPDIR=")[1].split()[0]
    assert "git-parallel-agent-" in tmp and not Path(tmp).exists()  # private, and removed after
    subjects = git(repo, "log", "--format=%s", "parallel/t/1").splitlines()
    assert subjects[1:3] == ["popped", "one-amended"], subjects  # under the leftovers commit
    # A branch under its own prefix is allowed.
    assert git(repo, "log", "-1", "--format=%s", "parallel/t/1+wip") == "wip"
    assert (repo / ".git" / "packed-refs").exists() is False or "parallel/t/1" not in (repo / ".git" / "packed-refs").read_text()
    # Deleting a branch under its own prefix works; its stash was its own
    # (one entry: the user's was not there) and is gone with the attempt.
    assert git(repo, "branch", "--list", "parallel/t/1+gone") == ""
    assert "stashes: 1" in log
    assert git(repo, "stash", "list", "--format=%H %gs") == users
    worktree = Path(inst["worktree"])
    assert Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir")) == (repo / ".git").resolve()
    view = Path(git(worktree, "rev-parse", "--absolute-git-dir")) / "parallel-common"
    assert not (view / "refs" / "stash").exists() and not (view / "logs" / "refs" / "stash").exists()


@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_writing_outside_its_worktree_gets_eacces(tmp_path: Path, layer: str) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    # Its `git config` lands on its own copy of the config (git/shadow); the
    # shared file itself is out of reach.
    agent = (f"echo x >> {repo}/.git/config; echo \"config: $?\"; git config user.name mine; "
             f"echo hacked > {repo}/app.py; echo \"main: $?\"; "
             "cat ../2/app.py; echo \"sibling: $?\"; "
             f"printf '{APP_FIXED}' > app.py")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, env=fenced(layer))
    log = Path(_status(gp, "t")["1"]["log"]).read_text()
    assert refusals(log) == 3 and "config: 2" in log and "main: 2" in log and "sibling: 1" in log, log
    assert (repo / "app.py").read_text() == APP_BUGGY and "mine" not in (repo / ".git" / "config").read_text()
    [dispatched] = [e for e in _events(gp, "t", "1") if e["event"] == "engine_dispatched"]
    assert dispatched["sandbox"] == layer


@pytest.mark.parametrize("layer", LAYERS)
def test_network_off_blocks_a_tcp_connect(tmp_path: Path, layer: str) -> None:
    import socket
    import sys

    if layer == "landlock" and landlock.abi() < 4:
        pytest.skip("Landlock ABI < 4 has no TCP rules")
    from test_hostile import CONFIG

    repo, gp = project(tmp_path, CONFIG + "sandbox_network: off\n")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')"
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", sys.executable, "-c", connect, code=1, env=fenced(layer))
    assert "(failed or aborted: 1)" in ran.stdout, ran.stdout
    log = Path(_status(gp, "t")["1"]["log"]).read_text()
    # Landlock refuses the connect; in a network namespace of its own nothing listens there.
    assert ("PermissionError" if layer == "landlock" else "ConnectionRefusedError") in log and "connected" not in log
    [dispatched] = [e for e in _events(gp, "t", "1") if e["event"] == "engine_dispatched"]
    assert dispatched["network"] == "off"
    listener.close()


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_gate_cannot_read_the_main_worktree(tmp_path: Path, layer: str) -> None:
    # Three instances checked side by side, their fences built from one set
    # of read rules (judge/check shares it): each gate still reads its own
    # checkout only, neither the main worktree nor an instance's worktree,
    # and writes nothing under .git.
    sibling = tmp_path / "repo.parallel" / "t" / "1" / "app.py"
    config = textwrap.dedent(f"""\
        gates:
          - name: local
            run: [sh, -c, "cat app.py > /dev/null"]
          - name: main-worktree
            mode: observe
            run: [cat, "{tmp_path / 'repo' / 'app.py'}"]
          - name: sibling
            mode: observe
            run: [cat, "{sibling}"]
          - name: git-config
            mode: observe
            run: [sh, -c, "echo '[x]' >> {tmp_path / 'repo' / '.git' / 'config'}"]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "3")
    for inst in ("1", "2", "3"):
        act(gp, "t", inst, HONEST)
    assert sibling.is_file()
    checked = gp.json("check", "t", env=fenced(layer))["instances"]
    assert [i["id"] for i in checked] == ["1", "2", "3"]
    for inst in checked:
        gates = {g["name"]: g for g in inst["gates"]}
        assert gates["local"]["passed"], inst["id"]
        for denied in ("main-worktree", "sibling", "git-config"):
            assert not gates[denied]["passed"], (inst["id"], denied)
            assert refusals(Path(gates[denied]["log"]).read_text()), (inst["id"], denied)
        pack = json.loads(Path(inst["evidence"]["path"]).read_text())
        assert pack["fence"] == layer
    assert "[x]" not in (repo / ".git" / "config").read_text()


@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_cannot_read_the_hidden_tests_nor_the_scratch_checkouts(tmp_path: Path, layer: str) -> None:
    hidden = tmp_path / "hidden" / "tests"
    hidden.mkdir(parents=True)
    (hidden / "test_secret.py").write_text("SECRET = 1\n")
    config = ("gates:\n  - name: hidden\n    run: [sh, -c, 'true']\n"
              f"    hidden: {hidden.parent}\n")
    repo, gp = project(tmp_path, config)
    scratch = tmp_path / "repo.parallel" / ".judged" / "scratch+1"
    scratch.mkdir(parents=True)
    (scratch / "test_secret.py").write_text("SECRET = 2\n")  # as while a hidden gate runs
    gp("spawn", "t", "-n", "1")
    # Folder listings stay open (Landlock grants them from the root down);
    # no file beneath can be read.
    agent = (f"cat {hidden}/test_secret.py; echo \"hidden: $?\"; "
             f"cat {scratch}/test_secret.py; echo \"scratch: $?\"")
    gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
    log = Path(_status(gp, "t")["1"]["log"]).read_text()
    assert "SECRET" not in log and "hidden: 1" in log and "scratch: 1" in log, log


@needs_landlock
def test_sandbox_write_lets_an_agent_write_its_tools_folders_and_nothing_more(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".other").mkdir(parents=True)
    repo, gp = project(tmp_path, "sandbox_write: [~/.toolcache/sub, ~/.claude]\n")
    gp("spawn", "t", "-n", "1")
    agent = ("echo cached > ~/.toolcache/sub/x; echo \"cache: $?\"; echo s > ~/.claude/settings; "
             "echo \"claude: $?\"; echo no > ~/.other/x; echo \"other: $?\"")
    gp("run", "t", "--", "sh", "-c", agent, env={**FENCED, "HOME": str(home)})
    log = Path(_status(gp, "t")["1"]["log"]).read_text()
    assert "cache: 0" in log and "claude: 0" in log and "other: 2" in log, log
    assert (home / ".toolcache" / "sub" / "x").read_text() == "cached\n"  # made for it, missing before
    [dispatched] = [e for e in _events(gp, "t", "1") if e["event"] == "engine_dispatched"]
    assert dispatched["sandbox_write"] == [str((home / ".toolcache" / "sub").resolve()), str((home / ".claude").resolve())]
    assert gp.json("status", "t")["run"]["config"]["sandbox_write"] == ["~/.toolcache/sub", "~/.claude"]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_sandbox_write_refuses_relative_paths_and_the_repository(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, "sandbox_write: [.cache/pip]\n")
    out = gp("spawn", "t", "-n", "1", code=1)
    assert "error[PARALLEL_SANDBOX_WRITE_REFUSED]" in out.stderr and "'.cache/pip' is relative" in out.stderr
    for where, said in ((repo / ".git" / "info", "is inside the repository's git dir"),
                        (tmp_path, "holds the repository's git dir")):
        (repo / ".gitparallel.yaml").write_text(f"sandbox_write: ['{where}']\n")
        git(repo, "commit", "-qam", f"sandbox_write {where}")
        gp("spawn", "t", "-n", "1")
        out = gp("run", "t", "--", "sh", "-c", "touch ran", code=1, env=FENCED)
        assert "error[PARALLEL_SANDBOX_WRITE_REFUSED]" in out.stderr and said in out.stderr, out.stderr
        assert _status(gp, "t")["1"]["status"] == "pending"  # nothing ran
        gp("abort", "t")
        gp("cleanup", "t")


@needs_landlock
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_the_judge_runs_fenced_like_a_gate(tmp_path: Path) -> None:
    from test_selection import build

    judge = textwrap.dedent(f"""
        import os, pathlib, sys
        for target in ({str(tmp_path / 'one' / 'repo' / 'impl.py')!r}, os.environ["GIT_PARALLEL_JUDGE_A"] + "/note"):
            try:
                pathlib.Path(target).write_text("judge was here")
                print("wrote", target)
            except OSError:  # EACCES under Landlock, EROFS in the namespace
                print("denied", target)
        print("A")
    """)
    gp = build(tmp_path / "one", {"1": "square_mul", "2": "square_pow"}, selection="tournament", probe=False,
               judge=judge)
    gp("check", "t")
    out = gp.json("pick", "t", env=FENCED)["picks"][0]
    (match,) = [m for m in out["tournament"]["matches"] if m["b"] is not None]
    said = match["judge"]["output"]
    assert "denied " + str(tmp_path / "one" / "repo" / "impl.py") in said and "wrote " in said, said


@needs_landlock
def test_a_sibling_that_detached_its_head_stays_unreadable(tmp_path: Path) -> None:
    # Which worktrees are an instance's is worked out from their HEADs; an
    # agent that detaches its own must not make its worktree readable to
    # the attempts that start after it, in this run or a later one.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent = ('if [ "$GIT_PARALLEL_INSTANCE" = 1 ]; then git checkout -q --detach; echo answer > secret.txt; '
             'else cat ../1/secret.txt; echo "sibling: $?"; fi')
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, code=None, env=FENCED)
    assert git(Path(_status(gp, "t")["1"]["worktree"]), "rev-parse", "--abbrev-ref", "HEAD") == "HEAD"
    gp("run", "t", "--instance", "2", "--", "sh", "-c", agent, code=None, env=FENCED)
    log = Path(_status(gp, "t")["2"]["log"]).read_text()
    assert "sibling: 1" in log and "answer" not in log, log


@needs_landlock
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_under_tmux_the_pane_puts_the_agent_in_the_same_fence(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))  # a private tmux server
    env = {**FENCED, "TMUX_TMPDIR": str(sock), "TMUX": "", "TMUX_PANE": ""}
    agent = (f"echo hacked > {repo}/app.py; echo \"main: $?\" > seen.txt; "
             "cat ../2/app.py > /dev/null; echo \"sibling: $?\" >> seen.txt; "
             "echo \"tmp: $TMPDIR\" >> seen.txt; echo mine > mine.txt; git add mine.txt; git commit -qm mine; "
             "echo \"commit: $?\" >> seen.txt; "
             # The server runs unfenced: a job it ran for the agent would outlive the run.
             f"tmux run-shell -b 'sleep 1; touch {tmp_path}/escaped'; echo \"run-shell: $?\" >> seen.txt; "
             f"tmux new-window -d 'touch {tmp_path}/escaped'; echo \"new-window: $?\" >> seen.txt")
    try:
        # (--allow-tmux-escape: refused under Landlock alone without it; nothing under the namespace layer)
        gp("run", "t", "--instance", "1", "--tmux", "--allow-tmux-escape", "--", "sh", "-c", agent, env=env, timeout=60)
        # Its tmux server is out of its sight: it cannot run anything there.
        time.sleep(1.5)  # what a run-shell -b job would have needed to show
    finally:
        subprocess.run(["tmux", "kill-server"], env={**os.environ, "TMUX_TMPDIR": str(sock)}, capture_output=True)
        shutil.rmtree(sock, ignore_errors=True)
    seen = git(repo, "show", "parallel/t/1:seen.txt")
    assert "main: 2" in seen and "sibling: 1" in seen and "git-parallel-agent-" in seen and "commit: 0" in seen, seen
    assert "run-shell: 0" not in seen and "new-window: 0" not in seen and "run-shell: " in seen, seen
    assert not (tmp_path / "escaped").exists()
    assert (repo / "app.py").read_text() == APP_BUGGY
    [dispatched] = [e for e in _events(gp, "t", "1") if e["event"] == "engine_dispatched"]
    assert dispatched["sandbox"] == ("landlock" if namespace.unavailable() else "namespace")


def test_an_agent_that_moves_or_deletes_an_idle_siblings_branch_fails_and_it_is_put_back(tmp_path: Path) -> None:
    # The fence lets an agent write its task's branch folder (a branch of
    # its own is a new file there), so the runner judges what moved in it:
    # the branch of an instance that was not running, away from its recorded head.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "3")
    act(gp, "t", "1", HONEST)
    honest = git(repo, "rev-parse", "parallel/t/1")
    pending = git(repo, "rev-parse", "parallel/t/3")
    agent = ("echo '# mine' >> app.py && git commit -qam wrong && git update-ref refs/heads/parallel/t/1 HEAD && "
             "git update-ref -d refs/heads/parallel/t/3")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", agent, code=None, env=UNFENCED)
    inst = _status(gp, "t")["2"]
    assert inst["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in inst["error"], inst
    assert "refs/heads/parallel/t/1" in inst["error"] and "refs/heads/parallel/t/3" in inst["error"]
    assert git(repo, "rev-parse", "parallel/t/1") == honest and git(repo, "rev-parse", "parallel/t/3") == pending


def test_siblings_run_by_another_runner_meanwhile_are_nobodys_tampering(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "3")
    go = tmp_path / "go"
    slow = (f"while [ ! -e {go} ]; do sleep 0.05; done; echo two > two.txt && git add two.txt && "
            "git commit -qm two")
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--instance", "2", "--", "sh", "-c", slow], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while _status(gp, "t")["2"]["status"] != "running":
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        # Another runner's attempt starts, commits and ends while 2 runs.
        gp("run", "t", "--instance", "3", "--", "sh", "-c", "echo 3 > 3.txt && git add 3.txt && git commit -qm 3")
        git(repo, "update-ref", "refs/heads/parallel/t/1", git(repo, "rev-parse", "parallel/t/1"))  # unchanged
    finally:
        go.write_text("")
        assert runner.wait(timeout=60) == 0
    states = {k: (v["status"], v.get("error")) for k, v in _status(gp, "t").items()}
    assert states["2"] == ("succeeded", None) and states["3"] == ("succeeded", None), states


def test_a_checks_threads_share_one_set_of_read_rules_opened_once(tmp_path: Path, monkeypatch) -> None:
    # `check` judges its instances side by side with one Reads: the rules
    # for a set of denied folders are worked out (and their folders opened)
    # once, however many threads ask at the same moment.
    from concurrent.futures import ThreadPoolExecutor

    from gitflow_parallel.proc import landlock, sandbox

    asked = []
    real = landlock.read_rules

    def slow(key):
        asked.append(key)
        time.sleep(0.05)  # long enough for every thread to arrive meanwhile
        return real(key)

    monkeypatch.setattr(landlock, "read_rules", slow)
    denied = [tmp_path / "one", tmp_path / "two"]
    for folder in denied:
        folder.mkdir()
    (tmp_path / "open").mkdir()
    reads = sandbox.Reads()
    try:
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: reads.rules(denied), range(4)))
        assert len(asked) == 1
        assert all(answer is answers[0] for answer in answers) and answers[0]
    finally:
        reads.close()
