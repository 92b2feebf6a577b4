"""Lifecycle verbs: init, spawn, status, retry, abort and cleanup.

Spawn writes the run record first (so a crash leaves something ``recover``
can see), then makes every branch and worktree, all or nothing, under the
project lock and the repository-wide cap on live instances.  Nothing is ever
removed before its tip is kept under ``refs/parallel/archive/``.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pygit2

from gitflow_parallel import config as C
from gitflow_parallel import errors as E
from gitflow_parallel import evidence, faults, model, provenance
from gitflow_parallel.git import worktrees
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, utcnow
from gitflow_parallel.git.repo import commit_all, worktree_changes
from gitflow_parallel.names import check_name
from gitflow_parallel.proc.supervise import KILL_GRACE, killpg, stop_groups
from gitflow_parallel.state.project import Project, instance_process_alive, notes_instance_on
from gitflow_parallel.provenance import instance_note
from gitflow_parallel.model import FINISHED_RUN, RETRYABLE, TERMINAL, find_instance
from gitflow_parallel.state import view
from gitflow_parallel.git.retire import check_removable, remove_all
from gitflow_parallel.git import transport

MAX_INSTANCES = 64


# -- init ----------------------------------------------------------------------
def init(project: Project, force: bool = False, display: bool = False, remote: str | None = None) -> dict[str, Any]:
    """Write a commented .gitparallel.yaml and set notes.rewriteRef (and, with
    ``display``, notes.displayRef: plain ``git log`` then prints every note);
    with ``remote``, add fetch refspecs for the notes and refs/parallel/."""
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None
    if remote is not None:
        from gitflow_parallel.git import share

        share.check_remote(project.repo, remote)  # before anything is written
    path = Path(top) / C.CONFIG_FILE
    wrote = False
    if not path.exists() or force:
        atomic_write(path, C.TEMPLATE)
        wrote = True
    notes_ref = C.DEFAULTS["notes_ref"]
    if path.exists():
        try:
            notes_ref = C.parse(path.read_bytes())["notes_ref"]
        except ParallelError:
            pass
    cfg = project.repo.main.config
    set_keys = {}
    for key in ("notes.rewriteRef", "notes.displayRef") if display else ("notes.rewriteRef",):
        values = list(cfg.get_multivar(key)) if key in cfg else []
        if notes_ref not in values:
            cfg.set_multivar(key, "^$", notes_ref)  # add without replacing others
        set_keys[key] = notes_ref
    refspecs = None
    if remote is not None:
        refspecs = share.configure_remote(project, remote, [notes_ref])
    return {"config": str(path), "wrote": wrote, "git_config": set_keys, "remote": remote, "refspecs": refspecs}


# -- spawn ---------------------------------------------------------------------
def instance_ids(tracks: list[str], n: int) -> list[tuple[str, str]]:
    if tracks == ["main"]:
        return [("main", str(k)) for k in range(1, n + 1)]
    return [(t, f"{t}-{k}") for t in tracks for k in range(1, n + 1)]


def live_instances(project: Project) -> int:
    records, _ = project.store.load_all()
    return sum(1 for r in records if r["status"] not in FINISHED_RUN
               for i in r["instances"] if i["status"] not in TERMINAL)


def spawn(project: Project, task: str, n: int | None = None, base: str | None = None,
          tracks: list[str] | None = None) -> dict[str, Any]:
    check_name(task, "task")
    tracks = list(tracks or ["main"])
    for t in tracks:
        check_name(t, "track")
    if len(set(tracks)) != len(tracks):
        raise ParallelError(E.INVALID_NAME, f"track names repeat: {', '.join(tracks)}",
                            hint="give each --track once")
    repo = project.repo
    base_ref, base_commit = repo.resolve_base(base)
    cfg, source = C.load_from_commit(repo, base_commit)
    warnings = _config_drift(repo, base_commit)
    count = cfg["instances"] if n is None else n
    if not 1 <= count <= MAX_INSTANCES:
        raise ParallelError(E.INVALID_NAME, f"-n {count} is out of range 1..{MAX_INSTANCES}",
                            hint="pass -n between 1 and 64")
    root = worktrees.resolve_root(repo, cfg["worktree_root"])
    record = model.new_run(
        task, {"ref": base_ref, "commit": base_commit}, tracks, cfg, C.config_sha256(cfg), source, root,
        [model.new_instance(task, t, i, root, base_commit) for t, i in instance_ids(tracks, count)], utcnow())
    store = project.store
    with store.lock():
        store.previous_run(task)  # "this task has a run" comes before "the repository is full"
        live = live_instances(project)
        wanted = len(record["instances"])
        if live + wanted > cfg["max_total"]:
            raise ParallelError(
                E.RESOURCE_CAP_EXHAUSTED,
                f"spawning {wanted} instances would make {live + wanted} live ones, over max_total {cfg['max_total']}",
                hint="finish or abort other runs (`git parallel status`), spawn fewer (-n), or raise max_total",
            )
        store.create(record)
        faults.point("spawn.after_record")
        try:
            worktrees.create(repo, task, base_commit, record["instances"], fault=faults.point)
        except BaseException:
            store.remove(task)
            raise
        store.mark_spawned(record["run_id"])
        faults.point("spawn.after_worktrees")
    # No notes: every tip is still the base commit (see project.notes_instance_on).
    return {**record, "warnings": warnings} if warnings else record


def _config_drift(repo: Any, base_commit: str) -> list[str]:
    """A warning when the .gitparallel.yaml of the worktree spawn runs in is
    not the base commit's: the gates used are the committed ones."""
    top = repo.workdir or repo.main_workdir
    if top is None:
        return []
    here = Path(top) / C.CONFIG_FILE
    try:
        mine: bytes | None = here.read_bytes()
    except OSError:
        mine = None
    tree = repo.git.get(base_commit).peel(pygit2.Commit).tree
    try:
        committed: bytes | None = repo.git.get(tree[C.CONFIG_FILE].id).data
    except KeyError:
        committed = None
    if mine == committed:
        return []
    what = "is not in the base commit" if committed is None else (
        "was deleted here" if mine is None else "differs from the base commit's")
    return [f"{here} {what}; the run uses the configuration committed at {base_commit[:12]} "
            f"(commit the file first to use it)"]


