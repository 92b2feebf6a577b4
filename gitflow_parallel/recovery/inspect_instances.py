"""Findings about single instances: an interrupted cleanup, an agent whose
process is gone, a branch that moved after its attempt ended.
"""

from __future__ import annotations

from pathlib import Path

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model, provenance
from gitflow_parallel.git import shadow, worktrees
from gitflow_parallel.git.worktrees import admin_name
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.errors import BRANCH_MOVED, CLEANUP_INCOMPLETE, PROCESS_GONE, ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.git.repo import commit_all, worktree_changes
from gitflow_parallel.model import TERMINAL, InstanceRecord, RunRecord, find_instance
from gitflow_parallel.proc import leftovers
from gitflow_parallel.state.project import notes_instance_on
from gitflow_parallel.recovery.context import RunContext, partial_refusal
from gitflow_parallel.recovery.gitwork import dismantle_instance
from gitflow_parallel.recovery.scan import ERROR, Repair, WorktreeState


def finished_instance(ctx: RunContext, inst: InstanceRecord) -> None:
    """A merged or aborted run: an instance is either kept whole (keep_losers,
    or cleanup not run yet) or its cleanup was interrupted."""
    st = ctx.states[inst["id"]]
    if st.usable:
        return
    project, task, run_id, record = ctx.project, ctx.task, ctx.run_id, ctx.record
    archive = project.repo.ref_target(worktrees.archive_ref(run_id, inst["id"], inst["attempt"]))
    keep = st.tip or (inst["head"] if ctx.scan.commit(inst["head"]) is not None else None)
    refusal = None
    if st.path_exists and st.linked and st.tip is not None:
        if worktree_changes(st.path):
            refusal = (f"the worktree of instance {inst['id']} ({st.path}) has uncommitted changes; "
                       "recover does not decide to drop or commit them")
    elif st.path_exists:
        # Without its branch git cannot say what changed: compare the
        # files with the commit that is kept.
        tree = ctx.scan.commit(keep)
        refusal = partial_refusal(st, tree.tree if tree else None)

    def git() -> None:
        tip = project.tip(inst)
        if tip is None and keep is not None and not (archive and ctx.scan.contains(archive, keep)):
            worktrees.archive(project.repo, run_id, inst["id"], inst["attempt"], keep)
        now = ctx.scan.worktree(task, inst)
        if now.linked and now.tip is not None:
            worktrees.remove(project.repo, record, inst)
        else:
            dismantle_instance(project, ctx.scan, run_id, task, inst)

    def rec_change(rec: RunRecord) -> None:
        i = find_instance(rec, inst["id"])
        model.mark_removed(i)
        model.bump(i)

    message = (f"the cleanup of instance {inst['id']} of {record['status']} run {run_id} was interrupted: "
               f"its {ctx.describe_missing(inst)} is gone but the record does not say removed")
    ctx.add(CLEANUP_INCOMPLETE, ERROR, message,
            fix=(f"git parallel cleanup {task} --force (keeps the changes on the archive ref)" if refusal
                 else f"git parallel recover {task}"),
            instance=inst["id"], refusal=refusal,
            repair=None if refusal else Repair(
                "finish_cleanup", f"finish removing instance {inst['id']} (tip kept under "
                f"{worktrees.archive_ref(run_id, inst['id'], inst['attempt'])})", message,
                git=git, record=rec_change, details={"instance": inst["id"], "kept": keep}))


# -- processes ---------------------------------------------------------------
def processes(ctx: RunContext) -> None:
    """A live run's instances recorded running whose process is gone."""
    if not ctx.live:
        return
    for inst in ctx.record["instances"]:
        if inst["status"] != "running" or ctx.project.instance_alive(ctx.record, inst):
            continue
        process_gone(ctx, inst)


