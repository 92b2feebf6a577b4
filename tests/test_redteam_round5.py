"""Red team, round five: the git a judged command sees (``git/judged_view``)
and what else of the common dir a gate reads under the namespace layer.

Each test runs one route as the agent or as the attempt's committed code
and asserts the promise, so a working attack fails the test.  Routes that
still work are marked ``xfail(strict=True)`` with the fix they need.

Found working on the code this round started from (d0237c1), fixed since:
remote-tracking copies of attempt branches and ``refs/parallel-remotes/``
packed as history (1); the shared Git LFS store readable beside the view
(2); the history cache keeping a deleted ref's attempt commit (4); the
distinguish generator's candidates in ``/tmp`` while another check ran
(5); a partial clone's view fetching, and failing offline (6); a
``packed-refs`` made during check failing the next gate (9); a retried
attempt of ``run --until-pass`` reading another track's commits (7, fixed
after the round: an agent's git reads the history and its own branch's
commits, ``git/judged_view.for_agent``); a gate reading a sibling's
agent session kept in a ``sandbox_write`` folder (10, fixed after the
round: judged commands see none of those folders but a ``setup.stores``
store).  Defended: a commit with a missing parent (3), a nested
user namespace unmounting the view (8), files of the attempt judged before
left in the pooled checkout (11)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git
from hostile import needs_namespace
from test_hostile import APP_FIXED, HONEST, project
from test_judged_git_view import BORROWER

pytestmark = pytest.mark.slow


def _checked(gp, task: str = "t") -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {i["id"]: i for i in gp.json("check", task, code=None)["instances"]}


def _honest_and_borrower(tmp_path: Path, gp, borrower: str) -> None:  # type: ignore[no-untyped-def]
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    (tmp_path / "borrower.py").write_text(borrower)
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'borrower.py'} app.py && git commit -qam borrowed")


# -- 1. a remote-tracking ref of an attempt branch is "history" ----------------------

@needs_namespace
def test_a_remote_tracking_copy_of_a_siblings_branch_is_not_in_the_view(tmp_path: Path) -> None:
    """``collect`` (and a worker, and any ``git fetch`` of a remote the
    attempts were published to) keeps attempt branches at
    ``refs/remotes/<remote>/parallel/...`` and claims and evidence at
    ``refs/parallel-remotes/...``: neither was hidden by name, so
    the judged view packed the sibling's commit as history."""
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "refs/heads/parallel/t/2:refs/heads/parallel/t/2")
    git(repo, "fetch", "-q", "origin")
    assert git(repo, "rev-parse", "origin/parallel/t/2").strip() == git(repo, "rev-parse", "parallel/t/2").strip()
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (remote-tracking ref)"


@needs_namespace
def test_a_tracking_ref_under_parallel_remotes_is_not_in_the_view(tmp_path: Path) -> None:
    """The same through ``refs/parallel-remotes/<remote>/...`` (where
    ``collect`` keeps claims, whose commits carry the attempt's tip as a
    parent, and evidence)."""
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    tip = git(repo, "rev-parse", "parallel/t/2").strip()
    git(repo, "update-ref", "refs/parallel-remotes/origin/claims/run/2", tip)
    checked = _checked(gp)
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (parallel-remotes)"


# -- 2. the shared Git LFS store beside the view ---------------------------------------

LFS_BORROWER = textwrap.dedent("""\
    import os, subprocess


    def add(a, b):
        return a - b


    def _borrow():
        common = subprocess.run(['git', 'rev-parse', '--path-format=absolute', '--git-common-dir'],
                                capture_output=True, text=True).stdout.strip()
        for root, _, files in os.walk(os.path.join(common, 'lfs')):
            for name in files:
                try:
                    text = open(os.path.join(root, name)).read()
                except (OSError, UnicodeDecodeError):
                    continue
                if 'a + b' in text and 'def add' in text:
                    return text
        return None


    _found = _borrow()
    if _found:
        exec(_found)
    """)


