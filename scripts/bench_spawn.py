#!/usr/bin/env python3
"""Spawn benchmark: `git parallel spawn -n N` against N `git worktree add -b`,
run one after the other and all at once.

Two cases, each on its own generated repository of files of about 4 KB in
folders of 25: N=4 on 2,000 files and N=8 on 5,000.  Every round times the
three sides - spawn, N sequential `git worktree add -b`, and N
`git worktree add -b` started together - and a fourth, spawn's start
alone (below), each after an `os.sync()` and in an
order that rotates from round to round, and moves what each made aside
before the next one starts (untimed; deleted after the last round, see
benchenv.Trash: on this file system a side run right after thousands of
deletions pays for them).  Prints, per case (suffix `_n4`, `_n8`), the
median over the rounds with min and max:

* `spawn_ratio_nN`: spawn / sequential git, per round (target <= 0.7);
* `spawn_vs_parallel_git_nN`: spawn / parallel git, per round (target <= 1.1);
* `spawn_s_nN`, `git_worktree_add_s_nN`, `parallel_git_worktree_add_s_nN`:
  the times themselves;
* `spawn_cpu_s_nN`, `parallel_git_cpu_s_nN` and their ratio
  `spawn_cpu_vs_parallel_git_nN`: the CPU seconds (user + system) each side
  used.  When other work loads the machine, the wall times say little about
  parallelism (no side can overlap on busy cores), but the CPU seconds still
  show whether spawn does more work than git.
* `start_cpu_s_nN`: the CPU seconds of a fourth side, `git parallel spawn`
  refused for its task name: the interpreter, every module spawn imports
  and the repository opened, and nothing made.  `spawn_cpu_bound_nN` is,
  per round, (start + parallel git's CPU) / parallel git's CPU: where N
  checkouts keep every core busy, as four do on two cores, the wall time of
  a spawn whose checkouts cost what git's do cannot be below that ratio of
  parallel git's, however its work is overlapped.

The generated repository's objects are loose, as a fresh commit leaves
them; `--packed` packs them first (`git repack -ad`), as every clone's are.
Both sides read the same objects either way.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (MIN_ROUNDS, ROUNDS, Side, Trash, alternating, discard, figure, print_load, ratios, sh,  # noqa: E402
                      sized, with_bytecode, workspace)

CASES = {"n4": (4, sized(2000, 20)), "n8": (8, sized(5000, 40))}
PER_FOLDER = 25
FILE_BYTES = 4096


def make_repo(path: Path, env: dict[str, str], files: int, packed: bool = False) -> None:
    path.mkdir()
    sh(["git", "init", "-q", "-b", "main"], path, env)
    line = "x" * 63 + "\n"
    for i in range(files):
        folder = path / f"dir{i // PER_FOLDER:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"file{i % PER_FOLDER:02d}.txt").write_text(f"{i}\n" + line * (FILE_BYTES // 64))
    (path / ".gitparallel.yaml").write_text("max_total: 64\n")
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "generated"], path, env)
    if packed:
        sh(["git", "repack", "-adq"], path, env)


def sides(repo: Path, base: Path, env: dict[str, str], n: int, retried: list[str], trash: Trash) -> list[Side]:
    def add(k: int, kind: str, i: int) -> list[str]:
        return ["git", "worktree", "add", "-q", "-b", f"{kind}{k}-{i}", str(base / f"{kind}{k}" / str(i))]

    def sequential(k: int) -> None:
        for i in range(n):
            sh(add(k, "seq", i), repo, env)

    def parallel(k: int) -> None:
        procs = [subprocess.Popen(add(k, "par", i), cwd=repo, env=env, stderr=subprocess.PIPE) for i in range(n)]
        errors = [(p.communicate()[1], p.returncode) for p in procs]
        for i, (err, code) in enumerate(errors):
            if code == 0:
                continue
            # git's own race: one add lists the worktrees while another is
            # half made ("failed to read .git/worktrees/<name>/commondir").
            # What a user running them in parallel gets is a second try,
            # inside the timed side.
            text = err.decode(errors="replace")
            if "commondir" not in text:
                raise SystemExit(f"git worktree add failed: {text}")
            retried.append(text.strip())
            shutil.rmtree(base / f"par{k}" / str(i), ignore_errors=True)
            sh(["git", "worktree", "prune"], repo, env)
            sh(["git", "branch", "-q", "-D", f"par{k}-{i}"], repo, env, check=False)
            sh(add(k, "par", i), repo, env)

    def drop(kind: str) -> Callable[[int], None]:
        def remove(k: int) -> None:
            trash.put(base / f"{kind}{k}")
            sh(["git", "worktree", "prune"], repo, env)
            sh(["git", "branch", "-q", "-D", *(f"{kind}{k}-{i}" for i in range(n))], repo, env)
        return remove

    def abort(k: int) -> None:
        trash.put(base / "repo.parallel" / f"bench{k}")  # the worktrees: abort finds them gone
        sh(["git", "parallel", "abort", f"bench{k}", "--force"], repo, env)

    def start(k: int) -> None:
        # Refused after every import (its code checks the name first thing).
        refused = sh(["git", "parallel", "spawn", f"bad/..name{k}", "-n", str(n)], repo, env, check=False)
        if b"PARALLEL_INVALID_NAME" not in refused.stderr:
            raise SystemExit(f"the start side was not refused for its name: {refused.stderr.decode(errors='replace')}")

    return [
        Side("spawn", lambda k: sh(["git", "parallel", "spawn", f"bench{k}", "-n", str(n)], repo, env), after=abort),
        Side("start", start),
        Side("sequential", sequential, after=drop("seq")),
        Side("parallel", parallel, after=drop("par")),
    ]


def run_case(name: str, n: int, files: int, rounds: int, packed: bool = False) -> None:
    base, env = workspace(f"gp-bench-spawn-{name}-")
    with_bytecode(env, base)
    try:
        repo = base / "repo"
        make_repo(repo, env, files, packed)
        print(f"case {name}: spawn -n {n} on {files} files{', packed' if packed else ', loose objects'}", flush=True)
        # One untimed spawn first: Python's bytecode, git's and the page cache.
        # Its worktree goes to the trash too: its 2,000 files deleted would
        # slow the first rounds' file creation (benchenv.Trash).
        trash = Trash(base)
        sh(["git", "parallel", "spawn", "warmup", "-n", "1"], repo, env)
        trash.put(base / "repo.parallel" / "warmup")
        sh(["git", "parallel", "abort", "warmup", "--force"], repo, env)
        cpu: dict[str, list[float]] = {}
        retried: list[str] = []
        times = alternating(sides(repo, base, env, n, retried, trash), rounds, cpu)
        if retried:
            print(f"parallel git worktree add: {len(retried)} add(s) lost git's own race and ran again, "
                  f"timed ({retried[0].splitlines()[-1]})", flush=True)
        figure(f"spawn_s_{name}", times["spawn"], 3)
        figure(f"git_worktree_add_s_{name}", times["sequential"], 3)
        figure(f"parallel_git_worktree_add_s_{name}", times["parallel"], 3)
        figure(f"spawn_ratio_{name}", ratios(times["spawn"], times["sequential"]))
        figure(f"spawn_vs_parallel_git_{name}", ratios(times["spawn"], times["parallel"]))
        figure(f"spawn_cpu_s_{name}", cpu["spawn"], 3)
        figure(f"parallel_git_cpu_s_{name}", cpu["parallel"], 3)
        figure(f"spawn_cpu_vs_parallel_git_{name}", ratios(cpu["spawn"], cpu["parallel"]))
        figure(f"start_cpu_s_{name}", cpu["start"], 3)
        figure(f"spawn_cpu_bound_{name}", [(s + g) / g for s, g in zip(cpu["start"], cpu["parallel"])])
    finally:
        discard(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per case (default {ROUNDS}, at least {MIN_ROUNDS})")
    ap.add_argument("--case", action="append", choices=sorted(CASES), help="run only this case (repeatable)")
    ap.add_argument("--packed", action="store_true",
                    help="pack the generated repository's objects first, as a clone's are (default: loose, as committed)")
    args = ap.parse_args()
    print_load()
    for name in args.case or list(CASES):
        n, files = CASES[name]
        run_case(name, n, files, args.rounds, args.packed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
