"""A run as a reader sees it (``status``, ``diff``, ``show``, ``logs``,
``report``).

A run is read through a ``RunView``, from one of two sources:

* the local record (``<common>/parallel/runs/<task>.yaml``), with packs,
  picks and logs from their files, falling back to the refs for what a
  cleanup or another machine left only there;
* in a clone that did not make the run, its snapshot on
  ``refs/parallel/runs/<run_id>`` (fetched with ``git parallel fetch``; see
  ``state/share``): packs and logs from the evidence refs, tips from the archive
  refs, picks from the snapshot.  Every pack and pick is still checked
  against the sha256 the record binds, so a fetched copy is judged exactly
  as the original.

Nothing here writes anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NotRequired, TypedDict, TypeVar, cast

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, failures, model
from gitflow_parallel.state import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import cut_notice, read_tail, sha256_bytes
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import NO_CHANGE_WHY, InstanceRecord, PickRecord, RunRecord, find_instance
from gitflow_parallel.shapes.results import StatusDetail, StatusRow

if TYPE_CHECKING:  # imported by what reads objects: `show` and `logs` of a local run need none
    import pygit2


TAIL_LINES = 5


@dataclass
class RunView:
    project: Project
    record: RunRecord
    snapshot: str | None = None  # the run's snapshot commit, when read from git

    @property
    def shared(self) -> bool:
        return self.snapshot is not None

    @property
    def repo(self) -> pygit2.Repository:
        return self.project.repo.pygit

    def instance(self, inst_id: str) -> InstanceRecord:
        return find_instance(self.record, inst_id)

    def tip(self, inst: InstanceRecord) -> str | None:
        """The attempt's commit: its branch here, else its archive ref, else the
        head the record last saw (if this clone has it)."""
        if not self.shared and not inst.get("removed"):
            tip = self.project.tip(inst)
            if tip is not None:
                return tip
        from gitflow_parallel.git.worktrees import archive_ref  # (its branch is gone: rarely needed)

        kept = share.lookup(self.project.repo, archive_ref(self.record["run_id"], inst["id"], inst["attempt"]))
        if kept is not None:
            return kept
        head = inst.get("head")
        return head if head and head in self.repo else None

    def pack(self, inst: InstanceRecord) -> dict[str, Any] | None:
        return share.load_pack(self.project, self.record, inst)

    def freshness(self, inst: InstanceRecord) -> evidence.Freshness:
        return evidence.freshness(self.record, inst, self.tip(inst), loader=self.pack)

    def pick(self, track: str) -> PickRecord | None:
        from gitflow_parallel.state.picks import load_pick, validate_pick

        if not self.shared:
            return load_pick(self.project, self.record, track)
        data = share.shared_pick(self.project, self.snapshot or "", track)
        binding = (self.record.get("picks") or {}).get(track)
        if data is None or not binding or sha256_bytes(data) != binding.get("sha256"):
            return None
        return validate_pick(json.loads(data), Path(f"picks/{track}.json"), self.record, track)

    def log(self, inst: InstanceRecord, path: str | None) -> tuple[bytes | None, str]:
        """A log's bytes and where they came from ("file", "ref" or "none")."""
        if not path:
            return None, "none"
        if not self.shared:
            try:
                data, cut = read_tail(path)
                return cut_notice(cut) + data, "file"
            except OSError:
                pass
        kept = share.stored_log(self.project, self.record, inst["id"], inst["attempt"], Path(path).name)
        return (kept, "ref") if kept is not None else (None, "none")


def open_view(project: Project, task: str) -> RunView:
    """The task's run: the local record, else the newest one kept in git."""
    check_name(task, "task")
    try:
        return RunView(project, project.store.load(task))
    except ParallelError as exc:
        if exc.code != E.RUN_NOT_FOUND:
            raise
        found = share.shared_runs(project, task)
        if not found:
            raise ParallelError(
                E.RUN_NOT_FOUND, f"no run for task {task!r}, here or in the fetched run records",
                hint=f"start one with `git parallel spawn {task}`, or `git parallel fetch` a teammate's runs") from None
        record, commit = found[0]
        return RunView(project, record, commit)


