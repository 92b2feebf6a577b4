#!/usr/bin/env python3
"""Hook benchmark: what git-parallel's hooks cost plain git.

One sealed repository (private HOME, GIT_CONFIG_NOSYSTEM) of 1,000 files
with two ordinary branches that differ in 50 of them (a switch then takes
about the 13 ms the spec cites for a plain checkout; a hook's cost is one
`sh` start, so the ratio is only as meaningful as the checkout is typical;
`hook_overhead_ms` gives it absolutely), hooks installed by
`git parallel hooks install`.  Every measurement is a round of two sides,
run through benchenv.alternating (an `os.sync()` before each, the order
alternating): the same git command with the hooks
(`-c core.hooksPath=<the hooks dir>`) and without (`-c core.hooksPath=<an
empty dir>`), so both pay for the same `-c` and see the same caches.
Each figure is the median over the rounds, with min and max.

* `hook_overhead_ms` and `pre_commit_hook_overhead_ms`: what the hooks add
  to a checkout switching between the two ordinary branches with no live
  run: git-parallel's, and pre-commit's (`pre-commit install -t
  post-checkout -t pre-commit`, an empty config) measured in the same
  rounds where pre-commit is installed (`--pre-commit`; target for ours:
  <= 3 ms).
* `hook_overhead_ratio`: checkout time switching between the two ordinary
  branches, with hooks over without, in a repository with no live run
  (target <= 1.3).  `hook_overhead_ratio_live_run` is the same with a run
  spawned, so the sh fast path has the live index to read.
* `commit_on_live_base_added_ms`: with the run live, what the hooks add to
  an ordinary `git commit` on its base branch (reference-transaction decides
  it in sh, with one `git rev-list`; target <= 20).
* `commit_on_live_base_with_loser_added_ms`: the same, once a second run
  on the base has a picked winner and a loser, whose patch-ids the live
  index lists (`lost` lines): sh then also takes the commit's patch-id
  (`git diff-tree -p | git patch-id`) to tell it is no copy of the loser's.
  Each of the two also as `_cpu_ms`: the CPU time added (user + system of
  the processes git started), which a loaded machine does not inflate.
* `parallel_checkout_added_ms`: with the run live, in an instance's worktree
  after `git checkout --detach`, what the hooks add to `git checkout
  parallel/<task>/<id>` (the post-checkout report: Python, the record, the
  evidence; target <= 250).

Python runs with its bytecode cache on (benchenv.with_bytecode), as in any
pip install.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (MIN_ROUNDS, Side, alternating, differences_ms, discard, figure, print_load, ratios,  # noqa: E402
                      scaled, sh, with_bytecode, workspace)


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


def hooks_or_not(run: Callable[[list[str]], object], on: list[str], off: list[str],
                 before: Callable[[int], object] | None = None) -> list[Side]:
    """The same command with the hooks (``on``) and without (``off``)."""
    return [Side("with", lambda k: run(on), before), Side("without", lambda k: run(off), before)]


def switches(rounds: int, on: list[str], off: list[str], repo: Path, env: dict[str, str],
             others: dict[str, list[str]] | None = None) -> dict[str, list[float]]:
    """Switches between the two ordinary branches: round k goes to one, from
    the other (checked out untimed first).  ``others``: more sides, each
    name with its flags (another tool's hooks)."""
    def target(k: int) -> str:
        return "right" if k % 2 == 0 else "left"

    current = [0]

    def prepare(k: int) -> None:
        current[0] = k
        sh(["git", "checkout", "-q", "left" if target(k) == "right" else "right"], repo, env)

    def switch(flags: list[str]) -> None:
        sh(["git", *flags, "checkout", "-q", target(current[0])], repo, env)

    sides = hooks_or_not(switch, on, off, prepare)
    for name, flags in (others or {}).items():
        sides.append(Side(name, lambda k, flags=flags: switch(flags), prepare))
    return alternating(sides, rounds)


def pre_commit_hooks(base: Path, repo: Path, env: dict[str, str], tool: str) -> list[str]:
    """``-c core.hooksPath=`` a folder of hooks installed by pre-commit
    (``post-checkout`` and ``pre-commit``; it installs into a repository's
    own hooks folder only, so into a clone's), for the same repository,
    which gets a ``.pre-commit-config.yaml`` with no hooks (untracked: the
    switches do not touch it)."""
    clone = base / "pre-commit-clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], base, env)
    sh([tool, "install", "-t", "post-checkout", "-t", "pre-commit"], clone, env)
    (repo / ".pre-commit-config.yaml").write_text("repos: []\n")
    return ["-c", f"core.hooksPath={clone / '.git' / 'hooks'}"]


def commits(rounds: int, on: list[str], off: list[str], repo: Path, env: dict[str, str],
            name: str = "commit", cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Ordinary commits on the checked-out branch, one new file
    (``<name><n>.txt``) staged (untimed) before each; with ``cpu``, each
    side's CPU seconds there too."""
    made = [0]

    def stage(k: int) -> None:
        made[0] += 1
        (repo / f"{name}{made[0]}.txt").write_text(f"{made[0]}\n")
        sh(["git", "add", f"{name}{made[0]}.txt"], repo, env)

    return alternating(hooks_or_not(lambda flags: sh(["git", *flags, "commit", "-q", "-m", f"c{made[0]}"], repo, env),
                                    on, off, stage), rounds, cpu)


def picked_run(repo: Path, env: dict[str, str]) -> None:
    """A run ``lost`` on main whose instance 1 won its pick and 2 lost
    (its gate fails on the file 2 wrote): the live index lists 2's patches."""
    (repo / ".gitparallel.yaml").write_text("gates:\n  - name: ok\n    run: [sh, -c, 'test ! -e bad.txt']\n")
    sh(["git", "add", ".gitparallel.yaml"], repo, env)
    sh(["git", "commit", "-q", "-m", "config"], repo, env)
    sh(["git", "parallel", "spawn", "lost", "-n", "2"], repo, env)
    for inst, made in (("1", "good.txt"), ("2", "bad.txt")):
        sh(["git", "parallel", "run", "lost", "--instance", inst, "--", "sh", "-c", f"echo {inst} > {made}"], repo, env)
    sh(["git", "parallel", "check", "lost"], repo, env, check=False)  # 2 fails its gate
    sh(["git", "parallel", "pick", "lost"], repo, env)


def instance_checkouts(rounds: int, on: list[str], off: list[str], wt: Path, branch: str,
                       env: dict[str, str]) -> dict[str, list[float]]:
    """Checkouts of the instance branch in its worktree, from a detached HEAD."""
    return alternating(hooks_or_not(lambda flags: sh(["git", *flags, "checkout", "-q", branch], wt, env), on, off,
                                    lambda k: sh(["git", "checkout", "-q", "--detach"], wt, env)), rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help=f"rounds per figure (at least {MIN_ROUNDS})")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--changed", type=int, default=50, help="files that differ between the two branches")
    ap.add_argument("--pre-commit", default=shutil.which("pre-commit"), metavar="PATH",
                    help="pre-commit's executable, whose installed hooks are measured on the same switches "
                         "(default: the one on PATH; with none there, skipped)")
    args = ap.parse_args()
    print_load()
    base, env = workspace("gp-bench-hooks-")
    with_bytecode(env, base)
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

        others = {"pre-commit": pre_commit_hooks(base, repo, env, args.pre_commit)} if args.pre_commit else {}
        # Warm up every side (page cache, Python's .pyc files).
        switches(MIN_ROUNDS, on, off, repo, env, others)
        idle = switches(args.rounds, on, off, repo, env, others)

        sh(["git", "checkout", "-q", "main"], repo, env)
        sh(["git", "parallel", "spawn", "bench", "-n", "1"], repo, env)
        committed_cpu: dict[str, list[float]] = {}
        committed = commits(args.rounds, on, off, repo, env, cpu=committed_cpu)
        picked_run(repo, env)
        with_loser_cpu: dict[str, list[float]] = {}
        with_loser = commits(args.rounds, on, off, repo, env, name="after-pick", cpu=with_loser_cpu)
        sh(["git", "checkout", "-q", "left"], repo, env)
        live = switches(args.rounds, on, off, repo, env)

        wt = base / "repo.parallel" / "bench" / "1"
        branch = "parallel/bench/1"
        instance_checkouts(MIN_ROUNDS, on, off, wt, branch, env)
        par = instance_checkouts(args.rounds, on, off, wt, branch, env)

        figure("checkout_ms_without_hooks", scaled(idle["without"], 1000), 1)
        figure("checkout_ms_with_hooks", scaled(idle["with"], 1000), 1)
        figure("hook_overhead_ms", differences_ms(idle["with"], idle["without"]), 1)
        figure("hook_overhead_ratio", ratios(idle["with"], idle["without"]))
        if others:
            figure("pre_commit_hook_overhead_ms", differences_ms(idle["pre-commit"], idle["without"]), 1)
        else:
            print("pre-commit: not found, its hooks not measured (--pre-commit PATH)")
        figure("hook_overhead_ratio_live_run", ratios(live["with"], live["without"]))
        figure("commit_on_live_base_ms_without_hooks", scaled(committed["without"], 1000), 1)
        figure("commit_on_live_base_ms_with_hooks", scaled(committed["with"], 1000), 1)
        figure("commit_on_live_base_added_ms", differences_ms(committed["with"], committed["without"]), 1)
        figure("commit_on_live_base_added_cpu_ms", differences_ms(committed_cpu["with"], committed_cpu["without"]), 1)
        figure("commit_on_live_base_with_loser_added_ms", differences_ms(with_loser["with"], with_loser["without"]), 1)
        figure("commit_on_live_base_with_loser_added_cpu_ms",
               differences_ms(with_loser_cpu["with"], with_loser_cpu["without"]), 1)
        figure("parallel_checkout_ms_without_hooks", scaled(par["without"], 1000), 1)
        figure("parallel_checkout_ms_with_hooks", scaled(par["with"], 1000), 1)
        figure("parallel_checkout_added_ms", differences_ms(par["with"], par["without"]), 1)
        return 0
    finally:
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
