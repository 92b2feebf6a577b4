"""Landing the winners on the base branch.

The merge is computed in memory with pygit2 and never checks the winner out
in the main worktree.  For each track in order: a fast-forward when the
result so far is an ancestor of the winner, nothing when the winner is
already contained, else a merge commit written without moving any ref.
A textual conflict stops, like git, under the default ``merge.policy``
``refuse``: the error names each conflicting file and hunk (line ranges in
the base's and the winner's file).  The other policies resolve conflicting
hunks: ``first_pass_wins`` keeps the base side (which landed first),
``last_pass_wins`` and its alias ``winner_takes_all`` take the winner's
side, and the merge record says, per file, how many lines each side wrote in
the hunks it lost; ``manual`` never merges.  A merge commit whose tree is the
base's own would land nothing and is refused.

The base ref then moves **once**, by compare-and-swap against the oid read at
the start of the attempt.  If it moved meanwhile, everything is recomputed
(up to ``merge.retries`` times), so a concurrent commit on the base is never
overwritten.  Before the base moves, the landing is re-proved
(``merge.verify``, see ``judge/reprove``: ``auto`` by default, which lands a
tree this machine's own pristine judging proved without judging it again,
``always``, ``changed`` only for a merged tree no gate saw, ``never``): the
enforced gates run on the exact tree that will land, in a clean checkout
with protected paths from the commit it lands on, so stale or forged
evidence never lands a failing tree.  Every refusal
happens before the base moves, so a refused merge changes nothing.

``merge.squash`` lands each winner as one new commit on the base (parent:
the base so far; tree: what the merge would have made) instead of a
fast-forward or merge commit: ``true`` always, ``auto`` (the default) when
the winner's history is only git-parallel's leftovers commits (an agent
that never commits, so its one commit names the task and the agent command),
``false`` never; ``merge.message`` is the template of every
commit a merge writes (:func:`landing_message`).  A checkout of the base
with uncommitted changes is refused only where the landing changes the same
paths, as ``git merge`` would.

``merge --push REMOTE`` lands onto the remote's tip of the base and then
moves the remote's base by one atomic push with leases (with the notes, run
snapshot and evidence refs), computing the landing again when another clone
pushed first; ``merge --pr`` pushes the winner's branch and asks ``gh`` or
``glab`` for a pull request instead of landing (the last sections below).

The verb reads top-down: refusals under the lock (:func:`_ready`), one
landing routine for a first landing and a landing again (:func:`_land`:
compute, re-prove, publish under the lock), then what follows a landing
(notes, cleanup, the remote's manifest, notify) and, for ``--push``, the
push.  The record is read once under the lock at the start and passed
down; each later write reads it once more, under the lock, to check and
change it (compare-and-swap).  The result is a :class:`MergeResult`, whose
``warnings`` say what went wrong after the base moved.
"""


from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import config, evidence, faults, model, notify, provenance
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, utcnow
from gitflow_parallel.git import hooks
from gitflow_parallel.state import retire, share, transport
from gitflow_parallel.state.landing import Landing, compute, dirty_paths, refuse_dirty
from gitflow_parallel.state.pull_request import pr_body, pr_command, pr_title, pr_tool, run_tool
from gitflow_parallel.state.remote_landing import (
    BranchesPushed, PushResult, Relanded, branch_name, diverged, fetch_tip, onto_remote, push_branches, pushed_result, refused_push,
    share_updates, wanted_refs)
from gitflow_parallel.git.worktrees import base_worktree
from gitflow_parallel.judge import reprove
from gitflow_parallel.model import MergeRecord, Proposal, Reproof, Retried, RunRecord, Winner
from gitflow_parallel.shapes.records import RestsOn
from gitflow_parallel.names import check_name
from gitflow_parallel.proc import notifier
from gitflow_parallel.state.intent import clear_intent, intent_path, write_intent
from gitflow_parallel.state.picks import winner_check, winner_instances
from gitflow_parallel.state.project import Project