# -- status of a fetched run ------------------------------------------------------------
def shared_status(project: Project, task: str) -> StatusDetail:
    """``status TASK`` for a run this clone only fetched: no worktrees or
    branches of it here, so no flags; evidence judged against the archived tips."""
    view = open_view(project, task)
    rows: list[StatusRow] = []
    for inst in view.record["instances"]:
        fresh = view.freshness(inst)
        rows.append({**inst, "tip": view.tip(inst), "evidence_state": fresh.state, "evidence_reason": fresh.reason,
                     "flags": [], "sandbox": evidence.layers_held(inst, fresh.pack)})
    return {"run": view.record, "rows": rows, "shared": share.run_ref(view.record["run_id"]),
            "base_tip": project.repo.ref_target(view.record["base"]["ref"])}


# -- diff -------------------------------------------------------------------------------------
class FileChange(TypedDict):
    path: str
    status: str  # git's letter: A, D, M, R…
    binary: bool | None  # None where libgit2 did not tell
    added: int | None  # None for a binary file
    removed: int | None


class Changes(TypedDict):
    """The files changed between two commits, with the lines added and removed."""
    files: list[FileChange]
    added: int
    removed: int
    patch: NotRequired[str]


def changes_between(repo: pygit2.Repository, old: str, new: str, with_patch: bool) -> Changes:
    import pygit2

    diff = repo[old].peel(pygit2.Commit).tree.diff_to_tree(repo[new].peel(pygit2.Commit).tree)
    files: list[FileChange] = []
    for patch in diff:
        if patch is None:
            continue
        delta = patch.delta
        binary = delta.is_binary
        _, added, removed = patch.line_stats
        files.append({"path": delta.new_file.path if delta.status_char() != "D" else delta.old_file.path,
                      "status": delta.status_char(), "binary": binary,
                      "added": None if binary else added, "removed": None if binary else removed})
    out: Changes = {"files": files, "added": sum(f["added"] or 0 for f in files),
                    "removed": sum(f["removed"] or 0 for f in files)}
    if with_patch:
        out["patch"] = diff.patch or ""
    return out


def worktree_diff(worktree: str, base: str) -> pygit2.Diff | None:
    """A worktree as it is on disk (committed, staged, changed and new files;
    not the ignored ones) against the commit ``base``, read-only: libgit2
    writes no index for it and runs none of the worktree's filters, fsmonitor
    or external diff, which its agent could have configured.  None when the
    worktree or ``base`` cannot be read."""
    import pygit2

    flags = (pygit2.enums.DiffOption.INCLUDE_UNTRACKED | pygit2.enums.DiffOption.RECURSE_UNTRACKED_DIRS
             | pygit2.enums.DiffOption.SHOW_UNTRACKED_CONTENT)
    try:
        repo = pygit2.Repository(worktree)
        tree = repo[base].peel(pygit2.Commit).tree
        return tree.diff_to_workdir(flags)
    except (pygit2.GitError, KeyError, ValueError, AttributeError, OSError):
        return None


# How long a read of a live worktree may take, and the worktrees where one
# never ended (it stays blocked: no other read is tried there meanwhile).
LIVE_READ_WITHIN = 5.0
T = TypeVar("T")
_STUCK: set[str] = set()


