#!/usr/bin/env python3
"""Judging cost on real projects: `git parallel check` of N attempts, warm
and cold, against N plain runs of the same gates at the same parallelism,
and the time `git parallel merge` takes to land the winner.

Each ``--project`` is a local clone of a real project (pypa/packaging,
vercel/ms, ...).  It is cloned again into a workspace; if its HEAD has no
``.gitparallel.yaml``, `git parallel init` writes one (its gates are the
project's own test suite, its setup the project's venv or node_modules),
which is committed.  Then ``spawn -n N`` and a scripted agent that adds
one file no test reads, so every attempt passes, and per round:

* ``plain``: each enforced gate's command, in N plain worktrees of the
  attempts (made, and their setup run, once before the rounds), at most
  J attempts at once (J: the cores, as `check` defaults to);
* ``warm``: `git parallel check T --again` (its clean checkouts and kept
  environments reused);
* ``cold``: the same after the pool of clean checkouts and the kept
  environments are moved aside (benchenv.Trash), as in a new repository.

The order rotates and each side runs after a sync (benchenv.alternating).
Prints, per project (suffix: the project folder's name),
``real_check_warm_ratio_<p>`` and ``real_check_cold_ratio_<p>`` (check /
plain, per round) with the times themselves, then ``real_merge_s_<p>``:
`merge` of the picked winner of T, then of tasks spawned and checked anew
(``--merges`` in all; a fast-forward with fresh evidence: no gate runs again).

Without ``--project`` (and under GIT_PARALLEL_BENCH_SMOKE=1) it makes a
toy Python project whose gate is pytest, so that the benchmark can be seen
to run in seconds; such figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (MIN_ROUNDS, ROUNDS, Side, Trash, alternating, discard, figure, print_load, ratios, sh,  # noqa: E402
                      timed, with_bytecode, workspace)

NOTE = "BENCH_NOTE.txt"
AGENT = ["sh", "-c", f"echo 'a note from attempt {{instance}}' > {NOTE}"]

TOY_TEST = "from toy import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TOY_CONFIG = f"gates:\n  - name: tests\n    run: [{sys.executable}, -m, pytest, -q, -p, no:cacheprovider, tests]\n"


def toy_project(where: Path, env: dict[str, str]) -> Path:
    """A small Python project with a pytest suite and its configuration."""
    path = where / "toy"
    (path / "tests").mkdir(parents=True)
    (path / "toy.py").write_text("def add(a, b):\n    return a + b\n")
    (path / "tests" / "test_toy.py").write_text(TOY_TEST)
    (path / ".gitparallel.yaml").write_text(TOY_CONFIG)
    sh(["git", "init", "-q", "-b", "main"], path, env)
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "toy"], path, env)
    return path


def clone(source: Path, where: Path, env: dict[str, str]) -> Path:
    """A clone of ``source`` with a committed configuration."""
    path = where / source.resolve().name
    sh(["git", "clone", "-q", "--no-local", str(source), str(path)], where, env)
    if sh(["git", "cat-file", "-e", "HEAD:.gitparallel.yaml"], path, env, check=False).returncode != 0:
        sh(["git", "parallel", "init"], path, env)
        sh(["git", "add", ".gitparallel.yaml"], path, env)
        sh(["git", "commit", "-q", "-m", "git-parallel configuration"], path, env)
    return path


def frozen_config(repo: Path, task: str) -> dict[str, object]:
    from gitflow_parallel.state.project import Project

    return dict(Project.open(repo).store.load(task)["config"])


def attempts(repo: Path, env: dict[str, str], task: str, n: int) -> list[str]:
    """``spawn -n n`` and the scripted agent; the attempts' commits."""
    sh(["git", "parallel", "spawn", task, "-n", str(n)], repo, env)
    sh(["git", "parallel", "run", task, "--", *AGENT], repo, env)
    return [sh(["git", "rev-parse", f"parallel/{task}/{k}"], repo, env).stdout.decode().strip()
            for k in range(1, n + 1)]