# -- status --------------------------------------------------------------------
def describe(project: Project, record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per instance: what the record says plus what git and the OS say now."""
    rows = []
    winners = {p.get("winner") for p in (record.get("picks") or {}).values()}
    for inst in record["instances"]:
        tip = project.tip(inst)
        if inst.get("removed"):
            # Its branch is gone; its last tip lives on in the archive ref.
            tip = project.repo.ref_target(worktrees.archive_ref(record["run_id"], inst["id"], inst["attempt"]))
        fresh = evidence.freshness(record, inst, tip)
        flags = []
        if inst["status"] == "running" and not instance_process_alive(inst):
            flags.append("process gone")
        if inst["status"] == "pending" and tip is not None and tip != inst["head"]:
            flags.append("hand work: `check` takes it")
        if not inst.get("removed"):
            if tip is None:
                flags.append("branch missing")
            if not Path(inst["worktree"]).exists():
                flags.append("worktree missing")
        if inst["id"] in winners:
            flags.append("picked winner")
        rows.append({**inst, "tip": tip, "evidence_state": fresh.state, "evidence_reason": fresh.reason,
                     "flags": flags})
    return rows


def status(project: Project, task: str | None = None) -> dict[str, Any]:
    if task is None:
        from gitflow_parallel.git import share

        records, problems = project.store.load_all()
        local = {r["task"] for r in records}
        # The newest fetched run of each task that has no record here.
        fetched = {}
        for rec, _ in share.shared_runs(project):
            if rec["task"] not in local:
                fetched.setdefault(rec["task"], rec)
        return {"runs": [{"task": r["task"], "run_id": r["run_id"], "status": r["status"],
                          "base": r["base"]["ref"], "instances": len(r["instances"]),
                          "updated_at": r["updated_at"], "fetched": r["task"] in fetched}
                         for r in records + sorted(fetched.values(), key=lambda r: r["task"])],
                "problems": [{"code": p.code, "message": p.message} for p in problems]}
    check_name(task, "task")
    try:
        record = project.store.load(task)
    except ParallelError as exc:
        if exc.code != E.RUN_NOT_FOUND:
            raise

        return view.shared_status(project, task)  # a run fetched from a teammate
    return {"run": record, "rows": describe(project, record),
            "base_tip": project.repo.ref_target(record["base"]["ref"])}


# -- retry ---------------------------------------------------------------------
START_BASE, START_BASE_TIP, START_KEEP = "base", "base-tip", "previous-attempt"


def attempt_start(record: dict[str, Any], inst: dict[str, Any]) -> str:
    """The commit the instance's current attempt started from: the spawn's
    base unless a retry said otherwise (``--onto-current``, ``--keep``)."""
    return (inst.get("start") or {}).get("commit") or record["base"]["commit"]


def _refuse_retry(project: Project, record: dict[str, Any], inst: dict[str, Any], force: bool) -> None:
    """May this attempt be replaced by a new one?  Failed and aborted ones
    may; a succeeded one whose verdict is fail may (it failed its gates); any
    other succeeded one only with ``force``; a picked winner never (unpick it)."""
    task, inst_id = record["task"], inst["id"]
    winners = {p.get("winner"): t for t, p in (record.get("picks") or {}).items()}
    if inst_id in winners:
        raise ParallelError(
            E.BRANCH_TERMINAL, f"instance {inst_id} won the pick of track {winners[inst_id]}; its work is final",
            hint=f"`git parallel unpick {task} --track {winners[inst_id]}` first, if it should not land")
    if inst["status"] in RETRYABLE or (inst["status"] == "succeeded" and (inst["verdict"] == "fail" or force)):
        return
    if inst["status"] == "succeeded":
        verdict = "passed its gates" if inst["verdict"] == "pass" else "not been checked"
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"instance {inst_id} succeeded and has {verdict}; only failed attempts (a failed run or a fail "
            "verdict) or aborted ones are retried without --force",
            hint=f"`git parallel retry {task} {inst_id} --force` replaces it anyway (its tip is archived)")
    raise ParallelError(
        E.BRANCH_TERMINAL, f"instance {inst_id} is {inst['status']}; only finished instances can be retried",
        hint=f"wait for it to finish, or `git parallel abort {task} {inst_id}` first")


def retry(project: Project, task: str, inst_id: str, expected_revision: int | None = None,
          force: bool = False, onto_current: bool = False, keep: bool = False) -> dict[str, Any]:
    """Start attempt + 1 of an instance: from the spawn's base (default), the
    base branch's current tip (``onto_current``) or the attempt's own tip
    (``keep``); the old tip is archived first, and feedback on it is written
    for the new attempt's agent."""
    from gitflow_parallel.state import feedback
    from gitflow_parallel.state.picks import picks_of_track

    check_name(task, "task")
    if onto_current and keep:
        raise ParallelError(E.INVALID_NAME, "--onto-current and --keep exclude each other",
                            hint="--keep goes on from the attempt's tip; --onto-current starts afresh on the base's tip")
    check_name(inst_id, "instance")
    repo, store = project.repo, project.store
    with store.lock():
        record = store.load(task)
        inst = find_instance(record, inst_id)
        _refuse_finished(record, "retry")
        _refuse_retry(project, record, inst, force)
        rework_max = record["config"]["rework_max"]
        if inst["attempt"] >= rework_max:
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"instance {inst_id} has used its {rework_max} retries (rework_max)",
                hint="raise rework_max in .gitparallel.yaml for new runs, or spawn a new run",
            )
        if expected_revision is not None and record["run_revision"] != expected_revision:
            raise ParallelError(
                E.RUN_REVISION_CONFLICT,
                f"run {record['run_id']} is at revision {record['run_revision']}, not {expected_revision} as read",
                hint=f"someone else changed it meanwhile; read it again (`git parallel status {task}`) and retry",
            )
        tip = project.tip(inst)
        if onto_current:
            start, how = repo.ref_target(record["base"]["ref"]), START_BASE_TIP
            if start is None:
                raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {record['base']['ref']} no longer exists",
                                    hint="recreate it, or retry without --onto-current")
        elif keep:
            start, how = tip or inst["head"] or attempt_start(record, inst), START_KEEP
        else:
            start, how = record["base"]["commit"], START_BASE
        path = Path(inst["worktree"])
        # Our worktree whose branch was deleted under it is reset like any other.
        usable = (path / ".git").exists() and (tip is not None or worktrees.is_ours(repo, task, inst))
        if usable and not keep:
            # The reset below would destroy uncommitted work: refuse it, or
            # with --force keep it on the archive ref first.  (--keep resets
            # nothing: uncommitted work stays for the next attempt.)
            check_removable(project, record, [inst], force, what="reset it to the base")
            if force and worktree_changes(path):
                tip = commit_all(path, provenance.kept_at_retry_message(task, inst_id, inst["attempt"]),
                                 ref=None, parent=tip or start,
                                 signature=repo.signature()) or tip
        notes_for = feedback.write(repo.parallel_dir, record, inst, tip, picks_of_track(project, record, inst["track"]))
        archived = None
        if tip is not None:
            archived = worktrees.archive(repo, record["run_id"], inst_id, inst["attempt"], tip)
        # The reset (or the new worktree) starts a fresh HEAD: keep what the
        # old one reached that the branch does not hold (a detached HEAD).
        kept = worktrees.keep_strays(repo, record["run_id"], task, inst)
        if usable:
            if project.tip(inst) is None:
                repo.git.branches.local.create(inst["branch"], repo.git.get(start))
            if not keep:
                worktrees.reset(repo, inst, start)
        else:
            # Gone (aborted and cleaned, or lost): make branch and worktree again.
            fresh = dict(inst)
            if os.path.lexists(path):
                raise ParallelError(
                    E.WORKTREE_CREATE_FAILED, f"{path} exists but is not the instance's worktree",
                    hint="move it away and retry")
            # A worktree whose folder was deleted by hand leaves git's admin
            # folder behind; it points at nothing, so it is safe to drop.
            admin = repo.common_dir / "worktrees" / worktrees.admin_name(task, inst_id)
            if admin.is_dir():
                shutil.rmtree(admin)
            if tip is not None:
                repo.git.branches.local.delete(inst["branch"])  # its tip is archived above
            worktrees.create(repo, task, start, [fresh])

        def apply(rec: dict[str, Any], i: dict[str, Any]) -> None:
            model.reset_for_retry(i, start, how, tip, archived, kept, notes_for)

        record, _ = store.update_instance(task, inst_id, apply, expected_revision=expected_revision)
    inst = find_instance(record, inst_id)
    if not notes_instance_on(record, start, inst):
        return record  # a fresh attempt on a base commit: nothing to note yet
    warning = project.mirror_notes(record, [(start, instance_note(record, inst, start))], f"retry {inst_id}")
    return {**record, "notes_error": warning} if warning else record


