"""A cgroup per scope, where cgroup v2 is writable: the fence nothing leaves.

The scope in the environment and the subreaper (see ``reaper``) catch a
process that leaves its group, except one that scrubs its environment after
the verb that would reap it was killed with ``kill -9``.  A cgroup catches
that one too: whatever a process does, its descendants stay in its cgroup,
and writing ``1`` to ``cgroup.kill`` ends them all.

A scope's cgroup is ``<our cgroup>/git-parallel-<scope>``, made where our own
cgroup in the cgroup2 hierarchy is writable (root, or a delegated systemd
user slice); elsewhere, or with ``GIT_PARALLEL_CGROUP=0``, nothing here does
anything and the other two fences are all there is.  The command enters its
cgroup itself before it is executed (a ``sh`` writes ``0`` to
``cgroup.procs``, then ``exec``s it), so nothing it forks starts outside.
``reaper.sweep`` kills a scope's cgroup and removes it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import time
from pathlib import Path

ENV = "GIT_PARALLEL_CGROUP"
_ENTER = '{ echo 0 >"$0/cgroup.procs"; } 2>/dev/null; exec "$@"'
_EMPTY_WAIT = 2.0  # seconds for a killed cgroup to empty


@functools.lru_cache(maxsize=None)
def base() -> Path | None:
    """Our own cgroup's directory in the cgroup2 hierarchy, if we may make
    cgroups under it; None otherwise."""
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        return None
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as handle:
            own = next((line[3:].strip() for line in handle if line.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            mounts = [line.split() for line in handle]
    except OSError:
        return None
    if own is None:
        return None
    for fields in mounts:
        dash = fields.index("-") if "-" in fields else -1
        if dash > 0 and fields[dash + 1] == "cgroup2":
            path = Path(fields[4]) / own.lstrip("/")
            if os.access(path, os.W_OK | os.X_OK) and os.access(path / "cgroup.procs", os.W_OK):
                return path
    return None


def in_force() -> str:
    """Which fences hold what a command starts: for the README's question
    and the events log."""
    return "cgroup" if base() is not None else "subreaper"


def path_of(scope: str) -> Path | None:
    """The cgroup ``wrap`` puts ``scope`` in, or None where there are none."""
    root = base()
    return None if root is None else _path(root, scope)


def _path(root: Path, scope: str) -> Path:
    return root / ("git-parallel-" + re.sub(r"[^A-Za-z0-9_.-]", "_", scope))


def wrap(argv: list[str], scope: str, cwd: str | Path, env: dict[str, str]) -> list[str]:
    """``argv`` made to start inside ``scope``'s cgroup (made now), or
    ``argv`` itself where there is none, or where it names no program that
    can run (so that starting it fails as it would have, with the same
    error)."""
    root = base()
    if root is None or not argv or not _runnable(argv[0], cwd, env):
        return argv
    path = _path(root, scope)
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return argv
    return ["/bin/sh", "-c", _ENTER, str(path), *argv]


def _runnable(program: str, cwd: str | Path, env: dict[str, str]) -> bool:
    """Would ``execve`` run it?  (``sh``'s ``exec`` would also run a file
    that is neither ``#!`` nor a binary, as a script, where starting it
    directly fails: such a file is left to fail as it would have.)"""
    if "/" in program:
        full: str | None = os.path.join(cwd, program)
    else:
        full = shutil.which(program, path=env.get("PATH", os.defpath))
    if full is None or not os.path.isfile(full) or not os.access(full, os.X_OK):
        return False
    try:
        with open(full, "rb") as handle:
            head = handle.read(4)
    except OSError:
        return False
    return head == b"\x7fELF" or head[:2] == b"#!"


def kill(scopes: set[str]) -> list[int]:
    """End every process in the cgroups of ``scopes`` and remove the cgroups;
    returns the pids that were in them."""
    root = base()
    if root is None:
        return []
    killed: list[int] = []
    for scope in scopes:
        path = _path(root, scope)
        if not path.is_dir():
            continue
        pids = _procs(path)
        killed.extend(pids)
        if pids:
            _kill_all(path, pids)
        _remove(path)
    return killed


def _procs(path: Path) -> list[int]:
    try:
        return [int(word) for word in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _populated(path: Path) -> bool:
    try:
        return "populated 1" in (path / "cgroup.events").read_text()
    except OSError:
        return False


def _kill_all(path: Path, pids: list[int]) -> None:
    try:
        (path / "cgroup.kill").write_text("1")  # Linux 5.14 and later
    except OSError:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + _EMPTY_WAIT
    while _populated(path) and time.monotonic() < deadline:
        for pid in _procs(path):  # without cgroup.kill, what was forked meanwhile
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)


def _remove(path: Path) -> None:
    """rmdir the cgroup; one still busy (a process that would not die in
    time) is left, and the next sweep of its scope tries again."""
    try:
        path.rmdir()
    except OSError:
        pass
