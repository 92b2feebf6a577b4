"""One agent's process as the runner tracks it: its command with the
placeholders filled in, its log and events files, how it starts (in a
session of its own, in its scope's cgroup where there is one), how its
start, finish or failure to start is recorded, and its deadline."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel import model, profiles
from gitflow_parallel import environ as proc_env
from gitflow_parallel.evidence import engine_copy
from gitflow_parallel.files import append_jsonl, utcnow
from gitflow_parallel.git import tamper
from gitflow_parallel.model import InstanceRecord, RunRecord, find_instance
from gitflow_parallel.state.project import Project
from gitflow_parallel.proc import cgroup, namespace, reaper, runlog, sandbox
from gitflow_parallel.proc.slots import Slot
from gitflow_parallel.proc.supervise import EXIT_NOT_EXECUTABLE, KILL_GRACE, cannot_start, killpg
from gitflow_parallel.proc.supervise import exited as _leader_exited

if TYPE_CHECKING:  # imported where an attempt is followed (``follow_waiting``)
    from gitflow_parallel.proc.waiting import Watcher

PLACEHOLDERS = ("task", "instance", "track", "attempt", "worktree", "feedback")


def logs_dir(parallel_dir: Path, run_id: str) -> Path:
    return parallel_dir / "logs" / run_id


def events_dir(parallel_dir: Path, run_id: str) -> Path:
    return parallel_dir / "events" / run_id


def own_events(events: Path) -> Path:
    """The runner's own copy of its events about an attempt (``evidence.engine_copy``)."""
    return engine_copy(events)


def engine_event(events: Path, event: dict[str, object]) -> None:
    """Say the runner's ``event`` in the attempt's events file, where people
    and tools read it beside the agent's own, and in the runner's copy, from
    which the evidence pack counts it (``judge/check.engine_evidence``)."""
    append_jsonl(events, event)
    append_jsonl(own_events(events), event)


def substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    """Replace the documented placeholders only; every other character,
    braces included, stays as given."""
    out = []
    for arg in argv:
        for key in PLACEHOLDERS:
            arg = arg.replace("{" + key + "}", values[key])
        out.append(arg)
    return out


@dataclass
class Child:
    """One selected instance as the runner tracks it."""

    id: str
    track: str
    attempt: int
    revision: int  # instance_revision expected by the next write
    worktree: str
    branch: str
    argv: list[str]
    log: Path
    events: Path
    feedback: str | None = None  # the path of the feedback on the previous attempt
    slot: Slot | None = None
    claim: Slot | None = None  # this runner's claim on the instance (see slots)
    scope: str = ""  # GIT_PARALLEL_SCOPE of its processes (see reaper)
    popen: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    deadline: float | None = None
    term_at: float | None = None
    killed: bool = False
    reason: str | None = None  # "timeout" or the name of the stop signal
    # outcome
    ran: bool = False
    status: str | None = None
    exit_code: int | None = None
    error: str | None = None
    duration: float | None = None
    committed: str | None = None
    outcome: str | None = None  # model.NO_CHANGE when it succeeded having changed nothing
    head: str | None = None
    finished_at: str | None = None
    snapshot: tamper.Snapshot | None = None  # what no attempt may change, as it was at the start (git/tamper)
    status_fd: int | None = None  # the pipe bwrap writes its status to (namespace layer, not under tmux)
    sandboxes: int = 0  # sandboxes made for this attempt (one more each time bwrap's setup failed)
    bwrap_said: str = ""  # the last line of its log when its sandbox was not set up (``never_ran``)
    fence: sandbox.Fence | None = None  # the fence it runs in (proc/sandbox)
    tampered: list[str] | None = None  # what it changed of that (restored)
    tmux_status: Path | None = None  # under --tmux: the status file of its window (tmux.py)
    main: str | None = None  # the main worktree (its PYTHONPATH entries there name the same place here)
    watcher: Watcher | None = None  # whether it waits for input (proc/waiting)
    profile: profiles.Profile | None = None  # the agent CLI it runs, if a known one (profiles)
    log_limit: int = runlog.DEFAULT_LIMIT  # run_log_bytes (proc/runlog)
    pump: runlog.Pump | None = None  # drains its output into its capped log while it runs
    log_left_out: int = 0  # bytes of its output its log left out (past the cap)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid


