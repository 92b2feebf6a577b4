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
from subprocess import CompletedProcess
from pathlib import Path
from typing import TYPE_CHECKING

from gitflow_parallel.errors import is_no_space
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.files import remove_hostile_files
from gitflow_parallel.git.repo import Stager, commit_all, read_gitdir_file, scratch_files, stage_all
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


def stage(project: Project, record: RunRecord, child: Child) -> None:
    """Before the attempt's fence closes: stage what its agent left with git
    run inside that fence (``child.staged``), since the clean filters git runs
    (Git LFS's, or a project's own script) run what the attempt could have
    written.  ``commit`` then writes the commit from the index, after the
    objects are taken in.  Nothing here without a fence, nor when ``commit``
    will refuse (a replaced ``.git``, a worktree off its branch).  git-parallel's
    own code reads nothing of the view here (its config, refs and index are
    the agent's, and could be a 1 GB sparse file): its ``HEAD`` file only,
    capped, and git lists the scratch files in a process of its own; the view
    is checked when the fence closes (``shadow.scrub``)."""
    fence = child.fence
    if fence is None or fence.kind == "none" or _foreign_gitfile(project, record["task"], child) is not None:
        return
    _remove_hostile(child)
    ran = False
    try:
        if _head_of(Path(child.worktree)) != f"ref: refs/heads/{child.branch}":
            return
        env = {reaper.SCOPE_ENV: child.scope}

        def fenced(argv: list[str], cwd: str, base: dict[str, str], stdin: bytes) -> CompletedProcess[bytes]:
            return fence.run(argv, cwd, {**base, **env}, stdin)

        # Listing the scratch files runs no filter: git-parallel's own (hardened) git does it.
        skip = scratch_files(child.worktree, scratch_patterns(record["config"]))
        ran = True
        stage_all(child.worktree, sorted(skip), run=fenced)
        child.staged = True
    except Exception as exc:  # a filter that fails, a broken worktree, a full disk: this instance fails
        child.staged = False
        _fail(child, "could not commit leftovers: no space left on device" if is_no_space(exc)
              else f"its leftovers could not be committed: {type(exc).__name__}: {exc}")
    finally:
        if ran:
            reaper.sweep({child.scope})  # what a filter left running


def _head_of(worktree: Path) -> str | None:
    """The first line of the ``HEAD`` file of the worktree's admin folder,
    read without following a link or blocking, at most 4 KB; None if unreadable."""
    admin = read_gitdir_file(worktree / ".git")
    if admin is None:
        return None
    try:
        fd = os.open(admin / "HEAD", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(4096).decode("utf-8", "replace").split("\n", 1)[0].strip()


def commit(project: Project, record: RunRecord, child: Child) -> None:
    """Commit what the agent left uncommitted on its branch (``child.committed``),
    or fail the instance saying why it could not be done."""
    import pygit2

    task, run_id = record["task"], record["run_id"]
    if child.staged is False:
        return  # ``stage`` failed it, saying why
    problem = _foreign_gitfile(project, task, child)
    if problem is not None:
        _fail(child, problem)
        return
    _remove_hostile(child)
    # Under a fence, what is committed is what ``stage`` staged there, never staged here.
    staged = bool(child.staged) or (child.fence is not None and child.fence.kind != "none")
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
            problem = _keep_broken_branch(project, task, run_id, child, tip, base, staged)
        else:
            message = leftovers_message(task, run_id, child.id, child.attempt,
                                        f"Uncommitted when the command exited ({child.status}, "
                                        f"exit {child.exit_code}).", command=child.argv)
            child.committed = commit_all(child.worktree, message,
                                         scratch=scratch_patterns(record["config"]), staged=staged)
            problem = _keep_nested(project, run_id, child)
    except Exception as exc:  # a broken worktree, or a full disk, fails this instance, not the run
        problem = ("could not commit leftovers: no space left on device" if is_no_space(exc)
                   else f"its leftovers could not be committed: {type(exc).__name__}: {exc}")
    if problem:
        _fail(child, problem)


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
                        staged: bool) -> str:
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
    extra = [oid for oid in [commit_all(child.worktree, message, ref=None, parent=parent, staged=staged)] if oid]
    kept = worktrees.keep_strays(repo, run_id, task, inst, extra=extra)
    what = "was deleted" if tip is None else f"was moved to {tip[:12]}, which does not descend from the base"
    where = f"; its work is kept at {', '.join(kept)}" if kept else ""
    return f"its branch {child.branch} {what} while the command ran, so nothing was committed on it{where}"


def fenced_stager(project: Project, task: str, store: Store | None = None) -> Stager:
    """How an attempt's worktree is staged when git-parallel commits what it
    holds outside a run (``retry --force``, ``abort``/``cleanup --force``,
    ``recover``): ``git add -A`` in a fence like its agent's, whose objects
    are taken in as the agent's are, since the filters git runs can run what
    the attempt wrote.  Where the machine gives no fence (or ``sandbox:
    off``), git-parallel's own git stages it, as it did.  ``store``: where
    the run's record is (a worker's, in its clone), if not the project's."""

    def stage(path: Path, skip: list[str]) -> None:
        record = (store or project.store).load(task)
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

    return stage