@needs_namespace
def test_a_gate_cannot_read_a_siblings_lfs_objects(tmp_path: Path) -> None:
    """The view lays packs over ``<common>/objects`` but leaves
    ``<common>/lfs/objects`` as it is: every attempt's LFS objects are taken
    into it when the attempt ends, so the attempt's code found its sibling's
    LFS-stored work there (here the fix itself, as an LFS object)."""
    repo, gp = project(tmp_path)
    body = APP_FIXED.encode()
    oid = hashlib.sha256(body).hexdigest()
    (tmp_path / "obj").write_bytes(body)
    pointer = f"version https://git-lfs.github.com/spec/v1\\noid sha256:{oid}\\nsize {len(body)}\\n"
    store = f'"$(git rev-parse --path-format=absolute --git-common-dir)/lfs/objects/{oid[:2]}/{oid[2:4]}"'
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c",
       f"{HONEST} && mkdir -p {store} && cp {tmp_path / 'obj'} {store}/{oid} && printf '{pointer}' > fix.bin"
       " && git add -A && git commit -qm right")
    assert (repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).is_file(), "not taken in"
    (tmp_path / "borrower.py").write_text(LFS_BORROWER)
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'borrower.py'} app.py && git commit -qam borrowed")
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's LFS object"


# -- 3. a commit whose parent is not in the store --------------------------------------

@needs_namespace
def test_a_commit_with_a_missing_parent_fails_its_attempt_not_check(tmp_path: Path) -> None:
    """The agent writes a commit naming a parent no store holds (``git
    hash-object -t commit`` checks the syntax alone): the judged view's
    ``pack-objects --revs`` of it would fail.  Defended before that: the
    run fails the attempt (its leftovers commit cannot walk the parent), and
    ``check`` judges the sibling as usual, with no internal error."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    forge = ("tree=$(git write-tree) && c=$(printf 'tree %s\\nparent " + "1" * 40 + "\\nauthor a <a@b> 1 +0000\\n"
             "committer a <a@b> 1 +0000\\n\\nx\\n' $tree | git hash-object -t commit -w --stdin) && "
             "git update-ref HEAD $c")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"{HONEST} && git add -A && {forge}", code=None)
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode != 3 and "internal error" not in proc.stderr, proc.stderr[-1500:]
    checked = {i["id"]: i for i in json.loads(proc.stdout)["instances"]}
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"])[:600]
    assert checked.get("1", {}).get("verdict") != "pass"


# -- 4. the history cache keeps what a deleted ref reached -----------------------------

@needs_namespace
def test_the_history_cache_forgets_a_deleted_branch(tmp_path: Path) -> None:
    """A branch of the user's at a sibling's commit (``git branch look
    parallel/t/2`` to look at it) is history while it exists; once deleted,
    the next view must not hold its objects.  ``_history_pack`` started a
    new tip set from the packs of the last one whatever the old tips were,
    so a deleted (or rewound) ref's objects stayed in every later view."""
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    git(repo, "branch", "look", "parallel/t/2")
    _checked(gp)  # judged while "look" is history: by design, the borrower finds it
    git(repo, "branch", "-D", "look")
    proc = gp("check", "t", "--again", "--json", code=None)
    checked = {i["id"]: i for i in json.loads(proc.stdout)["instances"]}
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "a deleted branch's objects stayed in the judged view"


# -- 5. distinguish's candidates folder, in /tmp, while another check runs ---------------

DISTINGUISH_CONFIG = textwrap.dedent("""\
    max_total: 16
    protect: [tests/**]
    selection: differential
    distinguish:
      command: [sh, -c, 'sleep 4; echo x > "$GIT_PARALLEL_DISTINGUISH_OUT/in"']
      run: [sh, -c, 'cat app.py']
      timeout: 60
    gates:
      - name: tests
        run: [./test.sh]
    """)

POLLER = textwrap.dedent("""\
    import glob, os, time


    def add(a, b):
        return a - b


    def _borrow():
        end = time.time() + 12
        while time.time() < end:
            for path in glob.glob('/tmp/git-parallel-distinguish-*/*/files/app.py'):
                try:
                    text = open(path).read()
                except OSError:
                    continue
                if 'a + b' in text and '_borrow' not in text:
                    return text
            time.sleep(0.05)
        return None


    if os.environ.get('GIT_PARALLEL_INSTANCE') == '1':
        _found = _borrow()
        if _found:
            exec(_found)
    """)


