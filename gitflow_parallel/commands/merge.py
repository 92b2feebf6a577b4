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
(``merge.verify``: ``always`` by default, ``changed`` only for a merged tree
no gate saw, ``never``): the enforced gates run on the exact tree that will
land, in a clean checkout with protected paths from the commit it lands on,
so stale or forged evidence never lands a failing tree.  Every refusal
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
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import config, evidence, faults, model, notify, provenance
from gitflow_parallel.git import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, canonical_json, utcnow
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.picks import winner_check, winner_instances
from gitflow_parallel.state.intent import clear_intent, intent_path
from gitflow_parallel.git.worktrees import base_worktree
from gitflow_parallel.git import retire
from gitflow_parallel.git import transport
from gitflow_parallel.git.landing import compute, dirty_paths, refuse_dirty
from gitflow_parallel.git.pull_request import pr_body, pr_command, pr_title, pr_tool, run_tool
from gitflow_parallel.proc import notifier
from gitflow_parallel.git.remote_landing import (
    branch_name, diverged, fetch_tip, has_object, onto_remote, pushed_result, refused_push, share_updates,
    wanted_refs)


def verify_mode(cfg: dict[str, Any]) -> str:
    """``merge.verify`` of a record; records frozen before the three modes hold a bool."""
    mode = cfg.get("verify", "always")
    return {True: "changed", False: "never"}.get(mode, mode) if isinstance(mode, bool) else mode


def _verify(project: Project, record: dict[str, Any], landing: dict[str, Any],
            winners: list[tuple[dict[str, Any], dict[str, Any]]], onto: str) -> list[dict[str, Any]]:
    """Re-prove the landing: the enforced gates of each track on the exact
    tree that will land, judged with the protected paths of ``onto`` (the
    commit the base is at), in a clean checkout.  Evidence, however it was
    made, is then never the only thing that lets a tree land.  ``changed``
    skips the tracks whose winner's own tree is the landing tree; ``never``
    trusts the evidence."""
    from gitflow_parallel.judge import gates

    mode = verify_mode(record["config"]["merge"])
    if mode == "never":
        return []
    tree = project.repo.tree_of(landing["commit"])
    results = []
    for pick, inst in winners:
        if mode == "changed" and pick["winner"]["tree"] == tree:
            continue
        outcome = gates.verify_tree(project, record, pick["track"], landing["commit"], base=onto)
        results.append({
            "track": pick["track"], "passed": outcome["passed"], "commit": landing["commit"], "tree": tree,
            "judged_commit": outcome["judged_commit"], "protected_changes": outcome["protected_changes"],
            "refused": outcome["refused"], "checkout": "clean",
            "gates": [{k: g.get(k) for k in ("name", "mode", "passed", "exit_code", "duration_s", "log", "error")}
                      for g in outcome["gates"]]})
        if outcome["refused"]:
            raise ParallelError(
                outcome["refused"]["code"], f"cannot land track {pick['track']}: {outcome['refused']['message']}",
                hint="nothing moved; retry the instance without touching protected paths")
        if not outcome["passed"]:
            failed = [g["name"] for g in outcome["gates"] if not g.get("passed") and g.get("mode") == "enforced"]
            same = pick["winner"]["tree"] == tree
            raise ParallelError(
                E.EVIDENCE_MISMATCH if same else E.MERGE_CONFLICT,
                f"the tree {tree[:12]} that would land fails enforced gate(s) {', '.join(failed) or '?'} of track "
                f"{pick['track']} in a clean checkout"
                + (", although its evidence says it passed (the evidence is stale or was forged)" if same
                   else ", although the winner passed alone (a semantic conflict)"),
                hint="nothing moved; " + (f"check it again (`git parallel check {record['task']}`) and see the gate "
                                          "logs" if same else
                                          f"start a new attempt from the current base (`git parallel retry "
                                          f"{record['task']} {inst['id']} --onto-current`, then run, check, "
                                          "pick), or merge by hand"),
            )
    return results


