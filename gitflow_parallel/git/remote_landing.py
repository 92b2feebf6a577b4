"""Landing on a remote (``merge --push``): the remote base fetched and
compared, the updates of one leased atomic push (base, notes, run and
evidence refs), and what is said when the remote moved or refused."""

from __future__ import annotations

from typing import Any, Callable

from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.git import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.state.project import Project


def branch_name(ref: str) -> str:
    return ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref


has_object = share.has_object


def fetch_tip(project: Project, remote: str, base_ref: str, tip: str | None) -> None:
    """Bring the remote's ``tip`` of the base into ``refs/remotes/<remote>/<branch>``
    (forced, like any remote-tracking ref), so its history can be compared."""
    from gitflow_parallel.git import transport as wire

    tracking = f"refs/remotes/{remote}/{branch_name(base_ref)}"
    if tip is not None and project.repo.ref_target(tracking) != tip:
        wire.fetch(project.repo, remote, [f"+{base_ref}:{tracking}"])


def diverged(record: dict[str, Any], remote: str, local: str, tip: str, state: str) -> ParallelError:
    base, task = branch_name(record["base"]["ref"]), record["task"]
    return ParallelError(
        E.REMOTE_DIVERGED,
        f"{base} here (at {local[:12]}) and on {remote} (at {tip[:12]}) have diverged: each has commits the "
        f"other lacks; {state}",
        hint=f"bring them together first (`git pull {remote} {base}` where {base} is checked out), then "
             f"`git parallel merge {task} --push {remote}` again")


def onto_remote(project: Project, record: dict[str, Any], remote: str, tip: str | None) -> Callable[[str], str]:
    """``onto`` for :func:`_land`: the remote's tip when the local base is
    behind it, the local base when it is level or ahead; refused when they
    diverged (nothing has moved yet)."""
    repo = project.repo

    def onto(old: str) -> str:
        if tip is None or repo.is_ancestor(tip, old):
            return old
        if repo.is_ancestor(old, tip):
            return tip
        raise diverged(record, remote, old, tip, "nothing was changed")

    return onto


def share_updates(project: Project, record: dict[str, Any], remote: str,
                   there: dict[str, str]) -> tuple[list[Any], list[str]]:
    """The notes ref (merged with the remote's first, cat_sort_uniq), the run
    snapshot and the run's evidence refs, each under a lease on what the
    remote has now.  A ref that says what the remote's says (a worker's
    evidence commit and our copy of its pack) is not pushed; one the remote
    has ahead of ours, or apart from it (a worker's newer pack), is left
    alone and named."""
    from gitflow_parallel.git import transport as wire

    repo, run_id = project.repo, record["run_id"]
    share.backfill_run(project, record)
    notes_ref = record["config"]["notes_ref"]
    theirs = there.get(notes_ref)
    if theirs is not None:
        tracking = share.notes_tracking_ref(remote, notes_ref)
        if repo.ref_target(tracking) != theirs:
            wire.fetch(repo, remote, [f"+{notes_ref}:{tracking}"])
        share.merge_notes(project, notes_ref, theirs)
    names = [notes_ref, share.run_ref(run_id)] + sorted(
        n for n, _ in repo.refs_under(f"{share.EVIDENCE_PREFIX}/{run_id}/"))
    updates, kept = [], []
    for name in names:
        mine, theirs = repo.ref_target(name), there.get(name)
        how = "same" if mine is None else share.relation(repo, name, mine, theirs)
        if how == "ahead":
            updates.append(wire.Update(mine, name, theirs or ""))
        elif how != "same":
            kept.append(name)
    return updates, kept


def wanted_refs(record: dict[str, Any], extra: list[str]) -> list[str]:
    """What one ls-remote asks about: the base, the notes, the run's refs, ``extra``."""
    run_id = record["run_id"]
    return [record["base"]["ref"], record["config"]["notes_ref"], share.run_ref(run_id),
            f"{share.EVIDENCE_PREFIX}/{run_id}/*", *extra]


def refused_push(record: dict[str, Any], remote: str, what: str, hint: str, code: str = E.REMOTE_FAILED) -> ParallelError:
    landed = record["merge"]["landed"]
    return ParallelError(
        code, f"run {record['run_id']} landed on {branch_name(record['base']['ref'])} here at {landed[:12]}, but "
              f"{remote} did not take it: {what}; nothing was pushed",
        hint=hint + f"; `git parallel merge {record['task']} --push {remote}` pushes it then (a merged run is "
                    "only pushed)", landed=landed, pushed=False)


def pushed_result(project: Project, record: dict[str, Any], remote: str, updates: list[Any], kept: list[str],
            attempts: int, relanded: list[dict[str, Any]]) -> dict[str, Any]:
    """Say in the record (and the result) what the remote now has."""
    base_ref, landed = record["base"]["ref"], record["merge"]["landed"]
    moved_base = any(u.dst == base_ref for u in updates)
    if moved_base or not (record["merge"].get("pushed") or {}).get("landed") == landed:
        info = model.new_pushed(remote, landed, utcnow(), attempts)
        project.store.update(record["task"], lambda rec: model.mark_pushed(rec["merge"], info))
    return {"remote": remote, "base_ref": base_ref, "landed": landed, "moved_base": moved_base,
            "refs": [u.dst for u in updates], "kept_remote": kept, "attempts": attempts, "relanded": relanded,
            "up_to_date": not updates}