def start(child: Child, base_env: dict[str, str], task: str, run_id: str,
          tmux_binary: str | None) -> subprocess.Popen[bytes]:
    """Start the agent of ``child`` in its worktree, in a session (process group)
    of its own, its output appended to its log; under ``--tmux`` a stand-in runs
    it in a tmux window and exits with its status."""
    env = dict(base_env)
    env.update({
        "GIT_PARALLEL_TASK": task, "GIT_PARALLEL_RUN_ID": run_id,
        "GIT_PARALLEL_INSTANCE": child.id, "GIT_PARALLEL_TRACK": child.track,
        "GIT_PARALLEL_ATTEMPT": str(child.attempt), "GIT_PARALLEL_WORKTREE": child.worktree,
        "GIT_PARALLEL_EVENTS": str(child.events), reaper.SCOPE_ENV: child.scope,
    })
    if child.feedback:
        env["GIT_PARALLEL_FEEDBACK"] = child.feedback
    if child.profile is not None:
        env.update({k: v for k, v in child.profile.env.items() if k not in env})  # the user's own stand
    if child.main:
        proc_env.move_pythonpath(env, child.main, child.worktree)
    if child.fence is not None:
        sandbox.agent_env(child.fence, env)
    # Under --tmux the stand-in is not fenced (it talks to tmux and writes
    # the status file); the pane fences the agent by the same paths.
    spawner = child.fence if tmux_binary is None else None
    argv = child.argv
    if tmux_binary is not None:
        # A stand-in that runs the command in a tmux window and exits with its status.
        from gitflow_parallel.proc import tmux

        status = child.tmux_status = child.log.with_name(child.log.name[:-len(".log")] + ".tmux-status.json")
        plan = child.fence.plan if child.fence is not None else None
        # The pane starts the agent inside the same namespace (bwrap), or
        # fences it by the same Landlock paths (plan).
        inner = child.fence.wrap(child.argv, child.worktree, env) if child.fence is not None else child.argv
        argv = tmux.waiter_argv(tmux_binary, tmux.session_name(task), child.id, child.worktree, child.log,
                                status, inner, plan, bwrap=child.fence is not None and child.fence.mounts is not None,
                                log_limit=child.log_limit)
    status_w: int | None = None
    if tmux_binary is None:
        if child.fence is not None and child.fence.mounts is not None:
            # bwrap says through it whether the agent ran at all (``never_ran``).
            child.status_fd, status_w = os.pipe()
        wrapped = child.fence.wrap(argv, child.worktree, env, status_w) if child.fence is not None else argv
        argv = cgroup.wrap(argv, child.scope, child.worktree, env) if wrapped is argv else wrapped
    child.sandboxes += 1
    # Through a pipe this process drains: the log is capped (proc/runlog).
    child.pump = pump = runlog.Pump(child.log, child.log_limit)
    fd = pump.fd

    def begin() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, cwd=child.worktree, env=env, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                start_new_session=True, pass_fds=() if status_w is None else (status_w,))

    try:
        return spawner.spawn(begin) if spawner is not None else begin()
    except BaseException:
        never_ran(child, 0)  # (closes the pipe)
        pump.started()
        finish_log(child)
        raise
    finally:
        if child.pump is not None:
            pump.started()  # the child has its own copy
        if status_w is not None:
            os.close(status_w)
        if child.fence is not None:
            child.fence.applied()


def finish_log(child: Child) -> None:
    """Wait for the end of the agent's output (its group is gone) and
    close its log: before anything reads the log's last line or writes to it."""
    pump, child.pump = child.pump, None
    if pump is not None:
        child.log_left_out += pump.finish()


def never_ran(child: Child, rc: int) -> bool:
    """Did the agent's sandbox end, with status ``rc``, before the agent
    ran (bwrap's setup failed: ``namespace.never_ran``)?  Reads and closes
    the status pipe."""
    if child.status_fd is None:
        return _pane_never_ran(child, rc)
    status = namespace.read_status(child.status_fd)
    os.close(child.status_fd)
    child.status_fd = None
    if rc != 1 or child.reason is not None or not namespace.never_ran(status):
        return False
    child.bwrap_said = namespace.last_line(child.log)
    return not namespace.exec_failed(child.bwrap_said)


def _pane_never_ran(child: Child, rc: int) -> bool:
    """Under ``--tmux``: did the pane say its bwrap ended before the agent
    ran (``tmux.never_ran``)?"""
    if child.tmux_status is None or rc != 1 or child.reason is not None:
        return False
    from gitflow_parallel.proc import tmux

    if not tmux.never_ran(child.tmux_status):
        return False
    child.bwrap_said = namespace.last_line(child.log)
    return True


def exited(child: Child) -> bool:
    """Has the leader exited?  Asked without reaping it, so that its pid,
    and with it the process group id, stays reserved until we clear the
    group."""
    return _leader_exited(child.pid)


