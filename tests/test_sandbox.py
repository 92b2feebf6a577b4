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


# The tamper check alone, without the Landlock fence (which would refuse the
# writes in the first place).
UNFENCED = {"GIT_PARALLEL_SANDBOX": "off"}


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
    config_before = (repo / ".git" / "config").read_bytes()
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", agent, code=None, env=UNFENCED)
    # The hooks it wrote are gone, and so is what it put in the config.
    assert (repo / ".git" / "config").read_bytes() == config_before
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    hijacker = _status(gp, "t")["2"]
    assert hijacker["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in hijacker["error"]
    assert {"config", "hooks/post-checkout", "hooks/reference-transaction"} <= set(hijacker["tampered"])
    gp("check", "t", code=None)
    gp("pick", "t")
    gp("merge", "t")
    assert sorted(p.name for p in marks.iterdir()) == []
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()


FORGER = """\
echo '# mine' >> app.py && git commit -qam mine &&
git update-ref refs/heads/main HEAD &&
git update-ref "refs/parallel/evidence/$GIT_PARALLEL_RUN_ID/1/0" HEAD &&
git update-ref refs/notes/parallel HEAD
"""


def test_refs_an_agent_moves_or_forges_are_restored_and_its_attempt_fails(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    base = git(repo, "rev-parse", "main")
    notes = git(repo, "rev-parse", "refs/notes/parallel")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", FORGER, code=1, env=UNFENCED)
    forger = _status(gp, "t")["2"]
    assert forger["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in forger["error"], forger
    run_id = gp.json("status", "t")["run"]["run_id"]
    assert sorted(forger["tampered"]) == sorted(["refs/heads/main", f"refs/parallel/evidence/{run_id}/1/0",
                                                 "refs/notes/parallel"])
    assert git(repo, "rev-parse", "main") == base
    # Restored, then the run's own notes commit went on top of it.
    assert git(repo, "rev-parse", "refs/notes/parallel^") == notes
    assert git(repo, "for-each-ref", "refs/parallel/evidence") == ""
    events = [json.loads(line) for line in Path(forger["events"]).read_text().splitlines()]
    [tampered] = [e for e in events if e["event"] == "engine_tampered"]
    assert tampered["code"] == "PARALLEL_AGENT_TAMPERED" and len(tampered["restored"]) == 3
    # Nothing it forged is used: the honest attempt is checked, picked and landed.
    result = gp.json("check", "t")
    assert [(i["id"], i["verdict"]) for i in result["instances"]] == [("1", "pass")]
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()


def test_a_user_committing_on_main_meanwhile_is_no_tampering(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    # The agent waits until the user has committed on main in the main worktree.
    mark = tmp_path / "committed"
    agent = f"while [ ! -e {mark} ]; do sleep 0.05; done; printf '{APP_FIXED}' > app.py"
    import subprocess

    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                              env=dict(os.environ, **UNFENCED))
    (repo / "notes.txt").write_text("mine\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-qm", "the user's own work")
    mark.write_text("")
    assert runner.wait(timeout=120) == 0
    assert _status(gp, "t")["1"]["status"] == "succeeded"
    assert git(repo, "log", "-1", "--format=%s", "main") == "the user's own work"
