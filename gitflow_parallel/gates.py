"""Gates and scores: running the checks of a run's frozen configuration in an
instance's worktree, fingerprinting what they saw, and turning the outcome
into an evidence pack bound to one exact commit and tree (``check``); and
running the enforced gates once more on an arbitrary tree (``verify_tree``,
used by merge before the base moves).

Where the gates come from.  Always ``record["config"]["gates"]``, the
configuration frozen from the *base commit* at spawn.  The worktree's own
``.gitparallel.yaml`` is never read, so an agent that weakens a gate in its
branch changes nothing about how it is judged.

Running one gate.  Its argv (a list; never a shell) runs in the worktree as
its own process group (its own session), stdin closed, stdout and stderr to
``<common>/parallel/logs/<run_id>/<id>.<attempt>.gate-<name>.log``.  Its
environment is ours without any inherited ``GIT_PARALLEL_*`` or
``GIT_DIR``-style variables (which would point git at the wrong repository or
misdescribe the instance), plus the gate's ``env``, plus ``GIT_PARALLEL_TASK``,
``_RUN_ID``, ``_BASE`` (the base commit), ``_INSTANCE``, ``_TRACK``,
``_ATTEMPT`` and ``_WORKTREE``.
``GIT_PARALLEL_EVENTS`` is deliberately *not* given: the events log is the
agent's, and a gate must not be able to add to the engine evidence it is
judged beside.  Arguments are passed as written (no ``{placeholder}``
substitution; the environment carries the same facts).  Past ``timeout`` the
whole group gets SIGTERM, then SIGKILL; after the gate ends, whatever it left
running in its group is killed (before the leader is reaped, so its group id
cannot have been recycled), because a background process could otherwise
keep changing the worktree after the evidence describing it was written.  A
command that cannot be started fails its gate with ``exit_code`` null and the
reason in ``error`` (and in the log), never with a traceback.

Order and dependencies.  An instance's gates run one after another in
declaration order (``requires`` may only name earlier gates, which the config
validates).  A gate whose predecessors did not all pass is skipped and
recorded with ``PARALLEL_PREDECESSOR_INCOMPLETE`` - also when a predecessor
does not apply to the instance's track.  Instances are checked concurrently
in a thread pool of at most ``jobs`` (default ``max_total``); each instance
is a sequence of subprocesses, so threads are enough.

``--gate NAME`` (``gates=`` here) runs only the named gates.  Dependencies are
*not* pulled in: a named gate whose predecessor was not also named is skipped
with ``PARALLEL_PREDECESSOR_INCOMPLETE``, because a predecessor that did not
run has not passed.  Gates not named appear in the pack as skipped with code
null and ``error`` "not selected", and the pack is ``complete: false``; an
enforced gate that did not run has not passed, so the verdict of such a check
is ``fail`` unless the unselected gates are all observe gates.  Either way an
incomplete pack is never a pick candidate (``Freshness.passing`` wants
``complete``).  This keeps one meaning for "passed": it ran here and exited 0.

The verdict.  ``pass`` iff every enforced gate that applies to the instance's
track passed; observe gates are recorded and never block.  **With no enforced
gate applying (no gates at all, only observe gates, or gates limited to other
tracks) the verdict is ``pass``**, with the empty or observe-only ``gates``
list in the pack saying exactly that nothing blocking ran.  A pack still
binds commit, tree, config and fingerprints, so it is proof of *what* was
judged, never of more: a fan-out track that no gate covers must stay
pickable without a dummy gate, just as a repository without hooks accepts
commits.  The text output warns when this happens.  ``complete`` is true when
every applicable gate ran or was skipped by the predecessor rule (a gate that
could not start or timed out *ran*, and failed).

Evidence must describe a commit, so a worktree with uncommitted changes
(untracked files included) is refused before anything runs, and so is a
worktree whose HEAD is not the branch tip.  Gates may leave untracked
byproducts, but if a tracked file changed or HEAD moved while the gates ran,
what ran was not the commit: no pack is written for that instance and it is
reported with ``PARALLEL_EVIDENCE_MISMATCH``.

Fingerprints.  ``output_fingerprints`` lists every path that differs between
the base commit's tree and the commit's tree (a pygit2 tree-to-tree diff, no
rename detection): ``{"sha256": ...}`` of the blob's content, or
``{"deleted": true}`` (a submodule entry gives ``{"gitlink": <oid>}``, having
no content here; a symlink's content is its target, as git stores it).  The
bytes hashed are always the blob's bytes.  Inflating 2,000 loose objects is
several times slower than ``sha256sum`` reading the checked-out files, so
when a clean worktree of the commit is at hand each file is read from it
(regular files only, no symlink followed, a FIFO never opened blocking) and
used only after its git object id, recomputed from those bytes, equals the
blob's id; anything else (a filter such as ``eol=crlf``, a race, a symlink)
falls back to the object database.  ``input_fingerprints`` hash the worktree
files matched by the applicable gates' ``inputs`` globs, taken before the
gates run: path -> sha256.

Scores come from ``score.command`` (run like a gate with ``score.timeout``;
the last non-empty stdout line must be an integer 0..10 and the command must
exit 0) or ``score.findings`` (a path in the worktree: ``.jsonl`` gives the
minimum ``anti_slop_score`` over its lines, anything else a line
``anti_slop_score: N``, the minimum if several).  No source: score,
score_source and score_error all null.  A source that yields nothing usable:
score null and ``score_error`` says what was wrong, so pick can refuse it.

Each pack is written with ``evidence.write`` as soon as its instance is done,
then (``check.after_pack`` crash point) the record is updated with
compare-and-swap on the attempt; the note lines of every instance checked go
out as one notes commit at the end.  An instance is checked by one ``check``
at a time (a non-blocking lock in ``parallel/locks/``, since two would write
the same logs and pack), and a picked winner is never re-checked: rewriting
its pack would break the write-once pick record that names its sha256.

``verify_tree`` runs, for merge, the enforced gates that apply to a track,
plus whatever gates they require (so ``requires`` means the same there as in
a check), with the same runner, in a detached worktree made by ``git worktree
add`` under a fresh ``tempfile.mkdtemp`` folder with hooks switched off (a
scratch checkout is nobody's checkout).  The folder and its
``<common>/worktrees/`` admin entry are removed in a ``finally``, without
``git worktree prune``, which would also touch other worktrees' state.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pygit2
from filelock import FileLock, Timeout

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, faults, notes, reaper
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import sha256_bytes, utcnow
from gitflow_parallel.gitrepo import GIT_LOCATION_ENV, worktree_changes
from gitflow_parallel.names import check_name
from gitflow_parallel.project import Project
from gitflow_parallel.store import FINISHED_RUN, find_instance

# Grace between SIGTERM and SIGKILL for a gate past its timeout.
KILL_GRACE = 2.0
# A findings file larger than this is not read (it is not a findings file).
MAX_FINDINGS_BYTES = 64 << 20


# -- running commands -------------------------------------------------------------
def gate_env(extra: dict[str, str], facts: dict[str, str]) -> dict[str, str]:
    """The environment a gate or score command runs with (see the module doc)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_PARALLEL_") and k not in GIT_LOCATION_ENV}
    env.update(extra)
    env.update({f"GIT_PARALLEL_{k}": v for k, v in facts.items()})
    return env


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _cannot_start(argv: list[str], exc: OSError) -> str:
    prog = argv[0]
    if isinstance(exc, FileNotFoundError):
        where = "in the worktree" if "/" in prog else "on PATH"
        return f"command not found: {prog!r} does not exist {where}"
    if isinstance(exc, PermissionError):
        return f"cannot run {prog!r}: permission denied (is it executable?)"
    return f"cannot run {prog!r}: {exc.strerror or exc}"