class Cleaned(TypedDict):
    removed: list[dict[str, Any]]
    kept: list[str]


class CleanupError(TypedDict):
    code: str
    message: str
    hint: str | None


class PrResult(TypedDict):
    """What ``merge --pr`` did: the push, and each proposal (or the command to make it)."""
    task: str
    run_id: str
    remote: str
    base: str
    push: BranchesPushed
    tool: str
    proposals: list[Proposal]


class MergeResult(TypedDict):
    """What ``merge`` says (``--json`` prints it as it is).  ``already``: the
    run was merged before (``raced``: by another merge of it that landed
    while this one computed), and this is that landing.  ``warnings``: what
    went wrong after the base moved (notes, the remote's manifest, notify),
    none of which undoes the landing."""
    already: bool
    raced: bool
    run_id: str
    merge: MergeRecord
    protected_landed: list[ProtectedLanded]
    cleanup: Cleaned | None
    cleanup_error: CleanupError | None
    warnings: list[str]
    push: NotRequired[PushResult]


# -- the verb --------------------------------------------------------------------------
def merge(project: Project, task: str, remote: str | None = None) -> MergeResult:
    """Land the run's winners on its base branch (see the module doc); with
    ``remote`` (``merge --push``), land onto that remote's tip of the base
    when the local base is behind it, then push the landing there with its
    provenance; a merged run is only pushed."""
    check_name(task, "task")
    if remote is not None:
        share.check_remote(project.repo, remote)
    with project.store.lock():
        record = project.store.load(task)
        ready = None if record["status"] == "merged" else _ready(project, record)
    if ready is None:
        result = _already(record)
    else:
        winners, worktree = ready
        target = Target(again=f"`git parallel merge {task}" + (f" --push {remote}`" if remote else "`"))
        if remote is not None:
            base_ref = record["base"]["ref"]
            tip = transport.ls_remote(project.repo, remote, [base_ref]).get(base_ref)
            fetch_tip(project, remote, base_ref, tip)
            target = Target(again=target.again, remote=remote, tip=tip)
        published = _land(project, record, winners, worktree, target)
        if published.raced:
            result = _already(published.record, raced=True)
            record = published.record
        else:
            result, record = _after_landing(project, published.record, winners)
    result["warnings"] = result["warnings"] + hooks.gone_warnings(project.repo)
    if remote is None:
        return result
    try:
        result["push"], record, warnings = _push(project, record, remote)
    except ParallelError as exc:
        if "pushed" in exc.details:
            raise
        landed = result["merge"]["landed"]
        raise ParallelError(exc.code, f"run {result['run_id']} landed on {branch_name(result['merge']['base_ref'])} "
                            f"here at {landed[:12]}, but was not pushed to {remote}: {exc.message}",
                            hint=f"{exc.hint or 'see the message'}; then `git parallel merge {task} --push {remote}` "
                                 "pushes it (a merged run is only pushed)", landed=landed, pushed=False) from None
    result["merge"] = model.merge_of(record)  # a landing computed again says so
    result["warnings"] += warnings
    return result


