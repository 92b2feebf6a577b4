#!/usr/bin/env python3
"""Benchmark: what `git parallel run` costs per instance beyond the commands.

Builds a throwaway repository in a sealed environment (private HOME,
GIT_CONFIG_NOSYSTEM, fixed identities, this checkout's code on PYTHONPATH
and a `git-parallel` on PATH that runs it), spawns 16 instances
(`max_total: 16`), and times `git parallel run T --jobs 4 -- true` from the
outside.  The ideal is 4 rounds of one `true`, whose duration is measured
here too.  Prints each repetition and then

    run_overhead_ms: X

where X = (wall - ideal) / 16 * 1000, the median of the repetitions.
Target: X <= 50.  Each repetition uses a fresh repository, so earlier runs'
records do not weigh on later ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INSTANCES = 16
JOBS = 4
TARGET_MS = 50.0


def sealed_env(base: Path) -> dict[str, str]:
    home = base / "home"
    shim = base / "shim"
    home.mkdir()
    shim.mkdir()
    script = shim / "git-parallel"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m gitflow_parallel "$@"\n')
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
        "PYTHONPATH": str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
        "PATH": str(shim) + os.pathsep + env.get("PATH", ""), "LC_ALL": "C.UTF-8",
    })
    return env


def sh(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def make_repo(path: Path, env: dict[str, str]) -> None:
    path.mkdir()
    sh(["git", "init", "-q", "-b", "main"], path, env)
    (path / "README.md").write_text("bench\n")
    (path / ".gitparallel.yaml").write_text(f"max_total: {INSTANCES}\n")
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "initial"], path, env)


def time_true(env: dict[str, str], n: int = 50) -> float:
    """Seconds one `true` takes to start and exit, as a child of Python."""
    true = shutil.which("true", path=env["PATH"]) or "true"
    subprocess.run([true], env=env)  # warm the page cache
    t0 = time.perf_counter()
    for _ in range(n):
        subprocess.run([true], env=env)
    return (time.perf_counter() - t0) / n


def one_repetition(base: Path, k: int, env: dict[str, str]) -> tuple[float, float]:
    repo = base / f"repo{k}"
    make_repo(repo, env)
    sh(["git", "parallel", "spawn", "T", "-n", str(INSTANCES)], repo, env)
    t0 = time.perf_counter()
    proc = subprocess.run(["git", "parallel", "run", "T", "--jobs", str(JOBS), "--json", "--", "true"],
                          cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    summary = json.loads(proc.stdout)
    if summary["counts"]["succeeded"] != INSTANCES:
        raise SystemExit(f"not every instance succeeded: {summary['counts']}")
    ideal = (INSTANCES // JOBS) * time_true(env)
    return wall, ideal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (the median is reported)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-run-"))
    try:
        env = sealed_env(base)
        figures = []
        for k in range(args.repeat):
            wall, ideal = one_repetition(base, k, env)
            x = (wall - ideal) / INSTANCES * 1000
            figures.append(x)
            print(f"repetition {k + 1}: wall {wall * 1000:.0f} ms, ideal {ideal * 1000:.1f} ms, "
                  f"overhead {x:.1f} ms per instance")
        median = statistics.median(figures)
        print(f"run_overhead_ms: {median:.1f}")
        print(f"target: <= {TARGET_MS:.0f} ms per instance ({'met' if median <= TARGET_MS else 'NOT met'})")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
