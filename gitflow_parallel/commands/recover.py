"""``git parallel recover``: repair what ``validate`` finds, in the one order
``recovery/plan`` keeps, or refuse and change nothing."""

from __future__ import annotations

import re
from typing import Any, NotRequired, TypedDict

import yaml

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError, is_no_space, no_space
from gitflow_parallel.model import FINISHED_RUN
from gitflow_parallel.files import load_yaml
from gitflow_parallel.state.store import read_record_text
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.recovery.context import RunContext
from gitflow_parallel.recovery.inspection import all_records, inspect_run, lock_findings, orphan_findings
from gitflow_parallel.recovery.plan import apply_repairs, audit, in_order, audit_path
from gitflow_parallel.recovery import workers
from gitflow_parallel.recovery.scan import Scan, recovery_id
from gitflow_parallel.shapes.records import RunRecord


# -- recover --------------------------------------------------------------------------
def _refuse_unloadable(project: Project, task: str, exc: ParallelError) -> ParallelError:
    """A record that does not load cannot be reconciled; say so, in its audit
    log if its run id can still be read."""
    try:
        raw = load_yaml(read_record_text(project.store.path(task)))[0]
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        raw = None
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    if isinstance(run_id, str) and re.fullmatch(r"PR-[0-9a-f-]{36}", run_id):
        rev = raw.get("run_revision") if isinstance(raw.get("run_revision"), int) else 0
        audit(project, run_id, recovery_id(run_id, rev), None, task, "refused", run_revision=rev,
               what="load the run record", why=exc.message)
    return ParallelError(
        E.RECOVERY_REFUSED,
        f"cannot recover {task!r}: {exc.message}",
        hint="the record itself is damaged; restore it from a backup (recover never rewrites what it cannot read)",
    )


class Recovered(TypedDict):
    """``recover``: what it found and did (``plan``: the repairs decided,
    ``repaired``: those done; ``left``: findings it leaves to a person)."""
    task: str
    run_id: str
    recovery_id: str
    run_revision: int
    dry_run: bool
    audit: str
    noop: bool
    plan: list[dict[str, Any]]
    repaired: list[dict[str, Any]]
    left: list[dict[str, Any]]
    next: list[str]
    worker: NotRequired[bool]  # a worker's own instances, taken apart
    run_revision_after: NotRequired[int]
    status: NotRequired[str]


def _recover_workers(project: Project, task: str, dry_run: bool) -> Recovered | None:
    """Take apart what a worker of this clone that is gone left of ``task``
    (``recovery/workers``); None when no worker here ever worked on it."""
    kept = [rec for _, rec in workers.worker_records(project, task)]
    if not kept:
        return None
    left = workers.left_behind(project, task)
    record = next((i.record for i in left if not i.waiting), kept[-1])
    rid, run_id = recovery_id(record["run_id"], record["run_revision"]), record["run_id"]
    plan: list[dict[str, Any]] = [
        {"step": "take_apart_worker_instance", "why": "its worker is gone and its claim is no longer its",
         "what": f"archive the tip of worker instance {i.inst['id']} of run {i.record['run_id']} "
                 f"({i.inst['status']}), remove its branch and worktree, record it aborted",
         "details": {"run_id": i.record["run_id"], "instance": i.inst["id"], "claim": i.inst.get("claim")}}
        for i in left if not i.waiting]
    waiting = [f.as_json() for f in workers.findings(project, task) if f.severity != "error"]
    base: Recovered = {"task": task, "run_id": run_id, "recovery_id": rid, "run_revision": record["run_revision"],
                       "dry_run": dry_run, "audit": str(audit_path(project, run_id)), "worker": True, "plan": plan,
                       "left": waiting, "next": [], "noop": not plan, "repaired": []}
    if dry_run or not plan:
        return base
    audit(project, run_id, rid, record, task, "validated", what="plan", why="worker instances left behind", plan=plan)
    repaired = []
    for step, done in zip(plan, workers.tidy(project, [i for i in left if not i.waiting])):
        if done.get("problem"):
            waiting.append({"code": done["code"], "severity": "error", "task": task, "run_id": done["run_id"],
                            "instance": done["id"], "message": done["problem"], "fix": done["hint"],
                            "repair": None, "refusal": done["problem"]})
            continue
        repaired.append({**step, "details": {**step["details"], **done}})
        audit(project, done["run_id"], rid, record, task, "repaired", **repaired[-1])
    after = next((rec for _, rec in workers.worker_records(project, task) if rec["run_id"] == run_id), record)
    base.update({"repaired": repaired, "run_revision_after": after["run_revision"], "status": after["status"]})
    return base


def recover(project: Project, task: str, dry_run: bool = False) -> Recovered:
    """Repair what a crash left, or refuse and change nothing; on a full
    disk, refuse with ``PARALLEL_NO_SPACE`` (what was done stays done)."""
    check_name(task, "task")
    try:
        return _recover(project, task, dry_run)
    except Exception as exc:
        if not is_no_space(exc):
            raise
        raise no_space(f"recover of {task!r} stopped ({exc})",
                       f"`git parallel recover {task}` again: every step is idempotent, and "
                       f"{project.repo.parallel_dir / 'audit'} says which were done") from None


