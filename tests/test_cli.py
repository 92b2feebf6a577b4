"""The command line's front door: help texts, the man page, exit codes."""

from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

from conftest import GP, ROOT

COMMANDS = ["init", "spawn", "run", "done", "check", "pick", "unpick", "merge", "status", "retry", "abort", "cleanup",
            "recover", "validate", "hooks", "demo", "help"]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_every_command_has_help(repo: Path, gp: GP) -> None:
    top = gp("-h").stdout
    for name in COMMANDS:
        assert f"  {name} " in top or f"  {name}\n" in top, name
        text = gp(name, "--help").stdout
        assert text.startswith(f"Usage: git parallel {name}"), text
        assert gp("help", name).stdout == text
    assert "_hook" not in top


def _walk(group, ctx, prefix=""):
    import click

    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        sub = click.Context(cmd, info_name=name, parent=ctx)
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from _walk(cmd, sub, f"{prefix}{name} ")


def test_man_page_is_current() -> None:
    # `git parallel --help` is answered by git with `man git-parallel`.  The
    # page's layout depends on click's version, so what is checked is that it
    # names every command and every option the CLI has now.
    import click

    from gitflow_parallel.cli import main_group

    page = (ROOT / "man" / "git-parallel.1").read_text().replace("\\-", "-")
    ctx = click.Context(main_group, info_name="git parallel")
    for name, cmd in _walk(main_group, ctx):
        assert f".SS {name}" in page, f"{name} missing: python -m gitflow_parallel.manpage > man/git-parallel.1"
        for param in cmd.params:
            if isinstance(param, click.Option):
                for flag in param.opts:
                    assert flag in page, f"{name} {flag} missing: regenerate the man page"
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


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_demo_runs_the_whole_flow(tmp_path: Path, gp: GP) -> None:
    where = tmp_path / "demo"
    proc = gp("demo", "--dir", str(where), cwd=tmp_path, timeout=300)
    out = proc.stdout
    assert "refused, as it should be" in out
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in out
    landed = out.rsplit("main is at ", 1)[1].split()[0]
    repo = where / "calc"
    note = subprocess.run(["git", "notes", "--ref=parallel", "show", "main"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout
    assert '"kind":"pick"' in note and '"winner":"1"' in note
    head = subprocess.run(["git", "rev-parse", "main"], cwd=repo, capture_output=True, text=True).stdout
    assert head.startswith(landed)
    tests = subprocess.run([sys.executable, "-m", "unittest", "-q", "test_calc"], cwd=repo, capture_output=True)
    assert tests.returncode == 0  # the winner really fixed the bugs


def test_unexpected_error_exits_3_with_its_traceback_kept(repo: Path) -> None:
    # The one place that maps errors: an exception that is not a refusal.
    code = "from gitflow_parallel.cli import run_verb; run_verb(False, lambda: 1 / 0)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 3
    assert "internal error: ZeroDivisionError" in proc.stderr and "Traceback" not in proc.stderr
    log = Path(proc.stderr.split("the traceback is in ", 1)[1].split()[0].rstrip(";"))
    assert log.parent == (repo / ".git" / "parallel" / "logs").resolve() or log.parent == repo / ".git" / "parallel" / "logs"
    assert "ZeroDivisionError" in log.read_text() and "Traceback" in log.read_text()

