"""The run verb's engine (also ``worker``'s): an agent command in every
selected instance's worktree, concurrently, observably, and without losing
work or leaving processes behind.

In the order an instance lives through it: selection (pending instances
only), slots (``jobs`` of this run, ``max_total`` in the repository), the
claim and the start in one compare-and-swap store write, the child in a
session of its own, the watchdog that outlives a ``kill -9`` of the runner,
the end (timeout, the group swept before the leader is reaped, held-back
attempts, leftovers committed), stopping on SIGINT/SIGTERM/SIGHUP, and the
events and notes it leaves.  What a user sees of all this:
docs/agents.md, "What ``run`` does with an agent"; how and why it is built
so: docs/agents.md, "How the runner keeps its promises".
"""

from __future__ import annotations

import os
import signal
import time
from collections import deque
from typing import Callable, NotRequired, TypedDict

from gitflow_parallel import errors as E
from gitflow_parallel import faults, model, notify, profiles
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.model import FINISHED_RUN, InstanceRecord, RunRecord, check_transition, find_instance
from gitflow_parallel.state.project import Project, notes_instance_on
from gitflow_parallel.provenance import instance_note
from gitflow_parallel import environ as proc_env
from gitflow_parallel.proc import child as child_proc
from gitflow_parallel.proc import claims as claims_proc
from gitflow_parallel.proc import cgroup, leftovers, namespace, reaper, sandbox
from gitflow_parallel.proc import tmux as tmux_proc
from gitflow_parallel.proc.notifier import Notifier
from gitflow_parallel.proc.slots import Slots
from gitflow_parallel.proc.supervise import KILL_GRACE, POLL, START_ERRORS, Signals, killpg, signame
from gitflow_parallel.proc.watchdog import Watchdog
from gitflow_parallel.git import tamper

# How many more times a record write waits for the project lock (each wait
# is GIT_PARALLEL_LOCK_TIMEOUT long) before the run gives up.
LOCK_RETRIES = 10
SLOT_POLL = 0.05  # seconds between looks for a slot another run freed
TICK = 0.25  # progress refresh on a terminal
WAIT_POLL = 0.5  # seconds between looks whether a running agent waits for input (proc/waiting)
HELD_POLL = 1.0  # seconds between looks whether abort decided about an attempt held back (_Runner.held)


# -- what a run reports -------------------------------------------------------------
class Progress(TypedDict):
    """The state ``progress`` is called with while the run goes on."""
    task: str
    run_id: str
    total: int
    running: int
    queued: int
    succeeded: int
    failed: int  # failed or aborted
    elapsed_s: float
    waiting_for_slot: bool
    max_total: int
    stopping: str | None  # the signal the run received, once it stops its agents


class Ran(TypedDict):
    """One selected instance in the summary: what ran, else the record's state."""
    id: str
    track: str
    attempt: int
    ran: bool
    agent: str | None
    status: str | None
    exit_code: int | None
    error: str | None
    duration_s: float | None
    head: str | None
    committed: str | None
    pid: int | None
    log: str | None
    events: str | None
    outcome: NotRequired[str]  # model.NO_CHANGE: it succeeded having changed nothing


class RunSummary(TypedDict):
    """What ``run`` did."""
    task: str
    run_id: str
    command: list[str]
    jobs: int
    max_total: int
    timeout: float | None
    instances: list[Ran]
    counts: dict[str, int]  # succeeded, failed, aborted
    elapsed_s: float
    interrupted: str | None  # the signal that stopped it
    notes_error: str | None
    run_status: str
    notify_warnings: list[str]
    profiles: list[dict[str, object]]  # the agent profiles applied (profiles.Profile.record)
    warnings: NotRequired[list[str]]  # said by the verb: the namespace layer missing (sandbox.fallback_warning)


# -- selection ---------------------------------------------------------------------
def _ran_beside(children: list[child_proc.Child], child: child_proc.Child) -> set[str]:
    """The branches of this runner's other attempts that ran while ``child`` did."""
    return {f"refs/heads/{c.branch}" for c in children if c is not child and c.started
            and (c.head is None or c.started + (c.duration or 0) >= child.started)}