def _exited_now(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _wait_unreaped(pid: int, timeout: float | None) -> bool:
    """Wait until ``pid`` exits, at most ``timeout`` seconds, *without reaping
    it*: while the leader is an unreaped zombie its pid - which is also its
    process group id - cannot be recycled, so killing the group afterwards
    cannot hit an unrelated process.  A pidfd wakes us at once; without one
    (old kernels) we poll."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if poller.poll(None if left is None else int(left * 1000) + 1):
                    return True
                if deadline is not None and time.monotonic() >= deadline:
                    return _exited_now(pid)
        finally:
            os.close(fd)
    delay = 0.001
    while not _exited_now(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    return True


def execute(argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
            stdout: Path, stderr: Path | None = None) -> tuple[int | None, str | None, float]:
    """Run ``argv`` in its own process group with output to ``stdout`` (and
    ``stderr``, or the same file).  Returns (exit code or None, error or None,
    seconds)."""
    stdout.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # A token its processes inherit, to find those that leave the group.
    env = {**env, reaper.SCOPE_ENV: f"gate-{os.getpid()}-{os.urandom(8).hex()}"}
    reaper.become_subreaper()
    with open(stdout, "wb") as out, (open(stderr, "wb") if stderr else _Same()) as err:
        try:
            proc = subprocess.Popen(argv, cwd=str(cwd), env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err if stderr else subprocess.STDOUT, start_new_session=True,
                                    close_fds=True)
        except OSError as exc:
            message = _cannot_start(argv, exc)
            out.write(f"git-parallel: {message}\n".encode())
            return None, message, time.monotonic() - start
        error: str | None = None
        try:
            if not _wait_unreaped(proc.pid, timeout):
                _kill_group(proc.pid, signal.SIGTERM)
                if not _wait_unreaped(proc.pid, KILL_GRACE):
                    _kill_group(proc.pid, signal.SIGKILL)
                error = f"timed out after {timeout:g}s; its process group was killed"
        finally:
            # Whatever it left running in its group goes too (also when we
            # were interrupted), then the leader is reaped.
            _kill_group(proc.pid, signal.SIGKILL)
            reaper.sweep({env[reaper.SCOPE_ENV]})  # daemonized out of the group
            code = proc.wait()
    if error:
        with open(stdout, "ab") as out:
            out.write(f"\ngit-parallel: {error}\n".encode())
        return None, error, time.monotonic() - start
    return code, None, time.monotonic() - start


class _Same:
    """Stands in for a second log file when stderr goes to stdout's."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# -- gates ----------------------------------------------------------------------
@dataclass
class Place:
    """Where and as whom gates run: a worktree, its env facts and log names."""

    worktree: Path
    facts: dict[str, str]
    log_dir: Path
    log_prefix: str

    def log(self, what: str) -> Path:
        return self.log_dir / f"{self.log_prefix}.{what}.log"


def applicable(gates: list[dict[str, Any]], track: str) -> list[dict[str, Any]]:
    """The gates that apply to ``track`` (``tracks`` null means all)."""
    return [g for g in gates if g.get("tracks") is None or track in g["tracks"]]


def _result(gate: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = {"name": gate["name"], "argv": list(gate["run"]), "mode": gate["mode"], "exit_code": None,
           "passed": False, "duration_s": None, "log": None, "log_sha256": None, "skipped": False,
           "code": None, "error": None}
    out.update(fields)
    return out


def run_gate(gate: dict[str, Any], place: Place) -> dict[str, Any]:
    log = place.log(f"gate-{gate['name']}")
    env = gate_env(gate.get("env") or {}, place.facts)
    code, error, seconds = execute(list(gate["run"]), place.worktree, env, float(gate["timeout"]), log)
    return _result(gate, exit_code=code, passed=(code == 0 and error is None), duration_s=round(seconds, 3),
                   log=str(log), log_sha256=_sha256_path(log),
                   code=E.EXECUTE_FAILED if error else None, error=error)


def run_gates(gates: list[dict[str, Any]], track: str, place: Place,
              selected: set[str] | None = None) -> list[dict[str, Any]]:
    """Run ``gates`` (already those that apply) in order, honouring ``requires``.

    ``selected`` limits which run; the rest are reported as not selected."""
    names_here = {g["name"] for g in gates}
    passed: dict[str, bool] = {}
    results = []
    for gate in gates:
        if selected is not None and gate["name"] not in selected:
            results.append(_result(gate, skipped=True, error="not run: not selected with --gate"))
            passed[gate["name"]] = False
            continue
        missing = [r for r in gate.get("requires") or [] if not passed.get(r)]
        if missing:
            why = []
            for req in missing:
                if req not in names_here:
                    why.append(f"{req} (does not apply to track {track})")
                elif selected is not None and req not in selected:
                    why.append(f"{req} (not selected with --gate)")
                else:
                    why.append(f"{req} (did not pass)")
            results.append(_result(gate, skipped=True, code=E.PREDECESSOR_INCOMPLETE,
                                   error=f"skipped: requires {', '.join(why)}"))
            passed[gate["name"]] = False
            continue
        result = run_gate(gate, place)
        results.append(result)
        passed[gate["name"]] = result["passed"]
    return results


def verdict_of(results: list[dict[str, Any]]) -> str:
    """``pass`` iff every enforced gate passed (vacuously with none; see the module doc)."""
    return "pass" if all(r["passed"] for r in results if r["mode"] == "enforced") else "fail"


def complete_of(results: list[dict[str, Any]]) -> bool:
    """Every gate ran, or was skipped by the predecessor rule."""
    return all(not r["skipped"] or r["code"] == E.PREDECESSOR_INCOMPLETE for r in results)


# -- fingerprints -------------------------------------------------------------------
def _open_regular(path: Path) -> int | None:
    """An fd of ``path`` if it is a regular file, never following a symlink
    nor blocking on a FIFO; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _read_regular(path: Path, limit: int | None = None) -> bytes | None:
    fd = _open_regular(path)
    if fd is None:
        return None
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        if limit is not None and os.fstat(handle.fileno()).st_size > limit:
            return None
        return handle.read()


def _sha256_path(path: Path) -> str | None:
    data = _read_regular(path)
    return None if data is None else sha256_bytes(data)


def _blob_id(data: bytes, oid_hex: str) -> str:
    """Git's object id of a blob with content ``data``, in the repository's hash."""
    digest = hashlib.sha1() if len(oid_hex) == 40 else hashlib.sha256()
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def output_fingerprints(repo: pygit2.Repository, base_commit: str, commit: str,
                        worktree: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every path changed between ``base_commit`` and ``commit``: the sha256 of
    its content, or deleted.  ``worktree``, a checkout of ``commit``, is only a
    faster source of the same bytes (each checked against the blob id)."""
    old = repo.get(base_commit).peel(pygit2.Tree)
    new = repo.get(commit).peel(pygit2.Tree)
    out: dict[str, dict[str, Any]] = {}
    for delta in repo.diff(old, new).deltas:
        if delta.status == pygit2.enums.DeltaStatus.DELETED:
            out[delta.old_file.path] = {"deleted": True}
            continue
        entry = delta.new_file
        oid = str(entry.id)
        if entry.mode == pygit2.GIT_FILEMODE_COMMIT:
            out[entry.path] = {"gitlink": oid}
            continue
        data = None
        if worktree is not None and entry.mode in (pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE):
            data = _read_regular(worktree / entry.path)
            if data is not None and _blob_id(data, oid) != oid:
                data = None
        if data is None:
            data = repo.odb.read(entry.id)[1]
        out[entry.path] = {"sha256": hashlib.sha256(data).hexdigest()}
    return out


def input_fingerprints(worktree: Path, patterns: Iterable[str]) -> dict[str, str]:
    """sha256 of the regular files in ``worktree`` matched by ``patterns``.

    A pattern that reaches outside the worktree (absolute, or through ``..``)
    matches nothing: inputs describe the checkout, and nothing else is ours
    to read."""
    root = worktree.resolve()
    out: dict[str, str] = {}
    for pattern in patterns:
        for rel in glob.glob(pattern, root_dir=str(root), recursive=True):
            full = Path(os.path.normpath(root / rel))
            if full != root and root not in full.parents:
                continue
            relpath = full.relative_to(root).as_posix()
            if relpath == ".git" or relpath.startswith(".git/"):
                continue
            data = _read_regular(full)
            if data is not None:
                out[relpath] = sha256_bytes(data)
    return dict(sorted(out.items()))


# -- scores -----------------------------------------------------------------------
_MD_SCORE = re.compile(r"^[\s>*_#-]*anti_slop_score[*_]*\s*:\s*[*_`]*([^\s*_`]*)", re.IGNORECASE | re.MULTILINE)
_INT = re.compile(r"[+-]?[0-9]+")


def _score_value(text: str) -> int | None:
    if not _INT.fullmatch(text.strip()):
        return None
    value = int(text)
    return value if 0 <= value <= 10 else None


def score_from_findings(text: str, jsonl: bool) -> tuple[int | None, str | None]:
    """(score, error) from a findings file's text."""
    if jsonl:
        values = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError:
                return None, f"line {n} is not JSON"
            if not isinstance(item, dict) or "anti_slop_score" not in item:
                continue  # other findings may share the file
            value = item["anti_slop_score"]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
                return None, f"line {n}: anti_slop_score {value!r} is not an integer 0..10"
            values.append(value)
        if not values:
            return None, "no line has an anti_slop_score"
        return min(values), None
    found = _MD_SCORE.findall(text)
    if not found:
        return None, "no line 'anti_slop_score: N'"
    values = []
    for raw in found:
        value = _score_value(raw)
        if value is None:
            return None, f"anti_slop_score {raw!r} is not an integer 0..10"
        values.append(value)
    return min(values), None


def score(config: dict[str, Any], place: Place) -> tuple[int | None, dict[str, Any] | None, str | None]:
    """(score, score_source, score_error) for the worktree of ``place``."""
    command, findings = config.get("command"), config.get("findings")
    if command:
        log, err_log = place.log("score"), place.log("score-stderr")
        code, error, _ = execute(list(command), place.worktree, gate_env({}, place.facts),
                                 float(config.get("timeout") or 300), log, err_log)
        source = {"kind": "command", "argv": list(command), "exit_code": code, "log": str(log),
                  "log_sha256": _sha256_path(log), "stderr_log": str(err_log)}
        if error:
            return None, source, error
        if code != 0:
            return None, source, f"the score command exited {code}"
        lines = [l for l in (_read_regular(log) or b"").decode("utf-8", "replace").splitlines() if l.strip()]
        if not lines:
            return None, source, "the score command printed nothing"
        value = _score_value(lines[-1])
        if value is None:
            return None, source, f"its last line {lines[-1].strip()[:80]!r} is not an integer 0..10"
        return value, source, None
    if findings:
        path = place.worktree / findings
        jsonl = findings.endswith(".jsonl")
        data = _read_regular(path, limit=MAX_FINDINGS_BYTES)
        source = {"kind": "findings", "path": findings, "format": "jsonl" if jsonl else "markdown",
                  "sha256": None if data is None else sha256_bytes(data)}
        if data is None:
            why = "is not a regular file" if os.path.lexists(path) else "does not exist"
            return None, source, f"the findings file {findings} {why} in the worktree"
        value, error = score_from_findings(data.decode("utf-8", "replace"), jsonl)
        return value, source, (f"{findings}: {error}" if error else None)
    return None, None, None


# -- engine evidence --------------------------------------------------------------
def engine_evidence(inst: dict[str, Any]) -> dict[str, Any]:
    """Counts by event name from the instance's events log, or unavailable.

    Nothing observed is null, never 0: an empty or absent log does not prove
    that an agent did nothing, only that it told us nothing."""
    path = inst.get("events")
    data = _read_regular(Path(path)) if path else None
    lines = [l for l in (data or b"").decode("utf-8", "replace").splitlines() if l.strip()]
    if not lines:
        return {"status": "unavailable", "counts": None}
    counts: dict[str, int] = {}
    malformed = 0
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            item = None
        name = item.get("event") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            malformed += 1
            continue
        counts[name] = counts.get(name, 0) + 1
    return {"status": "observed", "counts": dict(sorted(counts.items())), "lines": len(lines),
            "malformed": malformed, "path": str(path), "sha256": sha256_bytes(data or b"")}


# -- check ----------------------------------------------------------------------
def _head_of(worktree: Path) -> str | None:
    try:
        wt = pygit2.Repository(str(worktree))
        return None if wt.head_is_unborn else str(wt.head.target)
    except (pygit2.GitError, KeyError):
        return None


def _tracked_changes(worktree: Path) -> list[str]:
    """Tracked paths a gate modified or deleted (new untracked files are byproducts)."""
    wt = pygit2.Repository(str(worktree))
    new = pygit2.GIT_STATUS_WT_NEW | pygit2.GIT_STATUS_IGNORED
    return sorted(p for p, f in wt.status(untracked_files="no").items()
                  if f != pygit2.GIT_STATUS_CURRENT and not f & new)


def _picked_winners(record: dict[str, Any]) -> set[str]:
    return {p.get("winner") for p in (record.get("picks") or {}).values() if isinstance(p, dict)}


def _targets(record: dict[str, Any], instances: list[str] | None) -> list[dict[str, Any]]:
    """The instances to check.  A picked winner is never re-checked: its pack
    would be rewritten in place, and the write-once pick record, which names
    that pack's sha256, would then refuse to merge forever."""
    task = record["task"]
    winners = _picked_winners(record)
    if instances:
        chosen = []
        for inst_id in dict.fromkeys(instances):
            inst = find_instance(record, inst_id)
            if inst.get("removed"):
                raise ParallelError(
                    E.BRANCH_NOT_FOUND, f"instance {inst_id} was cleaned up; its worktree and branch are gone",
                    hint=f"its tip is kept under refs/parallel/archive/{record['run_id']}/{inst_id}/")
            if inst["status"] in ("failed", "aborted"):
                raise ParallelError(
                    E.BRANCH_TERMINAL, f"instance {inst_id} is {inst['status']}; only succeeded instances are checked",
                    hint=f"`git parallel retry {task} {inst_id}`, then `git parallel run {task} --instance {inst_id} -- CMD`")
            if inst["status"] != "succeeded":
                raise ParallelError(
                    E.EVIDENCE_MISSING,
                    f"instance {inst_id} is {inst['status']}: it has not finished a run, so there is nothing to check",
                    hint=f"`git parallel run {task} --instance {inst_id} -- CMD` first, and check once it succeeded")
            if inst_id in winners:
                raise ParallelError(
                    E.BRANCH_TERMINAL,
                    f"instance {inst_id} won the pick of track {inst['track']}; the evidence the pick names is final",
                    hint=f"merge it with `git parallel merge {task}`; to judge new work, spawn a new run")
            chosen.append(inst)
        return chosen
    succeeded = [i for i in record["instances"] if i["status"] == "succeeded" and not i.get("removed")]
    chosen = [i for i in succeeded if i["id"] not in winners]
    if succeeded and not chosen:
        raise ParallelError(
            E.BRANCH_TERMINAL, f"every succeeded instance of {task!r} is a picked winner; their evidence is final",
            hint=f"merge with `git parallel merge {task}`")
    if not chosen:
        states = ", ".join(f"{i['id']} {i['status']}" for i in record["instances"])
        raise ParallelError(
            E.EVIDENCE_MISSING, f"run {record['run_id']} of {task!r} has no succeeded instance to check ({states})",
            hint=f"`git parallel run {task} -- CMD` first; `git parallel status {task}` shows where each stands")
    return chosen


def _preflight(project: Project, record: dict[str, Any], inst: dict[str, Any]) -> str:
    """Refuse an instance whose worktree does not hold exactly its branch tip;
    returns the tip."""
    task, inst_id = record["task"], inst["id"]
    tip = project.tip(inst)
    path = Path(inst["worktree"])
    if tip is None:
        raise ParallelError(E.BRANCH_NOT_FOUND, f"the branch {inst['branch']} of instance {inst_id} is missing",
                            hint=f"`git parallel validate {task}` and `git parallel recover {task}`")
    if not (path / ".git").exists():
        raise ParallelError(E.BRANCH_NOT_FOUND, f"the worktree of instance {inst_id} ({path}) is missing",
                            hint=f"`git parallel validate {task}` and `git parallel recover {task}`")
    dirty = worktree_changes(path)
    if dirty:
        shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"the worktree of instance {inst_id} ({path}) has uncommitted changes ({shown}); "
            "evidence must describe a commit",
            # `git parallel run` commits left-overs, but only runs pending
            # instances; a succeeded one is final, so commit or discard here.
            hint=f"commit them on {inst['branch']} (git -C {path} add -A && git -C {path} commit) or discard them "
                 f"(git -C {path} stash -u), then check again",
            paths=dirty)
    head = _head_of(path)
    if head != tip:
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"the worktree of instance {inst_id} is at {str(head)[:12]}, its branch {inst['branch']} at {tip[:12]}",
            hint=f"check out {inst['branch']} in {path} (git -C {path} checkout {inst['branch']}) and check again")
    return tip


