"""``git parallel push [REMOTE]``: the notes and the archive, evidence and run
refs to a remote, evidence refs backfilled first, notes merged first when
the remote's moved, in one atomic push with a lease on every ref.

Each ref is compared with the remote's copy (``share.relation``): one that
says the same is left alone (a worker's evidence commit and a copy of it
made here hold one pack), one that fast-forwards the remote's is pushed,
one the remote has ahead is left for ``fetch``, and one that diverged
refuses the push, named, with the two ways out."""

from __future__ import annotations

from typing import TypedDict

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.state import share
from gitflow_parallel.state import transport as wire
from gitflow_parallel.state.share import PARALLEL_PREFIX, PUSH_ATTEMPTS, backfill, check_remote, notes_refs
from gitflow_parallel.state.project import Project


class Pushed(TypedDict):
    """``push``'s result: the refs pushed, the ones the remote has ahead
    (``kept_remote``), what ``backfill`` wrote and skipped first, and how
    each notes ref was merged with the remote's."""

    remote: str
    attempts: int
    pushed: list[str]
    kept_remote: list[str]
    written: list[str]
    skipped: list[str]
    notes_refs: list[str]
    notes: dict[str, str]


def push(project: Project, remote: str = "origin") -> Pushed:
    """Publish the notes and every ``refs/parallel/`` ref in one atomic push.

    A lease that fails (a teammate pushed meanwhile) is answered by looking
    again: their notes are merged into ours and the push is rebuilt."""
    repo = project.repo
    check_remote(repo, remote)
    filled = backfill(project)
    wanted = [n for n in notes_refs(project) if repo.ref_target(n) is not None]
    output = ""
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        there = wire.ls_remote(repo, remote, [*wanted, f"{PARALLEL_PREFIX}/*"])
        merged = _bring_missing(project, remote, wanted, there)
        updates, behind, diverged = _plan(project, wanted, there)
        if diverged:
            raise share.diverged_refs(remote, diverged, there)
        pushed = wire.push(repo, remote, updates)
        if pushed.ok:
            return {"remote": remote, "attempts": attempt, "pushed": [u.dst for u in updates],
                    "kept_remote": behind, "written": filled["written"], "skipped": filled["skipped"],
                    "notes_refs": wanted, "notes": merged}
        output = pushed.output
        if not wire.moved(repo, remote, updates):
            break  # refused for another reason than a lease: say so
    raise ParallelError(
        E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: {output}",
        hint=f"`git parallel fetch {remote}` brings what the remote has, then push again")


def _bring_missing(project: Project, remote: str, wanted: list[str], there: dict[str, str]) -> dict[str, str]:
    """Fetch the remote's commits we lack (into tracking refs) and merge its
    notes into ours; returns how each notes ref was merged."""
    repo = project.repo
    specs = []
    for name, oid in there.items():
        ours = repo.ref_target(name)
        if ours is not None and ours != oid and not share.has_object(repo, oid):
            target = (share.notes_tracking_ref(remote, name) if name in wanted
                      else f"{share.REMOTES_PREFIX}/{remote}/{name[len(PARALLEL_PREFIX) + 1:]}")
            specs.append(f"+{name}:{target}")
    if specs:
        wire.fetch(repo, remote, specs)
    return {name: share.merge_notes(project, name, there[name]) for name in wanted if name in there}


def _plan(project: Project, wanted: list[str], there: dict[str, str]) -> tuple[list[wire.Update], list[str], list[str]]:
    """(the leased updates, the refs the remote has ahead, the diverged refs)."""
    repo = project.repo
    mine = dict(repo.refs_under(PARALLEL_PREFIX + "/"))
    mine.update({n: oid for n in wanted if (oid := repo.ref_target(n)) is not None})
    updates, behind, diverged = [], [], []
    for name, oid in sorted(mine.items()):
        how = share.relation(repo, name, oid, there.get(name))
        if how == "ahead":
            updates.append(wire.Update(oid, name, there.get(name, "")))
        elif how == "behind":
            behind.append(name)
        elif how in ("diverged", "unknown"):
            diverged.append(name)
    return updates, behind, diverged