@needs_namespace
def test_a_gate_cannot_read_the_candidates_laid_out_for_distinguish(tmp_path: Path) -> None:
    """``pick`` runs the distinguish generator outside the project lock with
    every candidate's changed files in ``/tmp/git-parallel-distinguish-*``:
    removed before any candidate's code runs, but ``/tmp`` is readable by
    every sandboxed command, and a ``check`` of another attempt (the same
    task's, another task's) may run meanwhile: its code reads them."""
    repo, gp = project(tmp_path, DISTINGUISH_CONFIG)
    gp("spawn", "t", "-n", "3")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    gp("run", "t", "--instance", "3", "--", "sh", "-c", f"{HONEST} && echo '# three' >> app.py && git commit -qam right")
    (tmp_path / "poller.py").write_text(POLLER)
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"cp {tmp_path / 'poller.py'} app.py && git commit -qam poll")
    first = _checked(gp)
    assert [first[i]["verdict"] for i in "123"] == ["fail", "pass", "pass"]
    picking = subprocess.Popen([sys.executable, "-m", "gitflow_parallel", "pick", "t"], cwd=repo,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        again = gp.json("check", "t", "--instance", "1", "--again", code=None, own_process=True)["instances"]
    finally:
        out, err = picking.communicate(timeout=120)
    # The pick itself refuses (PARALLEL_RUN_REVISION_CONFLICT: the check moved
    # the record meanwhile); its generator ran all the same.
    assert [i["verdict"] for i in again if i["id"] == "1"] == ["fail"], "the wrong attempt read the candidates' files"


# -- 6. a partial clone: the view's pack-objects fetches, or fails offline -------------

@needs_namespace
def test_check_in_a_partial_clone_whose_remote_is_unreachable(tmp_path: Path) -> None:
    """In a partial clone (``--filter=blob:none``) the history's old blobs
    are promised, not held.  ``pack-objects --revs`` for the view fetched
    every one of them from the promisor remote (network, disk, time at each
    new history), and with the remote unreachable it failed: ``check``
    reported an internal error (``INTERNAL``) for every attempt."""
    src, _ = project(tmp_path)
    (src / "notes.txt").write_text("old\n")
    git(src, "add", "notes.txt")
    git(src, "commit", "-qm", "old notes")
    (src / "notes.txt").write_text("new\n")
    git(src, "commit", "-qam", "new notes")
    git(src, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--filter=blob:none", f"file://{src}", str(clone))
    src.rename(tmp_path / "gone")
    gp = GP(clone)
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam right", code=None)
    assert ran.returncode == 0, ran.stdout[-1200:] + ran.stderr[-1200:]
    proc = gp("check", "t", "--json", code=None)
    out = json.loads(proc.stdout)
    assert proc.returncode != 3 and not out["errors"], json.dumps(out["errors"])[:1200]
    assert out["instances"][0]["verdict"] == "pass", proc.stdout[-1200:]


# -- 7. a retried attempt, within the same `run --until-pass`, reads another track's ---

COPIER = textwrap.dedent("""\
    if [ "$GIT_PARALLEL_TRACK" = a ]; then
        printf 'def add(a, b):\\n    return a + b\\n' > app.py && git commit -qam right
    elif [ "$GIT_PARALLEL_ATTEMPT" != 0 ]; then
        git cat-file --batch-all-objects --batch-check | while read oid kind size; do
            if [ "$kind" = blob ] && git cat-file blob "$oid" | grep -q 'a + b'; then
                git cat-file blob "$oid" > app.py && echo FOUND
            fi
        done
        git commit -qam copied || true
    fi
    """)


@needs_namespace
def test_a_retried_attempt_cannot_read_another_tracks_commits(tmp_path: Path) -> None:
    """``run --until-pass`` checks every attempt, then retries a track with
    no passing one, in the same ``run``.  By then every first attempt's
    objects are in the shared store, which the retried agent's git reads
    through its view's alternates: track b's retry finds track a's fix by a
    scan of the store and passes with it."""
    repo, gp = project(tmp_path)
    (tmp_path / "copier.sh").write_text(COPIER)
    gp("spawn", "t", "--track", "a", "--track", "b", "-n", "1")
    gp("run", "t", "--until-pass", "2", "--", "sh", str(tmp_path / "copier.sh"), code=None)
    rows = {i["track"]: i for i in gp.json("status", "t")["run"]["instances"]}
    assert rows["a"]["verdict"] == "pass"
    assert rows["b"]["verdict"] != "pass", "track b's retry passed with track a's code"


def test_the_history_cache_is_built_afresh_only_when_it_held_an_attempts_commit(tmp_path: Path) -> None:
    """The unit under test 4: a deleted branch of the user's own work keeps
    the cache incremental (a repack of the whole history costs minutes in a
    large repository); one at an attempt's commit makes it afresh, without
    that commit."""
    from conftest import make_repo

    from gitflow_parallel.git import judged_view

    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    state = tmp_path / "state"

    def packs() -> tuple[int, set[str]]:
        view = judged_view.make(repo / ".git", state, None)
        assert view is not None
        names = list((view.objects / "pack").glob("*.pack"))
        env = {"GIT_OBJECT_DIRECTORY": str(view.objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""}
        out = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"], cwd=repo,
                             env={**os.environ, **env}, capture_output=True, text=True, check=True)
        view.remove()
        return len(names), set(out.stdout.split())

    git(repo, "switch", "-q", "-c", "feature")
    (repo / "f.txt").write_text("feature\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-qm", "feature")
    git(repo, "switch", "-q", "main")
    assert packs()[0] == 1
    git(repo, "branch", "-D", "feature")
    git(repo, "commit", "-q", "--allow-empty", "-m", "more")
    assert packs()[0] == 2  # incremental: the user's deleted branch is history that was

    git(repo, "switch", "-q", "-c", "parallel/t/1")
    (repo / "a.txt").write_text("attempt\n")
    git(repo, "commit", "-qam", "attempt")
    attempt = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "switch", "-q", "main")
    git(repo, "branch", "look", attempt)
    assert attempt in packs()[1]
    git(repo, "branch", "-D", "look")
    git(repo, "commit", "-q", "--allow-empty", "-m", "after")  # a new set of tips, started from the last
    count, held = packs()
    assert attempt not in held
    assert count == 1


# -- 8. a nested user namespace to lift the view off the store --------------------------

UNMOUNTER = textwrap.dedent("""\
    import subprocess


    def add(a, b):
        return a - b


    def _borrow():
        common = subprocess.run(['git', 'rev-parse', '--path-format=absolute', '--git-common-dir'],
                                capture_output=True, text=True).stdout.strip()
        script = ('for p in objects refs packed-refs worktrees; do umount -l "$0/$p"; done; '
                  'git show parallel/t/2:app.py')
        for argv in (['unshare', '-Um', 'sh', '-c', script, common],
                     ['unshare', '-Urm', 'sh', '-c', script, common]):
            text = subprocess.run(argv, capture_output=True, text=True).stdout
            if 'a + b' in text:
                return text
        return None


    _found = _borrow()
    if _found:
        exec(_found)
    """)


@needs_namespace
def test_a_nested_user_namespace_cannot_unmount_the_view(tmp_path: Path) -> None:
    """The attempt's code makes a user and mount namespace of its own
    (``unshare -Um``: every capability there) and unmounts what bwrap laid
    over ``objects/``, ``refs/``, ``packed-refs`` and ``worktrees/``.
    Defended: mounts inherited into a less privileged namespace are locked
    (``umount`` gives EINVAL) and ``unshare -r`` cannot write a uid map."""
    _, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, UNMOUNTER)
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt lifted the view off the store"


