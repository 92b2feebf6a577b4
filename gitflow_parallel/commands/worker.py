"""The worker: ``git parallel worker --remote R`` in any clone that can reach
the remote a run was published to (``state/transport``).

A pipeline per instance, top-down:

1. **Survey.**  Fetch the remote's manifests and claims; an instance is
   claimable when it has no claim, its claim is of an earlier attempt, was
   released, or its lease expired (``transport.claim_state``).  Runs that are
   finished or picked, and runs published without an agent command, are
   left alone.
2. **Claim.**  Push a claim commit with ``--force-with-lease=<ref>:`` (the
   ref must not exist) or, for a takeover, a lease on the claim it replaces:
   of two workers, exactly one wins; the loser looks for another instance.
3. **Prepare.**  The manifest's config is re-derived from the base commit
   (``config.verify_frozen``): a manifest that says otherwise is refused.
   The worker keeps its own record of the run under
   ``<common>/parallel/worker/<run_id>/`` (never the clone's own runs, so a
   worker can share a clone with other work) and makes the instance's
   branch and worktree at the attempt's start commit.
4. **Run and keep the lease.**  The agent runs through the ordinary runner
   (``proc/engine.run``: process group, watchdog, timeout, leftovers committed).
   A thread renews the claim every third of the lease, each renewal
   carrying the attempt's tip, so a worker that dies leaves its commits on
   the remote.  A renewal the remote refuses means another worker took
   over: the agent is stopped (SIGTERM to ourselves, which the runner turns
   into an orderly abort) and nothing is delivered.
5. **Check.**  A succeeded agent's attempt is judged by ``check.check`` in a
   clean checkout, as on one machine.
6. **Deliver.**  One atomic push: the instance branch (leased on what the
   remote had), the evidence ref (must not exist), the claim's ``done``
   state (leased on our last renewal) and the notes (this run's lines on
   top of the remote's notes, leased; rebuilt and pushed again if another
   worker's notes won).  A lost claim refuses the whole push.
7. **Tidy.**  The local worktree and branch go (tips kept
   under the local archive refs); the work lives on the remote.  What a
   worker of this clone that is gone (``kill -9``) left is taken apart
   after every survey, once its claim is no longer its (``recovery/workers``).

Stop signals between instances end the loop after the current delivery;
during the agent, the runner stops it and the claim is released with the
work done so far.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, TypedDict

from gitflow_parallel import config, model
from gitflow_parallel.proc import engine
from gitflow_parallel.state import transport as R
from gitflow_parallel.git import worktrees
from gitflow_parallel.state import share
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import FINISHED_RUN, find_instance
from gitflow_parallel.judge import check
from gitflow_parallel.recovery import workers
from gitflow_parallel.recovery.workers import dismantle, worker_project
from gitflow_parallel.shapes.records import ClaimHolder, EvidenceBinding, InstanceRecord, RunRecord
_STOP = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


@dataclass
class Target:
    """One instance of a published run, as the survey found it."""

    record: RunRecord  # the manifest's record
    inst: InstanceRecord
    claim_oid: str | None
    claim: dict[str, Any] | None
    state: str
    waiting: bool = False  # published without an agent command yet


class Worked(TypedDict):
    """``worker``: each instance it took (a row each), how many it delivered,
    why it stopped, and what it took apart for workers that are gone."""
    worker: str
    remote: str
    task: str | None
    lease_s: float
    instances: list[dict[str, Any]]
    delivered: int
    stopped: str
    tidied: list[Mapping[str, Any]]


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# -- 1. survey ------------------------------------------------------------------------------
def survey(project: Project, remote: str, task: str | None = None) -> list[Target]:
    R.fetch_runs(project, remote)
    now = time.time()
    out = []
    newest: dict[str, RunRecord] = {}
    for published, _ in R.published_runs(project, remote, task):
        newest[published["task"]] = published  # oldest first: the last one stays
    for record in newest.values():
        # A task has one live run: an older manifest of it is a run the
        # coordinator finished, whatever that manifest last said.
        if record["status"] in FINISHED_RUN or record.get("picks"):
            continue
        remote_info = record.get("remote")
        waiting = not (remote_info and remote_info["agent"])
        for inst in record["instances"]:
            if inst["status"] != "pending" or inst.get("removed"):
                continue  # finished (collected) or taken by hand on the coordinator
            oid, claim = R.fetched_claim(project, remote, record["run_id"], inst["id"])
            out.append(Target(record, inst, oid, claim, R.claim_state(claim, inst["attempt"], now), waiting))
    return out


def _narrow(targets: list[Target], task: str | None, instance: str | None, index: int | None) -> list[Target]:
    """With --instance or --index: that one instance of the task's newest live run."""
    if instance is None and index is None:
        return targets
    runs = list(dict.fromkeys(t.record["run_id"] for t in targets))
    if not runs:
        return []
    newest = [t for t in targets if t.record["run_id"] == runs[-1]]
    ids = [i["id"] for i in newest[0].record["instances"]]
    if index is not None:
        if not 0 <= index < len(ids):
            raise ParallelError(E.BRANCH_NOT_FOUND, f"--index {index} is out of range: run {runs[-1]} of {task!r} "
                                f"has {len(ids)} instances (0..{len(ids) - 1})",
                                hint="give the instance's position, from 0 (JOB_COMPLETION_INDEX counts so)")
        instance = ids[index]
    return [t for t in newest if t.inst["id"] == instance]


