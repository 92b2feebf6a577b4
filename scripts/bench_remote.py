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
  1/K (``efficiency_K`` = wall(1) / (K * wall(K)), ideal 1).  Each round
  times the three side by side (fresh remotes and clones made untimed
  before each, a sync before each timed side, the order rotating), and the
  figures are medians with their spread over the rounds.

    python scripts/bench_remote.py [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (ROUNDS, Side, alternating, discard, figure, print_load, sh, sized,  # noqa: E402
                      workspace)

CONFIG = "max_total: 16\ngates:\n  - name: ok\n    run: [\"true\"]\n"
INSTANCES = sized(8, 2)


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


def workers_side(base: Path, env: dict[str, str], workers: int) -> Side:
    """``workers`` worker processes doing the 8 instances of a fresh run."""
    clones: list[Path] = []

    def before(k: int) -> None:
        clones[:] = remote_run(base, env, f"scale{workers}-r{k}", ["sleep", str(sized(2, 0))], workers)[1]

    def run(k: int) -> None:
        procs = [start(c, env, f"w{n}") for n, c in enumerate(clones)]
        rows = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            if p.returncode != 0:
                raise SystemExit(f"a worker failed ({p.returncode}): {err}{out}")
            rows += json.loads(out)["instances"]
        if sorted(r["id"] for r in rows) != sorted(str(n) for n in range(1, INSTANCES + 1)):
            raise SystemExit(f"the instances were not each done once: {[r['id'] for r in rows]}")

    return Side(f"wall_{workers}", run, before=before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of the scaling sides (default {ROUNDS})")
    args = ap.parse_args()
    print_load()
    base, env = workspace("gp-bench-remote-")
    try:
        _measure(base, env, args.rounds)
    finally:
        discard(base)


def _measure(base: Path, env: dict[str, str], rounds: int) -> None:
    _, (clone,) = remote_run(base, env, "overhead", ["true"], 1)
    p = start(clone, env, "w0")
    out, err = p.communicate(timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"the worker failed: {err}{out}")
    rows = json.loads(out)["instances"]
    claim = [r["claim_s"] * 1000 for r in rows]
    deliver = [r["deliver_s"] * 1000 for r in rows]
    print(f"claim push, median of {len(rows)}: {statistics.median(claim):.1f} ms; "
          f"delivery: {statistics.median(deliver):.1f} ms")
    figure("claim_overhead_ms", [c + d for c, d in zip(claim, deliver)], 1)
    walls = alternating([workers_side(base, env, k) for k in (1, 2, 4)], rounds)
    for k in (1, 2, 4):
        figure(f"wall_{k}_s", walls[f"wall_{k}"])
    for k in (2, 4):
        figure(f"scaling_{k}", [w / w1 for w, w1 in zip(walls[f"wall_{k}"], walls["wall_1"])])
        print(f"  (scaling_{k} ideal {1 / k:.2f})")
        figure(f"efficiency_{k}", [w1 / (k * w) for w, w1 in zip(walls[f"wall_{k}"], walls["wall_1"])])


if __name__ == "__main__":
    main()
