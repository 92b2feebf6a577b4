"""Scripted stand-ins for coding agents, used by ``git parallel demo``.

Each behaves like a real agent would from git-parallel's point of view: it
runs in its worktree, edits files (or not), may commit, and reports an
``ai_invocation`` event to ``$GIT_PARALLEL_EVENTS``.  No network, no model.

    python -m gitflow_parallel.agents.scripted fix|break|noop
    python -m gitflow_parallel.agents.scripted --plan 1=fix,2=break,3=noop {instance}

The second form lets one ``git parallel run`` give each instance its own
behaviour (``{instance}`` is substituted by the runner).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

FIXED = '''"""A tiny calculator."""


def add(a: int, b: int) -> int:
    return a + b


def mean(values: list[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)
'''


def _event(name: str, **fields: object) -> None:
    path = os.environ.get("GIT_PARALLEL_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"event": name, "ts": time.time(), **fields}) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--plan":
        plan = dict(item.split("=", 1) for item in argv[1].split(","))
        behaviour = plan.get(argv[2], "noop")
    else:
        behaviour = argv[0] if argv else "noop"
    _event("ai_invocation", agent="scripted", behaviour=behaviour)
    calc = Path("calc.py")
    if behaviour == "fix":
        # The proper fix: both bugs, nothing else.
        calc.write_text(FIXED)
        print("fixed add() and mean() in calc.py")
    elif behaviour == "break":
        # Fixes add() but "simplifies" mean() and deletes the test that
        # guarded the empty case: the remaining tests catch it anyway.
        calc.write_text(FIXED.replace(
            '    if not values:\n        raise ValueError("mean of no values")\n', ""
        ).replace("/ len(values)", "/ max(len(values) - 1, 1)"))
        print("rewrote mean() in calc.py")
    elif behaviour == "noop":
        print("looked around and changed nothing")
    else:
        print(f"unknown behaviour {behaviour!r}", file=sys.stderr)
        return 2
    _event("agent_done", behaviour=behaviour)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
