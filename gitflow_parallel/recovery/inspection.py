"""The inspection of one run (``inspect_run``: the checks of each concern,
plain functions over one ``RunContext``, in the order their findings are
listed, with the checks of the run as a whole here) and the
repository-wide checks: stale git locks, branches and worktree folders no
record accounts for, merge intents of retired runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pygit2

from gitflow_parallel.model import RunRecord
from gitflow_parallel import errors as E
from gitflow_parallel.files import remove_tree
from gitflow_parallel.git import notes, worktrees
from gitflow_parallel.errors import (BASE_HAS_LOSER, LOCK_HELD, MERGE_INTENT_LEFT, NOTES_MISSING,
                                     OBJECT_MISSING, ORPHAN, REVISION_INVALID, STALE_LOCK, ParallelError)
from gitflow_parallel.state.intent import listed_intents
from gitflow_parallel.state.project import Project
from gitflow_parallel.recovery.context import RunContext
from gitflow_parallel.recovery.inspect_evidence import evidence_packs
from gitflow_parallel.recovery.inspect_instances import moved_branches, processes, views_left
from gitflow_parallel.recovery.inspect_landing import picks_and_merge
from gitflow_parallel.recovery.inspect_spawn import spawn_and_worktrees
from gitflow_parallel.recovery.scan import (
    ERROR, PHASE_LOCKS, STALE_LOCK_SECONDS, WARNING, Finding, Repair, Scan, text_of, missing_notes)


def inspect_run(ctx: RunContext) -> list[Finding]:
    """Every finding of one run, in the order they are listed (the notes
    last: the repairs before it make note lines due)."""
    revisions_and_objects(ctx)
    spawn_and_worktrees(ctx)
    processes(ctx)
    views_left(ctx)
    moved_branches(ctx)
    evidence_packs(ctx)
    picks_and_merge(ctx)
    frozen_config(ctx)
    base_losers(ctx)
    missing_note_lines(ctx)
    return ctx.findings


# -- revisions and oids ---------------------------------------------------------
def revisions_and_objects(ctx: RunContext) -> None:
    """Revisions that cannot be, and commits the record names that are not here (the base's, the heads')."""
    rec = ctx.record
    for inst in rec["instances"]:
        if inst["instance_revision"] > rec["run_revision"]:
            ctx.add(REVISION_INVALID, ERROR,
                    f"instance {inst['id']} is at revision {inst['instance_revision']}, above the run's "
                    f"{rec['run_revision']}: every instance write also bumps the run, so the record was "
                    "edited or mixed from two copies",
                    fix="restore the record from a backup; git parallel does not guess revisions",
                    instance=inst["id"])
    if ctx.scan.commit(rec["base"]["commit"]) is None:
        ctx.add(OBJECT_MISSING, ERROR, f"the base commit {rec['base']['commit'][:12]} is not in the repository",
                fix="fetch or restore it (git fsck --lost-found), or abort the run")
    base_ref = rec["base"]["ref"]
    tip = ctx.project.repo.ref_target(base_ref)
    if ctx.live and tip is None:
        ctx.add(E.BASE_NOT_FOUND, ERROR, f"the base branch {base_ref} of this live run no longer exists",
                fix=f"recreate it (git branch {base_ref[len('refs/heads/'):]} {rec['base']['commit'][:12]}), "
                    "or abort the run")
    elif rec["status"] == "merged" and (merged := rec.get("merge")) and tip is not None \
            and not ctx.project.repo.is_ancestor(merged["landed"], tip):
        ctx.add(E.BASE_NOT_FOUND, WARNING,
                f"the run is recorded merged at {merged['landed'][:12]}, but {base_ref} "
                f"({tip[:12]}) no longer contains it (reset or rewritten since)",
                fix=f"git log {base_ref}; the landed commit is still reachable from its archive and notes")
    for inst in rec["instances"]:
        if inst["head"] is not None and ctx.scan.commit(inst["head"]) is None:
            ctx.add(OBJECT_MISSING, ERROR,
                    f"instance {inst['id']} records head {inst['head'][:12]}, which is not a commit here",
                    fix="restore it from a clone, or `git parallel abort` the instance", instance=inst["id"])


def frozen_config(ctx: RunContext) -> None:
    """The record's config must be what its base commit's file says."""
    from gitflow_parallel import config as C

    try:
        C.verify_frozen(ctx.repo, ctx.record)
    except ParallelError as exc:
        ctx.add(exc.code, ERROR, exc.message, fix=exc.hint)


# -- a base that took a loser -----------------------------------------------------
def _history(ctx: RunContext, tips: list[str], hide: str) -> set[str]:
    """The commits reachable from ``tips`` and not from ``hide``."""
    walker = None
    for tip in tips:
        if ctx.scan.commit(tip) is None:
            continue
        if walker is None:
            walker = ctx.repo.pygit.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.NONE)
            walker.hide(pygit2.Oid(hex=hide))
        else:
            walker.push(pygit2.Oid(hex=tip))
    return {str(c.id) for c in walker} if walker is not None else set()


def base_losers(ctx: RunContext) -> None:
    """A live run's base must not hold commits of an instance that did
    not win: only a merge of the proven winner may bring instance work in,
    and one that did (hooks skipped, or a hand-set GIT_PARALLEL_INTERNAL)
    landed unproven work."""
    rec = ctx.record
    base_tip = ctx.repo.ref_target(rec["base"]["ref"])
    spawn_base = rec["base"]["commit"]
    if not ctx.live or base_tip is None or base_tip == spawn_base or ctx.scan.commit(spawn_base) is None:
        return
    brought = _history(ctx, [base_tip], spawn_base)
    if not brought:
        return
    winners = [p.get("winner") for p in (rec.get("picks") or {}).values() if isinstance(p, dict)]
    winner_commits = [head for i in rec["instances"] if i["id"] in winners and (head := i.get("head"))]
    allowed = _history(ctx, winner_commits, spawn_base) if winner_commits else set()
    for inst in rec["instances"]:
        if inst["id"] in winners:
            continue
        tips = [t for t in (ctx.project.tip(inst), inst.get("head")) if t]
        tips += [oid for _, oid in ctx.repo.refs_under(f"{worktrees.ARCHIVE_PREFIX}/{ctx.run_id}/{inst['id']}/")]
        taken = sorted((_history(ctx, tips, spawn_base) & brought) - allowed)
        if taken:
            ctx.add(BASE_HAS_LOSER, ERROR,
                    f"{rec['base']['ref']} holds {len(taken)} commit(s) of instance {inst['id']}, which did not "
                    f"win its track (e.g. {taken[0][:12]}); they reached the base outside `git parallel merge`",
                    instance=inst["id"],
                    fix=f"inspect them (git log {spawn_base[:12]}..{rec['base']['ref']}); take them out "
                        "(git revert, or git reset --keep to the commit before) unless you meant to land them")


# -- notes -------------------------------------------------------------------
def damaged_notes_ref(ctx: RunContext) -> None:
    """A notes ref that is not a commit: moved aside (its object kept), so that the notes can be written again."""
    ref = ctx.record["config"]["notes_ref"]
    found = notes.damaged(ctx.repo.pygit, ref)
    if found is None:
        return
    oid, kind = found
    aside = notes.aside_name(ref, oid)

    def move() -> None:
        notes.move_aside(ctx.repo.pygit, ref, oid)

    ctx.add(E.NOTES_REF_DAMAGED, ERROR,
            f"{ref} points at a {kind} ({oid[:12]}), which is not a commit: no note can be read or added",
            repair=Repair("move_notes_ref", f"move {ref} aside to {aside}",
                          "a notes ref must be a commit; its object is kept, and the notes are written again "
                          "from the records", git=move,
                          details={"ref": ref, "target": oid, "type": kind, "moved_to": aside}))


def missing_note_lines(ctx: RunContext) -> None:
    """The note lines the records (and the repairs planned before this) call for that are not there."""
    damaged_notes_ref(ctx)
    missing = [] if ctx.rolling_back else missing_notes(ctx.scan, ctx.record)
    labels = [n.label for n in missing] + ctx.will_note
    ref = ctx.record["config"]["notes_ref"]
    if not labels:
        return
    ctx.add(NOTES_MISSING, ERROR,
            f"{len(labels)} note line(s) on {ref} are missing: "
            + "; ".join(labels[:6]) + (" …" if len(labels) > 6 else ""),
            repair=Repair("write_notes", f"write {len(labels)} missing note line(s) in one notes commit",
                          "notes mirror the records on the commits they speak of",
                          details={"lines": labels}))


# -- repository-wide checks ---------------------------------------------------------
def _lock_files(common: Path) -> Iterator[Path]:
    for name in ("index.lock", "HEAD.lock", "packed-refs.lock"):
        if (common / name).exists():
            yield common / name
    refs = common / "refs"
    if refs.is_dir():
        yield from sorted(refs.rglob("*.lock"))
    admin = common / "worktrees"
    if admin.is_dir():
        for entry in sorted(admin.iterdir()):
            for name in ("index.lock", "HEAD.lock"):
                if (entry / name).exists():
                    yield entry / name


def lock_findings(scan: Scan, task: str | None) -> list[Finding]:
    out = []
    now = time.time()
    for path in _lock_files(scan.repo.common_dir):
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        age = now - info.st_mtime
        if age < STALE_LOCK_SECONDS:
            continue  # most likely a git command in flight
        users = scan.git_users()
        rel = path.relative_to(scan.repo.common_dir)
        fix_task = (f"git parallel recover {task}" if task
                    else f"rm {path} (git parallel recover TASK removes it too)")
        if users is None or users:
            who = ("no process table to look at" if users is None
                   else ", ".join(f"pid {p} ({cmd})" for p, cmd in users[:3]))
            out.append(Finding(LOCK_HELD, WARNING,
                               f"git lock file {rel} is {age:.0f}s old, but git may still be working here ({who})",
                               fix=f"wait for those to finish; if none is, remove {path}"))
            continue
        inode, mtime = info.st_ino, info.st_mtime

        def remove(path: Path = path, inode: int = inode, mtime: float = mtime) -> None:
            try:
                now_info = path.stat()
            except FileNotFoundError:
                return
            # Someone took the lock afresh since we looked: theirs is live.
            if now_info.st_ino == inode and now_info.st_mtime == mtime:
                path.unlink()

        out.append(Finding(STALE_LOCK, ERROR,
                           f"git lock file {rel} is {age:.0f}s old and no git process works in this repository: "
                           "a killed command left it, and git refuses to touch what it locks",
                           fix=fix_task,
                           repair=Repair("remove_lock", f"remove the stale lock {rel}",
                                         f"{age:.0f}s old, no live git process in the repository",
                                         phase=PHASE_LOCKS, git=remove, details={"path": str(path)})))
    return out


def all_records(project: Project) -> tuple[list[RunRecord], list[RunRecord], list[tuple[str, ParallelError]]]:
    """Live records, retired (runs/done/) records, and (task, error) for those that do not load."""
    live, problems = project.store.load_all()
    done = []
    if project.store.done_dir.is_dir():
        for path in sorted(project.store.done_dir.glob("*.yaml")):
            try:
                done.append(project.store.read(path))
            except (ParallelError, FileNotFoundError):
                continue
    return live, done, problems


def orphan_findings(scan: Scan, records: list[RunRecord], task: str | None) -> list[Finding]:
    """Branches parallel/<task>/* and admin folders parallel-<task>-* that no
    record (live, or retired with the instance kept) accounts for."""
    repo = scan.repo
    known_branches, known_admin = set(), set()
    for rec in records:
        for inst in rec["instances"]:
            if not inst.get("removed"):
                known_branches.add(f"refs/heads/{inst['branch']}")
                known_admin.add(worktrees.admin_name(rec["task"], inst["id"]))
    # A task whose record exists but does not load is not "no record": its
    # branches may hold unarchived work, and the broken record is reported
    # on its own (PARALLEL_RECORD_INVALID), so none of it is called an orphan.
    loaded = {rec["task"] for rec in records}
    unreadable = {t for t in scan.project.store.tasks() if t not in loaded}
    out = []
    prefix = f"refs/heads/parallel/{task}/" if task else "refs/heads/parallel/"
    for name, oid in sorted(repo.refs_under(prefix)):
        short = name[len("refs/heads/"):]
        if name in known_branches or short.split("/")[1] in unreadable:
            continue
        out.append(Finding(ORPHAN, ERROR,
                           f"branch {short} (at {oid[:12]}) belongs to no run record",
                           fix=f"inspect it (git log {short}); keep it under another name or delete it "
                               f"(git branch -D {short})",
                           task=short.split("/")[1] if short.count("/") >= 2 else None,
                           refusal=f"branch {short} has no run record; recover does not delete work it cannot place"))
    admin_root = repo.common_dir / "worktrees"
    if admin_root.is_dir():
        for admin in sorted(admin_root.iterdir()):
            name = admin.name
            if not name.startswith(worktrees.admin_name(task, "") if task else "parallel+") or name in known_admin:
                continue
            if any(name.startswith(worktrees.admin_name(t, "")) for t in unreadable):
                continue
            back = text_of(admin / "gitdir")
            target = Path(back) if back else None
            if target is not None and target.exists():
                out.append(Finding(ORPHAN, ERROR,
                                   f"worktree {target.parent} (admin {name}) belongs to no run record",
                                   fix=f"look at it, then git worktree remove {target.parent}",
                                   refusal=f"worktree {target.parent} has no run record; it may hold work"))
                continue

            def prune(admin: Path = admin) -> None:
                remove_tree(admin, ignore_errors=True)

            out.append(Finding(ORPHAN, ERROR,
                               f"worktree admin folder {name} belongs to no run record and its worktree is gone",
                               fix="git worktree prune",
                               repair=Repair("prune_admin", f"remove the dangling worktree admin folder {name}",
                                             "its worktree folder no longer exists (what `git worktree prune` does)",
                                             git=prune, details={"admin": str(admin)})))
    return out


def intent_findings(project: Project, live: list[RunRecord], done: list[RunRecord]) -> list[Finding]:
    live_ids = {r["run_id"] for r in live}
    done_by_id = {r["run_id"]: r for r in done}
    out = []
    for run_id, path in listed_intents(project):
        if run_id in live_ids:
            continue  # inspected with its run
        old = done_by_id.get(run_id)
        state = f"its run is retired as {old['status']}" if old else "no record names its run"
        out.append(Finding(MERGE_INTENT_LEFT, WARNING, f"merge intent {path} is left over: {state}",
                           fix=f"rm {path}", run_id=run_id))
    return out
