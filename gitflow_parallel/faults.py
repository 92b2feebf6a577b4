"""Named crash points for fault-injection tests.

``GIT_PARALLEL_FAULT=<point>`` makes the process kill itself with SIGKILL
when it reaches ``<point>``, so tests can prove that ``recover`` repairs a
crash at exactly that place.  With the variable unset this costs one dict
lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "GIT_PARALLEL_FAULT"

# Every point the code can crash at; docs/recovery.md's table lists them.
POINTS = (
    "spawn.after_retire",
    "spawn.after_record",
    "spawn.before_worktrees",
    "spawn.after_worktrees",
    "run.after_start",
    "run.after_running",
    "run.after_commit",
    "check.after_pack",
    "pick.after_record",
    "merge.after_ref",
    "merge.after_worktree",
)


def point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
