"""``git parallel validate``: every inconsistency between the run records,
git and the files under ``parallel/``, as findings; it changes nothing."""

from __future__ import annotations

from typing import Any, TypedDict


from gitflow_parallel import errors as E
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.recovery.context import RunContext
from gitflow_parallel.recovery.inspection import all_records, inspect_run, intent_findings, lock_findings, orphan_findings
from gitflow_parallel.recovery import workers
from gitflow_parallel.recovery.inspect_notes import note_findings
from gitflow_parallel.recovery.scan import ERROR, Finding, Scan


class Validated(TypedDict):
    """``validate``: the runs checked, every finding (as ``Finding.as_json``), how many are errors."""
    ok: bool
    task: str | None
    errors: int
    warnings: int
    runs: list[dict[str, object]]
    findings: list[dict[str, Any]]


# -- validate ------------------------------------------------------------------------
def validate(project: Project, task: str | None = None) -> Validated:
    """Every inconsistency, as findings; ``ok`` is False when any is an error."""
    if task is not None:
        check_name(task, "task")
    scan = Scan(project)
    live, done, problems = all_records(project)
    findings: list[Finding] = []
    for path_task, exc in problems:
        if task is None or path_task == task:
            findings.append(Finding(E.RECORD_INVALID, ERROR, exc.message, exc.hint or "", task=path_task))
    checked = [r for r in live if task is None or r["task"] == task]
    for rec in checked:
        findings += inspect_run(RunContext(scan, rec))
    orphans = orphan_findings(scan, live + done + workers.records(project), task)
    findings += orphans
    gone = workers.findings(project, task)
    findings += gone
    if task is None:
        findings += intent_findings(project, live, done)
    noted = note_findings(scan, live + done, task)
    findings += noted
    findings += lock_findings(scan, task)
    found = orphans or gone or noted
    if task is not None and not checked and not found and not any(f.code == E.RECORD_INVALID for f in findings):
        project.store.load(task)  # raises PARALLEL_RUN_NOT_FOUND with its hint
    errors = sum(1 for f in findings if f.severity == ERROR)
    return {"ok": errors == 0, "task": task, "errors": errors, "warnings": len(findings) - errors,
            "runs": [{"task": r["task"], "run_id": r["run_id"], "status": r["status"],
                      "run_revision": r["run_revision"]} for r in checked],
            "findings": [f.as_json() for f in findings]}
