"""``git parallel cleanup``: remove the worktrees and branches of a finished
run, each tip archived first (``--keep-losers``: only the winners').

The work is ``state/retire.cleanup``, because ``merge`` cleans up after a
landing through it too; this module is the verb the CLI calls."""

from __future__ import annotations

from gitflow_parallel.state import retire
from gitflow_parallel.proc import leftovers
from gitflow_parallel.state.project import Project


def cleanup(project: Project, task: str, keep_losers: bool = False, force: bool = False) -> retire.Cleanup:
    return retire.cleanup(project, task, keep_losers=keep_losers, force=force,
                          stage=leftovers.fenced_stager(project, task))
