#!/usr/bin/env python3
"""Pick and status benchmark: a run of 100 instances, each with evidence.

Builds a throwaway repository in a sealed environment (private HOME,
GIT_CONFIG_NOSYSTEM, fixed identities, this checkout's code on PYTHONPATH),
with a ``.gitparallel.yaml`` of ``max_total: 100`` and one enforced gate
``true``.  ``spawn -n`` is capped at 64 per track, so the 100 instances are
two tracks of 50 (``--track a --track b -n 50``).  Each instance's agent is a
Python one-liner that writes its instance id to ``out.txt``, so every
instance ends on its own commit and tree (left-over changes are committed by
``run``), as real attempts do.  Then ``git parallel check`` writes the 100
evidence packs, and the benchmark times, as real subprocesses:

* ``git parallel pick T``, the first (writing) pick: it is write-once, so it
  is timed once;
* ``git parallel pick T`` again, which prints the existing records
  (median of the repetitions);
* ``git parallel status T --json`` (median of the repetitions);
* a plain ``git status`` in the same repository, for comparison.

Bytecode is compiled once beforehand (into the sandbox, not the checkout),
as an installed package has it.

Prints ``pick_s``, ``pick_again_s``, ``status_json_s`` and ``git_status_s``.
Targets: ``pick_s`` < 1 and ``status_json_s`` < 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import median, sh, timed, workspace  # noqa: E402

TRACKS = ("a", "b")
PER_TRACK = 50
TARGET_S = 1.0

CONFIG = """\
max_total: 100
gates:
  - name: "true"
    run: ["true"]
    mode: enforced
"""


def build(repo: Path, env: dict[str, str]) -> None:
    repo.mkdir()
    sh(["git", "init", "-q", "-b", "main"], repo, env)
    (repo / "README.md").write_text("bench\n")
    (repo / ".gitparallel.yaml").write_text(CONFIG)
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", "initial"], repo, env)
    tracks = [a for t in TRACKS for a in ("--track", t)]
    sh(["git", "parallel", "spawn", "T", *tracks, "-n", str(PER_TRACK)], repo, env)
    agent = [sys.executable, "-c", "open('out.txt', 'w').write('{instance}\\n')"]
    sh(["git", "parallel", "run", "T", "--", *agent], repo, env)
    sh(["git", "parallel", "check", "T"], repo, env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of the repeatable commands (>= 3)")
    args = ap.parse_args()
    repeat = max(3, args.repeat)
    base, env = workspace("gp-bench-pick-")
    # Users' installs keep compiled bytecode; without it every command would
    # pay for compiling the package.  Kept out of the checkout, in the sandbox.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    try:
        repo = base / "repo"
        build(repo, env)
        sh([sys.executable, "-c", "import gitflow_parallel.cli, gitflow_parallel.lifecycle, gitflow_parallel.selection"],
           repo, env)
        status = json.loads(sh(["git", "parallel", "status", "T", "--json"], repo, env).stdout)
        insts = status["run"]["instances"]
        fresh = sum(1 for i in insts if i["live"]["evidence"] == "fresh" and i["verdict"] == "pass")
        tips = {i["live"]["tip"] for i in insts}
        print(f"{len(insts)} instances, {fresh} with fresh passing evidence, {len(tips)} distinct tips")
        if fresh != len(TRACKS) * PER_TRACK:
            raise SystemExit("the run was not set up as intended: not every instance has fresh passing evidence")

        pick_s = timed(lambda: sh(["git", "parallel", "pick", "T"], repo, env))
        again = sh(["git", "parallel", "pick", "T", "--json"], repo, env)
        if len(json.loads(again.stdout)["existing"]) != len(TRACKS):
            raise SystemExit("a second pick did not print the existing records")
        pick_again = [timed(lambda: sh(["git", "parallel", "pick", "T"], repo, env)) for _ in range(repeat)]
        status_json = [timed(lambda: sh(["git", "parallel", "status", "T", "--json"], repo, env))
                       for _ in range(repeat)]
        git_status = [timed(lambda: sh(["git", "status"], repo, env)) for _ in range(repeat)]

        print(f"pick_s: {pick_s:.3f}")
        print(f"pick_again_s: {median(pick_again):.3f}")
        print(f"status_json_s: {median(status_json):.3f}")
        print(f"git_status_s: {median(git_status):.3f}")
        met = pick_s < TARGET_S and median(status_json) < TARGET_S
        print(f"target: pick_s and status_json_s < {TARGET_S:.0f} s ({'met' if met else 'NOT met'})")
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
