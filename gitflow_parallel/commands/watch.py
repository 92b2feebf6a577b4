"""``git parallel watch``: every instance of a run as it goes, read from the
run record (and each attempt's log, events file and worktree) a few times a
second.

The verb is a generator of views: each view is the run as it stands (per
instance: status, agent, attempt, elapsed time, verdict, the last line of
its agent's log, whether it waits for input, its diff stat so far; the
run's status and picks) together with the *events* that changed since the
previous view (the first view reports every instance as an event).  An
event is a change of an instance's status or attempt, its turning to
waiting for input or back (``proc/waiting``: the last ``waiting`` or
``resumed`` line of its events file), a new diff stat, a verdict, a pick,
or the run's status; the log line and the elapsed time change the view but
are no events.  It ends after the view in which the run is ``picked``,
``merged``, ``failed`` or ``aborted``.  The CLI draws the views (redrawn in
place on a terminal, with keys to steer) or prints the events (one line
each when piped, JSON lines with ``--json``).

The diff stat is the worktree as it is on disk against the run's base
(``state/view.worktree_diff``: committed and uncommitted, new files too,
read-only), read at most every ``DIFF_EVERY`` seconds per running attempt;
an attempt that ended is read once, from its recorded tip.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Callable, Iterator, TypedDict

from gitflow_parallel.model import find_instance
from gitflow_parallel.names import check_name
from gitflow_parallel.proc.waiting import EventTail
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.view import changes_between, commit_stat, worktree_patch, worktree_stat
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord

ENDED_RUN = ("picked", "merged", "failed", "aborted")
INTERVAL = 0.2  # seconds between reads of the record
TAIL_BYTES = 4096
DIFF_EVERY = 2.0  # seconds between diff stats of one running attempt


def last_line(path: str | None) -> str:
    """The last non-empty line of a log (its end only is read)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return ""
    lines = [x for x in data.decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""


def _seconds(inst: InstanceRecord, now: dt.datetime) -> float | None:
    def when(stamp: str | None) -> dt.datetime | None:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None

    start, end = when(inst.get("started_at")), when(inst.get("finished_at"))
    if start is None:
        return None
    return round(((end or now) - start).total_seconds(), 1)


class Sampler:
    """What a view holds beside the record, per attempt: its waiting state
    (its events file, read as it grows) and its diff stat (throttled)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.tails: dict[tuple[str, int], EventTail] = {}
        self.stats: dict[tuple[str, int], tuple[float, dict[str, int] | None, bool]] = {}

    def waiting(self, inst: InstanceRecord) -> Mapping[str, object] | None:
        events = inst.get("events")
        if inst["status"] != "running" or not events:
            return None
        key = (inst["id"], inst["attempt"])
        tail = self.tails.setdefault(key, EventTail(Path(events)))
        return tail.read()

    def diff(self, record: RunRecord, inst: InstanceRecord) -> dict[str, int] | None:
        if inst["status"] == "pending":
            return None
        key, now = (inst["id"], inst["attempt"]), time.monotonic()
        when, stat, final = self.stats.get(key, (0.0, None, False))
        if final or (inst["status"] == "running" and now - when < DIFF_EVERY):
            return stat
        base = record["base"]["commit"]
        if inst["status"] == "running":
            stat, final = worktree_stat(inst["worktree"], base), False
        else:
            head = inst.get("head")
            stat, final = (commit_stat(self.project.repo.pygit, base, head) if head else None), True
        self.stats[key] = (now, stat, final)
        return stat


class Watched(TypedDict):
    """An instance as ``watch`` shows it: its record's state, its log's last
    line, whether it waits for input, its diff stat, whether it won."""
    id: str
    track: str
    agent: str | None
    status: str
    attempt: int
    verdict: str | None
    elapsed_s: float | None
    last_line: str
    waiting: Mapping[str, object] | None
    diff: dict[str, int] | None
    winner: bool


class View(TypedDict):
    """The run as ``watch`` shows it (``picks``: each picked track's winner)."""
    task: str
    run_id: str
    status: str
    picks: dict[str, str]
    instances: list[Watched]


Event = dict[str, object]  # one change between two views (``event``: what changed)


def view(record: RunRecord, sampler: Sampler | None = None) -> View:
    """The run as ``watch`` shows it."""
    now = dt.datetime.now(dt.timezone.utc)
    picks = {t: p["winner"] for t, p in (record.get("picks") or {}).items()}
    return {
        "task": record["task"], "run_id": record["run_id"], "status": record["status"], "picks": picks,
        "instances": [{"id": i["id"], "track": i["track"], "agent": i.get("agent"), "status": i["status"],
                       "attempt": i["attempt"], "verdict": i.get("verdict"), "elapsed_s": _seconds(i, now),
                       "last_line": last_line(i.get("log")) if i.get("started_at") else "",
                       "waiting": sampler.waiting(i) if sampler else None,
                       "diff": sampler.diff(record, i) if sampler else None,
                       "winner": picks.get(i["track"]) == i["id"]}
                      for i in record["instances"]],
    }


def changes(before: View | None, after: View) -> list[Event]:
    """The events between two views, in a stable order: instances (in
    record order), then picks, then the run."""
    old = {i["id"]: i for i in (before["instances"] if before else [])}
    out: list[Event] = []
    for inst in after["instances"]:
        was = old.get(inst["id"])
        base = {"instance": inst["id"], "agent": inst["agent"], "attempt": inst["attempt"]}
        if (was and (was["status"], was["attempt"])) != (inst["status"], inst["attempt"]):
            out.append({"event": "status", **base, "status": inst["status"], "elapsed_s": inst["elapsed_s"]})
        said, was_waiting, was_diff = inst["waiting"], was and was["waiting"], was and was["diff"]
        if said and not was_waiting:
            out.append({"event": "waiting", **base, "source": said["source"], "message": said["message"]})
        elif was_waiting and not said and inst["status"] == "running":
            out.append({"event": "resumed", **base})
        if inst["diff"] and inst["diff"] != was_diff and (inst["diff"]["files"] or was_diff):
            out.append({"event": "diff", **base, **inst["diff"]})
        if inst["verdict"] and inst["verdict"] != (was and was["verdict"]):
            out.append({"event": "verdict", **base, "verdict": inst["verdict"]})
    for track, winner in after["picks"].items():
        if (before["picks"].get(track) if before else None) != winner:
            agent = next((i["agent"] for i in after["instances"] if i["id"] == winner), None)
            out.append({"event": "pick", "track": track, "winner": winner, "agent": agent})
    if before is None or before["status"] != after["status"]:
        out.append({"event": "run", "status": after["status"]})
    return out


def watch(project: Project, task: str, interval: float = INTERVAL,
          pause: Callable[[float], None] = time.sleep) -> Iterator[tuple[View, list[Event]]]:
    """(view, events) each time the run is read, until it ends; ``pause``
    waits between reads (the terminal view reads its keys meanwhile)."""
    check_name(task, "task")
    sampler = Sampler(project)
    before: View | None = None
    while True:
        now = view(project.store.load(task), sampler)
        yield now, changes(before, now)
        if now["status"] in ENDED_RUN:
            return
        before = now
        pause(interval)


def patch(project: Project, task: str, inst_id: str) -> str:
    """INST_ID's change so far as a patch: its worktree on disk against the
    base while it has one (as the diff stat counts it), else its tip."""
    record = project.store.load(task)
    inst = find_instance(record, inst_id)
    base = record["base"]["commit"]
    if not inst.get("removed") and Path(inst["worktree"]).is_dir():
        text = worktree_patch(inst["worktree"], base)
        if text is not None:
            return text
    tip = project.tip(inst) or inst.get("head")
    if not tip:
        return ""
    return str(changes_between(project.repo.pygit, base, tip, True)["patch"])
