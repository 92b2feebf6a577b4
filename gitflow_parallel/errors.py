"""The one error type of git-parallel and its reason codes.

Every refusal is a ``ParallelError`` carrying a stable reason code, a message
saying what was found, and a hint saying what to run next.  The CLI maps it to
``error[CODE]: message`` / ``hint: ...`` and exit status 1 in one place.
"""

from __future__ import annotations

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
