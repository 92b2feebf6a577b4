"""Work done by hand: an instance a person worked on in its worktree, with
no ``git parallel run``.

Such an instance stays ``pending`` (no agent ever ran), yet its branch holds
real commits.  Two ways make it count, both recorded as ``succeeded`` with
``"origin": "hand"`` (``run`` records ``"origin": "run"`` implicitly: the
field is absent or null there), so that ``check``, ``pick`` and ``merge``
treat it like any finished attempt:

* ``check`` adopts every pending instance whose branch moved from the commit
  its attempt started at, and every pending instance named with
  ``--instance`` (:func:`adopt`); a pending worktree with uncommitted changes
  refuses the check, pointing at ``done``;
* ``git parallel done TASK ID`` marks one finished, first committing what it
  left uncommitted exactly as ``run`` would (:func:`done`).

A worktree with uncommitted changes is never adopted by ``check`` (evidence
must describe a commit): ``done`` commits them, or the person does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.git.repo import Stager, commit_all, worktree_changes
from gitflow_parallel.model import FINISHED_RUN, InstanceRecord, RunRecord, find_instance
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.provenance import instance_note, leftovers_message

HAND = "hand"


def _usable(project: Project, record: RunRecord, inst: InstanceRecord) -> str:
    """The tip of a pending instance that can be marked finished; refuses one
    whose branch or worktree is gone or whose worktree is on another commit."""
    task, path = record["task"], Path(inst["worktree"])
    tip = project.tip(inst)
    if tip is None or inst.get("removed") or not (path / ".git").exists():
        raise ParallelError(
            E.BRANCH_NOT_FOUND, f"the branch or worktree of instance {inst['id']} is missing",
            hint=f"`git parallel validate {task}` and `git parallel recover {task}`")
    head = _symbolic_head(path)
    if head != f"refs/heads/{inst['branch']}":
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"the worktree of instance {inst['id']} ({path}) is on {head or 'a detached HEAD'}, not {inst['branch']}",
            hint=f"put the work on its branch (git -C {path} switch {inst['branch']}) and try again")
    return tip


def _symbolic_head(path: Path) -> str | None:
    """The branch a worktree's HEAD names, or None when detached."""
    head = pygit2.Repository(str(path)).references.get("HEAD")
    return head.target if head is not None and isinstance(head.target, str) else None


def _finish(record: RunRecord, inst: InstanceRecord, tip: str) -> None:
    model.finish(record, inst, "succeeded", origin=HAND, head=tip, finished_at=utcnow(), exit_code=None,
                 error=None, pid=None)


def adopt(project: Project, record: RunRecord, named: list[str] | None) -> RunRecord:
    """For ``check``: mark the pending instances that hold hand work
    succeeded (origin hand) before the gates judge them; returns the record."""
    task = record["task"]
    wanted = list(dict.fromkeys(named)) if named else None
    candidates = [find_instance(record, i) for i in wanted] if wanted else list(record["instances"])
    chosen: dict[str, str] = {}
    for inst in candidates:
        if inst["status"] != "pending" or inst.get("removed"):
            continue
        tip = project.tip(inst)
        if tip is None or not (Path(inst["worktree"]) / ".git").exists():
            if wanted is None:
                continue  # broken: validate and recover speak about it
        dirty = worktree_changes(inst["worktree"], scratch_patterns(record["config"])) if tip is not None else []
        if wanted is None and tip == inst["head"] and not dirty:
            continue  # nothing done here yet
        tip = _usable(project, record, inst)
        if dirty:
            shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
            raise ParallelError(
                E.EVIDENCE_MISMATCH,
                f"instance {inst['id']} holds work done by hand with uncommitted changes ({shown}); "
                "evidence must describe a commit",
                hint=f"`git parallel done {task} {inst['id']}` commits them and marks it finished; then check again",
                paths=dirty)
        chosen[inst["id"]] = tip
    if not chosen:
        return record

    def apply(rec: RunRecord) -> None:
        for inst_id, tip in chosen.items():
            i = find_instance(rec, inst_id)
            if i["status"] != "pending":
                raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {inst_id} became {i['status']} meanwhile",
                                    hint=f"see `git parallel status {task}` and check again")
            _finish(rec, i, tip)
            model.bump(i)

    record, _ = project.store.update(task, apply)
    project.mirror_notes(record, [(tip, instance_note(record, find_instance(record, i), tip))
                                  for i, tip in chosen.items()], "hand work")
    return record


class Done(TypedDict):
    """What ``done`` did: the instance as saved, the commit of its leftovers (if any)."""
    run_id: str
    task: str
    instance: InstanceRecord
    committed: str | None
    notes_error: str | None


def done(project: Project, task: str, inst_id: str, stage: Stager | None = None) -> Done:
    """A person says instance ``inst_id`` is finished: its leftovers are
    committed (``commit_leftovers``; staged by ``stage``: the worktree may
    hold what an earlier attempt wrote) and it becomes succeeded, origin hand."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        if record["status"] in FINISHED_RUN:
            raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} is {record['status']}",
                                hint=f"spawn a new run with `git parallel spawn {task}`")
        inst = find_instance(record, inst_id)
        if inst["status"] != "pending":
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"instance {inst_id} is {inst['status']}; only a pending instance (no agent run) is finished by hand",
                hint=(f"`git parallel retry {task} {inst_id} --keep` starts a new attempt on its work"
                      if inst["status"] != "running" else f"wait for it, or `git parallel abort {task} {inst_id}`"))
        tip = _usable(project, record, inst)
        committed = None
        if record["config"].get("commit_leftovers", True):
            message = leftovers_message(task, record["run_id"], inst_id, inst["attempt"],
                                        "Uncommitted when `git parallel done` marked the work by hand finished.")
            committed = commit_all(inst["worktree"], message, scratch=scratch_patterns(record["config"]), stage=stage)
            tip = project.tip(inst) or tip

        def apply(rec: RunRecord, i: InstanceRecord) -> None:
            _finish(rec, i, tip)

        record, _ = store.update_instance(task, inst_id, apply, expected_attempt=inst["attempt"])
    inst = find_instance(record, inst_id)
    warning = project.mirror_notes(record, [(tip, instance_note(record, inst, tip))], f"done {inst_id}")
    return {"run_id": record["run_id"], "task": task, "instance": inst, "committed": committed,
            "notes_error": warning}