def _lock(project: Project, task: str, inst_id: str) -> FileLock:
    folder = project.repo.parallel_dir / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"check-{task}-{inst_id}.lock"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ParallelError(
            E.RESOURCE_LOCK_FAILED, f"instance {inst_id} of {task!r} is being checked by another git parallel check",
            hint="wait for it to finish and read its result with `git parallel status`") from None
    return lock


def _check_one(common_dir: Path, record: dict[str, Any], inst: dict[str, Any], commit: str,
               selected: set[str] | None) -> dict[str, Any]:
    """Run the gates and score of one instance; returns its pack (not yet written)."""
    repo = pygit2.Repository(str(common_dir))  # one handle per thread
    worktree = Path(inst["worktree"])
    base_commit = record["base"]["commit"]
    tree = str(repo.get(commit).peel(pygit2.Commit).tree_id)
    place = Place(worktree=worktree, log_dir=common_dir / "parallel" / "logs" / record["run_id"],
                  log_prefix=f"{inst['id']}.{inst['attempt']}",
                  facts={"TASK": record["task"], "RUN_ID": record["run_id"], "BASE": record["base"]["commit"], "INSTANCE": inst["id"],
                         "TRACK": inst["track"], "ATTEMPT": str(inst["attempt"]), "WORKTREE": str(worktree)})
    gates = applicable(record["config"]["gates"], inst["track"])
    # Both fingerprints are taken before any gate can touch the worktree.
    outputs = output_fingerprints(repo, base_commit, commit, worktree)
    inputs = input_fingerprints(worktree, [p for g in gates if selected is None or g["name"] in selected
                                           for p in g.get("inputs") or []])
    results = run_gates(gates, inst["track"], place, selected)
    value, source, error = score(record["config"]["score"], place)
    moved = _head_of(worktree)
    changed = _tracked_changes(worktree)
    if moved != commit or changed:
        what = (f"HEAD moved to {str(moved)[:12]}" if moved != commit
                else "tracked files changed: " + ", ".join(changed[:10]) + (" …" if len(changed) > 10 else ""))
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"while instance {inst['id']} was checked its worktree changed ({what}), so the gates did not test "
            f"{commit[:12]}; no evidence was written",
            hint="make the gates leave tracked files alone (write to untracked, ignored paths), "
                 f"restore the worktree (git -C {worktree} checkout -- .) and check again")
    return {
        "schema_version": evidence.SCHEMA_VERSION, "origin": evidence.ORIGIN, "run_id": record["run_id"],
        "task": record["task"], "instance": inst["id"], "track": inst["track"], "attempt": inst["attempt"],
        "instance_revision": inst["instance_revision"], "commit": commit, "tree": tree,
        "base_commit": base_commit, "config_sha256": record["config_sha256"], "gates": results,
        "verdict": verdict_of(results), "score": value, "score_source": source, "score_error": error,
        "input_fingerprints": inputs, "output_fingerprints": outputs, "engine_evidence": engine_evidence(inst),
        "proof_issued_at": utcnow(), "complete": complete_of(results),
    }


