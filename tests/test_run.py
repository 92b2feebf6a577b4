"""`git parallel run` against real processes: concurrency caps as the
commands themselves record them, timeouts and signals that leave nothing
running, kill -9 of the runner, leftover commits, literal arguments, commands
that cannot start, events, logs, notes, and retry.

Agents are small Python scripts run with this interpreter (never a shell);
each writes what it saw (times, pids, argv, environment) to files the test
reads afterwards."""

from __future__ import annotations

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

from conftest import GP, git, make_repo, wait_for
from scenarios import shown_record as record

PY = sys.executable


# -- helpers -----------------------------------------------------------------------
def agent(tmp_path: Path, name: str, body: str) -> list[str]:
    """Write a Python agent script; returns the argv that runs it."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PY, str(path)]


# Records [start, end] (system-wide monotonic clock) in DIR/<instance>.json.
TIMED = """
    import json, os, sys, time
    start = time.monotonic()
    name = os.path.join(sys.argv[1], os.environ["GIT_PARALLEL_TASK"] + "-" + os.environ["GIT_PARALLEL_INSTANCE"])
    open(name + ".started", "w").close()
    time.sleep(float(sys.argv[2]))
    end = time.monotonic()
    with open(os.path.join(sys.argv[1], os.environ["GIT_PARALLEL_TASK"] + "-" + os.environ["GIT_PARALLEL_INSTANCE"] + ".json"), "w") as f:
        json.dump([start, end], f)