class Plain:
    """The gates as a person runs them by hand: in a plain worktree of each
    attempt, its setup run there first (untimed), J attempts at once."""

    def __init__(self, repo: Path, where: Path, env: dict[str, str], config: dict[str, object],
                 commits: list[str], jobs: int) -> None:
        self.jobs = jobs
        gates = config.get("gates") or []
        self.gates = [g["run"] for g in gates if isinstance(g, dict) and g.get("mode", "enforced") == "enforced"]
        setup = config.get("setup") or {}
        assert isinstance(setup, dict)
        self.trees: list[tuple[Path, dict[str, str]]] = []
        for k, commit in enumerate(commits):
            tree = where / f"plain-{k}"
            sh(["git", "worktree", "add", "-q", "--detach", str(tree), commit], repo, env)
            path = [str(tree / p) for p in setup.get("path") or []]
            tree_env = dict(env, PATH=os.pathsep.join([*path, env.get("PATH", "")]))
            if setup.get("run"):
                sh(list(setup["run"]), tree, tree_env)
            self.trees.append((tree, tree_env))

    def run(self, _: int) -> None:
        def one(place: tuple[Path, dict[str, str]]) -> None:
            tree, tree_env = place
            for argv in self.gates:
                subprocess.run(argv, cwd=tree, env=tree_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        with ThreadPoolExecutor(self.jobs) as pool:
            list(pool.map(one, self.trees))


def measure(repo: Path, base: Path, env: dict[str, str], n: int, rounds: int, merges: int) -> None:
    name = repo.name.replace("-", "_").replace(".", "_")
    commits = attempts(repo, env, "T", n)
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    plain = Plain(repo, base, env, frozen_config(repo, "T"), commits, jobs)
    check = ["git", "parallel", "check", "T", "--again"]
    sh(check, repo, env, check=False)  # the first: builds what the warm side reuses, and is seen to run
    trash = Trash(base)

    def cold_start(_: int) -> None:
        trash.put(repo.parent / f"{repo.name}.parallel" / ".judged")
        trash.put(repo / ".git" / "parallel" / "envs")
        for admin in sorted((repo / ".git" / "worktrees").glob("scratch+*")):
            subprocess.run(["rm", "-rf", str(admin)], check=False)

    sides = [Side("plain", plain.run),
             Side("warm", lambda _: sh(check, repo, env, check=False)),
             Side("cold", lambda _: sh(check, repo, env, check=False), before=cold_start)]
    times = alternating(sides, rounds)
    for k in range(rounds):
        print(f"  {name} round {k + 1}: plain {times['plain'][k]:.2f} s, warm check {times['warm'][k]:.2f} s, "
              f"cold check {times['cold'][k]:.2f} s", flush=True)
    figure(f"real_check_warm_ratio_{name}", ratios(times["warm"], times["plain"]))
    figure(f"real_check_cold_ratio_{name}", ratios(times["cold"], times["plain"]))
    figure(f"real_plain_s_{name}", times["plain"])
    figure(f"real_check_warm_s_{name}", times["warm"])
    figure(f"real_check_cold_s_{name}", times["cold"])
    for tree, _ in plain.trees:
        sh(["git", "worktree", "remove", "--force", str(tree)], repo, env)
    landed = []
    for k in range(merges):  # T first, then tasks made anew (spawn refuses beyond max_total live attempts)
        task = "T" if k == 0 else f"M{k}"
        if k:
            attempts(repo, env, task, n)
            sh(["git", "parallel", "check", task], repo, env, check=False)
        sh(["git", "parallel", "pick", task], repo, env)
        landed.append(timed(lambda task=task: sh(["git", "parallel", "merge", task], repo, env)))
    figure(f"real_merge_s_{name}", landed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", action="append", type=Path, default=[],
                        help="a local clone of a real project (repeatable); none: a toy project")
    parser.add_argument("--attempts", type=int, default=4, help="attempts per task (default 4)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (at least {MIN_ROUNDS})")
    parser.add_argument("--merges", type=int, default=MIN_ROUNDS, help="tasks landed for the merge figure")
    args = parser.parse_args()
    print_load()
    base, env = workspace("gp-bench-real-")
    with_bytecode(env, base)
    if args.project:
        # A real project's package managers read your configuration (~/.npmrc,
        # pip's, pnpm's) and caches, as they do when you run its tests.
        for key in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
            if key in os.environ:
                env[key] = os.environ[key]
            else:
                env.pop(key, None)
    try:
        projects = [clone(p, base, env) for p in args.project] or [toy_project(base, env)]
        for repo in projects:
            measure(repo, base, env, args.attempts, args.rounds, args.merges)
    finally:
        discard(base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