def release_claim(child: Child) -> None:
    if child.claim is not None:
        child.claim.release()
        child.claim = None


def record_finish(record: RunRecord, child: Child) -> None:
    inst = find_instance(record, child.id)
    if inst["attempt"] != child.attempt or inst["instance_revision"] != child.revision or inst["status"] != "running":
        # Someone (abort, recover) decided about it meanwhile; theirs stands.
        child.error = (f"{child.error + '; ' if child.error else ''}not recorded: the instance changed "
                       f"meanwhile (now {inst['status']}, attempt {inst['attempt']})")
        child.status = inst["status"]
        return
    extra = {"tampered": child.tampered} if child.tampered else {}
    model.finish(record, inst, child.status or "failed", outcome=child.outcome, exit_code=child.exit_code,
                 error=child.error, finished_at=child.finished_at, head=child.head, **extra)
    model.bump(inst)


def make_child(project: Project, record: RunRecord, argv: list[str], inst: InstanceRecord) -> Child:
    """The runner's view of one claimed instance: its command with the
    placeholders filled in, its log and events files."""
    from gitflow_parallel.state import feedback

    values = {"task": record["task"], "instance": inst["id"], "track": inst["track"],
              "attempt": str(inst["attempt"]), "worktree": inst["worktree"], "feedback": feedback.argument(inst)}
    name = f"{inst['id']}.{inst['attempt']}"
    return Child(scope=reaper.agent_scope(record["run_id"], inst["id"], inst["attempt"]),
        id=inst["id"], track=inst["track"], attempt=inst["attempt"], revision=inst["instance_revision"],
        worktree=inst["worktree"], branch=inst["branch"], argv=substitute(inst.get("agent_command") or argv, values),
        log=logs_dir(project.repo.parallel_dir, record["run_id"]) / f"{name}.log",
        events=events_dir(project.repo.parallel_dir, record["run_id"]) / f"{name}.jsonl",
        feedback=inst.get("feedback"),
        main=str(project.repo.main_workdir) if project.repo.main_workdir else None,
        profile=profiles.recognise(inst.get("agent_command") or argv, run_id=record["run_id"]),
        log_limit=int(record["config"].get("run_log_bytes", runlog.DEFAULT_LIMIT)),
    )


def record_cannot_start(project: Project, record: RunRecord, inst: InstanceRecord, child: Child,
                        exc: Exception, now: str) -> None:
    """The command could not be started (not found, not executable, the
    worktree gone): the instance fails, said in its log, events and record."""
    if child.fence is not None:
        child.fence.close()
    code, message = cannot_start(child.argv[0], exc)
    if getattr(exc, "filename", None) == child.worktree or not os.path.isdir(child.worktree):
        code, message = EXIT_NOT_EXECUTABLE, f"the worktree {child.worktree} is gone"
    with open(child.log, "a", encoding="utf-8") as handle:
        handle.write(f"git-parallel: {message}\n")
    child.status, child.exit_code, child.error, child.duration = "failed", code, message, 0.0
    child.finished_at = now
    child.head = project.repo.ref_target(f"refs/heads/{child.branch}") or inst["head"]
    model.finish(record, inst, "failed", pid=None, started_at=now, finished_at=now, exit_code=code,
                 error=message, head=child.head, log=str(child.log), events=str(child.events))
    model.bump(inst)
    engine_event(child.events, {
        "event": "engine_exited", "ts": now, "run_id": record["run_id"], "instance": child.id,
        "attempt": child.attempt, "exit_code": code, "duration_s": 0.0, "status": "failed", "error": message,
    })


def enforce_deadlines(active: dict[int, Child], now: float) -> None:
    """SIGTERM a group past its timeout; SIGKILL it once the grace has passed too."""
    for child in active.values():
        if child.term_at is None and child.deadline is not None and now >= child.deadline:
            child.reason = child.reason or "timeout"
            child.term_at = now
            killpg(child.pid, signal.SIGTERM)
        elif child.term_at is not None and not child.killed and now >= child.term_at + KILL_GRACE:
            child.killed = True
            killpg(child.pid, signal.SIGKILL)