def _select_gates(record: dict[str, Any], gates: list[str] | None) -> set[str] | None:
    if not gates:
        return None
    known = [g["name"] for g in record["config"]["gates"]]
    for name in gates:
        if name not in known:
            raise ParallelError(
                E.INVALID_NAME,
                f"no gate named {name!r} in the configuration frozen for run {record['run_id']}"
                f" (it has: {', '.join(known) or 'no gates'})",
                hint="name one of those with --gate; gates come from .gitparallel.yaml at the base commit, "
                     "as it was at spawn")
    return set(gates)


def _store_pack(project: Project, task: str, pack: dict[str, Any]) -> dict[str, Any]:
    binding = evidence.write(project.repo.parallel_dir, pack)
    faults.point("check.after_pack")

    def apply(record: dict[str, Any], inst: dict[str, Any]) -> None:
        if inst["status"] != "succeeded":
            raise ParallelError(E.BRANCH_TERMINAL, f"instance {inst['id']} became {inst['status']} during the check",
                                hint=f"see `git parallel status {task}`")
        inst["evidence"] = {**binding, "instance_revision": pack["instance_revision"]}
        inst["verdict"] = pack["verdict"]
        inst["score"] = pack["score"]

    project.store.update_instance(task, pack["instance"], apply, expected_attempt=pack["attempt"])
    return binding


