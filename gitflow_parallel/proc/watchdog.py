"""The safety net under every command git-parallel starts: a forked helper
that stops the process groups still running when the verb that started them
dies without saying goodbye (``kill -9``, a crash point).

One fork per verb (no new Python starts) instead of a hook in every child
keeps each spawn on the fast vfork path, and it reaches the commands' own
children too, which a parent-death signal on the leader would not.  ``run``
starts one per run and says goodbye at the end; ``shared()`` is the one a
verb running gates (``check``, ``merge``, ``judge``) starts on first use.
"""

from __future__ import annotations

import os
import signal
import threading

from gitflow_parallel.proc import reaper
from gitflow_parallel.proc.supervise import STOP_SIGNALS, stop_groups


class Watchdog:
    """A forked helper that stops the verb's process groups if the verb
    dies without saying goodbye.

    Protocol on the pipe, one line each: ``+PGID SCOPE`` (started), ``-PGID``
    (cleared and about to be reaped, so the id is never reused under us),
    ``bye`` (the verb is exiting normally).  The helper is in its own
    session (a Ctrl-C or a kill of the verb's group does not reach it),
    ignores the stop signals, and holds no descriptor but its end of the
    pipe, so it cannot keep a slot, the project lock or a caller's output
    pipe open."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self._w = -1

    def start(self) -> None:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the helper: plain system calls only, then _exit
            try:
                os.setsid()
                for sig in STOP_SIGNALS:
                    signal.signal(sig, signal.SIG_IGN)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.closerange(3, r)
                os.closerange(r + 1, 1 << 16)
                _watch(r)
            finally:
                os._exit(0)
        os.close(r)
        self.pid, self._w = pid, w

    def _send(self, line: str) -> None:
        if self._w < 0:
            return
        try:
            os.write(self._w, line.encode("ascii"))
        except OSError:  # the helper is gone: we lose the safety net, not the verb
            os.close(self._w)
            self._w = -1

    def started(self, pgid: int, scope: str = "") -> None:
        self._send(f"+{pgid} {scope}\n")

    def ended(self, pgid: int) -> None:
        self._send(f"-{pgid}\n")

    def stop(self) -> None:
        self._send("bye\n")
        if self._w >= 0:
            os.close(self._w)
            self._w = -1
        if self.pid is not None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
            self.pid = None


def _watch(fd: int) -> None:
    """The helper's loop: track the groups; on a goodbye-less EOF, stop them."""
    groups: set[int] = set()
    scopes: dict[int, str] = {}
    buf = b""
    clean = False
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        *lines, buf = (buf + chunk).split(b"\n")
        for line in lines:
            if line == b"bye":
                clean = True
            elif line[:1] == b"+":
                pgid, _, scope = line[1:].partition(b" ")
                groups.add(int(pgid))
                if scope:
                    scopes[int(pgid)] = scope.decode(errors="replace")
            elif line[:1] == b"-":
                groups.discard(int(line[1:]))
                scopes.pop(int(line[1:]), None)
    if clean or not groups:
        return
    stop_groups(groups)
    # And what the commands daemonized out of their groups.
    reaper.sweep(set(scopes.values()))


_shared: Watchdog | None = None
_shared_lock = threading.Lock()


def shared() -> Watchdog:
    """This process's watchdog for the gates it runs, started on first use
    (``check`` starts it before its threads).  It is never told goodbye: at
    a normal exit every gate has ended and it has nothing to stop; after a
    ``kill -9`` it stops the gates still running (and what they daemonized)
    instead of leaving them to PID 1."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid is None:
            _shared = Watchdog()
            _shared.start()
        return _shared