def _refuse_finished(record: dict[str, Any], verb: str) -> None:
    if record["status"] in FINISHED_RUN:
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"run {record['run_id']} of {record['task']!r} is {record['status']}; nothing to {verb}",
            hint=f"spawn a new run with `git parallel spawn {record['task']}`",
        )


# -- abort and cleanup -------------------------------------------------------------
def _stop(record: dict[str, Any], inst: dict[str, Any]) -> bool:
    pid = inst.get("pid")
    # Only a process that is still the one recorded (not a recycled pid).
    if inst["status"] == "running" and instance_process_alive(inst):
        killpg(pid, signal.SIGTERM)  # the grace and SIGKILL: _wait_stopped
        return True
    return False


def _wait_stopped(project: Project, record: dict[str, Any], insts: list[dict[str, Any]]) -> None:
    """Wait for the stopped agents' groups to end (SIGKILL after the grace),
    kill what they daemonized, then wait for their runner to let go of each
    instance (it commits the leftovers first)."""
    from gitflow_parallel.proc import reaper, slots

    stop_groups([i["pid"] for i in insts if i.get("pid")], term=False)
    reaper.sweep({reaper.agent_scope(record["run_id"], i["id"], i["attempt"]) for i in insts})
    for inst in insts:
        # Bounded: a runner that is stuck must not hang abort forever.
        slots.wait_unclaimed(project.repo.parallel_dir, record["task"], inst["id"], KILL_GRACE + 10.0)


