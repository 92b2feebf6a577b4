"""Reviewing a run: its attempts side by side (``diff``), one attempt's
record, gates, score and fate (``show``), and its logs (``logs``).

A run is read through a ``RunView``, from one of two sources:

* the local record (``<common>/parallel/runs/<task>.yaml``), with packs,
  picks and logs from their files, falling back to the refs for what a
  cleanup or another machine left only there;
* in a clone that did not make the run, its snapshot on
  ``refs/parallel/runs/<run_id>`` (fetched with ``git parallel fetch``; see
  ``share.py``): packs and logs from the evidence refs, tips from the archive
  refs, picks from the snapshot.  Every pack and pick is still checked
  against the sha256 the record binds, so a fetched copy is judged exactly
  as the original.

Nothing here writes anything.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import evidence
from gitflow_parallel.git import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import sha256_bytes
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project, instance_process_alive
from gitflow_parallel.model import find_instance
from gitflow_parallel.git.worktrees import archive_ref

TAIL_LINES = 5


@dataclass
class RunView:
    project: Project
    record: dict[str, Any]
    snapshot: str | None = None  # the run's snapshot commit, when read from git

    @property
    def shared(self) -> bool:
        return self.snapshot is not None

    @property
    def repo(self) -> pygit2.Repository:
        return self.project.repo.git

    def instance(self, inst_id: str) -> dict[str, Any]:
        return find_instance(self.record, inst_id)

    def tip(self, inst: dict[str, Any]) -> str | None:
        """The attempt's commit: its branch here, else its archive ref, else the
        head the record last saw (if this clone has it)."""
        if not self.shared and not inst.get("removed"):
            tip = self.project.tip(inst)
            if tip is not None:
                return tip
        kept = share.lookup(self.project.repo, archive_ref(self.record["run_id"], inst["id"], inst["attempt"]))
        if kept is not None:
            return kept
        head = inst.get("head")
        return head if head and head in self.repo else None

    def pack(self, inst: dict[str, Any]) -> dict[str, Any] | None:
        return share.load_pack(self.project, self.record, inst["id"], inst["attempt"], inst.get("evidence"))

    def freshness(self, inst: dict[str, Any]) -> evidence.Freshness:
        return evidence.freshness(self.record, inst, self.tip(inst), loader=self.pack)

    def pick(self, track: str) -> dict[str, Any] | None:
        from gitflow_parallel.state.picks import load_pick, validate_pick

        if not self.shared:
            return load_pick(self.project, self.record, track)
        data = share.shared_pick(self.project, self.snapshot or "", track)
        binding = (self.record.get("picks") or {}).get(track)
        if data is None or not binding or sha256_bytes(data) != binding.get("sha256"):
            return None
        return validate_pick(json.loads(data), Path(f"picks/{track}.json"), self.record, track)

    def log(self, inst: dict[str, Any], path: str | None) -> tuple[bytes | None, str]:
        """A log's bytes and where they came from ("file", "ref" or "none")."""
        if not path:
            return None, "none"
        if not self.shared:
            try:
                return Path(path).read_bytes(), "file"
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
def shared_status(project: Project, task: str) -> dict[str, Any]:
    """``status TASK`` for a run this clone only fetched: no worktrees or
    branches of it here, so no flags; evidence judged against the archived tips."""
    view = open_view(project, task)
    rows = []
    for inst in view.record["instances"]:
        fresh = view.freshness(inst)
        rows.append({**inst, "tip": view.tip(inst), "evidence_state": fresh.state, "evidence_reason": fresh.reason,
                     "flags": []})
    return {"run": view.record, "rows": rows, "shared": share.run_ref(view.record["run_id"]),
            "base_tip": project.repo.ref_target(view.record["base"]["ref"])}


