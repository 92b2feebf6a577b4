"""Findings about what a run decided and landed: pick records written but
never bound, a pick that can no longer land, a merge intent left by a crash,
a base branch that already holds the winners, and a checkout of the base
left at the tree before the landing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.errors import (BASE_MERGED, BASE_WORKTREE_STALE, MERGE_INTENT_LEFT, PICK_MISSING, PICK_UNBOUND,
                                     ParallelError)
from gitflow_parallel.files import utcnow
from gitflow_parallel.model import FINISHED_RUN, LandingStep, MergeRecord, PickRecord, RunRecord, find_instance
from gitflow_parallel.recovery.context import RunContext
from gitflow_parallel.recovery.scan import ERROR, WARNING, PHASE_BASE_WORKTREE, Repair
from gitflow_parallel.state import intent as merge_intent
from gitflow_parallel.git import worktrees
from gitflow_parallel.state.landing import ignored_in_checkout


# -- picks, intent, base -----------------------------------------------------------
def picks_and_merge(ctx: RunContext) -> None:
    """Each track's pick record (gone, unreadable, unbound, or no longer able
    to land), then the merge: an intent left, or a base that already holds
    the winners."""
    from gitflow_parallel.state.picks import load_pick, pick_path, winner_check

    rec = ctx.record
    picks: dict[str, PickRecord] = {}
    for track in rec["tracks"]:
        path = pick_path(ctx.repo.parallel_dir, ctx.run_id, track)
        bound = (rec.get("picks") or {}).get(track)
        if bound and not path.exists():
            ctx.add(PICK_MISSING, ERROR, f"the pick record of track {track} ({path}) is gone",
                    fix=f"restore {path} from a backup; pick records are write-once")
            continue
        try:
            pick = load_pick(ctx.project, rec, track)
        except ParallelError as exc:
            ctx.add(exc.code, ERROR, exc.message, fix=exc.hint or f"git parallel status {ctx.task}")
            continue
        if pick is None:
            continue
        try:
            winner = find_instance(rec, pick["winner"]["id"])
        except ParallelError:
            ctx.add(E.PICK_SCHEMA_INVALID, ERROR,
                    f"the pick of track {track} names instance {pick['winner']['id']}, which the run does not have",
                    fix=f"restore {path}; pick records are write-once",
                    refusal=None if bound else f"the unbound pick of track {track} names no instance of the run")
            continue
        picks[track] = pick
        if not bound:
            bind_pick(ctx, track, path, pick)
        if rec["status"] != "merged" and not winner.get("removed"):
            ok, code, why = winner_check(ctx.project, rec, winner, ctx.project.tip(winner) or "")
            if not ok:
                ctx.add(code or E.EVIDENCE_MISMATCH, ERROR,
                        f"the pick of track {track} cannot land: {why}", instance=winner["id"],
                        fix="pick records are write-once: reset the branch to the picked commit "
                            f"(git branch -f {winner['branch']} {pick['winner']['commit']}), or start a new run")
    base_ref = rec["base"]["ref"]
    base_tip = ctx.repo.ref_target(base_ref)
    intent_file = merge_intent.intent_path(ctx.project, rec)
    if intent_file.exists():
        intent_left(ctx, intent_file, base_tip)
    elif (rec["status"] not in FINISHED_RUN and base_tip is not None and picks
          and len(picks) == len(rec["tracks"])):
        commits = [p["winner"]["commit"] for p in picks.values()]
        if (all(ctx.scan.contains(base_tip, c) for c in commits)
                and not all(ctx.scan.contains(rec["base"]["commit"], c) for c in commits)):
            merged_outside(ctx, base_tip, picks)
        else:
            squashed(ctx, base_tip, picks)


def bind_pick(ctx: RunContext, track: str, path: Path, pick: PickRecord) -> None:
    """The finding whose repair binds a pick record written and never bound to the run record."""
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()

    def record(rec: RunRecord) -> None:
        model.bind_pick(rec, track, path, sha, pick)

    if not ctx.noted(pick["winner"]["commit"], {"kind": "pick", "track": track}):
        ctx.will_note.append(f"pick of track {track} on the winner, once bound")
    message = (f"the pick record of track {track} (winner {pick['winner']['id']}) was written but never bound "
               "to the run record (the pick was interrupted)")
    ctx.add(PICK_UNBOUND, ERROR, message,
            repair=Repair("bind_pick", f"bind the pick of track {track} (winner {pick['winner']['id']}) "
                          "to the record", "pick records are write-once; this one validates against the run",
                          record=record, details={"track": track, "path": str(path), "sha256": sha,
                                                  "winner": pick["winner"]["id"]}))


def _landed_unrecorded(ctx: RunContext, merge_record: MergeRecord, previous: str | None, source: str, message: str,
                       why: str) -> None:
    """The base holds this run's landing and its record does not say so:
    the finding, and the repair that records it (``source`` is the proof)."""
    landed = merge_record["landed"]
    ctx.add(BASE_MERGED, ERROR, message,
            repair=Repair("record_merged", f"record run {ctx.run_id} merged at {landed[:12]} and write its notes "
                          "there", why, record=_mark_merged(ctx, merge_record),
                          details={"landed": landed, "previous": previous, "from": source}))


def _mark_merged(ctx: RunContext, merge_record: MergeRecord) -> Callable[[RunRecord], None]:
    landed = merge_record["landed"]
    if not ctx.noted(landed, {"kind": "merge"}) or not all(
            ctx.noted(landed, {"kind": "pick", "track": t}) for t in ctx.record["tracks"]):
        ctx.will_note.append(f"pick and merge lines on the landed commit {landed[:12]}, once recorded")

    def record(rec: RunRecord) -> None:
        if rec["status"] != "merged":
            model.mark_merged(rec, merge_record)
    return record


def intent_left(ctx: RunContext, path: Path, base_tip: str | None) -> None:
    """A merge intent left by an interrupted merge, read against where the base is now."""
    rec, task, project = ctx.record, ctx.task, ctx.project
    try:
        intent = merge_intent.read_intent(path)
    except (OSError, ValueError) as exc:
        ctx.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} cannot be read ({exc})",
                fix=f"compare {rec['base']['ref']} with the winners by hand, then remove {path}",
                refusal=f"the merge intent {path} is unreadable, so recover cannot tell whether the base moved")
        return
    previous, landing = intent["previous"], intent["landing"]

    def drop() -> None:
        merge_intent.clear_intent(project, rec)

    landed_now = base_tip is not None and (base_tip == landing or ctx.scan.contains(base_tip, landing))
    if rec["status"] == "merged" or landed_now:
        if landed_now and base_tip == landing:
            stale_base_worktree(ctx, previous, landing)
    if rec["status"] == "merged":
        ctx.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} outlived the merge it describes",
                repair=Repair("remove_intent", f"remove {path.name}", "the record already says merged",
                              after=drop, details={"path": str(path)}))
    elif landed_now:
        merge_record = found_landing(rec, ctx.rid, landing, previous, list(intent.get("steps") or []),
                                     list(intent.get("resolved_files") or []), intent.get("worktree"), "intent")
        message = (f"{rec['base']['ref']} already holds the landing {landing[:12]} of run {ctx.run_id} "
                   f"(moved from {previous[:12]} by `git parallel merge`), but the record is {rec['status']}")
        _landed_unrecorded(ctx, merge_record, previous, "intent", message,
                           "the merge intent names the commit the base now holds")
        # Last, once the record says merged: until then the intent is the proof.
        ctx.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} is left from the interrupted merge",
                repair=Repair("remove_intent", f"remove {path.name}", "the landing it describes is recorded",
                              after=drop, details={"path": str(path)}))
    elif base_tip == previous:
        ctx.add(MERGE_INTENT_LEFT, ERROR,
                f"the merge intent {path} describes a merge that never moved {rec['base']['ref']}",
                fix=f"git parallel recover {task}, then git parallel merge {task}",
                repair=Repair("remove_intent", f"remove the stale {path.name}",
                              f"{rec['base']['ref']} is still at the intent's previous commit {previous[:12]}",
                              after=drop, details={"path": str(path)}))
    else:
        now = base_tip[:12] if base_tip else "missing"
        ctx.add(MERGE_INTENT_LEFT, ERROR,
                f"the merge intent {path} says {rec['base']['ref']} was to move {previous[:12]} -> "
                f"{landing[:12]}, but it is at {now}, which holds neither",
                fix=f"if the base was moved on purpose, remove {path} and run git parallel recover {task}",
                refusal=f"{rec['base']['ref']} moved to {now} after an interrupted merge; "
                        "recover cannot tell whether the landing was undone on purpose")


def stale_base_worktree(ctx: RunContext, previous: str, landing: str) -> None:
    """After a crash between moving the base ref and updating its
    checkout: move a worktree still at the previous tree forward, as
    merge would have, only if git itself says nothing can be overwritten."""
    base_ref = ctx.record["base"]["ref"]
    wt = worktrees.base_worktree(ctx.repo, base_ref)
    if wt is None:
        return
    run = ctx.repo.run_git
    if run(["diff-index", "--cached", "--quiet", landing, "--"], cwd=wt, check=False).returncode == 0:
        return  # the index already has the landed tree
    if run(["diff-index", "--cached", "--quiet", previous, "--"], cwd=wt, check=False).returncode != 0:
        ctx.add(BASE_WORKTREE_STALE, WARNING,
                f"{wt} has {base_ref} checked out, and its index matches neither the previous tree "
                f"{previous[:12]} nor the landed {landing[:12]}",
                fix=f"inspect it with git -C {wt} status; git -C {wt} reset --keep {landing} updates it")
        return
    blocked = _in_the_way(run, wt, previous, landing)
    if blocked is not None:
        ctx.add(BASE_WORKTREE_STALE, WARNING, blocked[0],
                fix=f"{blocked[1]}, then git -C {wt} read-tree -m -u {previous} {landing}")
        return

    def git() -> None:
        proc = run(["read-tree", "-m", "-u", previous, landing], cwd=wt, check=False)
        if proc.returncode != 0:
            raise ParallelError(
                E.RECOVERY_REFUSED,
                f"could not update {wt} to {landing[:12]}: {proc.stderr.decode(errors='replace').strip()}",
                hint=f"commit or stash the changes there and run `git parallel recover {ctx.task}` again")

    ctx.add(BASE_WORKTREE_STALE, ERROR,
            f"{wt} has {base_ref} checked out but still shows the tree before the merge ({previous[:12]})",
            repair=Repair("update_base_worktree", f"update {wt} from {previous[:12]} to {landing[:12]}",
                          "its index is exactly the previous tree, and git says nothing would be overwritten",
                          phase=PHASE_BASE_WORKTREE, git=git,
                          details={"worktree": str(wt), "previous": previous, "landed": landing}))


def merged_outside(ctx: RunContext, base_tip: str, picks: dict[str, PickRecord]) -> None:
    """The winners are on the base, landed by plain git (hooks off, or
    the manual policy): find the commit that landed them."""
    rec = ctx.record
    winners = [p["winner"]["commit"] for p in picks.values()]
    landed = ctx.scan.commit(base_tip)
    assert landed is not None
    # The oldest commit on the base's first-parent line that holds every
    # winner is where they landed; later commits were made on top.
    while landed.parents and all(ctx.scan.contains(str(landed.parents[0].id), w) for w in winners):
        landed = landed.parents[0]
    landed_oid = str(landed.id)
    previous = _previous_from_reflog(ctx, landed_oid)
    if previous is None:
        if landed_oid in winners:
            previous = rec["base"]["commit"] if ctx.scan.contains(landed_oid, rec["base"]["commit"]) else None
        elif landed.parents:
            previous = str(landed.parents[0].id)
    steps: list[LandingStep] = [{"track": t, "winner": p["winner"]["id"], "commit": p["winner"]["commit"],
                                 "method": "fast-forward" if p["winner"]["commit"] == landed_oid else "merge"}
                                for t, p in picks.items()]
    if previous is not None and base_tip == landed_oid:
        # The base moved by compare-and-swap from `previous` but its
        # checkout may not have followed (a merge whose intent is gone).
        stale_base_worktree(ctx, previous, landed_oid)
    # outside: landed by plain git, so git-parallel verified nothing at merge time.
    merge_record = found_landing(ctx.record, ctx.rid, landed_oid, previous, steps, [], None, "base",
                                 outside=True)
    message = (f"{rec['base']['ref']} already holds every winner of run {ctx.run_id} (landed at "
               f"{landed_oid[:12]}, not by `git parallel merge`), but the record is {rec['status']}")
    _landed_unrecorded(ctx, merge_record, previous, "base", message,
                       "every picked winner commit is reachable from the base")


def squashed(ctx: RunContext, base_tip: str, picks: dict[str, PickRecord]) -> None:
    """A squash holds none of the winners' commits: with its intent gone,
    the base's reflog entry of the landing names the commit."""
    found = reflog_landing(ctx.repo.pygit, ctx.record)
    if found is None or not (found[0] == base_tip or ctx.scan.contains(base_tip, found[0])):
        return
    landed, previous = found
    steps: list[LandingStep] = [{"track": t, "winner": p["winner"]["id"], "commit": landed, "method": "squash"}
                                for t, p in picks.items()]
    if base_tip == landed:
        stale_base_worktree(ctx, previous, landed)
    merge_record = found_landing(ctx.record, ctx.rid, landed, previous, steps, [], None, "reflog")
    _landed_unrecorded(
        ctx, merge_record, previous, "reflog",
        f"{ctx.record['base']['ref']} holds the landing {landed[:12]} of run {ctx.run_id} (its reflog "
        f"says `git parallel merge` moved it from {previous[:12]}), but the record is {ctx.record['status']}",
        "the base's reflog names the landing git-parallel made")