def abort(project: Project, task: str, inst_id: str | None = None, force: bool = False) -> dict[str, Any]:
    """Abort one instance (kept for retry) or the whole run (then cleaned up)."""
    check_name(task, "task")
    if inst_id is not None:
        # An empty id must not pass for "no id" (the whole run).
        check_name(inst_id, "instance")
    store = project.store
    with store.lock():
        record = store.load(task)
        _refuse_finished(record, "abort")
        targets = [find_instance(record, inst_id)] if inst_id else list(record["instances"])
        if inst_id and targets[0]["status"] in TERMINAL:
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"instance {inst_id} is already {targets[0]['status']}; there is nothing to abort",
                hint=(f"`git parallel retry {task} {inst_id}` starts a new attempt" if targets[0]["status"] in RETRYABLE
                      else f"`git parallel abort {task}` aborts the whole run"),
            )
        if inst_id is None:
            check_removable(project, record, record["instances"], force)
        stopping = [i for i in targets if _stop(record, i)]
        stopped = [i["id"] for i in stopping]

        def apply(rec: dict[str, Any]) -> None:
            now = utcnow()
            for i in rec["instances"]:
                if any(t["id"] == i["id"] for t in targets) and i["status"] not in TERMINAL:
                    tip = project.tip(i)
                    model.finish(rec, i, "aborted", error="aborted by the user", finished_at=now,
                                 head=tip or i["head"])
                    model.bump(i)

        record, _ = store.update(task, apply)
    # Wait, without the lock (their runner needs it to finish), until the
    # stopped agents are gone and their runner has committed what they left:
    # a TERM handler may still write, and what is checked next is what stays.
    _wait_stopped(project, record, stopping)
    removed: list[dict[str, Any]] = []
    if inst_id is None:
        with store.lock():
            record = store.load(task)
            _refuse_finished(record, "abort")
            try:
                if any(i["status"] not in TERMINAL for i in record["instances"]):
                    raise ParallelError(E.RUN_REVISION_CONFLICT, "an instance was retried meanwhile",
                                        hint=f"see `git parallel status {task}`")
                check_removable(project, record, record["instances"], force)
            except ParallelError as late:
                # The processes are stopped and recorded aborted (that cannot
                # be undone); the run and every worktree stay as they were.
                done = f"stopped instance(s) {', '.join(stopped)} and " if stopped else ""
                hint = late.hint or ""
                raise ParallelError(
                    late.code,
                    f"{done}recorded every instance aborted, but did not abort the run nor remove anything: "
                    f"{late.message}" + (" (written while it stopped)" if stopped else ""),
                    hint=hint.replace("and remove the worktree", f"and then `git parallel abort {task} --force`"),
                ) from None

            record, _ = store.update(task, model.mark_aborted)
            removed = remove_all(project, record, record["instances"], force)
    out = {"run": record, "stopped": stopped, "removed": removed}
    if inst_id is None:

        out["remote_warning"] = transport.withdraw(project, record)
    return out


