"""Issue 48, item 5: configuration read strictly and a quiet end on a
closed pipe.  A key given twice in ``.gitparallel.yaml`` is refused with
both lines (YAML would keep the last, silently replacing the gates a reader
sees); ``git parallel status | head`` ends as git does there: killed by
SIGPIPE, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import GP, git, make_repo

CONFIG = f"gates:\n  - name: ok\n    run: [{sys.executable}, -c, 'print(1)']\n"


def test_a_key_given_twice_is_refused_with_its_lines(tmp_path: Path) -> None:
    twice = CONFIG + "max_total: 2\ngates:\n  - name: other\n    run: [sh, -c, 'exit 0']\n"
    repo = make_repo(tmp_path / "repo", config=twice)
    proc = GP(repo)("spawn", "t", "-n", "1", code=1)
    assert "PARALLEL_CONFIG_INVALID" in proc.stderr and "duplicate key 'gates'" in proc.stderr
    assert "line 1, and again on line 5" in proc.stderr and "hint:" in proc.stderr
    assert git(repo, "branch", "--list", "parallel/*") == ""


def test_a_nested_key_given_twice_is_refused_too(tmp_path: Path) -> None:
    from gitflow_parallel import config as C  # noqa: N812
    from gitflow_parallel.errors import ParallelError

    text = "merge:\n  policy: refuse\n  retries: 2\n  policy: last_pass_wins\n"
    try:
        C.parse(text)
    except ParallelError as exc:
        assert "duplicate key 'policy' (line 2, and again on line 4)" in exc.message
    else:
        raise AssertionError("a duplicate key was accepted")


def test_keys_a_merge_brings_in_may_be_overridden() -> None:
    from gitflow_parallel import config as C  # noqa: N812

    text = "gates:\n  - &g {name: a, run: [make, test]}\n  - <<: *g\n    name: b\n"
    assert [g["name"] for g in C.parse(text)["gates"]] == ["a", "b"]


def test_a_closed_pipe_ends_quietly_as_git_does(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config=CONFIG)
    gp = GP(repo)
    for n in range(2):  # (head -0 exits before python has started: every write meets the closed pipe)
        gp("spawn", f"t{n}", "-n", "1")
    for args in ("status", "status t0", "show t0 1", "validate"):
        proc = subprocess.run(["bash", "-c", f"git parallel {args} | head -0; echo ${{PIPESTATUS[0]}}"],
                              cwd=repo, capture_output=True, text=True, timeout=60)
        assert proc.stderr == "", (args, proc.stderr)
        assert proc.stdout.strip() in ("0", "141"), (args, proc.stdout)  # 141: SIGPIPE, as git's own commands
    proc = subprocess.run(["bash", "-c", "git parallel status | head -0; echo ${PIPESTATUS[0]}"],
                          cwd=repo, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "141" and proc.stderr == ""