def _ready(project: Project, record: RunRecord) -> tuple[list[Winner], Path | None]:
    """Under the lock: refuse a run that cannot land now; else its proven
    winners and the base's checkout (if any)."""
    task = record["task"]
    if record["status"] == "aborted":
        raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} was aborted",
                            hint=f"spawn a new run with `git parallel spawn {task}`")
    config.verify_frozen(project.repo, record)
    if intent_path(project, record).exists():
        # An earlier merge of this run died between writing its intent and
        # recording the result: the base may already have moved, its
        # checkout may still show the old tree (which would read as
        # "uncommitted changes" here), and the intent is what tells
        # recover which.  Never overwrite or clear it from here.
        raise ParallelError(
            E.MERGE_CONFLICT,
            f"an earlier `git parallel merge` of run {record['run_id']} was interrupted "
            f"({intent_path(project, record)} is still there); nothing was changed",
            hint=f"run `git parallel recover {task}`, which records or discards that merge, then merge again if needed",
        )
    winners = _proven_winners(project, record, "land")
    base_ref = record["base"]["ref"]
    if record["config"]["merge"]["policy"] == "manual":
        lines = [f"git switch {base_ref[len('refs/heads/'):]}"] + [
            f"git merge --no-ff {inst['branch']}" for _, inst in winners]
        raise ParallelError(
            E.MANUAL_HALT,
            "merge.policy is manual: git parallel does not merge; run:\n  " + "\n  ".join(lines),
            hint="the installed hooks (`git parallel hooks install`) gate that merge; "
                 "then `git parallel recover " + task + "` records it"
                 + "".join(f"; warning: {w}" for w in hooks.gone_warnings(project.repo)),
            commands=lines,
        )
    return winners, base_worktree(project.repo, base_ref)


def _proven_winners(project: Project, record: RunRecord, doing: str) -> list[Winner]:
    """Each track's (pick, winner), refused unless the winner's tip still has
    the fresh, passing evidence its pick was made on."""
    winners = winner_instances(project, record)
    for pick, inst in winners:
        ok, code, why = winner_check(project, record, inst, project.tip(inst) or "")
        if not ok:
            raise ParallelError(code or E.EVIDENCE_MISMATCH, f"cannot {doing} track {pick['track']}: {why}",
                                hint=f"run `git parallel check {record['task']}`; a changed winner needs a new run "
                                     "or retry")
    return winners


def _already(record: RunRecord, raced: bool = False) -> MergeResult:
    """A merged run's landing, said again."""
    return {"already": True, "raced": raced, "run_id": record["run_id"], "merge": model.merge_of(record),
            "protected_landed": [], "cleanup": None, "cleanup_error": None, "warnings": []}


def _after_landing(project: Project, record: RunRecord, winners: list[Winner]) -> tuple[MergeResult, RunRecord]:
    """The base moved and the record says so: notes, cleanup, the end of the
    run published to its remote, notify.  A failure of any of them is said,
    never undoes the landing.  Returns the record as cleanup left it."""
    merge_record = model.merge_of(record)
    warnings = [w for w in [_landing_notes(project, record, winners, "merge")] if w]
    cleanup: Cleaned | None = None
    cleanup_error: CleanupError | None = None
    after = record
    try:
        cleaned = retire.cleanup(project, record["task"], keep_losers=bool(record["config"]["keep_losers"]))
        cleanup, after = {"removed": cleaned["removed"], "kept": cleaned["kept"]}, cleaned["run"]
    except ParallelError as exc:
        cleanup_error = {"code": exc.code, "message": exc.message, "hint": exc.hint}
    warnings += [w for w in [transport.withdraw(project, record)] if w]
    warnings += notifier.send_one(project, record, notify.landed(record, merge_record, winners))
    return {"already": False, "raced": False, "run_id": record["run_id"], "merge": merge_record,
            "protected_landed": protected_landed(winners), "cleanup": cleanup, "cleanup_error": cleanup_error,
            "warnings": warnings}, after


class ProtectedLanded(TypedDict):
    """A track whose winner, picked by a person, lands protected changes."""
    track: str
    winner: str
    changes: list[dict[str, Any]]


def protected_landed(winners: list[Winner]) -> list[ProtectedLanded]:
    """What the winners change of the tests, the harness or the config: a
    person picked them knowing (an automatic pick never chooses such a
    winner), and the landing says so."""
    return [{"track": pick["track"], "winner": pick["winner"]["id"], "changes": pick["protected_changes"]}
            for pick, _ in winners if pick.get("protected_changes")]