def fence_for(project: Project, record: RunRecord, child: Child, tmux: str | None,
              reads: sandbox.Reads | None = None) -> sandbox.Fence:
    """The Landlock fence of the attempt (``sandbox``), or none, saying why
    (``reads``: the run's cache of read rules); under ``--tmux`` the pane
    applies it (``tmux``)."""
    child.events.touch()  # the agent may append to it (GIT_PARALLEL_EVENTS)
    # Its feedback (GIT_PARALLEL_FEEDBACK) is in git-parallel's folder, which
    # the fence hides (a sibling's logs and feedback are there): its own file
    # is given it, as its events file is.  Nothing reads it back but a start
    # of this same attempt ({feedback}).
    files = [child.events]
    if child.feedback and os.path.isfile(child.feedback) and not os.path.islink(child.feedback):
        files.append(Path(child.feedback))
    config: Mapping[str, object] = record["config"]
    if child.profile is not None:
        # Its CLI's own folders, as if listed under sandbox_write (the user's list still adds to them).
        child.profile.prepare()
        config = {**config, "sandbox_write": [*(record["config"].get("sandbox_write") or []), *child.profile.writes]}
    return sandbox.for_agent(project.repo.common_dir, Path(child.worktree), child.branch, config,
                             child.scope, files, reads, project.repo.main_workdir)


def after_exit(project: Project, task: str, run_id: str, child: Child, busy: set[str] | None = None) -> None:
    """After the attempt ended: its fence's temporary folder goes, and what
    it changed that no attempt may is restored (``git/tamper``); such an
    attempt fails with ``PARALLEL_AGENT_TAMPERED``, said in its error, its
    record (``tampered``) and an ``engine_tampered`` event.  ``busy``: the
    branches of this runner's other attempts that ran meanwhile."""
    refused: list[str] = []
    if child.fence is not None:
        child.fence.close()
        refused = child.fence.refused_objects
    if refused:
        # Objects whose content is not what their name says were never
        # taken into the shared store: what names them cannot be judged.
        said = (f"{E.AGENT_TAMPERED}: what its git made could not all be taken in ({len(refused)}: "
                f"{'; '.join(r if len(r) <= 160 else '…' + r[-160:] for r in refused[:3])}): objects whose content "
                "does not match their name, refs to commits that are not there, and files of its admin folder git "
                "must not read (a FIFO, a link, a sparse or oversized file) are never taken in")
        child.status = "failed"
        child.error = f"{child.error}; {said}" if child.error else said
    if child.snapshot is None:
        return
    # Every other instance branch is its own agent's to move (see tamper),
    # but for the idle ones of its task (``moved_siblings``).
    finding = tamper.check(project.repo.pygit, child.snapshot, [tamper.INSTANCE_BRANCHES])
    moved = moved_siblings(project, task, child.snapshot, busy or set())
    if moved:  # the snapshot's values of the task's branches are the truth
        tamper.restore(project.repo.pygit, dataclasses.replace(child.snapshot, refs=child.snapshot.siblings), moved)
        finding.changes += moved
    if not finding.changes:
        return
    child.tampered = finding.paths
    said = f"{E.AGENT_TAMPERED}: it changed what no attempt may change: {finding.describe()}"
    child.status = "failed"
    child.error = f"{child.error}; {said}" if child.error else said
    engine_event(child.events, {
        "event": "engine_tampered", "ts": utcnow(), "run_id": run_id, "instance": child.id,
        "attempt": child.attempt, "code": E.AGENT_TAMPERED, "paths": finding.paths,
        "restored": [c.path for c in finding.changes if c.restored]})


def moved_siblings(project: Project, task: str, before: tamper.Snapshot, busy: set[str]) -> list[tamper.Change]:
    """The branches of the task that moved while the attempt ran and that
    nobody else was moving: an instance that is not running and whose
    recorded head is what its branch held at the attempt's start (the
    record is read only when such a branch moved)."""
    now = tamper.task_refs(project.repo.common_dir, before.own)
    changed = {n for n in set(before.siblings) | set(now) if before.siblings.get(n) != now.get(n) and n not in busy}
    if not changed:
        return []
    try:
        record = project.store.load(task)
    except ParallelError:
        return []  # a record that does not load says nothing of who moved what; validate reports it
    idle = {f"refs/heads/{i['branch']}": i.get("head") for i in record["instances"] if i["status"] != "running"}
    return [tamper.Change(n, "changed" if n in now else "removed") for n in sorted(changed)
            if n in idle and idle[n] == before.siblings.get(n)]


def follow_waiting(child: Child, tmux_binary: str | None) -> None:
    """Start following whether the started ``child`` waits for input: its
    events file always, its terminal under ``--tmux`` (``waiting``)."""
    from gitflow_parallel.proc import tmux, waiting

    probe = None
    if tmux_binary is not None and child.tmux_status is not None:
        probe = waiting.TerminalProbe(tmux_binary, tmux.pane_file(child.tmux_status), waiting.quiet_seconds())
    child.watcher = waiting.Watcher(child.events, probe)
