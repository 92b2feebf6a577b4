"""The one error type of git-parallel and its reason codes.

Every refusal is a ``ParallelError`` carrying a stable reason code, a message
saying what was found, and a hint saying what to run next.  The CLI maps it to
``error[CODE]: message`` / ``hint: ...`` and exit status 1 in one place.
"""

from __future__ import annotations

import errno

INVALID_NAME = "PARALLEL_INVALID_NAME"
NOT_A_REPO = "PARALLEL_NOT_A_REPO"
CONFIG_INVALID = "PARALLEL_CONFIG_INVALID"
BASE_NOT_FOUND = "PARALLEL_BASE_NOT_FOUND"
BASE_DIRTY = "PARALLEL_BASE_DIRTY"
RUN_EXISTS = "PARALLEL_RUN_EXISTS"
RUN_NOT_FOUND = "PARALLEL_RUN_NOT_FOUND"
RUN_REVISION_CONFLICT = "PARALLEL_RUN_REVISION_CONFLICT"
RECORD_INVALID = "PARALLEL_RECORD_INVALID"
BRANCH_NOT_FOUND = "PARALLEL_BRANCH_NOT_FOUND"
BRANCH_TERMINAL = "PARALLEL_BRANCH_TERMINAL"
ATTEMPT_MISMATCH = "PARALLEL_ATTEMPT_MISMATCH"
TRACK_MISMATCH = "PARALLEL_TRACK_MISMATCH"
PREDECESSOR_INCOMPLETE = "PARALLEL_PREDECESSOR_INCOMPLETE"
EVIDENCE_MISSING = "PARALLEL_EVIDENCE_MISSING"
EVIDENCE_MISMATCH = "PARALLEL_EVIDENCE_MISMATCH"
JOIN_INCOMPLETE = "PARALLEL_JOIN_INCOMPLETE"
RECOVERY_REFUSED = "PARALLEL_RECOVERY_REFUSED"
WORKTREE_CREATE_FAILED = "PARALLEL_DEV_WORKTREE_CREATE_FAILED"
WORKTREE_CLEANUP_FAILED = "PARALLEL_DEV_WORKTREE_CLEANUP_FAILED"
RESOURCE_CAP_EXHAUSTED = "PARALLEL_DEV_RESOURCE_CAP_EXHAUSTED"
RESOURCE_LOCK_FAILED = "PARALLEL_DEV_RESOURCE_LOCK_FAILED"
EXECUTE_FAILED = "PARALLEL_DEV_EXECUTE_FAILED"
SELECTION_NO_PASS = "PARALLEL_DEV_SELECTION_NO_PASS"
ANTI_SLOP_BELOW_THRESHOLD = "PARALLEL_DEV_ANTI_SLOP_BELOW_THRESHOLD"
PICK_SCHEMA_INVALID = "PARALLEL_DEV_PICK_SCHEMA_INVALID"
MERGE_CONFLICT = "PARALLEL_DEV_MERGE_CONFLICT"
MERGE_TIMEOUT = "PARALLEL_DEV_MERGE_TIMEOUT"
MANUAL_HALT = "PARALLEL_DEV_MANUAL_HALT"
PROTECTED_PATH_CHANGED = "PARALLEL_PROTECTED_PATH_CHANGED"
GATE_OUTSIDE_CHECKOUT = "PARALLEL_GATE_OUTSIDE_CHECKOUT"
PICK_EXISTS = "PARALLEL_PICK_EXISTS"
NOT_PICKED = "PARALLEL_NOT_PICKED"
REMOTE_NOT_FOUND = "PARALLEL_REMOTE_NOT_FOUND"
REMOTE_FAILED = "PARALLEL_REMOTE_FAILED"
REMOTE_DIVERGED = "PARALLEL_REMOTE_DIVERGED"
REMOTE_MOVED = "PARALLEL_REMOTE_MOVED"
CLAIM_LOST = "PARALLEL_CLAIM_LOST"
NO_SPACE = "PARALLEL_NO_SPACE"
AGENT_TAMPERED = "PARALLEL_AGENT_TAMPERED"
SANDBOX_UNAVAILABLE = "PARALLEL_SANDBOX_UNAVAILABLE"
SANDBOX_WRITE_REFUSED = "PARALLEL_SANDBOX_WRITE_REFUSED"
RESULTS_FORGED = "PARALLEL_RESULTS_FORGED"
REACHES_HARNESS = "PARALLEL_REACHES_HARNESS"
# In a pick record, never refusing a pick: why `selection: differential` fell back.
DISTINGUISH_FAILED = "PARALLEL_DISTINGUISH_FAILED"
DISTINGUISH_EMPTY = "PARALLEL_DISTINGUISH_EMPTY"

# Findings of `git parallel validate` (what `recover` repairs or reports).
REVISION_INVALID = "PARALLEL_REVISION_INVALID"
OBJECT_MISSING = "PARALLEL_OBJECT_MISSING"
WORKTREE_MISSING = "PARALLEL_WORKTREE_MISSING"
SPAWN_INCOMPLETE = "PARALLEL_SPAWN_INCOMPLETE"
CLEANUP_INCOMPLETE = "PARALLEL_CLEANUP_INCOMPLETE"
BRANCH_MOVED = "PARALLEL_BRANCH_MOVED"
PROCESS_GONE = "PARALLEL_PROCESS_GONE"
EVIDENCE_UNBOUND = "PARALLEL_EVIDENCE_UNBOUND"
PICK_UNBOUND = "PARALLEL_PICK_UNBOUND"
PICK_MISSING = "PARALLEL_PICK_MISSING"
BASE_MERGED = "PARALLEL_BASE_ALREADY_MERGED"
MERGE_INTENT_LEFT = "PARALLEL_MERGE_INTENT_LEFT"
BASE_WORKTREE_STALE = "PARALLEL_BASE_WORKTREE_STALE"
NOTES_MISSING = "PARALLEL_NOTES_MISSING"
NOTES_REF_DAMAGED = "PARALLEL_NOTES_REF_DAMAGED"
STALE_LOCK = "PARALLEL_STALE_LOCK"
LOCK_HELD = "PARALLEL_LOCK_HELD"
ORPHAN = "PARALLEL_ORPHAN"
BASE_HAS_LOSER = "PARALLEL_BASE_HAS_LOSER"

ALL_CODES = tuple(
    value for name, value in sorted(globals().items()) if name.isupper() and isinstance(value, str)
)


class ParallelError(Exception):
    """A refusal with a reason code; nothing was changed unless ``message`` says so."""

    def __init__(self, code: str, message: str, hint: str | None = None, **details: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"ok": False, "code": self.code, "message": self.message, "hint": self.hint}
        if self.details:
            out["details"] = self.details
        return out


def is_no_space(exc: BaseException) -> bool:
    """A full disk (ENOSPC), whether Python saw it or a git child said so."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left on device" in str(exc) or "Disk quota exceeded" in str(exc)


def no_space(what: str, hint: str) -> ParallelError:
    """The refusal for a full disk: what could not be done, and what to run once space is freed."""
    return ParallelError(NO_SPACE, f"{what}: no space left on device (ENOSPC)",
                         hint=f"free space on the disk that holds the repository and its worktrees, then {hint}")


HOOK_REFUSED = 10


HOOK_INTERNAL = 3
