"""``git parallel status``: every run, or one run's instances with their flags.

People type it to look, so it starts fast: what only some answers need
(archive refs, a teammate's fetched run) is imported where it is needed."""

from __future__ import annotations

from pathlib import Path
from typing import overload


from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.shapes.records import RunRecord
from gitflow_parallel.shapes.results import StatusDetail, StatusListResult, StatusRow


# -- status --------------------------------------------------------------------
def describe(project: Project, record: RunRecord) -> list[StatusRow]:
    """Per instance: what the record says plus what git and the OS say now."""
    rows: list[StatusRow] = []
    winners = {p["winner"] for p in (record.get("picks") or {}).values()}
    for inst in record["instances"]:
        tip = project.tip(inst)
        if inst.get("removed"):
            from gitflow_parallel.git import worktrees

            # Its branch is gone; its last tip lives on in the archive ref.
            tip = project.repo.ref_target(worktrees.archive_ref(record["run_id"], inst["id"], inst["attempt"]))
        fresh = evidence.freshness(record, inst, tip)
        flags: list[str] = []
        if inst["status"] == "running" and not project.instance_alive(record, inst):
            flags.append("process gone")
        if inst["status"] == "pending" and tip is not None and tip != inst["head"]:
            flags.append("hand work: `check` takes it")
        if not inst.get("removed"):
            if tip is None:
                flags.append("branch missing")
            if not Path(inst["worktree"]).exists():
                flags.append("worktree missing")
        if model.changed_nothing(inst):
            flags.append("no change")
        if inst["id"] in winners:
            flags.append("picked winner")
        rows.append({**inst, "tip": tip, "evidence_state": fresh.state, "evidence_reason": fresh.reason,
                     "flags": flags, "sandbox": evidence.layers_held(inst, fresh.pack)})
    return rows


@overload
def status(project: Project, task: None = None) -> StatusListResult: ...
@overload
def status(project: Project, task: str) -> StatusDetail: ...
def status(project: Project, task: str | None = None) -> StatusListResult | StatusDetail:
    if task is None:
        from gitflow_parallel.state import share

        records, problems = project.store.load_all()
        local = {r["task"] for r in records}
        # The newest fetched run of each task that has no record here.
        fetched: dict[str, RunRecord] = {}
        # (A snapshot of a run recorded here says what its record says: not read.)
        for rec, _ in share.shared_runs(project, known=[r["run_id"] for r in records]):
            if rec["task"] not in local:
                fetched.setdefault(rec["task"], rec)
        return {"runs": [{"task": r["task"], "run_id": r["run_id"], "status": r["status"],
                          "base": r["base"]["ref"], "instances": len(r["instances"]),
                          "updated_at": r["updated_at"], "fetched": r["task"] in fetched}
                         for r in records + sorted(fetched.values(), key=lambda r: r["task"])],
                "problems": [{"code": p.code, "message": p.message} for _, p in problems]}
    check_name(task, "task")
    try:
        record = project.store.load(task)
    except ParallelError as exc:
        if exc.code != E.RUN_NOT_FOUND:
            raise
        from gitflow_parallel.state import view

        return view.shared_status(project, task)  # a run fetched from a teammate
    return {"run": record, "rows": describe(project, record),
            "base_tip": project.repo.ref_target(record["base"]["ref"])}
