"""``git parallel check``: judge every succeeded (or named) instance and
record its evidence.

The engine is ``judge/check`` (clean checkouts, gates and scores, the pack,
its binding and notes), because ``worker`` and ``run --until-pass`` judge
through it too; this module is the verb's contract: the result and when it
counts as passed (exit 0)."""

from __future__ import annotations

from typing import Any

from gitflow_parallel.judge import check as engine
from gitflow_parallel.state.project import Project


def check(project: Project, task: str, instances: list[str] | None = None, gates: list[str] | None = None,
          jobs: int | None = None) -> dict[str, Any]:
    """Judge the instances; refusals before anything runs raise, what goes
    wrong for one instance afterwards is reported under ``errors``."""
    return engine.check(project, task, instances=instances, gates=gates, jobs=jobs)


def check_ok(result: dict[str, Any]) -> bool:
    """What the exit status says: no instance failed its verdict or its check."""
    return not result["errors"] and all(i["verdict"] == "pass" for i in result["instances"])
