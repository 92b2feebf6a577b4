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

import time
from pathlib import Path
from typing import Any, Iterator


from gitflow_parallel import errors as E
from gitflow_parallel.git import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.state.project import Project, instance_process_alive
from gitflow_parallel.model import find_instance
from gitflow_parallel.state.view import RunView, TAIL_LINES, attempt_of, changes_between, gate_rows, log_path, open_view, outcome


def diff(project: Project, task: str, ids: list[str] | None = None, stat: bool = False) -> dict[str, Any]:
    """Each attempt's change against the base; with two ids, between them."""
    view = open_view(project, task)
    record = view.record
    insts = [view.instance(i) for i in ids] if ids else list(record["instances"])
    base = record["base"]["commit"]
    out: dict[str, Any] = {"task": task, "run_id": record["run_id"], "base": record["base"], "stat": stat,
                           "shared": view.shared}
    if ids and len(ids) == 2:
        a, b = (attempt_of(view, i) for i in insts)
        _need_commits(view, [a, b])
        out.update(mode="between", attempts=[a, b], **changes_between(view.repo, a["commit"], b["commit"], not stat))
        return out
    attempts = []
    for inst in insts:
        row = attempt_of(view, inst)
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
