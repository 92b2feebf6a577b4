"""A project: one repository, its run store, and the helpers every verb needs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, TypeGuard

from gitflow_parallel.git.repo import Repo
from gitflow_parallel.model import InstanceRecord, RunRecord
from gitflow_parallel.state.store import Store


@dataclass
class Project:
    repo: Repo
    store: Store

    @classmethod
    def open(cls, cwd: str | os.PathLike[str] | None = None) -> "Project":
        repo = Repo.open(cwd)
        return cls(repo, Store(repo.parallel_dir))

    def tip(self, inst: InstanceRecord) -> str | None:
        return self.repo.ref_target(f"refs/heads/{inst['branch']}")

    def add_notes(self, record: RunRecord, entries: Iterable[tuple[str, str]], what: str) -> str | None:
        from gitflow_parallel.git import notes  # (pygit2: not for the verbs that only read)

        return notes.add(self.repo.pygit, record["config"]["notes_ref"], list(entries),
                         f"git-parallel: {what} ({record['task']}, {record['run_id']})", self.repo.identity())

    def instance_alive(self, record: RunRecord, inst: InstanceRecord) -> bool:
        """:func:`instance_process_alive`, or its claim still held: its
        runner is alive where its pids cannot be seen from here (another PID
        namespace: a container sharing this repository)."""
        if instance_process_alive(inst):
            return True
        from gitflow_parallel.state.claims import claim_held

        return claim_held(self.repo.parallel_dir, record["task"], inst["id"])

    def mirror_notes(self, record: RunRecord, entries: Iterable[tuple[str, str]], what: str) -> str | None:
        """Write the notes that mirror records already saved; a failure here
        must not fail a verb whose real work is done (recover rewrites missing
        notes from the records), so it is returned as a warning instead."""
        try:
            self.add_notes(record, entries, what)
        except Exception as exc:
            return (f"the notes of this {what} were not written ({type(exc).__name__}: {exc}); "
                    f"`git parallel recover {record['task']}` writes them from the records")
        return None


def notes_instance_on(record: RunRecord, commit: str | None, inst: InstanceRecord | None = None) -> bool:
    """Instance lines go on an attempt's own commits, never on a commit of
    the base branch (the spawn's base commit, or the base tip a ``retry
    --onto-current`` started from): the base is the team's branch, and a
    line per instance of every spawn (aborted ones too) would bury the
    landings in it."""
    if not commit or commit == record["base"]["commit"]:
        return False
    start = inst.get("start") if inst else None
    return not (start is not None and start.get("from") == "base-tip" and commit == start.get("commit"))


def _process_start_epoch(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), from /proc; None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b") ", 1)[1].split()
        with open("/proc/stat", "rb") as handle:
            btime = next(int(l.split()[1]) for l in handle if l.startswith(b"btime "))
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    # Field 22 of stat (index 19 after the command name) is the start time in ticks.
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def _recorded_epoch(recorded: object) -> float | None:
    """A recorded UTC time (``started_at``) in seconds since the epoch; None if it is none."""
    import datetime as _dt

    if not isinstance(recorded, str):
        return None
    try:
        return _dt.datetime.strptime(recorded, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.timezone.utc).timestamp()
    except ValueError:
        return None


def instance_process_alive(inst: InstanceRecord) -> bool:
    """Is a running instance still being run?

    Yes while its agent process is alive, and also while the ``git parallel
    run`` that started it is (it records the finish only after reaping the
    agent and committing its leftovers).  A pid alone can be recycled after a
    crash; where /proc tells when a process started, the agent must have
    started within a few seconds of ``started_at`` and the runner before it,
    or the process is somebody else's."""
    when = _recorded_epoch(inst.get("started_at"))
    pid = inst.get("pid")
    if pid_alive(pid):
        started = _process_start_epoch(pid)
        # btime has one-second resolution and the record is written just after the start.
        if started is None or when is None or abs(started - when) < 5.0:
            return True
    if _group_alive(pid):
        # The leader (a sandbox's bwrap) is gone but what it ran is not yet:
        # a namespace's processes die a moment after it.  A group id is not
        # handed out again while any member is left, so this is that group.
        return True
    runner = inst.get("runner_pid")
    if runner != os.getpid() and pid_alive(runner):
        started = _process_start_epoch(runner)
        if started is None or when is None or started <= when + 5.0:
            return True
    return False


def process_alive_since(pid: object, since: str | None) -> bool:
    """Is ``pid`` alive and the process that was there at ``since`` (a
    recorded UTC time), not a later one that got the same pid?"""
    if not pid_alive(pid):
        return False
    started, when = _process_start_epoch(pid), _recorded_epoch(since)
    return started is None or when is None or started <= when + 5.0


def _group_alive(pgid: object) -> bool:
    """Is any process of group ``pgid`` still running (not a zombie)?"""
    if not isinstance(pgid, int) or isinstance(pgid, bool) or not 1 < pgid < 1 << 31:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b") ", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] != b"Z":
            return True
    return False


def pid_alive(pid: object) -> TypeGuard[int]:
    """Is ``pid`` (a value read from a record: anything) a live process?"""
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 31:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().split(b") ")[-1][:1] != b"Z"
    except OSError:
        return True
