#!/usr/bin/env python3
"""Benchmark: what `git parallel run` costs per instance beyond the commands.

Builds throwaway repositories in a sealed environment (benchenv: private
HOME, GIT_CONFIG_NOSYSTEM, fixed identities, this checkout's code on
PYTHONPATH and a `git-parallel` on PATH that runs it).  Each round spawns 16
instances (`max_total: 16`) in a fresh repository, untimed, so earlier runs'
records do not weigh on later ones, and then times two sides through
benchenv.alternating (an `os.sync()` before each, the order alternating):

* `git parallel run T --jobs 4 -- true`, from the outside (each attempt in
  its Landlock fence where the kernel has one, its tamper snapshot taken
  before and compared after);
* the same with `GIT_PARALLEL_SANDBOX=off` (no fence; the snapshot stays);
* the ideal: 4 rounds of one `true` started the same way (16 instances, 4 at
  a time).

Prints the median over the rounds, with min and max, of

    run_overhead_ms: X
    fence_added_ms: F
    tamper_snapshot_ms: S
    fence_start_ms: G

where X = (run - ideal) / 16 * 1000 for the round's sides, F = (run -
unfenced run) / 16 * 1000, and S the time of one snapshot plus its
comparison (``git/tamper``: what an attempt pays twice over, before and
after) on a repository with the 16 instances' refs, timed in-process, and G
what the fence adds to starting one agent, timed in-process (building it,
its own view of the common dir, starting inside it, undoing it), which
stays readable when F drowns in a loaded machine's noise.
Targets: X <= 50; F + S <= 10.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchenv import (MIN_ROUNDS, ROUNDS, Side, alternating, differences_ms, discard, figure, new_repo, print_load,  # noqa: E402
                      scaled, sh, sized, with_bytecode, workspace)

INSTANCES = sized(16, 4)
JOBS = sized(4, 2)


def make_repo(path: Path, env: dict[str, str]) -> None:
    new_repo(path, env, f"max_total: {INSTANCES}\n")
    sh(["git", "parallel", "spawn", "T", "-n", str(INSTANCES)], path, env)


def sides(base: Path, env: dict[str, str]) -> list[Side]:
    true = shutil.which("true", path=env["PATH"]) or "true"

    def run(k: int) -> None:
        proc = subprocess.run(["git", "parallel", "run", "T", "--jobs", str(JOBS), "--json", "--", true],
                              cwd=base / f"repo{k}", env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        counts = json.loads(proc.stdout)["counts"]
        if counts["succeeded"] != INSTANCES:
            raise SystemExit(f"not every instance succeeded: {counts}")

    def ideal(k: int) -> None:
        for _ in range(INSTANCES // JOBS):
            subprocess.run([true], env=env)

    unfenced = {**env, "GIT_PARALLEL_SANDBOX": "off"}

    def run_unfenced(k: int) -> None:
        proc = subprocess.run(["git", "parallel", "run", "T", "--jobs", str(JOBS), "--json", "--", true],
                              cwd=base / f"open{k}", env=unfenced, capture_output=True, text=True)
        if proc.returncode != 0 or json.loads(proc.stdout)["counts"]["succeeded"] != INSTANCES:
            raise SystemExit(f"unfenced run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")

    return [Side("run", run, before=lambda k: make_repo(base / f"repo{k}", env)),
            Side("unfenced", run_unfenced, before=lambda k: make_repo(base / f"open{k}", env)), Side("ideal", ideal)]


def snapshot_ms(repo: Path, times: int = 50) -> list[float]:
    """One tamper snapshot and its comparison, as an attempt pays them."""
    import time

    import pygit2

    from gitflow_parallel.git import tamper

    common = repo / ".git"
    handle = pygit2.Repository(str(common))
    out = []
    for _ in range(times):
        start = time.perf_counter()
        before = tamper.take(common, "parallel/T/1")
        tamper.check(handle, before, [tamper.INSTANCE_BRANCHES])
        out.append((time.perf_counter() - start) * 1000)
    return out


def fence_start_ms(repo: Path, times: int = 50) -> list[float]:
    """What the fence adds to starting one agent, in-process (the run's
    side by side figure drowns in noise on a loaded machine): building the
    attempt's fence (the layers this machine has: its namespaces, else
    Landlock), starting ``true`` inside it and closing it (taking in its
    objects and refs), minus starting ``true`` without, alternating, each
    pair one figure."""
    import os
    import time

    from gitflow_parallel.proc import sandbox

    common = repo / ".git"
    worktree = Path(sandbox.instance_worktrees(common)[0])
    reads = sandbox.Reads()
    true = shutil.which("true") or "true"

    def start(fence: sandbox.Fence | None) -> None:
        argv = [true] if fence is None else fence.wrap([true], worktree, dict(os.environ))

        def begin() -> subprocess.Popen[bytes]:
            return subprocess.Popen(argv, cwd=worktree, start_new_session=True, stdin=subprocess.DEVNULL)
        proc = begin() if fence is None else fence.spawn(begin)
        proc.wait()

    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        fence = sandbox.for_agent(common, worktree, "parallel/T/1", {"sandbox": "auto"}, "bench", [], reads)
        start(fence)
        fence.close()
        t1 = time.perf_counter()
        start(None)
        t2 = time.perf_counter()
        out.append(((t1 - t0) - (t2 - t1)) * 1000)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS}, at least {MIN_ROUNDS})")
    args = parser.parse_args()
    print_load()
    base, env = workspace("bench-run-")
    with_bytecode(env, base)
    env["LC_ALL"] = "C.UTF-8"
    try:
        times = alternating(sides(base, env), args.rounds)
        figure("run_wall_ms", scaled(times["run"], 1000), 0)
        figure("run_ideal_ms", scaled(times["ideal"], 1000), 1)
        figure("run_overhead_ms", scaled(differences_ms(times["run"], times["ideal"]), 1 / INSTANCES), 1)
        figure("run_unfenced_overhead_ms", scaled(differences_ms(times["unfenced"], times["ideal"]), 1 / INSTANCES), 1)
        figure("fence_added_ms", scaled(differences_ms(times["run"], times["unfenced"]), 1 / INSTANCES), 1)
        figure("tamper_snapshot_ms", snapshot_ms(base / "repo0"), 2)
        from gitflow_parallel.proc import namespace

        print(f"fence: {'namespace' if namespace.unavailable() is None else 'landlock or none'}")
        figure("fence_start_ms", fence_start_ms(base / "repo0"), 2)
        return 0
    finally:
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
