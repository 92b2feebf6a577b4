"""A worker's own records, and what a worker that is gone leaves in its clone.

``git parallel worker`` keeps a record of each run it works on under
``<common>/parallel/worker/<run_id>/`` (never the clone's own runs), with
the instance it claimed, that instance's branch and worktree, and who holds
the claim (``model.new_claim_holder``: worker name, host, pid, the claim's
generation).  A worker killed with ``kill -9`` leaves all of it: a branch
and worktree, and an attempt ``running`` with dead pids.

An instance there is **left behind** when its worker process is gone and
the claim on the remote (as last fetched) is no longer its: released,
done, expired, taken over, or of an earlier attempt.  While the claim is
still held in its name it waits: nobody else can work on the instance
until the lease runs out, and the work is on the remote's claim chain.
A left-behind instance is taken apart as cleanup does (its tip, with
uncommitted work committed, kept under ``refs/parallel/archive/…``), and
its record says ``aborted`` with why.  Every ``worker`` does this for its
clone before it claims, and ``recover TASK`` for that task's instances;
``validate`` reports them (``PARALLEL_PROCESS_GONE``).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Iterator, Mapping, NotRequired, TypedDict

from gitflow_parallel import model
from gitflow_parallel.errors import PROCESS_GONE, ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.state import transport as R
from gitflow_parallel.git import worktrees
from gitflow_parallel.proc import leftovers
from gitflow_parallel.model import InstanceRecord, RunRecord, find_instance
from gitflow_parallel.state.project import Project, instance_process_alive, process_alive_since
from gitflow_parallel.state.store import Store
from gitflow_parallel.recovery.scan import ERROR, WARNING, Finding

WORKER_DIR = "worker"


def worker_project(project: Project, run_id: str) -> Project:
    """The project as the worker sees one run: the clone's repository with a
    record store of its own for that run."""
    return Project(project.repo, Store(project.repo.parallel_dir / WORKER_DIR / run_id))


def worker_records(project: Project, task: str | None = None) -> Iterator[tuple[Store, RunRecord]]:
    """(store, record) of every run a worker of this clone kept, optionally of one task."""
    root = project.repo.parallel_dir / WORKER_DIR
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        store = Store(folder)
        for name in store.tasks():
            if task is not None and name != task:
                continue
            try:
                yield store, store.load(name)
            except ParallelError:
                continue


def dismantle(project: Project, store: Store, record: RunRecord, inst: InstanceRecord, why: str | None = None) -> str:
    """Remove an instance's worktree and branch here, its tip (uncommitted
    work included, staged in a fence like its agent's: ``leftovers.fenced_stager``)
    archived, and record it removed (and, with ``why``, its
    unfinished attempt aborted).  A clone may do one attempt twice (a claim
    it released, then took again): the earlier tip is set aside under
    ``refs/parallel/worker-kept/…`` rather than refused.  Returns the archive ref."""
    repo = project.repo
    name = worktrees.archive_ref(record["run_id"], inst["id"], inst["attempt"])
    old = repo.ref_target(name)
    if old is not None:
        kept = f"refs/parallel/worker-kept/{record['run_id']}/{inst['id']}/{inst['attempt']}-{time.time_ns()}"
        repo.cas_ref(kept, old, None, "git-parallel: worker keeps an earlier tip")
        repo.delete_ref(name, old)
    worktrees.remove(repo, record, inst, force=True, stage=leftovers.fenced_stager(project, record["task"], store))
    now = utcnow()

    def apply(rec: RunRecord, i: InstanceRecord) -> None:
        if why is not None:
            model.worker_gone(rec, i, why, now)
        model.mark_removed(i)

    store.update_instance(record["task"], inst["id"], apply)
    return name


# -- left behind by a worker that is gone -------------------------------------------------
@dataclass
class Left:
    store: Store
    record: RunRecord
    inst: InstanceRecord
    waiting: str | None  # why it is not taken apart yet: its claim is still held in its name


def holder_alive(inst: InstanceRecord) -> bool:
    """Is the worker that holds this instance still running it?  A holder on
    another host cannot be seen from here, so it counts as alive."""
    holder = inst.get("claim")
    if inst["status"] == "running" and instance_process_alive(inst):
        return True
    if not holder:  # a record from before holders were kept: only a dead running attempt tells
        return inst["status"] != "running"
    if holder.get("host") != socket.gethostname():
        return True
    return process_alive_since(holder.get("pid"), holder.get("since"))


def claim_held_by_it(project: Project, record: RunRecord, inst: InstanceRecord, now: float) -> str | None:
    """Why the remote claim (as last fetched) is still this instance's holder's, or None."""
    remote = (record.get("worker") or {}).get("remote")
    holder: Mapping[str, object] = inst.get("claim") or {}
    if not remote:
        return None
    _, claim = R.fetched_claim(project, remote, record["run_id"], inst["id"])
    if claim is None or R.claim_state(claim, inst["attempt"], now) != "held":
        return None
    if (claim.get("worker"), claim.get("generation")) != (holder.get("worker"), holder.get("generation")):
        return None
    return (f"its claim on {remote} is held in {holder.get('worker')}'s name for {claim['expires_epoch'] - now:.0f}s "
            "more (as last fetched); nobody can take the instance over until then")


def left_behind(project: Project, task: str | None = None) -> list[Left]:
    """Instances of this clone's worker records whose worker is gone."""
    now = time.time()
    out = []
    for store, record in worker_records(project, task):
        for inst in record["instances"]:
            if inst.get("removed") or holder_alive(inst):
                continue
            out.append(Left(store, record, inst, claim_held_by_it(project, record, inst, now)))
    return out


