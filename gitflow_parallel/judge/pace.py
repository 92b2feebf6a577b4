"""How many gates run at once, and the word of each one that finishes.

A check judges several instances side by side, each a sequence of gates.
Without a bound, every instance runs its gate at once; on a small machine
a full test suite run four times over takes four times as long each, and
nothing is gained.  ``Pace`` is the check's budget of cores: a gate takes
its ``threads`` (1 unless the config says it runs several) before it starts
and gives them back when it ends, so that at most ``cores`` gate threads run
together.  A gate that wants more than the whole budget runs alone rather
than never.

It also tells whoever watches: when a gate starts and when it finishes,
``report`` gets a snapshot (``event`` "started" or "finished", which gate of
which instance, how it ended, and what runs or waits now).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator
from gitflow_parallel.config_schema import GateConfig

Report = Callable[[dict[str, Any]], None]


def machine_cores() -> int:
    """The cores this process may run on (its affinity mask, which a
    container or ``taskset`` narrows), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def threads_of(gate: GateConfig) -> int:
    return int(gate.get("threads") or 1)


class Pace:
    """The cores a check's gates share (thread-safe), and its progress."""

    def __init__(self, task: str, cores: int, report: Report | None = None) -> None:
        self.task, self.cores, self.report = task, max(1, cores), report
        self.used = 0
        self.running: dict[tuple[str, str], int] = {}
        self.waiting = 0
        self.finished = 0
        self.started_at = time.monotonic()
        self._free = threading.Condition()
        self._say = threading.Lock()  # one report at a time: its lines must not interleave

    def lane(self, instance: str) -> Lane:
        return Lane(self, instance)

    @contextmanager
    def turn(self, instance: str, gate: GateConfig) -> Iterator[None]:
        """Hold the gate's threads while it runs (clamped to the budget)."""
        want = min(threads_of(gate), self.cores)
        key = (instance, gate["name"])
        with self._free:
            self.waiting += 1
            self._free.wait_for(lambda: self.used + want <= self.cores)
            self.waiting -= 1
            self.used += want
            self.running[key] = want
        self._tell("started", instance, {"name": gate["name"]})
        try:
            yield
        finally:
            with self._free:
                self.used -= want
                del self.running[key]
                self._free.notify_all()

    def done(self, instance: str, result: dict[str, Any]) -> None:
        """Say that one gate of ``instance`` finished, with its result."""
        with self._free:
            self.finished += 1
        self._tell("finished", instance, result)

    def _tell(self, event: str, instance: str, result: dict[str, Any]) -> None:
        if self.report is None:
            return
        with self._free:
            snapshot = {"event": event, "task": self.task, "instance": instance, "gate": result["name"],
                        "passed": result.get("passed"), "exit_code": result.get("exit_code"),
                        "error": result.get("error"), "duration_s": result.get("duration_s"),
                        "finished": self.finished, "running": [f"{i} {g}" for i, g in self.running],
                        "waiting": self.waiting, "cores": self.cores,
                        "elapsed_s": round(time.monotonic() - self.started_at, 3)}
        with self._say:
            self.report(snapshot)


class Lane:
    """One instance's way through the budget; without a ``Pace`` (a merge's
    re-proof, one checkout) its gates run unbounded and unreported."""

    def __init__(self, pace: Pace | None = None, instance: str = "") -> None:
        self.pace, self.instance = pace, instance

    @contextmanager
    def turn(self, gate: GateConfig) -> Iterator[None]:
        if self.pace is None:
            yield
            return
        with self.pace.turn(self.instance, gate):
            yield

    def done(self, result: dict[str, Any]) -> None:
        if self.pace is not None:
            self.pace.done(self.instance, result)
