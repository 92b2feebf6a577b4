"""The run record store: one YAML record per task under
``<common dir>/parallel/runs/``.

Every mutation happens under one project lock (a filelock in ``parallel/``),
reloads the record from disk, applies the change, bumps ``run_revision`` and
replaces the file atomically.  A caller that decided from an earlier read
passes the revision it saw and is refused with
``PARALLEL_RUN_REVISION_CONFLICT`` when the record moved meanwhile.  Records
are validated on every load, so a file edited by hand into nonsense is reported
as ``PARALLEL_RECORD_INVALID`` naming the field, never as a traceback.

The store also keeps ``parallel/live``, a small text index of live base refs
and instance branches that the git hooks read in plain sh to decide, without
starting Python, that a ref has nothing to do with git-parallel.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, TypeVar, cast

import yaml

if TYPE_CHECKING:
    from filelock import FileLock

from gitflow_parallel import errors as E
from gitflow_parallel import faults
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import YamlTooLarge, atomic_write, env_seconds, load_yaml, utcnow
from gitflow_parallel.state import live
from gitflow_parallel import schema
from gitflow_parallel.model import FINISHED_RUN, InstanceRecord, RunRecord, bump, derive_run_status, find_instance

LOCK_TIMEOUT = env_seconds("GIT_PARALLEL_LOCK_TIMEOUT", 60.0)

T = TypeVar("T")


def _invalid(path: Path, problem: str) -> ParallelError:
    return ParallelError(
        E.RECORD_INVALID,
        f"run record {path} is invalid: {problem}",
        hint="restore it from a backup, or run `git parallel validate` to see what else is inconsistent; "
        "`git parallel recover TASK` repairs what it safely can",
    )


def validate_record(record: object, path: Path) -> RunRecord:
    """Check that a loaded record has the shape (``shapes.records.RunRecord``) and the
    invariants of schema 1; returns it unchanged."""
    if not isinstance(record, dict):
        raise _invalid(path, "the file does not hold a mapping")
    try:
        schema.check(RunRecord, record)
    except schema.ShapeError as exc:
        raise _invalid(path, f"{exc.path} {exc.problem}") from None
    checked = cast(RunRecord, record)
    _check_invariants(checked, path)
    return checked


def _check_invariants(record: RunRecord, path: Path) -> None:
    """What one field's declaration cannot say: how fields agree."""
    from gitflow_parallel.files import config_sha256

    if path.name.endswith(".yaml") and path.parent.name == "runs" and path.name != f"{record['task']}.yaml":
        raise _invalid(path, f"it names task {record['task']!r}, but its file is {path.name}")
    if config_sha256(record["config"]) != record["config_sha256"]:
        # The frozen config is what every gate, score and merge decision
        # trusts; an edit of it by hand must not pass for the original.
        raise _invalid(path, "its frozen config no longer matches config_sha256 (edited by hand?)")
    seen: set[str] = set()
    for i, inst in enumerate(record["instances"]):
        where = f"instances[{i}]"
        if inst["id"] in seen:
            raise _invalid(path, f"instance id {inst['id']!r} appears twice")
        seen.add(inst["id"])
        if inst["track"] not in record["tracks"]:
            raise _invalid(path, f"{where}.track {inst['track']!r} is not one of the run's tracks")
        if inst["branch"] != f"parallel/{record['task']}/{inst['id']}":
            raise _invalid(path, f"{where}.branch {inst['branch']!r} is not parallel/{record['task']}/{inst['id']}")


# libyaml's parser is several times faster than PyYAML's own (a 100-instance
# record: about 20 ms against 120 ms), and status, pick and every update read
# the record.  Both feed the same SafeConstructor, so the result is the
# same; but libyaml is laxer about tabs and characters YAML forbids, and its
# error marks can differ.  Our dumper escapes both, so it takes libyaml only
# for text without them and lets PyYAML have the last word on any error: a
# damaged file is accepted or refused, and described, exactly as by
# ``yaml.safe_load``.
_CSafeLoader = getattr(yaml, "CSafeLoader", None)


