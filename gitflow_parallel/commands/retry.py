"""``git parallel retry``: the next attempt of an instance, its old tip archived first."""

from __future__ import annotations

import os
from pathlib import Path
from gitflow_parallel import errors as E
from gitflow_parallel import model, provenance
from gitflow_parallel.files import remove_tree
from gitflow_parallel.git import worktrees
from gitflow_parallel.state import landing
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import commit_all, worktree_changes
from gitflow_parallel.names import check_name
from gitflow_parallel.proc import leftovers
from gitflow_parallel.state.project import Project, notes_instance_on
from gitflow_parallel.provenance import instance_note
from gitflow_parallel.model import RETRYABLE, find_instance
from gitflow_parallel.state.retire import check_removable
from gitflow_parallel.model import refuse_finished
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord
from gitflow_parallel.shapes.results import RetryResult


START_BASE, START_BASE_TIP, START_KEEP = "base", "base-tip", "previous-attempt"

def attempt_start(record: RunRecord, inst: InstanceRecord) -> str:
    """The commit the instance's current attempt started from: the spawn's
    base unless a retry said otherwise (``--onto-current``, ``--keep``)."""
    start = inst.get("start") or {}
    return start.get("commit") or record["base"]["commit"]


def _refuse_retry(project: Project, record: RunRecord, inst: InstanceRecord, force: bool,
                  onto_current: bool) -> str | None:
    """May this attempt be replaced by a new one?  Failed and aborted ones
    may; a succeeded one whose verdict is fail may (it failed its gates); any
    other succeeded one only with ``force``; a picked winner only onto the
    current base (it no longer lands on it): returns the track whose pick
    that retires."""
    task, inst_id = record["task"], inst["id"]
    winners = {p.get("winner"): t for t, p in (record.get("picks") or {}).items()}
    if inst_id in winners:
        if onto_current:
            return winners[inst_id]
        raise ParallelError(
            E.BRANCH_TERMINAL, f"instance {inst_id} won the pick of track {winners[inst_id]}; its work is final",
            hint=f"`git parallel retry {task} {inst_id} --onto-current` retires the pick and starts a new attempt "
                 f"on the base as it is now (for a winner that no longer lands); `git parallel unpick {task} "
                 f"--track {winners[inst_id]}` only retires the pick")
    if inst["status"] in RETRYABLE or (inst["status"] == "succeeded" and (inst["verdict"] == "fail" or force)):
        return None
    if inst["status"] == "succeeded":
        verdict = "passed its gates" if inst["verdict"] == "pass" else "not been checked"
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"instance {inst_id} succeeded and has {verdict}; only failed attempts (a failed run or a fail "
            "verdict) or aborted ones are retried without --force",
            hint=f"`git parallel retry {task} {inst_id} --force` replaces it anyway (its tip is archived)")
    raise ParallelError(
        E.BRANCH_TERMINAL, f"instance {inst_id} is {inst['status']}; only finished instances can be retried",
        hint=f"wait for it to finish, or `git parallel abort {task} {inst_id}` first")


def _refuse_spent_or_stale(record: RunRecord, inst: InstanceRecord, expected_revision: int | None) -> None:
    """An instance that used its ``rework_max`` retries, or a run that
    changed since its revision was read, is refused."""
    rework_max = record["config"]["rework_max"]
    if inst["attempt"] >= rework_max:
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"instance {inst['id']} has used its {rework_max} retries (rework_max)",
            hint="raise rework_max in .gitparallel.yaml for new runs, or spawn a new run",
        )
    if expected_revision is not None and record["run_revision"] != expected_revision:
        raise ParallelError(
            E.RUN_REVISION_CONFLICT,
            f"run {record['run_id']} is at revision {record['run_revision']}, not {expected_revision} as read",
            hint=f"someone else changed it meanwhile; read it again (`git parallel status {record['task']}`) and retry",
        )


def _start_point(project: Project, record: RunRecord, inst: InstanceRecord, tip: str | None,
                 onto_current: bool, keep: bool) -> tuple[str, str]:
    """Where the next attempt starts, and how that is recorded."""
    if onto_current:
        start = project.repo.ref_target(record["base"]["ref"])
        if start is None:
            raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {record['base']['ref']} no longer exists",
                                hint="recreate it, or retry without --onto-current")
        return start, START_BASE_TIP
    if keep:
        return tip or inst["head"] or attempt_start(record, inst), START_KEEP
    return record["base"]["commit"], START_BASE