# -- diff -------------------------------------------------------------------------------------
def changes_between(repo: pygit2.Repository, old: str, new: str, with_patch: bool) -> dict[str, Any]:
    diff = repo.diff(repo.get(old).peel(pygit2.Commit).tree, repo.get(new).peel(pygit2.Commit).tree)
    files = []
    for patch in diff:
        delta = patch.delta
        binary = delta.is_binary
        _, added, removed = patch.line_stats
        files.append({"path": delta.new_file.path if delta.status_char() != "D" else delta.old_file.path,
                      "status": delta.status_char(), "binary": binary,
                      "added": None if binary else added, "removed": None if binary else removed})
    out = {"files": files, "added": sum(f["added"] or 0 for f in files),
           "removed": sum(f["removed"] or 0 for f in files)}
    if with_patch:
        out["patch"] = diff.patch or ""
    return out


def _attempt(view: RunView, inst: dict[str, Any]) -> dict[str, Any]:
    return {"id": inst["id"], "track": inst["track"], "attempt": inst["attempt"], "status": inst["status"],
            "commit": view.tip(inst)}


def diff(project: Project, task: str, ids: list[str] | None = None, stat: bool = False) -> dict[str, Any]:
    """Each attempt's change against the base; with two ids, between them."""
    view = open_view(project, task)
    record = view.record
    insts = [view.instance(i) for i in ids] if ids else list(record["instances"])
    base = record["base"]["commit"]
    out: dict[str, Any] = {"task": task, "run_id": record["run_id"], "base": record["base"], "stat": stat,
                           "shared": view.shared}
    if ids and len(ids) == 2:
        a, b = (_attempt(view, i) for i in insts)
        _need_commits(view, [a, b])
        out.update(mode="between", attempts=[a, b], **changes_between(view.repo, a["commit"], b["commit"], not stat))
        return out
    attempts = []
    for inst in insts:
        row = _attempt(view, inst)
        if row["commit"] is None:
            row.update(files=[], added=0, removed=0, missing=True)
        else:
            row.update(changes_between(view.repo, base, row["commit"], not stat), missing=False)
        attempts.append(row)
    out.update(mode="base", attempts=attempts, files=_file_table(attempts))
    return out


def _need_commits(view: RunView, attempts: list[dict[str, Any]]) -> None:
    for a in attempts:
        if a["commit"] is None:
            raise ParallelError(
                E.BRANCH_NOT_FOUND, f"the commit of instance {a['id']} is not in this repository",
                hint="`git parallel fetch` brings the archive and evidence refs of a teammate's run")


