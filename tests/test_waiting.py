"""An attempt that waits for input: seen by the runner under `--tmux` (the
pane's last line unchanged while a process of the agent reads its terminal)
or said by the agent itself in its events file; shown by `watch` (and its
--json), and sent to the `notify:` command once per spell of waiting.  Real
git, real tmux (a private server), real agents that read their terminal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, make_repo, wait_for
from test_watch import reader, until

PY = sys.executable

# Appends each event it reads to received.jsonl beside itself.
NOTIFY = textwrap.dedent("""
    import pathlib, sys
    with open(pathlib.Path(__file__).with_name("received.jsonl"), "a") as out:
        out.write(sys.stdin.read())
""")
# Says it waits in its events file, waits for the go-file, says it resumed,
# and ends once told to.
SAYS = textwrap.dedent("""
    import json, os, sys, time
    def event(**line):
        with open(os.environ["GIT_PARALLEL_EVENTS"], "a") as out:
            out.write(json.dumps(line) + "\\n")
    event(event="waiting", message="approve the schema change?")
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    event(event="resumed")
    open("done.txt", "w").write("approved\\n")
    while not os.path.exists(sys.argv[1] + ".end"):  # still running while watch sees it resumed
        time.sleep(0.02)
""")
# Instance 1 asks on its terminal and, once answered, waits for the go-file;
# instance 2 only waits for the go-file, silent (a quiet pane, no read).
ASKS = textwrap.dedent("""
    import os, pathlib, sys, time
    if os.environ["GIT_PARALLEL_INSTANCE"] == "1":
        answer = input("deploy to staging? ")
        pathlib.Path("answer.txt").write_text(answer + "\\n")
        print("thanks", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
""")


def project(tmp_path: Path) -> tuple[Path, GP, Path]:
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in (("notify.py", NOTIFY), ("says.py", SAYS), ("asks.py", ASKS)):
        (tools / name).write_text(text)
    cfg = f"gates:\n  - name: ok\n    run: [{PY}, -c, 'pass']\nnotify: [{PY}, {tools / 'notify.py'}]\n"
    repo = make_repo(tmp_path / "repo", config=cfg)
    return repo, GP(repo), tools


def received(tools: Path, kind: str) -> list[dict[str, Any]]:
    path = tools / "received.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def json_events(seen: list[str], kind: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, seen) if e.get("event") == kind]


@pytest.mark.slow  # real processes and a handshake: about 3 s; CI runs the slow tier
def test_an_agent_that_says_it_waits_is_shown_waiting_and_notified_without_tmux(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    gp("spawn", "T", "-n", "1")
    go = tmp_path / "go"
    watch = subprocess.Popen(["git", "parallel", "watch", "T", "--json"], cwd=repo, stdout=subprocess.PIPE, text=True)
    lines, seen = reader(watch.stdout), []
    run = subprocess.Popen(["git", "parallel", "run", "T", "--", PY, str(tools / "says.py"), str(go)], cwd=repo,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    until(lines, seen, '"event": "waiting"')
    said = json_events(seen, "waiting")
    assert [(e["instance"], e["source"], e["message"]) for e in said] == [("1", "agent", "approve the schema change?")]
    sent = wait_for(lambda: received(tools, "waiting"))
    assert [(e["instance"], e["attempt"], e["source"], e["message"]) for e in sent] == [
        ("1", 0, "agent", "approve the schema change?")]
    go.write_text("")
    until(lines, seen, '"event": "resumed"')
    (tmp_path / "go.end").write_text("")
    _, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    gp("check", "T")
    gp("pick", "T")
    while (line := lines.get(timeout=60)) is not None:
        seen.append(line)
    assert watch.wait(timeout=60) == 0
    kinds = [e.get("event") for e in map(json.loads, seen) if e.get("instance") == "1"]
    assert kinds.index("waiting") < kinds.index("resumed") < kinds.index("verdict")
    assert len(received(tools, "waiting")) == 1  # once per spell, however long it lasts
    assert git(repo, "show", "parallel/T/1:done.txt") == "approved"


@pytest.mark.slow  # a tmux server, two agents, the quiet time: about 5 s
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_under_tmux_a_prompt_read_from_the_terminal_is_waiting_and_a_quiet_pane_alone_is_not(tmp_path: Path) -> None:
    repo, gp, tools = project(tmp_path)
    gp("spawn", "T", "-n", "2")
    go = tmp_path / "go"
    sock = Path(tempfile.mkdtemp(prefix="gpw-", dir="/tmp"))  # a private tmux server; short socket path
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env.update(TMUX_TMPDIR=str(sock), GIT_PARALLEL_WAIT_QUIET="0.5")

    def tmux(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env)

    # Its own group: `git` runs git-parallel as a child, which a kill of
    # `git` alone would leave following the run (it waits for a pick).
    watch = subprocess.Popen(["git", "parallel", "watch", "T", "--json"], cwd=repo, stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    lines, seen = reader(watch.stdout), []
    run = subprocess.Popen(["git", "parallel", "run", "T", "--tmux", "--", PY, str(tools / "asks.py"), str(go)],
                           cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        until(lines, seen, '"event": "waiting"')
        said = json_events(seen, "waiting")
        assert [(e["instance"], e["source"], e["message"]) for e in said] == [("1", "terminal", "deploy to staging?")]
        sent = wait_for(lambda: received(tools, "waiting"))
        assert [(e["instance"], e["source"], e["message"]) for e in sent] == [("1", "terminal", "deploy to staging?")]
        window = tmux("list-windows", "-t", "=parallel-T", "-F", "#{window_id} #{window_name}").stdout
        wid = next(x.split()[0] for x in window.splitlines() if x.split()[1:] == ["1"])
        tmux("send-keys", "-t", wid, "yes", "Enter")
        until(lines, seen, '"event": "resumed"')
        # instance 2 sat silent in its pane all along, reading nothing: never waiting
        assert [e["instance"] for e in json_events(seen, "waiting")] == ["1"]
        go.write_text("")
        _, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
    finally:
        if run.poll() is None:
            run.kill()
        os.killpg(watch.pid, signal.SIGKILL)
        watch.wait()
        tmux("kill-server")
        shutil.rmtree(sock, ignore_errors=True)
    assert [e["instance"] for e in received(tools, "waiting")] == ["1"]
    assert git(repo, "show", "parallel/T/1:answer.txt") == "yes"


def test_the_waiting_state_is_the_last_waiting_or_resumed_line_however_the_file_is_written(tmp_path: Path) -> None:
    from gitflow_parallel.cli.live import event_line, view_lines
    from gitflow_parallel.proc.waiting import EventTail

    events = tmp_path / "1.0.jsonl"
    tail = EventTail(events)
    assert tail.read() is None  # no file yet
    with open(events, "ab") as out:
        out.write(b'{"event": "engine_dispatched"}\nnot json\n[1]\n{"event": "waiting", "message": "Proceed? \\u001b[2J')
    assert tail.read() is None  # half a line is not read yet
    with open(events, "ab") as out:
        out.write(b'[y/n]"}\n')
    said = tail.read()
    assert said is not None and said["source"] == "agent" and said["message"] == "Proceed? \x1b[2J[y/n]"
    with open(events, "ab") as out:
        out.write(b'{"event": "ai_invocation"}\n')
    assert tail.read() == said  # other lines change nothing
    with open(events, "ab") as out:
        out.write(b'{"event": "resumed"}\n{"event": "waiting", "source": "terminal", "message": "$ "}\n')
    assert tail.read()["source"] == "terminal"  # type: ignore[index]
    with open(events, "ab") as out:
        out.write(b'{"event": "engine_exited", "status": "succeeded"}\n')
    assert tail.read() is None

    # shown as waiting, with its question (control characters made visible), and the diff stat
    inst = {"id": "2", "agent": "claude", "status": "running", "attempt": 0, "elapsed_s": 12.0, "verdict": None,
            "last_line": "thinking", "waiting": {"source": "agent", "message": said["message"]},
            "diff": {"files": 3, "added": 40, "removed": 2}, "winner": False}
    view = {"task": "T", "run_id": "PR-x", "status": "running", "picks": {}, "instances": [inst]}
    row = view_lines(view, 200, selected="2")[2]
    assert row.split()[:7] == [">", "2", "claude", "waiting", "0", "12s", "3"]
    assert "+40 -2" in row and "Proceed? \\x1b[2J[y/n]" in row and "\x1b" not in row
    line = event_line({"event": "waiting", "instance": "2", "agent": "claude", "source": "agent",
                       "message": said["message"]})
    assert line == "2 (claude): waiting for input: Proceed? \\x1b[2J[y/n]"