def _live_read(worktree: str, work: Callable[[], T]) -> T | None:
    """``work()`` (its value said in JSON), a read of a worktree whose agent
    is still writing it, done in a child process given ``LIVE_READ_WITHIN``
    seconds: libgit2 opens an ignore file or the index as it finds it, and
    a FIFO the agent left there blocked ``watch`` (the GIL held) until a
    writer came, which none does.  None if it did not end (or failed)."""
    import os
    import select
    import signal
    import time

    if worktree in _STUCK:
        return None
    readable, writable = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one read, said on the pipe, and out
        code = 1
        try:
            os.close(readable)
            with os.fdopen(writable, "wb") as out:
                out.write(json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writable)
    chunks: list[bytes] = []
    deadline = time.monotonic() + LIVE_READ_WITHIN
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([readable], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                _STUCK.add(worktree)
                return None
            chunk = os.read(readable, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(readable)
        os.waitpid(pid, 0)
    try:
        return cast(T, json.loads(b"".join(chunks)))
    except ValueError:
        return None


def worktree_stat(worktree: str, base: str) -> dict[str, int] | None:
    """Files changed, lines added and removed of ``worktree_diff``, read
    within ``LIVE_READ_WITHIN`` seconds (the worktree is a live agent's)."""
    def stat() -> dict[str, int] | None:
        diff = worktree_diff(worktree, base)
        if diff is None:
            return None
        stats = diff.stats
        return {"files": stats.files_changed, "added": stats.insertions, "removed": stats.deletions}

    return _live_read(worktree, stat)


def worktree_patch(worktree: str, base: str) -> str | None:
    """``worktree_diff``'s patch, read within ``LIVE_READ_WITHIN`` seconds."""
    def patch() -> str | None:
        diff = worktree_diff(worktree, base)
        return None if diff is None else diff.patch or ""

    return _live_read(worktree, patch)


def commit_stat(repo: pygit2.Repository, base: str, commit: str) -> dict[str, int] | None:
    """The same figures between two commits (an attempt that ended)."""
    import pygit2

    try:
        stats = repo[base].peel(pygit2.Commit).tree.diff_to_tree(repo[commit].peel(pygit2.Commit).tree).stats
    except (pygit2.GitError, KeyError, ValueError, AttributeError):
        return None
    return {"files": stats.files_changed, "added": stats.insertions, "removed": stats.deletions}


def attempt_of(view: RunView, inst: InstanceRecord) -> dict[str, Any]:
    return {"id": inst["id"], "track": inst["track"], "attempt": inst["attempt"], "status": inst["status"],
            "commit": view.tip(inst)}


# -- show ------------------------------------------------------------------------------------
def tail_lines(data: bytes | None, lines: int) -> list[str]:
    if not data:
        return []
    text = data.decode("utf-8", "replace").rstrip("\n")
    return text.splitlines()[-lines:] if lines else []


class Outcome(TypedDict):
    """Did an attempt win its track, and why (or why not)?"""
    picked: bool  # is its track picked?
    won: bool | None  # None while the track is not picked
    why: str
    pick: NotRequired[PickRecord]
    code: NotRequired[str]  # why it lost, as a reason code


def outcome(view: RunView, inst: InstanceRecord) -> Outcome:
    """Did it win its track, and why (or why not)?"""
    pick = view.pick(inst["track"])
    if pick is None:
        fresh = view.freshness(inst)
        if inst["status"] != "succeeded":
            why = f"status {inst['status']}" + (f" ({inst['error']})" if inst.get("error") else "")
        elif model.changed_nothing(inst):
            why = NO_CHANGE_WHY
        elif fresh.state != "fresh":
            why = f"evidence {fresh.state}: {fresh.reason}"
        elif not fresh.passing:
            why = "its evidence does not pass every enforced gate" if (fresh.pack or {}).get("complete") \
                else "its evidence is incomplete (not every gate ran)"
        elif fresh.pack is not None and fresh.pack.get("protected_blocking"):
            why = ("passing, but it changed protected path(s) " + ", ".join(fresh.pack["protected_blocking"][:5])
                   + ": only a person's `pick --instance` can choose it")
        elif fresh.pack is not None and fresh.pack.get("reaches_harness"):
            why = ("passing, but its code reaches the test harness ("
                   + ", ".join(f"{f['path']}:{f['line']}" for f in fresh.pack["reaches_harness"][:5])
                   + "): only a person's `pick --instance` can choose it")
        else:
            why = "a candidate: fresh, complete, passing evidence"
        return {"picked": False, "won": None, "why": f"track {inst['track']} is not picked yet; {why}"}
    winner = pick["winner"]
    if winner["id"] == inst["id"]:
        score = "unavailable" if pick["score"] is None else pick["score"]
        others = len(pick["losers"])
        why = (f"won track {pick['track']} by {pick['selection_method']} over {others} other(s): score {score}, "
               f"proof issued {pick['proof_issued_at']}")
        return {"picked": True, "won": True, "why": why, "pick": pick}
    lost = next((l for l in pick["losers"] if l["id"] == inst["id"]), None)
    why = lost["reason"] if lost else "not a candidate"
    return {"picked": True, "won": False, "why": f"lost track {pick['track']} to {winner['id']}: {why}",
            "code": lost["code"] if lost else E.SELECTION_NO_PASS, "pick": pick}


def _gates(pack: Mapping[str, object] | None) -> list[dict[str, Any]]:
    """The gates a pack records (none in a pack without them)."""
    gates = pack.get("gates") if pack is not None else None
    return [g for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []


def gate_rows(view: RunView, inst: InstanceRecord, pack: Mapping[str, object] | None,
              lines: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for g in _gates(pack):
        data, source = view.log(inst, g.get("log"))
        rows.append({**g, "log_name": Path(g["log"]).name if g.get("log") else None, "log_source": source,
                     "tail": tail_lines(data, lines),
                     # the tests the runner says failed, by name (the tail may be a coverage table)
                     "failing": [] if g.get("passed") or not data else
                     failures.failing_tests(data.decode("utf-8", "replace"))})
    return rows


def agent_row(view: RunView, inst: InstanceRecord, lines: int) -> dict[str, object]:
    """The agent's log of the attempt: where it is read from and its last lines
    (a worker's comes home with its result, see ``collect``)."""
    data, source = view.log(inst, inst.get("log"))
    return {"log": inst.get("log"), "log_source": source, "tail": tail_lines(data, lines)}


# -- logs ------------------------------------------------------------------------------------
def _hidden_has_no_log(view: RunView, inst: InstanceRecord, g: Mapping[str, object]) -> ParallelError:
    """A hidden-tests gate ran, but its output would show the hidden tests, so only its counts are kept."""
    result = "passed" if g.get("passed") else "failed"
    if g.get("exit_code") is not None:  # none when it could not start or timed out: its error says which
        result += f", exit {g['exit_code']}"
    if g.get("error"):  # why it failed, when its exit status does not say (no count, a report)
        result += f" ({g['error']})"
    hidden = g.get("hidden")
    counts = (hidden.get("summary") if isinstance(hidden, dict) else None) or "no test counts in its output"
    return ParallelError(
        E.EVIDENCE_MISSING,
        f"gate {g['name']} ran for instance {inst['id']} (attempt {inst['attempt']}): {result}, "
        f"hidden tests: {counts}; its output is not kept, since it would show the hidden tests",
        hint=f"its result and counts are in `git parallel show {view.record['task']} {inst['id']}`; run the hidden "
             "tests yourself on the attempt's commit to see their output")


def log_path(view: RunView, inst: InstanceRecord, gate: str | None) -> str:
    """The path the record or pack names for the agent's log or a gate's."""
    if gate is None:
        remote = view.record.get("remote")
        log = inst.get("log")
        if not log and remote and remote.get("agent"):
            raise ParallelError(E.EVIDENCE_MISSING, f"instance {inst['id']} has no agent log here: attempt "
                                f"{inst['attempt']} runs on a worker ({remote.get('name')})",
                                hint=f"`git parallel collect {view.record['task']}` brings each finished attempt's "
                                     "log with its result")
        if not log:
            raise ParallelError(E.EVIDENCE_MISSING, f"instance {inst['id']} has no agent log yet (attempt "
                                f"{inst['attempt']} has not run)", hint=f"`git parallel run {view.record['task']} -- CMD`")
        return log
    pack = view.pack(inst)
    if pack is None:
        raise ParallelError(E.EVIDENCE_MISSING, f"instance {inst['id']} has no evidence pack, so no gate logs",
                            hint=f"`git parallel check {view.record['task']}` runs the gates")
    gates = _gates(pack)
    names = [str(g["name"]) for g in gates]
    for g in gates:
        if g["name"] == gate:
            if g.get("hidden") and not g.get("skipped"):
                raise _hidden_has_no_log(view, inst, g)
            if not g.get("log"):
                raise ParallelError(E.PREDECESSOR_INCOMPLETE, f"gate {gate} did not run for instance {inst['id']}: "
                                    f"{g.get('error')}", hint="its log would be empty; see `git parallel show`")
            return str(g["log"])
    raise ParallelError(E.INVALID_NAME, f"instance {inst['id']}'s evidence has no gate {gate!r} "
                        f"(it has: {', '.join(names) or 'no gates'})", hint="name one of those with --gate")