# -- 9. packed-refs made while a check runs ------------------------------------------------

TWO_GATES = textwrap.dedent("""\
    max_total: 16
    protect: [tests/**]
    gates:
      - name: wait
        run: [sh, -c, 'sleep 3']
      - name: tests
        run: [./test.sh]
    """)


@needs_namespace
def test_a_branch_deleted_during_check_does_not_fail_the_next_gate(tmp_path: Path) -> None:
    """A repository with no ``packed-refs`` gets a view with loose refs and
    no ``packed-refs`` file; ``git branch -D`` (git 2.39) makes an empty
    ``<common>/packed-refs``, and every later fence of the same judging
    binds the view's ``packed-refs`` over it: a source bwrap cannot find, so
    the honest attempt's next gate could not start."""
    import threading

    repo, gp = project(tmp_path, TWO_GATES)
    assert not (repo / ".git" / "packed-refs").exists()
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    got: dict[str, object] = {}
    checking = threading.Thread(target=lambda: got.update(gp.json("check", "t", code=None)))
    checking.start()
    import time

    time.sleep(1.5)  # the first gate sleeps 3 s
    git(repo, "branch", "scratch-work")
    git(repo, "branch", "-D", "scratch-work")
    checking.join(timeout=120)
    assert (repo / ".git" / "packed-refs").exists()
    row = got["instances"][0]  # type: ignore[index]
    assert row["verdict"] == "pass", json.dumps(row["gates"])[:900]