# -- 2. the claim and its lease ----------------------------------------------------------------
class Lease:
    """Our claim on one instance: taking it, renewing it from a thread of its
    own (with its own repository handle: libgit2 objects are not shared
    across threads), and its last state."""

    def __init__(self, project: Project, remote: str, target: Target, worker: str, lease_s: float) -> None:
        self.repo = project.repo
        self.remote = remote
        self.target = target
        self.worker = worker
        self.lease_s = lease_s
        rec, inst = target.record, target.inst
        self.ref = R.claim_ref(rec["run_id"], inst["id"])
        self.oid: str | None = None
        self.data: dict[str, Any] = {}
        self.lost = False
        self.on_lost: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.renewals = 0
        self.claim_s: float | None = None  # how long the claiming push took

    def _state(self, state: str, now: float, **extra: Any) -> dict[str, Any]:
        return {**self.data, "state": state, "renewed_at": utcnow(), "expires_epoch": round(now + self.lease_s, 3),
                **extra}

    def replaces_nobody(self) -> bool:
        """Taking a claim this worker (by name) released, or one of an earlier
        attempt that was done, is no takeover: nobody's work is replaced."""
        old = self.target.claim or {}
        return old.get("state") == "done" or (old.get("state") == "released" and old.get("worker") == self.worker)

    def acquire(self) -> bool:
        """Take the instance; False if another worker got there first."""
        t = self.target
        now = time.time()
        takeover = None
        if t.claim is not None and not self.replaces_nobody():
            old = t.claim
            takeover = {"worker": old.get("worker"), "claim": t.claim_oid, "state": t.state,
                        "attempt": old.get("attempt"), "expires_epoch": old.get("expires_epoch"),
                        "work": old.get("work"), "taken_at": utcnow()}
        self.data = {
            "v": R.CLAIM_VERSION, "run_id": t.record["run_id"], "task": t.record["task"], "instance": t.inst["id"],
            "attempt": t.inst["attempt"], "worker": self.worker, "host": socket.gethostname(), "pid": os.getpid(),
            "generation": int((t.claim or {}).get("generation", 0)) + 1, "claimed_at": utcnow(),
            "lease_s": self.lease_s, "work": None, "takeover": takeover, "result": None,
        }
        data = self._state("held", now)
        oid = R.claim_commit(self.repo, data, [t.claim_oid] if t.claim_oid else [])
        update = R.Update(oid, self.ref, t.claim_oid or "")
        t0 = time.perf_counter()
        pushed = R.push(self.repo, self.remote, [update])
        self.claim_s = round(time.perf_counter() - t0, 4)
        if pushed.ok:
            self.oid, self.data = oid, data
            return True
        if R.moved(self.repo, self.remote, [update]):
            return False
        raise ParallelError(E.REMOTE_FAILED, f"claiming {self.ref} on {self.remote} failed: {pushed.output}",
                            hint=f"check that {self.remote} is reachable and takes pushes")

    def holder(self) -> ClaimHolder:
        """Who holds the claim, for the worker's own record (``recovery/workers``)."""
        return model.new_claim_holder(self.worker, self.data["host"], self.data["pid"], self.data["generation"],
                                      self.data["claimed_at"])

    def _push_state(self, data: dict[str, Any], work: str | None, repo: Repo) -> bool:
        assert self.oid is not None
        parents = [self.oid] + ([work] if work and work != self.data.get("work") else [])
        oid = R.claim_commit(repo, data, parents)
        update = R.Update(oid, self.ref, self.oid)
        if R.push(repo, self.remote, [update]).ok:
            self.oid, self.data = oid, data
            return True
        if R.moved(repo, self.remote, [update]):
            self.lost = True
        return False

    def renew(self, repo: Repo, branch: str) -> None:
        tip = repo.ref_target(f"refs/heads/{branch}")
        work = tip if tip and tip != self.target_start() else self.data.get("work")
        with self._lock:
            if self.lost or self._stop.is_set():
                return
            if self._push_state(self._state("held", time.time(), work=work), work, repo):
                self.renewals += 1
        if self.lost and self.on_lost is not None:
            self.on_lost()

    def target_start(self) -> str:
        t = self.target
        return (t.inst.get("start") or {}).get("commit") or t.record["base"]["commit"]

    def keep_alive(self, branch: str) -> None:
        """Renew every third of the lease until ``stop``."""
        def loop() -> None:
            repo = Repo.open(self.repo.main_workdir)
            while not self._stop.wait(self.lease_s / 3):
                try:
                    self.renew(repo, branch)
                except Exception:  # an unreachable remote: try again at the next tick, the lease tells
                    continue
                if self.lost:
                    return

        self._thread = threading.Thread(target=loop, name=f"lease-{self.ref}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def final(self, state: str, result: dict[str, Any] | None, work: str | None, log: bytes | None = None) -> str:
        """The commit of our last state (done or released, with the agent's
        log beside it), not pushed yet."""
        assert self.oid is not None
        data = {**self.data, "state": state, "renewed_at": utcnow(), "finished_at": utcnow(), "result": result,
                "work": work or self.data.get("work")}
        parents = [self.oid] + ([work] if work and work != self.data.get("work") else [])
        return R.claim_commit(self.repo, data, parents, log)


# -- 3. prepare ------------------------------------------------------------------------------
def _refuse_coordinator(project: Project, record: RunRecord) -> None:
    """The clone that spawned the run holds its branches: a worker there would collide."""
    try:
        local = project.store.load(record["task"])
    except ParallelError:
        return
    if local["run_id"] == record["run_id"]:
        raise ParallelError(
            E.RUN_EXISTS, f"this clone is the coordinator of run {record['run_id']} (it holds its branches)",
            hint="run `git parallel worker` in another clone (git clone URL); here use `git parallel collect`")


def _clear_leftover(project: Project, task: str, inst_id: str) -> None:
    """A branch or worktree of an earlier worker run of the same instance
    name (a killed worker, an earlier run of the task) is removed, its tip
    archived; one that no worker record owns is refused."""
    repo = project.repo
    branch = f"parallel/{task}/{inst_id}"
    for store, rec in workers.worker_records(project, task):
        for inst in rec["instances"]:
            if inst["id"] == inst_id and not inst.get("removed"):
                dismantle(project, store, rec, inst)
    if repo.ref_target(f"refs/heads/{branch}") is not None:
        raise ParallelError(
            E.WORKTREE_CREATE_FAILED, f"this clone has a branch {branch} that no worker made",
            hint="run the worker in a clone of its own, or remove the branch (its work stays on the remote)")


def prepare(project: Project, record: RunRecord, inst: InstanceRecord, remote: str,
            holder: ClaimHolder) -> Project:
    """The worker's own record of the run with this instance in it, and its
    branch and worktree at the attempt's start; returns the worker project."""
    repo = project.repo
    task, run_id = record["task"], record["run_id"]
    _refuse_coordinator(project, record)
    R.fetch(repo, remote, [f"+refs/heads/{inst['branch']}:{R.branch_tracking(remote, inst['branch'])}"])
    start = (inst.get("start") or {}).get("commit") or record["base"]["commit"]
    if start not in repo.pygit:
        raise ParallelError(E.BASE_NOT_FOUND, f"the attempt's start {start[:12]} is not on {remote}",
                            hint=f"`git parallel publish {task} --remote {remote}` on the coordinator pushes it")
    config.verify_frozen(repo, record)  # the manifest's config must be the base commit's
    _clear_leftover(project, task, inst["id"])
    wp = worker_project(project, run_id)
    root = worktrees.resolve_root(repo, record["config"]["worktree_root"])
    local = model.worker_instance(task, inst, root, start, holder)
    store = wp.store
    with store.lock():
        if not store.exists(task):
            store.create(model.new_run(
                task, record["base"], record["tracks"], record["config"], record["config_sha256"],
                record.get("config_source"), root, [local], utcnow(), run_id=run_id, worker={"remote": remote}))
        else:
            store.update(task, lambda rec: model.put_instance(rec, local))
        try:
            worktrees.create(repo, task, start, [local])
        except BaseException:
            store.update(task, lambda rec: model.drop_instance(rec, inst["id"]))
            raise
    return wp


# -- 4..7. one instance ------------------------------------------------------------------------
@dataclass
class Outcome:
    row: dict[str, Any] = field(default_factory=dict)
    delivered: bool = False
    interrupted: bool = False


def _agent(record: RunRecord) -> tuple[list[str], float | None]:
    info = record.get("remote")
    # Only a run published with its agent command is worked (``survey``: waiting).
    assert info is not None and info["agent"] is not None
    return list(info["agent"]), info["timeout"]


def _evidence(wp: Project, task: str, inst_id: str) -> tuple[str | None, EvidenceBinding | None, dict[str, Any]]:
    """(evidence commit, binding, what the check said) for the checked instance."""
    out: dict[str, Any] = {}
    try:
        checked = check.check(wp, task, instances=[inst_id])
    except ParallelError as exc:
        return None, None, {"error": f"error[{exc.code}]: {exc.message}"}
    if checked["errors"]:
        err = checked["errors"][0]
        return None, None, {"error": f"error[{err['code']}]: {err['message']}"}
    local_record = wp.store.load(task)
    local = find_instance(local_record, inst_id)
    binding = local["evidence"]
    assert binding is not None  # the check above bound it, or said why not
    pack = json.loads(Path(binding["path"]).read_bytes())
    # ``check`` keeps the pack on the evidence ref; written here if it could not.
    name = share.evidence_ref(local_record["run_id"], inst_id, local["attempt"])
    share.commit_pack(wp, local_record, inst_id, local["attempt"], binding, local.get("log"))
    commit = wp.repo.ref_target(name)
    out.update(verdict=pack.get("verdict"), score=pack.get("score"))
    return commit, binding, out


def _deliver(project: Project, lease: Lease, record: RunRecord, inst: InstanceRecord, tip: str,
             expected_branch: str | None, ev: str | None, done_claim: str) -> None:
    """The one atomic push of branch, evidence, claim and notes."""
    repo, remote = project.repo, lease.remote
    run_id = record["run_id"]
    notes_ref = record["config"]["notes_ref"]
    entries = R.run_note_lines(repo, notes_ref, run_id, [tip])
    branch_ref = f"refs/heads/{inst['branch']}"
    for _ in range(R.NOTES_PUSH_ATTEMPTS):
        theirs = R.ls_remote(repo, remote, [notes_ref]).get(notes_ref)
        if theirs is not None and theirs not in repo.pygit:
            R.fetch(repo, remote, [f"+{notes_ref}:{share.notes_tracking_ref(remote, notes_ref)}"])
        made = R.notes_on(repo, theirs, entries, f"git-parallel: worker {lease.worker} ({record['task']}, {run_id})")
        updates = [R.Update(done_claim, lease.ref, lease.oid or "")]
        if tip != expected_branch:
            updates.append(R.Update(tip, branch_ref, expected_branch or ""))
        if ev is not None:
            updates.append(R.Update(ev, share.evidence_ref(run_id, inst["id"], inst["attempt"]), ""))
        if made is not None:
            updates.append(R.Update(made, notes_ref, theirs or ""))
        pushed = R.push(repo, remote, updates)
        if pushed.ok:
            return
        stale = R.moved(repo, remote, updates)
        if lease.ref in stale:
            lease.lost = True
            raise ParallelError(E.CLAIM_LOST, f"the claim {lease.ref} was taken over; nothing was delivered",
                                hint="another worker runs this instance now; its work is kept on the claim")
        if set(stale) <= {notes_ref}:
            continue  # another worker's notes landed first (or a transient refusal): rebuild ours on theirs
        raise ParallelError(E.REMOTE_FAILED, f"delivering {record['task']}/{inst['id']} to {remote} was refused "
                            f"({', '.join(stale)} moved); nothing was pushed: {pushed.output}",
                            hint=f"see the message; the work is kept in this clone under refs/parallel/archive/{run_id}/")
    raise ParallelError(E.REMOTE_FAILED, f"the notes on {remote} kept moving; nothing was delivered",
                        hint="run the worker again: the claim expires and the instance is taken up again")


def _tidy(wp: Project, task: str, inst_id: str) -> None:
    record = wp.store.load(task)
    dismantle(wp, wp.store, record, find_instance(record, inst_id))


def run_one(project: Project, lease: Lease) -> Outcome:
    """Steps 3 to 7 for an instance we hold the claim of."""
    t = lease.target
    record, inst = t.record, t.inst
    task, run_id = record["task"], record["run_id"]
    row: dict[str, Any] = {"run_id": run_id, "task": task, "id": inst["id"], "attempt": inst["attempt"],
                           "takeover": lease.data.get("takeover"), "claim": lease.ref}
    t0 = time.monotonic()
    try:
        wp = prepare(project, record, inst, lease.remote, lease.holder())
    except ParallelError as exc:
        _release(project, lease, None)
        raise ParallelError(exc.code, f"{task}/{inst['id']}: {exc.message} (the claim was released)",
                            hint=exc.hint) from None
    expected_branch = project.repo.ref_target(R.branch_tracking(lease.remote, inst["branch"]))
    argv, timeout = _agent(record)
    phase = {"agent": True}

    def lost() -> None:
        if phase["agent"]:
            os.kill(os.getpid(), signal.SIGTERM)  # the runner stops the agent and records it aborted

    lease.on_lost = lost
    lease.keep_alive(inst["branch"])
    try:
        summary = engine.run(wp, task, argv, instances=[inst["id"]], timeout=timeout)
        phase["agent"] = False
        ran = summary["instances"][0]
        tip = wp.tip(find_instance(wp.store.load(task), inst["id"])) or ran["head"]
        row.update(status=ran["status"], exit_code=ran["exit_code"], error=ran["error"], head=tip,
                   duration_s=ran["duration_s"])
        if lease.lost:
            row.update(delivered=False, lost=True)
            _tidy(wp, task, inst["id"])
            return Outcome(row)
        if summary["interrupted"]:
            lease.stop()
            _release(project, lease, tip)
            _tidy(wp, task, inst["id"])
            row.update(delivered=False, released=True)
            return Outcome(row, interrupted=True)
        ev: str | None = None
        binding: EvidenceBinding | None = None
        checked: dict[str, Any] = {}
        if ran["status"] == "succeeded":
            ev, binding, checked = _evidence(wp, task, inst["id"])
        row.update(checked)
    finally:
        phase["agent"] = False
        lease.stop()
    if lease.lost:
        row.update(delivered=False, lost=True)
        _tidy(wp, task, inst["id"])
        return Outcome(row)
    if tip is None:  # its branch is gone and its run recorded no head: nothing to deliver
        row.update(delivered=False, error=row.get("error") or "its branch is gone and its run recorded no head")
        _release(project, lease, None)
        _tidy(wp, task, inst["id"])
        return Outcome(row)
    result = {"status": row["status"], "exit_code": row["exit_code"], "error": row.get("error") or checked.get("error"),
              "head": tip, "finished_at": utcnow(), "verdict": checked.get("verdict"), "score": checked.get("score"),
              "evidence": share.evidence_ref(run_id, inst["id"], inst["attempt"]) if ev else None,
              "evidence_sha256": binding["sha256"] if binding else None}
    # The agent's log goes with the result, passed or failed: the coordinator reads a failure from it.
    log = share.capped_log(find_instance(wp.store.load(task), inst["id"]).get("log"), share.log_limit(record))
    result["log"] = log[1] if log else None
    done = lease.final("done", result, tip, log[0] if log else None)
    t1 = time.perf_counter()
    try:
        _deliver(project, lease, record, inst, tip, expected_branch, ev, done)
    finally:
        _tidy(wp, task, inst["id"])  # delivered, or kept under the archive ref here
    row.update(delivered=True, verdict=result["verdict"], evidence=result["evidence"], renewals=lease.renewals,
               claim_s=lease.claim_s, deliver_s=round(time.perf_counter() - t1, 4),
               elapsed_s=round(time.monotonic() - t0, 3))
    return Outcome(row, delivered=True)


def _release(project: Project, lease: Lease, work: str | None) -> None:
    """Give the claim back (with the work so far), so another worker can take it at once."""
    try:
        oid = lease.final("released", None, work)
        R.push(project.repo, lease.remote, [R.Update(oid, lease.ref, lease.oid or "")])
    except Exception:
        pass  # unreleased, it still expires


# -- the loop -------------------------------------------------------------------------------
class _Stop:
    """Stop signals between instances: finish the current one, claim no more."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "_Stop":
        if threading.current_thread() is threading.main_thread():
            for sig in _STOP:
                self._old[sig] = signal.signal(sig, lambda s, f: self.caught.append(s))
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def poll_interval(lease_s: float) -> float:
    return max(0.2, min(2.0, lease_s / 4))


def work(project: Project, remote: str, task: str | None = None, once: bool = False, max_instances: int | None = None,
         instance: str | None = None, index: int | None = None, lease_s: float = R.DEFAULT_LEASE,
         wait: bool = False, name: str | None = None,
         progress: Callable[[str], None] | None = None) -> Worked:
    """Claim, run, check and deliver instances until there is nothing to
    claim (or ``once``/``max_instances``); with ``wait`` (implied by
    ``instance``/``index``), wait while instances are held by others or
    wait for an agent command, taking over claims whose lease expires."""
    if task is not None:
        check_name(task, "task")
    if (instance is not None or index is not None) and task is None:
        raise ParallelError(E.INVALID_NAME, "--instance and --index need --task",
                            hint="name the task: `git parallel worker --remote origin --task T --index N`")
    share.check_remote(project.repo, remote)
    worker = name or default_name()
    limit = 1 if once or instance is not None or index is not None else max_instances
    wait = wait or instance is not None or index is not None
    say = progress or (lambda text: None)
    rows: list[dict[str, Any]] = []
    tidied: list[Mapping[str, Any]] = []
    idle = "nothing to claim"
    with _Stop() as stop:
        while limit is None or len(rows) < limit:
            if stop.caught:
                idle = "stopped by a signal"
                break
            targets = _narrow(survey(project, remote, task), task, instance, index)
            for gone in workers.tidy(project, workers.left_behind(project)):
                tidied.append(gone)
                say(f"left by a worker that is gone: {gone['task']}/{gone['id']} of {gone['run_id']}: "
                    + (f"not taken apart: {gone['problem']}" if gone.get("problem")
                       else f"taken apart, its tip kept under {gone['archived']}"))
            outcome, idle = _claim_and_run(project, remote, targets, worker, lease_s, say)
            if outcome is not None:
                rows.append(outcome.row)
                if outcome.interrupted:
                    idle = "interrupted"
                    break
                continue
            if idle == "lost a race":
                continue
            if wait and any(t.state == "held" or (t.waiting and claimable(t)) for t in targets):
                time.sleep(poll_interval(lease_s))
                continue
            break
    delivered = [r for r in rows if r.get("delivered")]
    return {"worker": worker, "remote": remote, "task": task, "lease_s": lease_s, "instances": rows,
            "delivered": len(delivered), "stopped": idle, "tidied": tidied}


def claimable(t: Target) -> bool:
    return R.claimable(t.state)


def _claim_and_run(project: Project, remote: str, targets: list[Target], worker: str, lease_s: float,
                   say: Callable[[str], None]) -> tuple[Outcome | None, str]:
    free = [t for t in targets if claimable(t) and not t.waiting]
    if not free:
        if any(t.state == "done" for t in targets) and not any(claimable(t) or t.state == "held" for t in targets):
            return None, "every instance is done"
        return None, "nothing to claim"
    for t in free:
        lease = Lease(project, remote, t, worker, lease_s)
        if not lease.acquire():
            continue  # another worker was faster
        how = f" (took over from {(t.claim or {}).get('worker')}, {t.state})" if lease.data.get("takeover") else ""
        say(f"claimed {t.record['task']}/{t.inst['id']} of {t.record['run_id']}{how}")
        try:
            return run_one(project, lease), "claimed"
        except ParallelError as exc:
            if exc.code != E.CLAIM_LOST:
                raise
            return Outcome({"run_id": t.record["run_id"], "task": t.record["task"], "id": t.inst["id"],
                            "attempt": t.inst["attempt"], "delivered": False, "lost": True,
                            "error": exc.message}), "claimed"
    return None, "lost a race"