def process_gone(ctx: RunContext, inst: InstanceRecord) -> None:
    """The finding whose repair records how the attempt of ``inst`` ended, its leftovers committed first."""
    st = ctx.states.get(inst["id"])
    tip = st.tip if st else None
    fresh = evidence.freshness(ctx.record, inst, tip)
    pid = inst.get("pid")
    project, task, rid = ctx.project, ctx.task, ctx.rid
    inst_id, attempt = inst["id"], inst["attempt"]
    commit_leftovers = bool(ctx.record["config"].get("commit_leftovers", True))
    admin = ctx.project.repo.common_dir / "worktrees" / admin_name(task, inst_id)
    stale_view = shadow.left_by_killed_runner(admin)
    dirty = (st is not None and st.usable and commit_leftovers and not fresh.passing
             and bool(worktree_changes(st.path)))
    outcome = "succeeded" if tip is not None and fresh.passing else "failed"
    if outcome == "succeeded":
        why = "its tip has fresh, complete, passing evidence: the end of the run was not recorded"
        error = None
    else:
        why = ("nothing recorded how it ended and its tip has no fresh passing evidence "
               f"({fresh.reason})")
        error = (f"process gone: pid {pid} is no longer running and its end was never recorded "
                 f"(the runner was killed?); marked failed by git parallel recover ({rid}); "
                 f"its commits are kept on {inst['branch']}")

    def git() -> None:
        if stale_view:
            # The sandbox's view of the killed attempt: its commits and
            # refs are taken in, as its runner would have done.
            shadow.restore(project.repo.common_dir, admin, Path(inst["worktree"]))
        if not dirty:
            return
        # As the runner would have: the dead agent's uncommitted work
        # becomes a commit on its branch rather than being left to a retry
        # that resets the worktree.
        message = provenance.leftovers_message(
            task, ctx.run_id, inst_id, attempt,
            f"Uncommitted when its process (pid {pid}) was found gone by git parallel recover.", recovery_id=rid)
        assert st is not None  # only planned for a usable worktree
        commit_all(st.path, message, scratch=scratch_patterns(ctx.record["config"]),
                   stage=leftovers.fenced_stager(project, task))

    def record(rec: RunRecord) -> None:
        i = find_instance(rec, inst_id)
        if i["status"] != "running" or i["attempt"] != attempt:
            raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {inst_id} changed during recovery",
                                hint=f"run `git parallel recover {task}` again")
        model.finish(rec, i, outcome, head=project.tip(i) or i["head"], finished_at=utcnow(),
                     error=error if outcome == "failed" else i.get("error"))
        model.bump(i)

    # Committing leftovers makes a new tip to note; the base commit gets no instance line.
    if tip is not None and (dirty or (notes_instance_on(ctx.record, tip, inst) and not ctx.noted(
            tip, {"kind": "instance", "instance": inst_id, "attempt": attempt, "commit": tip}))):
        ctx.will_note.append(f"instance {inst_id} on its tip, once it is {outcome}")
    what = (f"mark instance {inst_id} {outcome}"
            + (" after committing its uncommitted changes" if dirty else "")
            + (f"; its commits stay on {inst['branch']} at {tip[:12]}" if tip else ""))
    ctx.add(PROCESS_GONE, ERROR, f"instance {inst_id} is running but its process {pid} is gone", instance=inst_id,
            repair=Repair("instance_" + outcome, what, why, git=git if dirty or stale_view else None, record=record,
                          details={"instance": inst_id, "pid": pid, "tip": tip, "outcome": outcome,
                                   "evidence": fresh.state, "leftovers_committed": dirty}))