def _next_wait(active: dict[int, child_proc.Child], queued: bool, waiting_for_slot: bool, progress: bool) -> float | None:
    """How long the loop may sleep: until the next deadline or kill, a slot
    poll, or a progress tick."""
    now = time.monotonic()
    waits: list[float] = []
    for child in active.values():
        if child.term_at is None and child.deadline is not None:
            waits.append(child.deadline - now)
        elif child.term_at is not None and not child.killed:
            waits.append(child.term_at + KILL_GRACE - now)
    if queued and waiting_for_slot:
        waits.append(SLOT_POLL)
    if progress or active:
        waits.append(TICK if progress else WAIT_POLL)
    return max(0.0, min(waits)) if waits else None


def _write_notes(project: Project, record: RunRecord, children: list[child_proc.Child]) -> str | None:
    """Note the instances that ran; an error text if the notes could not be
    written (the record is right, and recover can write them again)."""
    touched = [c for c in children if c.ran]
    entries = []
    for child in touched:
        inst = find_instance(record, child.id)
        tip = project.tip(inst) or inst["head"]
        if tip and notes_instance_on(record, tip, inst):
            entries.append((tip, instance_note(record, inst, tip)))
    if not entries:
        return None
    try:
        project.add_notes(record, entries, f"run {', '.join(c.id for c in touched)}")
    except Exception as exc:  # the record is right; the mirror can be rewritten by recover
        return f"{type(exc).__name__}: {exc}"
    return None


def _summary_rows(record: RunRecord, children: list[child_proc.Child]) -> list[Ran]:
    """One row per selected instance for the summary (what ran, else the record's state)."""
    rows: list[Ran] = []
    for child in children:
        inst = find_instance(record, child.id)
        row: Ran = {
            "id": child.id, "track": child.track, "attempt": child.attempt, "ran": child.ran, "agent": inst.get("agent"),
            "status": child.status if child.ran else inst["status"], "exit_code": child.exit_code,
            "error": child.error, "duration_s": child.duration, "head": child.head or inst["head"],
            "committed": child.committed, "pid": child.popen.pid if child.popen else None,
            "log": str(child.log) if child.ran else None, "events": str(child.events) if child.ran else None,
        }
        if child.ran and child.outcome:
            row["outcome"] = child.outcome
        rows.append(row)
    return rows


