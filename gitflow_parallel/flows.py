"""The verbs made of several verbs: the orchestration layer.

``spawn --remote`` is ``spawn`` then ``publish``; ``run --until-pass`` is
rounds of ``run``, ``check`` and ``retry``.  A command never imports another
(``commands/``), so the composition lives here, in a layer of its own
between the commands and the CLI, and each step is the ordinary verb:
records, notes, logs and refusals are exactly theirs.  The CLI only parses
the options and renders what comes back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, TypedDict

from gitflow_parallel.errors import ParallelError
from gitflow_parallel.model import find_instance, retry_candidates, satisfied_tracks
from gitflow_parallel.shapes.results import CheckResult, SpawnResult
from gitflow_parallel.state.project import Project


class Round(TypedDict):
    """One round of ``run --until-pass``: its run, its check, the instances retried after it."""
    round: int
    run: Mapping[str, Any]  # proc/engine's summary of the run
    check: CheckResult | None
    retried: list[str]


class Rounds(TypedDict):
    """``run --until-pass``: each round, and whether every track passed."""
    task: str
    run_id: str
    rounds: list[Round]
    passed: list[str]
    tracks_passed: list[str]
    tracks: list[str]
    ok: bool
    notes_error: str | None
    warnings: list[str]  # once each, as its rounds' run and check said them (the namespace layer missing)


def spawn_remote(project: Project, task: str, remote: str, n: int | None = None, base: str | None = None,
                 tracks: list[str] | None = None) -> SpawnResult:
    """``spawn`` and ``publish`` in one: the run exists here and on ``remote``."""
    from gitflow_parallel.commands import publish as publish_cmd
    from gitflow_parallel.commands import spawn as spawn_cmd
    from gitflow_parallel.state.share import check_remote
    from gitflow_parallel.state.transport import ls_remote

    check_remote(project.repo, remote)  # before anything is made
    ls_remote(project.repo, remote, ["refs/parallel/runs/none"])  # reachable?
    record = spawn_cmd.spawn(project, task, n=n, base=base, tracks=tracks)
    try:
        published = publish_cmd.publish(project, task, remote)
    except ParallelError as exc:
        raise ParallelError(exc.code, f"spawned run {record['run_id']} here, but did not publish it: {exc.message}",
                            hint=f"`git parallel publish {task} --remote {remote}` once {remote} takes pushes") from None
    return {**record, "published": published}


def until_pass(project: Project, task: str, argv: list[str], rounds: int, instances: list[str] | None = None,
               timeout: float | None = None, jobs: int | None = None,
               progress: Callable[[Mapping[str, Any]], None] | None = None, tmux: bool = False,
               agent_commands: dict[str, list[str]] | None = None, split: str | None = None,
               allow_tmux_escape: bool = False) -> Rounds:
    """``run --until-pass K``: at most ``rounds`` rounds of run → check → retry.

    One round is a ``run`` of the round's instances, then a ``check`` of those
    that succeeded.  A track is satisfied once any of its instances has verdict
    ``pass``.  The next round retries (from the spawn's base, with feedback on
    the failure) every instance of an unsatisfied track whose attempt failed
    (the agent failed, or its gates did) and that has retries left under
    ``rework_max``; it stops after ``K`` rounds, when every track is
    satisfied, when nothing is left to retry, or when the run was interrupted."""
    from gitflow_parallel.commands import check as check_cmd
    from gitflow_parallel.commands import retry as retry_cmd
    from gitflow_parallel.commands import run as run_cmd

    history: list[Round] = []
    wanted = instances
    ids: list[str] = []
    while True:
        summary = run_cmd.run(project, task, argv, instances=wanted, timeout=timeout, jobs=jobs, progress=progress,
                              tmux=tmux, agent_commands=None if history else agent_commands,
                              split=None if history else split, allow_tmux_escape=allow_tmux_escape)
        ids = ids or [r["id"] for r in summary["instances"]]
        succeeded = [r["id"] for r in summary["instances"] if r["status"] == "succeeded"]
        checked = check_cmd.check(project, task, instances=succeeded) if succeeded else None
        step: Round = {"round": len(history) + 1, "run": summary, "check": checked, "retried": []}
        history.append(step)
        record = project.store.load(task)
        if summary["interrupted"] or len(history) >= rounds:
            break
        again = retry_candidates(record, ids)
        if not again:
            break
        for inst_id in again:
            retry_cmd.retry(project, task, inst_id)
        step["retried"] = again
        wanted = again
    record = project.store.load(task)
    tracks = {find_instance(record, i)["track"] for i in ids}
    passed = sorted(i for i in ids if find_instance(record, i)["verdict"] == "pass")
    return {"task": task, "run_id": record["run_id"], "rounds": history, "passed": passed,
            "tracks_passed": sorted(satisfied_tracks(record) & tracks), "tracks": sorted(tracks),
            "ok": tracks <= satisfied_tracks(record) and not history[-1]["run"]["interrupted"],
            "notes_error": next((s["run"]["notes_error"] for s in history if s["run"]["notes_error"]), None),
            "warnings": _said_once(history)}


def _said_once(history: list[Round]) -> list[str]:
    """Every round's warnings (its run's and its check's), each once."""
    said: list[str] = []
    for step in history:
        checked = step["check"]
        for warning in [*step["run"].get("warnings", []), *((checked.get("warnings") or []) if checked else [])]:
            if warning not in said:
                said.append(warning)
    return said
