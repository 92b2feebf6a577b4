"""Hostile attempts against the object store: an agent writes only a store
of its own, taken into the shared one object by object with the hash
checked, and never the shared store itself."""

from __future__ import annotations

import textwrap
import zlib
from pathlib import Path

import pytest

from conftest import git
from hostile import log_of, needs_namespace, status
from test_hostile import HONEST, PY, act, project

PASSING_TEST = b"def test_add():\n    pass\n"

# The attempt's agent: rewrite the base's stored test to pass, delete the
# packs, then plant the same forgery in its own store, and leave the bug.
FORGE = textwrap.dedent("""
    import os, pathlib, shutil, subprocess, sys, zlib
    blob, forged = sys.argv[1], bytes.fromhex(sys.argv[2])
    common = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True).stdout.strip()
    own = subprocess.run(["git", "rev-parse", "--git-path", "objects"], capture_output=True, text=True).stdout.strip()
    shared = pathlib.Path(sys.argv[3])
    for where, store in (("shared", shared), ("own", pathlib.Path(own))):
        path = store / blob[:2] / blob[2:]
        try:
            path.parent.mkdir(exist_ok=True)
            if path.exists():
                path.chmod(0o644)
            path.write_bytes(forged)
            print(where, "written")
        except OSError as exc:
            print(where, "refused:", exc.strerror)
    try:
        shutil.rmtree(shared / "pack")
        print("packs deleted")
    except OSError as exc:
        print("packs refused:", exc.strerror)
""")


@needs_namespace
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_rewritten_stored_test_judges_nobody_and_the_store_stays_whole(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    git(repo, "gc", "-q")  # the base's objects in a pack, as in any repository of some age
    blob = git(repo, "rev-parse", "HEAD:tests/test_app.py")
    forged = zlib.compress(b"blob %d\0" % len(PASSING_TEST) + PASSING_TEST).hex()
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("run", "t", "--instance", "2", "--", PY, "-c", FORGE, blob, forged, str(repo / ".git" / "objects"))
    said = log_of(gp, "t", "2")
    assert "shared refused" in said and "packs refused" in said and "own written" in said, said
    git(repo, "fsck", "--full", "--no-dangling")  # raises on a bad object
    assert list((repo / ".git" / "objects" / "pack").glob("*.pack"))
    checked = {i["id"]: i for i in gp.json("check", "t", code=None)["instances"]}
    assert checked["1"]["verdict"] == "pass" and checked["2"]["verdict"] == "fail"
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "show", "main:app.py").endswith("a + b")