def protected_landed(winners: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the winners change of the tests, the harness or the config: a
    person picked them knowing (an automatic pick never chooses such a
    winner), and the landing says so."""
    return [{"track": pick["track"], "winner": pick["winner"]["id"], "changes": pick["protected_changes"]}
            for pick, _ in winners if pick.get("protected_changes")]


class _MergedMeanwhile(Exception):
    """Another merge of the same run landed while this one computed."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__(record["run_id"])
        self.record = record


def _land(project: Project, record: dict[str, Any], winners: list[tuple[dict[str, Any], dict[str, Any]]],
          worktree: Path | None, finish: Any, onto: Any = None) -> Any:
    """Compute, verify and publish the landing; retried while the base moves.

    Computing and verifying (which runs gates, possibly for minutes) happen
    outside the project lock, so other commands (a ``run`` of another task
    recording its agents) are never held up.  The lock is taken only to
    publish: the record must still be at the revision read, the base
    worktree still clean, the base ref still at the oid read; then the intent
    is written, the ref moved by compare-and-swap, and ``finish`` records the
    result before the lock is let go.

    ``onto(old)`` names the commit to compute the landing on when it is not
    the local base itself (``--push``: the remote's tip, which the local base
    is an ancestor of); the local base then moves from ``old`` to the landing,
    still a fast-forward, still by compare-and-swap."""
    repo = project.repo
    store = project.store
    task = record["task"]
    cfg = record["config"]["merge"]
    base_ref = record["base"]["ref"]
    deadline = time.monotonic() + float(cfg["timeout"])
    attempts = 0
    history: list[dict[str, Any]] = []
    while True:
        attempts += 1
        old = repo.ref_target(base_ref)
        if old is None:
            raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                                hint="recreate it, or abort the run")
        start = onto(old) if onto is not None else old
        landing = compute(project, record, start, winners)
        landing["onto"] = start
        new_tree = repo.pygit.get(landing["commit"]).tree
        old_tree = repo.pygit.get(old).peel(pygit2.Commit).tree
        _check_clean(repo, worktree, new_tree, old_tree)
        proving = time.monotonic()
        verified = _verify(project, record, landing, winners, start)
        # The re-proof's gates have timeouts of their own: merge.timeout
        # bounds the merging around them (found on click, where one re-proof
        # took longer than the whole default budget and was thrown away).
        deadline += time.monotonic() - proving
        if time.monotonic() > deadline:
            raise ParallelError(E.MERGE_TIMEOUT, f"the merge of {task} took longer than merge.timeout "
                                f"({cfg['timeout']}s); nothing moved",
                                hint="raise merge.timeout for new runs, or make the gates faster; then merge again")
        with store.lock():
            current = store.load(task)
            if current["run_revision"] != record["run_revision"] and current["status"] == "merged" \
                    and current["run_id"] == record["run_id"]:
                # A concurrent merge of this run landed first: what was asked
                # is done, so say what landed, as a merge run after it would.
                raise _MergedMeanwhile(current)
            if current["run_revision"] != record["run_revision"]:
                raise ParallelError(
                    E.RUN_REVISION_CONFLICT,
                    f"run {record['run_id']} changed while it was being merged (revision "
                    f"{record['run_revision']} → {current['run_revision']}); nothing moved",
                    hint=f"see `git parallel status {task}`, then `git parallel merge {task}` again",
                )
            _check_clean(repo, worktree, new_tree, old_tree)
            moved = False
            tip = repo.ref_target(base_ref)
            if tip is None:
                raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                                    hint="recreate it, or abort the run")
            if tip == old:
                if landing["commit"] == old:
                    moved = True  # everything already on the base
                else:
                    # Say what is about to happen before it happens, so that a
                    # crash right after the ref moves leaves recover enough to finish.
                    intent = {"previous": old, "landing": landing["commit"], "base_ref": base_ref,
                              "worktree": str(worktree) if worktree else None, "steps": landing["steps"],
                              "resolved_files": landing["resolved_files"], "written_at": utcnow()}
                    atomic_write(intent_path(project, record), canonical_json(intent))
                    try:
                        # False only when the base moved (a lost race, retried
                        # below); a lock in the way raises PARALLEL_LOCK_HELD.
                        moved = repo.cas_ref(base_ref, landing["commit"], old,
                                             f"git-parallel: land {task} ({record['run_id']})", task=task)
                    finally:
                        if not moved:
                            clear_intent(project, record)
            if moved:
                return finish(landing, old, attempts, history, verified)
        history.append({"attempt": attempts, "base_was": old, "computed": landing["commit"]})
        if attempts > int(cfg["retries"]):
            raise ParallelError(
                E.MERGE_CONFLICT,
                f"the base {base_ref} kept moving while merging ({attempts} attempts); nothing moved",
                hint="wait for the other writer to finish, then run `git parallel merge` again",
            )