# -- the runner --------------------------------------------------------------------
class _Runner:
    def __init__(self, project: Project, record: RunRecord, chosen: list[InstanceRecord], argv: list[str],
                 timeout: float | None, jobs: int | None, progress: Callable[[Progress], None] | None,
                 tmux: str | None = None) -> None:
        self.project = project
        self.tmux = tmux  # the tmux binary under --tmux (tmux.py), else None
        self.store = project.store
        self.task = record["task"]
        self.run_id = record["run_id"]
        self.record = record
        self.argv = list(argv)
        self.timeout = timeout
        self.max_total = int(record["config"]["max_total"])
        self.jobs = max(1, min(jobs or self.max_total, len(chosen)))
        self.commit_leftovers = bool(record["config"].get("commit_leftovers", True))
        self.progress = progress
        parallel_dir = project.repo.parallel_dir
        self.slots = Slots(parallel_dir, self.max_total)
        self.log_dir = child_proc.logs_dir(parallel_dir, self.run_id)
        self.event_dir = child_proc.events_dir(parallel_dir, self.run_id)
        self.children = [child_proc.make_child(project, record, self.argv, inst) for inst in chosen]
        self.base_env = proc_env.for_command()
        self.watchdog = Watchdog()
        self.notifier = Notifier(project, record, self.watchdog)
        self.signals = Signals()
        self.reads = sandbox.siblings(record)  # its fences' read rules, worked out once
        self.stopping: str | None = None
        self.waiting_for_slot = False
        # Attempts that ended while a sibling of this run still ran or waited
        # to: their objects and refs stay in their own stores (git/shadow)
        # until none is left, so that no live attempt reads their work.
        self.held: list[child_proc.Child] = []
        self.looked = 0.0  # when the record was last read for them
        self.t0 = time.monotonic()

    # -- the loop ------------------------------------------------------------------
    def run(self) -> RunSummary:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.event_dir.mkdir(parents=True, exist_ok=True)
        # Forked before any slot, lock or signal pipe exists, so it holds none.
        self.watchdog.start()
        server_started = self.tmux is not None and tmux_proc.start_server(self.tmux)
        # Orphans of the agents become our children, not PID 1's (see reaper).
        reaper.become_subreaper()
        try:
            with self.signals:
                active: dict[int, child_proc.Child] = {}
                try:
                    self._loop(active)
                except BaseException:
                    self._kill_everything(active)
                    raise
                notes_error = _write_notes(self.project, self.record, self.children)
                self.notifier.send(notify.all_done(self.record))
                self.notifier.finish()  # before the sweep below stops what it started
        finally:
            # Nothing the agents started outlives the report.
            reaper.sweep({c.scope for c in self.children if c.ran})
            reaper.sweep_descendants({self.watchdog.pid} if self.watchdog.pid else set())
            for child in self.children:
                child_proc.release_claim(child)
            if any(c.profile is not None for c in self.children):
                profiles.clean(self.run_id)  # its agents' private copies of their state
            if server_started and self.tmux is not None:
                tmux_proc.release_server(self.tmux)
            self.watchdog.stop()
        return _summary(self, notes_error)

    def _loop(self, active: dict[int, child_proc.Child]) -> None:
        queue = deque(self.children)
        while queue or active or self.held:
            if self.signals.caught and not self.stopping:
                self.stopping = signame(self.signals.caught[0])
                for child in queue:
                    child.error = f"not started: git parallel run received {self.stopping}"
                queue.clear()
                self._stop_all(active)
            now = time.monotonic()
            child_proc.enforce_deadlines(active, now)
            self._reap(active)
            starting: list[child_proc.Child] = []
            self.waiting_for_slot = False
            while queue and len(active) + len(starting) < self.jobs:
                slot = self.slots.try_acquire(f"task={self.task} run={self.run_id} instance={queue[0].id}")
                if slot is None:
                    self.waiting_for_slot = True
                    break
                child = queue.popleft()
                child.slot = slot
                starting.append(child)
            finished: list[child_proc.Child] = []
            if self.held and not (active or starting or queue):
                finished, self.held = self.held, []
            elif self.held:
                finished = _decided_elsewhere(self)
            for child in finished:
                self._settle(child)
            if finished or starting:
                self._write(finished, starting)
                _notify_ended(self.notifier, self.record, finished + [c for c in starting if c.ran and not c.popen])
                for child in starting:
                    if child.popen is not None:
                        active[child.pid] = child
                if any(c.popen is not None for c in starting):
                    faults.point("run.after_running")
            self._report(active, queue)
            _notify_waiting(self.notifier, self.record, active)
            if not queue and not active and not self.held:
                break
            self.signals.wait(_next_wait(active, bool(queue), self.waiting_for_slot, self.progress is not None))

    def _reap(self, active: dict[int, child_proc.Child]) -> None:
        """Those of ``active`` whose command ended are held for settling
        (or run again, in a sandbox made afresh: ``_ended``)."""
        for child in [c for c in active.values() if child_proc.exited(c)]:
            del active[child.pid]
            if _ended(self, child):
                active[child.pid] = child
            else:
                self.held.append(child)

    # -- starting --------------------------------------------------------------------
    def _write(self, finished: list[child_proc.Child], starting: list[child_proc.Child]) -> None:
        """One store write: record what finished and claim-and-start what is due."""
        spawned: list[child_proc.Child] = []

        def mutate(record: RunRecord) -> None:
            for child in finished:
                child_proc.record_finish(record, child)
            for child in starting:
                self._claim(record, child)
                if child.popen is not None:
                    spawned.append(child)

        try:
            for attempt in range(LOCK_RETRIES + 1):
                try:
                    record, _ = self.store.update(self.task, mutate)
                    break
                except ParallelError as exc:
                    # The lock was never had, so nothing was written or
                    # started: wait again rather than give up the agents.
                    if exc.code != E.RESOURCE_LOCK_FAILED or spawned or attempt == LOCK_RETRIES:
                        raise
        except BaseException:
            # Nothing was written: what was started here has no record.
            for child in spawned:
                killpg(child.pid, signal.SIGKILL)
                self.watchdog.ended(child.pid)
                if child.popen is not None:  # (a spawned child has one)
                    child.popen.wait()
                child.popen = None
                child_proc.finish_log(child)
            raise
        finally:
            for child in starting:
                if child.popen is None and child.slot is not None:
                    child.slot.release()
        self.record = record
        for child in spawned + finished:
            if child.ran:
                child.revision = find_instance(record, child.id)["instance_revision"]

    def _claim(self, record: RunRecord, child: child_proc.Child) -> None:
        """Under the project lock: check the instance is still as read, start
        the command, and mark it running (or failed if it cannot start)."""
        if record["status"] in FINISHED_RUN:
            child.error = f"not run: the run became {record['status']} meanwhile"
            return
        try:
            inst = find_instance(record, child.id)
            if inst["attempt"] != child.attempt:
                raise ParallelError(E.ATTEMPT_MISMATCH, f"it is on attempt {inst['attempt']} now, not {child.attempt}")
            if inst["instance_revision"] != child.revision:
                raise ParallelError(E.RUN_REVISION_CONFLICT,
                                    f"it changed meanwhile (now {inst['status']}, revision {inst['instance_revision']})")
            check_transition(record, inst, "running")
        except ParallelError as exc:
            child.error = f"not run: {exc.message}"
            return
        now = utcnow()
        child.snapshot = tamper.take(self.project.repo.common_dir, child.branch)
        child.fence = child_proc.fence_for(self.project, self.record, child, self.tmux, self.reads)
        child_proc.engine_event(child.events, {
            "event": "engine_dispatched", "ts": now, "run_id": self.run_id, "task": self.task,
            "instance": child.id, "track": child.track, "attempt": child.attempt, "argv": child.argv,
            "cwd": child.worktree, "fence": "pid-namespace" if child.fence.mounts else cgroup.in_force(),
            **child.fence.record(), **({"profile": child.profile.record()} if child.profile is not None else {}),
        })
        child.ran = True
        try:
            child.popen = child_proc.start(child, self.base_env, self.task, self.run_id, self.tmux)
        except START_ERRORS as exc:
            child_proc.record_cannot_start(self.project, record, inst, child, exc, now)
            return
        faults.point("run.after_start")  # started, its start not yet written
        self.watchdog.started(child.pid, child.scope)
        child_proc.follow_waiting(child, self.tmux)
        child.started = time.monotonic()
        if self.timeout is not None:
            child.deadline = child.started + self.timeout
        model.start(record, inst, child.pid, os.getpid(), now, str(child.log), str(child.events))
        model.bump(inst)

    # -- watching and ending -----------------------------------------------------------
    def _stop_all(self, active: dict[int, child_proc.Child]) -> None:
        now = time.monotonic()
        for child in active.values():
            if child_proc.exited(child):
                continue  # it finished on its own before we asked
            if child.reason is None:
                child.reason = self.stopping
            if child.term_at is None:
                child.term_at = now
                killpg(child.pid, signal.SIGTERM)

    def _settle(self, child: child_proc.Child) -> None:
        """Once no sibling of this run is live: its objects and refs taken
        into the shared store (closing its fence), what it changed that it
        may not put back, its leftovers committed, its head read."""
        child_proc.after_exit(self.project, self.task, self.run_id, child, _ran_beside(self.children, child))
        if self.commit_leftovers:
            leftovers.commit(self.project, self.record, child)
        faults.point("run.after_commit")
        child.head = self.project.repo.ref_target(f"refs/heads/{child.branch}")
        if child.status == "succeeded" and child.head is not None:
            inst = find_instance(self.record, child.id)
            repo = self.project.repo
            if repo.tree_of(child.head) == repo.tree_of(model.unchanged_from(self.record, inst)):
                child.outcome = model.NO_CHANGE
        # Done with the worktree: an abort waiting on the claim may go on.
        child_proc.release_claim(child)

    def _kill_everything(self, active: dict[int, child_proc.Child]) -> None:
        """On an unexpected error: leave nothing running, even unrecorded."""
        for child in active.values():
            killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE
        while time.monotonic() < deadline and not all(child_proc.exited(c) for c in active.values()):
            time.sleep(POLL)
        for child in active.values():
            assert child.popen is not None
            killpg(child.pid, signal.SIGKILL)  # before reaping: the leader still holds the group id
            self.watchdog.ended(child.pid)
            child.popen.wait()
            child_proc.finish_log(child)
            if child.slot is not None:
                child.slot.release()
        active.clear()

    # -- reporting -------------------------------------------------------------------
    def _report(self, active: dict[int, child_proc.Child], queue: deque[child_proc.Child]) -> None:
        if self.progress is None:
            return
        done = [c for c in self.children if c.finished_at is not None]
        self.progress({
            "task": self.task, "run_id": self.run_id, "total": len(self.children), "running": len(active),
            "queued": len(queue), "succeeded": sum(1 for c in done if c.status == "succeeded"),
            "failed": sum(1 for c in done if c.status in ("failed", "aborted")),
            "elapsed_s": round(time.monotonic() - self.t0, 1), "waiting_for_slot": self.waiting_for_slot,
            "max_total": self.max_total, "stopping": self.stopping,
        })


