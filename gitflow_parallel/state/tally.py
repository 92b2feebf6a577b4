"""Which agent wins here: per agent figures over the runs this clone knows.

Read from the run records (live ones, finished ones in ``runs/done/``, and
runs fetched from a teammate under ``refs/parallel-remotes/``, each run once
by its id), attempt by attempt: every earlier attempt in an instance's
``history`` and its current one, credited to the agent that ran it (the
instance's ``agent``; an attempt run by a plain ``-- CMD`` counts under
:data:`UNNAMED`).  Only attempts that ran to an end count (succeeded,
failed or aborted).

Per agent: ``attempts``; ``passes`` and ``pass_rate`` (verdict pass, over
attempts); ``wins`` and ``win_rate`` (the attempt the run's pick chose for
its track, over attempts: an agent given more instances is not favoured by
it); ``median_time_to_pass_s`` (from start to end of the passing attempts
whose times the record keeps); ``median_lines_changed`` (against the run's
base, of the attempts whose commit is here); ``median_retries_to_pass`` (the
attempt number of each instance's first passing attempt: 0 = first try).
``run --split auto`` uses :func:`win_rates`.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field
from typing import Iterator, TypedDict

from gitflow_parallel.model import RunRecord
from gitflow_parallel.state.project import Project

UNNAMED = "(no agent)"
ENDED = ("succeeded", "failed", "aborted")


def _when(stamp: str | None) -> dt.datetime | None:
    if not stamp:
        return None
    try:
        when = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def records(project: Project, since: dt.datetime | None = None) -> list[RunRecord]:
    """Every run this clone knows (local first, then fetched), once each,
    created at ``since`` or later."""
    from gitflow_parallel.state import share

    seen: dict[str, RunRecord] = {}
    for rec in share.local_records(project) + [r for r, _ in share.shared_runs(project)]:
        seen.setdefault(rec["run_id"], rec)
    if since is not None:
        since = since if since.tzinfo else since.replace(tzinfo=dt.timezone.utc)
        return [r for r in seen.values() if (_when(r.get("created_at")) or since) >= since]
    return list(seen.values())


class Attempt(TypedDict):
    """One attempt that ran to an end, as the figures count it."""
    agent: str
    instance: str
    attempt: int
    status: str
    verdict: str | None
    head: str | None
    won: bool
    started_at: str | None
    finished_at: str | None


def attempts(record: RunRecord) -> Iterator[Attempt]:
    """Each attempt of the run that ran to an end, with its agent and whether it won."""
    winners = {t: p.get("winner") for t, p in (record.get("picks") or {}).items()}
    for inst in record["instances"]:
        for h in inst.get("history") or []:
            if h.get("status") in ENDED:
                yield {"agent": h.get("agent") or UNNAMED, "instance": inst["id"], "attempt": h["attempt"],
                       "status": h["status"], "verdict": h.get("verdict"), "head": h.get("head"), "won": False,
                       "started_at": None, "finished_at": h.get("finished_at")}
        if inst["status"] in ENDED:
            yield {"agent": inst.get("agent") or UNNAMED, "instance": inst["id"], "attempt": inst["attempt"],
                   "status": inst["status"], "verdict": inst.get("verdict"), "head": inst.get("head"),
                   "won": winners.get(inst["track"]) == inst["id"], "started_at": inst.get("started_at"),
                   "finished_at": inst.get("finished_at")}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _lines(project: Project, base: str, head: str | None) -> int | None:
    if not head:
        return None
    try:
        return project.repo.changed_lines(base, head)
    except Exception:  # a fetched run's commits need not be here
        return None


@dataclass
class _Counts:
    """One agent's attempts, counted run by run."""
    runs: set[str] = field(default_factory=set)
    attempts: int = 0
    passes: int = 0
    wins: int = 0
    times: list[float] = field(default_factory=list)
    lines: list[float] = field(default_factory=list)
    retries: list[float] = field(default_factory=list)


class AgentFigures(TypedDict):
    agent: str
    runs: int
    attempts: int
    passes: int
    pass_rate: float
    wins: int
    win_rate: float
    median_time_to_pass_s: float | None
    median_lines_changed: float | None
    median_retries_to_pass: float | None


class Figures(TypedDict):
    """``stats``: per agent figures, over ``runs`` runs created ``since`` then."""
    runs: int
    since: str | None
    agents: list[AgentFigures]


def figures(project: Project, since: dt.datetime | None = None) -> Figures:
    """Per agent figures (see the module's docstring), and how many runs they come from."""
    runs = records(project, since)
    rows: dict[str, _Counts] = {}
    for record in runs:
        first_pass: dict[tuple[str, str], int] = {}
        for a in attempts(record):
            row = rows.setdefault(a["agent"], _Counts())
            row.runs.add(record["run_id"])
            row.attempts += 1
            row.wins += a["won"]
            lines = _lines(project, record["base"]["commit"], a["head"])
            if lines is not None:
                row.lines.append(lines)
            if a["verdict"] != "pass":
                continue
            row.passes += 1
            start, end = _when(a["started_at"]), _when(a["finished_at"])
            if start and end:
                row.times.append((end - start).total_seconds())
            key = (a["agent"], a["instance"])
            first_pass[key] = min(first_pass.get(key, a["attempt"]), a["attempt"])
        for (agent, _), attempt in first_pass.items():
            rows[agent].retries.append(attempt)
    out: list[AgentFigures] = []
    for name in sorted(rows):
        row = rows[name]
        n = row.attempts
        out.append({"agent": name, "runs": len(row.runs), "attempts": n, "passes": row.passes,
                    "pass_rate": round(row.passes / n, 4), "wins": row.wins, "win_rate": round(row.wins / n, 4),
                    "median_time_to_pass_s": _median(row.times), "median_lines_changed": _median(row.lines),
                    "median_retries_to_pass": _median(row.retries)})
    return {"runs": len(runs), "since": since.isoformat() if since else None, "agents": out}


def win_rates(project: Project) -> dict[str, float]:
    """The named agents' win rates here, for ``run --split auto``."""
    return {row["agent"]: row["win_rate"] for row in figures(project)["agents"] if row["agent"] != UNNAMED}