def check(project: Project, task: str, instances: list[str] | None = None, gates: list[str] | None = None,
          jobs: int | None = None) -> dict[str, Any]:
    """Run the gates of every succeeded (or each named) instance and record
    the evidence.  Refusals before anything runs raise; what goes wrong for
    one instance afterwards is reported under ``errors``."""
    check_name(task, "task")
    record = project.store.load(task)
    if record["status"] in FINISHED_RUN:
        raise ParallelError(
            E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} is {record['status']}; nothing to check",
            hint=f"spawn a new run with `git parallel spawn {task}`")
    selected = _select_gates(record, gates)
    targets = _targets(record, instances)
    jobs = jobs or int(record["config"]["max_total"])
    if jobs < 1:
        raise ParallelError(E.RESOURCE_CAP_EXHAUSTED, f"--jobs {jobs} is below 1", hint="pass --jobs 1 or more")
    locks: list[FileLock] = []
    try:
        commits = {}
        for inst in targets:
            locks.append(_lock(project, task, inst["id"]))
            commits[inst["id"]] = _preflight(project, record, inst)
        checked: dict[str, dict[str, Any]] = {}
        errors: dict[str, dict[str, Any]] = {}
        entries: list[tuple[str, str]] = []
        with ThreadPoolExecutor(max_workers=min(jobs, len(targets))) as pool:
            futures: dict[Future[dict[str, Any]], dict[str, Any]] = {
                pool.submit(_check_one, project.repo.common_dir, record, inst, commits[inst["id"]], selected): inst
                for inst in targets}
            for future in as_completed(futures):
                inst = futures[future]
                try:
                    pack = future.result()
                    binding = _store_pack(project, task, pack)
                except ParallelError as exc:
                    errors[inst["id"]] = {"id": inst["id"], "code": exc.code, "message": exc.message, "hint": exc.hint}
                    continue
                checked[inst["id"]] = {
                    "id": inst["id"], "track": inst["track"], "attempt": inst["attempt"], "commit": pack["commit"],
                    "tree": pack["tree"], "verdict": pack["verdict"], "complete": pack["complete"],
                    "score": pack["score"], "score_error": pack["score_error"], "gates": pack["gates"],
                    "evidence": binding, "proof_issued_at": pack["proof_issued_at"]}
                entries.append((pack["commit"], notes.line(
                    "evidence", record["run_id"], task=task, instance=inst["id"], attempt=inst["attempt"],
                    commit=pack["commit"], tree=pack["tree"], verdict=pack["verdict"], score=pack["score"],
                    evidence_sha256=binding["sha256"], proof_issued_at=pack["proof_issued_at"])))
    finally:
        for lock in locks:
            lock.release()
    notes_error = project.mirror_notes(record, entries, "check") if entries else None
    order = [i["id"] for i in targets]
    return {"task": task, "run_id": record["run_id"], "notes_error": notes_error,
            "instances": [checked[i] for i in order if i in checked],
            "errors": [errors[i] for i in order if i in errors]}