def _ended(runner: _Runner, child: child_proc.Child) -> bool:
    """Its command ended: nothing of its group is left running, and how
    it ended is said (``engine_exited``); what it made is taken in later
    (``_settle``).  True instead when its sandbox was never set up (the
    agent never ran) and it was started again (``_start_again``)."""
    assert child.popen is not None
    # Anything the command left running in its group would go on writing
    # to the worktree after its work is committed.
    killpg(child.pid, signal.SIGKILL)
    # ... and whatever daemonized out of the group (setsid, double fork):
    # in bwrap's PID namespace, gone with its init, which the group's kill
    # reached and ``reap_group`` collects (see ``reaper``); swept by scope
    # otherwise, or if that init is still there.
    in_namespace = child.status_fd is not None and reaper.is_subreaper()  # (its init comes to us)

    def sweep() -> None:
        reaper.sweep({child.scope})
        keep = {c.pid for c in runner.children if c.popen is not None and c is not child and not child_proc.exited(c)}
        reaper.sweep_orphans(child.scope, keep | {runner.watchdog.pid or 0, child.pid})

    if not in_namespace:
        sweep()
    runner.watchdog.ended(child.pid)
    rc = child.popen.wait()
    if not reaper.reap_group(child.pid) and in_namespace:
        sweep()
    child_proc.finish_log(child)  # (its last line is read next, and notes may be appended)
    never_ran = child_proc.never_ran(child, rc)
    if never_ran and _start_again(runner, child):
        return True
    child.duration = round(time.monotonic() - child.started, 3)
    if child.slot is not None:
        child.slot.release()
    leftovers.classify_exit(child, rc, runner.timeout)
    if never_ran:
        child.error = ("the sandbox could not be set up, so the agent never ran (its log says what bwrap said); "
                       f"run it again: git parallel retry {runner.task} {child.id}")
    child.finished_at = utcnow()
    child_proc.engine_event(child.events, {
        "event": "engine_exited", "ts": child.finished_at, "run_id": runner.run_id, "instance": child.id,
        "attempt": child.attempt, "pid": child.pid, "exit_code": child.exit_code, "duration_s": child.duration,
        "status": child.status, "error": child.error,
        **({"log_left_out": child.log_left_out} if child.log_left_out else {}),
    })
    return False


