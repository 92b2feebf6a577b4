"""What an agent leaves when it exits: how its exit reads (succeeded, failed,
aborted, and why), and its uncommitted work, committed on its branch the way
git would (``git add -A``, so clean filters run) or, when the branch was
deleted or moved off the base meanwhile, kept under archive refs instead.
Untracked files the run's ``leftovers_exclude`` matches (an agent's own
scratch: chat histories, caches, settings) stay out of that commit, and out
of every "uncommitted changes" check (``config.scratch_patterns``).

``proc/engine`` calls these once per finished agent, before the finish is
recorded; the agent is untrusted, so a worktree left on another branch or a
detached HEAD fails the instance rather than committing where it points."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from gitflow_parallel.errors import is_no_space
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.files import remove_hostile_files, utcnow
from gitflow_parallel.git.repo import Stager, commit_all, stage_all
from gitflow_parallel.proc import reaper, sandbox
from gitflow_parallel.proc.supervise import KILL_GRACE, signame
from gitflow_parallel.provenance import leftovers_message, stray_leftovers_message
from gitflow_parallel.model import RunRecord
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.store import Store

if TYPE_CHECKING:  # (child imports what runs an agent; these only read and set its outcome)
    from gitflow_parallel.proc.child import Child


def classify_exit(child: Child, rc: int, timeout: float | None) -> None:
    """Set ``child``'s exit code, status and error from its wait status ``rc``
    and why it was stopped (``child.reason``: timeout or a signal to run)."""
    child.exit_code = rc if rc >= 0 else 128 - rc
    if child.reason == "timeout":
        child.status = "failed"
        child.error = (f"timed out after {timeout:g}s; its process group was sent SIGTERM"
                       + (f", then SIGKILL {KILL_GRACE:g}s later" if child.killed else ""))
    elif child.reason is not None:
        child.status = "aborted"
        child.error = f"stopped: git parallel run received {child.reason}"
    elif rc == 0:
        child.status = "succeeded"
    elif rc > 0:
        child.status = "failed"
        child.error = f"exited with status {rc}"
    else:
        child.status = "failed"
        child.error = f"killed by {signame(-rc)}"


def commit(project: Project, record: RunRecord, child: Child) -> None:
    """Commit what the agent left uncommitted on its branch (``child.committed``),
    or fail the instance saying why it could not be done."""
    import pygit2

    task, run_id = record["task"], record["run_id"]
    problem = _foreign_gitfile(project, task, child)
    if problem is not None:
        _fail(child, problem)
        return
    _remove_hostile(child)
    # Its fence has closed (its objects taken in, its view checked): git
    # stages what it left in a fence like it (the clean filters git runs
    # can run what the attempt wrote), and only if libgit2, which runs none,
    # sees anything to commit: one sandbox start less for a clean worktree.
    fenced = child.fence is not None and child.fence.kind != "none"
    stage = fenced_stager(project, task, record=record, staged=lambda fence: _say_staged(record, child, fence)) \
        if fenced else None
    try:
        wt = pygit2.Repository(child.worktree)
        head = wt.references.get("HEAD")
        on = head.target if head is not None and isinstance(head.target, str) else None
        tip = project.repo.ref_target(f"refs/heads/{child.branch}")
        base = record["base"]["commit"]
        if on != f"refs/heads/{child.branch}":
            where = on or "a detached HEAD"
            problem = f"the command left the worktree on {where}, not {child.branch}; its leftovers were not committed"
        elif tip is None or not project.repo.is_ancestor(base, tip):
            problem = _keep_broken_branch(project, task, run_id, child, tip, base, stage)
        else:
            message = leftovers_message(task, run_id, child.id, child.attempt,
                                        f"Uncommitted when the command exited ({child.status}, "
                                        f"exit {child.exit_code}).", command=child.argv)
            child.committed = commit_all(child.worktree, message,
                                         scratch=scratch_patterns(record["config"]), stage=stage)
            problem = _keep_nested(project, run_id, child)
    except Exception as exc:  # a broken worktree, or a full disk, fails this instance, not the run
        problem = ("could not commit leftovers: no space left on device" if is_no_space(exc)
                   else f"its leftovers could not be committed: {type(exc).__name__}: {exc}")
    if problem:
        _fail(child, problem)


def _say_staged(record: RunRecord, child: Child, fence: sandbox.Fence) -> None:
    """An ``engine_staged`` event: what it left was staged, in a fence whose layers it names."""
    from gitflow_parallel.proc.child import engine_event

    engine_event(child.events, {"event": "engine_staged", "ts": utcnow(), "run_id": record["run_id"],
                                "instance": child.id, "attempt": child.attempt, **fence.record()})


def _remove_hostile(child: Child) -> None:
    special = remove_hostile_files(Path(child.worktree))
    if special:
        _fail(child, f"it left {len(special)} file(s) in its worktree that git must not read (a FIFO, socket or "
                     f"device, or a .gitignore or .gitattributes over 8 MB; removed): {', '.join(special[:5])}")


def _fail(child: Child, problem: str) -> None:
    if child.status == "succeeded":
        child.status = "failed"
        child.error = f"exited 0 but {problem}"
    else:
        child.error = f"{child.error}; {problem}"


def _foreign_gitfile(project: Project, task: str, child: Child) -> str | None:
    """Why the worktree's ``.git`` is not the file naming its admin folder,
    or None.  git-parallel's own git must not find a repository the
    attempt made there (its config could name a filter, which the commit
    would run outside the sandbox)."""
    from gitflow_parallel.git import worktrees

    admin = project.repo.common_dir / "worktrees" / worktrees.admin_name(task, child.id)
    gitfile = Path(child.worktree) / ".git"
    try:
        said = gitfile.read_text(encoding="utf-8") if gitfile.is_file() and not gitfile.is_symlink() else None
    except OSError:
        said = None
    if said is not None and os.path.realpath(said.removeprefix("gitdir: ").strip()) == os.path.realpath(admin):
        return None
    return f"its worktree's .git is not the file naming {admin} (the command replaced it); nothing was committed"


def _keep_nested(project: Project, run_id: str, child: Child) -> str | None:
    """Archive the commits of nested repositories the branch now records as
    gitlinks, so that the attempt (and a landing of it) names nothing this
    repository lacks; what cannot be kept fails the instance."""
    from gitflow_parallel.git import nested

    tip = project.repo.ref_target(f"refs/heads/{child.branch}")
    if tip is None:
        return None
    _, lost = nested.archive(project.repo, run_id, child.id, child.attempt, Path(child.worktree), tip)
    if not lost:
        return None
    return (f"it committed nested repositories whose history could not be kept here: {', '.join(lost)} "
            "(their folders are left in the worktree)")


def _keep_broken_branch(project: Project, task: str, run_id: str, child: Child, tip: str | None, base: str,
                        stage: Stager | None) -> str:
    """The branch was deleted, or moved to history without the base, while
    the command ran (a sibling's ``git update-ref -d``): committing on it
    would make a root commit and orphan the attempt's work.  Keep the
    commits HEAD reached, and the leftovers, under archive refs instead."""
    from gitflow_parallel.git import worktrees

    repo = project.repo
    inst: worktrees.BranchAttempt = {"id": child.id, "branch": child.branch, "attempt": child.attempt}
    heads = worktrees.worktree_heads(repo, repo.common_dir / "worktrees" / worktrees.admin_name(task, child.id))
    parent = next((h for h in heads if h != tip and repo.is_ancestor(base, h)), base)
    message = stray_leftovers_message(task, run_id, child.id, child.attempt)
    extra = [oid for oid in [commit_all(child.worktree, message, ref=None, parent=parent, stage=stage)] if oid]
    kept = worktrees.keep_strays(repo, run_id, task, inst, extra=extra)
    what = "was deleted" if tip is None else f"was moved to {tip[:12]}, which does not descend from the base"
    where = f"; its work is kept at {', '.join(kept)}" if kept else ""
    return f"its branch {child.branch} {what} while the command ran, so nothing was committed on it{where}"


def fenced_stager(project: Project, task: str, store: Store | None = None, record: RunRecord | None = None,
                  staged: Callable[[sandbox.Fence], None] | None = None) -> Stager:
    """How an attempt's worktree is staged when git-parallel commits what it
    holds (after its agent, and outside a run: ``retry --force``,
    ``abort``/``cleanup --force``, ``recover``, ``done``, a worker's tidying):
    ``git add -A`` in a fence like its agent's, whose objects are taken in
    as the agent's are, since the filters git runs can run what the attempt
    wrote.  Where the machine gives no fence (or ``sandbox: off``),
    git-parallel's own git stages it, as it did.  ``store``: where the run's
    record is (a worker's, in its clone), if not the project's; ``record``:
    the record itself, when the caller holds it; ``staged``: told the
    fence once it staged there."""

    def stage(path: Path, skip: list[str]) -> None:
        nonlocal record
        record = record or (store or project.store).load(task)
        inst = next((i for i in record["instances"] if os.path.realpath(i["worktree"]) == os.path.realpath(path)),
                    None)
        if inst is None:
            stage_all(path, skip)
            return
        scope = reaper.agent_scope(record["run_id"], inst["id"], inst["attempt"]) + "-staging"
        fence = sandbox.for_agent(project.repo.common_dir, path, inst["branch"], record["config"], scope,
                                  main_workdir=project.repo.main_workdir)
        if fence.kind == "none":
            stage_all(path, skip)
            return
        try:
            stage_all(path, skip, run=lambda argv, cwd, env, stdin: fence.run(
                argv, cwd, {**env, reaper.SCOPE_ENV: scope}, stdin))
        finally:
            fence.close()
            reaper.sweep({scope})
        if fence.refused_objects:
            raise RuntimeError(f"what git staged there could not all be taken in: {'; '.join(fence.refused_objects[:3])}")
        if staged is not None:
            staged(fence)

    return stage
