"""Crash recovery: ``validate`` reports what is inconsistent, ``recover``
repairs what can be decided safely.

Both verbs start from one read-only *inspection* of a run that yields
``Finding``s (code, severity, message, ``fix``; a ``Repair`` or a
``refusal`` when recover owns it).  ``recover`` changes nothing if any
finding is refused, and otherwise runs its repairs in fixed, idempotent
phases, logging each step to ``parallel/audit/<run_id>.jsonl``.  What each
verb does, per crash point: docs/recovery.md; the findings model, the
phases and the decisions behind them: docs/recovery.md, "How recover
decides".
"""

from __future__ import annotations

from gitflow_parallel.recovery.scan import Finding, Repair, Scan, missing_notes, recovery_id, required_notes


__all__ = ["Finding", "Repair", "Scan", "missing_notes", "recover", "recovery_id", "required_notes", "validate"]