def _check_clean(repo: Repo, worktree: Path | None, new_tree: pygit2.Tree | None,
                 old_tree: pygit2.Tree | None = None) -> None:
    if worktree is not None:
        dirty = dirty_paths(worktree, new_tree, old_tree)
        if dirty:
            raise refuse_dirty(worktree, dirty)


def landing_notes(record: dict[str, Any], winners: list[tuple[dict[str, Any], dict[str, Any]]],
                  merge_record: dict[str, Any]) -> list[tuple[str, str]]:
    """The note lines on the commit that landed: each pick, the merge, one line for people."""
    landed = merge_record["landed"]
    entries = [(landed, provenance.pick_note(p)) for p, _ in winners]
    entries.append((landed, provenance.merge_note(record, merge_record)))
    entries.append((landed, provenance.landing_line(record, [(p, evidence.load(i)) for p, i in winners])))
    return entries


# -- the verb --------------------------------------------------------------------------
def _proven_winners(project: Project, record: dict[str, Any], task: str,
                    doing: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each track's (pick, winner), refused unless the winner's tip still has
    the fresh, passing evidence its pick was made on."""
    winners = winner_instances(project, record)
    for pick, inst in winners:
        ok, code, why = winner_check(project, record, inst, project.tip(inst) or "")
        if not ok:
            raise ParallelError(code or E.EVIDENCE_MISMATCH, f"cannot {doing} track {pick['track']}: {why}",
                                hint=f"run `git parallel check {task}`; a changed winner needs a new run or retry")
    return winners


def merge(project: Project, task: str, onto: Any = None) -> dict[str, Any]:
    """Land the run's winners on its base branch (see the module doc);
    ``onto`` as in :func:`_land`."""
    check_name(task, "task")
    store = project.store
    repo = project.repo
    with store.lock():
        record = store.load(task)
        if record["status"] == "merged":
            return {"already": True, "run_id": record["run_id"], "merge": record["merge"], "cleanup": None}
        if record["status"] == "aborted":
            raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} was aborted",
                                hint=f"spawn a new run with `git parallel spawn {task}`")
        config.verify_frozen(repo, record)
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
        winners = _proven_winners(project, record, task, "land")
        cfg = record["config"]["merge"]
        base_ref = record["base"]["ref"]
        if cfg["policy"] == "manual":
            lines = [f"git switch {base_ref[len('refs/heads/'):]}"] + [
                f"git merge --no-ff {inst['branch']}" for _, inst in winners]
            raise ParallelError(
                E.MANUAL_HALT,
                "merge.policy is manual: git parallel does not merge; run:\n  " + "\n  ".join(lines),
                hint="the installed hooks (`git parallel hooks install`) gate that merge; "
                     "then `git parallel recover " + task + "` records it",
                commands=lines,
            )
        worktree = base_worktree(repo, base_ref)

    def finish(landing: dict[str, Any], old: str, attempts: int, history: list[dict[str, Any]],
               verified: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Under the lock, right after the base moved: its checkout, the record."""
        faults.point("merge.after_ref")
        worktree_error = None
        if worktree is not None and landing["commit"] != old:
            proc = repo.run_git(["read-tree", "-m", "-u", old, landing["commit"]], cwd=worktree, check=False)
            if proc.returncode != 0:
                worktree_error = proc.stderr.decode(errors="replace").strip()
        faults.point("merge.after_worktree")
        merge_record = model.new_merge(
            landing["commit"], old, base_ref, landing["steps"], landing["resolved_files"], cfg["policy"], utcnow(),
            attempts=attempts, retried=history, verified=verified, worktree=str(worktree) if worktree else None,
            worktree_error=worktree_error, verify=verify_mode(cfg),
            **({"onto": landing["onto"]} if landing["onto"] != old else {}))
        updated, _ = store.update(task, lambda rec: model.mark_merged(rec, merge_record))
        clear_intent(project, updated)
        return updated, merge_record

    try:
        record, merge_record = _land(project, record, winners, worktree, finish, onto)
    except _MergedMeanwhile as done:
        return {"already": True, "run_id": done.record["run_id"], "merge": done.record["merge"], "cleanup": None,
                "raced": True}
    entries = landing_notes(record, winners, merge_record)
    notes_error = project.mirror_notes(record, entries, "merge") or share.mirror_run(project, record)

    try:
        cleaned = retire.cleanup(project, task, keep_losers=bool(record["config"]["keep_losers"]))
        cleanup_error = None
    except ParallelError as exc:
        cleaned, cleanup_error = None, {"code": exc.code, "message": exc.message, "hint": exc.hint}

    return {"already": False, "run_id": record["run_id"], "merge": merge_record,
            "protected_landed": protected_landed(winners),
            "cleanup": cleaned and {"removed": cleaned["removed"], "kept": cleaned["kept"]},
            "cleanup_error": cleanup_error, "notes_error": notes_error,
            "remote_warning": transport.withdraw(project, record),
            "notify_warnings": notifier.send_one(project, record, notify.landed(record, merge_record, winners))}


# -- landing where the team lands: --push and --pr ------------------------------------------
# The remote's base branch is the team's: it only ever moves by one atomic
# push with a lease on the oid read from it, together with the notes (merged
# with the remote's first), the run snapshot and the run's evidence refs, so
# whoever reads the landed commit there can read why it landed.  A lease that
# fails because another clone pushed meanwhile is answered by computing the
# landing again onto the new tip, never by forcing.


def _reland(project: Project, record: dict[str, Any], remote: str, tip: str) -> dict[str, Any]:
    """A merged run whose landing the remote has not taken, because its base
    moved on: compute the landing again onto the remote's ``tip``, re-prove
    it, and move the local base from the old landing (never pushed, so no
    one else has it) to the new one, by compare-and-swap.  Refused when the
    local base moved on past the landing, or the remote's history no longer
    holds what the landing was computed on."""
    repo, task, m = project.repo, record["task"], record["merge"]
    base_ref, landed = m["base_ref"], m["landed"]
    not_pushed = f"run {record['run_id']} landed here at {landed[:12]} and was not pushed"
    local = repo.ref_target(base_ref)
    if local != landed:
        raise ParallelError(
            E.REMOTE_DIVERGED,
            f"{branch_name(base_ref)} here moved on after the landing ({landed[:12]} -> {str(local)[:12]}) and "
            f"{remote} has commits it lacks; {not_pushed}",
            hint=f"`git pull {remote} {branch_name(base_ref)}` where it is checked out, then `git push {remote} "
                 f"{branch_name(base_ref)}` and `git parallel push {remote}`")
    start = m.get("onto") or m["previous"]
    if not repo.is_ancestor(start, tip):
        raise diverged(record, remote, start, tip, not_pushed)
    winners = winner_instances(project, record)
    landing = compute(project, record, tip, winners)
    worktree = base_worktree(repo, base_ref)
    new_tree = repo.pygit.get(landing["commit"]).tree
    old_tree = repo.pygit.get(landed).peel(pygit2.Commit).tree
    _check_clean(repo, worktree, new_tree, old_tree)
    verified = _verify(project, record, landing, winners, tip)
    with project.store.lock():
        current = project.store.load(task)
        if (current["run_id"], current["run_revision"]) != (record["run_id"], record["run_revision"]):
            raise ParallelError(E.RUN_REVISION_CONFLICT, f"run {record['run_id']} changed meanwhile; {not_pushed}",
                                hint=f"`git parallel merge {task} --push {remote}` again")
        _check_clean(repo, worktree, new_tree, old_tree)
        if not repo.cas_ref(base_ref, landing["commit"], landed,
                            f"git-parallel: land {task} ({record['run_id']}) again, onto {remote}'s tip"):
            raise ParallelError(E.MERGE_CONFLICT, f"{branch_name(base_ref)} moved here meanwhile; {not_pushed}",
                                hint=f"`git parallel merge {task} --push {remote}` again")
        worktree_error = None
        if worktree is not None:
            proc = repo.run_git(["read-tree", "-m", "-u", landed, landing["commit"]], cwd=worktree, check=False)
            if proc.returncode != 0:
                worktree_error = proc.stderr.decode(errors="replace").strip()

        def apply(rec: dict[str, Any]) -> None:
            model.reland(rec["merge"], landing["commit"], landing["steps"], landing["resolved_files"], onto=tip,
                         previous_landed=landed, previous_onto=start, verified=verified,
                         worktree_error=worktree_error, at=utcnow())

        updated, _ = project.store.update(task, apply)
    project.mirror_notes(updated, landing_notes(updated, winners, updated["merge"]), "merge --push")
    share.mirror_run(project, updated)
    return updated


def push_landing(project: Project, task: str, remote: str) -> dict[str, Any]:
    """Move ``remote``'s base to what a merged run landed, with its notes,
    snapshot and evidence refs, in one atomic push under leases; idempotent
    (a remote that has it all is left as it is)."""
    from gitflow_parallel.git import transport as wire

    repo = project.repo
    record = project.store.load(task)
    base_ref = record["base"]["ref"]
    retries = int(record["config"]["merge"]["retries"])
    relanded: list[dict[str, Any]] = []
    for attempt in range(1, retries + wire.NOTES_PUSH_ATTEMPTS + 2):
        there = wire.ls_remote(repo, remote, wanted_refs(record, []))
        tip = there.get(base_ref)
        fetch_tip(project, remote, base_ref, tip)
        landed = record["merge"]["landed"]
        updates = []
        if tip is None or (tip != landed and not repo.is_ancestor(landed, tip)):
            if tip is not None and not repo.is_ancestor(tip, landed):
                if len(relanded) >= retries:
                    raise refused_push(record, remote, f"its {branch_name(base_ref)} kept moving ({attempt} attempts)",
                                      "wait for the other pushes to finish", E.REMOTE_MOVED)
                relanded.append({"landed": landed, "remote_tip": tip})
                record = _reland(project, record, remote, tip)
                landed = record["merge"]["landed"]
            if landed != tip:  # a landing computed again may be the remote's tip itself
                updates.append(wire.Update(landed, base_ref, tip or ""))
        shared, kept = share_updates(project, record, remote, there)
        pushed = wire.push(repo, remote, updates + shared)
        if pushed.ok:
            return pushed_result(project, record, remote, updates + shared, kept, attempt, relanded)
        if not wire.moved(repo, remote, updates + shared):
            raise refused_push(record, remote, f"the atomic push was refused: {pushed.output}",
                              f"see the message (a protected branch? a hook of {remote}?)")
    raise refused_push(record, remote, "its refs kept moving", "wait for the other pushes to finish", E.REMOTE_MOVED)


def merge_push(project: Project, task: str, remote: str) -> dict[str, Any]:
    """``merge --push REMOTE``: land onto the remote's tip of the base (the
    local base fast-forwards with the landing), then push it with its
    provenance; a merged run is only pushed."""
    from gitflow_parallel.git import transport as wire

    check_name(task, "task")
    share.check_remote(project.repo, remote)
    record = project.store.load(task)
    onto = None
    if record["status"] != "merged":
        base_ref = record["base"]["ref"]
        tip = wire.ls_remote(project.repo, remote, [base_ref]).get(base_ref)
        fetch_tip(project, remote, base_ref, tip)
        onto = onto_remote(project, record, remote, tip)
    result = merge(project, task, onto=onto)
    try:
        result["push"] = push_landing(project, task, remote)
    except ParallelError as exc:
        if "pushed" in exc.details:
            raise
        landed = result["merge"]["landed"]
        raise ParallelError(exc.code, f"run {result['run_id']} landed on {branch_name(result['merge']['base_ref'])} here "
                            f"at {landed[:12]}, but was not pushed to {remote}: {exc.message}",
                            hint=f"{exc.hint or 'see the message'}; then `git parallel merge {task} --push {remote}` "
                                 "pushes it (a merged run is only pushed)", landed=landed, pushed=False) from None
    result["merge"] = project.store.load(task)["merge"]  # a landing computed again says so
    return result


def _push_branches(project: Project, record: dict[str, Any], remote: str,
                   winners: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The winners' branches and the run's provenance in one atomic push;
    a remote branch with commits the winner lacks is never overwritten."""
    from gitflow_parallel.git import transport as wire

    repo = project.repo
    refs = [f"refs/heads/{inst['branch']}" for _, inst in winners]
    output = ""
    for attempt in range(1, wire.NOTES_PUSH_ATTEMPTS + 1):
        there = wire.ls_remote(repo, remote, wanted_refs(record, refs))
        updates = []
        for (_, inst), ref in zip(winners, refs):
            tip, theirs = project.tip(inst), there.get(ref)
            if tip is None or tip == theirs:
                continue
            if theirs is not None and not (has_object(repo, theirs) and repo.is_ancestor(theirs, tip)):
                raise ParallelError(E.REMOTE_DIVERGED, f"{remote} has {inst['branch']} at {theirs[:12]}, with "
                                    f"commits the winner ({tip[:12]}) lacks; nothing was pushed",
                                    hint=f"see `git log {remote}/{inst['branch']}`; delete it there if it is stale")
            updates.append(wire.Update(tip, ref, theirs or ""))
        shared, kept = share_updates(project, record, remote, there)
        pushed = wire.push(repo, remote, updates + shared)
        if pushed.ok:
            return {"refs": [u.dst for u in updates + shared], "kept_remote": kept, "attempts": attempt,
                    "base_on_remote": record["base"]["ref"] in there}
        output = pushed.output
        if not wire.moved(repo, remote, updates + shared):
            break  # refused for another reason than a lease: trying again will not help
    raise ParallelError(E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: "
                        f"{output}", hint=f"see the message; `git parallel merge {record['task']} --pr "
                        f"--remote {remote}` tries again")


def merge_pr(project: Project, task: str, remote: str = "origin") -> dict[str, Any]:
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
    winners = _proven_winners(project, record, task, "propose")
    pushed = _push_branches(project, record, remote, winners)
    tool, found = pr_tool(repo, remote)
    base = branch_name(record["base"]["ref"])
    folder = repo.parallel_dir / "prs"
    proposals = []
    for pick, inst in winners:
        body_file = folder / f"{record['run_id']}-{pick['track']}.md"
        atomic_write(body_file, pr_body(record, pick, inst, evidence.load(inst), remote).encode())
        argv, shown = pr_command(tool, base, inst["branch"], pr_title(record, pick, inst), body_file)
        entry: dict[str, Any] = {"track": pick["track"], "winner": inst["id"], "branch": inst["branch"],
                                 "commit": pick["winner"]["commit"], "body_file": str(body_file), "command": shown,
                                 "tool": tool, "ran": bool(found), "url": None, "error": None}
        if found:
            entry.update(run_tool([found, *argv[1:]], repo))
        proposals.append(entry)
    info = model.new_pr(remote, base, utcnow(), proposals)
    project.store.update(task, lambda rec: model.mark_proposed(rec, info))
    result = {"task": task, "run_id": record["run_id"], "remote": remote, "base": base, "push": pushed,
              "tool": tool, "proposals": proposals}
    failed = [p for p in proposals if p["error"]]
    if failed:
        raise ParallelError(E.REMOTE_FAILED, f"pushed {', '.join(p['branch'] for p in failed)} to {remote}, but "
                            f"`{tool}` failed: {failed[0]['error']}", hint=f"run it yourself: {failed[0]['command']}",
                            **result)
    return result


