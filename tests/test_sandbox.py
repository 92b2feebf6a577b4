"""The agent cannot touch what judges it: git-parallel's own git runs
nothing an agent configured (fsmonitor, hooks, includes, filters), what an
attempt may not change is snapshotted around it and restored, and where
the kernel has Landlock each attempt and each gate runs fenced."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

from conftest import GP, git
from test_hostile import APP_BUGGY, APP_FIXED, HONEST, act, project


def _status(gp: GP, task: str) -> dict[str, dict]:
    return {i["id"]: i for i in gp.json("status", task)["run"]["instances"]}


def test_a_smudge_filter_cannot_land_a_failing_tree(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    good = tmp_path / "good.py"
    good.write_text(APP_FIXED)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    # The attempt keeps the bug, and asks git to write the fixed file
    # whenever app.py is checked out.
    smudge = (f"echo '# mine' >> app.py; common=$(git rev-parse --git-common-dir); "
              f"echo 'app.py filter=hp' >> \"$common/info/attributes\"; "
              f"git config filter.hp.smudge 'cat {good}; cat >/dev/null'")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", smudge, code=None)
    result = gp.json("check", "t", code=None)
    verdicts = {i["id"]: i["verdict"] for i in result["instances"]}
    assert verdicts.get("1") == "pass" and verdicts.get("2") != "pass", result
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    gp("merge", "t")
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()
    assert (repo / "app.py").read_text() == APP_FIXED


def _hijacks(tmp_path: Path) -> tuple[Path, str]:
    """Scripts that leave a marker when run, and an agent script that
    configures git to run them (and then leaves a change uncommitted)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    evil = tmp_path / "evil"
    (evil / "hooks").mkdir(parents=True)
    for name in ("fsmonitor", "included", "post-checkout", "reference-transaction", "pre-merge-commit",
                 "hookspath-post-checkout", "hookspath-reference-transaction"):
        script = evil / name
        script.write_text(f"#!/bin/sh\ntouch {marks}/{name}\nexit 1\n")
        script.chmod(0o755)
    for hook in ("post-checkout", "reference-transaction"):
        (evil / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/hookspath-{hook}\n")
        (evil / "hooks" / hook).chmod(0o755)
    (evil / "include.cfg").write_text(f"[core]\n\tfsmonitor = {evil}/included\n")
    agent = (f"echo '# mine' >> app.py; printf '{APP_FIXED}' > app.py; common=$(git rev-parse --git-common-dir); "
             f"for h in post-checkout reference-transaction pre-merge-commit; do "
             f"cp {evil}/$h \"$common/hooks/$h\"; done; "
             f"git config --file \"$common/config\" core.fsmonitor {evil}/fsmonitor; "
             f"git config --file \"$common/config\" --add include.path {evil}/include.cfg; "
             f"git config --file \"$common/config\" core.hooksPath {evil}/hooks")
    return marks, agent


def test_nothing_an_agent_configures_runs_during_check_pick_or_merge(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    marks, agent = _hijacks(tmp_path)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", agent, code=None)
    gp("check", "t", code=None)
    gp("pick", "t")
    gp("merge", "t")
    assert sorted(p.name for p in marks.iterdir()) == []
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()
