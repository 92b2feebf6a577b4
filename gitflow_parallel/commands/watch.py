"""``git parallel watch``: every instance of a run as it goes, read from the
run record (and each attempt's log) a few times a second.

The verb is a generator of views: each view is the run as it stands (per
instance: status, agent, attempt, elapsed time, verdict, the last line of
its agent's log; the run's status and picks) together with the *events*
that changed since the previous view (the first view reports every
instance as an event).  An event is a change of an instance's status or
attempt, a verdict, a pick, or the run's status; the log line and the
elapsed time change the view but are no events.  It ends after the view in
which the run is ``picked``, ``merged``, ``failed`` or ``aborted``.  The
CLI draws the views (redrawn in place on a terminal) or prints the events
(one line each when piped, JSON lines with ``--json``)."""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any, Iterator

from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project

ENDED_RUN = ("picked", "merged", "failed", "aborted")
INTERVAL = 0.2  # seconds between reads of the record
TAIL_BYTES = 4096


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


def _seconds(inst: dict[str, Any], now: dt.datetime) -> float | None:
    def when(stamp: str | None) -> dt.datetime | None:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None

    start, end = when(inst.get("started_at")), when(inst.get("finished_at"))
    if start is None:
        return None
    return round(((end or now) - start).total_seconds(), 1)


def view(record: dict[str, Any]) -> dict[str, Any]:
    """The run as ``watch`` shows it."""
    now = dt.datetime.now(dt.timezone.utc)
    picks = {t: p.get("winner") for t, p in (record.get("picks") or {}).items()}
    return {
        "task": record["task"], "run_id": record["run_id"], "status": record["status"], "picks": picks,
        "instances": [{"id": i["id"], "track": i["track"], "agent": i.get("agent"), "status": i["status"],
                       "attempt": i["attempt"], "verdict": i.get("verdict"), "elapsed_s": _seconds(i, now),
                       "last_line": last_line(i.get("log")) if i.get("started_at") else "",
                       "winner": picks.get(i["track"]) == i["id"]}
                      for i in record["instances"]],
    }


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[dict[str, Any]]:
    """The events between two views, in a stable order: instances (in
    record order), then picks, then the run."""
    old = {i["id"]: i for i in (before or {}).get("instances", [])}
    out: list[dict[str, Any]] = []
    for inst in after["instances"]:
        was = old.get(inst["id"], {})
        base = {"instance": inst["id"], "agent": inst["agent"], "attempt": inst["attempt"]}
        if (was.get("status"), was.get("attempt")) != (inst["status"], inst["attempt"]):
            out.append({"event": "status", **base, "status": inst["status"], "elapsed_s": inst["elapsed_s"]})
        if inst["verdict"] and inst["verdict"] != was.get("verdict"):
            out.append({"event": "verdict", **base, "verdict": inst["verdict"]})
    for track, winner in after["picks"].items():
        if (before or {}).get("picks", {}).get(track) != winner:
            agent = next((i["agent"] for i in after["instances"] if i["id"] == winner), None)
            out.append({"event": "pick", "track": track, "winner": winner, "agent": agent})
    if before is None or before["status"] != after["status"]:
        out.append({"event": "run", "status": after["status"]})
    return out


def watch(project: Project, task: str, interval: float = INTERVAL) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(view, events) each time the run is read, until it ends."""
    check_name(task, "task")
    before: dict[str, Any] | None = None
    while True:
        now = view(project.store.load(task))
        yield now, changes(before, now)
        if now["status"] in ENDED_RUN:
            return
        before = now
        time.sleep(interval)
