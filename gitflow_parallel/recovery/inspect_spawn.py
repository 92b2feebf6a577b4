"""Findings about a run's spawn and its worktrees: a spawn that never
finished (completed or rolled back) and worktrees lost later (made again).
"""

from __future__ import annotations


from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.errors import SPAWN_INCOMPLETE, WORKTREE_MISSING, ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.model import TERMINAL, InstanceRecord, RunRecord
from gitflow_parallel.recovery.context import RunContext, partial_refusal
from gitflow_parallel.recovery.inspect_instances import finished_instance
from gitflow_parallel.recovery.gitwork import attach_worktree, clear_partial, dismantle_instance
from gitflow_parallel.recovery.scan import ERROR, Repair


# -- spawn, worktrees, cleanup ---------------------------------------------------
def spawn_and_worktrees(ctx: RunContext) -> None:
    """A live run's worktrees that are not usable (a spawn cut short, or lost later), and a finished run's half-removed ones."""
    rec = ctx.record
    insts = [i for i in rec["instances"] if not i.get("removed")]
    if not ctx.live:
        for inst in insts:
            finished_instance(ctx, inst)
        return
    broken = [i for i in insts if not ctx.states[i["id"]].usable]
    # Spawn marks itself done (parallel/spawned/<run_id>) only after every
    # worktree exists, so a revision-1 record without the mark is a spawn
    # that never finished; with it, something was lost later and is
    # simply made again.
    fresh_spawn = (rec["run_revision"] == 1 and insts
                   and all(i["status"] == "pending" and i["attempt"] == 0 for i in rec["instances"])
                   and not spawn_noted(ctx, insts))
    if fresh_spawn and broken:
        if len(broken) == len(insts):
            ctx.rolling_back = True
            rollback_spawn(ctx, insts)
        else:
            for inst in broken:
                recreate(ctx, inst, SPAWN_INCOMPLETE,
                         f"spawn of run {ctx.run_id} stopped before instance {inst['id']} was made "
                         f"({ctx.describe_missing(inst)})")
        return
    for inst in broken:
        st = ctx.states[inst["id"]]
        missing = ctx.describe_missing(inst)
        if inst["status"] == "running" and ctx.project.instance_alive(ctx.record, inst):
            ctx.add(WORKTREE_MISSING, ERROR,
                    f"instance {inst['id']} is running (pid {inst['pid']}) but its {missing}",
                    fix=f"git parallel abort {ctx.task} {inst['id']}, then git parallel retry {ctx.task} {inst['id']}",
                    instance=inst["id"])
        elif inst["status"] in ("failed", "aborted") or inst["status"] == "running":
            # retry makes the branch and worktree again; recover does not retry.
            ctx.add(E.BRANCH_NOT_FOUND if st.tip is None else WORKTREE_MISSING, ERROR,
                    f"instance {inst['id']} ({inst['status']}) has lost its {missing}",
                    fix=f"git parallel retry {ctx.task} {inst['id']}", instance=inst["id"])
        elif inst["status"] == "pending" or st.tip is not None:
            recreate(ctx, inst, WORKTREE_MISSING if st.tip is not None else E.BRANCH_NOT_FOUND,
                     f"instance {inst['id']} ({inst['status']}) has lost its {missing}")
        else:
            head = inst["head"] or rec["base"]["commit"]
            ctx.add(E.BRANCH_NOT_FOUND, ERROR,
                    f"the branch {inst['branch']} of succeeded instance {inst['id']} is missing",
                    fix=f"git branch {inst['branch']} {head} (its recorded head), then git parallel recover {ctx.task}",
                    instance=inst["id"],
                    refusal=f"instance {inst['id']} is succeeded but its branch {inst['branch']} is gone; "
                            "recover does not guess which commit it should hold")


def spawn_noted(ctx: RunContext, insts: list[InstanceRecord]) -> bool:
    """Did the spawn of this run finish (every worktree made)?"""
    # The marker spawn writes once every worktree exists; runs spawned
    # before it existed have their instance notes on the base instead.
    if ctx.project.store.spawned(ctx.run_id):
        return True
    base = ctx.record["base"]["commit"]
    return all(ctx.noted(base, {"kind": "instance", "instance": i["id"], "attempt": 0}) for i in insts)


