#!/usr/bin/env python3
"""Hook benchmark: what git-parallel's hooks cost a plain `git checkout`.

One sealed repository (private HOME, GIT_CONFIG_NOSYSTEM) of 1,000 files
with two ordinary branches that differ in 50 of them (a switch then takes
about the 13 ms the spec cites for a plain checkout; a hook's cost is one
`sh` start, so the ratio is only as meaningful as the checkout is typical;
`hook_overhead_ms` gives it absolutely), hooks installed by
`git parallel hooks install`.  Every measurement is a pair run back to back,
interleaved over the rounds: the same checkout with the hooks
(`-c core.hooksPath=<the hooks dir>`) and without (`-c core.hooksPath=<an
empty dir>`), so both pay for the same `-c` and see the same caches.

* `hook_overhead_ratio`: median checkout time switching between the two
  ordinary branches, with hooks over without, in a repository with no live
  run (target <= 1.3).  `hook_overhead_ratio_live_run` is the same with a run
  spawned, so the sh fast path has the live index to read.
* `parallel_checkout_added_ms`: with the run live, in an instance's worktree
  after `git checkout --detach`, the median time `git checkout
  parallel/<task>/<id>` takes with hooks minus without (the post-checkout
  report: Python, the record, the evidence; target <= 250).

Python runs with its bytecode cache on (in a private PYTHONPYCACHEPREFIX),
as in any pip install: with PYTHONDONTWRITEBYTECODE set, as some sandboxes
do, every hook start would recompile the package's sources, which measures
the sandbox rather than the hook.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import median, sh, timed, workspace  # noqa: E402


def make_repo(path: Path, env: dict[str, str], files: int, changed: int) -> None:
    path.mkdir()
    sh(["git", "init", "-q", "-b", "main"], path, env)
    line = "y" * 63 + "\n"
    for i in range(files):
        folder = path / f"dir{i // 50:02d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:03d}.txt").write_text(f"{i}\n" + line * 32)
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "generated"], path, env)
    for branch in ("left", "right"):
        sh(["git", "checkout", "-q", "-b", branch, "main"], path, env)
        for i in range(changed):
            (path / f"dir{i // 50:02d}" / f"f{i:03d}.txt").write_text(f"{branch} {i}\n" + line * 32)
        sh(["git", "commit", "-q", "-am", branch], path, env)
    sh(["git", "checkout", "-q", "main"], path, env)


def pairs(rounds: int, hooked: list[str], plain: list[str], before: list[list[str]], cwd: Path,
          env: dict[str, str]) -> tuple[list[float], list[float]]:
    """Time ``git <hooked>`` and ``git <plain>`` alternately, ``before`` run
    untimed ahead of each (to put HEAD where the checkout starts from)."""
    with_hooks: list[float] = []
    without: list[float] = []
    for k in range(rounds):
        order = [(hooked, with_hooks), (plain, without)]
        if k % 2:
            order.reverse()  # neither side always runs on warmer caches
        for args, out in order:
            for prep in before:
                sh(["git", *prep], cwd, env)
            out.append(timed(lambda: sh(["git", *args], cwd, env)))
    return with_hooks, without


def switches(rounds: int, hooks_on: list[str], hooks_off: list[str], repo: Path,
             env: dict[str, str]) -> tuple[list[float], list[float]]:
    """``rounds`` switches between the two branches, each side alternating."""
    with_hooks: list[float] = []
    without: list[float] = []
    for k in range(rounds):
        target = "right" if k % 2 == 0 else "left"
        back = "left" if target == "right" else "right"
        a, b = pairs(1, [*hooks_on, "checkout", "-q", target], [*hooks_off, "checkout", "-q", target],
                     [["checkout", "-q", back]], repo, env)
        with_hooks += a
        without += b
    return with_hooks, without


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--changed", type=int, default=50, help="files that differ between the two branches")
    args = ap.parse_args()
    base, env = workspace("gp-bench-hooks-")
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("note: PYTHONDONTWRITEBYTECODE is set here; the benchmark runs without it", file=sys.stderr)
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    try:
        repo = base / "repo"
        make_repo(repo, env, args.files, args.changed)
        sh(["git", "checkout", "-q", "left"], repo, env)
        sh(["git", "parallel", "hooks", "install"], repo, env)
        hooks = sh(["git", "rev-parse", "--path-format=absolute", "--git-path", "hooks"], repo, env)
        hooks_dir = hooks.stdout.decode().strip()
        empty = base / "no-hooks"
        empty.mkdir()
        on = ["-c", f"core.hooksPath={hooks_dir}"]
        off = ["-c", f"core.hooksPath={empty}"]

        # Warm up both sides once (page cache, Python's .pyc files).
        switches(2, on, off, repo, env)
        idle_on, idle_off = switches(args.rounds, on, off, repo, env)

        sh(["git", "checkout", "-q", "main"], repo, env)
        sh(["git", "parallel", "spawn", "bench", "-n", "1"], repo, env)
        live_on, live_off = switches(args.rounds, on, off, repo, env)

        wt = base / "repo.parallel" / "bench" / "1"
        branch = "parallel/bench/1"
        pairs(2, [*on, "checkout", "-q", branch], [*off, "checkout", "-q", branch],
              [["checkout", "-q", "--detach"]], wt, env)
        par_on, par_off = pairs(args.rounds, [*on, "checkout", "-q", branch], [*off, "checkout", "-q", branch],
                                [["checkout", "-q", "--detach"]], wt, env)

        print(f"checkout_ms_without_hooks: {median(idle_off) * 1000:.1f}")
        print(f"checkout_ms_with_hooks: {median(idle_on) * 1000:.1f}")
        print(f"hook_overhead_ms: {(median(idle_on) - median(idle_off)) * 1000:.1f}")
        print(f"hook_overhead_ratio: {median(idle_on) / median(idle_off):.2f}")
        print(f"hook_overhead_ratio_live_run: {median(live_on) / median(live_off):.2f}")
        print(f"parallel_checkout_ms_without_hooks: {median(par_off) * 1000:.1f}")
        print(f"parallel_checkout_ms_with_hooks: {median(par_on) * 1000:.1f}")
        print(f"parallel_checkout_added_ms: {(median(par_on) - median(par_off)) * 1000:.1f}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
