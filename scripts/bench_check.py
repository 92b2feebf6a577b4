#!/usr/bin/env python3
"""Benchmark: `git parallel check` on clean checkouts against the old
in-worktree check, and the cost of re-proving the landing at merge.

Both sides run in one go on the same machine, on repositories built the
same way (5,000 files of source-like text, 3 instances whose agent changes
three files, one gate `true`):

* ours: this checkout's `git parallel check`, which runs the gate in a clean
  scratch checkout per instance (made on the first check, reused after);
* old: the same command of an earlier revision of git-parallel that ran
  gates in the agent's worktree (``--baseline``, default the last such
  commit), exported with `git archive` and run from a temporary folder.

Pairs alternate which side runs first, and `sync` runs before each timed
side so that one side's disk writeback does not land on the other.  It
prints each pair, then

    check_cold_ratio: X   (first check: ours makes 3 scratch checkouts)
    check_warm_ratio: Y   (a check again: the checkouts are reused)
    merge_verify_always_ratio: Z, merge_verify_added_ms: M

with medians over the pairs, min and max.  Target (issue 11): the check
ratio at most 1.5.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from benchenv import ROOT, median, sh, workspace

FILES = 5000
BASELINE = "903f955"  # the last revision whose check ran gates in the worktree
TARGET = 1.5


def build(where: Path, env: dict[str, str], verify: str | None = None) -> Path:
    repo = where
    repo.mkdir(parents=True)
    sh(["git", "init", "-q", "-b", "main"], repo, env)
    for i in range(FILES):
        path = repo / f"pkg{i % 50:02d}" / f"mod{i:04d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"# module {i}\n" + "".join(f"def f{k}(x):\n    return x + {k}\n" for k in range(8)))
    config = "max_total: 30\ngates:\n  - name: ok\n    run: [\"true\"]\n"
    if verify:
        config += f"merge:\n  verify: {verify}\n"
    (repo / ".gitparallel.yaml").write_text(config)
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", "initial"], repo, env)
    return repo


def ready(repo: Path, env: dict[str, str], task: str) -> None:
    """A run of 3 instances, each with a committed change, ready to check."""
    sh(["git", "parallel", "spawn", task, "-n", "3"], repo, env)
    script = "for f in pkg00/mod0000.py pkg01/mod0001.py pkg02/mod0002.py; do echo \"# {instance}\" >> $f; done"
    sh(["git", "parallel", "run", task, "--", "sh", "-c", script], repo, env)


def timed(fn: Callable[[], object]) -> float:
    os.sync()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(name: str, ours: Callable[[], object], theirs: Callable[[], object], pairs: int,
           before: Callable[[], object] = lambda: None) -> list[float]:
    """Alternating pairs; returns the ratios ours/theirs."""
    t_ours, t_theirs = [], []
    for k in range(pairs):
        order = [(ours, t_ours), (theirs, t_theirs)]
        if k % 2:
            order.reverse()
        for fn, bucket in order:
            before()
            bucket.append(timed(fn))
        print(f"  {name} pair {k + 1}: ours {t_ours[-1] * 1000:.0f} ms, other {t_theirs[-1] * 1000:.0f} ms")
    ratios = [a / b for a, b in zip(t_ours, t_theirs)]
    return [median(t_ours), median(t_theirs), *ratios]


def report(name: str, figures: list[float]) -> float:
    ours, theirs, *ratios = figures
    ratio = ours / theirs
    print(f"{name}: {ratio:.2f} (pairs {min(ratios):.2f}-{max(ratios):.2f}; medians {ours * 1000:.0f} ms "
          f"against {theirs * 1000:.0f} ms)")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4, help="alternating pairs per figure (>= 4)")
    parser.add_argument("--baseline", default=BASELINE, help="the git-parallel revision to compare with")
    args = parser.parse_args()
    pairs = max(4, args.pairs)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    base, env = workspace("bench-check-")
    try:
        old_code = base / "old-code"
        old_code.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive.stdout, check=True)
        old_env = dict(env, PYTHONPATH=str(old_code))
        ours_repo, old_repo = build(base / "ours", env), build(base / "old", old_env)
        ready(ours_repo, env, "T")
        ready(old_repo, old_env, "T")
        scratch = ours_repo / ".git" / "parallel" / "scratch"

        def check_ours() -> None:
            sh(["git", "parallel", "check", "T"], ours_repo, env)

        def check_old() -> None:
            sh(["git", "parallel", "check", "T"], old_repo, old_env)

        def no_scratch() -> None:
            if scratch.exists():
                for run in scratch.iterdir():
                    if run.is_dir():
                        for checkout in run.iterdir():
                            if checkout.is_dir():
                                sh(["git", "worktree", "remove", "--force", str(checkout)], ours_repo, env)
                shutil.rmtree(scratch)

        check_old()  # warm-up of both, and the baseline is seen to work
        check_ours()
        cold = report("check_cold_ratio", paired("cold check", check_ours, check_old, pairs, before=no_scratch))
        check_ours()
        warm = report("check_warm_ratio", paired("warm check", check_ours, check_old, pairs))

        # merge.verify: always against never, on fresh runs picked the same way.
        always, never = build(base / "always", env, "always"), build(base / "never", env, "never")
        counter = iter(range(1000))

        def fresh() -> None:
            task = f"M{next(counter)}"
            for repo in (always, never):
                ready(repo, env, task)
                sh(["git", "parallel", "check", task], repo, env)
                sh(["git", "parallel", "pick", task], repo, env)
            fresh.task = task  # type: ignore[attr-defined]

        def merge_in(repo: Path) -> Callable[[], None]:
            return lambda: sh(["git", "parallel", "merge", fresh.task], repo, env)  # type: ignore[attr-defined]

        t_always, t_never = [], []
        for k in range(pairs):
            fresh()
            order = [(merge_in(always), t_always), (merge_in(never), t_never)]
            for fn, bucket in (order if k % 2 == 0 else order[::-1]):
                bucket.append(timed(fn))
            print(f"  merge pair {k + 1}: verify always {t_always[-1] * 1000:.0f} ms, "
                  f"never {t_never[-1] * 1000:.0f} ms")
        added = [(a - n) * 1000 for a, n in zip(t_always, t_never)]
        print(f"merge_verify_always_ratio: {median(t_always) / median(t_never):.2f}, "
              f"merge_verify_added_ms: {median(added):.0f} (pairs {min(added):.0f}-{max(added):.0f})")
        print(f"target: check ratio <= {TARGET}: cold {'met' if cold <= TARGET else 'NOT met'}, "
              f"warm {'met' if warm <= TARGET else 'NOT met'}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