def _gone_why(left: Left) -> str:
    holder: Mapping[str, object] = left.inst.get("claim") or {}
    return (f"its worker {holder.get('worker') or '?'} (pid {holder.get('pid') or left.inst.get('runner_pid')}) "
            f"is gone and its claim is no longer its; this clone's branch and worktree were taken apart, the tip "
            f"kept under {worktrees.archive_ref(left.record['run_id'], left.inst['id'], left.inst['attempt'])}")


class Tidied(TypedDict):
    """An instance ``tidy`` took apart (its tip ``archived``), or could not (``problem``)."""
    run_id: str
    task: str
    id: str
    attempt: int
    was: str  # its status
    archived: NotRequired[str | None]
    problem: NotRequired[str]
    code: NotRequired[str]
    hint: NotRequired[str | None]


def tidy(project: Project, left: list[Left]) -> list[Tidied]:
    """Take apart every left-behind instance that does not wait for its
    claim; one whose removal is refused (a folder that is not our worktree)
    is reported with ``problem`` and left as it is."""
    done: list[Tidied] = []
    for item in left:
        if item.waiting:
            continue
        rec = item.store.load(item.record["task"])
        inst = find_instance(rec, item.inst["id"])
        if inst.get("removed"):
            continue
        row: Tidied = {"run_id": rec["run_id"], "task": rec["task"], "id": inst["id"], "attempt": inst["attempt"],
                       "was": inst["status"]}
        try:
            ref = dismantle(project, item.store, rec, inst, why=_gone_why(item))
        except ParallelError as exc:
            done.append({**row, "problem": exc.message, "code": exc.code, "hint": exc.hint})
            continue
        done.append({**row, "archived": ref if project.repo.ref_target(ref) else None})
    return done


def findings(project: Project, task: str | None = None) -> list[Finding]:
    """``validate``'s view of the instances workers left behind."""
    out = []
    for item in left_behind(project, task):
        rec, inst = item.record, item.inst
        holder: Mapping[str, object] = inst.get("claim") or {}
        what = (f"worker instance {rec['task']}/{inst['id']} of run {rec['run_id']} is {inst['status']}, but its "
                f"worker {holder.get('worker') or '?'} (pid {holder.get('pid') or inst.get('runner_pid')}) is gone")
        if item.waiting:
            out.append(Finding(PROCESS_GONE, WARNING, f"{what}; {item.waiting}",
                               fix=f"wait; then `git parallel recover {rec['task']}` takes its branch and "
                                   "worktree apart",
                               task=rec["task"], run_id=rec["run_id"], instance=inst["id"]))
        else:
            out.append(Finding(PROCESS_GONE, ERROR, f"{what}, and its claim is no longer its",
                               fix=f"git parallel recover {rec['task']} (or the next `git parallel worker` here) "
                                   "archives its tip and removes its branch and worktree",
                               task=rec["task"], run_id=rec["run_id"], instance=inst["id"]))
    return out


def records(project: Project) -> list[RunRecord]:
    """Every worker record, for the orphan check: their branches and worktrees are accounted for."""
    return [record for _, record in worker_records(project)]
