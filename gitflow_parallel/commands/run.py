"""``git parallel run``: the agent in every pending (or named) instance.

The engine is ``proc/agents`` (claims under the lock, slots, process groups,
the watchdog, leftovers committed, the record and notes), because ``worker``
and ``run --until-pass`` run agents through it too; this module is the
verb's contract: what it refuses before anything starts, and when it
counts as succeeded (exit 0)."""

from __future__ import annotations

from typing import Any, Callable

from gitflow_parallel.proc import agents
from gitflow_parallel.state.project import Project


def run(project: Project, task: str, argv: list[str], instances: list[str] | None = None,
        timeout: float | None = None, jobs: int | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None, tmux: bool = False) -> dict[str, Any]:
    """Run ``argv`` in every selected instance; returns the summary.  A run
    refused before it starts (``agents.refuse_options``) claims nothing."""
    return agents.run(project, task, argv, instances=instances, timeout=timeout, jobs=jobs, progress=progress,
                      tmux=tmux)


def succeeded(summary: dict[str, Any]) -> bool:
    """True when every selected instance ran and succeeded, the run was not
    interrupted, and the notes were written."""
    return (not summary["interrupted"] and summary["notes_error"] is None
            and all(r["ran"] and r["status"] == "succeeded" for r in summary["instances"]))
