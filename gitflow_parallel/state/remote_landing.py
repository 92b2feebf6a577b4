"""Landing on a remote (``merge --push``): the remote base fetched and
compared, the updates of one leased atomic push (base, notes, run and
evidence refs), what is said when the remote moved or refused, and the
winners' branches ``merge --pr`` pushes."""

from __future__ import annotations

from typing import TypedDict

from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.state import share, transport
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.model import RunRecord, Winner
from gitflow_parallel.state.project import Project


class Relanded(TypedDict):
    """A landing the remote did not take because its base moved on."""
    landed: str
    remote_tip: str


class PushResult(TypedDict):
    """What ``merge --push`` did on the remote (``push`` in its result)."""
    remote: str
    base_ref: str
    landed: str
    moved_base: bool
    refs: list[str]
    kept_remote: list[str]
    attempts: int
    relanded: list[Relanded]
    up_to_date: bool


class BranchesPushed(TypedDict):
    """What ``merge --pr`` pushed."""
    refs: list[str]
    kept_remote: list[str]
    attempts: int
    base_on_remote: bool


def branch_name(ref: str) -> str:
    return ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref


has_object = share.has_object


def fetch_tip(project: Project, remote: str, base_ref: str, tip: str | None) -> None:
    """Bring the remote's ``tip`` of the base into ``refs/remotes/<remote>/<branch>``
    (forced, like any remote-tracking ref), so its history can be compared."""
    tracking = f"refs/remotes/{remote}/{branch_name(base_ref)}"
    if tip is not None and project.repo.ref_target(tracking) != tip:
        transport.fetch(project.repo, remote, [f"+{base_ref}:{tracking}"])


def diverged(record: RunRecord, remote: str, local: str, tip: str, state: str) -> ParallelError:
    base, task = branch_name(record["base"]["ref"]), record["task"]
    return ParallelError(
        E.REMOTE_DIVERGED,
        f"{base} here (at {local[:12]}) and on {remote} (at {tip[:12]}) have diverged: each has commits the "
        f"other lacks; {state}",
        hint=f"bring them together first (`git pull {remote} {base}` where {base} is checked out), then "
             f"`git parallel merge {task} --push {remote}` again")


def onto_remote(project: Project, record: RunRecord, remote: str, tip: str | None, old: str) -> str:
    """What a landing for ``merge --push`` is computed on, the local base
    being at ``old``: the remote's ``tip`` when the local base is behind it,
    the local base when it is level or ahead; refused when they diverged
    (nothing has moved yet)."""
    repo = project.repo
    if tip is None or repo.is_ancestor(tip, old):
        return old
    if repo.is_ancestor(old, tip):
        return tip
    raise diverged(record, remote, old, tip, "nothing was changed")


def share_updates(project: Project, record: RunRecord, remote: str,
                  there: dict[str, str]) -> tuple[list[transport.Update], list[str]]:
    """The notes ref (merged with the remote's first, cat_sort_uniq), the run
    snapshot and the run's evidence refs, each under a lease on what the
    remote has now.  A ref that says what the remote's says (a worker's
    evidence commit and our copy of its pack) is not pushed; one the remote
    has ahead of ours, or apart from it (a worker's newer pack), is left
    alone and named."""
    repo, run_id = project.repo, record["run_id"]
    share.backfill_run(project, record)
    notes_ref = record["config"]["notes_ref"]
    theirs = there.get(notes_ref)
    if theirs is not None:
        tracking = share.notes_tracking_ref(remote, notes_ref)
        if repo.ref_target(tracking) != theirs:
            transport.fetch(repo, remote, [f"+{notes_ref}:{tracking}"])
        share.merge_notes(project, notes_ref, theirs)
    names = [notes_ref, share.run_ref(run_id)] + sorted(
        n for n, _ in repo.refs_under(f"{share.EVIDENCE_PREFIX}/{run_id}/"))
    updates: list[transport.Update] = []
    kept: list[str] = []
    for name in names:
        mine, theirs = repo.ref_target(name), there.get(name)
        how = "same" if mine is None else share.relation(repo, name, mine, theirs)
        if how == "ahead" and mine is not None:
            updates.append(transport.Update(mine, name, theirs or ""))
        elif how != "same":
            kept.append(name)
    return updates, kept


