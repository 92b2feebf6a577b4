"""`git parallel watch` on a run of three scripted agents: piped, one line
per state change in order, ending with the pick; under a pseudo-terminal,
the view redrawn in place until the run ends; --json, one event per line.
Real git, real agents (held on a marker file until watch has seen them
running, so no state is missed), real gates."""

from __future__ import annotations

import json
import os
import pty
import queue
import re
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import GP, make_repo

PY = sys.executable

# Says something in its log, waits for the test's go-file, writes its file.
AGENT = textwrap.dedent("""
    import os, sys, time
    me = os.environ["GIT_PARALLEL_INSTANCE"]
    print("agent", me, "waiting", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    open(me + ".txt", "w").write(me * int(me) + "\\n")
    print("agent", me, "done", flush=True)
""")


def setup(tmp_path: Path) -> tuple[Path, GP, list[str], Path]:
    (tmp_path / "agent.py").write_text(AGENT)
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: ok\n    run: [{PY}, -c, 'pass']\n")
    gp = GP(repo)
    gp("spawn", "T", "-n", "3")
    go = tmp_path / "go"
    return repo, gp, [PY, str(tmp_path / "agent.py"), str(go)], go


def reader(stream: object) -> "queue.Queue[str | None]":
    lines: "queue.Queue[str | None]" = queue.Queue()

    def pump() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def until(lines: "queue.Queue[str | None]", seen: list[str], want: str, count: int = 1) -> None:
    while sum(want in line for line in seen) < count:
        line = lines.get(timeout=60)
        assert line is not None, f"watch ended before {want!r}: {seen}"
        seen.append(line)


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_watch_piped_prints_each_state_change_in_order_ending_with_the_pick(tmp_path: Path) -> None:
    repo, gp, agent, go = setup(tmp_path)
    watch = subprocess.Popen(["git", "parallel", "watch", "T"], cwd=repo, stdout=subprocess.PIPE, text=True)
    lines, seen = reader(watch.stdout), []
    until(lines, seen, "run: pending")  # the first view: every instance pending, then the run
    run = subprocess.Popen(["git", "parallel", "run", "T", "--", *agent], cwd=repo, stdout=subprocess.DEVNULL)
    until(lines, seen, ": running", 3)  # all three seen running before any may finish
    go.write_text("")
    assert run.wait(timeout=60) == 0
    until(lines, seen, ": succeeded", 3)
    gp("check", "T")
    until(lines, seen, "verdict pass", 3)
    gp("pick", "T")
    rest = []
    while (line := lines.get(timeout=60)) is not None:
        rest.append(line)
    assert watch.wait(timeout=60) == 0
    seen += rest
    assert seen[:4] == ["1: pending, attempt 0", "2: pending, attempt 0", "3: pending, attempt 0", "run: pending"]
    for i in "123":
        mine = [line for line in seen if line.startswith(f"{i}: ")]
        assert [m.split(",")[0] for m in mine if ": diff" not in m] == [
            f"{i}: pending", f"{i}: running", f"{i}: succeeded", f"{i}: verdict pass"]
        # the diff stat so far: the one line the agent wrote, seen once (while
        # it ran or from its tip), after it started and before its verdict
        diffs = [k for k, m in enumerate(mine) if ": diff" in m]
        assert [mine[k] for k in diffs] == [f"{i}: diff 1 file, +1 -0"], mine
        assert mine.index(f"{i}: running, attempt 0") < diffs[0] < mine.index(f"{i}: verdict pass")
    assert "run: running" in seen and "run: completed" in seen
    assert seen.index("run: running") < seen.index("run: completed")
    # fewest changed lines wins: instance 1; the run ends picked, and watch with it
    assert seen[-2:] == ["pick: track main won by 1", "run: picked"]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_watch_on_a_terminal_redraws_in_place_and_exits_when_the_run_ends(tmp_path: Path) -> None:
    repo, gp, agent, go = setup(tmp_path)
    master, slave = pty.openpty()
    watch = subprocess.Popen(["git", "parallel", "watch", "T"], cwd=repo, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""

    def read_until(want: bytes) -> None:
        nonlocal out
        while want not in out:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                chunk = b""
            assert chunk, f"watch ended before {want!r}: {out[-2000:]!r}"
            out += chunk

    read_until(b"pending")
    run = subprocess.Popen(["git", "parallel", "run", "T", "--", *agent], cwd=repo, stdout=subprocess.DEVNULL)
    for i in "123":  # the last log line of each running agent is in the view (they start in any order)
        read_until(f"agent {i} waiting".encode())
    go.write_text("")
    assert run.wait(timeout=60) == 0
    gp("check", "T")
    gp("pick", "T")
    read_until(b"pick: track main won by 1")
    assert watch.wait(timeout=60) == 0
    try:
        while chunk := os.read(master, 65536):
            out += chunk
    except OSError:
        pass
    os.close(master)
    text = out.decode()
    ups = re.findall(r"\x1b\[(\d+)F", text)  # each redraw goes back up over what it drew
    assert len(ups) >= 3 and min(int(n) for n in ups) >= 6, text[-2000:]  # title, header, 3 instances, keys
    assert "\x1b[2K" in text and "agent 1 waiting" in text
    final = re.split(r"\x1b\[\d+F", text)[-1]
    assert "picked" in final and "1 *" in final and "pick: track main won by 1" in final
    # the diff stat so far of each attempt, and the keys (stdin is the terminal too)
    assert re.search(r"\n\x1b\[2K> 1 \*\s+-\s+succeeded\s+0\s+\d+s\s+1 \+1 -0\s+pass", final), final
    assert "keys: 1-9/up/down select" in final


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_watch_json_streams_events(tmp_path: Path) -> None:
    repo, gp, agent, go = setup(tmp_path)
    go.write_text("")
    gp("run", "T", "--", *agent)
    gp("check", "T")
    gp("pick", "T")
    out = gp("watch", "T", "--json").stdout.splitlines()
    events = [json.loads(line) for line in out]
    assert [e["event"] for e in events[:-1]] == ["status", "diff", "verdict"] * 3 + ["pick", "run"]
    assert [(e["instance"], e["files"], e["added"], e["removed"]) for e in events[:-1] if e["event"] == "diff"] == [
        ("1", 1, 1, 0), ("2", 1, 1, 0), ("3", 1, 1, 0)]
    assert events[-3] == {"task": "T", "event": "pick", "track": "main", "winner": "1", "agent": None}
    assert events[-2] == {"task": "T", "event": "run", "status": "picked"}
    assert events[-1]["ok"] is True and events[-1]["status"] == "picked"  # the summary ends the stream


# Writes its file at once, then waits for the go-file (so it is running, with a diff, while keys are pressed).
EARLY = textwrap.dedent("""
    import os, sys, time
    me = os.environ["GIT_PARALLEL_INSTANCE"]
    open(me + ".txt", "w").write("line from " + me + "\\n")
    print("agent", me, "wrote", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
""")


@pytest.mark.slow  # three agents held running while keys are pressed: about 6 s
def test_watch_keys_select_show_the_diff_abort_and_open(tmp_path: Path) -> None:
    (tmp_path / "early.py").write_text(EARLY)
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: ok\n    run: [{PY}, -c, 'pass']\n")
    gp = GP(repo)
    gp("spawn", "T", "-n", "3")
    go = tmp_path / "go"
    run = subprocess.Popen(["git", "parallel", "run", "T", "--", PY, str(tmp_path / "early.py"), str(go)], cwd=repo,
                           stdout=subprocess.DEVNULL)
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(PAGER="cat", TERM="xterm")
    watch = subprocess.Popen(["git", "parallel", "watch", "T"], cwd=repo, stdin=slave, stdout=slave, stderr=slave,
                             env=env)
    os.close(slave)
    out = b""

    def read_until(want: bytes) -> bytes:
        nonlocal out
        start, deadline = len(out), time.monotonic() + 60
        while want not in out[start:]:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no {want!r} within 60 s: {out[-3000:]!r}"
            chunk = os.read(master, 65536)
            assert chunk, f"watch ended before {want!r}: {out[-2000:]!r}"
            out += chunk
        return out[start:]

    try:
        read_until(b"agent 3 wrote")
        read_until(b"1 +1 -0")  # a diff stat of the running attempts
        os.write(master, b"2")
        assert re.search(rb"> 2\s+-\s+running", read_until(b"> 2"))
        os.write(master, b"\x1b[B")  # down: 3
        read_until(b"> 3")
        os.write(master, b"\x1b[A")  # up: 2 again
        read_until(b"> 2")
        os.write(master, b"d")  # its diff through the pager (PAGER=cat): the worktree's uncommitted file
        shown = read_until(b"+line from 2")
        assert b"2.txt" in shown and b"line from 1" not in shown
        read_until(b"shown: the diff of 2")
        os.write(master, b"o")  # not under --tmux: says how to see it instead
        read_until(b"git parallel logs T 2")
        os.write(master, b"a")
        read_until(b"abort instance 2 of T? y/N")
        os.write(master, b"n")
        read_until(b"abort of 2 cancelled")
        assert gp.json("status", "T")["run"]["instances"][1]["status"] == "running"
        os.write(master, b"a")
        read_until(b"y/N")
        os.write(master, b"y")
        read_until(b"2 aborted")
        statuses = [i["status"] for i in gp.json("status", "T")["run"]["instances"]]
        assert statuses == ["running", "aborted", "running"]
        os.write(master, b"q")
        assert watch.wait(timeout=60) == 0
    finally:
        go.write_text("")
        run.wait(timeout=60)
        if watch.poll() is None:
            watch.kill()
        os.close(master)
    assert [i["status"] for i in gp.json("status", "T")["run"]["instances"]] == ["succeeded", "aborted", "succeeded"]


@pytest.mark.slow  # a private tmux server, three agents in windows, watch in a window of its own: about 5 s
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_watch_inside_tmux_opens_the_chosen_attempts_window(tmp_path: Path) -> None:
    repo, gp, argv, go = setup(tmp_path)
    sock = Path(tempfile.mkdtemp(prefix="gpw-", dir="/tmp"))  # a private tmux server
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(TMUX_TMPDIR=str(sock), TERM="xterm")

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env).stdout

    run = subprocess.Popen(["git", "parallel", "run", "T", "--tmux", "--", *argv], cwd=repo, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while sorted(tmux("list-windows", "-t", "=parallel-T", "-F", "#{window_name}").split()) != ["1", "2", "3"]:
            assert time.monotonic() < deadline and run.poll() is None, "the run's windows did not open"
            time.sleep(0.1)
        tmux("new-session", "-d", "-s", "viewer", "-x", "160", "-y", "40", "-c", str(repo), "--",
             "git", "parallel", "watch", "T")

        def shown(want: str) -> None:
            deadline = time.monotonic() + 60
            while want not in tmux("capture-pane", "-p", "-t", "=viewer:"):
                assert time.monotonic() < deadline, tmux("capture-pane", "-p", "-t", "=viewer:")
                time.sleep(0.1)

        shown("agent 3 waiting")
        # The window shown first is whichever agent started first: show 1's.
        ids = dict(line.split()[::-1] for line in
                   tmux("list-windows", "-t", "=parallel-T", "-F", "#{window_id} #{window_name}").splitlines())
        tmux("select-window", "-t", ids["1"])
        assert tmux("display-message", "-p", "-t", "=parallel-T:", "#{window_name}").strip() == "1"
        tmux("send-keys", "-t", "=viewer:", "2")
        shown("> 2")
        tmux("send-keys", "-t", "=viewer:", "o")
        shown("switched to 2's window")
        # The run's session now shows instance 2's window (the view stays where it was).
        assert tmux("display-message", "-p", "-t", "=parallel-T:", "#{window_name}").strip() == "2"
        tmux("send-keys", "-t", "=viewer:", "q")
    finally:
        go.write_text("")
        run.wait(timeout=60)
        tmux("kill-server")
        shutil.rmtree(sock, ignore_errors=True)
    assert [i["status"] for i in gp.json("status", "T")["run"]["instances"]] == ["succeeded"] * 3
