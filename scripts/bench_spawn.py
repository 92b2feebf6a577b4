#!/usr/bin/env python3
"""Spawn benchmark: `git parallel spawn -n 8` against eight `git worktree add -b`
in a row, on a generated repository of 5,000 files (200 folders, ~4 KB each),
interleaved, median of the pairs.  Prints `spawn_ratio: X` (ours / git)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import median, sh, timed, workspace  # noqa: E402


def make_repo(path: Path, env: dict[str, str], folders: int, per_folder: int, size: int) -> None:
    path.mkdir()
    sh(["git", "init", "-q", "-b", "main"], path, env)
    line = "x" * 63 + "\n"
    for d in range(folders):
        folder = path / f"dir{d:03d}"
        folder.mkdir()
        for f in range(per_folder):
            body = f"{d}/{f}\n" + line * (size // 64)
            (folder / f"file{f:02d}.txt").write_text(body)
    (path / ".gitparallel.yaml").write_text("max_total: 64\n")
    sh(["git", "add", "-A"], path, env)
    sh(["git", "commit", "-q", "-m", "generated"], path, env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("-n", type=int, default=8)
    args = ap.parse_args()
    base, env = workspace("gp-bench-spawn-")
    try:
        repo = base / "repo"
        make_repo(repo, env, 200, 25, 4096)
        ours, theirs = [], []
        for k in range(args.pairs):
            task = f"bench{k}"

            def git_adds() -> None:
                for i in range(args.n):
                    sh(["git", "worktree", "add", "-q", "-b", f"plain{k}-{i}", str(base / f"plain{k}" / str(i))],
                       repo, env)

            theirs.append(timed(git_adds))
            ours.append(timed(lambda: sh(["git", "parallel", "spawn", task, "-n", str(args.n)], repo, env)))
            # Remove both sets before the next pair so every pair starts alike.
            sh(["git", "parallel", "abort", task, "--force"], repo, env)
            shutil.rmtree(base / f"plain{k}")
            sh(["git", "worktree", "prune"], repo, env)
        ratio = median(ours) / median(theirs)
        print(f"spawn_s: {median(ours):.3f}")
        print(f"git_worktree_add_s: {median(theirs):.3f}")
        print(f"spawn_ratio: {ratio:.2f}")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