"""

# Starts a grandchild in its process group, writes both pids (and its own
# process group and session) to DIR, then sleeps.  argv: DIR LEADER_IGNORES_TERM GRANDCHILD_IGNORES_TERM
SLEEPER = """
    import json, os, signal, subprocess, sys, time
    out, leader_ignores, child_ignores = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
    me = os.environ["GIT_PARALLEL_INSTANCE"]
    if leader_ignores:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready = os.path.join(out, me + ".grandchild")
    code = ("import os, signal, sys, time\\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if child_ignores else "")
            + "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\\n"
            + "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
            + "time.sleep(60)\\n")
    subprocess.Popen([sys.executable, "-c", code, ready])
    while not os.path.exists(ready):
        time.sleep(0.01)
    info = {"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0), "grandchild": int(open(ready).read())}
    with open(os.path.join(out, me + ".tmp"), "w") as f:
        json.dump(info, f)
    os.rename(os.path.join(out, me + ".tmp"), os.path.join(out, me + ".json"))
    time.sleep(60)
"""


def max_alive(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at a tie)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def read_intervals(folder: Path) -> list[tuple[float, float]]:
    return [tuple(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]  # type: ignore[misc]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie answers kill(0) but runs nothing
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], within: float = 5.0) -> list[int]:
    """Pids still alive after ``within`` seconds (empty when all are gone);
    a pid that leads a group counts while its group lives (a sandboxed agent
    dies a moment after its bwrap, whose pid is the one recorded)."""
    from gitflow_parallel.state.project import _group_alive

    def living() -> list[int]:
        return [p for p in pids if alive(p) or _group_alive(p)]
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not living():
            return []
        time.sleep(0.05)
    return living()


def wait_files(folder: Path, pattern: str, n: int, within: float = 20.0) -> list[Path]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = sorted(folder.glob(pattern))
        if len(found) >= n:
            return found
        time.sleep(0.02)
    raise AssertionError(f"only {len(list(folder.glob(pattern)))} of {n} {pattern} in {folder} after {within}s")


def run_json(gp: GP, *args: str, code: int = 0, **kw: Any) -> dict[str, Any]:
    """``git parallel run --json ARGS``: --json must come before the ``--``."""
    return json.loads(gp("run", "--json", *args, code=code, **kw).stdout)


def inst(run: dict[str, Any], inst_id: str) -> dict[str, Any]:
    return next(i for i in run["instances"] if i["id"] == inst_id)


def runner_cmd(*args: str) -> list[str]:
    """The runner itself (no git wrapper), so its pid is the one to signal."""
    return [PY, "-m", "gitflow_parallel", *args]


def kill_leftovers(folder: Path) -> None:
    """Test hygiene: never leave a sleeper behind, even when an assertion failed."""
    for path in folder.glob("*.json"):
        try:
            info = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(info, dict):
            for pid in (info.get("pid"), info.get("grandchild")):
                if isinstance(pid, int) and alive(pid):
                    os.kill(pid, signal.SIGKILL)


def pending_twice(gp: GP, tmp_path: Path) -> None:
    """Tasks A and B with 3 pending instances each under max_total 3.

    Spawn refuses more than max_total live instances, but retry does not
    count, so failing A and retrying its instances is how two live runs can
    together want more than the cap, as they do in practice."""
    fail = agent(tmp_path, "fail", "import sys; sys.exit(1)")
    gp("spawn", "A", "-n", "3")
    assert "(failed or aborted: 1, 2, 3)" in gp("run", "A", "--", *fail, code=1).stdout
    gp("spawn", "B", "-n", "3")
    for i in ("1", "2", "3"):
        gp("retry", "A", i)


# -- concurrency ---------------------------------------------------------------------
@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_jobs_caps_commands_alive_at_once(repo: Path, gp: GP, tmp_path: Path) -> None:
    times = tmp_path / "times"
    times.mkdir()
    gp("spawn", "T", "-n", "6")
    proc = gp("run", "T", "--jobs", "2", "--", *agent(tmp_path, "timed", TIMED), str(times), "0.4")
    intervals = read_intervals(times)
    assert len(intervals) == 6
    assert max_alive(intervals) == 2  # never 3, and the 2 really overlapped
    assert "6 succeeded, 0 failed" in proc.stdout
    assert all(i["status"] == "succeeded" for i in record(gp, "T")["instances"])


@pytest.mark.unfenced("its agents record when they ran in files outside their worktrees")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_two_runs_share_max_total(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="max_total: 3\n")
    gp = GP(repo)
    pending_twice(gp, tmp_path)
    times = tmp_path / "times"
    times.mkdir()
    timed = agent(tmp_path, "timed", TIMED)
    procs = []
    for task in ("A", "B"):
        procs.append(subprocess.Popen(["git", "parallel", "run", task, "--", *timed, str(times), "2.5"], cwd=repo,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        # B starts once A's three hold every slot (however slowly a loaded machine starts them).
        wait_for(lambda: len(list(times.glob("A-*.started"))) == 3, timeout=60)
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    intervals = read_intervals(times)
    assert len(intervals) == 6
    assert max_alive(intervals) == 3
    assert any("waiting for a free slot" in err for _, err in outs)  # one of them had to wait
    assert "\x1b" not in "".join(o + e for o, e in outs)  # no escape codes off a terminal


# -- timeouts, signals, kill -9 ----------------------------------------------------------
@pytest.mark.unfenced("it watches its agents' host pids")
@pytest.mark.parametrize("leader_ignores_term", [False, True], ids=["leader-dies-on-term", "leader-ignores-term"])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_timeout_fails_and_kills_the_group(repo: Path, gp: GP, tmp_path: Path, leader_ignores_term: bool) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    gp("spawn", "T", "-n", "1")
    sleeper = agent(tmp_path, "sleeper", SLEEPER)
    t0 = time.monotonic()
    try:
        proc = gp("run", "T", "--timeout", "1", "--json", "--", *sleeper, str(pids),
                  "1" if leader_ignores_term else "0", "1", code=1, env={"GIT_PARALLEL_KILL_GRACE": "0.5"})
    finally:
        elapsed = time.monotonic() - t0
        info = json.loads((pids / "1.json").read_text())
        left = wait_gone([info["pid"], info["grandchild"]])
        kill_leftovers(pids)
    assert left == []  # the leader and its grandchild (which ignores SIGTERM) are gone
    assert elapsed < 15
    row = json.loads(proc.stdout)["instances"][0]
    assert row["status"] == "failed" and row["error"].startswith("timed out after 1s")
    if leader_ignores_term:
        assert "then SIGKILL" in row["error"] and row["exit_code"] == 128 + signal.SIGKILL
    else:
        assert "then SIGKILL" not in row["error"] and row["exit_code"] == 128 + signal.SIGTERM
    i = inst(record(gp, "T"), "1")
    assert i["status"] == "failed" and "timed out" in i["error"] and i["pid"] == info["pid"]
    assert info["pid"] == info["pgid"] == info["sid"]  # its own session and process group


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
@pytest.mark.parametrize("how", ["SIGINT-to-process-group-via-git", "SIGTERM-to-runner"])
def test_signal_stops_every_child_and_marks_aborted(repo: Path, gp: GP, tmp_path: Path, how: str) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    gp("spawn", "T", "-n", "3")
    sleeper = agent(tmp_path, "sleeper", SLEEPER)
    args = ["run", "T", "--jobs", "2", "--", *sleeper, str(pids), "0", "0"]
    via_git = how.startswith("SIGINT")
    cmd = ["git", "parallel", *args] if via_git else runner_cmd(*args)
    proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        started = wait_files(pids, "*.json", 2)
        infos = [json.loads(p.read_text()) for p in started]
        if via_git:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: git and the runner both get it
        else:
            os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_leftovers(pids)
    assert proc.returncode != 0
    assert "running commands were stopped and marked aborted" in out, (out, err)
    assert wait_gone([p for i in infos for p in (i["pid"], i["grandchild"])]) == []
    assert len(list(pids.glob("*.json"))) == 2  # the queued third never started
    name = "SIGINT" if via_git else "SIGTERM"
    assert f"stopped on {name}" in out and "Traceback" not in err
    run = record(gp, "T")
    statuses = sorted(i["status"] for i in run["instances"])
    assert statuses == ["aborted", "aborted", "pending"]
    for i in run["instances"]:
        if i["status"] == "aborted":
            assert i["error"] == f"stopped: git parallel run received {name}" and i["finished_at"]


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_kill_9_of_runner_frees_slots_at_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="max_total: 3\n")
    gp = GP(repo)
    pending_twice(gp, tmp_path)
    pids = tmp_path / "pids"
    pids.mkdir()
    sleeper = agent(tmp_path, "sleeper", SLEEPER)
    log = (tmp_path / "runner.out").open("w")
    runner = subprocess.Popen(runner_cmd("run", "A", "--", *sleeper, str(pids), "0", "0"), cwd=repo,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        infos = [json.loads(p.read_text()) for p in wait_files(pids, "*.json", 3)]
        # The agents start inside the record write that claims them, so they
        # can be running before it lands: kill once the record has them.
        deadline = time.monotonic() + 20
        while not all(i["pid"] for i in record(gp, "A")["instances"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        # All 3 slots were the dead runner's; the next run must get them now.
        times = tmp_path / "times"
        times.mkdir()
        t0 = time.monotonic()
        proc = gp("run", "B", "--", *agent(tmp_path, "timed", TIMED), str(times), "0", timeout=30)
        assert time.monotonic() - t0 < 10
        assert "waiting for a free slot" not in proc.stderr
        assert len(read_intervals(times)) == 3
        # The runner's watchdog stopped their whole groups, grandchildren too.
        assert wait_gone([p for i in infos for p in (i["pid"], i["grandchild"])]) == []
    finally:
        kill_leftovers(pids)
        log.close()
    run = record(gp, "A")
    assert sorted(i["pid"] for i in run["instances"]) == sorted(i["pid"] for i in infos)
    assert all(i["status"] == "running" for i in run["instances"])
    assert all(i["live"]["flags"] == ["process gone"] for i in run["instances"])
    assert "running (process gone)" in gp("status", "A").stdout


@pytest.mark.parametrize("point", ["run.after_running", "run.after_commit"])
def test_crash_points_leave_running_with_dead_pid(repo: Path, gp: GP, tmp_path: Path, point: str) -> None:
    gp("spawn", "T", "-n", "1")
    base = git(repo, "rev-parse", "main")
    work = agent(tmp_path, "work", """
        import time, sys
        open("made.txt", "w").write("made\\n")
        time.sleep(float(sys.argv[1]))
    """)
    pause = "30" if point == "run.after_running" else "0"
    proc = gp("run", "T", "--", *work, pause, code=None, env={"GIT_PARALLEL_FAULT": point}, timeout=30)
    assert proc.returncode != 0
    i = inst(record(gp, "T"), "1")
    assert i["status"] == "running" and isinstance(i["pid"], int)
    assert wait_gone([i["pid"]]) == []
    # Read again once it is gone: the agent's group is stopped after the runner died, not with it.
    assert inst(record(gp, "T"), "1")["live"]["flags"] == ["process gone"]
    tip = git(repo, "rev-parse", "parallel/T/1")
    if point == "run.after_commit":
        assert tip != base and "made.txt" in git(repo, "show", "--name-only", "--format=", tip)
    else:
        assert tip == base


# -- work is kept ----------------------------------------------------------------------
def test_leftovers_committed_and_own_commits_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", files={"README.md": "hello\n", ".gitignore": "ignored/\n"})
    gp = GP(repo)
    base = git(repo, "rev-parse", "main")
    gp("spawn", "T", "-n", "2")
    work = agent(tmp_path, "work", """
        import os, subprocess
        if os.environ["GIT_PARALLEL_INSTANCE"] == "1":
            open("new.txt", "w").write("new\\n")
            open("README.md", "a").write("more\\n")
            os.makedirs("ignored", exist_ok=True)
            open("ignored/cache.bin", "w").write("x")
        else:
            open("mine.txt", "w").write("mine\\n")
            subprocess.run(["git", "add", "mine.txt"], check=True)
            subprocess.run(["git", "commit", "-q", "-m", "agent's own commit"], check=True)
    """)
    summary = run_json(gp, "T", "--", *work)
    rows = {r["id"]: r for r in summary["instances"]}
    run = record(gp, "T")

    tip1 = git(repo, "rev-parse", "parallel/T/1")
    assert rows["1"]["committed"] == tip1 == inst(run, "1")["head"]
    assert git(repo, "rev-parse", f"{tip1}^") == base
    message = git(repo, "log", "-1", "--format=%B", tip1)
    assert "T/1" in message and "attempt 0" in message and f"Parallel-Run: {run['run_id']}" in message
    assert sorted(git(repo, "show", "--name-only", "--format=", tip1).splitlines()) == ["README.md", "new.txt"]
    assert git(repo, "show", f"{tip1}:README.md") == "hello\nmore"
    wt1 = Path(inst(run, "1")["worktree"])
    assert git(wt1, "status", "--porcelain") == ""  # committed, and the ignored file left alone
    assert (wt1 / "ignored" / "cache.bin").exists()

    tip2 = git(repo, "rev-parse", "parallel/T/2")
    assert rows["2"]["committed"] is None and inst(run, "2")["head"] == tip2
    assert git(repo, "log", "--format=%s", f"{base}..{tip2}").splitlines() == ["agent's own commit"]


def test_commit_leftovers_off_leaves_the_worktree_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="commit_leftovers: false\n")
    gp = GP(repo)
    base = git(repo, "rev-parse", "main")
    gp("spawn", "T", "-n", "1")
    gp("run", "T", "--", *agent(tmp_path, "work", "open('left.txt', 'w').write('x')"))
    run = record(gp, "T")
    assert git(repo, "rev-parse", "parallel/T/1") == base == inst(run, "1")["head"]
    assert git(Path(inst(run, "1")["worktree"]), "status", "--porcelain") == "?? left.txt"


# -- arguments, environment, output ---------------------------------------------------------
@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_arguments_arrive_literally_and_env_is_set(repo: Path, gp: GP, tmp_path: Path) -> None:
    out = tmp_path / "seen.json"
    dump = agent(tmp_path, "dump", """
        import json, os, sys
        env = {k: v for k, v in os.environ.items() if k.startswith("GIT_PARALLEL_") or k in ("GIT_DIR", "GIT_WORK_TREE")}
        json.dump({"argv": sys.argv[2:], "env": env, "cwd": os.getcwd()}, open(sys.argv[1], "w"))
    """)
    gp("spawn", "T", "-n", "1", "--track", "api")
    nasty = ["a b", "it's \"quoted\"", "$(touch pwned)", "; touch pwned2", "`touch pwned3`", "*", "$HOME",
             "{task}/{instance}/{track}/{attempt}", "{worktree}", "{unknown} {} {{task}}", "", "--json"]
    gp("run", "T", "--", *dump, str(out), *nasty, env={"GIT_DIR": str(tmp_path / "elsewhere")})
    seen = json.loads(out.read_text())
    run = record(gp, "T")
    i = inst(run, "api-1")
    wt = i["worktree"]
    assert seen["argv"] == ["a b", "it's \"quoted\"", "$(touch pwned)", "; touch pwned2", "`touch pwned3`", "*",
                            "$HOME", "T/api-1/api/0", wt, "{unknown} {} {T}", "", "--json"]
    for where in (repo, Path(wt), tmp_path):
        assert not list(where.glob("pwned*"))
    assert os.path.realpath(seen["cwd"]) == os.path.realpath(wt)
    assert seen["env"] == {
        "GIT_PARALLEL_TASK": "T", "GIT_PARALLEL_RUN_ID": run["run_id"], "GIT_PARALLEL_INSTANCE": "api-1",
        "GIT_PARALLEL_TRACK": "api", "GIT_PARALLEL_ATTEMPT": "0", "GIT_PARALLEL_WORKTREE": wt,
        "GIT_PARALLEL_EVENTS": i["events"], "GIT_PARALLEL_SCOPE": f"{run['run_id']}/api-1/0",
    }  # and no GIT_DIR pointing the agent's git elsewhere


def test_log_events_record_and_one_notes_commit(repo: Path, gp: GP, tmp_path: Path) -> None:
    gp("spawn", "T", "-n", "3")
    assert git(repo, "for-each-ref", "refs/notes/parallel") == ""  # spawn notes nothing on the base
    talk = agent(tmp_path, "talk", """
        import json, os, sys
        open("out.txt", "w").write("done\\n")  # a commit of its own, which gets the instance line
        print("to stdout", os.environ["GIT_PARALLEL_INSTANCE"], flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        with open(os.environ["GIT_PARALLEL_EVENTS"], "a") as f:
            f.write(json.dumps({"event": "ai_invocation", "model": "scripted"}) + "\\n")
    """)
    proc = gp("run", "T", "--", *talk)
    assert "\x1b" not in proc.stdout + proc.stderr and "\r" not in proc.stdout + proc.stderr
    run = record(gp, "T")
    common = repo / ".git"
    for i in run["instances"]:
        log = Path(i["log"])
        assert log == common / "parallel" / "logs" / run["run_id"] / f"{i['id']}.0.log"
        assert log.read_text() == f"to stdout {i['id']}\nto stderr\n"
        events = Path(i["events"])
        assert events == common / "parallel" / "events" / run["run_id"] / f"{i['id']}.0.jsonl"
        lines = [json.loads(l) for l in events.read_text().splitlines()]
        # out.txt was left uncommitted: staged in a fence once the agent had exited.
        assert [l["event"] for l in lines] == ["engine_dispatched", "ai_invocation", "engine_exited", "engine_staged"]
        assert lines[0]["argv"] == talk and lines[0]["instance"] == i["id"]
        assert lines[2]["exit_code"] == 0 and isinstance(lines[2]["duration_s"], float)
        assert i["status"] == "succeeded" and i["exit_code"] == 0 and i["error"] is None
        assert i["started_at"] < i["finished_at"] and isinstance(i["pid"], int)
        assert i["instance_revision"] == 3  # spawn, running, succeeded
        note = [json.loads(l) for l in git(repo, "notes", "--ref=parallel", "show", i["branch"]).splitlines()]
        assert any(n["kind"] == "instance" and n["status"] == "succeeded" and n["instance"] == i["id"]
                   and n["run_id"] == run["run_id"] for n in note)
    assert int(git(repo, "rev-list", "--count", "refs/notes/parallel")) == 1  # one notes commit
    assert run["status"] == "completed"


def test_progress_line_on_a_terminal_only(repo: Path, gp: GP, tmp_path: Path) -> None:
    import pty

    gp("spawn", "T", "-n", "2")
    master, slave = pty.openpty()
    proc = subprocess.Popen(["git", "parallel", "run", "T", "--", *agent(tmp_path, "nap", "import time; time.sleep(0.6)")],
                            cwd=repo, stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=30)
    os.close(master)
    assert proc.returncode == 0
    text = seen.decode()
    assert "\r" in text and "T: 2 running, 0 done, 0 failed, 0 queued" in text
    assert text.endswith("\r\x1b[K")  # cleared before the summary
    assert "\x1b" not in out and "2 succeeded, 0 failed" in out


# -- commands that cannot start ----------------------------------------------------------------
def test_missing_and_non_executable_commands_fail_cleanly(repo: Path, gp: GP, tmp_path: Path) -> None:
    gp("spawn", "T", "-n", "2")
    proc = gp("run", "T", "--instance", "1", "--", "no-such-command-xyz", "arg", code=1)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "command not found: 'no-such-command-xyz'" in proc.stdout
    script = tmp_path / "not-executable.py"
    script.write_text("print('never')\n")
    script.chmod(0o644)
    data = run_json(gp, "T", "--instance", "2", "--", str(script), code=1)
    row = data["instances"][0]
    assert data["ok"] is False and row["status"] == "failed" and row["exit_code"] == 126
    assert "not executable" in row["error"]
    run = record(gp, "T")
    one, two = inst(run, "1"), inst(run, "2")
    assert one["status"] == "failed" and one["exit_code"] == 127 and "command not found" in one["error"]
    assert "command not found" in Path(one["log"]).read_text()
    assert two["status"] == "failed" and "not executable" in two["error"]
    exited = [json.loads(l) for l in Path(one["events"]).read_text().splitlines()][-1]
    assert exited["event"] == "engine_exited" and exited["exit_code"] == 127


# -- lifecycle and refusals --------------------------------------------------------------------
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_retry_after_run(repo: Path, gp: GP, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "main")
    gp("spawn", "T", "-n", "2")
    work = agent(tmp_path, "work", """
        import os, sys
        me, attempt = os.environ["GIT_PARALLEL_INSTANCE"], os.environ["GIT_PARALLEL_ATTEMPT"]
        open(f"attempt{attempt}.txt", "w").write(me + "\\n")
        sys.exit(3 if me == "1" and attempt == "0" else 0)
    """)
    proc = gp("run", "T", "--", *work, code=1)
    assert "1 succeeded, 1 failed" in proc.stdout and "1: exited with status 3" in proc.stdout
    run = record(gp, "T")
    failed_tip = git(repo, "rev-parse", "parallel/T/1")
    assert inst(run, "1")["status"] == "failed" and inst(run, "1")["exit_code"] == 3
    assert inst(run, "2")["status"] == "succeeded"

    proc = gp("retry", "T", "2", code=1)
    assert "error[PARALLEL_BRANCH_TERMINAL]" in proc.stderr
    for i in ("1", "2"):  # terminal instances cannot be run again without a retry
        proc = gp("run", "T", "--instance", i, "--", *work, code=1)
        assert "error[PARALLEL_BRANCH_TERMINAL]" in proc.stderr
    assert "git parallel retry T 1" in gp("run", "T", "--instance", "1", "--", *work, code=1).stderr

    gp("retry", "T", "1")
    run = record(gp, "T")
    one = inst(run, "1")
    assert one["attempt"] == 1 and one["status"] == "pending"
    wt = Path(one["worktree"])
    assert git(wt, "rev-parse", "HEAD") == base and git(wt, "status", "--porcelain", "--ignored") == ""
    assert not (wt / "attempt0.txt").exists()
    archive = f"refs/parallel/archive/{run['run_id']}/1/0"
    assert git(repo, "rev-parse", archive) == failed_tip
    assert git(repo, "show", f"{archive}:attempt0.txt") == "1"

    summary = run_json(gp, "T", "--", *work)  # only the pending one runs
    assert [r["id"] for r in summary["instances"]] == ["1"] and summary["ok"] is True
    one = inst(record(gp, "T"), "1")
    assert one["status"] == "succeeded" and one["log"].endswith("/1.1.log")
    assert git(repo, "show", "parallel/T/1:attempt1.txt") == "1"


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_same_task_run_twice_at_once_runs_each_instance_once(repo: Path, gp: GP, tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    gp("spawn", "T", "-n", "4")
    mark = agent(tmp_path, "mark", """
        import os, sys, time
        with open(os.path.join(sys.argv[1], os.environ["GIT_PARALLEL_INSTANCE"]), "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(0.3)
    """)
    procs = [subprocess.Popen(["git", "parallel", "run", "T", "--", *mark, str(seen)], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    # Intended: selection claims every pending instance under the project
    # lock, so the first run takes all four and the second starts nothing
    # (never a split in which both fail).
    assert sorted(p.returncode for p in procs) == [0, 1], outs
    loser = outs[[p.returncode for p in procs].index(1)][1]
    assert "being run by another `git parallel run`" in loser or "has no pending instance" in loser, loser
    assert sorted(p.name for p in seen.iterdir()) == ["1", "2", "3", "4"]
    assert all(len(p.read_text().splitlines()) == 1 for p in seen.iterdir())
    assert all(i["status"] == "succeeded" for i in record(gp, "T")["instances"])


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_abort_of_one_instance_during_run_stands(repo: Path, gp: GP, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    gp("spawn", "T", "-n", "2")
    work = agent(tmp_path, "work", """
        import os, sys, time
        me = os.environ["GIT_PARALLEL_INSTANCE"]
        path = os.path.join(sys.argv[1], me + ".pid")
        open(path + ".tmp", "w").write(str(os.getpid()))
        os.rename(path + ".tmp", path)  # whole when seen: the test reads it at once
        time.sleep(60 if me == "1" else 1.5)
    """)
    proc = subprocess.Popen(["git", "parallel", "run", "T", "--json", "--", *work, str(pids)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_files(pids, "*.pid", 2)
        first = int((pids / "1.pid").read_text())
        assert "stopped the process of 1" in gp("abort", "T", "1").stdout
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and wait_gone([first]) == []
    rows = {r["id"]: r for r in json.loads(out)["instances"]}
    assert rows["1"]["status"] == "aborted" and "not recorded: the instance changed meanwhile" in rows["1"]["error"]
    assert rows["2"]["status"] == "succeeded"
    run = record(gp, "T")
    assert inst(run, "1")["status"] == "aborted" and inst(run, "1")["error"] == "aborted by the user"
    assert inst(run, "2")["status"] == "succeeded"


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_refusals(repo: Path, gp: GP, tmp_path: Path) -> None:
    ok = agent(tmp_path, "ok", "pass")
    proc = gp("run", "nope", "--", *ok, code=1)
    assert "error[PARALLEL_RUN_NOT_FOUND]" in proc.stderr
    gp("spawn", "T", "-n", "1")
    assert "no command to run" in gp("run", "T", code=1).stderr  # no command (and no agents)
    proc = gp("run", "T", "--instance", "9", "--", *ok, code=1)
    assert "error[PARALLEL_BRANCH_NOT_FOUND]" in proc.stderr
    gp("run", "T", "--", *ok)
    proc = gp("run", "T", "--", *ok, code=1)
    assert "error[PARALLEL_BRANCH_TERMINAL]" in proc.stderr and "no pending instance (1 succeeded)" in proc.stderr
    gp("abort", "T")
    proc = gp("run", "T", "--", *ok, code=1)
    assert "error[PARALLEL_BRANCH_TERMINAL]" in proc.stderr and "aborted" in proc.stderr
    assert "git parallel spawn T" in proc.stderr


def test_missing_worktree_refused_before_anything_starts(repo: Path, gp: GP, tmp_path: Path) -> None:
    import shutil

    run = gp.json("spawn", "T", "-n", "2")
    shutil.rmtree(run["instances"][1]["worktree"])
    marker = tmp_path / "ran"
    proc = gp("run", "T", "--", *agent(tmp_path, "touch", f"open({str(marker)!r}, 'a').write('x')"), code=1)
    assert "error[PARALLEL_BRANCH_NOT_FOUND]" in proc.stderr and "instance 2" in proc.stderr
    assert not marker.exists()
    assert all(i["status"] == "pending" for i in record(gp, "T")["instances"])


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_run_outlasts_a_long_held_project_lock(repo: Path, gp: GP) -> None:
    # Another command holding the project lock longer than the lock timeout
    # must delay the runner's record writes, never cost it its agents.
    gp("spawn", "t", "-n", "1")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from filelock import FileLock
        with FileLock(sys.argv[1]):
            print("held", flush=True)
            time.sleep(3.5)
    """), str(repo / ".git" / "parallel" / "lock")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    proc = gp("run", "t", "--", sys.executable, "-c", "open('done.txt', 'w').write('ok')",
              env={"GIT_PARALLEL_LOCK_TIMEOUT": "1"})
    holder.wait()
    inst = gp.json("status", "t")["run"]["instances"][0]
    assert inst["status"] == "succeeded", proc.stdout + proc.stderr


def test_a_runner_whose_pids_cannot_be_seen_is_alive_while_it_holds_the_claim(repo: Path, gp: GP,
                                                                               tmp_path: Path) -> None:
    """A runner in another PID namespace (a container sharing the
    repository) records pids this process cannot see: its instance looked
    gone, and `recover` marked it failed under it.  Its claim on the
    instance (a flock, which every namespace sees) says it runs."""
    from gitflow_parallel.proc import slots

    gp("spawn", "T", "-n", "1")
    work = agent(tmp_path, "quick", "open('made.txt', 'w').write('made\\n')")
    gp("run", "T", "--", *work, code=None, env={"GIT_PARALLEL_FAULT": "run.after_running"}, timeout=30)
    i = inst(record(gp, "T"), "1")
    assert i["status"] == "running" and wait_gone([i["pid"]]) == []
    claim = slots.try_claim(repo / ".git" / "parallel", "T", "1", "a runner elsewhere")
    assert claim is not None
    follow = None
    try:
        assert inst(record(gp, "T"), "1")["live"]["flags"] == []
        found = gp.json("validate", "T", code=None)["findings"]
        assert "PARALLEL_PROCESS_GONE" not in {f["code"] for f in found}, found
        assert inst(record(gp, "T"), "1")["status"] == "running"
        follow = subprocess.Popen(["git", "parallel", "logs", "T", "1", "-f"], cwd=repo,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        assert follow.poll() is None, "logs -f stopped following a run whose runner holds its claim"
    finally:
        claim.release()
    if follow is not None:
        assert follow.wait(timeout=20) == 0  # the claim let go: it ends
    assert inst(record(gp, "T"), "1")["live"]["flags"] == ["process gone"]
    assert "PARALLEL_PROCESS_GONE" in {f["code"] for f in gp.json("validate", "T", code=1)["findings"]}