def _recover(project: Project, task: str, dry_run: bool) -> Recovered:
    store = project.store
    if not store.exists(task):
        # A worker's clone keeps its runs apart from its own: they are reconciled on their own.
        from_workers = _recover_workers(project, task, dry_run)
        if from_workers is not None:
            return from_workers
    with store.lock():
        try:
            record = store.load(task)
        except ParallelError as exc:
            if exc.code == E.RECORD_INVALID:
                raise _refuse_unloadable(project, task, exc) from None
            if exc.code != E.RUN_NOT_FOUND:
                raise
            live, done, _ = all_records(project)
            orphans = orphan_findings(Scan(project), live + done + workers.records(project), task)
            if not orphans:
                raise
            raise ParallelError(
                E.RECOVERY_REFUSED,
                f"task {task!r} has no run record, but git holds leftovers named after it: "
                + "; ".join(f.message for f in orphans),
                hint="; ".join(dict.fromkeys(f.fix for f in orphans)),
                findings=[f.as_json() for f in orphans],
            ) from None
        scan = Scan(project)
        ctx = RunContext(scan, record)
        findings = inspect_run(ctx) + lock_findings(scan, task)
        live, done, _ = all_records(project)
        orphans = orphan_findings(scan, live + done + workers.records(project), task)
        findings += [f for f in orphans if f.repair or f.refusal]
        rid, run_id = ctx.rid, record["run_id"]
        refused = [f for f in findings if f.refusal]
        repairs = [f.repair for f in findings if f.repair is not None]
        left = [f for f in findings if f.repair is None and f.refusal is None]
        base: Recovered = {"task": task, "run_id": run_id, "recovery_id": rid, "run_revision": record["run_revision"],
                           "dry_run": dry_run, "audit": str(audit_path(project, run_id)), "noop": False, "plan": [],
                           "repaired": [], "left": [], "next": []}
        if refused:
            if not dry_run:
                audit(project, run_id, rid, record, task, "refused",
                       what="recover", why="; ".join(f.refusal or "" for f in refused),
                       findings=[f.as_json() for f in refused])
            raise ParallelError(
                E.RECOVERY_REFUSED,
                f"recover of {task!r} cannot decide {len(refused)} thing(s), so nothing was changed: "
                + "; ".join(f.refusal or "" for f in refused),
                hint="; ".join(dict.fromkeys(f.fix for f in refused)),
                recovery_id=rid, findings=[f.as_json() for f in refused],
            )
        left_json = [f.as_json() for f in left] + _left_instances(record)
        if not repairs:
            if not dry_run:
                audit(project, run_id, rid, record, task, "idempotent_noop",
                       what="recover", why="nothing to repair: the records agree with git",
                       left=[f["message"] for f in left_json])
            base.update({"noop": True, "left": left_json, "next": _next_steps(record)})
            return base
        repairs = in_order(repairs)
        plan = [r.as_json() for r in repairs]
        if dry_run:
            base.update({"plan": plan, "left": left_json})
            return base
        audit(project, run_id, rid, record, task, "validated", what="plan",
               why="every candidate repair was decided before any change", plan=plan)
        try:
            done_steps = apply_repairs(project, record, rid, repairs)
        except BaseException as exc:
            # Every step is idempotent, so what was done stays done and the
            # next recover picks up from there; the log says where it stopped.
            why = exc.message if isinstance(exc, ParallelError) else f"{type(exc).__name__}: {exc}"
            try:
                audit(project, run_id, rid, record, task, "refused", what="apply the plan",
                       why=f"a step failed, the steps logged before it are done: {why}")
            except OSError:
                pass  # a full disk: the error itself says so
            raise
        record = store.load(task)
        left_json = [f.as_json() for f in left] + _left_instances(record)
        base.update({"plan": plan, "repaired": done_steps, "left": left_json, "run_revision_after": record["run_revision"],
                     "status": record["status"], "next": _next_steps(record)})
        return base


def _left_instances(record: RunRecord) -> list[dict[str, object]]:
    """Failed and aborted instances are consistent, but they are what a user
    most likely wants to act on next; recover never retries them."""
    if record["status"] in FINISHED_RUN:
        return []
    return [{"code": E.BRANCH_TERMINAL, "severity": "info", "task": record["task"], "run_id": record["run_id"],
             "instance": i["id"], "message": f"instance {i['id']} is {i['status']}: {i.get('error') or 'no reason recorded'}",
             "fix": f"git parallel retry {record['task']} {i['id']}", "repair": None, "refusal": None}
            for i in record["instances"] if i["status"] in ("failed", "aborted") and not i.get("removed")]


def _next_steps(record: RunRecord) -> list[str]:
    task, status = record["task"], record["status"]
    if status == "merged":
        if any(not i.get("removed") for i in record["instances"]):
            return [f"git parallel cleanup {task}"]
        return [f"git parallel spawn {task}"]
    if status == "aborted":
        return [f"git parallel spawn {task}"]
    if status == "picked":
        return [f"git parallel merge {task}"]
    if any(i["status"] == "pending" for i in record["instances"]):
        return [f"git parallel run {task} -- CMD"]
    if any(i["status"] == "succeeded" for i in record["instances"]):
        return [f"git parallel check {task}", f"git parallel pick {task}"]
    return [f"git parallel retry {task} ID"]
