"""Shared pieces of the benchmarks: a sealed environment, a timer, and the
one way to compare two (or more) commands fairly.

Benchmarks print ratios against plain git measured side by side in one run,
because absolute times on shared machines mean little.  Side by side is not
enough on its own: the kernel writes the files one side created back to disk
while the next side runs, so whichever runs second pays for the first, and
the page cache favours whichever runs later.  ``alternating`` therefore
syncs before every timed side and rotates which side runs first; ``figure``
prints the median of the rounds with their min and max, so a reader sees
the spread, and ``print_load`` prints the machine's load at the start."""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

# Every figure is a median of at least this many rounds (pairs).
MIN_ROUNDS = 4

# GIT_PARALLEL_BENCH_SMOKE=1: every benchmark at toy sizes, so that a test
# can see each one start, run its sides and print its figures in seconds
# (tests/test_bench.py).  Figures made so mean nothing.
SMOKE = os.environ.get("GIT_PARALLEL_BENCH_SMOKE") == "1"


def sized(full: int, smoke: int) -> int:
    """A benchmark's size: ``full``, or ``smoke`` under GIT_PARALLEL_BENCH_SMOKE."""
    return smoke if SMOKE else full


# Rounds (pairs) a benchmark runs unless told otherwise: the figures quoted
# in the README are medians of at least 8.
ROUNDS = sized(8, MIN_ROUNDS)


def sealed_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
        "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    })
    shim = home / "bin"
    shim.mkdir(parents=True, exist_ok=True)
    script = shim / "git-parallel"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m gitflow_parallel \"$@\"\n")
    script.chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    return env


def workspace(prefix: str) -> tuple[Path, dict[str, str]]:
    base = Path(tempfile.mkdtemp(prefix=prefix))
    home = base / "home"
    home.mkdir()
    return base, sealed_env(home)


def with_bytecode(env: dict[str, str], base: Path) -> None:
    """Let Python keep compiled bytecode (in the sandbox, not the checkout),
    as every pip install does: with PYTHONDONTWRITEBYTECODE set, as some
    sandboxes do, each start of git-parallel would recompile the package,
    which measures the sandbox rather than the tool."""
    if env.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("note: PYTHONDONTWRITEBYTECODE is set here; the benchmark runs without it", file=sys.stderr)
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")


class Trash:
    """Where a benchmark puts what it made, instead of deleting it between
    rounds.  On ext4 without a journal (this machine's root file system),
    creating an inode skips every inode deleted in the last 60 to 360
    seconds, reading its inode table block to find that out, so a side that
    runs right after thousands of files were deleted pays for each of them
    (``perf`` shows ``recently_deleted`` and ``find_get_block_common`` above
    everything else then).  A round's cleanup therefore moves its files
    aside (one rename, in the same file system) and they are deleted once,
    after the last round; no side pays for another's deletions."""

    def __init__(self, base: Path) -> None:
        self.folder = base / "trash"
        self.count = 0

    def put(self, path: Path) -> None:
        if not path.exists():
            return
        self.folder.mkdir(exist_ok=True)
        self.count += 1
        path.rename(self.folder / str(self.count))


# Set by scripts/bench.py: a folder where each benchmark leaves its workspace
# (see ``discard``), deleted once after the last benchmark.
LATER = "GIT_PARALLEL_BENCH_DELETE_LATER"


def discard(base: Path) -> None:
    """Remove a benchmark's workspace: deleted now, or, under scripts/bench.py,
    moved into the folder it deletes after the last benchmark, so that the
    next benchmark does not pay for these deletions (see ``Trash``)."""
    later = os.environ.get(LATER)
    if later:
        try:
            os.makedirs(later, exist_ok=True)
            os.rename(base, tempfile.mkdtemp(dir=later))
            return
        except OSError:
            pass  # another file system, or gone: delete it here
    shutil.rmtree(base, ignore_errors=True)


def sh(args: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(args, cwd=str(cwd), env=env, capture_output=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc


def new_repo(path: Path, env: dict[str, str], config: str, readme: str = "bench\n") -> None:
    """A repository at ``path`` with one commit: a README and ``config``
    as its ``.gitparallel.yaml``."""
    path.mkdir()
    sh(["git", "init", "-q", "-b", "main"], path, env)
    (path / "README.md").write_text(readme)
    (path / ".gitparallel.yaml").write_text(config)
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "initial"], path, env)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"


def print_load() -> None:
    """The load at the start (1, 5 and 15 minutes): on a shared machine the
    figures mean little without it.  Not a figure line (it has spaces)."""
    print(f"load average at start: {load_average()} ({os.cpu_count()} cores)", flush=True)


# -- side-by-side rounds ---------------------------------------------------------------
@dataclass
class Side:
    """One of the commands compared.  ``run`` is timed; ``before`` and
    ``after`` are not (to set up and remove what it works on); each gets the
    round's number."""

    name: str
    run: Callable[[int], object]
    before: Callable[[int], object] | None = None
    after: Callable[[int], object] | None = None


def alternating(sides: list[Side], rounds: int,
                cpu: dict[str, list[float]] | None = None) -> dict[str, list[float]]:
    """Run every side once per round and return each side's times, in round
    order (so ``[k]`` of two sides is a pair).  Before each timed side the
    file system is synced, so no side pays for the writeback of another's
    files; the order rotates every round (two sides: alternates), so none
    always runs first on colder caches.  With ``cpu``, each side's CPU
    seconds (user + system, of the processes it started and waited for) are
    put there too: on a loaded machine they say what the wall times cannot,
    how much work each side does."""
    if rounds < MIN_ROUNDS:
        raise SystemExit(f"at least {MIN_ROUNDS} rounds are needed for a median with its spread, not {rounds}")
    times: dict[str, list[float]] = {side.name: [] for side in sides}
    for k in range(rounds):
        shift = k % len(sides)
        for side in sides[shift:] + sides[:shift]:
            if side.before:
                side.before(k)
            os.sync()
            used = children_cpu()
            times[side.name].append(timed(lambda side=side, k=k: side.run(k)))
            if cpu is not None:
                cpu.setdefault(side.name, []).append(children_cpu() - used)
            if side.after:
                side.after(k)
    return times


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ratios(ours: list[float], theirs: list[float]) -> list[float]:
    """Per-round ratios: each compares two runs made next to each other."""
    return [a / b for a, b in zip(ours, theirs)]


def differences_ms(ours: list[float], theirs: list[float]) -> list[float]:
    return [(a - b) * 1000 for a, b in zip(ours, theirs)]


def scaled(values: list[float], factor: float) -> list[float]:
    return [v * factor for v in values]


def figure(name: str, values: list[float], digits: int = 2) -> str:
    """``name: median (min X max Y, N rounds)``: the line scripts/bench.py
    reads as a figure, with its spread."""
    line = (f"{name}: {median(values):.{digits}f} (min {min(values):.{digits}f} max {max(values):.{digits}f}, "
            f"{len(values)} rounds)")
    print(line, flush=True)
    return line