def check_ok(result: dict[str, Any]) -> bool:
    """What the exit status says: no instance failed its verdict or its check."""
    return not result["errors"] and all(i["verdict"] == "pass" for i in result["instances"])


# -- verify a tree (merge) ---------------------------------------------------------------
def _with_requirements(gates: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``wanted`` plus every gate they need first, transitively, in order."""
    by_name = {g["name"]: g for g in gates}
    need: set[str] = set()
    stack = [g["name"] for g in wanted]
    while stack:
        name = stack.pop()
        if name in need or name not in by_name:
            continue
        need.add(name)
        stack.extend(by_name[name].get("requires") or [])
    return [g for g in gates if g["name"] in need]


def _admin_dirs_for(common_dir: Path, path: Path) -> list[Path]:
    """The ``<common>/worktrees/*`` folders that belong to the worktree at ``path``."""
    found = []
    folder = common_dir / "worktrees"
    if not folder.is_dir():
        return found
    want = {str(path / ".git"), str(path.resolve() / ".git")}
    try:  # the worktree's own pointer, if git got as far as writing it
        pointer = (path / ".git").read_text(encoding="utf-8").strip()
        admin = Path(pointer[len("gitdir: "):]) if pointer.startswith("gitdir: ") else None
        if admin is not None and admin.resolve().parent == folder.resolve():  # never rmtree anything else
            found.append(admin)
    except OSError:
        pass
    for admin in folder.iterdir():
        try:
            if (admin / "gitdir").read_text(encoding="utf-8").strip() in want and admin not in found:
                found.append(admin)
        except OSError:
            continue
    return found


def verify_tree(project: Project, record: dict[str, Any], track: str, commit: str) -> dict[str, Any]:
    """Run the enforced gates that apply to ``track`` (with the gates they
    require) in a temporary detached worktree of ``commit``, and remove it
    again, whatever happens.  Returns {"passed", "commit", "tree", "gates"}."""
    repo = project.repo
    try:
        tree = repo.tree_of(commit)
    except (KeyError, ValueError, AttributeError, pygit2.GitError):
        raise ParallelError(E.BASE_NOT_FOUND, f"{commit!r} is not a commit in this repository",
                            hint="pass the oid of the commit to verify") from None
    gates = applicable(record["config"]["gates"], track)
    wanted = _with_requirements(gates, [g for g in gates if g["mode"] == "enforced"])
    if not wanted:
        return {"passed": True, "commit": commit, "tree": tree, "gates": []}
    scratch = Path(tempfile.mkdtemp(prefix="git-parallel-verify-"))
    path = scratch / f"verify-{commit[:12]}"
    try:
        # A scratch checkout is no user's checkout: no hook (ours would record
        # it, a foreign one could fail it) has any business with it.
        proc = repo.run_git(["-c", "core.hooksPath=/dev/null", "worktree", "add", "--detach", str(path), commit],
                            check=False)
        if proc.returncode != 0:
            raise ParallelError(
                E.WORKTREE_CREATE_FAILED,
                f"could not make a worktree of {commit[:12]} to verify it: "
                f"{proc.stderr.decode(errors='replace').strip()}",
                hint="nothing was changed; see the message, fix its cause and merge again")
        place = Place(worktree=path, log_dir=repo.parallel_dir / "logs" / record["run_id"],
                      log_prefix=f"verify-{track}-{commit[:12]}",
                      facts={"TASK": record["task"], "RUN_ID": record["run_id"], "BASE": record["base"]["commit"], "TRACK": track,
                             "WORKTREE": str(path), "VERIFY": commit})
        results = run_gates(wanted, track, place)
    finally:
        admins = _admin_dirs_for(repo.common_dir, path)
        shutil.rmtree(scratch, ignore_errors=True)
        for admin in admins:
            shutil.rmtree(admin, ignore_errors=True)
    return {"passed": verdict_of(results) == "pass", "commit": commit, "tree": tree, "gates": results}
