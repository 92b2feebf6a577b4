"""``run --until-pass K``: run, check, retry what failed, again, until a
track has a passing attempt.

One round is a ``run`` of the round's instances, then a ``check`` of those
that succeeded.  A track is satisfied once any of its instances has verdict
``pass``.  The next round retries (from the spawn's base, with feedback on
the failure: ``feedback.py``) every instance of an unsatisfied track whose
attempt failed (the agent failed, or its gates did) and that has retries
left under ``rework_max``; it stops after ``K`` rounds, when every track is
satisfied, when nothing is left to retry, or when the run was interrupted.
Each step is the ordinary verb (``runner.run``, ``gates.check``,
``lifecycle.retry``), so records, notes, logs and refusals are exactly
theirs.
"""

from __future__ import annotations

from typing import Any, Callable

from gitflow_parallel import lifecycle, runner
from gitflow_parallel.judge import gates
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import find_instance


def _satisfied(record: dict[str, Any]) -> set[str]:
    return {i["track"] for i in record["instances"] if i["status"] == "succeeded" and i["verdict"] == "pass"}


def _to_retry(record: dict[str, Any], ids: list[str]) -> list[str]:
    done = _satisfied(record)
    out = []
    for inst_id in ids:
        inst = find_instance(record, inst_id)
        failed = inst["status"] == "failed" or (inst["status"] == "succeeded" and inst["verdict"] == "fail")
        if failed and inst["track"] not in done and inst["attempt"] < record["config"]["rework_max"]:
            out.append(inst_id)
    return out


def until_pass(project: Project, task: str, argv: list[str], rounds: int, instances: list[str] | None = None,
               timeout: float | None = None, jobs: int | None = None,
               progress: Callable[[dict[str, Any]], None] | None = None, tmux: bool = False) -> dict[str, Any]:
    """At most ``rounds`` rounds of run → check → retry; see the module doc."""
    history: list[dict[str, Any]] = []
    wanted = instances
    ids: list[str] = []
    while True:
        summary = runner.run(project, task, argv, instances=wanted, timeout=timeout, jobs=jobs, progress=progress,
                             tmux=tmux)
        ids = ids or [r["id"] for r in summary["instances"]]
        succeeded = [r["id"] for r in summary["instances"] if r["status"] == "succeeded"]
        checked = gates.check(project, task, instances=succeeded) if succeeded else None
        step: dict[str, Any] = {"round": len(history) + 1, "run": summary, "check": checked, "retried": []}
        history.append(step)
        record = project.store.load(task)
        if summary["interrupted"] or len(history) >= rounds:
            break
        again = _to_retry(record, ids)
        if not again:
            break
        for inst_id in again:
            lifecycle.retry(project, task, inst_id)
        step["retried"] = again
        wanted = again
    record = project.store.load(task)
    tracks = {find_instance(record, i)["track"] for i in ids}
    passed = sorted(i for i in ids if find_instance(record, i)["verdict"] == "pass")
    return {"task": task, "run_id": record["run_id"], "rounds": history, "passed": passed,
            "tracks_passed": sorted(_satisfied(record) & tracks), "tracks": sorted(tracks),
            "ok": tracks <= _satisfied(record) and not history[-1]["run"]["interrupted"],
            "notes_error": next((s["run"]["notes_error"] for s in history if s["run"]["notes_error"]), None)}
