#!/usr/bin/env python3
"""Workers through a git remote: what coordination costs, and how it scales.

Against a local bare remote (so the figures are git's and ours, not a
network's):

- ``claim_overhead_ms``: per instance, the claiming push plus the delivery
  (ls-remote of the notes, the notes rebuilt on the remote's, one atomic
  push of claim, branch, evidence and notes), median over 8 instances of an
  agent that does nothing, one worker.
- 8 instances of a 2-second agent, done by 1, 2 and 4 worker processes, each
  in a clone of its own: the wall time from starting the workers until the
  last one exits, and ``scaling_K`` = wall(K) / wall(1), where the ideal is
  1/K (``efficiency_K`` = wall(1) / (K * wall(K)), ideal 1).

    python scripts/bench_remote.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import sh, workspace  # noqa: E402

CONFIG = "max_total: 16\ngates:\n  - name: ok\n    run: [\"true\"]\n"
INSTANCES = 8


def remote_run(base: Path, env: dict[str, str], name: str, agent: list[str], workers: int) -> tuple[Path, list[Path]]:
    origin = base / f"{name}.git"
    sh(["git", "init", "-q", "--bare", "-b", "main", str(origin)], base, env)
    seed = base / f"{name}-seed"
    sh(["git", "init", "-q", "-b", "main", str(seed)], base, env)
    (seed / ".gitparallel.yaml").write_text(CONFIG)
    (seed / "README.md").write_text("bench\n")
    sh(["git", "add", "-A"], seed, env)
    sh(["git", "commit", "-q", "-m", "seed"], seed, env)
    sh(["git", "push", "-q", str(origin), "main"], seed, env)
    coord = base / f"{name}-coord"
    sh(["git", "clone", "-q", str(origin), str(coord)], base, env)
    sh(["git", "parallel", "spawn", "t", "-n", str(INSTANCES), "--remote", "origin"], coord, env)
    sh(["git", "parallel", "run", "t", "--remote", "origin", "--", *agent], coord, env)
    clones = []
    for k in range(workers):
        clone = base / f"{name}-w{k}"
        sh(["git", "clone", "-q", str(origin), str(clone)], base, env)
        clones.append(clone)
    return coord, clones


def start(clone: Path, env: dict[str, str], name: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gitflow_parallel", "worker", "--remote", "origin", "--name", name,
                             "--json"], cwd=str(clone), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wall(base: Path, env: dict[str, str], workers: int) -> tuple[float, list[dict[str, object]]]:
    _, clones = remote_run(base, env, f"scale{workers}", ["sleep", "2"], workers)
    t0 = time.perf_counter()
    procs = [start(c, env, f"w{k}") for k, c in enumerate(clones)]
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"a worker failed ({p.returncode}): {err}{out}")
        rows += json.loads(out)["instances"]
    elapsed = time.perf_counter() - t0
    if sorted(r["id"] for r in rows) != sorted(str(k) for k in range(1, INSTANCES + 1)):
        raise SystemExit(f"the instances were not each done once: {[r['id'] for r in rows]}")
    return elapsed, rows


def main() -> None:
    base, env = workspace("gp-bench-remote-")
    _, (clone,) = remote_run(base, env, "overhead", ["true"], 1)
    p = start(clone, env, "w0")
    out, err = p.communicate(timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"the worker failed: {err}{out}")
    rows = json.loads(out)["instances"]
    claim = statistics.median(r["claim_s"] for r in rows) * 1000
    deliver = statistics.median(r["deliver_s"] for r in rows) * 1000
    print(f"claim push, median of {len(rows)}: {claim:.1f} ms; delivery: {deliver:.1f} ms")
    print(f"claim_overhead_ms: {claim + deliver:.1f}")
    walls = {}
    for k in (1, 2, 4):
        walls[k], _ = wall(base, env, k)
        print(f"wall_{k}_s: {walls[k]:.2f}")
    for k in (2, 4):
        print(f"scaling_{k}: {walls[k] / walls[1]:.2f}   (ideal {1 / k:.2f})")
        print(f"efficiency_{k}: {walls[1] / (k * walls[k]):.2f}")


if __name__ == "__main__":
    main()
