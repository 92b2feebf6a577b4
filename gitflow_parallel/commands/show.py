"""``git parallel show``: one attempt's record, its gates with their last log
lines, its score, and why it won or lost."""

from __future__ import annotations

from typing import Any, TypedDict

from gitflow_parallel import evidence
from gitflow_parallel.shapes.records import Base
from gitflow_parallel.shapes.results import Held
from gitflow_parallel.state import share
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.view import TAIL_LINES, agent_row, gate_rows, open_view, outcome


class Shown(TypedDict):
    """``show``'s result: the attempt's record fields, where its evidence
    stands, its pack's summary, its gates' and agent's log tails, whether it
    won and why, its earlier attempts and comments."""

    task: str
    run_id: str
    run_status: str
    shared: bool
    base: Base
    instance: dict[str, Any]  # the record's fields of it that people read
    commit: str | None
    evidence: dict[str, str | None]  # state, reason, ref
    pack: dict[str, Any] | None  # the pack's summary fields, as it holds them
    gates: list[dict[str, object]]
    agent: dict[str, object]
    outcome: dict[str, object]
    landed: str | None
    history: list[dict[str, Any]]
    comments: list[Any]
    differential: Any  # the pick's record of a differential selection, as written
    sandbox: Held  # the layers its agent and its gates ran in


def show(project: Project, task: str, inst_id: str, lines: int = TAIL_LINES) -> Shown:
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
            "finished_at", "verdict", "score", "removed", "agent", "tampered", "outcome")},
        "commit": view.tip(inst), "evidence": {"state": fresh.state, "reason": fresh.reason,
                                               "ref": share.evidence_ref(record["run_id"], inst_id, inst["attempt"])},
        "pack": pack and {k: pack.get(k) for k in ("commit", "tree", "verdict", "complete", "score", "score_error",
                                                   "proof_issued_at", "engine_evidence", "protected_detail",
                                                   "protected_blocking", "reaches_harness", "setup", "added_tests",
                                                   "fence")},
        "gates": gate_rows(view, inst, pack, lines),
        "agent": agent_row(view, inst, lines),
        "outcome": {k: v for k, v in fate.items() if k != "pick"},
        "landed": merged["landed"] if merged and fate.get("won") else None,
        "history": [{k: h.get(k) for k in ("attempt", "status", "verdict", "score", "error", "archive_ref")}
                    for h in inst.get("history") or []],
        "comments": inst.get("comments") or [],
        # A differential pick: the inputs and every candidate's behaviour on them.
        "differential": pick.get("differential") if (pick := fate.get("pick")) else None,
        "sandbox": evidence.layers_held(inst, pack),
    }