def _previous_from_reflog(ctx: RunContext, landed: str) -> str | None:
    try:
        entries = list(ctx.repo.pygit.references[ctx.record["base"]["ref"]].log())
    except (KeyError, pygit2.GitError):
        return None
    for entry in entries:  # newest first
        if str(entry.oid_new) == landed and not str(entry.oid_old).strip("0") == "":
            return str(entry.oid_old)
    return None


def found_landing(record: RunRecord, rid: str, landed: str, previous: str | None, steps: list[LandingStep],
                  resolved: list[object], worktree: str | None, source: str, outside: bool = False) -> MergeRecord:
    """The merge record of a landing recovery ``rid`` found (``source``: its
    proof; ``outside``: plain git made it)."""
    found = model.new_merge(landed, previous, record["base"]["ref"], steps, resolved,
                            record["config"]["merge"]["policy"], utcnow(), worktree=worktree,
                            recovered={"recovery_id": rid, "from": source})
    if outside:
        found["outside"] = True
    return found


def _in_the_way(run: Callable[..., Any], wt: Path, previous: str, landing: str) -> tuple[str, str] | None:
    """What of the user's in the base's checkout updating it from
    ``previous`` to ``landing`` would overwrite (local changes, as git
    itself says; ignored files where the landing adds one, which git's
    read-tree overwrites without a word), and what to do first; None when
    nothing."""
    run(["update-index", "-q", "--refresh"], cwd=wt, check=False)
    dry = run(["read-tree", "-m", "-u", "-n", previous, landing], cwd=wt, check=False)
    if dry.returncode != 0:
        return (f"{wt} still shows the tree before the merge, and updating it would overwrite local changes: "
                f"{dry.stderr.decode(errors='replace').strip()}", "commit or stash them there")
    ignored = ignored_in_checkout(wt, previous, landing)
    if ignored:
        return (f"{wt} still shows the tree before the merge, and updating it would overwrite or remove ignored "
                f"files of yours: {', '.join(ignored[:10])}" + (" …" if len(ignored) > 10 else ""),
                "move them aside")
    return None


def reflog_landing(repo: pygit2.Repository, record: RunRecord) -> tuple[str, str] | None:
    """(landed, previous) from the base's reflog entry ``git-parallel: land
    TASK (RUN_ID)`` that ``merge``'s compare-and-swap wrote, if any."""
    try:
        entries = list(repo.references[record["base"]["ref"]].log())
    except (KeyError, pygit2.GitError):
        return None
    mark = f"git-parallel: land {record['task']} ({record['run_id']})"
    found = next((e for e in entries if (e.message or "").strip() == mark), None)
    return (str(found.oid_new), str(found.oid_old)) if found is not None else None
