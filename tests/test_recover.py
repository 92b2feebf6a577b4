"""Crash recovery against real git: for every fault point, kill the command
there with SIGKILL, then `recover`, `validate`, and carry on with the flow.

Agents and gates are python scripts run through sys.executable.  The
invariants checked after every crash are the product's promises: no commit
an instance made is lost, the base moved fully or not at all, the records
validate clean, the next command works, and a second recover is a no-op."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, snapshot
import scenarios
from scenarios import common, stored_record as record

from gitflow_parallel import faults

PY = sys.executable
KILLED = (-9, 137)  # SIGKILL seen directly, or as git reports its child's death

# Writes <instance>.txt (and whatever NAME=TEXT arguments say) into its worktree;
# the runner commits the leftovers.
AGENT = textwrap.dedent("""
    import os, pathlib, sys
    inst = os.environ["GIT_PARALLEL_INSTANCE"]
    pathlib.Path(f"{inst}.txt").write_text(f"work of {inst}\\n")
    for arg in sys.argv[1:]:
        name, _, text = arg.partition("=")
        pathlib.Path(name).write_text(text + "\\n")
""")

# Commits its own work, then sleeps: a long-running agent with history.
COMMIT_AND_SLEEP = textwrap.dedent("""
    import os, pathlib, subprocess, sys, time
    inst = os.environ["GIT_PARALLEL_INSTANCE"]
    if len(sys.argv) > 1 and sys.argv[1] == "ignore-term":
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(f"{inst}.txt").write_text(f"committed by {inst}\\n")
    subprocess.run(["git", "add", "-A"], check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"agent {inst}"], check=True)
    time.sleep(60)
