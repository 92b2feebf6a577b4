"""Sending ``notify`` events (the format is ``notify``'s): the configured
command started once per event, never waited on while the verb works.

Each event starts the command at once, through the one supervisor
(``supervise.start``: its own process group, a scope, the watchdog), with
the event on stdin, in the repository's top folder, with the environment
of every command (``env.for_command``), and its output (stdout too) on
the verb's stderr, as git does with a hook's: the verb's stdout stays its
own (``--json``), and a terminal bell or an error of the command reaches
the person who ran the verb.  ``finish`` waits for every command
started, each until ``timeout`` seconds after its start, stops one that is
still running then (SIGTERM, the grace, SIGKILL) with whatever it left
behind, and returns a warning for each that could not start, exited
non-zero or was stopped.  So a notify command delays the verb by at most
its timeout (and the grace), at its end, and never changes what the verb
decided or its exit status.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import TYPE_CHECKING

from gitflow_parallel import notify
from gitflow_parallel.model import RunRecord
from gitflow_parallel import environ as proc_env
from gitflow_parallel.proc import supervise
from gitflow_parallel.proc.watchdog import Watchdog
from gitflow_parallel.proc.watchdog import shared as shared_watchdog

if TYPE_CHECKING:
    from gitflow_parallel.state.project import Project


class Notifier:
    """The ``notify`` command of one run, for one verb."""

    def __init__(self, project: Project, record: RunRecord, watchdog: Watchdog | None = None) -> None:
        cfg = record["config"].get("notify") or {}
        self.command: list[str] | None = cfg.get("command")
        self.timeout = float(cfg.get("timeout", notify.DEFAULT_TIMEOUT))
        repo = project.repo
        self.cwd = repo.main_workdir or repo.common_dir
        self.watchdog = watchdog
        self.started: list[tuple[str, supervise.Process]] = []
        self.warnings: list[str] = []

    def send(self, event: dict[str, object] | None) -> None:
        """Start the command with ``event`` on its stdin (nothing without a
        command or an event)."""
        if not self.command or event is None:
            return
        try:
            sys.stderr.flush()  # what the verb said before stays before what the command says
            with tempfile.TemporaryFile() as stdin:
                stdin.write(notify.encode(event))
                stdin.seek(0)
                proc = supervise.start(self.command, self.cwd, proc_env.for_command(), sys.stderr.fileno(), None,
                                       supervise.new_scope("notify"), self.watchdog or shared_watchdog(),
                                       stdin=stdin)
        except supervise.START_ERRORS as exc:
            self.warnings.append(f"notify on {event['kind']}: {supervise.cannot_start(self.command[0], exc)[1]}")
            return
        self.started.append((str(event["kind"]), proc))

    def finish(self) -> list[str]:
        """Wait for what was sent (see the module doc); the warnings."""
        program = (self.command or [""])[0]
        for kind, proc in self.started:
            stopped = proc.wait(max(0.0, proc.started + self.timeout - time.monotonic()))
            code = proc.end()
            if stopped:
                self.warnings.append(f"notify on {kind}: {program!r} still ran after {self.timeout:g}s "
                                     f"(notify.timeout) and was stopped")
            elif code != 0:
                self.warnings.append(f"notify on {kind}: {program!r} exited {code}")
        self.started = []
        return self.warnings


def send_one(project: Project, record: RunRecord, event: dict[str, object] | None) -> list[str]:
    """Send one event and wait for it: for a verb with one thing to tell."""
    notifier = Notifier(project, record)
    notifier.send(event)
    return notifier.finish()

