#!/usr/bin/env python3
"""Run every benchmark in scripts/ and report its figures against their targets.

Each ``scripts/bench_*.py`` runs as its own subprocess (each builds and
seals its own throwaway repository) and measures through
``scripts/benchenv.py``: an ``os.sync()`` before every timed side, the order
of the sides alternating, 8 rounds unless told otherwise (at least 4), and
the load average printed at its start.  Each leaves what it made in a folder this script deletes after
the last benchmark (benchenv.discard), so that none starts right after
another's deletions.  Every line it prints of the form ``name: value`` (one word, one
value), optionally followed by its spread ``(min A max B, N rounds)``, is a
figure; a figure with a known target is printed as
``name: value (min A max B, N rounds) (target <= X) PASS`` or ``MISS``.  The
machine's core count, load and the Python, git and pygit2 versions come
first, because the figures mean little without them; on a shared machine,
read the spread and the load before trusting a median.

Exit status: 0 when every benchmark ran to the end (a missed target is
reported, not a failure); 1 when one crashed, timed out or was not found.
"""

from __future__ import annotations

import argparse
import operator
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent

# name -> (comparison, bound); each figure is a ratio against plain git or a
# time, where lower is better, except cluster_gain (selection accuracy of
# `cluster` minus `critic_first_pass`), which must be above 0.
TARGETS: dict[str, tuple[str, float]] = {
    "spawn_ratio_n4": ("<=", 0.7),
    "spawn_ratio_n8": ("<=", 0.7),
    "spawn_vs_parallel_git_n4": ("<=", 1.1),
    "spawn_vs_parallel_git_n8": ("<=", 1.1),
    "commit_on_live_base_added_ms": ("<=", 20),
    "commit_on_live_base_with_loser_added_ms": ("<=", 20),
    "run_overhead_ms": ("<=", 50),
    "check_cold_ratio": ("<=", 2.0),
    "check_cold_vs_spawn": ("<=", 1.0),
    "check_warm_ratio": ("<=", 1.5),
    "hash_ratio": ("<=", 1.5),
    "pick_s": ("<", 1),
    "status_json_s": ("<", 1),
    "status_s": ("<=", 0.15),
    "hook_overhead_ratio": ("<=", 1.3),
    "hook_overhead_ms": ("<=", 3),
    "parallel_checkout_added_ms": ("<=", 250),
    "cluster_gain": (">", 0),
}
COMPARE: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, "<": operator.lt, ">": operator.gt}

# A figure: a lower-case word, a colon, one value and, as benchenv.figure
# prints it, its spread over the rounds "(min A max B, N rounds)"; nothing
# else, so that prose such as "target: <= 50 ms (met)" or "repetition 1: ..."
# is not one.
FIGURE = re.compile(r"^([a-z][a-z0-9_]*): (\S+)(?: \((min \S+ max \S+, \d+ rounds)\))?$")


def machine() -> list[str]:
    def out(args: list[str]) -> str:
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable ({exc})"
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return f"unavailable ({last})"
        return proc.stdout.strip()

    pygit2 = out([sys.executable, "-c", "import pygit2; print(pygit2.__version__, 'libgit2', pygit2.LIBGIT2_VERSION)"])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return [
        f"cores: {os.cpu_count()}",
        f"python: {platform.python_implementation()} {platform.python_version()}",
        f"git: {out(['git', '--version']).removeprefix('git version ')}",
        f"pygit2: {pygit2}",
        f"platform: {platform.platform()}",
        f"load average at start: {load}",
    ]


def target_text(name: str) -> str:
    op, bound = TARGETS[name]
    return f"target {op} {bound}"


def judge(name: str, value: str, spread: str | None = None) -> str:
    shown = f"{name}: {value}" + (f" ({spread})" if spread else "")
    if name not in TARGETS:
        return shown
    op, bound = TARGETS[name]
    try:
        mark = "PASS" if COMPARE[op](float(value), bound) else "MISS"
    except ValueError:
        mark = "MISS (not a number)"
    return f"{shown} ({target_text(name)}) {mark}"


def stop(proc: subprocess.Popen[str]) -> str:
    """Stop a benchmark's process group; returns what it printed.  SIGINT
    first, so that its ``finally`` removes its temporary repository; SIGKILL
    only if it is still there 10 s later."""
    for sig in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.communicate(timeout=10)[0] or ""
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate()[0] or ""