def recreate(ctx: RunContext, inst: InstanceRecord, code: str, message: str) -> None:
    """The finding whose repair makes the worktree (and the branch, if gone) of ``inst`` again."""
    st = ctx.states[inst["id"]]
    base = ctx.record["base"]["commit"]
    tip_commit = ctx.scan.commit(st.tip or base)
    refusal = partial_refusal(st, tip_commit.tree if tip_commit else None)
    task, project = ctx.task, ctx.project
    inst_id = inst["id"]

    def git() -> None:
        current = project.tip(inst)
        clear_partial(ctx.scan.worktree(task, inst))
        if current is None:
            if not project.repo.cas_ref(f"refs/heads/{inst['branch']}", base, None,
                                        "git-parallel: recover a half-made spawn"):
                raise ParallelError(E.RECOVERY_REFUSED, f"the branch {inst['branch']} appeared meanwhile",
                                    hint=f"run `git parallel recover {task}` again")
        attach_worktree(project, task, inst)

    what = (f"make the worktree of instance {inst_id} at {st.path}"
            + ("" if st.tip else f" and its branch {inst['branch']} at the base {base[:12]}")
            + (f" on its branch at {st.tip[:12]} (its commits kept)" if st.tip else ""))
    ctx.add(code, ERROR, message,
            fix=(f"move {st.path} away, then git parallel recover {task}" if refusal
                 else f"git parallel recover {task}"),
            instance=inst_id, refusal=refusal,
            repair=None if refusal else Repair("recreate_worktree", what, message, git=git,
                                                 details={"instance": inst_id, "path": str(st.path),
                                                          "branch": inst["branch"], "tip": st.tip}))


def rollback_spawn(ctx: RunContext, insts: list[InstanceRecord]) -> None:
    """The finding whose repair takes apart a spawn that made no usable worktree and records the run aborted."""
    base = ctx.record["base"]["commit"]
    base_tree = ctx.scan.commit(base)
    refusals, archive_plan = [], {}
    for inst in insts:
        st = ctx.states[inst["id"]]
        why = partial_refusal(st, base_tree.tree if base_tree else None)
        if why:
            refusals.append(why)
        if st.tip is not None and st.tip != base:
            archive_plan[inst["id"]] = st.tip
    project, task, run_id = ctx.project, ctx.task, ctx.run_id
    rid = ctx.rid

    def git() -> None:
        for inst in insts:
            # A tip still at the base holds nothing to keep.
            dismantle_instance(project, ctx.scan, run_id, task, inst, skip_archive=base)

    def record(rec: RunRecord) -> None:
        now = utcnow()
        for i in rec["instances"]:
            if i.get("removed"):
                continue
            if i["status"] not in TERMINAL:
                model.finish(rec, i, "aborted", finished_at=now,
                             error=f"spawn was interrupted before this worktree was made; rolled back by "
                                   f"git parallel recover ({rid})")
            model.mark_removed(i)
            model.bump(i)
        model.mark_aborted(rec)

    what = (f"roll back the half-made spawn of run {run_id}: remove what exists of instance(s) "
            f"{', '.join(i['id'] for i in insts)}"
            + (f", after archiving {len(archive_plan)} tip(s)" if archive_plan else "")
            + "; the record stays, as aborted, so `git parallel spawn` can start again")
    message = (f"spawn of run {ctx.run_id} stopped before any worktree was usable ("
               + "; ".join(f"{i['id']}: {ctx.describe_missing(i)}" for i in insts) + ")")
    ctx.add(SPAWN_INCOMPLETE, ERROR, message,
            fix=(f"move the folders named away, then git parallel recover {task}" if refusals
                 else f"git parallel recover {task}, then git parallel spawn {task}"),
            refusal="; ".join(refusals) or None,
            repair=None if refusals else Repair("rollback_spawn", what, message, git=git, record=record,
                                                  details={"instances": [i["id"] for i in insts],
                                                           "archived": archive_plan}))
