"""A coordinator and workers used as a team would: the refs both sides
write stay publishable, a killed worker's clone heals itself, and a remote
failure reads as one on the coordinator.  Real git: a bare remote and
clones, workers as real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import GP, git
from test_remote import GOOD_AGENT, claim_chain, finish, remote_refs, setup_remote, spawn_published, start_worker


@pytest.mark.slow
def test_push_after_collect_pick_and_merge_push_is_not_refused(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    assert finish(start_worker(w, tmp_path, "w1", "--once", "--lease", "30"))["exit"] == 0
    gp("collect", "fx")
    ref = f"refs/parallel/evidence/{run_id}/1/0"
    # The coordinator keeps the worker's evidence commit, not a copy of it.
    assert git(coord, "rev-parse", ref) == remote_refs(origin, ref)[ref]
    gp("pick", "fx")
    out = gp.json("merge", "fx", "--push", "origin")
    assert ref not in out["push"]["kept_remote"]
    pushed = gp.json("push", "origin")
    assert pushed["remote"] == "origin"
    assert gp.json("push", "origin")["pushed"] == []  # nothing new: up to date, not refused
    # A clone that made its own copy of the worker's pack (what `collect`
    # used to leave: one pack, another commit) pushes past it.
    pack = git(coord, "rev-parse", f"{ref}:pack.json")
    tree = git(coord, "mktree", input=f"100644 blob {pack}\tpack.json\n")
    copy = git(coord, "commit-tree", tree, "-p", out["merge"]["landed"], input="a copy\n")
    git(coord, "update-ref", ref, copy)
    assert gp.json("push", "origin")["pushed"] == []
    fetched = gp.json("fetch", "origin")  # and `fetch` takes the remote's commit of it
    assert ref in fetched["updated"] and git(coord, "rev-parse", ref) == remote_refs(origin, ref)[ref]
    # Diverged for real (an archived tip rewritten here): refused, named,
    # nothing pushed, and the hint's first way out works.
    archived = f"refs/parallel/archive/{run_id}/1/0"
    assert archived in remote_refs(origin, archived)
    other = git(coord, "commit-tree", git(coord, "rev-parse", f"{archived}^{{tree}}"), input="rewritten\n")
    git(coord, "update-ref", archived, other)
    before = remote_refs(origin, "refs/")
    err = gp.json("push", "origin", code=1)
    assert err["code"] == "PARALLEL_REMOTE_DIVERGED" and archived in err["message"]
    assert remote_refs(origin, "refs/") == before
    assert err["hint"].startswith(f"keep origin's copy: `git update-ref {archived} ")
    git(coord, *err["hint"].split("`")[1].split()[1:])
    assert gp.json("push", "origin")["pushed"] == []


def _wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.unfenced("its agent leaves a marker file outside its worktree")
@pytest.mark.slow
@pytest.mark.parametrize("cleaner", ["worker", "recover"])
def test_what_a_worker_killed_with_kill_9_left_is_taken_apart(tmp_path: Path, cleaner: str) -> None:
    origin, coord, gp, (a, b) = setup_remote(tmp_path, 2)
    marker = tmp_path / "agent-started"
    # The first agent writes, says it started, then hangs until it is killed.
    agent = ["sh", "-c", f'echo "good $GIT_PARALLEL_INSTANCE" > out.txt; '
                         f'if [ ! -e {marker} ]; then touch {marker}; exec sleep 300; fi']
    run_id = spawn_published(gp, "fx", 1, agent)
    killed = start_worker(a, tmp_path, "wa", "--once", "--lease", "3")
    _wait_for(marker)
    os.kill(killed.pid, signal.SIGKILL)  # the worker's own python process, not a wrapper
    killed.wait()
    # B takes the instance over once A's lease ran out, and delivers it.
    taken = finish(start_worker(b, tmp_path, "wb", "--once", "--wait", "--lease", "30"))
    assert taken["exit"] == 0 and taken["instances"][0]["takeover"]["worker"] == "wa"
    found = GP(a).json("validate", code=1)
    assert [f["code"] for f in found["findings"]] == ["PARALLEL_PROCESS_GONE"]  # not two orphans
    assert "worker wa" in found["findings"][0]["message"]
    if cleaner == "worker":
        out = finish(start_worker(a, tmp_path, "wa2", "--once", "--lease", "30"))
        assert out["exit"] == 0 and out["instances"] == [] and [t["id"] for t in out["tidied"]] == ["1"]
    else:
        out = GP(a).json("recover", "fx")
        assert [s["step"] for s in out["repaired"]] == ["take_apart_worker_instance"]
        assert GP(a).json("recover", "fx")["noop"]  # a second recover has nothing to do
    assert GP(a).json("validate")["ok"]
    assert git(a, "branch", "--list", "parallel/*") == ""
    assert not (a.parent / "a.parallel").exists() and "fx" not in git(a, "worktree", "list")
    archived = git(a, "rev-parse", f"refs/parallel/archive/{run_id}/1/0")
    assert git(a, "show", f"{archived}:out.txt") == "good 1"  # the killed agent's uncommitted work is kept
    record = json.loads(subprocess.run(
        [sys.executable, "-c", "import json,sys,yaml;print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
         str(a / ".git" / "parallel" / "worker" / run_id / "runs" / "fx.yaml")],
        capture_output=True, text=True, check=True).stdout)
    inst = record["instances"][0]
    assert inst["status"] == "aborted" and inst["removed"] and "is gone" in inst["error"]


@pytest.mark.slow
def test_a_remote_failure_reads_on_the_coordinator_and_the_suggested_retry_works(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    # Attempt 0 of instance 1 fails in the agent; instance 2's agent runs but its gate fails.
    agent = ["sh", "-c", 'if [ "$GIT_PARALLEL_ATTEMPT" = 0 ] && [ "$GIT_PARALLEL_INSTANCE" = 1 ]; then '
                         'echo "agent 1 says: cannot find the module" >&2; exit 3; fi; '
                         'if [ "$GIT_PARALLEL_ATTEMPT" = 0 ]; then echo "bad" > out.txt; '
                         'else echo "good $GIT_PARALLEL_INSTANCE" > out.txt; fi; echo "agent $GIT_PARALLEL_INSTANCE done"']
    spawn_published(gp, "fx", 2, agent)
    assert finish(start_worker(w, tmp_path, "w1", "--lease", "30"))["exit"] == 0
    collected = gp.json("collect", "fx")
    assert [(r["id"], r["status"], r["verdict"]) for r in collected["instances"]] == [
        ("1", "failed", None), ("2", "succeeded", "fail")]
    assert collected["next"] == ["git parallel logs fx 1", "git parallel retry fx 1", "git parallel retry fx 2",
                                 "git parallel publish fx --remote origin"]
    text = gp("collect", "fx").stdout
    assert "next: git parallel retry fx 1" in text and "git parallel pick" not in text
    assert "cannot find the module" in gp("logs", "fx", "1").stdout  # the worker's log came home
    assert "agent 2 done" in gp("logs", "fx", "2").stdout
    shown = gp.json("show", "fx", "1")
    assert shown["agent"]["log_source"] == "file" and "cannot find the module" in shown["agent"]["tail"][-1]
    assert "cannot find the module" in gp("show", "fx", "1").stdout
    # What collect suggests works as it says: retry, publish, a worker, collect, pick.
    for step in collected["next"][1:]:
        gp(*step.split()[2:])
    again = finish(start_worker(w, tmp_path, "w1", "--lease", "30"))
    assert again["exit"] == 0 and sorted(r["id"] for r in again["instances"]) == ["1", "2"]
    assert [r["takeover"] for r in again["instances"]] == [None, None]  # its own claims, done: no takeover
    assert gp.json("collect", "fx")["next"] == ["git parallel pick fx"]
    gp("pick", "fx")


def test_a_worker_taking_back_its_own_released_claim_is_no_takeover(tmp_path: Path) -> None:
    from gitflow_parallel.commands import worker
    from gitflow_parallel.state import transport as R
    from gitflow_parallel.state.project import Project

    origin, coord, gp, (a,) = setup_remote(tmp_path, 1)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    project = Project.open(a)
    first = worker.Lease(project, "origin", worker.survey(project, "origin", "fx")[0], "wa", lease_s=30.0)
    assert first.acquire()
    worker._release(project, first, None)
    again = worker.survey(project, "origin", "fx")[0]
    assert again.state == "released"
    mine = worker.Lease(project, "origin", again, "wa", lease_s=30.0)
    assert mine.acquire() and mine.data["takeover"] is None
    assert claim_chain(origin, R.claim_ref(run_id, "1"))[-1]["takeover"] is None
    # Another worker taking a claim released by "wa" is a takeover, and says whose.
    worker._release(project, mine, None)
    other = worker.Lease(project, "origin", worker.survey(project, "origin", "fx")[0], "wb", lease_s=30.0)
    assert other.acquire() and other.data["takeover"]["worker"] == "wa"
