"""Text from agents, gates and remotes is printed, never obeyed: control
characters in logs, gate output and a worker's claim reach the terminal as
visible escapes (``\\x1b``), and ``logs --raw`` keeps the bytes."""

from __future__ import annotations

import pytest

import os
import pty
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import GP, git, make_repo
import scenarios

PY = sys.executable

# Clear the screen, set the window title, then move up a line and rewrite it:
# on a raw terminal the FAIL line above would read "pass".
NASTY = "\x1b[2J\x1b]0;pwned\x07\x1b[1A\x1b[2K  pass tests\x9b31m\r\u202eok"

AGENT = textwrap.dedent(f"""
    import pathlib, sys
    sys.stdout.write({NASTY!r} + "agent done\\r\\n")
    pathlib.Path("out.txt").write_text("x\\n")
""")
GATE = textwrap.dedent(f"""
    import sys
    sys.stdout.write({NASTY!r} + "\\n")
    sys.exit(1)
""")
ESCAPED = "\\x1b[2J\\x1b]0;pwned\\x07\\x1b[1A\\x1b[2K  pass tests\\x9b31m\\x0d\\u202eok"


def setup(tmp_path: Path) -> tuple[Path, GP]:
    repo, gp = scenarios.project(tmp_path, GATE, agent=AGENT, tools=tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "agent.py"))
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    return repo, gp


def control_free(text: str) -> bool:
    return not any(ord(c) < 0x20 and c not in "\t\n" or 0x7f <= ord(c) <= 0x9f or c == "\u202e" for c in text)


def printed(repo: Path, *args: str) -> bytes:
    """``git parallel ARGS``'s stdout, byte for byte."""
    proc = subprocess.run(["git", "parallel", *args], cwd=repo, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def on_a_terminal(repo: Path, *args: str) -> str:
    """``git parallel ARGS`` with its stdout on a pseudo-terminal."""
    main, child = pty.openpty()
    proc = subprocess.Popen(["git", "parallel", *args], cwd=repo, stdout=child, stderr=subprocess.PIPE)
    os.close(child)
    out = b""
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child side is closed
            break
        if not data:
            break
        out += data
    os.close(main)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    return out.decode("utf-8").replace("\r\n", "\n")  # the terminal's own line ends


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_show_and_logs_print_control_characters_as_escapes(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    for text in (gp("show", "t", "1").stdout, on_a_terminal(repo, "show", "t", "1")):
        assert control_free(text), repr(text)
        # show's tail splits lines where a carriage return stands alone
        first, second = ESCAPED.split("\\x0d")
        assert "FAIL tests" in text and f"| {first}\n" in text and f"| {second}\n" in text

    agent_log = printed(repo, "logs", "t", "1").decode("utf-8")
    assert control_free(agent_log.replace("\r\n", "\n")), repr(agent_log)
    assert agent_log == ESCAPED + "agent done\r\n"  # a CRLF line end is a line end
    on_tty = on_a_terminal(repo, "logs", "t", "1", "--gate", "tests")
    assert control_free(on_tty) and on_tty == ESCAPED + "\n"
    followed = gp("logs", "t", "1", "--gate", "tests", "--follow").stdout
    assert followed == ESCAPED + "\n"

    # --raw: the bytes as written; --json escapes in JSON's own way.
    assert printed(repo, "logs", "t", "1", "--raw") == (NASTY + "agent done\r\n").encode("utf-8")
    assert printed(repo, "logs", "t", "1", "--gate", "tests", "--raw", "-f") == (NASTY + "\n").encode("utf-8")
    assert gp.json("logs", "t", "1", "--gate", "tests")["text"] == NASTY + "\n"
    refused = gp.json("logs", "t", "1", "--raw", code=2)
    assert refused["code"] == "USAGE" and refused["message"] == "give --raw or --json, not both", refused


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_workers_name_from_the_remote_prints_escaped_in_collect(tmp_path: Path) -> None:
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = make_repo(tmp_path / "seed", {"test.sh": "true\n"}, config="gates:\n  - name: tests\n    run: [sh, test.sh]\n")
    git(seed, "push", "-q", str(origin), "main")
    coord, clone = tmp_path / "coord", tmp_path / "w1"
    git(tmp_path, "clone", "-q", str(origin), str(coord))
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    gp = GP(coord)
    gp("spawn", "t", "-n", "1", "--remote", "origin")
    gp("run", "t", "--remote", "origin", "--", "sh", "-c", "echo good > out.txt")
    evil = "w\x1b]0;pwned\x07\x1b[2J"
    GP(clone)("worker", "--remote", "origin", "--once", "--name", evil)

    out = gp("collect", "t").stdout
    assert control_free(out), repr(out)
    assert "w\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert gp.json("collect", "t")["instances"][0]["worker"] == evil


def test_colour_sequences_are_dropped_and_every_other_one_escaped() -> None:
    """A test runner's colours (vitest paints whenever TERM is not dumb, tty
    or not) only paint text: dropped, the log reads as written, and text
    painted to hide (concealed) is shown; any other sequence is escaped.
    Split between two pieces of a stream, a colour sequence is still one."""
    from gitflow_parallel.cli.verb import visible, visible_stream

    log = "\x1b[32m✓\x1b[39m test/a.test.ts \x1b[2m(\x1b[22m3 tests\x1b[38;2;1;2;3m)\x1b[0m \x1b[8mhidden\x1b[28m\x1b[1A\x1b[2K"
    plain = "✓ test/a.test.ts (3 tests) hidden\\x1b[1A\\x1b[2K"
    assert visible(log) == plain
    data = log.encode("utf-8")
    for size in (1, 2, 3, 5, 7):
        pieces = [data[k:k + size] for k in range(0, len(data), size)]
        assert "".join(visible_stream(pieces)) == plain, size
    # A sequence that never ends is not held for ever: escaped as it comes.
    assert "".join(visible_stream([b"\x1b[" + b"1" * 100, b"m"])) == "\\x1b[" + "1" * 100 + "m"
    assert "".join(visible_stream([b"ok\x1b[3", b"1"])) == "ok\\x1b[31"  # cut off at the end: escaped


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_gate_log_in_colour_reads_as_plain_text(tmp_path: Path) -> None:
    gate = "import sys\nsys.stdout.write('\\x1b[1m\\x1b[31mFAIL\\x1b[39m\\x1b[22m test_a \\x1b[2m(1 failed)\\x1b[22m\\n')\nsys.exit(1)\n"
    repo, gp = scenarios.project(tmp_path, gate, agent=AGENT, tools=tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "agent.py"))
    gp("check", "t", code=1)
    for text in (printed(repo, "logs", "t", "1", "--gate", "tests").decode("utf-8"), gp("show", "t", "1").stdout):
        assert "FAIL test_a (1 failed)" in text and control_free(text), repr(text)
    assert "\x1b[31m" in gp.json("logs", "t", "1", "--gate", "tests")["text"]  # --json: the bytes, escaped by JSON
