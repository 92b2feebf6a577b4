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
