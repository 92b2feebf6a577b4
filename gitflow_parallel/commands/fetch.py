"""``git parallel fetch [REMOTE]``: the notes (merged with ``cat_sort_uniq``),
archive, evidence and run refs of a remote, so a teammate's runs can be read
here (``status``, ``show``, ``report``)."""

from __future__ import annotations

from typing import TypedDict

from gitflow_parallel.state.share import (PARALLEL_PREFIX, REMOTES_PREFIX, check_remote, git_failed, merge_notes,
                                        notes_refs, notes_tracking_ref, refs_snapshot, relation, remote_notes_refs)
from gitflow_parallel.state.project import Project



class Fetched(TypedDict):
    """``fetch``: the refs updated, those kept because ours are ahead or
    diverged, and how each notes ref was merged."""
    remote: str
    updated: list[str]
    kept_local: list[str]
    diverged: list[str]
    notes: dict[str, str]

def fetch(project: Project, remote: str = "origin") -> Fetched:
    """Bring the remote's notes, evidence, archive and run refs (see the module doc)."""
    repo = project.repo
    check_remote(repo, remote)
    tracking = f"{REMOTES_PREFIX}/{remote}/"
    wanted = notes_refs(project)
    # Only our notes refs, and only those the remote has (a fresh remote has none).
    remote_notes = [n for n in remote_notes_refs(repo, remote) if n in wanted]
    specs = [f"+{PARALLEL_PREFIX}/*:{tracking}*"] + [f"+{n}:{notes_tracking_ref(remote, n)}" for n in remote_notes]
    proc = repo.run_git(["fetch", "--no-tags", "--no-write-fetch-head", remote, *specs], check=False)
    if proc.returncode != 0:
        raise git_failed(f"git fetch {remote}", proc, f"check that {remote} is reachable, then fetch again")
    before = refs_snapshot(repo, [PARALLEL_PREFIX + "/"])
    updated: list[str] = []
    kept_ahead: list[str] = []
    diverged: list[str] = []
    for name, oid in sorted(repo.refs_under(tracking)):
        local = PARALLEL_PREFIX + "/" + name[len(tracking):]
        current = before.get(local)
        how = relation(repo, local, current, oid)
        if how in ("behind", "same") and current != oid:
            # Behind, or one content in two commits: take theirs, so the next push has nothing to reconcile.
            if repo.cas_ref(local, oid, current, f"git-parallel: fetch {remote}"):
                updated.append(local)
        elif how == "ahead":
            kept_ahead.append(local)
        elif how == "diverged":
            diverged.append(local)
    merged: dict[str, str] = {}
    for n in remote_notes:
        theirs = repo.ref_target(notes_tracking_ref(remote, n))
        if theirs is not None:
            merged[n] = merge_notes(project, n, theirs)
    return {"remote": remote, "updated": updated, "kept_local": kept_ahead, "diverged": diverged, "notes": merged}
