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
from typing import Callable, Iterator, Literal, TypedDict

from gitflow_parallel.config_schema import GateConfig
from gitflow_parallel.shapes.pack import GateResult


class GateProgress(TypedDict):
    """What ``report`` hears when a gate starts or finishes (how it ended:
    ``passed`` to ``duration_s``, None when it starts), and what runs now."""
    event: Literal["started", "finished"]
    task: str
    instance: str
    gate: str
    passed: bool | None
    exit_code: int | None
    error: str | None
    duration_s: float | None
    finished: int
    running: list[str]
    waiting: int
    cores: int
    elapsed_s: float


Report = Callable[[GateProgress], None]


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
    def turn(self, instance: str, gate: GateConfig, name: str | None = None) -> Iterator[None]:
        """Hold the gate's threads while it runs (clamped to the budget);
        ``name``: what progress calls it (its name, and its stage's)."""
        want = min(threads_of(gate), self.cores)
        key = (instance, name or gate["name"])
        with self._free:
            self.waiting += 1
            self._free.wait_for(lambda: self.used + want <= self.cores)
            self.waiting -= 1
            self.used += want
            self.running[key] = want
        self._tell("started", instance, key[1], None)
        try:
            yield
        finally:
            with self._free:
                self.used -= want
                del self.running[key]
                self._free.notify_all()

    def done(self, instance: str, result: GateResult, name: str | None = None) -> None:
        """Say that one gate of ``instance`` finished, with its result."""
        with self._free:
            self.finished += 1
        self._tell("finished", instance, name or result["name"], result)

    def _tell(self, event: Literal["started", "finished"], instance: str, gate: str,
              result: GateResult | None) -> None:
        if self.report is None:
            return
        with self._free:
            snapshot: GateProgress = {
                        "event": event, "task": self.task, "instance": instance, "gate": gate,
                        "passed": result["passed"] if result else None,
                        "exit_code": result["exit_code"] if result else None,
                        "error": result["error"] if result else None,
                        "duration_s": result.get("duration_s") if result else None,
                        "finished": self.finished, "running": [f"{i} {g}" for i, g in self.running],
                        "waiting": self.waiting, "cores": self.cores,
                        "elapsed_s": round(time.monotonic() - self.started_at, 3)}
        with self._say:
            self.report(snapshot)


class Lane:
    """One instance's way through the budget; without a ``Pace`` (a merge's
    re-proof, one checkout) its gates run unbounded and unreported."""

    def __init__(self, pace: Pace | None = None, instance: str = "", stage: str = "") -> None:
        self.pace, self.instance, self.stage = pace, instance, stage

    def of_stage(self, stage: str) -> Lane:
        """The same lane for a later stage of its judging, which progress
        names beside each gate's name ("with the added tests")."""
        return Lane(self.pace, self.instance, stage)

    def _name(self, gate: str) -> str:
        return f"{gate} {self.stage}" if self.stage else gate

    @contextmanager
    def turn(self, gate: GateConfig) -> Iterator[None]:
        if self.pace is None:
            yield
            return
        with self.pace.turn(self.instance, gate, self._name(gate["name"])):
            yield

    def done(self, result: GateResult) -> None:
        if self.pace is not None:
            self.pace.done(self.instance, result, self._name(result["name"]))
