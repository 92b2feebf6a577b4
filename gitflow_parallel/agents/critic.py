"""A scripted critic for the demo's score: reads the instance's diff against
its base and prints an integer 0-10 on its last line.

Smaller, focused changes score higher; a change that deletes tests or adds
TODO/XXX markers loses points.  It is a real measurement of the diff, kept
deliberately simple.

    python -m gitflow_parallel.agents.critic
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> int:
    base = os.environ.get("GIT_PARALLEL_BASE") or "HEAD~1"
    diff = subprocess.run(["git", "diff", "--numstat", base, "HEAD"], capture_output=True, text=True)
    if diff.returncode != 0:
        print(diff.stderr.strip(), file=sys.stderr)
        return 1
    added = deleted = 0
    tests_deleted = 0
    for line in diff.stdout.splitlines():
        a, d, path = line.split("\t", 2)
        if a == "-":
            continue
        added += int(a)
        deleted += int(d)
        if "test" in path:
            tests_deleted += int(d)
    text = subprocess.run(["git", "diff", base, "HEAD"], capture_output=True, text=True).stdout
    markers = sum(text.count(m) for m in ("+# TODO", "+# XXX"))
    score = 10 - min(4, (added + deleted) // 25) - 3 * min(1, tests_deleted) - 2 * markers
    print(f"changed +{added} -{deleted}, tests deleted {tests_deleted}, markers {markers}")
    print(max(0, min(10, score)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