def wanted_refs(record: RunRecord, extra: list[str]) -> list[str]:
    """What one ls-remote asks about: the base, the notes, the run's refs, ``extra``."""
    run_id = record["run_id"]
    return [record["base"]["ref"], record["config"]["notes_ref"], share.run_ref(run_id),
            f"{share.EVIDENCE_PREFIX}/{run_id}/*", *extra]


def refused_push(record: RunRecord, remote: str, what: str, hint: str, code: str = E.REMOTE_FAILED) -> ParallelError:
    landed = model.merge_of(record)["landed"]
    return ParallelError(
        code, f"run {record['run_id']} landed on {branch_name(record['base']['ref'])} here at {landed[:12]}, but "
              f"{remote} did not take it: {what}; nothing was pushed",
        hint=hint + f"; `git parallel merge {record['task']} --push {remote}` pushes it then (a merged run is "
                    "only pushed)", landed=landed, pushed=False)


def pushed_result(project: Project, record: RunRecord, remote: str, updates: list[transport.Update],
                  kept: list[str], attempts: int, relanded: list[Relanded]) -> tuple[PushResult, RunRecord]:
    """Say in the record (and the result) what the remote now has; the
    record as it is after that."""
    merge = model.merge_of(record)
    base_ref, landed = record["base"]["ref"], merge["landed"]
    moved_base = any(u.dst == base_ref for u in updates)
    pushed = merge.get("pushed")
    if moved_base or pushed is None or pushed["landed"] != landed:
        info = model.new_pushed(remote, landed, utcnow(), attempts)
        record, _ = project.store.update(record["task"], lambda rec: model.mark_pushed(model.merge_of(rec), info))
    return {"remote": remote, "base_ref": base_ref, "landed": landed, "moved_base": moved_base,
            "refs": [u.dst for u in updates], "kept_remote": kept, "attempts": attempts, "relanded": relanded,
            "up_to_date": not updates}, record


def push_branches(project: Project, record: RunRecord, remote: str, winners: list[Winner]) -> BranchesPushed:
    """The winners' branches and the run's provenance in one atomic push
    (``merge --pr``); a remote branch with commits the winner lacks is never
    overwritten."""
    repo = project.repo
    refs = [f"refs/heads/{inst['branch']}" for _, inst in winners]
    output = ""
    for attempt in range(1, transport.NOTES_PUSH_ATTEMPTS + 1):
        there = transport.ls_remote(repo, remote, wanted_refs(record, refs))
        updates = []
        for (_, inst), ref in zip(winners, refs):
            tip, theirs = project.tip(inst), there.get(ref)
            if tip is None or tip == theirs:
                continue
            if theirs is not None and not (has_object(repo, theirs) and repo.is_ancestor(theirs, tip)):
                raise ParallelError(E.REMOTE_DIVERGED, f"{remote} has {inst['branch']} at {theirs[:12]}, with "
                                    f"commits the winner ({tip[:12]}) lacks; nothing was pushed",
                                    hint=f"see `git log {remote}/{inst['branch']}`; delete it there if it is stale")
            updates.append(transport.Update(tip, ref, theirs or ""))
        shared, kept = share_updates(project, record, remote, there)
        pushed = transport.push(repo, remote, updates + shared)
        if pushed.ok:
            return {"refs": [u.dst for u in updates + shared], "kept_remote": kept, "attempts": attempt,
                    "base_on_remote": record["base"]["ref"] in there}
        output = pushed.output
        if not transport.moved(repo, remote, updates + shared):
            break  # refused for another reason than a lease: trying again will not help
    raise ParallelError(E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: "
                        f"{output}", hint=f"see the message; `git parallel merge {record['task']} --pr "
                        f"--remote {remote}` tries again")
