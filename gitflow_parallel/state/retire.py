"""Retiring instances: archive each branch tip, remove worktrees and
branches once nothing of the attempt would be lost, and record it.

``cleanup`` and ``merge`` (which cleans up after landing) both go through
``cleanup`` here."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict


from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.git import worktrees
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import Stager, worktree_changes
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import FINISHED_RUN, InstanceRecord, RunRecord



def check_removable(project: Project, record: RunRecord, insts: list[InstanceRecord], force: bool,
                     what: str = "remove the worktree") -> None:
    """Refuse before anything changes if a worktree holds uncommitted work
    (unless ``force``), or anything removal could not keep (even with it)."""
    for inst in insts:
        if not inst.get("removed"):
            worktrees.check_removable(project.repo, record, inst)
    if force:
        return
    for inst in insts:
        path = Path(inst["worktree"])
        if inst.get("removed") or not (path / ".git").exists():
            continue
        dirty = worktree_changes(path, scratch_patterns(record["config"]))
        if dirty:
            shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
            raise ParallelError(
                E.WORKTREE_CLEANUP_FAILED,
                f"the worktree of instance {inst['id']} ({path}) has uncommitted changes: {shown}",
                hint=f"commit or discard them, or pass --force to keep them on the archive ref and {what}",
            )


def remove_all(project: Project, record: RunRecord, insts: list[InstanceRecord],
               force: bool, stage: Stager | None = None) -> tuple[list[dict[str, Any]], RunRecord]:
    """Remove the worktrees and branches of ``insts`` (tips archived; with
    ``force`` their uncommitted work too, staged by ``stage``) and record it
    in ``record``, loaded under the lock the caller holds; the record as saved."""
    done = []
    for inst in insts:
        if inst.get("removed"):
            continue
        done.append(worktrees.remove(project.repo, record, inst, force=force, stage=stage))
    ids = {d["id"] for d in done}
    if ids:
        def apply(rec: RunRecord) -> None:
            for i in rec["instances"]:
                if i["id"] in ids:
                    model.mark_removed(i)
                    model.bump(i)
        record, _ = project.store.update_loaded(record, apply)
    return done, record


class Cleanup(TypedDict):
    """What ``cleanup`` did: the record as saved, what it removed, what it kept."""
    run: RunRecord
    removed: list[dict[str, Any]]
    kept: list[str]


def cleanup(project: Project, task: str, keep_losers: bool = False, force: bool = False,
            stage: Stager | None = None) -> Cleanup:
    """Remove the worktrees and branches of a finished run, tips archived first
    (with ``keep_losers``, only the winners'; ``stage``: see ``remove_all``)."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        if record["status"] not in FINISHED_RUN:
            raise ParallelError(
                E.WORKTREE_CLEANUP_FAILED,
                f"run {record['run_id']} of {task!r} is {record['status']}, not merged or aborted",
                hint=f"merge it (`git parallel merge {task}`) or abort it (`git parallel abort {task}`) first",
            )
        winners = {p.get("winner") for p in (record.get("picks") or {}).values()}
        insts = [i for i in record["instances"] if not keep_losers or i["id"] in winners]
        check_removable(project, record, insts, force)
        removed, record = remove_all(project, record, insts, force, stage)
    return {"run": record, "removed": removed, "kept": [i["id"] for i in record["instances"] if not i.get("removed")]}
