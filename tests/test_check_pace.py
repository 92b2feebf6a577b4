"""check sized to the machine: at most as many gate threads at once as
cores (a gate's ``threads`` counting), and word of each gate while it runs.

Gates here are real python scripts run by a real ``git parallel check`` in
a subprocess (under ``taskset`` where the cores are the subject); each
records when it started and ended, so overlap is measured, not assumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import GP, make_repo
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.judge import pace

PY = sys.executable

# Writes its start, waits up to WAIT seconds for the other instance's start
# (at once when both run side by side), and writes its end.
SPAN = textwrap.dedent("""
    import json, os, pathlib, sys, time
    here, wait = pathlib.Path(sys.argv[1]), float(sys.argv[2])
    me = os.environ["GIT_PARALLEL_INSTANCE"]
    started = time.time()
    (here / f"{me}.start").write_text("x")
    other = "2" if me == "1" else "1"
    while not (here / f"{other}.start").exists() and time.time() < started + wait:
        time.sleep(0.02)
    (here / f"{me}.json").write_text(json.dumps([started, time.time()]))
""")


def _spans(tmp_path: Path, wait: float, threads: int | None) -> tuple[Path, Path]:
    """A run of two succeeded instances whose one gate is SPAN."""
    folder = tmp_path / "spans"
    folder.mkdir()
    script = tmp_path / "span.py"
    script.write_text(SPAN)
    extra = f"    threads: {threads}\n" if threads else ""
    cfg = f"gates:\n  - name: span\n    run: [{PY}, {script}, {folder}, \"{wait}\"]\n{extra}"
    repo = make_repo(tmp_path / "repo", config=cfg)
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--", PY, "-c", "open('work.txt', 'w').write('done')")
    return repo, folder


def _overlap(folder: Path) -> float:
    (a0, a1), (b0, b1) = (json.loads((folder / f"{i}.json").read_text()) for i in ("1", "2"))
    return min(a1, b1) - max(a0, b0)


@pytest.mark.parametrize("prefix, args, threads, jobs, together", [
    (["taskset", "-c", "0"], [], None, 1, False),  # default: the one core this process may use
    ([], ["--jobs", "2"], 2, 2, False),  # a gate of two threads fills a budget of two
    ([], ["--jobs", "2"], None, 2, True),  # two one-thread gates fit side by side
])
@pytest.mark.unfenced("its gates record when they ran in a file outside the checkout")
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_check_runs_as_many_gate_threads_as_it_has_cores(tmp_path: Path, prefix: list[str], args: list[str],
                                                         threads: int | None, jobs: int, together: bool) -> None:
    repo, folder = _spans(tmp_path, 10.0 if together else 0.7, threads)
    proc = subprocess.run([*prefix, "git", "parallel", "check", "t", "--json", *args], cwd=repo,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["jobs"] == jobs and [i["verdict"] for i in out["instances"]] == ["pass", "pass"]
    assert (_overlap(folder) > 0) is together
    # Off a terminal: a line per finished gate, on stderr.
    lines = [line for line in proc.stderr.splitlines() if line.startswith("check t: instance ")]
    assert sorted(line.split(" gate ")[0] for line in lines) == ["check t: instance 1", "check t: instance 2"]
    assert all(" gate span pass in " in line for line in lines)
    assert "finished, " in lines[-1] and "\r" not in proc.stderr


@pytest.mark.unfenced("its gates record when they ran in a file outside the checkout")
def test_check_without_jobs_uses_this_machines_cores(tmp_path: Path) -> None:
    repo, _ = _spans(tmp_path, 0.0, None)
    out = GP(repo).json("check", "t")
    assert out["jobs"] == len(os.sched_getaffinity(0)) and out["jobs"] != 6  # not max_total any more


@pytest.mark.unfenced("its gates wait for a file outside the checkout")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_progress_line_on_a_terminal(tmp_path: Path) -> None:
    import pty

    repo, _ = _spans(tmp_path, 0.0, None)
    master, slave = pty.openpty()
    proc = subprocess.Popen(["git", "parallel", "check", "t"], cwd=repo, stdout=subprocess.PIPE, stderr=slave,
                            text=True)
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
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    text = seen.decode()
    assert "\rcheck t: 0 gates finished, running " in text and "gates finished, running" in text
    assert "check t: instance" not in text  # no per-gate lines on a terminal
    assert text.endswith("\r\x1b[K") and "\x1b" not in out and "pass" in out


def test_threads_must_be_a_whole_number(tmp_path: Path) -> None:
    cfg = f"gates:\n  - name: wide\n    run: [{PY}, -c, pass]\n    threads: 0\n"
    repo = make_repo(tmp_path / "repo", config=cfg)
    proc = GP(repo)("spawn", "t", "-n", "1", code=1)
    assert "error[" in proc.stderr and "gates[0].threads" in proc.stderr and "integer 1..1024" in proc.stderr
    assert "hint:" in proc.stderr


def test_pace_never_lends_more_threads_than_it_has() -> None:
    # Real threads against one budget of 3 cores: one-thread gates fill it,
    # a two-thread gate waits for two free, and one wider than the whole
    # budget still runs, alone.
    budget = pace.Pace("t", 3)
    seen: list[int] = []
    lock = threading.Lock()

    def gate(name: str, threads: int) -> None:
        with budget.turn(name, {"name": name, "threads": threads}):
            with lock:
                seen.append(budget.used)
            time.sleep(0.02)

    workers = [threading.Thread(target=gate, args=(f"g{k}", (1, 2, 9)[k % 3])) for k in range(12)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(seen) == 12 and max(seen) <= 3 and 3 in seen
    assert budget.used == 0 and not budget.running and budget.waiting == 0


def test_pace_reports_each_gate_started_and_finished() -> None:
    heard: list[dict[str, object]] = []
    lane = pace.Pace("t", 1, heard.append).lane("1")
    with lane.turn({"name": "lint"}):
        pass
    lane.done({"name": "lint", "passed": True, "exit_code": 0, "error": None, "duration_s": 0.1})
    assert [(h["event"], h["gate"], h["running"]) for h in heard] == [("started", "lint", ["1 lint"]),
                                                                      ("finished", "lint", [])]
    assert heard[1]["finished"] == 1 and heard[1]["passed"] is True
    # Run again with the tests the attempt added: progress says so (a
    # second "gate tests pass" for one instance read as a double count).
    added = lane.of_stage("with the added tests")
    with added.turn({"name": "lint"}):
        pass
    added.done({"name": "lint", "passed": True, "exit_code": 0, "error": None, "duration_s": 0.1})
    assert [(h["event"], h["gate"], h["running"]) for h in heard[2:]] == [
        ("started", "lint with the added tests", ["1 lint with the added tests"]),
        ("finished", "lint with the added tests", [])]


def test_no_pace_runs_unbounded_and_silent() -> None:
    lane = pace.Lane()
    with lane.turn({"name": "x", "threads": 99}):
        lane.done({"name": "x", "passed": True})


def test_machine_cores_follows_the_affinity_mask() -> None:
    assert pace.machine_cores() == len(os.sched_getaffinity(0))
    assert ParallelError  # the config's refusal above is this error type, printed with its code