def run_one(script: Path, timeout: float, verbose: bool, later: Path) -> tuple[str, list[tuple[str, str, str | None]],
                                                                         float, str]:
    """Run one benchmark; returns (outcome, figures, seconds, detail).  It
    leaves its workspace in ``later`` (benchenv.discard)."""
    start = time.perf_counter()
    # Its own process group, so that a benchmark past its time (or this
    # script interrupted) is stopped with the git processes it started.
    proc = subprocess.Popen([sys.executable, str(script)], cwd=str(HERE.parent), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, GIT_PARALLEL_BENCH_DELETE_LATER=str(later)))
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stdout = stop(proc)
        figures = [m.groups() for m in map(FIGURE.match, stdout.splitlines()) if m]
        return "timeout", figures, time.perf_counter() - start, f"still running after {timeout:.0f} s; stopped"
    except KeyboardInterrupt:
        stop(proc)
        raise
    elapsed = time.perf_counter() - start
    if verbose:
        for line in stdout.splitlines():
            print(f"    | {line}")
    figures = [m.groups() for m in map(FIGURE.match, stdout.splitlines()) if m]
    if proc.returncode != 0:
        tail = "\n".join(stderr.strip().splitlines()[-15:]) or stdout.strip()[-2000:]
        return "crashed", figures, elapsed, f"exit status {proc.returncode}:\n{tail}"
    return "ok", figures, elapsed, ""


def measure(script: Path, args: argparse.Namespace, later: Path,
            reported: dict[str, list[tuple[str, str | None]]]) -> list[str]:
    """Run one benchmark and print its figures (put in ``reported`` too);
    returns its name if it did not finish."""
    print(f"== {script.stem}", flush=True)
    outcome, figures, elapsed, detail = run_one(script, args.timeout, args.verbose, later)
    for name, value, spread in figures:
        print(f"  {judge(name, value, spread)}")
        reported.setdefault(name, []).append((value, spread))
    if outcome != "ok":
        print(f"  {outcome.upper()}: {detail}".replace("\n", "\n    "))
    elif not figures:
        print("  (it printed no `name: value` figure)")
    print(f"  ({elapsed:.1f} s)", flush=True)
    return [script.stem] if outcome != "ok" else []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed to each benchmark (default 600)")
    ap.add_argument("-v", "--verbose", action="store_true", help="also show everything each benchmark prints")
    ap.add_argument("only", nargs="*", help="run only these benchmarks (e.g. bench_pick)")
    args = ap.parse_args()

    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        wanted = {Path(n).stem for n in args.only}
        missing = wanted - {s.stem for s in scripts}
        if missing:
            print(f"error: no benchmark named {', '.join(sorted(missing))} in {HERE}", file=sys.stderr)
            return 1
        scripts = [s for s in scripts if s.stem in wanted]
    if not scripts:
        print(f"error: no scripts/bench_*.py found in {HERE}", file=sys.stderr)
        return 1

    for line in machine():
        print(line)
    print(f"benchmarks: {', '.join(s.stem for s in scripts)}")
    print()

    started = time.perf_counter()
    failed: list[str] = []
    reported: dict[str, list[tuple[str, str | None]]] = {}
    # What each benchmark made is deleted after the last one: on this file
    # system a benchmark run right after thousands of deletions pays for
    # them (benchenv.Trash).
    later = Path(tempfile.mkdtemp(prefix="gp-bench-delete-later-"))
    try:
        for script in scripts:
            failed += measure(script, args, later, reported)
        summary(reported, len(scripts), failed, time.perf_counter() - started)
    finally:
        print(f"(deleting what the benchmarks made, {later})", flush=True)
        shutil.rmtree(later, ignore_errors=True)
    return 1 if failed else 0


def summary(reported: dict[str, list[tuple[str, str | None]]], count: int, failed: list[str], seconds: float) -> None:
    print()
    print("== summary")
    for name in TARGETS:
        values = reported.get(name)
        if not values:
            print(f"  {name}: - ({target_text(name)}) NOT REPORTED")
        else:
            for value, spread in values:
                print(f"  {judge(name, value, spread)}")
    misses = sum(1 for n in TARGETS for v, _ in reported.get(n, []) if not judge(n, v).endswith("PASS"))
    absent = sum(1 for n in TARGETS if n not in reported)
    print(f"  {count - len(failed)}/{count} benchmarks ran; "
          f"{misses} target(s) missed; {absent} target(s) not reported; {seconds:.0f} s in all")
    if failed:
        print(f"  did not finish: {', '.join(failed)}")
    print(flush=True)

if __name__ == "__main__":
    sys.exit(main())