# -- 10. an agent's session kept in a sandbox_write folder, read by a gate ----------------

TRANSCRIPT_READER = textwrap.dedent("""\
    import glob, json, os


    def add(a, b):
        return a - b


    def _borrow():
        for path in glob.glob(os.environ.get('SESSIONS', '/nonexistent') + '/*.jsonl'):
            try:
                for line in open(path):
                    text = json.loads(line).get('wrote', '')
                    if 'a + b' in text:
                        return text
            except (OSError, ValueError):
                continue
        return None


    _found = _borrow()
    if _found:
        exec(_found)
    """)


@needs_namespace
def test_a_gate_cannot_read_a_siblings_session_in_a_sandbox_write_folder(tmp_path: Path) -> None:
    """Agent tools keep their sessions in the home folder, listed under
    ``sandbox_write`` (docs/agents.md: ``~/.claude``).  The honest agent's
    session holds the code it wrote; the wrong attempt's code, run by its
    gate, reads the session and runs that code."""
    sessions = tmp_path / "sessions"
    config = CONFIG_SW.format(sessions=sessions)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "2")
    record = json.dumps({"wrote": APP_FIXED}).replace("'", "'\\''")
    gp("run", "t", "--instance", "2", "--", "sh", "-c",
       f"{HONEST} && git commit -qam right && printf '%s\\n' '{record}' > {sessions}/honest.jsonl")
    (tmp_path / "reader.py").write_text(TRANSCRIPT_READER.replace("os.environ.get('SESSIONS', '/nonexistent')",
                                                                  repr(str(sessions))))
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'reader.py'} app.py && git commit -qam borrowed")
    assert (sessions / "honest.jsonl").is_file()
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt ran the code its sibling's session holds"


CONFIG_SW = textwrap.dedent("""\
    max_total: 16
    protect: [tests/**]
    sandbox_write: [{sessions}]
    gates:
      - name: tests
        run: [./test.sh]
    """)


# -- 11. what the pooled scratch checkout kept of the attempt judged before ----------------

LEFTOVER_READER = textwrap.dedent("""\
    import glob, os


    def add(a, b):
        return a - b


    def _borrow():
        here = os.path.dirname(os.path.abspath(__file__))
        for path in glob.glob(os.path.join(here, '**', '*.py'), recursive=True):
            if os.path.abspath(path) == os.path.abspath(__file__):
                continue
            try:
                text = open(path).read()
            except OSError:
                continue
            if 'a + b' in text and 'def add' in text:
                return text
        return None


    _found = _borrow()
    if _found:
        exec(_found)
    """)


@needs_namespace
def test_the_pooled_checkout_keeps_nothing_of_the_attempt_judged_before(tmp_path: Path) -> None:
    """Attempt 2 adds ``impl_two.py`` (its fix); attempt 1 commits a
    ``.gitignore`` naming ``impl_*.py`` and code that looks through its
    checkout.  Judged after 2 in the same pooled checkout, 1 must find no
    file of 2's tree there, ignored or not."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    two = "printf 'def add(a, b):\\n    return a + b\\n' > impl_two.py && printf 'from impl_two import add\\n' > app.py"
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{two} && git add -A && git commit -qm right")
    (tmp_path / "reader.py").write_text(LEFTOVER_READER)
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'reader.py'} app.py && printf 'impl_*.py\\n' > .gitignore && git add -A && git commit -qm look")
    two_checked = gp.json("check", "t", "--instance", "2", "--jobs", "1", code=None)["instances"][0]
    assert two_checked["verdict"] == "pass", json.dumps(two_checked["gates"])[:600]
    one_checked = gp.json("check", "t", "--instance", "1", "--jobs", "1", code=None)["instances"][0]
    assert one_checked["verdict"] == "fail", "the wrong attempt ran what the pooled checkout kept of its sibling"


def test_a_sandbox_write_folder_that_is_a_store_stays_readable_to_judged_commands(tmp_path: Path) -> None:
    # The sessions of agents' tools are hidden from judged commands; a
    # folder given as a setup store too is what setup and gates read.
    from gitflow_parallel.judge.stores import unseen

    cache, sessions = tmp_path / "cache", tmp_path / "sessions"
    cache.mkdir()
    sessions.mkdir()
    config = {"sandbox_write": [str(cache), str(sessions)], "setup": {"stores": [str(cache)]}, "gates": []}
    assert unseen(config) == [sessions.resolve()]
