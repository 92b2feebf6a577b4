#!/usr/bin/env python3
"""Benchmark: fingerprinting what an instance changed, against `sha256sum`.

Builds a throwaway repository in a sealed environment (private HOME,
GIT_CONFIG_NOSYSTEM, fixed identities), spawns one instance with the real
`git parallel spawn`, and has it change 2,000 files of about 20 KB each
(about 40 MB of source-like text, committed on the instance branch with
git).  Then, interleaved and after one warm-up of each, it times

* ours: ``fingerprints.output_fingerprints(repo, base, commit, worktree)``, the
  function ``git parallel check`` uses for ``output_fingerprints`` (opening
  the repository included), and
* theirs: one ``sha256sum`` process over the same 2,000 files,

checks that both give the same digests, and prints each repetition and then

    hash_ratio: X (min A max B, N rounds)

where X is the median over the rounds of ours / sha256sum; the rounds go
through benchenv.alternating (an ``os.sync()`` before each side, so the
40 MB just written are on disk, the order rotating).  Target: X <= 1.5.  For
reference it also prints the ratio of the object-database-only path (no
worktree), which is what a check would cost without the worktree shortcut.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import pygit2

from benchenv import MIN_ROUNDS, ROOT, ROUNDS, Side, alternating, discard, figure, print_load, ratios, sh, sized, workspace

sys.path.insert(0, str(ROOT))

from gitflow_parallel.judge import fingerprints  # noqa: E402

FILES = sized(2000, 10)
FILE_BYTES = 20_000


def source_like(rnd: random.Random, words: list[str]) -> str:
    """About FILE_BYTES of indented, word-salad lines: compresses like code."""
    out, size = [], 0
    while size < FILE_BYTES:
        line = "    " * rnd.randint(0, 3) + " ".join(rnd.choice(words) for _ in range(rnd.randint(3, 12))) + "\n"
        out.append(line)
        size += len(line)
    return "".join(out)[:FILE_BYTES]


def build(base: Path, env: dict[str, str]) -> tuple[Path, Path, str, str, list[str]]:
    repo = base / "repo"
    repo.mkdir()
    sh(["git", "init", "-q", "-b", "main"], repo, env)
    (repo / "README.md").write_text("bench\n")
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", "initial"], repo, env)
    sh(["git", "parallel", "spawn", "T", "-n", "1"], repo, env)
    worktree = base / "repo.parallel" / "T" / "1"
    rnd = random.Random(4)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rnd.randint(2, 10)))
             for _ in range(5000)]
    names = []
    for i in range(FILES):
        rel = f"pkg{i % 40:02d}/mod{i:04d}.py"
        target = worktree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source_like(rnd, words))
        names.append(rel)
    sh(["git", "add", "-A"], worktree, env)
    sh(["git", "commit", "-q", "-m", "agent: 2,000 files"], worktree, env)
    base_commit = sh(["git", "rev-parse", "main"], repo, env).stdout.decode().strip()
    commit = sh(["git", "rev-parse", "HEAD"], worktree, env).stdout.decode().strip()
    return repo, worktree, base_commit, commit, names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=ROUNDS,
                        help=f"interleaved repetitions (>= {MIN_ROUNDS}; each round's ratio, median with min and max)")
    args = parser.parse_args()
    repeat = max(MIN_ROUNDS, args.repeat)
    print_load()
    base, env = workspace("bench-evidence-")
    try:
        # The in-process side must not see the user's git config either.
        for level in (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG, pygit2.enums.ConfigLevel.SYSTEM):
            pygit2.settings.search_path[level] = env["HOME"]
        repo, worktree, base_commit, commit, names = build(base, env)
        total = sum((worktree / n).stat().st_size for n in names)
        print(f"{len(names)} changed files, {total / 1e6:.1f} MB")
        common = repo / ".git"

        def ours() -> dict[str, dict[str, object]]:
            return fingerprints.output_fingerprints(pygit2.Repository(str(common)), base_commit, commit, worktree)

        def odb_only() -> dict[str, dict[str, object]]:
            return fingerprints.output_fingerprints(pygit2.Repository(str(common)), base_commit, commit)

        def theirs() -> dict[str, str]:
            out = sh(["sha256sum", "--", *names], worktree, env).stdout.decode()
            return {line[66:]: line[:64] for line in out.splitlines()}

        # Warm-up (page cache, imports) and the correctness check in one go.
        mine, plain = ours(), theirs()
        if {p: v["sha256"] for p, v in mine.items()} != plain or len(plain) != FILES:
            raise SystemExit("output_fingerprints disagree with sha256sum")
        if odb_only() != mine:
            raise SystemExit("the worktree shortcut and the object database disagree")
        times = alternating([Side("ours", lambda k: ours()), Side("theirs", lambda k: theirs()),
                             Side("odb_only", lambda k: odb_only())], repeat)
        for k in range(repeat):
            print(f"repetition {k + 1}: ours {times['ours'][k] * 1000:.0f} ms, "
                  f"sha256sum {times['theirs'][k] * 1000:.0f} ms, "
                  f"object database only {times['odb_only'][k] * 1000:.0f} ms")
        figure("odb_only_ratio", ratios(times["odb_only"], times["theirs"]))
        figure("hash_ratio", ratios(times["ours"], times["theirs"]))
        return 0
    finally:
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