# -- sandbox views a killed runner left ---------------------------------------------
def views_left(ctx: RunContext) -> None:
    """An instance not recorded running whose worktree still looks through
    its sandbox view (``git/shadow``): its runner was killed after
    starting the agent and before writing that start (or after ``abort``
    recorded it and before taking it in).  What the agent made is taken
    in, as its runner would have done; the record stays as it is."""
    from gitflow_parallel.proc import slots

    common, parallel_dir = ctx.project.repo.common_dir, ctx.project.repo.parallel_dir
    for inst in ctx.record["instances"]:
        admin = common / "worktrees" / admin_name(ctx.task, inst["id"])
        if inst["status"] == "running" or inst.get("removed") or not shadow.left_by_killed_runner(admin):
            continue
        if not slots.wait_unclaimed(parallel_dir, ctx.task, inst["id"], 0):
            continue  # its runner still holds it: it takes it in itself
        worktree = Path(inst["worktree"])

        def git(admin: Path = admin, worktree: Path = worktree) -> None:
            shadow.restore(common, admin, worktree)

        message = (f"instance {inst['id']} ({inst['status']}) still looks through the sandbox view of an "
                   "attempt whose runner was killed before recording it")
        ctx.add(PROCESS_GONE, ERROR, message, instance=inst["id"], repair=Repair(
            "take_in_view", f"take in what the agent of instance {inst['id']} committed (its objects and its "
                            f"branch, by compare-and-swap) and point its worktree at the shared git dir again",
            message, git=git, details={"instance": inst["id"]}))


# -- branches that moved -----------------------------------------------------------
def moved_branches(ctx: RunContext) -> None:
    """Finished instances whose branch no longer points at the head their record holds."""
    for inst in ctx.record["instances"]:
        st = ctx.states.get(inst["id"])
        if st is None or st.tip is None or inst["status"] not in TERMINAL or st.tip == inst["head"]:
            continue
        if inst["status"] == "aborted" and inst.get("exit_code") is None:
            # `abort` stops a command without waiting to see its last
            # tip, so its head is not a claim about the branch.
            continue
        branch_moved(ctx, inst, st)


def branch_moved(ctx: RunContext, inst: InstanceRecord, st: WorktreeState) -> None:
    """The finding whose repair records the branch's tip as the head (the old head kept on the archive ref)."""
    head, tip = inst["head"], st.tip
    assert tip is not None
    project, run_id = ctx.project, ctx.run_id
    inst_id, attempt = inst["id"], inst["attempt"]
    archive_name = worktrees.archive_ref(run_id, inst_id, attempt)
    archive = project.repo.ref_target(archive_name)
    forward = head is None or ctx.scan.commit(head) is None or ctx.scan.contains(tip, head)
    refusal, archive_head = None, False
    if head is not None and not forward:  # (not forward: a recorded head, and one that is here)
        if archive is None:
            archive_head = True
        elif not ctx.scan.contains(archive, head):
            refusal = (f"the branch {inst['branch']} was rewritten away from the recorded head {head[:12]}, "
                       f"and {archive_name} already holds another commit ({archive[:12]})")

    def git() -> None:
        if head is not None and project.repo.ref_target(archive_name) is None:
            project.repo.cas_ref(archive_name, head, None, "git-parallel: recover keeps the recorded head")

    def record(rec: RunRecord) -> None:
        i = find_instance(rec, inst_id)
        model.record_head(i, project.tip(i) or i["head"])
        model.bump(i)

    if forward or head is None:
        message = (f"the branch {inst['branch']} of {inst['status']} instance {inst_id} moved on to {tip[:12]} "
                   f"after its run recorded {str(head)[:12]}; any evidence for it is now stale")
    else:
        message = (f"the branch {inst['branch']} of {inst['status']} instance {inst_id} no longer holds its "
                   f"recorded head {head[:12]} (now at {tip[:12]}: reset or rewritten)")
    what = (f"record {tip[:12]} as the head of instance {inst_id}"
            + (f", keeping {str(head)[:12]} at {archive_name}" if archive_head else ""))
    ctx.add(BRANCH_MOVED, ERROR, message, instance=inst_id, refusal=refusal,
            fix=(f"git branch -f {inst['branch']} {head} to undo the move" if refusal
                 else f"git parallel recover {ctx.task}"),
            repair=None if refusal else Repair("record_head", what, message,
                                               git=git if archive_head else None, record=record,
                                               details={"instance": inst_id, "from": head, "to": tip,
                                                        "archived": archive_name if archive_head else None}))