""")

GATE = "import pathlib, sys; sys.exit(1 if pathlib.Path('BROKEN').exists() else 0)"


def project(tmp_path: Path, extra: str = "") -> tuple[Path, GP, Path]:
    repo, gp = scenarios.project(tmp_path, GATE, name="ok", max_total=8, extra=extra, agent=AGENT)
    (tmp_path / "tools" / "sleeper.py").write_text(COMMIT_AND_SLEEP)
    return repo, gp, tmp_path / "tools"


def instance_commits(repo: Path, base: str) -> set[str]:
    """Every commit reachable from an instance branch or archive ref but not from the base commit."""
    tips = git(repo, "for-each-ref", "--format=%(objectname)", "refs/heads/parallel", "refs/parallel/archive").split()
    if not tips:
        return set()
    return set(git(repo, "rev-list", *tips, f"^{base}").split())


def assert_reachable(repo: Path, commits: set[str]) -> None:
    for oid in sorted(commits):
        holders = git(repo, "for-each-ref", "--contains", oid, "--format=%(refname)", "refs/heads", "refs/parallel/archive")
        assert holders, f"commit {oid} is no longer reachable from any branch or archive ref"
        # And by the ancestry check a person would use:
        first = holders.splitlines()[0]
        assert subprocess.run(["git", "merge-base", "--is-ancestor", oid, first], cwd=repo).returncode == 0


def audit_lines(repo: Path, run_id: str) -> list[dict[str, Any]]:
    path = common(repo) / "parallel" / "audit" / f"{run_id}.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []


def assert_validate_clean(gp: GP, task: str = "t") -> None:
    for args in (("validate", task), ("validate",)):
        data = gp.json(*args, code=None)
        assert data["ok"] is True and data["errors"] == 0, json.dumps(data, indent=1)


def assert_second_recover_noop(repo: Path, gp: GP, task: str = "t") -> dict[str, Any]:
    before = snapshot(repo)
    notes_before = git(repo, "for-each-ref", "refs/notes")
    again = gp.json("recover", task)
    assert again["noop"] is True and again["repaired"] == []
    assert snapshot(repo) == before
    assert git(repo, "for-each-ref", "refs/notes") == notes_before
    last = audit_lines(repo, again["run_id"])[-1]
    assert last["action"] == "idempotent_noop" and last["recovery_id"] == again["recovery_id"]
    return again


# -- the flow, stage by stage -------------------------------------------------------
STAGES = ("spawn", "run", "check", "pick", "merge")


def do_stage(gp: GP, tools: Path, stage: str, env: dict[str, str] | None = None,
             code: int | None = 0) -> subprocess.CompletedProcess[str]:
    args = {
        "spawn": ("spawn", "t", "-n", "2"),
        "run": ("run", "t", "--", PY, str(tools / "agent.py")),
        "check": ("check", "t"),
        "pick": ("pick", "t"),
        "merge": ("merge", "t"),
    }[stage]
    return gp(*args, env=env, code=code)


def finish_flow(repo: Path, gp: GP, tools: Path) -> None:
    """From wherever recover left the run, carry on to a merged base."""
    rec = record(gp.cwd)
    if rec["status"] == "aborted":
        do_stage(gp, tools, "spawn")
        rec = record(gp.cwd)
    if rec["status"] == "merged":
        assert gp.json("merge", "t")["already"] is True
        gp("cleanup", "t")
        do_stage(gp, tools, "spawn")  # the task can start over
        return
    for inst in rec["instances"]:
        if inst["status"] in ("failed", "aborted"):
            gp("retry", "t", inst["id"])
    rec = record(gp.cwd)
    if any(i["status"] == "pending" for i in rec["instances"]):
        do_stage(gp, tools, "run")
    rec = record(gp.cwd)
    if rec["status"] != "picked":
        do_stage(gp, tools, "check")
        do_stage(gp, tools, "pick")
    result = gp.json("merge", "t")
    assert result["already"] is False
    assert record(gp.cwd)["status"] == "merged"


def wait_for_dead(pids: list[int], timeout: float = 15) -> None:
    from gitflow_parallel.state.project import _group_alive, pid_alive

    deadline = time.monotonic() + timeout
    # And their groups: a sandboxed agent dies a moment after its bwrap.
    while any(pid_alive(p) or _group_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes {pids} did not go away"
        time.sleep(0.05)


def running_pids(gp: GP) -> list[int]:
    return [i["pid"] for i in record(gp.cwd)["instances"] if i["status"] == "running" and i.get("pid")]


# What each crash point leaves (validate's error codes), what recover does
# (its steps, in order) and the run status after it: docs/recovery.md's
# table, as these tests observe it.  A "?" marks what depends on a race the
# crash leaves open: at run.after_running the agents were just started and
# are told to stop at once; whether one got to write a file first decides
# whether recover commits leftovers (and then notes the new tip).
EXPECTED: dict[str, tuple[set[str], list[str], str]] = {
    "spawn.after_record": ({"PARALLEL_SPAWN_INCOMPLETE"}, ["rollback_spawn"], "aborted"),
    "spawn.before_worktrees": ({"PARALLEL_SPAWN_INCOMPLETE"}, ["rollback_spawn"], "aborted"),
    # Nothing left to repair: spawn writes no notes (every tip is the base commit).
    "spawn.after_worktrees": (set(), [], "pending"),
    # The first agent is started, its start not written: the record still says
    # pending, and its worktree still looks through its sandbox view.
    "run.after_start": ({"PARALLEL_PROCESS_GONE"}, ["take_in_view"], "pending"),
    "run.after_running": ({"PARALLEL_PROCESS_GONE", "PARALLEL_NOTES_MISSING?"},
                          ["instance_failed", "instance_failed", "write_notes?"], "failed"),
    "run.after_commit": ({"PARALLEL_PROCESS_GONE", "PARALLEL_NOTES_MISSING"},
                         ["instance_failed", "instance_failed", "write_notes"], "failed"),
    "check.after_pack": ({"PARALLEL_EVIDENCE_UNBOUND", "PARALLEL_NOTES_MISSING"}, ["bind_evidence", "write_notes"],
                         "completed"),
    "pick.after_record": ({"PARALLEL_PICK_UNBOUND", "PARALLEL_NOTES_MISSING"}, ["bind_pick", "write_notes"], "picked"),
    "merge.after_ref": ({"PARALLEL_BASE_ALREADY_MERGED", "PARALLEL_BASE_WORKTREE_STALE", "PARALLEL_MERGE_INTENT_LEFT",
                         "PARALLEL_NOTES_MISSING"},
                        ["update_base_worktree", "record_merged", "write_notes", "remove_intent"], "merged"),
    "merge.after_worktree": ({"PARALLEL_BASE_ALREADY_MERGED", "PARALLEL_MERGE_INTENT_LEFT", "PARALLEL_NOTES_MISSING"},
                             ["record_merged", "write_notes", "remove_intent"], "merged"),
}


# Points that need a state the flow above never makes, tested on their own.
ELSEWHERE = {"spawn.after_retire": "test_lost.py::test_kill_9_of_spawn_while_retiring_keeps_a_record"}


def test_every_fault_point_is_covered() -> None:
    assert set(EXPECTED) | set(ELSEWHERE) == set(faults.POINTS)
    assert not set(EXPECTED) & set(ELSEWHERE)


@pytest.mark.parametrize("point", [p for p in faults.POINTS if p not in ELSEWHERE])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_crash_at_every_point(tmp_path: Path, point: str) -> None:
    repo, gp, tools = project(tmp_path)
    stage = point.split(".")[0]
    assert stage in STAGES, f"fault point {point} belongs to no stage this test drives"
    for earlier in STAGES[: STAGES.index(stage)]:
        do_stage(gp, tools, earlier)
    base_before = git(repo, "rev-parse", "main")
    proc = do_stage(gp, tools, stage, env={faults.ENV: point}, code=None)
    assert proc.returncode in KILLED, f"{point} was not reached: exit {proc.returncode}\n{proc.stderr}"
    # The agents the runner started are told to stop when it dies (PR_SET_PDEATHSIG).
    if stage == "run":
        wait_for_dead(running_pids(gp))
    made = instance_commits(repo, base_before)
    landing = None
    intents = common(repo) / "parallel" / "merges"
    for f in intents.glob("*.intent.json") if intents.is_dir() else []:
        landing = json.loads(f.read_text())["landing"]

    codes, steps, status_after = EXPECTED[point]
    found = gp.json("validate", "t", code=1 if codes else 0)["findings"]
    assert all(f["severity"] == "error" for f in found)
    assert {c.rstrip("?") for c in codes if not c.endswith("?")} <= {f["code"] for f in found} <= {c.rstrip("?") for c in codes}
    plan = gp.json("recover", "t", "--dry-run")
    result = gp.json("recover", "t")
    assert result["ok"] is True and result["recovery_id"] == plan["recovery_id"]
    done = [s["step"] for s in result["repaired"]]
    assert [s["step"] for s in plan["plan"]] == done
    assert done in ([s.rstrip("?") for s in steps], [s for s in steps if not s.endswith("?")])
    lines = audit_lines(repo, result["run_id"])
    assert [l["action"] for l in lines] == (["validated"] + ["repaired"] * len(done) if done else ["idempotent_noop"])

    # Nothing any instance committed is lost.
    assert_reachable(repo, made)
    # The base moved fully or not at all, and the record agrees.
    rec = record(gp.cwd)
    assert rec["status"] == status_after
    base_after = git(repo, "rev-parse", "main")
    if base_after == base_before:
        assert rec["status"] != "merged"
    else:
        assert base_after == landing
        assert rec["status"] == "merged" and rec["merge"]["landed"] == base_after
        assert rec["merge"]["previous"] == base_before
        assert git(repo, "status", "--porcelain") == ""  # the checkout of main followed the ref
        lines = [json.loads(l) for l in git(repo, "notes", "--ref=parallel", "show", base_after).splitlines()]
        assert {l["kind"] for l in lines if l["run_id"] == rec["run_id"]} >= {"pick", "merge"}
    if rec["status"] == "aborted":  # a rolled-back spawn leaves no trace in git
        assert all(i["removed"] for i in rec["instances"])
        assert git(repo, "branch", "--list", "parallel/*") == ""
        assert not (repo.parent / "repo.parallel" / "t").exists()
    assert not any(i["status"] == "running" for i in rec["instances"])
    assert not (intents / f"{rec['run_id']}.intent.json").exists()
    assert_validate_clean(gp)
    assert_second_recover_noop(repo, gp)
    gp("status")
    gp("status", "t")
    finish_flow(repo, gp, tools)
    assert_reachable(repo, made)
    assert_validate_clean(gp)


@pytest.mark.unfenced("its agents leave marker files outside their worktrees")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_kill_9_of_run_while_agents_committed(tmp_path: Path, sealed: dict[str, str]) -> None:
    repo, gp, tools = project(tmp_path)
    spawned = gp.json("spawn", "t", "-n", "2")
    base = spawned["base"]["commit"]
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", PY, str(tools / "sleeper.py")], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            tips = [git(repo, "rev-parse", f"parallel/t/{i}") for i in ("1", "2")]
            if all(t != base for t in tips):
                break
            assert runner.poll() is None and time.monotonic() < deadline, "the agents never committed"
            time.sleep(0.05)
        pids = running_pids(gp)
        assert len(pids) == 2
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # git, and the runner under it
        runner.wait()
    wait_for_dead(pids)  # the kernel tells the agents their runner died
    made = instance_commits(repo, base)
    assert len(made) == 2
    data = gp.json("validate", "t", code=1)
    gone = [f for f in data["findings"] if f["code"] == "PARALLEL_PROCESS_GONE"]
    assert sorted(f["instance"] for f in gone) == ["1", "2"]
    result = gp.json("recover", "t")
    rec = record(gp.cwd)
    assert not any(i["status"] == "running" for i in rec["instances"])
    for inst in rec["instances"]:
        assert inst["status"] == "failed" and inst["error"].startswith("process gone: ")
        assert inst["head"] == git(repo, "rev-parse", inst["branch"]) != base
    assert {s["step"] for s in result["repaired"]} >= {"instance_failed", "write_notes"}
    assert [f["fix"] for f in result["left"]] == ["git parallel retry t 1", "git parallel retry t 2"]
    assert_reachable(repo, made)
    assert_validate_clean(gp)
    assert_second_recover_noop(repo, gp)
    # retry keeps the agent's commit under the archive ref.
    gp("retry", "t", "1")
    assert_reachable(repo, made)


@pytest.mark.unfenced("it watches its agents' host pids and marker files")
@pytest.mark.slow
def test_live_agent_is_left_alone_until_it_is_gone(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    spawned = gp.json("spawn", "t", "-n", "1")
    # The watchdog's SIGKILL comes a grace after its TERM: a 60 s grace keeps
    # the agent alive for as long as validate and recover take on a loaded
    # machine (with the default 3 s they raced it, and lost once in five suites).
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", PY, str(tools / "sleeper.py"), "ignore-term"],
                              cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                              env=dict(os.environ, GIT_PARALLEL_KILL_GRACE="60"))
    deadline = time.monotonic() + 30
    while git(repo, "rev-parse", "parallel/t/1") == spawned["base"]["commit"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()
    [pid] = running_pids(gp)
    try:
        # The agent ignores the SIGTERM its runner's death sent: it is still working.
        before = snapshot(repo)
        assert gp.json("validate", "t")["ok"] is True  # a live process is no inconsistency
        assert gp.json("recover", "t")["noop"] is True
        assert snapshot(repo) == before
        assert record(gp.cwd)["instances"][0]["status"] == "running"
    finally:
        os.killpg(pid, signal.SIGKILL)
    wait_for_dead([pid])
    gp("recover", "t")
    assert record(gp.cwd)["instances"][0]["status"] == "failed"
    assert_validate_clean(gp)


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_plain_git_merge_is_recorded(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    for stage in ("spawn", "run", "check", "pick"):
        do_stage(gp, tools, stage)
    rec = record(gp.cwd)
    winner = rec["picks"]["main"]["winner"]
    previous = git(repo, "rev-parse", "main")
    git(repo, "merge", "--no-ff", "-q", "-m", "merge the winner by hand", f"parallel/t/{winner}")
    landed = git(repo, "rev-parse", "HEAD")
    git(repo, "commit", "--allow-empty", "-q", "-m", "later work on main")  # the landing is not the tip
    data = gp.json("validate", "t", code=1)
    assert "PARALLEL_BASE_ALREADY_MERGED" in {f["code"] for f in data["findings"]}
    result = gp.json("recover", "t")
    rec = record(gp.cwd)
    assert rec["status"] == "merged"
    m = rec["merge"]
    assert m["landed"] == landed and m["previous"] == previous and m["method"] == "merge"
    assert m["outside"] is True and m["recovered"]["recovery_id"] == result["recovery_id"]
    lines = [json.loads(l) for l in git(repo, "notes", "--ref=parallel", "show", landed).splitlines()]
    pick = [l for l in lines if l["kind"] == "pick"]
    assert pick and pick[0]["run_id"] == rec["run_id"] and pick[0]["winner"] == winner
    assert any(l["kind"] == "merge" and l["landed"] == landed for l in lines)
    assert git(repo, "rev-parse", "main") != landed  # recover never moves the base
    assert_validate_clean(gp)
    assert_second_recover_noop(repo, gp)
    gp("cleanup", "t")
    assert_validate_clean(gp)


def test_fast_forward_by_plain_git_notes_the_winner_tip(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    for stage in ("spawn", "run", "check", "pick"):
        do_stage(gp, tools, stage)
    base = git(repo, "rev-parse", "main")
    winner = record(gp.cwd)["picks"]["main"]["winner"]
    git(repo, "merge", "--ff-only", "-q", f"parallel/t/{winner}")
    gp("recover", "t")
    m = record(gp.cwd)["merge"]
    assert m["landed"] == git(repo, "rev-parse", "main") and m["previous"] == base and m["method"] == "fast-forward"
    note = git(repo, "notes", "--ref=parallel", "show", "main")
    assert '"kind":"pick"' in note and '"kind":"merge"' in note


def test_stale_git_locks_are_reported_and_removed(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    do_stage(gp, tools, "spawn")
    c = common(repo)
    old = time.time() - 3600
    stale = [c / "refs" / "heads" / "main.lock", c / "index.lock", c / "packed-refs.lock",
             c / "worktrees" / "parallel+t+1" / "index.lock", c / "refs" / "heads" / "parallel" / "t" / "2.lock"]
    for path in stale:
        path.write_text("")
        os.utime(path, (old, old))
    fresh = c / "refs" / "heads" / "fresh.lock"
    fresh.write_text("")  # a git command in flight: young, so left alone
    soon = time.time() + 3600  # young however slow this machine is between here and validate
    os.utime(fresh, (soon, soon))
    proc = subprocess.run(["git", "commit", "--allow-empty", "-m", "x"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0 and "index.lock" in proc.stderr  # git itself is blocked
    data = gp.json("validate", code=1)
    reported = {f["message"].split()[3] for f in data["findings"] if f["code"] == "PARALLEL_STALE_LOCK"}
    assert reported == {str(p.relative_to(c)) for p in stale}
    result = gp.json("recover", "t")
    assert sum(1 for s in result["repaired"] if s["step"] == "remove_lock") == len(stale)
    assert not any(p.exists() for p in stale) and fresh.exists()
    fresh.unlink()
    git(repo, "commit", "--allow-empty", "-q", "-m", "git works again")
    assert_validate_clean(gp)


def test_a_fresh_ref_lock_in_the_way_is_a_clear_refusal(tmp_path: Path) -> None:
    # A killed command can leave `<branch>.lock` moments before recover runs:
    # too young to call stale, so recover says so (no traceback) and, once
    # the lock has aged, removes it and finishes.
    repo, gp, tools = project(tmp_path)
    proc = do_stage(gp, tools, "spawn", env={faults.ENV: "spawn.before_worktrees"}, code=None)
    assert proc.returncode in KILLED
    lock = common(repo) / "refs" / "heads" / "parallel" / "t" / "2.lock"
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/parallel/t/2")
    lock.write_text("")
    soon = time.time() + 3600  # too young to call stale, however slow this machine is
    os.utime(lock, (soon, soon))
    data = gp.json("recover", "t", code=1)
    assert data["code"] == "PARALLEL_LOCK_HELD" and str(lock) in data["message"], data
    assert "recover" in data["hint"]
    old = time.time() - 3600
    os.utime(lock, (old, old))
    result = gp.json("recover", "t")
    assert "remove_lock" in {s["step"] for s in result["repaired"]} and not lock.exists()
    assert not git(repo, "branch", "--list", "parallel/t/*")
    assert_validate_clean(gp)


def test_dry_run_and_recovery_id(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    do_stage(gp, tools, "spawn")
    proc = do_stage(gp, tools, "run", env={faults.ENV: "run.after_commit"}, code=None)
    assert proc.returncode in KILLED
    wait_for_dead(running_pids(gp))
    rec = record(gp.cwd)
    before = snapshot(repo)
    plan = gp.json("recover", "t", "--dry-run")
    assert plan["dry_run"] is True and plan["plan"] and plan["repaired"] == []
    assert snapshot(repo) == before
    assert audit_lines(repo, rec["run_id"]) == []  # a dry run writes nothing, not even the audit log
    expected = "RC-" + hashlib.sha256(f"{rec['run_id']}:{rec['run_revision']}".encode()).hexdigest()[:24]
    assert plan["recovery_id"] == expected
    text = gp("recover", "t", "--dry-run").stdout
    assert "nothing changed" in text and "would mark instance" in text
    done = gp.json("recover", "t")
    assert done["recovery_id"] == expected
    assert [s["step"] for s in done["repaired"]] == [s["step"] for s in plan["plan"]]
    lines = audit_lines(repo, rec["run_id"])
    assert [l["action"] for l in lines] == ["validated"] + ["repaired"] * len(done["repaired"])
    assert all(l["recovery_id"] == expected and l["run_revision"] == rec["run_revision"] for l in lines)


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_refusal_changes_nothing(tmp_path: Path) -> None:
    """A merge intent whose base has since moved to a commit holding neither
    side cannot be decided: recover refuses and leaves everything as it was,
    including the other repairs it could have made."""
    repo, gp, tools = project(tmp_path)
    for stage in ("spawn", "run", "check", "pick"):
        do_stage(gp, tools, stage)
    proc = do_stage(gp, tools, "merge", env={faults.ENV: "merge.after_ref"}, code=None)
    assert proc.returncode in KILLED
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "commit", "--allow-empty", "-q", "-m", "someone else moved main")
    rec = record(gp.cwd)
    before = snapshot(repo)
    proc = gp("recover", "t", code=1)
    assert "error[PARALLEL_RECOVERY_REFUSED]" in proc.stderr and "intent" in proc.stderr and "hint:" in proc.stderr
    assert snapshot(repo) == before
    assert [l["action"] for l in audit_lines(repo, rec["run_id"])] == ["refused"]
    data = gp.json("validate", "t", code=1)
    assert any(f["code"] == "PARALLEL_MERGE_INTENT_LEFT" and f["refusal"] for f in data["findings"])
    # Following the hint: the move was on purpose, so the intent goes and recover proceeds.
    (common(repo) / "parallel" / "merges" / f"{rec['run_id']}.intent.json").unlink()
    gp("recover", "t")
    assert record(gp.cwd)["status"] == "picked"
    assert_validate_clean(gp)


def test_half_made_worktree_with_foreign_files_is_refused(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    proc = do_stage(gp, tools, "spawn", env={faults.ENV: "spawn.before_worktrees"}, code=None)
    assert proc.returncode in KILLED
    folder = repo.parent / "repo.parallel" / "t" / "1"
    folder.mkdir(parents=True)
    (folder / "notes-to-self.txt").write_text("mine\n")
    (folder / "README.md").write_text("hello\n")  # identical to the base: would be fine alone
    before = snapshot(repo)
    proc = gp("recover", "t", code=1)
    assert "PARALLEL_RECOVERY_REFUSED" in proc.stderr and "notes-to-self.txt" in proc.stderr
    assert "README.md" not in proc.stderr.split("notes-to-self.txt")[0].split("holds files")[-1]
    assert snapshot(repo) == before and (folder / "notes-to-self.txt").exists()
    (folder / "notes-to-self.txt").unlink()
    gp("recover", "t")
    assert not folder.exists()
    do_stage(gp, tools, "spawn")


def test_lost_worktree_of_pending_instance_is_made_again(tmp_path: Path) -> None:
    import shutil

    repo, gp, tools = project(tmp_path)
    do_stage(gp, tools, "spawn")
    rec = record(gp.cwd)
    wt = Path(rec["instances"][1]["worktree"])
    shutil.rmtree(wt)
    data = gp.json("validate", "t", code=1)
    assert [f["code"] for f in data["findings"]] == ["PARALLEL_WORKTREE_MISSING"]
    assert "git parallel recover t" == data["findings"][0]["fix"]
    gp("recover", "t")
    assert (wt / "README.md").read_text() == "hello\n"
    assert git(wt, "rev-parse", "--abbrev-ref", "HEAD") == "parallel/t/2"
    assert_validate_clean(gp)
    finish_flow(repo, gp, tools)


def test_validate_reports_what_recover_does_not_own(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    for stage in ("spawn", "run", "check"):
        do_stage(gp, tools, stage)
    rec = record(gp.cwd)
    pack = Path(rec["instances"][0]["evidence"]["path"])
    pack.write_text(pack.read_text().replace('"pass"', '"PASS"'))  # tampered
    # and its copy on the evidence ref gone too (with it, recover restores the pack: test_way_back)
    git(repo, "update-ref", "-d", f"refs/parallel/evidence/{rec['run_id']}/1/0")
    wt = Path(rec["instances"][1]["worktree"])
    (wt / "extra.txt").write_text("after the check\n")
    git(wt, "add", "extra.txt")
    git(wt, "commit", "-q", "-m", "a commit the record does not know")
    data = gp.json("validate", "t", code=1)
    by_code = {f["code"]: f for f in data["findings"]}
    assert by_code["PARALLEL_EVIDENCE_MISMATCH"]["instance"] == "1"
    assert by_code["PARALLEL_EVIDENCE_MISMATCH"]["fix"] == "git parallel check t --instance 1"
    assert by_code["PARALLEL_BRANCH_MOVED"]["instance"] == "2"
    assert by_code["PARALLEL_BRANCH_MOVED"]["severity"] == "error"
    assert "moved on to" in by_code["PARALLEL_BRANCH_MOVED"]["message"]
    text = gp("validate", "t", code=1).stdout
    assert "error[PARALLEL_EVIDENCE_MISMATCH] t/1:" in text and "fix: git parallel check t --instance 1" in text
    result = gp.json("recover", "t")
    assert [s["step"] for s in result["repaired"]][0] == "record_head"
    assert "PARALLEL_EVIDENCE_MISMATCH" in {f["code"] for f in result["left"]}
    assert record(gp.cwd)["instances"][1]["head"] == git(repo, "rev-parse", "parallel/t/2")
    gp("check", "t")  # what the finding said to run
    assert_validate_clean(gp)


def test_duplicate_ids_and_orphans(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    do_stage(gp, tools, "spawn")
    path = common(repo) / "parallel" / "runs" / "t.yaml"
    good = path.read_text()
    path.write_text(good.replace("id: '2'", "id: '1'"))
    data = gp.json("validate", code=1)
    invalid = [f for f in data["findings"] if f["code"] == "PARALLEL_RECORD_INVALID"]
    assert invalid and "appears twice" in invalid[0]["message"] and invalid[0]["task"] == "t"
    proc = gp("recover", "t", code=1)
    assert "PARALLEL_RECOVERY_REFUSED" in proc.stderr and "appears twice" in proc.stderr
    assert path.read_text() == good.replace("id: '2'", "id: '1'")  # never rewritten
    path.write_text(good)
    git(repo, "branch", "parallel/t/9")
    git(repo, "branch", "parallel/other/1")
    data = gp.json("validate", code=1)
    orphans = sorted(f["message"].split()[1] for f in data["findings"] if f["code"] == "PARALLEL_ORPHAN")
    assert orphans == ["parallel/other/1", "parallel/t/9"]
    proc = gp("recover", "other", code=1)
    assert "PARALLEL_RECOVERY_REFUSED" in proc.stderr and "git branch -D parallel/other/1" in proc.stderr
    git(repo, "branch", "-D", "parallel/t/9", "parallel/other/1")
    assert_validate_clean(gp)
    proc = gp("validate", "nosuch", code=1)
    assert "PARALLEL_RUN_NOT_FOUND" in proc.stderr


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_missing_notes_are_rewritten(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    for stage in STAGES[:-1]:
        do_stage(gp, tools, stage)
    git(repo, "update-ref", "-d", "refs/notes/parallel")
    data = gp.json("validate", "t", code=1)
    [missing] = [f for f in data["findings"] if f["code"] == "PARALLEL_NOTES_MISSING"]
    assert "instance 1" in missing["message"] and "pick of track main" in missing["message"]
    gp("recover", "t")
    log = git(repo, "log", "--format=%s", "refs/notes/parallel")
    assert len(log.splitlines()) == 1 and log.startswith("git-parallel: recover RC-")  # one notes commit
    winner = record(gp.cwd)["picks"]["main"]
    note = git(repo, "notes", "--ref=parallel", "show", winner["commit"])
    kinds = {json.loads(l)["kind"] for l in note.splitlines()}
    assert kinds == {"instance", "evidence", "pick"}
    assert_validate_clean(gp)
    do_stage(gp, tools, "merge")
    assert_validate_clean(gp)


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_interrupted_cleanup_is_finished(tmp_path: Path) -> None:
    """A merged run whose loser kept its branch but lost its worktree (a
    cleanup killed half-way, or an `rm -rf`): recover archives the tip and
    finishes the removal."""
    import shutil

    repo, gp, tools = project(tmp_path, extra="keep_losers: true\n")
    for stage in STAGES:
        do_stage(gp, tools, stage)
    rec = record(gp.cwd)
    [loser] = [i for i in rec["instances"] if not i["removed"]]
    tip = git(repo, "rev-parse", loser["branch"])
    shutil.rmtree(loser["worktree"])
    data = gp.json("validate", "t", code=1)
    assert [f["code"] for f in data["findings"]] == ["PARALLEL_CLEANUP_INCOMPLETE"]
    gp("recover", "t")
    archive = f"refs/parallel/archive/{rec['run_id']}/{loser['id']}/{loser['attempt']}"
    assert git(repo, "rev-parse", archive) == tip
    assert git(repo, "branch", "--list", loser["branch"]) == ""
    assert all(i["removed"] for i in record(gp.cwd)["instances"])
    assert_validate_clean(gp)
    assert_second_recover_noop(repo, gp)
    do_stage(gp, tools, "spawn")  # nothing named after the old run is in the way


def test_interrupted_retry_keeps_the_archived_attempt(tmp_path: Path) -> None:
    """retry archives the tip, resets the branch, then writes the record; a
    crash between the last two leaves the branch at the base and the record
    at the old attempt.  Neither recover nor the next retry may drop the
    archived work."""
    repo, gp, tools = project(tmp_path)
    spawned = gp.json("spawn", "t", "-n", "1")
    base = spawned["base"]["commit"]
    proc = do_stage(gp, tools, "run", env={faults.ENV: "run.after_commit"}, code=None)
    assert proc.returncode in KILLED
    gp("recover", "t")
    inst = record(gp.cwd)["instances"][0]
    work = inst["head"]
    assert inst["status"] == "failed" and work != base
    archive = f"refs/parallel/archive/{spawned['run_id']}/1/0"
    git(repo, "update-ref", archive, work)  # what retry did before it died
    git(Path(inst["worktree"]), "reset", "-q", "--hard", base)
    data = gp.json("validate", "t", code=1)
    [moved] = [f for f in data["findings"] if f["code"] == "PARALLEL_BRANCH_MOVED"]
    assert "no longer holds" in moved["message"] and moved["refusal"] is None
    gp("recover", "t")
    assert git(repo, "rev-parse", archive) == work
    gp("retry", "t", "1")
    assert git(repo, "rev-parse", archive) == work  # not moved back to the base
    assert_reachable(repo, {work})
    assert_validate_clean(gp)


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_merge_again_after_a_crash_defers_to_recover(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    for stage in ("spawn", "run", "check", "pick"):
        do_stage(gp, tools, stage)
    previous = git(repo, "rev-parse", "main")
    proc = do_stage(gp, tools, "merge", env={faults.ENV: "merge.after_ref"}, code=None)
    assert proc.returncode in KILLED
    landed = git(repo, "rev-parse", "main")
    assert git(repo, "status", "--porcelain") != ""  # the checkout still shows the old tree
    intent = common(repo) / "parallel" / "merges" / f"{record(gp.cwd)['run_id']}.intent.json"
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr and "git parallel recover t" in proc.stderr
    assert intent.exists()  # the refusal keeps recover's proof
    # Even with the intent lost, the base's reflog says where the landing came from.
    intent.unlink()
    result = gp.json("recover", "t")
    assert [s["step"] for s in result["repaired"]] == ["update_base_worktree", "record_merged", "write_notes"]
    m = record(gp.cwd)["merge"]
    assert (m["landed"], m["previous"]) == (landed, previous)
    assert git(repo, "status", "--porcelain") == ""
    assert_validate_clean(gp)


def test_validate_reports_a_deleted_base_branch(repo: Path) -> None:
    gp = GP(repo)
    git(repo, "branch", "side")
    gp("spawn", "t", "-n", "1", "--base", "side")
    git(repo, "branch", "-D", "side")
    proc = gp("validate", "t", code=1)
    assert "PARALLEL_BASE_NOT_FOUND" in proc.stdout + proc.stderr
    git(repo, "branch", "side", "main")
    gp("validate", "t")
