#!/usr/bin/env python3
"""Start benchmark: how long the verbs people type to look take, from the
shell's exec to the exit, against `git status` in the same repository.

One sealed repository with one spawned run of 4 instances.  Every round
times, after an `os.sync()` and in an order that rotates (benchenv.alternating),
`git parallel status`, `git parallel status TASK`, `git parallel -h`
and `git status`; Python keeps its bytecode cache (benchenv.with_bytecode),
as a pip install does.  Prints the median over the rounds with min and max:

* `status_s`: `git parallel status` (the list of runs; target <= 0.15 on a
  quiet machine);
* `status_task_s`: `git parallel status TASK` (one run's table);
* `help_s`: `git parallel -h` (click and the commands' names only);
* `git_status_s`: `git status`, for scale;
* `status_cpu_s`, `status_task_cpu_s`, `help_cpu_s`: the CPU seconds (user +
  system) each used, which say more than wall times on a loaded machine.

The load is printed at the start and at the end: figures made while it
was above the core count are not the quiet machine's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (ROUNDS, Side, alternating, discard, figure, load_average, new_repo, print_load,  # noqa: E402
                      sh, with_bytecode, workspace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=max(ROUNDS, 10))
    args = parser.parse_args()
    print_load()
    base, env = workspace("gp-bench-start-")
    try:
        with_bytecode(env, base)
        repo = base / "repo"
        new_repo(repo, env, "max_total: 8\n")
        sh(["git", "parallel", "spawn", "fix", "-n", "4"], repo, env)
        commands = {"status_s": ["git", "parallel", "status"],
                    "status_task_s": ["git", "parallel", "status", "fix"],
                    "help_s": ["git", "parallel", "-h"],
                    "git_status_s": ["git", "status"]}
        for argv in commands.values():  # the bytecode cache written once, untimed
            sh(argv, repo, env)
        sides = [Side(name, lambda k, argv=argv: sh(argv, repo, env)) for name, argv in commands.items()]
        cpu: dict[str, list[float]] = {}
        times = alternating(sides, args.rounds, cpu)
        for name in commands:
            figure(name, times[name], digits=3)
        for name in ("status_s", "status_task_s", "help_s"):
            figure(name[:-2] + "_cpu_s", cpu[name], digits=3)
        print(f"load average at end: {load_average()}", flush=True)
    finally:
        discard(base)


if __name__ == "__main__":
    main()