def _landing_notes(project: Project, record: RunRecord, winners: list[Winner], what: str) -> str | None:
    """The note lines on the commit that landed (each pick, the merge, one
    line for people) and the run's snapshot ref; a warning if they failed."""
    merge_record = model.merge_of(record)
    landed = merge_record["landed"]
    entries = [(landed, provenance.pick_note(p)) for p, _ in winners]
    entries.append((landed, provenance.merge_note(record, merge_record)))
    entries.append((landed, provenance.landing_line(record, [(p, evidence.load(i)) for p, i in winners])))
    return project.mirror_notes(record, entries, what) or share.mirror_run(project, record)


# -- one landing -------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Where one landing goes.  A first landing (``replaces`` None) is
    computed on the local base, or for ``--push`` on ``remote``'s ``tip``
    when the local base is behind it, and computed again while the base
    moves (``merge.retries``).  A landing again (``replaces``: the merge
    record of a landing the remote did not take, because its base moved
    on) is computed on ``tip`` and moves the local base from that landing,
    once.  ``again`` is the command that tries once more, for the hints."""
    again: str
    remote: str | None = None
    tip: str | None = None
    replaces: MergeRecord | None = None

    def replaced_onto(self) -> str:
        """What the landing this one replaces was computed on."""
        assert self.replaces is not None
        return self.replaces.get("onto") or self.replaces.get("previous") or self.replaces["landed"]

    def nothing(self, record: RunRecord) -> str:
        """What a refusal leaves: nothing moved, or (a landing again) a landing not pushed."""
        if self.replaces is None:
            return "nothing moved"
        return f"run {record['run_id']} landed here at {self.replaces['landed'][:12]} and was not pushed"


@dataclass(frozen=True)
class Computed:
    """One computation of the landing, re-proved, before the base moves."""
    landing: Landing
    old: str  # the local base it moves from
    start: str  # the commit it was computed on
    verified: list[Reproof]
    rested: list[RestsOn]  # the evidence of the tracks not re-proved (``merge.verify: auto``)
    proving_s: float  # seconds the re-proof took
    new_tree: pygit2.Tree
    old_tree: pygit2.Tree


@dataclass(frozen=True)
class Published:
    """A landing's outcome: the record as saved with it, or (``raced``) as
    found when another merge of the same run landed first."""
    record: RunRecord
    raced: bool = False


def _land(project: Project, record: RunRecord, winners: list[Winner], worktree: Path | None,
          target: Target) -> Published:
    """Compute, re-prove and publish the landing; computed again while the
    base moves under it (a first landing only).

    Computing and verifying (which runs gates, possibly for minutes) happen
    outside the project lock, so other commands (a ``run`` of another task
    recording its agents) are never held up; :func:`_publish` takes it."""
    cfg = record["config"]["merge"]
    deadline = time.monotonic() + float(cfg["timeout"])
    retries = 0 if target.replaces is not None else int(cfg["retries"])
    history: list[Retried] = []
    for attempt in range(1, retries + 2):
        computed = _compute(project, record, winners, worktree, target)
        # The re-proof's gates have timeouts of their own: merge.timeout
        # bounds the merging around them (found on click, where one re-proof
        # took longer than the whole default budget and was thrown away).
        deadline += computed.proving_s
        if time.monotonic() > deadline:
            raise ParallelError(E.MERGE_TIMEOUT, f"the merge of {record['task']} took longer than merge.timeout "
                                f"({cfg['timeout']}s); {target.nothing(record)}",
                                hint="raise merge.timeout for new runs, or make the gates faster; then merge again")
        published = _publish(project, record, worktree, target, computed, attempt, history)
        if published is not None:
            return published
        history.append({"attempt": attempt, "base_was": computed.old, "computed": computed.landing["commit"]})
    base_ref = record["base"]["ref"]
    if target.replaces is not None:
        raise ParallelError(E.MERGE_CONFLICT, f"{branch_name(base_ref)} moved here meanwhile; {target.nothing(record)}",
                            hint=f"{target.again} again")
    raise ParallelError(
        E.MERGE_CONFLICT,
        f"the base {base_ref} kept moving while merging ({retries + 1} attempts); nothing moved",
        hint="wait for the other writer to finish, then run `git parallel merge` again",
    )


def _start(project: Project, record: RunRecord, target: Target) -> tuple[str, str]:
    """The local base a landing moves from, and the commit it is computed on."""
    repo, base_ref = project.repo, record["base"]["ref"]
    local = repo.ref_target(base_ref)
    if local is None:
        raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                            hint="recreate it, or abort the run")
    if target.replaces is None:
        if target.remote is None:
            return local, local
        return local, onto_remote(project, record, target.remote, target.tip, local)
    landed, remote, tip = target.replaces["landed"], target.remote or "", target.tip or ""
    if local != landed:
        raise ParallelError(
            E.REMOTE_DIVERGED,
            f"{branch_name(base_ref)} here moved on after the landing ({landed[:12]} -> {local[:12]}) and "
            f"{remote} has commits it lacks; {target.nothing(record)}",
            hint=f"`git pull {remote} {branch_name(base_ref)}` where it is checked out, then `git push {remote} "
                 f"{branch_name(base_ref)}` and `git parallel push {remote}`")
    if not repo.is_ancestor(target.replaced_onto(), tip):
        raise diverged(record, remote, target.replaced_onto(), tip, target.nothing(record))
    return landed, tip


def _compute(project: Project, record: RunRecord, winners: list[Winner], worktree: Path | None,
             target: Target) -> Computed:
    """The landing computed in memory and re-proved; refused (nothing moved)
    where the base's checkout has changes it would overwrite."""
    repo = project.repo.pygit
    old, start = _start(project, record, target)
    landing = compute(project, record, start, winners)
    new_tree = repo[landing["commit"]].peel(pygit2.Tree)
    old_tree = repo[old].peel(pygit2.Tree)
    _check_clean(worktree, new_tree, old_tree)
    proving = time.monotonic()
    verified, rested = reprove.verify_landing(project, record, landing["commit"], winners, start)
    return Computed(landing, old, start, verified, rested, time.monotonic() - proving, new_tree, old_tree)