def parse_yaml(text: str) -> object:
    """``yaml.safe_load(text)``, through libyaml where that is the same thing."""
    if _CSafeLoader is not None and "\t" not in text and not yaml.reader.Reader.NON_PRINTABLE.search(text):
        try:
            return load_yaml(text, _CSafeLoader)[0]
        except YamlTooLarge:
            raise
        except yaml.YAMLError:
            pass
    return load_yaml(text)[0]


# A record is a few hundred KiB at most; one edited by hand (or by a process
# that could write here) into gigabytes is refused, not read into memory.
MAX_RECORD_BYTES = 64 << 20


def _where(exc: yaml.YAMLError) -> str:
    """Where a record's YAML broke, and why when it is too large to read."""
    mark = getattr(exc, "problem_mark", None)
    return (f" at line {mark.line + 1}" if mark is not None else "") + (
        f": {exc.problem}" if isinstance(exc, YamlTooLarge) else "")


def read_record_text(path: Path) -> str:
    """A record file's text, refused (``OSError``) past ``MAX_RECORD_BYTES``."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise OSError(f"it is larger than {MAX_RECORD_BYTES >> 20} MiB")
    return data.decode("utf-8")


_CSafeDumper = getattr(yaml, "CSafeDumper", None)


def dump(record: Mapping[str, object]) -> str:
    """The record as YAML.  libyaml's emitter, where PyYAML has it, writes
    the same text as the pure-Python one at a third of the cost (a record is
    written on every transition); the representer is the safe one either way."""
    if _CSafeDumper is not None:
        return yaml.dump(record, Dumper=_CSafeDumper, sort_keys=True, default_flow_style=False, allow_unicode=True)
    return yaml.safe_dump(record, sort_keys=True, default_flow_style=False, allow_unicode=True)


def _copy(record: RunRecord) -> RunRecord:
    """A deep copy of a record (plain dicts, lists and scalars), its keys in
    the sorted order that parsing its YAML gives them."""
    def copy(value: object) -> object:
        if isinstance(value, dict):
            return {k: copy(value[k]) for k in sorted(value)}
        if isinstance(value, list):
            return [copy(v) for v in value]
        return value
    return cast(RunRecord, copy(record))


def _identity(path: Path) -> tuple[int, ...] | None:
    """What ``Store._settled`` knows a record file by; None if it is gone."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _clone(value: object) -> object:
    """A deep copy of parsed YAML (plain dicts, lists and scalars), in its order."""
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _file_lock(path: Path) -> FileLock:
    """filelock loads asyncio, a large share of a verb's start: imported only
    when a verb takes the lock, so one that only reads (`status`) never pays."""
    from filelock import FileLock

    return FileLock(str(path), timeout=LOCK_TIMEOUT)


