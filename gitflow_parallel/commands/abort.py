"""``git parallel abort``: stop a run or one instance, wait for its processes, record it."""

from __future__ import annotations

import signal
from typing import Any

from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.proc import leftovers
from gitflow_parallel.proc.supervise import KILL_GRACE, killpg, stop_groups
from gitflow_parallel.state.project import Project, instance_process_alive
from gitflow_parallel.model import RETRYABLE, TERMINAL, find_instance
from gitflow_parallel.state.retire import check_removable, remove_all
from gitflow_parallel.state import transport
from gitflow_parallel.model import refuse_finished
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord
from gitflow_parallel.shapes.results import AbortResult


# -- abort and cleanup -------------------------------------------------------------
def _stop(record: RunRecord, inst: InstanceRecord) -> bool:
    pid = inst.get("pid")
    # Only a process that is still the one recorded (not a recycled pid).
    if inst["status"] == "running" and pid is not None and instance_process_alive(inst):
        killpg(pid, signal.SIGTERM)  # the grace and SIGKILL: _wait_stopped
        return True
    return False


def _wait_stopped(project: Project, record: RunRecord, insts: list[InstanceRecord]) -> None:
    """Wait for the stopped agents' groups to end (SIGKILL after the grace),
    kill what they daemonized, then wait for their runner to let go of each
    instance (it commits the leftovers first)."""
    from gitflow_parallel.proc import reaper, slots

    stop_groups([pid for i in insts if (pid := i.get("pid"))], term=False)
    reaper.sweep({reaper.agent_scope(record["run_id"], i["id"], i["attempt"]) for i in insts})
    for inst in insts:
        # Bounded: a runner that is stuck must not hang abort forever.
        slots.wait_unclaimed(project.repo.parallel_dir, record["task"], inst["id"], KILL_GRACE + 10.0)


def abort(project: Project, task: str, inst_id: str | None = None, force: bool = False) -> AbortResult:
    """Abort one instance (kept for retry) or the whole run (then cleaned up)."""
    check_name(task, "task")
    if inst_id is not None:
        # An empty id must not pass for "no id" (the whole run).
        check_name(inst_id, "instance")
    store = project.store
    with store.lock():
        record = store.load(task)
        refuse_finished(record, "abort")
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
        # An attempt that ended while siblings of its run still ran is
        # recorded running until its runner takes its work in: wait for that too.
        held = [i for i in targets if i["status"] == "running" and i not in stopping]

        def apply(rec: RunRecord) -> None:
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
    _wait_stopped(project, record, stopping + held)
    removed: list[dict[str, Any]] = []
    if inst_id is None:
        with store.lock():
            record = store.load(task)
            refuse_finished(record, "abort")
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
            removed, record = remove_all(project, record, record["instances"], force,
                                         leftovers.fenced_stager(project, task))
    out: AbortResult = {"run": record, "stopped": stopped, "removed": removed}
    if inst_id is None:

        out["remote_warning"] = transport.withdraw(project, record)
    return out
