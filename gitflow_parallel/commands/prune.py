"""``git parallel prune [--older-than 30d] [--dry-run]``: remove the archive and
evidence refs of finished runs older than that (never those of a live run),
after printing what goes.  A pruned run's losers are no longer refused by
the hooks: its lines leave the live index."""

from __future__ import annotations

import re
import time
from typing import Any, TypedDict

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.state.share import (EVIDENCE_PREFIX, REMOTES_PREFIX, RUNS_PREFIX, fetched_remotes, local_records,
                                        shared_runs)
from gitflow_parallel.git.worktrees import ARCHIVE_PREFIX
from gitflow_parallel.model import FINISHED_RUN
from gitflow_parallel.state.project import Project
from gitflow_parallel.shapes.records import RunRecord

_DURATION = re.compile(r"(\d+)([smhdw]?)")


_UNIT = {"": 86400, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> int:
    """``30d``, ``12h``, ``2w``, ``90m``, ``45s`` (a bare number is days) in seconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ParallelError(E.INVALID_NAME, f"--older-than {text!r} is not a duration",
                            hint="give a number and a unit: 30d, 12h, 2w, 90m, 45s (0 means every finished run)")
    return int(match.group(1)) * _UNIT[match.group(2)]


def _run_refs(repo: Repo) -> dict[str, list[str]]:
    """run_id -> every ref of that run under our prefixes (local and fetched)."""
    out: dict[str, list[str]] = {}
    prefixes = [(ARCHIVE_PREFIX + "/", 3), (EVIDENCE_PREFIX + "/", 3), (RUNS_PREFIX + "/", 3)]
    for remote in fetched_remotes(repo):
        for kind in ("archive", "evidence", "runs"):
            prefixes.append((f"{REMOTES_PREFIX}/{remote}/{kind}/", 4))
    for prefix, depth in prefixes:
        for name, _ in repo.refs_under(prefix):
            out.setdefault(name.split("/")[depth], []).append(name)
    return out


def _finished_at(record: RunRecord) -> str:
    merge = record.get("merge")
    return (merge["merged_at"] if merge else None) or record["updated_at"]


def _epoch(stamp: str) -> float:
    import datetime as _dt

    return _dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc).timestamp()


def _newest_commit_time(repo: Repo, refs: list[str]) -> float:
    times = []
    for name in refs:
        oid = repo.ref_target(name)
        if oid is not None:
            times.append(repo.pygit[oid].peel(pygit2.Commit).commit_time)
    return max(times) if times else 0.0



class Pruned(TypedDict):
    """``prune``: the runs whose refs went (or would go), those kept and why, how many refs."""
    dry_run: bool
    older_than: str
    removed: list[dict[str, Any]]
    kept: list[dict[str, Any]]
    count: int

def prune(project: Project, older_than: str = "30d", dry_run: bool = False) -> Pruned:
    """Delete the refs of finished runs that finished before the cut-off."""
    repo = project.repo
    cutoff = time.time() - parse_age(older_than)
    with project.store.lock():
        known: dict[str, RunRecord] = {r["run_id"]: r for r in local_records(project)}
        for shared, _ in shared_runs(project):
            known.setdefault(shared["run_id"], shared)
        live = {r["run_id"] for r in project.store.load_all()[0] if r["status"] not in FINISHED_RUN}
        removed: list[dict[str, Any]] = []
        kept: list[dict[str, Any]] = []
        for run_id, refs in sorted(_run_refs(repo).items()):
            rec = known.get(run_id)
            if run_id in live or (rec is not None and rec["status"] not in FINISHED_RUN):
                kept.append({"run_id": run_id, "why": "live", "refs": len(refs)})
                continue
            # A run with no record anywhere is not live (a live run always has
            # one); its age is that of its newest ref.
            when = _epoch(_finished_at(rec)) if rec is not None else _newest_commit_time(repo, refs)
            if when > cutoff:
                kept.append({"run_id": run_id, "why": "newer than the cut-off", "refs": len(refs)})
                continue
            removed.append({"run_id": run_id, "task": rec["task"] if rec else None,
                            "status": rec["status"] if rec else "unknown", "refs": sorted(refs)})
        if not dry_run:
            for entry in removed:
                for name in entry["refs"]:
                    repo.delete_ref(name)
            if removed:
                # Their losers were guarded by the hooks until now (the live index's done lines).
                project.store.write_live_index()
    return {"dry_run": dry_run, "older_than": older_than, "removed": removed, "kept": kept,
            "count": sum(len(e["refs"]) for e in removed)}