def _start_again(runner: _Runner, child: child_proc.Child) -> bool:
    """bwrap ended before the agent ran (what it covers changed under it:
    a socket of the host gone before it was covered): nothing of the
    attempt ran, so it starts in a sandbox made afresh, its new pid
    recorded.  False when it may not (``namespace.sandboxes_allowed`` made, the run
    stopping, the instance decided elsewhere): then it ends as failed,
    its log saying why."""
    note = "git-parallel: the sandbox could not be set up, so the agent never ran"
    if child.sandboxes >= namespace.sandboxes_allowed(child.bwrap_said) or runner.stopping:
        child_proc.engine_event(child.events, {"event": "engine_sandbox_failed", "ts": utcnow(),
                                               "instance": child.id, "sandboxes": child.sandboxes})
        with open(child.log, "ab") as log:
            log.write(f"\n{note} ({child.sandboxes} sandboxes made)\n".encode())
        return False
    with open(child.log, "ab") as log:
        log.write(f"\n{note}; it starts in a sandbox made afresh\n".encode())
    try:
        child.popen = child_proc.start(child, runner.base_env, runner.task, runner.run_id, runner.tmux)
    except START_ERRORS:
        return False
    runner.watchdog.started(child.pid, child.scope)

    def mutate(record: RunRecord) -> None:
        inst = find_instance(record, child.id)
        if (inst["attempt"], inst["instance_revision"], inst["status"]) != (child.attempt, child.revision, "running"):
            raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {child.id} changed meanwhile")
        inst["pid"] = child.pid
        model.bump(inst)

    try:
        record, _ = runner.store.update(runner.task, mutate)
    except ParallelError:
        # Decided elsewhere (abort): what was started here goes at once.
        killpg(child.pid, signal.SIGKILL)
        runner.watchdog.ended(child.pid)
        child.popen.wait()
        reaper.reap_group(child.pid)
        child_proc.finish_log(child)
        child_proc.never_ran(child, 0)  # (closes its status pipe)
        return False
    runner.record = record
    child.revision = find_instance(record, child.id)["instance_revision"]
    child.started = time.monotonic()
    if runner.timeout is not None:
        child.deadline = child.started + runner.timeout
    return True