@needs_namespace
def test_an_object_whose_content_is_not_its_name_is_never_taken_in(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    lie = "0" * 40  # a name no content gives
    content = b"blob 5\0hello"
    agent = textwrap.dedent(f"""
        import pathlib, subprocess, zlib
        own = subprocess.run(["git", "rev-parse", "--git-path", "objects"], capture_output=True, text=True).stdout.strip()
        path = pathlib.Path(own) / "{lie[:2]}" / "{lie[2:]}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(zlib.compress({content!r}))
        pathlib.Path("app.py").write_text("def add(a, b):\\n    return a + b\\n")
    """)
    gp("spawn", "t", "-n", "1")
    assert "PARALLEL_AGENT_TAMPERED" in gp("run", "t", "--", PY, "-c", agent, code=1).stdout
    inst = status(gp, "t")["1"]
    assert inst["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in inst["error"], inst
    assert f"object {lie}" in inst["error"] and "does not match their name" in inst["error"]
    assert git(repo, "cat-file", "-e", lie, check=False) == ""
    assert not (repo / ".git" / "objects" / lie[:2] / lie[2:]).exists()


@needs_namespace
def test_an_honest_agents_commits_are_taken_in_and_its_branch_resolves(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST + " && git add -A && git commit -qm fix && git gc -q")
    tip = git(repo, "rev-parse", "parallel/t/1")
    assert git(repo, "cat-file", "-t", tip) == "commit"
    git(repo, "fsck", "--full", "--no-dangling")
    assert "fix" in git(repo, "log", "--format=%s", "parallel/t/1")


@needs_namespace
def test_an_agent_moves_and_locks_no_branch_but_its_own(tmp_path: Path) -> None:
    # Within one run, side by side: 2 points 1's branch at its own commit and
    # leaves a lock on 3's; each sibling's branch is its own agent's work.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "3")
    honest = f"sleep 1; {HONEST} && git commit -qam honest"
    mover = ("echo '# mine' >> app.py && git commit -qam mover && "
             "git update-ref refs/heads/parallel/t/1 HEAD; "
             "touch \"$(git rev-parse --git-common-dir)/refs/heads/parallel/t/3.lock\"; "
             "git rev-parse --verify -q refs/heads/parallel/t/3 >/dev/null; echo \"sees 3: $?\"")
    agent = (f'case "$GIT_PARALLEL_INSTANCE" in 2) {mover};; *) {honest};; esac')
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    states = status(gp, "t")
    assert states["1"]["status"] == "succeeded" and states["3"]["status"] == "succeeded", states
    for inst in ("1", "3"):
        subjects = git(repo, "log", "--format=%s", f"parallel/t/{inst}").splitlines()
        assert "honest" in subjects and "mover" not in subjects, (inst, subjects)
    assert "mover" in git(repo, "log", "--format=%s", "parallel/t/2")
    assert not (repo / ".git" / "refs" / "heads" / "parallel" / "t" / "3.lock").exists()
    assert "sees 3: 1" in log_of(gp, "t", "2")  # its siblings' loose refs are not in its view


@needs_namespace
def test_recover_takes_in_what_a_killed_runners_agent_committed(tmp_path: Path) -> None:
    # kill -9 of the runner while its agent, which has committed into its
    # own store and refs, still runs: recover takes them in as the runner would have.
    import os
    import signal
    import subprocess
    import time

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    worktree = Path(status(gp, "t")["1"]["worktree"])
    agent = f"{HONEST} && git commit -qam agent-work && touch committed && sleep 60"
    runner = subprocess.Popen(["git-parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        # Its start written too (a kill before that is run.after_start: test_recover's sweep).
        while not ((worktree / "committed").exists() and status(gp, "t")["1"]["status"] == "running"):
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
    finally:
        if runner.poll() is None:
            runner.kill()
    # A sandboxed agent dies a moment after its bwrap: recover waits for
    # nothing, so this waits until its group is gone, as a person would.
    from gitflow_parallel.state.project import _group_alive, pid_alive

    pid = status(gp, "t")["1"].get("pid")
    deadline = time.monotonic() + 15
    while pid_alive(pid) or _group_alive(pid):
        assert time.monotonic() < deadline, "the agent outlived its killed runner"
        time.sleep(0.05)
    admin = Path(git(worktree, "rev-parse", "--absolute-git-dir"))
    assert "parallel-common" in (admin / "commondir").read_text()  # the view was left in place
    said = gp("recover", "t")
    assert "agent-work" in git(repo, "log", "--format=%s", "parallel/t/1"), said
    assert (admin / "commondir").read_text().strip() == "../.."
    git(repo, "fsck", "--full", "--no-dangling")
    assert status(gp, "t")["1"]["status"] == "failed"


@pytest.mark.slow  # the reader looks for 6 s when it finds nothing; CI runs this after the default tier
def test_an_agent_cannot_read_a_siblings_commits_while_the_run_is_live(tmp_path: Path) -> None:
    # Agent 1 commits its answer and ends at once; agent 2, still running,
    # looks through every object its git can reach for that answer.  The
    # finished attempt's objects are taken into the shared store only when
    # the run's agents have all ended.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    answer = "ANSWER_" + "7" * 12
    writer = f"echo {answer} > answer.txt && git add answer.txt && git commit -qm answer"
    reader = ("for i in $(seq 1 30); do "
              f"  if git cat-file --batch-all-objects --batch 2>/dev/null | grep -q {answer}; then echo FOUND; exit 0; fi; "
              "  sleep 0.2; "
              "done; echo 'not found'")
    gp("run", "t", "--", "sh", "-c", f'if [ "$GIT_PARALLEL_INSTANCE" = 1 ]; then {writer}; else {reader}; fi')
    said = log_of(gp, "t", "2")
    assert "not found" in said and "FOUND" not in said, said
    # Once the run ended, both attempts' work is in the shared store, on their branches.
    assert git(repo, "show", "parallel/t/1:answer.txt") == answer
    assert status(gp, "t")["1"]["status"] == "succeeded" and status(gp, "t")["2"]["status"] == "succeeded"


@pytest.mark.slow  # a run in its own process and an abort beside it
def test_abort_of_an_attempt_held_back_for_its_siblings_keeps_its_work_at_once(tmp_path: Path) -> None:
    import subprocess
    import time

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent = ('if [ "$GIT_PARALLEL_INSTANCE" = 1 ]; then echo one > one.txt && git add one.txt && git commit -qm one; '
             'else sleep 60; fi')
    runner = subprocess.Popen(["git-parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        events = repo / ".git" / "parallel" / "events"
        deadline = time.monotonic() + 60
        while not any("engine_exited" in p.read_text() for p in events.glob("*/1.*.jsonl")):
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        assert status(gp, "t")["1"]["status"] == "running"  # held back: instance 2 still runs
        started = time.monotonic()
        gp("abort", "t", "1")
        assert time.monotonic() - started < 10  # its runner let go of it without waiting for instance 2
        assert status(gp, "t")["1"]["status"] == "aborted"
        assert git(repo, "show", "parallel/t/1:one.txt") == "one"  # its work is on its branch
        assert status(gp, "t")["2"]["status"] == "running"
        gp("abort", "t", "2")
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
