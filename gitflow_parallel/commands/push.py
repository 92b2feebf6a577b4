"""``git parallel push [REMOTE]``: the notes and the archive, evidence and run
refs to a remote, evidence refs backfilled first, notes merged and retried
when the remote's moved."""

from __future__ import annotations

from typing import Any

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.share import (PARALLEL_PREFIX, PUSH_ATTEMPTS, backfill, check_remote, git_failed,
                                        merge_notes, notes_refs, notes_tracking_ref)
from gitflow_parallel.state.project import Project


def push(project: Project, remote: str = "origin") -> dict[str, Any]:
    """Publish the notes and every ``refs/parallel/`` ref in one atomic push.

    A push the remote rejects because its notes moved (a teammate pushed
    theirs) is answered by merging their notes and pushing again."""
    repo = project.repo
    check_remote(repo, remote)
    filled = backfill(project)
    wanted = [n for n in notes_refs(project) if repo.ref_target(n) is not None]
    last = None
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        specs = [f"{n}:{n}" for n in wanted] + [f"{PARALLEL_PREFIX}/*:{PARALLEL_PREFIX}/*"]
        proc = repo.run_git(["push", "--atomic", "--porcelain", remote, *specs], check=False)
        if proc.returncode == 0:
            return {"remote": remote, "attempts": attempt, "pushed": _pushed(proc.stdout), **filled,
                    "notes_refs": wanted}
        last = proc
        rejected = _rejected(proc.stdout)
        notes_only = rejected and all(r in wanted for r in rejected)
        if not notes_only:
            break
        # Their notes moved: bring them in, merge, and go again.
        specs = [f"+{n}:{notes_tracking_ref(remote, n)}" for n in rejected]
        got = repo.run_git(["fetch", "--no-tags", "--no-write-fetch-head", remote, *specs], check=False)
        if got.returncode != 0:
            raise git_failed(f"git fetch {remote}", got, f"check that {remote} is reachable, then push again")
        for n in rejected:
            theirs = repo.ref_target(notes_tracking_ref(remote, n))
            if theirs is not None:
                merge_notes(project, n, theirs)
    assert last is not None
    out = (last.stdout + last.stderr).decode(errors="replace").strip()
    raise ParallelError(
        E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: {out}",
        hint=f"`git parallel fetch {remote}` brings what the remote has, then push again")


def _porcelain(stdout: bytes) -> list[tuple[str, str, str]]:
    """(flag, local:remote, summary) from ``git push --porcelain``."""
    out = []
    for line in stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and len(parts[0]) == 1:
            out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    return out


def _pushed(stdout: bytes) -> list[str]:
    return [spec.split(":", 1)[-1] for flag, spec, _ in _porcelain(stdout) if flag in ("*", "+", "-")]


def _rejected(stdout: bytes) -> list[str]:
    """The refs the remote itself refused (not those --atomic held back with them)."""
    return [spec.split(":", 1)[-1] for flag, spec, summary in _porcelain(stdout)
            if flag == "!" and "atomic push failed" not in summary]