def _publish(project: Project, record: RunRecord, worktree: Path | None, target: Target, computed: Computed,
             attempt: int, history: list[Retried]) -> Published | None:
    """Under the lock: the record must still be at the revision read, the
    base's checkout still clean, the base ref still at the oid read; then
    the intent is written, the ref moved by compare-and-swap, its checkout
    updated and the record saved before the lock is let go.  None when the
    base moved meanwhile (a lost race: computed again, or refused)."""
    repo, store, task = project.repo, project.store, record["task"]
    base_ref, old, new = record["base"]["ref"], computed.old, computed.landing["commit"]
    with store.lock():
        current = store.load(task)
        if (current["run_id"], current["run_revision"]) != (record["run_id"], record["run_revision"]):
            if target.replaces is None and current["run_id"] == record["run_id"] and current["status"] == "merged":
                # A concurrent merge of this run landed first: what was asked
                # is done, so say what landed, as a merge run after it would.
                return Published(current, raced=True)
            raise ParallelError(
                E.RUN_REVISION_CONFLICT,
                f"run {record['run_id']} changed while it was being merged (revision "
                f"{record['run_revision']} → {current['run_revision']}); {target.nothing(record)}",
                hint=f"see `git parallel status {task}`, then {target.again} again",
            )
        _check_clean(worktree, computed.new_tree, computed.old_tree)
        tip = repo.ref_target(base_ref)
        if tip is None:
            raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                                hint="recreate it, or abort the run")
        if tip != old:
            return None
        if new != old and not _move_base(project, record, worktree, target, computed):
            return None
        faults.point("merge.after_ref")
        worktree_error = _follow(project, worktree, old, new)
        faults.point("merge.after_worktree")
        cfg = record["config"]["merge"]
        if target.replaces is None:
            merge_record = model.new_merge(
                new, old, base_ref, computed.landing["steps"], computed.landing["resolved_files"], cfg["policy"],
                utcnow(), attempts=attempt, retried=history, verified=computed.verified,
                worktree=str(worktree) if worktree else None, worktree_error=worktree_error, verify=reprove.verify_mode(cfg),
                rests_on=computed.rested, **({"onto": computed.start} if computed.start != old else {}))
            updated, _ = store.update_loaded(current, lambda rec: model.mark_merged(rec, merge_record))
        else:
            replaced_onto, at = target.replaced_onto(), utcnow()
            updated, _ = store.update_loaded(current, lambda rec: model.reland(
                model.merge_of(rec), new, computed.landing["steps"], computed.landing["resolved_files"],
                onto=computed.start, previous_landed=old, previous_onto=replaced_onto, verified=computed.verified,
                worktree_error=worktree_error, at=at))
        clear_intent(project, updated)
        return Published(updated)


