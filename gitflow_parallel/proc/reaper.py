"""Processes an agent or a gate leaves behind, found and stopped.

A process group is not a fence: an agent that daemonizes (``setsid`` and a
double fork) leaves the group, and a kill of the group misses it.  Two things
catch it here:

- **A scope.** Every command git-parallel starts carries
  ``GIT_PARALLEL_SCOPE=<token>`` in its environment, and whatever it starts
  inherits it (``/proc/<pid>/environ`` is the environment a process was
  started with, which it cannot take back).  ``sweep(token)`` kills every
  process of ours that carries it, wherever it was reparented, until none
  is left.
- **A subreaper.** ``run`` and ``check`` mark themselves
  ``PR_SET_CHILD_SUBREAPER`` (prctl, through ctypes), so an orphaned
  descendant is reparented to them rather than to PID 1: even one that
  scrubbed its environment stays a descendant, and ``sweep_descendants``
  stops those at the end of the verb, before it reports.

Where cgroup v2 is writable, a third fence holds: a cgroup per scope
(``cgroup``), which ``sweep`` kills first.  Linux only; elsewhere ``prctl``
is absent and only the scope sweep (where ``/proc`` exists) and the process
groups remain.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import time
from typing import AbstractSet, Callable, Iterator

from gitflow_parallel.proc import cgroup

SCOPE_ENV = "GIT_PARALLEL_SCOPE"
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
_ROUNDS = 50  # sweeps until a forking process has no child left to make


def agent_scope(run_id: str, inst_id: str, attempt: int) -> str:
    """The scope of an attempt's agent processes (``run`` sets it, ``abort`` sweeps it)."""
    return f"{run_id}/{inst_id}/{attempt}"


@functools.cache
def _libc() -> ctypes.CDLL:
    # Looked up once: find_library runs `ldconfig -p` each time it is asked.
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _prctl(option: int, arg: int) -> int:
    try:
        return int(_libc().prctl(option, ctypes.c_ulong(arg), 0, 0, 0))
    except (OSError, AttributeError):
        return -1


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (idempotent)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


@contextlib.contextmanager
def not_reaping() -> Iterator[None]:
    """While inside, an orphaned descendant goes to PID 1 (or a subreaper
    above us), not to us: for starting a daemon no sweep of ours may reach
    (the tmux server ``run --tmux`` starts).  Leave only once the command
    that daemonized has been reaped: its orphans are placed by then."""
    was = is_subreaper()
    if was:
        _prctl(PR_SET_CHILD_SUBREAPER, 0)
    try:
        yield
    finally:
        if was:
            become_subreaper()


def is_subreaper() -> bool:
    value = ctypes.c_int(0)
    try:
        if _libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return value.value == 1


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b") ", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _scope(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    key = SCOPE_ENV.encode() + b"="
    for item in data.split(b"\0"):
        if item.startswith(key):
            return item[len(key):].decode(errors="replace")
    return None


def scoped(tokens: set[str]) -> list[int]:
    """Processes (other than us) started under one of ``tokens``."""
    me = os.getpid()
    return [pid for pid in _pids() if pid != me and _scope(pid) in tokens]


def descendants(root: int | None = None, prune: AbstractSet[int] = frozenset()) -> list[int]:
    """Every descendant of ``root`` (us), except the subtrees of ``prune``."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _parent(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid in prune:
            continue
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pids: list[int]) -> None:
    """Collect those of ``pids`` that are our (exited) children, so no zombie stays."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent, process group) of ``pid``, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _children() -> list[int]:
    """Our children, from each thread's ``children`` list (a few reads, not
    a walk of /proc); all of /proc where the kernel has no such list."""
    found: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return _pids()
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as handle:
                found += [int(p) for p in handle.read().split()]
        except (OSError, ValueError):
            return _pids()
    return found


def reap_group(pgid: int, wait: float = 0.5) -> bool:
    """Collect what is left of the group of a command we just reaped: the
    sandbox's bwrap leaves its own init process (PID 1 of the command's
    namespace, in the same group) to us, the subreaper, once the command's
    leader is gone; it is dead or dying (``--die-with-parent``).  Only
    members of that group are waited for, so no other command's child is
    reaped under its owner.  False if one was still there after ``wait``
    seconds.  That init exits only once the kernel has killed every other
    process of its namespace, so once it is collected none is left."""
    deadline = time.monotonic() + wait
    me = os.getpid()
    while True:
        left = []
        for pid in _children():
            seen = _stat(pid)
            if seen is None or seen[1] != me or seen[2] != pgid:
                continue
            if seen[0] == "Z":
                _reap([pid])
            else:
                left.append(pid)
        if not left:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def sweep(tokens: set[str]) -> list[int]:
    """SIGKILL every process carrying one of ``tokens`` until none is left;
    returns the pids killed."""
    if not tokens:
        return []
    return cgroup.kill(tokens) + _kill_in_rounds(lambda killed: [p for p in scoped(tokens) if p not in killed or _alive(p)])


def sweep_orphans(token: str, keep: set[int]) -> list[int]:
    """SIGKILL the descendants of ours outside ``keep`` (and its groups' members)
    that carry ``token`` or no scope at all (one that scrubbed its
    environment: it came from whichever command just ended, as far as can be told)."""
    return _kill_in_rounds(lambda killed: [p for p in descendants(prune=keep) if _alive(p)
                                           and _scope(p) in (token, None) and _pgid(p) not in keep])


def _kill_in_rounds(find: Callable[[list[int]], list[int]]) -> list[int]:
    """SIGKILL what ``find`` (given those killed so far) returns, round after
    round, until it finds nothing: a process forked meanwhile is caught by the
    next round."""
    killed: list[int] = []
    for _ in range(_ROUNDS):
        found = find(killed)
        if not found:
            break
        for pid in found:
            _kill(pid, signal.SIGKILL)
        killed.extend(p for p in found if p not in killed)
        time.sleep(0.005)
        _reap(found)
    return killed


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def sweep_descendants(keep: set[int]) -> list[int]:
    """SIGKILL every descendant of ours but those in ``keep``, then reap them; for the end of a verb, when nothing of its own
    runs any more."""
    killed: list[int] = []
    for _ in range(_ROUNDS):
        mine = [p for p in descendants() if p not in keep and _alive(p)]
        if not mine:
            break
        for pid in mine:
            _kill(pid, signal.SIGKILL)
        killed.extend(p for p in mine if p not in killed)
        time.sleep(0.005)
        _reap(mine)
    _reap([p for p in descendants() if _parent(p) == os.getpid() and p not in keep])
    return killed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b") ", 1)[1][:1] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False
