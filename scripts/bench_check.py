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

Python keeps its bytecode for both sides (benchenv.with_bytecode), as
installed code does.  Pairs go through benchenv.alternating: they alternate which side runs
first, and `os.sync()` runs before each timed side so that one side's disk
writeback does not land on the other.  Before each cold pair the scratch
checkouts are moved aside, not deleted (benchenv.Trash: a check run right
after 15,000 deletions pays for them on this file system).  It prints each
pair, then

    check_cold_ratio: X   (first check: ours makes 3 scratch checkouts)
    check_cold_vs_spawn: S   (that check against the `spawn -n 3` that made 3 attempts like them)
    check_warm_ratio: Y   (a check again: the checkouts are reused)
    gate_layer_ms: L   (what the sandbox adds to one gate: its namespaces and throwaway layer)
    git_view_first_ms, git_view_ms: V1, V   (a judged place's git view: the first in a repository, the next)
    check_setup_cold_ms: C   (one round: each checkout builds its venv)
    check_setup_warm_ratio: W   (a check whose setup is reused, against no setup)
    merge_verify_always_ratio: Z
    merge_verify_added_ms: M

each the median over the pairs of the pair's ratio (or difference), with
min and max.  Targets: a check again at most 1.5 of the old one (issue
11); the first check in a repository at most 2.0 of it and at most the
spawn (issue 27); a warm check with ``setup:`` at most 1.2 of one without
(issue 24).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from benchenv import (MIN_ROUNDS, ROOT, ROUNDS, Side, Trash, alternating, discard, sized, differences_ms, figure, median,
                      print_load, ratios, sh, with_bytecode, workspace)

FILES = sized(5000, 20)
BASELINE = "903f955"  # the last revision whose check ran gates in the worktree
TARGET = 1.5  # a check again
COLD_TARGET = 2.0  # the first check in a repository (issue 27)


# A real environment per checkout: a venv with pip (about a thousand files),
# rebuilt only when pyproject.toml changes.
SETUP = ("setup:\n  run: [python3, -m, venv, .venv]\n  cache_key: [pyproject.toml]\n  keep: [.venv]\n"
         "  path: [.venv/bin]\n")
SETUP_TARGET = 1.2


def build(where: Path, env: dict[str, str], verify: str | None = None, setup: bool = False) -> Path:
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
    if setup:
        config += SETUP
    (repo / "pyproject.toml").write_text('[project]\nname = "bench"\nversion = "1"\n')
    (repo / ".gitparallel.yaml").write_text(config)
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", "initial"], repo, env)
    return repo


def ready(repo: Path, env: dict[str, str], task: str) -> None:
    """A run of 3 instances, each with a committed change, ready to check."""
    sh(["git", "parallel", "spawn", task, "-n", "3"], repo, env)
    script = "for f in pkg00/mod0000.py pkg01/mod0001.py pkg02/mod0002.py; do echo \"# {instance}\" >> $f; done"
    sh(["git", "parallel", "run", task, "--", "sh", "-c", script], repo, env)


def timed(action: Callable[[], object]) -> float:
    import os
    import time

    os.sync()
    start = time.monotonic()
    action()
    return time.monotonic() - start


def again_flag(env: dict[str, str]) -> bool:
    """Does this check re-judge fresh evidence only with --again?"""
    out = subprocess.run(["git", "parallel", "check", "--help"], capture_output=True, text=True, env=env)
    return "--again" in out.stdout


def paired(name: str, ours: Callable[[], object], theirs: Callable[[], object], pairs: int,
           before: Callable[[], object] = lambda: None) -> list[float]:
    """Alternating pairs; returns the ratios ours/theirs."""
    times = alternating([Side("ours", lambda k: ours(), lambda k: before()),
                         Side("theirs", lambda k: theirs(), lambda k: before())], pairs)
    for k, (a, b) in enumerate(zip(times["ours"], times["theirs"])):
        print(f"  {name} pair {k + 1}: ours {a * 1000:.0f} ms, other {b * 1000:.0f} ms")
    return ratios(times["ours"], times["theirs"])


def setup_figures(base: Path, env: dict[str, str], pairs: int, quiet: bool = False) -> float:
    """A check whose environment is built (cold) or reused (warm), against
    the same check with no setup; returns the warm ratio's median."""
    with_setup, without = build(base / "setup", env, setup=True), build(base / "nosetup", env)
    for repo in (with_setup, without):
        ready(repo, env, "S")
    cold_setup = timed(lambda: sh(["git", "parallel", "check", "S"], with_setup, env))
    cold_plain = timed(lambda: sh(["git", "parallel", "check", "S"], without, env))
    print(f"check_setup_cold_ms: {cold_setup * 1000:.0f} (one round: 3 venvs built) against "
          f"{cold_plain * 1000:.0f} without setup")
    again = ["git", "parallel", "check", "S"] + (["--again"] if again_flag(env) else [])
    warm = paired("setup warm check", lambda: sh(again, with_setup, env), lambda: sh(again, without, env), pairs)
    figure("check_setup_warm_ratio", warm)
    if not quiet:
        print(f"target: warm check with setup <= {SETUP_TARGET}: {'met' if median(warm) <= SETUP_TARGET else 'NOT met'}")
    return median(warm)


def git_view_ms(repo: Path, times: int = 10) -> tuple[list[float], list[float]]:
    """What a judged place's git view costs (``git/judged_view``), in-process,
    for instance 1's commit: the first in a repository (its history pack
    written: every round starts without one) and the next (the history
    kept: the judged commit's own pack and the refs)."""
    import time

    from gitflow_parallel.files import remove_tree
    from gitflow_parallel.git import judged_view

    common = repo / ".git"
    judged = subprocess.run(["git", "rev-parse", "refs/heads/parallel/T/1"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout.strip()
    first, again = [], []
    for _ in range(times):
        remove_tree(common / "parallel" / judged_view.FOLDER, ignore_errors=True)
        for out in (first, again):
            t0 = time.perf_counter()
            view = judged_view.make(common, common / "parallel", judged)
            out.append((time.perf_counter() - t0) * 1000)
            if view is not None:
                view.remove()
    return first, again


def gate_layer_ms(repo: Path, env: dict[str, str], times: int = 30) -> list[float]:
    """What the sandbox adds to one gate, in-process: ``true`` run as a gate
    in a scratch checkout under the namespace layer with a throwaway upper
    layer of its own (made, mounted, removed), minus the same unfenced,
    alternating, each pair one figure.  Empty where there is no namespace
    layer (said so)."""
    import os
    import time

    from gitflow_parallel.git import scratch
    from gitflow_parallel.judge import layers, place
    from gitflow_parallel.proc import namespace, sandbox

    why = namespace.unavailable()
    if why is not None:
        print(f"gate_layer_ms: not measured ({why})")
        return []
    common = repo / ".git"
    checkout = sorted(p for p in scratch.judged_root(common, repo).glob("scratch+*") if p.is_dir())[0]
    fenced = sandbox.GatePlan(common, repo, checkout, {"sandbox": "auto"})
    bare = sandbox.GatePlan(common, repo, checkout, {"sandbox": "off"})
    log = repo.parent / "gate-layer.log"
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        gate_env = place.gate_env({}, {})
        out = []
        for _ in range(times):
            t0 = time.perf_counter()
            with layers.space(common / "parallel") as space:
                place.execute(["true"], checkout, gate_env, 30.0, log, plan=fenced, layer=place.Layer(upper=space.pair))
            t1 = time.perf_counter()
            place.execute(["true"], checkout, gate_env, 30.0, log, plan=bare)
            t2 = time.perf_counter()
            out.append(((t1 - t0) - (t2 - t1)) * 1000)
        return out
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=ROUNDS,
                        help=f"alternating pairs per figure (default {ROUNDS}, at least {MIN_ROUNDS})")
    parser.add_argument("--baseline", default=BASELINE, help="the git-parallel revision to compare with")
    parser.add_argument("--baseline-again", action="store_true",
                        help="the baseline skips fresh evidence too: give its check --again")
    parser.add_argument("--setup-only", action="store_true", help="only the figures of a check with setup:")
    parser.add_argument("--check-only", action="store_true", help="only check_cold_ratio and check_warm_ratio")
    args = parser.parse_args()
    pairs = max(MIN_ROUNDS, args.pairs)
    print_load()
    base, env = workspace("bench-check-")
    with_bytecode(env, base)  # both sides keep their bytecode, as installed code does
    try:
        old_code = base / "old-code"
        old_code.mkdir()
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive.stdout, check=True)
        old_env = dict(env, PYTHONPATH=str(old_code))
        ours_repo, old_repo = build(base / "ours", env), build(base / "old", old_env)
        ready(ours_repo, env, "T")
        ready(old_repo, old_env, "T")

        # A check skips instances whose evidence is fresh unless told
        # --again; the old code always re-ran, so ours must too.
        ours_check = ["git", "parallel", "check", "T"] + (["--again"] if again_flag(env) else [])

        def check_ours() -> None:
            sh(ours_check, ours_repo, env)

        # A baseline that also skips fresh evidence (one of this session's) is told --again too.
        old_check = ["git", "parallel", "check", "T"] + (["--again"] if args.baseline_again else [])

        def check_old() -> None:
            sh(old_check, old_repo, old_env)

        trash = Trash(base)

        def no_scratch(repo: Path) -> None:
            # The pool of scratch checkouts (``scratch+<k>``) of ``repo`` goes,
            # as if never made: its files moved aside (deleted after the last
            # round, see benchenv.Trash), its admin folders (a few files each)
            # deleted.  Each side's own pool, wherever its revision keeps it:
            # beside the repository now, under .git/parallel/scratch before.
            for pool in (repo.parent / f"{repo.name}.parallel" / ".judged", repo / ".git" / "parallel" / "scratch"):
                trash.put(pool)
            for admin in sorted((repo / ".git" / "worktrees").glob("scratch+*")):
                shutil.rmtree(admin)

        if args.setup_only:
            setup_figures(base, env, pairs)
            return 0
        check_old()  # warm-up of both, and the baseline is seen to work
        check_ours()
        # The spawn of the attempts a cold check judges: -n 3 of a new task in
        # a repository of its own (its worktrees stay: more of them would
        # lengthen the fences' read rules of the checks timed here).
        spawn_repo = build(base / "spawn", env)

        def spawn(k: int) -> None:
            sh(["git", "parallel", "spawn", f"S{k}", "-n", "3"], spawn_repo, env)

        times = alternating([Side("ours", lambda k: check_ours(), lambda k: no_scratch(ours_repo)),
                             Side("theirs", lambda k: check_old(), lambda k: no_scratch(old_repo)),
                             Side("spawn", spawn)], pairs)
        for k, (a, b, c) in enumerate(zip(times["ours"], times["theirs"], times["spawn"])):
            print(f"  cold check round {k + 1}: ours {a * 1000:.0f} ms, other {b * 1000:.0f} ms, "
                  f"spawn -n 3 {c * 1000:.0f} ms")
        cold = ratios(times["ours"], times["theirs"])
        figure("check_cold_ratio", cold)
        figure("check_cold_vs_spawn", ratios(times["ours"], times["spawn"]))
        check_ours()
        warm = paired("warm check", check_ours, check_old, pairs)
        figure("check_warm_ratio", warm)
        layer = gate_layer_ms(ours_repo, env)
        if layer:
            figure("gate_layer_ms", layer, 1)
        first, again = git_view_ms(ours_repo)
        figure("git_view_first_ms", first, 1)
        figure("git_view_ms", again, 1)
        if args.check_only:
            return 0

        setup_warm = setup_figures(base, env, pairs, quiet=True)

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

        made: set[int] = set()

        def fresh_for(k: int) -> None:
            if k not in made:  # one fresh run per pair, before its first side
                made.add(k)
                fresh()

        merges = alternating([Side("always", lambda k: merge_in(always)(), fresh_for),
                              Side("never", lambda k: merge_in(never)(), fresh_for)], pairs)
        for k, (a, n) in enumerate(zip(merges["always"], merges["never"])):
            print(f"  merge pair {k + 1}: verify always {a * 1000:.0f} ms, never {n * 1000:.0f} ms")
        figure("merge_verify_always_ratio", ratios(merges["always"], merges["never"]))
        figure("merge_verify_added_ms", differences_ms(merges["always"], merges["never"]), 0)
        print(f"target: cold check ratio <= {COLD_TARGET}: {'met' if median(cold) <= COLD_TARGET else 'NOT met'}, "
              f"warm <= {TARGET}: {'met' if median(warm) <= TARGET else 'NOT met'}; "
              f"warm check with setup <= {SETUP_TARGET}: "
              f"{'met' if setup_warm <= SETUP_TARGET else 'NOT met'}")
        return 0
    finally:
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
