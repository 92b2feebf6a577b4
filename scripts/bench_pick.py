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

* ``git parallel pick T``, the first (writing) pick.  It is write-once, so
  before each round's first pick the run's state as ``check`` left it is put
  back (untimed): ``<common>/parallel/`` from a copy, and the notes ref;
* ``git parallel pick T`` again, which prints the existing records;
* ``git parallel status T --json``;
* a plain ``git status`` in the same repository, for comparison;

one after the other in each round, through benchenv.alternating (an
``os.sync()`` before each, the order rotating from round to round).
Bytecode is compiled once beforehand (into the sandbox, not the checkout),
as an installed package has it.

Prints ``pick_s``, ``pick_again_s``, ``status_json_s`` and ``git_status_s``,
each the median over the rounds with min and max.
Targets: ``pick_s`` < 1 and ``status_json_s`` < 1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import (MIN_ROUNDS, ROUNDS, Side, alternating, discard, figure, new_repo, print_load, sh, sized,  # noqa: E402
                      with_bytecode, workspace)

TRACKS = ("a", "b")
PER_TRACK = sized(50, 2)

CONFIG = """\
max_total: 100
gates:
  - name: "true"
    run: ["true"]
    mode: enforced
"""


def build(repo: Path, env: dict[str, str]) -> None:
    new_repo(repo, env, CONFIG)
    tracks = [a for t in TRACKS for a in ("--track", t)]
    sh(["git", "parallel", "spawn", "T", *tracks, "-n", str(PER_TRACK)], repo, env)
    agent = [sys.executable, "-c", "open('out.txt', 'w').write('{instance}\\n')"]
    sh(["git", "parallel", "run", "T", "--", *agent], repo, env)
    sh(["git", "parallel", "check", "T"], repo, env)


def unpicked(repo: Path, base: Path, env: dict[str, str]) -> Callable[[int], None]:
    """What puts the run back as ``check`` left it: its parallel/ folder and
    notes ref as they are now."""
    common = Path(sh(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], repo, env)
                  .stdout.decode().strip())
    kept = base / "parallel-before-pick"
    shutil.copytree(common / "parallel", kept, symlinks=True)
    notes_ref = "refs/notes/parallel"
    notes = sh(["git", "rev-parse", "-q", "--verify", notes_ref], repo, env, check=False).stdout.decode().strip()

    def restore(k: int) -> None:
        shutil.rmtree(common / "parallel")
        shutil.copytree(kept, common / "parallel", symlinks=True)
        if notes:
            sh(["git", "update-ref", notes_ref, notes], repo, env)
        else:
            sh(["git", "update-ref", "-d", notes_ref], repo, env)
    return restore


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS}, at least {MIN_ROUNDS})")
    args = ap.parse_args()
    print_load()
    base, env = workspace("gp-bench-pick-")
    with_bytecode(env, base)
    try:
        repo = base / "repo"
        build(repo, env)
        sh([sys.executable, "-c", "import gitflow_parallel.cli, gitflow_parallel.commands.spawn, gitflow_parallel.commands.pick"],
           repo, env)
        status = json.loads(sh(["git", "parallel", "status", "T", "--json"], repo, env).stdout)
        insts = status["run"]["instances"]
        fresh = sum(1 for i in insts if i["live"]["evidence"] == "fresh" and i["verdict"] == "pass")
        tips = {i["live"]["tip"] for i in insts}
        print(f"{len(insts)} instances, {fresh} with fresh passing evidence, {len(tips)} distinct tips")
        if fresh != len(TRACKS) * PER_TRACK:
            raise SystemExit("the run was not set up as intended: not every instance has fresh passing evidence")

        restore = unpicked(repo, base, env)
        sh(["git", "parallel", "pick", "T"], repo, env)  # warm-up, and the check just below
        again = sh(["git", "parallel", "pick", "T", "--json"], repo, env)
        if len(json.loads(again.stdout)["existing"]) != len(TRACKS):
            raise SystemExit("a second pick did not print the existing records")

        def first_pick(k: int) -> None:
            out = json.loads(sh(["git", "parallel", "pick", "T", "--json"], repo, env).stdout)
            if len(out["picks"]) != len(TRACKS):
                raise SystemExit(f"round {k}: the first pick wrote {len(out['picks'])} picks, not {len(TRACKS)}")

        times = alternating([
            Side("pick", first_pick, before=restore),
            Side("pick_again", lambda k: sh(["git", "parallel", "pick", "T"], repo, env)),
            Side("status_json", lambda k: sh(["git", "parallel", "status", "T", "--json"], repo, env)),
            Side("git_status", lambda k: sh(["git", "status"], repo, env)),
        ], args.rounds)
        for name in ("pick", "pick_again", "status_json", "git_status"):
            figure(f"{name}_s", times[name], 3)
        return 0
    finally:
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
