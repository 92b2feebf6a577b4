"""Fault injection at random moments: ``kill -9`` of the real ``git-parallel``
process (not git's wrapper) of each verb, then ``recover``, then the
invariants: the base moved all or nothing, no commit any instance made is
lost, ``validate`` is clean, and the flow goes on.

The moments are drawn from a seeded generator (the seed is in the test id),
``MOMENTS`` per verb, so a failure can be replayed exactly."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from conftest import GP, git, make_repo
from gitflow_parallel.recovery.scan import STALE_LOCK_SECONDS

PY = sys.executable
VERBS = ("spawn", "run", "check", "pick", "merge", "abort")
MOMENTS = 10  # per verb: about 3 s each, 60 cases
SPAN = 1.2  # seconds: the moments fall in [0, SPAN) after the verb starts

AGENT = textwrap.dedent("""
    import os, pathlib, subprocess
    me = os.environ["GIT_PARALLEL_INSTANCE"]
    pathlib.Path(f"c{me}.txt").write_text(f"committed by {me}\\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-qm", f"agent {me}"], check=True)
    pathlib.Path(f"l{me}.txt").write_text(f"left by {me}\\n")
""")


def _common(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def _record(repo: Path) -> dict | None:
    path = _common(repo) / "parallel" / "runs" / "t.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else None


def _instance_commits(repo: Path, base: str) -> set[str]:
    tips = git(repo, "for-each-ref", "--format=%(objectname)", "refs/heads/parallel", "refs/parallel/archive").split()
    return set(git(repo, "rev-list", *tips, f"^{base}").split()) if tips else set()


def _real_process(wrapper: subprocess.Popen[str], timeout: float = 10) -> int | None:
    """The git-parallel process git started (its child), or None if it already ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = Path(f"/proc/{wrapper.pid}/task/{wrapper.pid}/children").read_text().split()
        except OSError:
            return None
        if kids:
            return int(kids[0])
        if wrapper.poll() is not None:
            return None
        time.sleep(0.002)
    return None


def _prepare(repo: Path, gp: GP, tools: Path, verb: str) -> None:
    order = ("spawn", "run", "check", "pick", "merge")
    upto = order.index(verb) if verb in order else order.index("check")  # abort: a checked run
    if upto > 0:
        gp("spawn", "t", "-n", "2")
    if upto > 1:
        gp("run", "t", "--", PY, str(tools / "agent.py"))
    if upto > 2:
        gp("check", "t")
    if upto > 3:
        gp("pick", "t")


def _argv(verb: str, tools: Path) -> list[str]:
    return {"spawn": ["spawn", "t", "-n", "2"], "run": ["run", "t", "--", PY, str(tools / "agent.py")],
            "check": ["check", "t"], "pick": ["pick", "t"], "merge": ["merge", "t"], "abort": ["abort", "t"]}[verb]


CASES = [(verb, k) for verb in VERBS for k in range(MOMENTS)]


@pytest.mark.slow
@pytest.mark.parametrize("verb,k", CASES, ids=[f"{v}-{k}" for v, k in CASES])
def test_kill_9_at_a_random_moment(tmp_path: Path, verb: str, k: int) -> None:
    rng = random.Random(f"{verb}-{k}")
    moment = rng.uniform(0, SPAN) if k else 0.0  # the first moment of each verb is its very start
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "agent.py").write_text(AGENT)
    (tools / "gate.py").write_text("import sys; sys.exit(0)\n")
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: ok\n    run: [{PY}, {tools / 'gate.py'}]\n")
    gp = GP(repo)
    _prepare(repo, gp, tools, verb)
    base_before = git(repo, "rev-parse", "main")
    made_before = _instance_commits(repo, base_before)

    wrapper = subprocess.Popen(["git", "parallel", *_argv(verb, tools)], cwd=repo, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    real = _real_process(wrapper)
    time.sleep(moment)
    if real is not None:
        try:
            os.kill(real, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wrapper.communicate(timeout=60)
    # What the agents committed before the kill, and whatever the watchdog stopped.
    from gitflow_parallel.state.project import _group_alive, pid_alive
    rec = _record(repo)
    deadline = time.monotonic() + 15
    # A sandboxed agent dies a moment after its bwrap (the pid): its group too.
    while rec and any(pid_alive(i.get("pid")) or _group_alive(i.get("pid"))
                      for i in rec["instances"] if i["status"] == "running"):
        assert time.monotonic() < deadline, "an agent outlived its killed runner"
        time.sleep(0.05)
    made = made_before | _instance_commits(repo, base_before)

    if rec is not None:
        result = gp.json("recover", "t", code=None)
        if result.get("code") == "PARALLEL_LOCK_HELD":
            # The kill left a git lock younger than recover's staleness bar
            # (a git command may still own it): as the hint says, wait, then
            # recover again, which removes it as stale.
            time.sleep(STALE_LOCK_SECONDS + 0.5)
            result = gp.json("recover", "t", code=None)
        assert result["ok"] is True, json.dumps(result, indent=1)
        again = gp.json("recover", "t")
        assert again["noop"] is True, json.dumps(again, indent=1)
    rec = _record(repo)
    # The base moved all or nothing, and the record agrees.
    base_after = git(repo, "rev-parse", "main")
    if base_after != base_before:
        assert rec is not None and rec["status"] == "merged" and rec["merge"]["landed"] == base_after
        assert rec["merge"]["previous"] == base_before
        assert git(repo, "status", "--porcelain") == ""
    else:
        assert rec is None or rec["status"] != "merged"
    # No commit lost.
    made |= _instance_commits(repo, base_before)
    for oid in made:
        assert git(repo, "for-each-ref", "--contains", oid, "refs/heads", "refs/parallel/archive"), \
            f"{verb} killed at {moment:.3f}s lost commit {oid}"
    fsck = subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    data = gp.json("validate", code=None)
    assert data["ok"] is True and data["errors"] == 0, f"killed at {moment:.3f}s\n" + json.dumps(data, indent=1)
    assert rec is None or not any(i["status"] == "running" for i in rec["instances"])