def _make_again(project: Project, task: str, inst: InstanceRecord, tip: str | None, start: str) -> None:
    """The worktree is gone (aborted and cleaned, or lost): make its branch
    and worktree again at ``start`` (its tip was archived before)."""
    repo, path = project.repo, Path(inst["worktree"])
    if os.path.lexists(path):
        raise ParallelError(
            E.WORKTREE_CREATE_FAILED, f"{path} exists but is not the instance's worktree",
            hint="move it away and retry")
    # A worktree whose folder was deleted by hand leaves git's admin
    # folder behind; it points at nothing, so it is safe to drop.
    admin = repo.common_dir / "worktrees" / worktrees.admin_name(task, inst["id"])
    if admin.is_dir():
        remove_tree(admin)
    if tip is not None:
        repo.pygit.branches.local.delete(inst["branch"])  # its tip is archived above
    worktrees.create(repo, task, start, [inst.copy()])


def retry(project: Project, task: str, inst_id: str, expected_revision: int | None = None,
          force: bool = False, onto_current: bool = False, keep: bool = False) -> RunRecord | RetryResult:
    """Start attempt + 1 of an instance: from the spawn's base (default), the
    base branch's current tip (``onto_current``) or the attempt's own tip
    (``keep``); the old tip is archived first, and feedback on it is written
    for the new attempt's agent."""
    from gitflow_parallel.state import feedback
    from gitflow_parallel.state.picks import picks_of_track, retire_picks

    check_name(task, "task")
    if onto_current and keep:
        raise ParallelError(E.INVALID_NAME, "--onto-current and --keep exclude each other",
                            hint="--keep goes on from the attempt's tip; --onto-current starts afresh on the base's tip")
    check_name(inst_id, "instance")
    repo, store = project.repo, project.store
    with store.lock():
        record = store.load(task)
        inst = find_instance(record, inst_id)
        refuse_finished(record, "retry")
        unpicked = _refuse_retry(project, record, inst, force, onto_current)
        _refuse_spent_or_stale(record, inst, expected_revision)
        tip = project.tip(inst)
        start, how = _start_point(project, record, inst, tip, onto_current, keep)
        path = Path(inst["worktree"])
        # Our worktree whose branch was deleted under it is reset like any other.
        usable = (path / ".git").exists() and (tip is not None or worktrees.is_our_worktree(repo, task, inst))
        if usable and not keep:
            # The reset below would destroy uncommitted work: refuse it, or
            # with --force keep it on the archive ref first.  (--keep resets
            # nothing: uncommitted work stays for the next attempt.)
            check_removable(project, record, [inst], force, what="reset it to the base")
            if force and worktree_changes(path):
                tip = commit_all(path, provenance.kept_at_retry_message(task, inst_id, inst["attempt"]),
                                 ref=None, parent=tip or start, stage=leftovers.fenced_stager(project, task)) or tip
        moved = _base_moved(project, record, inst, tip, start, unpicked) if onto_current else None
        retired = retire_picks(project, record, [unpicked]) if unpicked else []
        notes_for = feedback.write(repo.parallel_dir, record, inst, tip, picks_of_track(project, record, inst["track"]),
                                   moved)
        archived = None
        if tip is not None:
            archived = worktrees.archive(repo, record["run_id"], inst_id, inst["attempt"], tip)
        # The reset (or the new worktree) starts a fresh HEAD: keep what the
        # old one reached that the branch does not hold (a detached HEAD).
        kept = worktrees.keep_strays(repo, record["run_id"], task, inst)
        if usable:
            if project.tip(inst) is None:
                import pygit2

                repo.pygit.branches.local.create(inst["branch"], repo.pygit[start].peel(pygit2.Commit))
            if not keep:
                worktrees.reset(repo, inst, start)
        else:
            _make_again(project, task, inst, tip, start)

        def apply(rec: RunRecord, i: InstanceRecord) -> None:
            if retired:
                model.retire_picks(rec, retired)
            model.reset_for_retry(i, start, how, tip, archived, kept, notes_for)

        record, _ = store.update_instance(task, inst_id, apply, expected_revision=expected_revision)
    inst = find_instance(record, inst_id)
    entries = [(r["commit"], provenance.unpick_note(record, r)) for r in retired if r["commit"]]
    if notes_instance_on(record, start, inst):  # not a fresh attempt on a base commit
        entries.append((start, instance_note(record, inst, start)))
    if not entries:
        return record
    warning = project.mirror_notes(record, entries, f"retry {inst_id}")
    if warning:
        return {**record, "notes_error": warning}
    return record


def _base_moved(project: Project, record: RunRecord, inst: InstanceRecord, tip: str | None, start: str,
                unpicked: str | None) -> dict[str, object] | None:
    """What the feedback says about an attempt retried onto the moved base:
    the base's tip, whether it had won the pick, the files it conflicts in."""
    if tip is None or tip == start or project.repo.is_ancestor(tip, start):
        return None
    return {"ref": record["base"]["ref"], "commit": start, "won": unpicked,
            "conflicts": landing.conflicting_paths(project.repo.pygit, start, tip)}