def _decided_elsewhere(runner: _Runner) -> list[child_proc.Child]:
    """The held attempts that ``abort`` recorded meanwhile (it waits for
    their runner to let go of them): taken in now, not when their
    siblings end."""
    now = time.monotonic()
    if now - runner.looked < HELD_POLL:
        return []
    runner.looked = now
    try:
        record = runner.store.load(runner.task)
    except ParallelError:
        return []
    decided = []
    for child in runner.held:
        inst = find_instance(record, child.id)
        if inst["status"] != "running" or inst["attempt"] != child.attempt:
            decided.append(child)
    runner.held = [c for c in runner.held if c not in decided]
    return decided


def _summary(runner: _Runner, notes_error: str | None) -> RunSummary:
    rows = _summary_rows(runner.record, runner.children)
    return {"task": runner.task, "run_id": runner.run_id, "command": runner.argv, "jobs": runner.jobs,
            "max_total": runner.max_total, "timeout": runner.timeout, "instances": rows, "counts": _counts(rows),
            "elapsed_s": round(time.monotonic() - runner.t0, 3), "interrupted": runner.stopping,
            "notes_error": notes_error, "run_status": runner.record["status"],
            "notify_warnings": runner.notifier.warnings,
            "profiles": list({c.profile.name: c.profile.record() for c in runner.children if c.profile}.values())}


def _notify_ended(notifier: Notifier, record: RunRecord, ended: list[child_proc.Child]) -> None:
    """An event per attempt that ended (or could not start), as recorded."""
    for child in ended:
        inst = find_instance(record, child.id)
        notifier.send(notify.attempt_finished(record, inst, child.exit_code, child.duration, child.error))


def _notify_waiting(notifier: Notifier, record: RunRecord, active: dict[int, child_proc.Child]) -> None:
    """An event per running attempt that has just turned to waiting for input."""
    for child in active.values():
        said = child.watcher.poll() if child.watcher is not None else None
        if said is not None:
            notifier.send(notify.waiting(record, find_instance(record, child.id), said))


def _counts(rows: list[Ran]) -> dict[str, int]:
    return {s: sum(1 for r in rows if r["status"] == s) for s in ("succeeded", "failed", "aborted")}


def run(project: Project, task: str, argv: list[str], instances: list[str] | None = None,
        timeout: float | None = None, jobs: int | None = None,
        progress: Callable[[Progress], None] | None = None, tmux: bool = False) -> RunSummary:
    """Run ``argv`` in every selected instance; returns the summary.

    ``progress``, if given, is called with a small state dict whenever
    something changes (and a few times a second while anything runs)."""
    claims_proc.refuse_options(task, argv, timeout, jobs)
    binary = None
    if tmux:
        binary = tmux_proc.require_tmux()
    for attempt in range(LOCK_RETRIES + 1):
        try:
            record, claims = claims_proc.select_and_claim(project, task, instances)
            break
        except ParallelError as exc:
            # Nothing was selected or started yet: another command holding
            # the lock long only delays the run, as with its record writes.
            if exc.code != E.RESOURCE_LOCK_FAILED or attempt == LOCK_RETRIES:
                raise
    runner = _Runner(project, record, [inst for inst, _ in claims], argv, timeout, jobs, progress, tmux=binary)
    for child, (_, claim) in zip(runner.children, claims):
        child.claim = claim
    return runner.run()

