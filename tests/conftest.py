"""Shared fixtures: real git repositories in tmp_path, sealed from the user's
git configuration, and a ``gp`` helper that runs the real ``git parallel``
(this checkout's code): in this process where nothing about the process
itself is under test, as a subprocess where it is (see ``GP``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import pygit2
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _seal(env: dict[str, str], home: Path, shim: Path) -> None:
    for key in list(env):
        if key.startswith(("GIT_", "GIT_PARALLEL_")):
            del env[key]
    env.update({
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.com",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.com",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
        "PYTHONPATH": str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
        "PATH": str(shim) + os.pathsep + env.get("PATH", ""),
        "LC_ALL": "C.UTF-8",
        # The suite runs sandboxed wherever the machine allows it (the
        # namespace layer, else Landlock); a test that hands over through
        # a file outside the worktree says so with UNFENCED.
        "GIT_PARALLEL_SANDBOX": "auto",
    })


@pytest.fixture(scope="session")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PATH folder whose ``git-parallel`` runs this checkout's code."""
    shim = tmp_path_factory.mktemp("shim")
    script = shim / "git-parallel"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m gitflow_parallel \"$@\"\n")
    script.chmod(0o755)
    return shim


@pytest.fixture(autouse=True)
def sealed(tmp_path: Path, shim_dir: Path, monkeypatch: pytest.MonkeyPatch,
           request: pytest.FixtureRequest) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    _seal(env, home, shim_dir)
    if request.node.get_closest_marker("unfenced") is not None:
        env["GIT_PARALLEL_SANDBOX"] = "off"
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for level in (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG, pygit2.enums.ConfigLevel.SYSTEM):
        pygit2.settings.search_path[level] = str(home)
    return env


def git(cwd: Path | str, *args: str, check: bool = True, input: str | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout.strip()


# Verbs whose process is part of what they do: a worker that loops on a
# remote, a view that loops until a run ends, the demo, attach (a terminal),
# the hooks' entry.  They always run as a subprocess.  `run` is not among
# them: it leaves this process as it found it (its subreaper flag and signal
# handlers are set back), and its deaths are tested with crash points (an
# environment, so a subprocess) and with runners started by hand.  But it
# reaps and sweeps what it finds among its children, so while the test has
# processes of its own (a runner started by hand), it runs as a subprocess.
OWN_PROCESS = frozenset({"worker", "watch", "demo", "attach", "hook-impl"})


class GP:
    """Runs ``git parallel`` in a repository and checks its exit status.

    A call runs in this process (the CLI's ``main`` with its own argv, cwd,
    stdin and captured stdout/stderr: a python start and every import saved)
    unless the verb is one of ``OWN_PROCESS``, the call sets environment
    variables (a crash point, a timeout read by the process), or the test
    asks for ``own_process=True`` because the process boundary is its subject."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str, code: int | None = 0, cwd: Path | str | None = None,
                 env: dict[str, str] | None = None, timeout: float = 120,
                 own_process: bool = False) -> subprocess.CompletedProcess[str]:
        where = str(cwd or self.cwd)
        verb = next((a for a in args if not a.startswith("-")), "")
        if own_process or env or verb in OWN_PROCESS or "--until-pass" in args or (verb == "run" and _children()):
            proc = _run_subprocess(args, where, env, timeout)
        else:
            proc = _run_in_process(args, where)
        if code is not None and proc.returncode != code:
            raise AssertionError(f"git parallel {' '.join(args)} exited {proc.returncode}, expected {code}:\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def json(self, *args: str, code: int | None = 0, **kw: Any) -> dict[str, Any]:
        proc = self(*args, "--json", code=code, **kw)
        return json.loads(proc.stdout)


def _children() -> bool:
    """Has this process a child (running, or exited and not yet reaped)?"""
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "children").read_text().strip():
                return True
        except OSError:
            continue
    return False


def _run_subprocess(args: tuple[str, ...], cwd: str, env: dict[str, str] | None,
                    timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "parallel", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=timeout)


def _run_in_process(args: tuple[str, ...], cwd: str) -> subprocess.CompletedProcess[str]:
    from gitflow_parallel import cli

    # Files, not buffers: what the verb hands to a child (``stderr=sys.stderr``) needs a file descriptor.
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    streams = [io.TextIOWrapper(b, encoding="utf-8", errors="surrogateescape", write_through=True)
               for b in (out, err)]
    stdin = open(os.devnull, encoding="utf-8")
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, os.getcwd())
    code = 0
    try:
        sys.argv = ["git-parallel", *args]
        sys.stdin, sys.stdout, sys.stderr = stdin, streams[0], streams[1]
        os.chdir(cwd)
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved[:4]
        with contextlib.suppress(OSError):
            os.chdir(saved[4])
        texts = []
        for stream, raw in zip(streams, (out, err)):
            stream.flush()
            raw.seek(0)
            texts.append(raw.read().decode("utf-8", "surrogateescape"))
            stream.close()
        stdin.close()
    return subprocess.CompletedProcess(["git", "parallel", *args], code, texts[0], texts[1])


def make_repo(path: Path, files: dict[str, str] | None = None, config: str | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if config is not None:
        (path / ".gitparallel.yaml").write_text(config)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def gp(repo: Path) -> GP:
    return GP(repo)


def without_scratch(porcelain: str) -> str:
    """``git worktree list --porcelain`` without git-parallel's scratch
    checkouts (its own cache of clean checkouts for gates, kept between
    commands and removed with the run)."""
    blocks = porcelain.split("\n\n")
    return "\n\n".join(b for b in blocks if "/scratch+" not in b.split("\n", 1)[0])


def snapshot(repo: Path) -> dict[str, Any]:
    """What a refused command must leave unchanged."""
    common = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    runs = common / "parallel" / "runs"
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "worktrees": without_scratch(git(repo, "worktree", "list", "--porcelain")),
        "admin": sorted(p.name for p in (common / "worktrees").iterdir() if not p.name.startswith("scratch+"))
                 if (common / "worktrees").is_dir() else [],
        "runs": sorted((p.name, p.read_bytes()) for p in runs.glob("*.yaml")) if runs.is_dir() else [],
        "status": git(repo, "status", "--porcelain"),
    }


def wait_for(what: Callable[[], Any], timeout: float = 60.0, every: float = 0.05) -> Any:
    """``what()``'s first true value, asked every ``every`` seconds; fails
    the test after ``timeout`` seconds (tmux panes, background processes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


# An agent for the tests: writes each NAME=CONTENT argument (``\\n`` for a
# newline) as a file of its worktree.
AGENT = textwrap.dedent("""
    import sys, pathlib
    for arg in sys.argv[1:]:
        name, _, content = arg.partition("=")
        path = pathlib.Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content.replace("\\\\n", "\\n"))
""")