def _move_base(project: Project, record: RunRecord, worktree: Path | None, target: Target,
               computed: Computed) -> bool:
    """Move the base ref to the landing by compare-and-swap, the intent
    written first; False when the base moved (a lost race), and a lock in
    the way raises ``PARALLEL_LOCK_HELD``."""
    task, base_ref, landing = record["task"], record["base"]["ref"], computed.landing
    # Say what is about to happen before it happens, so that a crash right
    # after the ref moves leaves recover enough to finish.
    write_intent(project, record, {
        "previous": computed.old, "landing": landing["commit"], "base_ref": base_ref,
        "worktree": str(worktree) if worktree else None, "steps": landing["steps"],
        "resolved_files": landing["resolved_files"], "written_at": utcnow()})
    what = f"git-parallel: land {task} ({record['run_id']})"
    if target.replaces is not None:
        what += f" again, onto {target.remote}'s tip"
    moved = False
    try:
        moved = project.repo.cas_ref(base_ref, landing["commit"], computed.old, what, task=task)
    finally:
        if not moved:
            clear_intent(project, record)
    return moved


def _follow(project: Project, worktree: Path | None, old: str, new: str) -> str | None:
    """Bring the base's checkout from ``old`` to ``new``; git's complaint if it could not."""
    if worktree is None or new == old:
        return None
    proc = project.repo.run_git(["read-tree", "-m", "-u", old, new], cwd=worktree, check=False)
    return proc.stderr.decode(errors="replace").strip() if proc.returncode != 0 else None


def _check_clean(worktree: Path | None, new_tree: pygit2.Tree | None, old_tree: pygit2.Tree | None = None) -> None:
    if worktree is not None:
        dirty = dirty_paths(worktree, new_tree, old_tree)
        if dirty:
            raise refuse_dirty(worktree, dirty)


# -- landing where the team lands: --push and --pr ------------------------------------------
# The remote's base branch is the team's: it only ever moves by one atomic
# push with a lease on the oid read from it, together with the notes (merged
# with the remote's first), the run snapshot and the run's evidence refs, so
# whoever reads the landed commit there can read why it landed.  A lease that
# fails because another clone pushed meanwhile is answered by computing the
# landing again onto the new tip (:func:`_land` with ``replaces``), never by
# forcing.