def _file_table(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per file changed by any attempt: what each did to it."""
    paths = sorted({f["path"] for a in attempts for f in a["files"]})
    rows = []
    for path in paths:
        cells = {}
        for a in attempts:
            hit = next((f for f in a["files"] if f["path"] == path), None)
            cells[a["id"]] = hit and {k: hit[k] for k in ("status", "added", "removed", "binary")}
        rows.append({"path": path, "attempts": cells})
    return rows


# -- show ------------------------------------------------------------------------------------
def _tail(data: bytes | None, lines: int) -> list[str]:
    if not data:
        return []
    text = data.decode("utf-8", "replace").rstrip("\n")
    return text.splitlines()[-lines:] if lines else []


def outcome(view: RunView, inst: dict[str, Any]) -> dict[str, Any]:
    """Did it win its track, and why (or why not)?"""
    pick = view.pick(inst["track"])
    if pick is None:
        fresh = view.freshness(inst)
        if inst["status"] != "succeeded":
            why = f"status {inst['status']}" + (f" ({inst['error']})" if inst.get("error") else "")
        elif fresh.state != "fresh":
            why = f"evidence {fresh.state}: {fresh.reason}"
        elif not fresh.passing:
            why = "its evidence does not pass every enforced gate" if (fresh.pack or {}).get("complete") \
                else "its evidence is incomplete (not every gate ran)"
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


def gate_rows(view: RunView, inst: dict[str, Any], pack: dict[str, Any] | None, lines: int) -> list[dict[str, Any]]:
    rows = []
    for g in (pack or {}).get("gates") or []:
        data, source = view.log(inst, g.get("log"))
        rows.append({**g, "log_name": Path(g["log"]).name if g.get("log") else None, "log_source": source,
                     "tail": _tail(data, lines)})
    return rows


def show(project: Project, task: str, inst_id: str, lines: int = TAIL_LINES) -> dict[str, Any]:
    """One attempt: its record, its gates with their last log lines, its
    score, and why it won or lost."""
    view = open_view(project, task)
    record = view.record
    inst = view.instance(inst_id)
    pack = view.pack(inst)
    fresh = view.freshness(inst)
    fate = outcome(view, inst)
    merged = record.get("merge") if record["status"] == "merged" else None
    return {
        "task": task, "run_id": record["run_id"], "run_status": record["status"], "shared": view.shared,
        "base": record["base"], "instance": {k: inst.get(k) for k in (
            "id", "track", "status", "attempt", "branch", "worktree", "error", "exit_code", "started_at",
            "finished_at", "verdict", "score", "removed")},
        "commit": view.tip(inst), "evidence": {"state": fresh.state, "reason": fresh.reason,
                                               "ref": share.evidence_ref(record["run_id"], inst_id, inst["attempt"])},
        "pack": pack and {k: pack.get(k) for k in ("commit", "tree", "verdict", "complete", "score", "score_error",
                                                   "proof_issued_at", "engine_evidence")},
        "gates": gate_rows(view, inst, pack, lines),
        "outcome": {k: v for k, v in fate.items() if k != "pick"},
        "landed": merged["landed"] if merged and fate.get("won") else None,
        "history": [{k: h.get(k) for k in ("attempt", "status", "verdict", "score", "error", "archive_ref")}
                    for h in inst.get("history") or []],
    }


# -- logs ------------------------------------------------------------------------------------
def log_path(view: RunView, inst: dict[str, Any], gate: str | None) -> str:
    """The path the record or pack names for the agent's log or a gate's."""
    if gate is None:
        if not inst.get("log"):
            raise ParallelError(E.EVIDENCE_MISSING, f"instance {inst['id']} has no agent log yet (attempt "
                                f"{inst['attempt']} has not run)", hint=f"`git parallel run {view.record['task']} -- CMD`")
        return inst["log"]
    pack = view.pack(inst)
    if pack is None:
        raise ParallelError(E.EVIDENCE_MISSING, f"instance {inst['id']} has no evidence pack, so no gate logs",
                            hint=f"`git parallel check {view.record['task']}` runs the gates")
    names = [g["name"] for g in pack.get("gates") or []]
    for g in pack.get("gates") or []:
        if g["name"] == gate:
            if not g.get("log"):
                raise ParallelError(E.PREDECESSOR_INCOMPLETE, f"gate {gate} did not run for instance {inst['id']}: "
                                    f"{g.get('error')}", hint="its log would be empty; see `git parallel show`")
            return g["log"]
    raise ParallelError(E.INVALID_NAME, f"instance {inst['id']}'s evidence has no gate {gate!r} "
                        f"(it has: {', '.join(names) or 'no gates'})", hint="name one of those with --gate")


def logs(project: Project, task: str, inst_id: str, gate: str | None = None) -> dict[str, Any]:
    view = open_view(project, task)
    inst = view.instance(inst_id)
    path = log_path(view, inst, gate)
    data, source = view.log(inst, path)
    if data is None:
        raise ParallelError(E.EVIDENCE_MISSING, f"the log {path} is gone, and no evidence ref keeps it",
                            hint="logs live under <common>/parallel/logs/ and on refs/parallel/evidence/")
    return {"task": task, "run_id": view.record["run_id"], "instance": inst_id, "attempt": inst["attempt"],
            "which": f"gate {gate}" if gate else "agent", "path": path, "source": source,
            "text": data.decode("utf-8", "replace")}


def follow(project: Project, task: str, inst_id: str, gate: str | None = None,
           poll: float = 0.2) -> Iterator[bytes]:
    """The agent's log as it grows, until its instance stops running."""
    view = open_view(project, task)
    inst = view.instance(inst_id)
    path = Path(log_path(view, inst, gate))
    offset = 0

    def more() -> bytes:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""

    while True:
        chunk = more()
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        current = find_instance(project.store.load(task), inst_id) if not view.shared else inst
        if current["status"] != "running" or current["attempt"] != inst["attempt"] \
                or not instance_process_alive(current):
            # What it wrote between our last read and its end.
            chunk = more()
            if chunk:
                yield chunk
            return
        time.sleep(poll)
