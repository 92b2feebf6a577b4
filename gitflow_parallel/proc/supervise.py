"""Starting and stopping a command: the one supervisor of agents and gates.

- **Start.** Arguments as a list (never a shell), stdin from /dev/null (or what the caller gives),
  stdout and stderr to the caller's log, in a new session so that its pid
  is also its process group, and with ``GIT_PARALLEL_SCOPE`` set so that
  what it daemonizes out of the group can be found (``reaper``).  The
  watchdog learns the group before anything else can happen to it.  A
  command that cannot be started gets one message (``cannot_start``) and a
  shell's exit code (127 not found, 126 not executable).
- **Stop.** SIGTERM to the whole group, then SIGKILL ``KILL_GRACE`` seconds
  later (3; ``GIT_PARALLEL_KILL_GRACE`` overrides it) - for a timeout, a
  stopped runner, ``abort`` and the watchdog alike.
- **End.** When the leader exits, whatever it left in its group is killed
  while the unreaped leader still reserves the group id (so no recycled pid
  can be hit), then what left the group carrying its scope, and only then
  is it reaped.  Every wait here therefore asks *without reaping*.
- **Signals.** ``Signals`` turns the stop signals into a flag and wakes a
  loop's wait on them and on SIGCHLD, for the runner's event loop.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Union

from gitflow_parallel.files import env_seconds
from gitflow_parallel.proc import cgroup, namespace, reaper

if TYPE_CHECKING:
    from gitflow_parallel.proc.sandbox import Fence
    from gitflow_parallel.proc.watchdog import Watchdog

# Seconds between SIGTERM and SIGKILL when a command is stopped.
KILL_GRACE = env_seconds("GIT_PARALLEL_KILL_GRACE", 3.0)
EXIT_NOT_FOUND, EXIT_NOT_EXECUTABLE = 127, 126  # what a shell would report
POLL = 0.02  # between looks when nothing can wake us
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

Output = Union[int, IO[bytes]]


def signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


# What starting a command can raise: the OS's refusals, a NUL byte in an
# argument or environment value (ValueError), a failed child setup.
START_ERRORS = (OSError, ValueError, subprocess.SubprocessError)


def cannot_start(program: str, exc: Exception) -> tuple[int, str]:
    """A shell-like exit code and a message for a command that never started."""
    if isinstance(exc, FileNotFoundError):
        where = "" if "/" in program else " on PATH"
        return EXIT_NOT_FOUND, f"command not found: {program!r} (no such file{where})"
    if isinstance(exc, PermissionError):
        return EXIT_NOT_EXECUTABLE, f"command not executable: {program!r} (permission denied; chmod +x it?)"
    if not isinstance(exc, OSError):
        return EXIT_NOT_EXECUTABLE, f"cannot execute {program!r}: {exc}"
    if exc.errno == errno.ENOEXEC:
        return EXIT_NOT_EXECUTABLE, f"command not executable: {program!r} (not a binary and no #! line)"
    if exc.errno == errno.E2BIG:
        return EXIT_NOT_EXECUTABLE, (f"cannot execute {program!r}: its arguments or environment are over the "
                                     "system's limit (Argument list too long; one argument: 128 KiB on Linux)")
    return EXIT_NOT_EXECUTABLE, f"cannot execute {program!r}: {exc.strerror or exc}"


# -- groups ---------------------------------------------------------------------------
def killpg(pgid: int, sig: int) -> None:
    """Signal a group; if that is refused (a member we may not signal) or the
    group is gone, at least its leader, if it is still there."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def exited(pid: int) -> bool:
    """Has our child ``pid`` exited?  Asked without reaping it, so that its
    pid, and with it the process group id, stays reserved until we clear the
    group."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def wait_unreaped(pid: int, timeout: float | None) -> bool:
    """Wait until our child ``pid`` exits, at most ``timeout`` seconds,
    without reaping it (see ``exited``).  A pidfd wakes us at once; without
    one (old kernels) we poll."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if poller.poll(None if left is None else int(left * 1000) + 1):
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return exited(pid)
        finally:
            os.close(fd)
    delay = 0.001
    while not exited(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def stop_groups(pgids: Iterable[int], term: bool = True,
                done: Callable[[int], bool] = lambda g: not group_exists(g)) -> list[int]:
    """The kill path: SIGTERM every group (unless the caller already did),
    wait up to ``KILL_GRACE`` until ``done`` says each has ended, SIGKILL the
    rest.  Returns the groups that needed the SIGKILL."""
    groups = list(pgids)
    if term:
        for pgid in groups:
            killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE
    while True:
        groups = [g for g in groups if not done(g)]
        if not groups or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    for pgid in groups:
        killpg(pgid, signal.SIGKILL)
    return groups


# -- one command ------------------------------------------------------------------------
@dataclass
class Process:
    """A started command: its group, its scope, and where its stop stands."""

    popen: subprocess.Popen[bytes]
    scope: str
    watchdog: "Watchdog"
    started: float
    term_at: float | None = None  # when it was sent SIGTERM
    killed: bool = False  # SIGKILL after the grace
    reason: str | None = None  # why it was stopped ("timeout", a signal name)
    status: int | None = None  # the pipe bwrap writes its status to (namespace layer)
    never_ran: bool = False  # bwrap ended before the command ran (read at ``end``)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> bool:
        return exited(self.pid)

    def stop(self, reason: str | None, now: float | None = None) -> None:
        """SIGTERM the group (once); ``wait`` sends the SIGKILL after the grace."""
        self.reason = self.reason or reason
        if self.term_at is None:
            self.term_at = time.monotonic() if now is None else now
            killpg(self.pid, signal.SIGTERM)

    def wait(self, timeout: float | None) -> bool:
        """Wait for the leader to exit, stopping it past ``timeout``; True if
        it timed out (it has exited either way, unreaped)."""
        if wait_unreaped(self.pid, timeout):
            return False
        self.stop("timeout")
        if not wait_unreaped(self.pid, KILL_GRACE):
            self.killed = True
            killpg(self.pid, signal.SIGKILL)
        return True

    def end(self, keep: set[int] | None = None) -> int:
        """Kill what it left in its group and out of it, then reap it; its
        exit status (negative: the signal).  With ``keep`` (the pids of the
        other commands still running), also our orphaned descendants that
        carry its scope or none."""
        # Anything left running would go on writing to the checkout after
        # its work is judged or committed.
        killpg(self.pid, signal.SIGKILL)

        def sweep() -> None:  # ... what daemonized out of the group
            reaper.sweep({self.scope})
            if keep is not None:
                reaper.sweep_orphans(self.scope, keep | {self.watchdog.pid or 0, self.pid})

        # In bwrap's PID namespace that is gone with its init, which the
        # group's kill reached and ``reap_group`` collects (``reaper``).
        in_namespace = self.status is not None and reaper.is_subreaper()  # (its init comes to us)
        if not in_namespace:
            sweep()
        self.watchdog.ended(self.pid)  # before the reap, so the group id is not reused under it
        code = self.popen.wait()
        if not reaper.reap_group(self.pid) and in_namespace:
            sweep()
        if self.status is not None:
            self.never_ran = code == 1 and self.reason is None and namespace.never_ran(namespace.read_status(self.status))
            os.close(self.status)
            self.status = None
        return code


def new_scope(kind: str) -> str:
    """A fresh scope token for a command that no record names."""
    return f"{kind}-{os.getpid()}-{os.urandom(8).hex()}"


def start(argv: list[str], cwd: str | Path, env: dict[str, str], stdout: Output, stderr: Output | None,
          scope: str, watchdog: "Watchdog", fence: "Fence | None" = None,
          stdin: Output = subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()) -> Process:
    """Start ``argv`` as its own process group (``stderr`` None: into
    ``stdout``), inside ``fence`` if given (``sandbox``), with ``pass_fds``
    open in it (a gate's results pipe).  Raises
    one of ``START_ERRORS`` when it cannot start (see ``cannot_start``).  The caller has
    made itself a subreaper (``reaper``)."""
    env = {**env, reaper.SCOPE_ENV: scope}
    # Under the namespace layer bwrap says, through a pipe, whether the
    # command ran at all (``Process.never_ran``).
    status_r, status_w = os.pipe() if fence is not None and fence.mounts is not None else (None, None)
    try:
        wrapped = argv if fence is None else fence.wrap(argv, cwd, env, status_w)
        wrapped = cgroup.wrap(wrapped, scope, cwd, env) if wrapped is argv else wrapped

        def begin() -> subprocess.Popen[bytes]:
            return subprocess.Popen(wrapped, cwd=str(cwd), env=env, stdin=stdin,
                                    stdout=stdout, stderr=subprocess.STDOUT if stderr is None else stderr,
                                    start_new_session=True,
                                    pass_fds=(*pass_fds, *(() if status_w is None else (status_w,))))

        popen = begin() if fence is None else fence.spawn(begin)
    except BaseException:
        for fd in (status_r, status_w):
            if fd is not None:
                os.close(fd)
        raise
    if status_w is not None:
        os.close(status_w)
    watchdog.started(popen.pid, scope)
    return Process(popen=popen, scope=scope, watchdog=watchdog, started=time.monotonic(), status=status_r)


def stop_all(processes: Iterable[Process]) -> None:
    """Leave none of ``processes`` running: SIGTERM, the grace, SIGKILL, reaped."""
    procs = list(processes)
    stop_groups([p.pid for p in procs], done=exited)
    for proc in procs:
        proc.end()


# -- signals -------------------------------------------------------------------------------
class Signals:
    """Stop signals become a flag, and they (and SIGCHLD) wake the loop's
    wait through a pipe, so a child's exit or a Ctrl-C is seen at once
    without busy polling.  Only the main thread can own signals; elsewhere
    the loop polls."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self.enabled = threading.current_thread() is threading.main_thread()
        self._old: dict[int, Any] = {}
        self._old_wakeup = -1
        self._r = self._w = -1

    def __enter__(self) -> "Signals":
        if not self.enabled:
            return self
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._old_wakeup = signal.set_wakeup_fd(self._w, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            self._old[sig] = signal.signal(sig, self._on_stop)
        self._old[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, self._on_child)
        for sig in self._old:
            # Restart interrupted system calls (libgit2's among them); the
            # wait below is woken by the pipe, which does not need EINTR.
            signal.siginterrupt(sig, False)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.enabled:
            return
        for sig, old in self._old.items():
            signal.signal(sig, old)
        signal.set_wakeup_fd(self._old_wakeup)
        os.close(self._r)
        os.close(self._w)

    def _on_stop(self, signum: int, frame: object) -> None:
        self.caught.append(signum)

    def _on_child(self, signum: int, frame: object) -> None:
        pass  # the wakeup byte is all we need

    def wait(self, timeout: float | None) -> None:
        if not self.enabled:
            time.sleep(POLL if timeout is None else max(0.0, min(timeout, POLL)))
            return
        if timeout is not None and timeout <= 0:
            timeout = 0
        select.select([self._r], [], [], timeout)
        try:
            while os.read(self._r, 512):
                pass
        except BlockingIOError:
            pass
