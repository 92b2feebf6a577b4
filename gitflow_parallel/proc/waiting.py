"""Whether an attempt waits for input, and the one place that says so.

The channel is the attempt's events file (``GIT_PARALLEL_EVENTS``): its
last ``waiting`` or ``resumed`` line is the attempt's state, whoever wrote
it.  Two writers:

* **The agent itself**, any agent, with or without ``--tmux``: it appends
  ``{"event": "waiting", "message": "..."}`` when it stops for a person and
  ``{"event": "resumed"}`` when it goes on.
* **The runner, under ``--tmux``** (``TerminalProbe``): the agent's pane
  shows the same last line for ``quiet`` seconds (``GIT_PARALLEL_WAIT_QUIET``,
  default 3) *and* a process of the agent's tree is asleep on its terminal:
  ``/proc/PID/fd/0`` is the pane's tty and ``/proc/PID/wchan`` a terminal
  read (``wait_woken``, ``n_tty_read``) or, for event-loop programs such as
  Node or tokio agents, a poll/select/epoll wait.  Either alone says little
  (a quiet pane may be a slow network call; an event loop sleeps between
  every chunk it streams), both together are what a prompt looks like.  It
  writes ``{"event": "waiting", "source": "terminal", "message": <the last
  line>}`` and ``resumed`` once the line changes or the read ends.

The runner sends the ``waiting`` notification when the state turns to
waiting (``proc/engine``); ``watch`` reads the same state.  The events file
is the agent's to write, so the state is what it says it is: informative,
never a verdict."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitflow_parallel.files import append_jsonl, env_seconds, untrusted_json, utcnow

MAX_READ = 1 << 20  # an agent that floods its events file is read from its last MiB
TERMINAL_READS = ("wait_woken", "n_tty_read")
EVENT_LOOP_WAITS = ("do_select", "core_sys_select", "do_sys_poll", "do_poll", "ep_poll", "do_epoll_wait")
DEFAULT_QUIET = 3.0


def quiet_seconds() -> float:
    return env_seconds("GIT_PARALLEL_WAIT_QUIET", DEFAULT_QUIET)


@dataclass
class EventTail:
    """The waiting state of one attempt, read from its events file as it
    grows (only the bytes added since the last read)."""

    path: Path
    offset: int = 0
    waiting: dict[str, str | None] | None = None
    _partial: bytes = field(default=b"", repr=False)

    def read(self) -> dict[str, str | None] | None:
        """The waiting line in force (``event``, ``ts``, ``source``,
        ``message``), or None."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # replaced: start over
                    self.offset, self._partial = 0, b""
                if size - self.offset > MAX_READ:
                    self.offset, self._partial = size - MAX_READ, b""
                handle.seek(self.offset)
                data = handle.read(size - self.offset)
        except OSError:
            return self.waiting
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self._take(raw)
        return self.waiting

    def _take(self, raw: bytes) -> None:
        try:
            line = untrusted_json(raw)
        except ValueError:
            return
        if not isinstance(line, dict):
            return
        if line.get("event") == "waiting":
            message = line.get("message")
            self.waiting = {"ts": str(line.get("ts") or utcnow()), "source": str(line.get("source") or "agent"),
                            "message": str(message)[:500] if message is not None else None}
        elif line.get("event") in ("resumed", "engine_exited"):
            self.waiting = None


# -- the terminal under --tmux -----------------------------------------------------------
def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the process's name, which the
    agent chooses (``prctl``): bytes that are no UTF-8 ended run in an
    internal error, so they are read as bytes and decoded leniently."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    return text.rsplit(") ", 1)[-1].split()


def _tree(pid: int, limit: int = 256) -> list[int]:
    """``pid`` and its descendants (through ``/proc/PID/task/*/children``)."""
    found: list[int] = []
    todo = [pid]
    while todo and len(found) < limit:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                todo += [int(x) for x in Path(f"/proc/{current}/task/{tid}/children").read_text().split()]
            except (OSError, ValueError):
                pass
    return found


def blocked_on(pid: int, tty: str) -> bool:
    """Is a process of ``pid``'s tree asleep reading ``tty`` (its fd 0)?"""
    for proc in _tree(pid):
        fields = _stat_fields(proc)
        if not fields or fields[0] != "S":
            continue
        try:
            if os.readlink(f"/proc/{proc}/fd/0") != tty:
                continue
            wchan = Path(f"/proc/{proc}/wchan").read_text().strip()
        except OSError:
            continue
        if wchan in TERMINAL_READS or wchan in EVENT_LOOP_WAITS:
            return True
    return False


def pane_last_line(tmux: str, pane: str) -> str | None:
    shown = subprocess.run([tmux, "capture-pane", "-p", "-t", pane], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, errors="replace")
    if shown.returncode != 0:
        return None
    lines = [x.rstrip() for x in shown.stdout.splitlines() if x.strip()]
    return lines[-1] if lines else ""


@dataclass
class TerminalProbe:
    """The runner's look at one ``--tmux`` attempt: its pane file (written by
    the pane role: ``pane``, ``pid``, ``tty``), the line it last saw and since
    when, and whether it said ``waiting``."""

    tmux: str
    pane_file: Path
    quiet: float = DEFAULT_QUIET
    pane: dict[str, Any] | None = None
    line: str | None = None
    line_since: float = 0.0
    said_waiting: bool = False

    def look(self, events: Path, now: float) -> None:
        """Append ``waiting`` or ``resumed`` to ``events`` when the state turned."""
        if self.pane is None:
            try:
                self.pane = json.loads(self.pane_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return
        pane = self.pane or {}
        blocked = blocked_on(int(pane.get("pid") or 0), str(pane.get("tty") or "")) if pane.get("pid") else False
        line = pane_last_line(self.tmux, str(pane.get("pane"))) if blocked else None
        if line != self.line:
            self.line, self.line_since = line, now
        waiting = blocked and line is not None and now - self.line_since >= self.quiet
        if waiting and not self.said_waiting:
            append_jsonl(events, {"event": "waiting", "ts": utcnow(), "source": "terminal", "message": line})
        elif self.said_waiting and not waiting:
            append_jsonl(events, {"event": "resumed", "ts": utcnow(), "source": "terminal"})
        self.said_waiting = waiting


@dataclass
class Watcher:
    """One running attempt as the runner follows it for ``waiting``."""

    events: Path
    probe: TerminalProbe | None = None
    tail: EventTail = field(init=False)
    notified: bool = False

    def __post_init__(self) -> None:
        self.tail = EventTail(self.events)

    def poll(self, now: float | None = None) -> dict[str, str | None] | None:
        """The waiting line when the attempt has just turned to waiting
        (once per spell of waiting), else None."""
        if self.probe is not None:
            self.probe.look(self.events, time.monotonic() if now is None else now)
        state = self.tail.read()
        if state is None:
            self.notified = False
            return None
        if self.notified:
            return None
        self.notified = True
        return state