def _push(project: Project, record: RunRecord, remote: str) -> tuple[PushResult, RunRecord, list[str]]:
    """Move ``remote``'s base to what a merged run landed, with its notes,
    snapshot and evidence refs, in one atomic push under leases; idempotent
    (a remote that has it all is left as it is).  Returns what was pushed,
    the record after it, and warnings of the landings computed again."""
    repo, base_ref, task = project.repo, record["base"]["ref"], record["task"]
    retries = int(record["config"]["merge"]["retries"])
    relanded: list[Relanded] = []
    warnings: list[str] = []
    for attempt in range(1, retries + transport.NOTES_PUSH_ATTEMPTS + 2):
        there = transport.ls_remote(repo, remote, wanted_refs(record, []))
        tip = there.get(base_ref)
        fetch_tip(project, remote, base_ref, tip)
        landed = model.merge_of(record)["landed"]
        updates = []
        if tip is None or (tip != landed and not repo.is_ancestor(landed, tip)):
            if tip is not None and not repo.is_ancestor(tip, landed):
                if len(relanded) >= retries:
                    raise refused_push(record, remote, f"its {branch_name(base_ref)} kept moving ({attempt} attempts)",
                                       "wait for the other pushes to finish", E.REMOTE_MOVED)
                relanded.append({"landed": landed, "remote_tip": tip})
                winners = winner_instances(project, record)
                again = Target(again=f"`git parallel merge {task} --push {remote}`", remote=remote, tip=tip,
                               replaces=model.merge_of(record))
                record = _land(project, record, winners, base_worktree(repo, base_ref), again).record
                warnings += [w for w in [_landing_notes(project, record, winners, "merge --push")] if w]
                landed = model.merge_of(record)["landed"]
            if landed != tip:  # a landing computed again may be the remote's tip itself
                updates.append(transport.Update(landed, base_ref, tip or ""))
        shared, kept = share_updates(project, record, remote, there)
        pushed = transport.push(repo, remote, updates + shared)
        if pushed.ok:
            result, record = pushed_result(project, record, remote, updates + shared, kept, attempt, relanded)
            return result, record, warnings
        if not transport.moved(repo, remote, updates + shared):
            raise refused_push(record, remote, f"the atomic push was refused: {pushed.output}",
                               f"see the message (a protected branch? a hook of {remote}?)")
    raise refused_push(record, remote, "its refs kept moving", "wait for the other pushes to finish", E.REMOTE_MOVED)


def merge_pr(project: Project, task: str, remote: str = "origin") -> PrResult:
    """``merge --pr``: push the winner's branch and its provenance to
    ``remote`` and open a pull (merge) request with ``gh`` or ``glab``, or
    say the command; the base never moves and the run stays picked."""
    check_name(task, "task")
    repo = project.repo
    share.check_remote(repo, remote)
    record = project.store.load(task)
    if record["status"] in ("merged", "aborted"):
        raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} is {record['status']}; "
                            "nothing to propose", hint=f"see `git parallel status {task}`")
    config.verify_frozen(repo, record)
    winners = _proven_winners(project, record, "propose")
    pushed = push_branches(project, record, remote, winners)
    tool, found = pr_tool(repo, remote)
    base = branch_name(record["base"]["ref"])
    folder = repo.parallel_dir / "prs"
    proposals: list[Proposal] = []
    for pick, inst in winners:
        body_file = folder / f"{record['run_id']}-{pick['track']}.md"
        atomic_write(body_file, pr_body(record, pick, inst, evidence.load(inst), remote).encode())
        argv, shown = pr_command(tool, base, inst["branch"], pr_title(record, pick, inst), body_file)
        entry: Proposal = {"track": pick["track"], "winner": inst["id"], "branch": inst["branch"],
                                 "commit": pick["winner"]["commit"], "body_file": str(body_file), "command": shown,
                                 "tool": tool, "ran": bool(found), "url": None, "error": None}
        if found:
            ran = run_tool([found, *argv[1:]], repo)
            entry["url"], entry["error"] = ran.get("url", entry["url"]), ran.get("error", entry["error"])
            if "output" in ran:
                entry["output"] = ran["output"]
        proposals.append(entry)
    info = model.new_pr(remote, base, utcnow(), proposals)
    project.store.update(task, lambda rec: model.mark_proposed(rec, info))
    result: PrResult = {"task": task, "run_id": record["run_id"], "remote": remote, "base": base, "push": pushed,
                        "tool": tool, "proposals": proposals}
    failed = [p for p in proposals if p["error"]]
    if failed:
        raise ParallelError(E.REMOTE_FAILED, f"pushed {', '.join(p['branch'] for p in failed)} to {remote}, but "
                            f"`{tool}` failed: {failed[0]['error']}", hint=f"run it yourself: {failed[0]['command']}",
                            **result)
    return result
