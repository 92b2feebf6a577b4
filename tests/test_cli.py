"""The command line's front door: help texts, the man page, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import GP, ROOT

COMMANDS = ["init", "spawn", "run", "check", "pick", "merge", "status", "retry", "abort", "cleanup",
            "recover", "validate", "hooks", "demo", "help"]


def test_every_command_has_help(repo: Path, gp: GP) -> None:
    top = gp("-h").stdout
    for name in COMMANDS:
        assert f"  {name} " in top or f"  {name}\n" in top, name
        text = gp(name, "--help").stdout
        assert text.startswith(f"Usage: git parallel {name}"), text
        assert gp("help", name).stdout == text
    assert "_hook" not in top


def test_man_page_is_current() -> None:
    # `git parallel --help` is answered by git with `man git-parallel`.
    from gitflow_parallel.manpage import render

    committed = (ROOT / "man" / "git-parallel.1").read_text()
    assert committed == render(), "regenerate: python -m gitflow_parallel.manpage > man/git-parallel.1"
    proc = subprocess.run(["man", "-l", str(ROOT / "man" / "git-parallel.1")], capture_output=True, text=True,
                          env={"MANPAGER": "cat", "PATH": "/usr/bin:/bin", "TERM": "dumb"})
    if proc.returncode == 0:  # man is optional on a build machine
        assert "git parallel spawn" in proc.stdout.replace("\u2010", "-")


def test_usage_error_exits_2(repo: Path, gp: GP) -> None:
    proc = gp("spawn", code=2)
    assert "Missing argument" in proc.stderr
    proc = gp("no-such-command", code=2)


def test_version(gp: GP) -> None:
    assert "git-parallel" in gp("--version").stdout
