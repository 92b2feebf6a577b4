"""``git parallel demo``: the whole flow on a throwaway repository.

It builds a small Python project with two bugs and a unittest suite, a
``.gitparallel.yaml`` with an enforced test gate and a score, then runs the
real commands a user would type, as subprocesses of this same Python:
spawn three instances, run three scripted agents (one fixes the bugs, one
breaks a test, one changes nothing), check, pick, install the hooks and show
a plain ``git merge`` of a loser being refused, merge the winner, and print
the status table and the landed commit's note.  No network, no real agent.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Callable

from gitflow_parallel import environ as proc_env

TASK = "fix-calc"

BUGGY = '''"""A tiny calculator."""


def add(a: int, b: int) -> int:
    return a - b


def mean(values: list[float]) -> float:
    return sum(values) / (len(values) + 1)
'''

TESTS = '''import unittest

from calc import add, mean


class CalcTest(unittest.TestCase):
    def test_add(self) -> None:
        self.assertEqual(add(2, 3), 5)

    def test_mean(self) -> None:
        self.assertEqual(mean([1.0, 2.0, 3.0]), 2.0)

    def test_mean_of_nothing(self) -> None:
        with self.assertRaises(ValueError):
            mean([])


if __name__ == "__main__":
    unittest.main()
'''


def _config(python: str) -> str:
    return textwrap.dedent(f"""\
        # git-parallel demo configuration
        instances: 3
        gates:
          - name: unit-tests
            run: [{python}, -m, unittest, -q, test_calc]
            mode: enforced
            timeout: 60
          - name: no-todo
            run: [{python}, -c, "import pathlib,sys; sys.exit('TODO' in pathlib.Path('calc.py').read_text())"]
            mode: observe
        score:
          threshold: 6
          command: [{python}, -m, gitflow_parallel.agents.critic]
        """)


class Demo:
    def __init__(self, root: Path, echo: Callable[[str], None]) -> None:
        self.root = root
        self.repo = root / "calc"
        self.echo = echo
        self.python = sys.executable
        self.env = proc_env.for_git()
        # The demo repository must not inherit the user's hooks path or identity.
        self.env.update({"GIT_AUTHOR_NAME": "git-parallel demo", "GIT_AUTHOR_EMAIL": "demo@localhost",
                         "GIT_COMMITTER_NAME": "git-parallel demo", "GIT_COMMITTER_EMAIL": "demo@localhost"})

    def step(self, text: str) -> None:
        self.echo("")
        self.echo(f"==> {text}")

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["git", *args], cwd=self.repo, env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def gp(self, *args: str, expect: int | None = 0) -> subprocess.CompletedProcess[str]:
        shown = " ".join(a if " " not in a else repr(a) for a in args)
        self.echo(f"$ git parallel {shown}")
        proc = subprocess.run([self.python, "-m", "gitflow_parallel", *args], cwd=self.repo, env=self.env,
                              capture_output=True, text=True)
        for line in (proc.stdout + proc.stderr).rstrip().splitlines():
            self.echo(f"  {line}")
        if expect is not None and proc.returncode != expect:
            raise RuntimeError(f"git parallel {shown} exited {proc.returncode}, expected {expect}")
        return proc

    def build(self) -> None:
        self.step(f"Creating a throwaway repository in {self.repo}")
        self.repo.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.name", "git-parallel demo")
        self.git("config", "user.email", "demo@localhost")
        self.git("config", "core.hooksPath", ".git/hooks")
        (self.repo / "calc.py").write_text(BUGGY)
        (self.repo / "test_calc.py").write_text(TESTS)
        (self.repo / ".gitparallel.yaml").write_text(_config(self.python))
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "calc: a calculator with two bugs")
        self.echo("  calc.py has two bugs (add subtracts, mean divides by n+1); test_calc.py catches them.")
        self.echo("  .gitparallel.yaml: an enforced unit-test gate, an observe gate, and a critic score.")

    def flow(self) -> str:
        self.gp("init")
        self.step("Spawning three instances, each with its own branch and worktree")
        self.gp("spawn", TASK, "-n", "3")
        self.step("Running three scripted agents in parallel: 1 fixes the bugs, 2 breaks a test, 3 changes nothing")
        agent = [self.python, "-m", "gitflow_parallel.agents.scripted", "--plan", "1=fix,2=break,3=noop", "{instance}"]
        self.gp("run", TASK, "--", *agent)
        self.step("Checking every attempt: the gates run in each worktree and leave evidence packs")
        self.gp("check", TASK, expect=None)
        self.gp("status", TASK)
        self.step("Picking the winner by the deterministic rule (highest score among passing, fresh evidence)")
        self.gp("pick", TASK)
        self.step("Installing the git hooks, then trying a plain `git merge` of a loser")
        self.gp("hooks", "install")
        self.echo("$ git merge --no-ff parallel/fix-calc/2")
        refused = self.git("merge", "--no-ff", "-m", "merge loser", f"parallel/{TASK}/2", check=False)
        for line in (refused.stdout + refused.stderr).rstrip().splitlines():
            self.echo(f"  {line}")
        if refused.returncode == 0:
            raise RuntimeError("the hooks let a loser's merge through")
        self.git("merge", "--abort", check=False)
        self.echo("  (refused, as it should be: instance 2 did not win its pick)")
        self.step("Merging the winner with git parallel (in memory, compare-and-swap on main)")
        self.gp("merge", TASK)
        self.gp("status", TASK)
        landed = self.git("rev-parse", "main").stdout.strip()
        self.step(f"Provenance of the landed commit {landed[:12]}")
        self.echo(f"$ git notes --ref=parallel show {landed[:12]}")
        note = self.git("notes", "--ref=parallel", "show", landed)
        for line in note.stdout.rstrip().splitlines():
            self.echo(f"  {line}")
        return landed


def run_demo(directory: str | None = None, keep: bool = False, echo: Callable[[str], None] = print) -> dict[str, object]:
    start = time.monotonic()
    if directory:
        root = Path(directory).resolve()
        if root.exists() and any(root.iterdir()):
            from gitflow_parallel.errors import INVALID_NAME, ParallelError

            raise ParallelError(INVALID_NAME, f"--dir {root} exists and is not empty",
                                hint="pass an empty or new folder to --dir, or leave it out for a temporary one")
        root.mkdir(parents=True, exist_ok=True)
        keep = True
    else:
        root = Path(tempfile.mkdtemp(prefix="git-parallel-demo-"))
    demo = Demo(root, echo)
    try:
        demo.build()
        landed = demo.flow()
        elapsed = time.monotonic() - start
        echo("")
        echo(f"demo finished in {elapsed:.1f}s; main is at {landed[:12]}")
        if keep:
            echo(f"the repository is kept in {demo.repo}")
        return {"landed": landed, "repo": str(demo.repo), "kept": keep, "elapsed_s": round(elapsed, 2)}
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
