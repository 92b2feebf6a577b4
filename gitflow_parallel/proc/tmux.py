"""``run --tmux`` and ``attach``: agents in a real terminal, one tmux window each.

Headless ``run`` gives an agent ``/dev/null`` and a log file; an interactive
agent (Claude Code in a pane, as claude-squad or workmux users run it) needs
a terminal and a person who can type into it.  With ``--tmux`` each
instance's command runs in its own window of a tmux session named after the
task (``parallel-<task>``, dots and colons as ``_``), and everything else
stays the runner's: slots, the claim, timeouts, stopping, leftovers, notes.

Two small roles of this file make that possible, both started as
``python -I tmux.py ROLE ...`` (this file imports only the standard library
at the top, so it runs without the package on ``sys.path``):

* **wait** is what the runner starts in place of the agent, in its own
  process group exactly as a headless agent.  It writes the agent's argv,
  working directory and environment (the headless one, byte for byte) to a
  private spec file, opens the window (``new-window``, or ``new-session`` for
  the first), and waits for the window's status file; its exit status is the
  agent's.  SIGTERM (a timeout, ``abort``, a stopped runner, the watchdog)
  makes it kill the window first.  A window closed by hand exits 129 (as a
  hang-up would).
* **pane** runs inside the window: it reads and deletes the spec, copies the
  pane's output to the instance's log (``pipe-pane``), runs the agent in its
  own process group in the terminal's foreground (so it can read the
  keyboard), says which pane, process and terminal it has (``pane_file``,
  for ``waiting``), kills whatever the agent left in that group once it exits, and
  writes the status file.

tmux itself is found on PATH; without it ``run --tmux`` is refused with a
message naming the package.  The tmux server is whichever one ``tmux``
reaches (``$TMUX`` inside tmux, else the default socket; ``TMUX_TMPDIR``
moves it).  When none runs, the runner starts it (``start_server``) before
any agent, with no ``GIT_PARALLEL_*`` variable and outside its subreaper,
so the sweeps that stop an agent's leftovers cannot reach it and take
every other window with it; ``exit-empty`` is off until the run is over
(``release_server``), so the server outlives the moments between windows.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

SESSION_PREFIX = "parallel-"
# This file runs as a script (standard library only): the log keeper is found beside it.
RUNLOG = Path(__file__).resolve().with_name("runlog.py")
DEFAULT_LOG_LIMIT = 64 << 20  # as runlog's
POLL = 0.1  # seconds between looks at the status file
WINDOW_POLL = 1.0  # seconds between asks whether the window still exists
HANGUP = 128 + signal.SIGHUP
PACKAGE_HINT = "install the tmux package (Debian/Ubuntu: apt-get install tmux; Fedora: dnf install tmux; " \
               "macOS: brew install tmux), or run without --tmux"


def session_name(task: str) -> str:
    """tmux reads ``.`` and ``:`` in a target as separators."""
    return SESSION_PREFIX + task.replace(".", "_").replace(":", "_")


def find_tmux() -> str | None:
    return shutil.which("tmux")


def require_tmux() -> str:
    from gitflow_parallel import errors as E
    from gitflow_parallel.errors import ParallelError

    found = find_tmux()
    if found is None:
        raise ParallelError(E.EXECUTE_FAILED, "tmux is not installed (not found on PATH); --tmux and attach need it",
                            hint=PACKAGE_HINT)
    return found


def start_server(tmux: str) -> bool:
    """Start the tmux server if none runs; True if this call started it.

    Started by the first window's ``new-session`` instead, the server would
    be a descendant of the runner carrying that agent's scope, and the sweep
    after that agent ends would kill it and every other window (SIGHUP)."""
    from gitflow_parallel import environ as proc_env
    from gitflow_parallel.proc import reaper

    if _tmux(tmux, "list-sessions").returncode == 0:
        return False
    with reaper.not_reaping():
        started = subprocess.run([tmux, "start-server", ";", "set-option", "-s", "exit-empty", "off"],
                                 capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                 env=proc_env.for_command(), cwd="/")
    return started.returncode == 0


def release_server(tmux: str) -> None:
    """Let a server ``start_server`` started exit once it has no session (tmux's default)."""
    _tmux(tmux, "set-option", "-s", "exit-empty", "on")


def waiter_argv(tmux: str, session: str, window: str, cwd: str, log: Path, status: Path,
                argv: list[str], fence: dict[str, object] | None = None, bwrap: bool = False,
                log_limit: int = DEFAULT_LOG_LIMIT) -> list[str]:
    """What the runner starts instead of ``argv`` under ``--tmux`` (``fence``:
    the paths of the Landlock fence the pane puts the agent in; ``bwrap``:
    ``argv`` is bwrap's, which the pane asks for its status; ``log_limit``:
    the cap of the log the pane's output goes to, ``proc/runlog``)."""
    plan = "-"
    if fence is not None:
        plan = str(status.with_name(status.name + ".fence"))
        Path(plan).write_text(json.dumps(fence), encoding="utf-8")
    return [sys.executable, "-I", str(Path(__file__).resolve()), "wait", tmux, session, window, cwd, str(log),
            str(status), plan, "bwrap" if bwrap else "-", str(log_limit), "--", *argv]


# -- the wait role ------------------------------------------------------------------------
def _tmux(tmux: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tmux, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _open_window(tmux: str, session: str, window: str, cwd: str, command: list[str]) -> str:
    """A new window running ``command``; returns its id (``@N``).  The first
    window of a task makes the session; two runners racing for that are fine."""
    last = ""
    for _ in range(5):
        made = _tmux(tmux, "new-window", "-d", "-P", "-F", "#{window_id}", "-t", f"={session}:", "-n", window,
                     "-c", cwd, "--", *command)
        if made.returncode == 0:
            return made.stdout.strip()
        made = _tmux(tmux, "new-session", "-d", "-P", "-F", "#{window_id}", "-s", session, "-n", window,
                     "-c", cwd, "-x", "200", "-y", "50", "--", *command)
        if made.returncode == 0:
            return made.stdout.strip()
        last = made.stderr.strip()
        time.sleep(0.05)
    raise RuntimeError(f"tmux could not open a window in session {session}: {last}")


def _window_exists(tmux: str, window_id: str) -> bool:
    listed = _tmux(tmux, "list-windows", "-a", "-F", "#{window_id}")
    return listed.returncode == 0 and window_id in listed.stdout.split()


def _read_status(status: Path) -> int | None:
    try:
        return int(json.loads(status.read_text(encoding="utf-8"))["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def never_ran(status: Path) -> bool:
    """Did the pane say its bwrap ended before the agent ran (``pane_main``)?"""
    try:
        return json.loads(status.read_text(encoding="utf-8")).get("never_ran") is True
    except (OSError, ValueError, AttributeError):
        return False


def wait_main(tmux: str, session: str, window: str, cwd: str, log: str, status_path: str, fence_path: str,
              argv: list[str], bwrap: bool = False, log_limit: int = DEFAULT_LOG_LIMIT) -> int:
    status = Path(status_path)
    spec = status.with_name(status.name + ".spec")
    fence = None
    if fence_path != "-":
        with open(fence_path, encoding="utf-8") as plan:
            fence = json.load(plan)
        os.unlink(fence_path)
    fd = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the environment may hold secrets
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"argv": argv, "cwd": cwd, "env": dict(os.environ), "tmux": tmux, "log": log,
                   "log_limit": log_limit, "status": str(status), "fence": fence, "bwrap": bwrap}, handle)
    for stale in (status, pane_file(status)):
        try:
            stale.unlink()
        except FileNotFoundError:
            pass
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    pane = [sys.executable, "-I", str(Path(__file__).resolve()), "pane", str(spec)]
    window_id = _open_window(tmux, session, window, cwd, pane)
    print(f"git-parallel: running in tmux window {window_id} of session {session} "
          f"(git parallel attach: `tmux attach -t {session}`)", flush=True)
    next_look = time.monotonic() + WINDOW_POLL
    while True:
        code = _read_status(status)
        if code is not None:
            return code
        if stop:
            _tmux(tmux, "kill-window", "-t", window_id)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline and _read_status(status) is None:
                time.sleep(POLL)
            return 128 + stop[0]
        if time.monotonic() >= next_look:
            next_look = time.monotonic() + WINDOW_POLL
            if not _window_exists(tmux, window_id):
                time.sleep(POLL)  # the status may have been written just as the window closed
                code = _read_status(status)
                if code is not None:
                    return code
                print(f"git-parallel: tmux window {window_id} closed before its command finished", flush=True)
                return HANGUP
        time.sleep(POLL)


# -- the pane role ------------------------------------------------------------------------
def _foreground(pgid: int) -> None:
    """Give the terminal to ``pgid`` (from a background group SIGTTOU would stop us)."""
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(0, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, old)


def _child_setup() -> None:
    os.setpgid(0, 0)
    _foreground(os.getpgrp())


def _setup(fence: dict[str, object] | None) -> Callable[[], None]:
    """The agent's own process group in the terminal's foreground and, when
    the runner fenced the attempt, the same Landlock fence, rebuilt here from
    its paths (``landlock.from_plan``) and applied in the child before it
    runs anything: a fence that cannot be built or applied stops the agent
    from starting (exit 126), never lets it run unfenced."""
    if fence is None:
        return _child_setup
    import importlib.util

    found = importlib.util.spec_from_file_location("_landlock", Path(__file__).with_name("landlock.py"))
    assert found is not None and found.loader is not None
    landlock = importlib.util.module_from_spec(found)
    found.loader.exec_module(landlock)
    ruleset = landlock.from_plan(fence)

    def fenced() -> None:
        _child_setup()
        ruleset.restrict_current()

    return fenced


def _write_status(path: str, code: int, never_ran: bool = False) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump({"exit_code": code, **({"never_ran": True} if never_ran else {})}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def pane_file(status: Path) -> Path:
    """Where the pane role says which pane, process and terminal the agent
    has (read by ``waiting.TerminalProbe``)."""
    return status.with_name(status.name + ".pane")


def _write_pane_file(status: str, pane: str | None, pid: int) -> None:
    try:
        tty = os.ttyname(0)
    except OSError:
        return
    target = pane_file(Path(status))
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps({"pane": pane, "pid": pid, "tty": tty}), encoding="utf-8")
    os.replace(tmp, target)


def pane_main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as handle:
        spec: dict[str, Any] = json.load(handle)
    os.unlink(spec_path)
    tmux, log, status = spec["tmux"], spec["log"], spec["status"]
    pane_id = os.environ.get("TMUX_PANE")
    if pane_id:
        # Capped as a headless agent's log is: its start and end kept (proc/runlog).
        limit = int(spec.get("log_limit") or DEFAULT_LOG_LIMIT)
        keeper = shlex.join([sys.executable, "-I", str(RUNLOG), log, str(limit)])
        _tmux(tmux, "pipe-pane", "-o", "-t", pane_id, keeper)
    env = dict(spec["env"])
    for key in ("TMUX", "TMUX_PANE", "TERM"):  # the terminal is the pane's
        if key in os.environ:
            env[key] = os.environ[key]
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed window: the agent's group gets the hang-up
    argv: list[str] = spec["argv"]
    said: int | None = None
    if spec.get("bwrap"):
        # bwrap says on this pipe whether the agent ran at all, as it does
        # to a headless runner (namespace.never_ran).
        said, told = os.pipe()
        argv = [argv[0], "--json-status-fd", str(told), *argv[1:]]
    try:
        child = subprocess.Popen(argv, cwd=spec["cwd"], env=env, preexec_fn=_setup(spec.get("fence")),
                                 pass_fds=() if said is None else (told,))
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        print(f"git-parallel: cannot run {spec['argv'][0]!r}: {getattr(exc, 'strerror', None) or exc}", flush=True)
        _write_status(status, code)
        return code
    finally:
        if said is not None:
            os.close(told)
    _write_pane_file(status, pane_id, child.pid)
    while True:
        try:
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            break
    try:
        os.killpg(child.pid, signal.SIGKILL)  # what it left behind; the unreaped leader holds the group id
    except (ProcessLookupError, PermissionError):
        pass
    rc = child.wait()
    _foreground(os.getpgrp())
    code = rc if rc >= 0 else 128 - rc
    _write_status(status, code, said is not None and _never_ran(said, rc, spec["argv"], env))
    return code


def _never_ran(said: int, rc: int, argv: list[str], env: dict[str, str]) -> bool:
    """Did bwrap end before the agent ran: status 1 and no exit code of the
    agent on its status pipe (the test of ``namespace.never_ran``), with
    the agent's command there to run (else its exec failed, which is the
    agent's own failure, as it would be without a sandbox)?  Closes ``said``."""
    with os.fdopen(said, "rb") as pipe:
        status = pipe.read(65536)
    if rc != 1 or b'"exit-code"' in status or "--" not in argv[1:]:
        return False
    command = argv[argv.index("--", 1) + 1:][:1]
    if not command:
        return False
    found = command[0] if "/" in command[0] else shutil.which(command[0], path=env.get("PATH"))
    return found is not None and os.access(found, os.X_OK)


def main(argv: list[str]) -> int:
    if argv[:1] == ["wait"] and "--" in argv:
        sep = argv.index("--")
        tmux, session, window, cwd, log, status, fence, bwrap, limit = argv[1:sep]
        return wait_main(tmux, session, window, cwd, log, status, fence, argv=argv[sep + 1:], bwrap=bwrap == "bwrap",
                         log_limit=int(limit))
    if argv[:1] == ["pane"] and len(argv) == 2:
        return pane_main(argv[1])
    print("usage: tmux.py wait TMUX SESSION WINDOW CWD LOG STATUS FENCE|- bwrap|- LOG_LIMIT -- CMD... | pane SPEC",
          file=sys.stderr)
    return 2


# -- attach ---------------------------------------------------------------------------------
def attach_target(task: str, inst_id: str | None) -> tuple[str, list[list[str]]]:
    """The tmux commands that show TASK's session (at instance ID's window)."""
    from gitflow_parallel import errors as E
    from gitflow_parallel.errors import ParallelError

    tmux = require_tmux()
    session = session_name(task)
    if _tmux(tmux, "has-session", "-t", f"={session}").returncode != 0:
        raise ParallelError(E.RUN_NOT_FOUND, f"no tmux session {session}: nothing of {task!r} runs under --tmux now",
                            hint=f"start one with `git parallel run {task} --tmux -- CMD`")
    steps: list[list[str]] = []
    if inst_id is not None:
        listed = _tmux(tmux, "list-windows", "-t", f"={session}", "-F", "#{window_id} #{window_name}").stdout
        ids = [line.split(" ", 1)[0] for line in listed.splitlines() if line.split(" ", 1)[-1] == inst_id]
        if not ids:
            raise ParallelError(E.BRANCH_NOT_FOUND, f"instance {inst_id} has no window in tmux session {session}",
                                hint=f"`tmux list-windows -t {session}` shows what runs; it may have finished")
        steps.append([tmux, "select-window", "-t", ids[-1]])
    inside = bool(os.environ.get("TMUX"))
    steps.append([tmux, "switch-client" if inside else "attach-session", "-t", f"={session}"])
    return session, steps


def refuse_without_terminal(session: str) -> None:
    """``attach`` outside tmux shows the session in this terminal: without
    one, tmux would only say ``open terminal failed: not a terminal``."""
    from gitflow_parallel import errors as E
    from gitflow_parallel.errors import ParallelError

    if os.environ.get("TMUX") or (sys.stdin.isatty() and sys.stdout.isatty()):
        return
    raise ParallelError(
        E.EXECUTE_FAILED, f"attach shows the tmux session {session} in a terminal, and this command has none "
        "(its input or output is not a terminal)",
        hint=f"run it in a terminal (or `tmux attach -t {session}` there); `tmux capture-pane -p -t {session}` prints a "
             "window's text here, and --json prints the tmux commands")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