class Store:
    """Run records of one repository (its common dir)."""

    def __init__(self, parallel_dir: Path) -> None:
        self.root = parallel_dir
        self.runs_dir = parallel_dir / "runs"
        self.done_dir = parallel_dir / "runs" / "done"
        self.live_path = parallel_dir / "live"
        self.settled_path = parallel_dir / "settled"
        self._lock: FileLock | None = None
        # The last record written per file, with its text: read back unparsed while the file holds those bytes.
        self._written: dict[Path, tuple[str, RunRecord]] = {}
        # What ``load_unfinished`` parsed per file, with its text (never handed
        # out, only copies of it): ``read`` of the same bytes parses no more.
        self._parsed: dict[Path, tuple[str, object]] = {}

    # -- locking -------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        if self._lock is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = _file_lock(self.root / "lock")
        try:
            self._lock.acquire()
        except TimeoutError:  # filelock's Timeout is one
            raise ParallelError(
                E.RESOURCE_LOCK_FAILED,
                f"could not take the project lock {self.root / 'lock'} within {LOCK_TIMEOUT:.0f}s",
                hint="another git parallel command is holding it; wait for it to finish and run this again",
            ) from None
        try:
            yield
        finally:
            self._lock.release()

    # -- paths and loading ---------------------------------------------------------
    def path(self, task: str) -> Path:
        return self.runs_dir / f"{task}.yaml"

    def exists(self, task: str) -> bool:
        return self.path(task).exists()

    def read(self, path: Path) -> RunRecord:
        try:
            text = read_record_text(path)
        except FileNotFoundError:
            raise
        except (OSError, UnicodeDecodeError) as exc:
            raise _invalid(path, f"cannot be read: {exc}") from None
        known = self._written.get(path)
        if known is not None and known[0] == text:
            return _copy(known[1])
        parsed = self._parsed.get(path)
        if parsed is not None and parsed[0] == text:
            return validate_record(_clone(parsed[1]), path)
        try:
            record = parse_yaml(text)
        except yaml.YAMLError as exc:
            raise _invalid(path, f"not valid YAML{_where(exc)}") from None
        return validate_record(record, path)

    def load(self, task: str) -> RunRecord:
        path = self.path(task)
        try:
            return self.read(path)
        except FileNotFoundError:
            raise ParallelError(
                E.RUN_NOT_FOUND,
                f"no run for task {task!r}",
                hint=f"start one with `git parallel spawn {task}`; `git parallel status` lists the runs",
            ) from None

    def tasks(self) -> list[str]:
        if not self.runs_dir.is_dir():
            return []
        return sorted(p.name[: -len(".yaml")] for p in self.runs_dir.glob("*.yaml"))

    def load_all(self) -> tuple[list[RunRecord], list[tuple[str, ParallelError]]]:
        """Every current record, plus (task, error) for those that failed to load."""
        records, problems = [], []
        for task in self.tasks():
            try:
                records.append(self.load(task))
            except ParallelError as exc:
                problems.append((task, exc))
        return records, problems

    # -- settled records -----------------------------------------------------------
    # A finished run whose every instance is removed counts no live instance
    # (its lines in the live index, while it has any, are carried from the
    # index itself: see write_live_index), and its record stays as it is until
    # the task is spawned again; but every spawn read them all (counting the
    # live instances, and rebuilding the live index when no run was live),
    # parsing each, and they pile up with every task ever run.  ``settled``
    # names those records, each by the identity of the file that held it
    # when it was read and found valid (device, inode, size, modification
    # and change times in ns): a record written again is a new file (an
    # atomic replace), and one edited in place has new times, so a file
    # named there still holds what was found.  Written under the lock, not
    # synced: it only spares parsing, and one that does not read right is
    # none.
    def _settled(self) -> dict[str, tuple[int, ...]]:
        try:
            text = self.settled_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return {}
        found = {}
        for line in text.splitlines():
            parts = line.split(" ")
            if len(parts) == 6 and all(p.isdigit() for p in parts[1:]):
                found[parts[0]] = tuple(int(p) for p in parts[1:])
        return found

    def _write_settled(self, settled: dict[str, tuple[int, ...]]) -> None:
        text = "".join(f"{task} {' '.join(map(str, key))}\n" for task, key in sorted(settled.items()))
        tmp = self.settled_path.with_name(f".settled.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.settled_path)
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass

    def load_unfinished(self) -> list[RunRecord]:
        """The records of ``load_all`` whose run is not finished (merged or
        aborted), under the lock.  A record that parses to a finished run is
        left out without being validated (valid, it is left out for its
        status; invalid, for not loading) but once, when that file is first
        read: valid, with every instance removed, it is settled (see above)
        and not read again."""
        records = []
        known_settled = self._settled()
        now_settled: dict[str, tuple[int, ...]] = {}
        for task in self.tasks():
            path = self.path(task)
            try:
                with open(path, "rb") as handle:
                    info = os.fstat(handle.fileno())
                    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
                    if known_settled.get(task) == identity:
                        now_settled[task] = identity
                        continue
                    data = handle.read(MAX_RECORD_BYTES + 1)
                if len(data) > MAX_RECORD_BYTES:
                    continue
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue  # (gone meanwhile, or fails to load: load_all reports it)
            known = self._written.get(path)
            parsed = self._parsed.get(path)
            if known is not None and known[0] == text:
                record: object = _copy(known[1])
            elif parsed is not None and parsed[0] == text:
                record = _clone(parsed[1])
            else:
                try:
                    record = parse_yaml(text)
                except yaml.YAMLError:
                    continue
                # Kept for a read of every record that may follow under the
                # same lock (the live index rebuilt when there was none).
                self._parsed[path] = (text, _clone(record))
            status = record.get("status") if isinstance(record, dict) else None
            if isinstance(status, str) and status in FINISHED_RUN:
                try:
                    finished = validate_record(_clone(record), path)
                except ParallelError:
                    continue
                if all(i.get("removed") for i in finished["instances"]):
                    now_settled[task] = identity
                continue
            try:
                records.append(validate_record(record, path))
            except ParallelError:
                continue
        if now_settled != known_settled:
            self._write_settled(now_settled)
        return records

    # -- writing ---------------------------------------------------------------
    def _write(self, record: RunRecord) -> None:
        path = self.path(record["task"])
        validate_record(record, path)
        text = dump(record)
        self._written.pop(path, None)
        atomic_write(path, text)
        self._written[path] = (text, _copy(record))
        self.write_live_index(record)

    def previous_run(self, task: str) -> RunRecord | None:
        """The task's finished run that a new spawn may move aside, or None if
        it has no record; refuses (``PARALLEL_RUN_EXISTS``) while the task has
        a live run, a record that does not load, or a finished run whose
        worktrees are still there."""
        path = self.path(task)
        if not path.exists():
            return None
        try:
            old = self.read(path)
        except ParallelError:
            raise ParallelError(
                E.RUN_EXISTS,
                f"task {task!r} already has a run record, and it does not load",
                hint="run `git parallel validate` and repair or remove it first",
            ) from None
        if old["status"] not in FINISHED_RUN:
            raise ParallelError(
                E.RUN_EXISTS,
                f"task {task!r} already has a live run {old['run_id']} ({old['status']})",
                hint=f"see `git parallel status {task}`; finish it with merge, or "
                f"`git parallel abort {task}` (which also cleans up)",
            )
        kept = [i["id"] for i in old["instances"] if not i.get("removed")]
        if kept:
            # Its branches and worktrees (kept losers, or a cleanup that was
            # refused) would collide, and once the record is moved aside
            # `cleanup TASK` could no longer find them.
            raise ParallelError(
                E.RUN_EXISTS,
                f"the {old['status']} run {old['run_id']} of {task!r} still has the worktrees "
                f"and branches of instance(s) {', '.join(kept)}",
                hint=f"remove them first with `git parallel cleanup {task}` "
                     "(their tips are kept under refs/parallel/archive/)",
            )
        return old

    def create(self, record: RunRecord) -> RunRecord:
        """Store a new run; refuse if the task already has a live one.  A
        finished run (merged or aborted) of the task is kept in runs/done/."""
        with self.lock():
            old = self.previous_run(record["task"])
            if old is not None:
                self.retire(old)
            record["run_revision"] = 1
            self._write(record)
            return record

    def retire(self, record: RunRecord) -> None:
        """Keep a finished run's record at runs/done/<run_id>.yaml.

        A copy, not a move: the caller then replaces runs/<task>.yaml with the
        new record in one rename, so a crash in between leaves the old record
        in place (and a harmless copy), never a task without any record."""
        self.done_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.done_dir / f"{record['run_id']}.yaml", self.path(record["task"]).read_bytes())
        faults.point("spawn.after_retire")

    # -- the spawn marker ---------------------------------------------------------
    def spawned_path(self, run_id: str) -> Path:
        return self.root / "spawned" / run_id

    def mark_spawned(self, run_id: str) -> None:
        """Say that every branch and worktree of the run's spawn was made, so
        that recover tells a spawn that never finished (roll it back) from a
        worktree lost later (make it again)."""
        path = self.spawned_path(run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, utcnow() + "\n")

    def spawned(self, run_id: str) -> bool:
        return self.spawned_path(run_id).exists()

    def remove(self, task: str) -> None:
        with self.lock():
            try:
                os.unlink(self.path(task))
            except FileNotFoundError:
                pass
            self.write_live_index()

    def update(self, task: str, mutate: Callable[[RunRecord], T],
               expected_revision: int | None = None) -> tuple[RunRecord, T]:
        """Apply ``mutate`` to the current record under the lock and save it.

        If ``mutate`` raises, nothing is written."""
        with self.lock():
            record = self.load(task)
            if expected_revision is not None and record["run_revision"] != expected_revision:
                raise ParallelError(
                    E.RUN_REVISION_CONFLICT,
                    f"run {record['run_id']} is at revision {record['run_revision']}, not {expected_revision} as read",
                    hint=f"someone else changed it meanwhile; read it again (`git parallel status {task}`) and retry",
                )
            return self.update_loaded(record, mutate)

    def update_loaded(self, record: RunRecord, mutate: Callable[[RunRecord], T]) -> tuple[RunRecord, T]:
        """:meth:`update` of a record the caller loaded under the lock it
        still holds (a verb that checked the record before changing it, so
        it is read once)."""
        if self._lock is None or not self._lock.is_locked:
            raise RuntimeError("update_loaded outside the project lock")
        result = mutate(record)
        record["status"] = derive_run_status(record)
        record["run_revision"] += 1
        record["updated_at"] = utcnow()
        self._write(record)
        return record, result

    def update_instance(self, task: str, inst_id: str, mutate: Callable[[RunRecord, InstanceRecord], T],
                        expected_instance_revision: int | None = None, expected_attempt: int | None = None,
                        expected_revision: int | None = None) -> tuple[RunRecord, T]:
        def apply(record: RunRecord) -> T:
            inst = find_instance(record, inst_id)
            if expected_attempt is not None and inst["attempt"] != expected_attempt:
                raise ParallelError(
                    E.ATTEMPT_MISMATCH,
                    f"instance {inst_id} is on attempt {inst['attempt']}, not {expected_attempt}",
                    hint="it was retried meanwhile; read the run again and act on the current attempt",
                )
            if expected_instance_revision is not None and inst["instance_revision"] != expected_instance_revision:
                raise ParallelError(
                    E.RUN_REVISION_CONFLICT,
                    f"instance {inst_id} is at revision {inst['instance_revision']}, not {expected_instance_revision} as read",
                    hint=f"someone else changed it meanwhile; read it again (`git parallel status {task}`) and retry",
                )
            result = mutate(record, inst)
            bump(inst)
            return result

        return self.update(task, apply, expected_revision)

    # -- the hooks' index ---------------------------------------------------------
    def write_live_index(self, changed: RunRecord | None = None) -> None:
        """Rewrite ``parallel/live`` (format: ``state/live``) from the live
        records, called under the lock.  With ``changed`` (the record just
        written), only that task's lines are recomputed and the others are
        taken from the current index, which every write keeps exact; without
        it (or with no index to start from) every record is read.  A record
        that no longer loads keeps the lines the index last had for it, so the
        hooks go on guarding its branches until it is repaired.  A finished
        run no record read here names (retired to runs/done/ by a new spawn of
        its task, or settled) keeps its lines until its archive refs are
        gone: read without ``changed``, as ``prune`` does after deleting them."""
        previous_text = live.read_text(self.live_path)
        previous = live.lines_by_task(previous_text or "")
        by_run = live.lines_by_run(previous_text or "")
        incremental = changed if previous_text is not None else None
        git_dir = self.live_path.parent.parent
        archived: set[str] | None = None

        def has_archive(run_id: str) -> bool:
            nonlocal archived
            if archived is None:
                archived = live.archived_runs(git_dir)
            return run_id in archived

        lines: list[str] = []
        seen: set[str] = set()
        settled = self._settled() if incremental is None else {}
        for task in self.tasks():
            if incremental is not None and task != incremental["task"]:
                kept = previous.get(task, [])
                lines.extend(kept)
                seen.update(line.split()[3] for line in kept)
                continue
            if task in settled and _identity(self.path(task)) == settled[task]:
                continue  # valid, finished, every instance removed: no line of its own (see _settled)
            try:
                record = incremental if incremental is not None else self.read(self.path(task))
            except FileNotFoundError:
                continue
            except ParallelError:
                kept = previous.get(task, [])
                lines.extend(kept)
                seen.update(line.split()[3] for line in kept)
                continue
            seen.add(record["run_id"])
            lines.extend(live.run_lines(record, record["status"] in FINISHED_RUN, by_run.get(record["run_id"]),
                                        git_dir, has_archive))
        for run_id, kept in by_run.items():
            if run_id not in seen and live.is_finished(kept) and (incremental is not None or has_archive(run_id)):
                lines.extend(kept)
        live.write(self.live_path, lines, previous_text if incremental is not None else None)
