"""The agent as an adversary: attempts that try to pass by weakening what
judges them instead of doing the work, and a landing that must hold anyway.

Each cheater leaves the bug in place and games its own worktree in one way;
in that worktree its gate passes (the ``in_worktree`` assertions show the
trick works there), yet it loses to the honest attempt and none of its
trees lands."""

from __future__ import annotations

import pytest

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from conftest import GP, git, make_repo, snapshot
from gitflow_parallel.files import sha256_bytes
from gitflow_parallel.state import landing

PY = sys.executable

APP_BUGGY = "def add(a, b):\n    return a - b\n"
APP_FIXED = "def add(a, b):\n    return a + b\n"
TEST_APP = "from app import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TEST_OTHER = "def test_truth():\n    assert True\n"
SKIP_ALL = textwrap.dedent("""\
    import pytest


    def pytest_collection_modifyitems(items):
        for item in items:
            item.add_marker(pytest.mark.skip(reason="nothing to see"))
""")

CONFIG = textwrap.dedent("""\
    max_total: 16
    protect: [tests/**]
    gates:
      - name: tests
        run: [./test.sh]
""")

# What each agent does in its worktree (sh; $GIT_COMMON is the common dir).
HONEST = f"printf '{APP_FIXED}' > app.py"
CHEATERS = {
    "gate-script": "printf '#!/bin/sh\\nexit 0\\n' > test.sh",
    "delete-test": "git rm -q tests/test_app.py",
    "conftest": f"cat > tests/conftest.py <<'EOF'\n{SKIP_ALL}EOF",
    "ignored-file": ("echo tests/conftest.py >> \"$(git rev-parse --git-common-dir)/info/exclude\" && "
                     f"cat > tests/conftest.py <<'EOF'\n{SKIP_ALL}EOF"),
    "config": "printf 'gates: []\\n' > .gitparallel.yaml",
}


def project(tmp_path: Path, config: str = CONFIG) -> tuple[Path, GP]:
    repo = make_repo(tmp_path / "repo", files={
        "app.py": APP_BUGGY, "tests/test_app.py": TEST_APP, "tests/test_other.py": TEST_OTHER,
        "test.sh": f"#!/bin/sh\nexec \"{PY}\" -m pytest -q -p no:cacheprovider tests\n",
    }, config=config)
    (repo / "test.sh").chmod(0o755)
    git(repo, "add", "test.sh")
    git(repo, "commit", "-q", "-m", "test.sh is executable")
    return repo, GP(repo)


def act(gp: GP, task: str, inst: str, script: str) -> None:
    # A cheater that writes under .git fails its run (see test_sandbox).
    gp("run", task, "--instance", inst, "--", "sh", "-c", script, code=1 if script == CHEATERS["ignored-file"] else 0)


def in_worktree(path: Path) -> int:
    """What the gate says when run where the agent left it (the old way)."""
    return subprocess.run(["./test.sh"], cwd=path, capture_output=True).returncode


def worktree(gp: GP, task: str, inst: str) -> Path:
    run = gp.json("status", task)["run"]
    return Path(next(i["worktree"] for i in run["instances"] if i["id"] == inst))


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_every_cheater_loses_to_the_honest_attempt_and_none_lands(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    kinds = list(CHEATERS)
    gp("spawn", "t", "-n", str(len(kinds) + 1))
    act(gp, "t", "1", HONEST)
    for n, kind in enumerate(kinds, 2):
        act(gp, "t", str(n), CHEATERS[kind])
        if kind not in ("config", "ignored-file"):  # a config is only ever read from the base commit
            assert in_worktree(worktree(gp, "t", str(n))) == 0, kind  # the trick works in its own worktree
    # Writing to the shared info/exclude fails the attempt at once (tamper
    # check, or the fence refusing the write).
    assert gp.json("status", "t")["run"]["instances"][4]["status"] == "failed"
    result = gp.json("check", "t", code=1)
    verdicts = {i["id"]: i["verdict"] for i in result["instances"]}
    assert verdicts == {"1": "pass", **{str(n): "fail" for n in range(2, len(kinds) + 2) if n != 5}}
    # Each cheater's pack names what it changed under protection.
    packs = {i["id"]: json.loads(Path(i["evidence"]["path"]).read_text()) for i in result["instances"]}
    assert all(p["checkout"] == "clean" for p in packs.values())
    assert packs["1"]["protected_changes"] == []
    assert packs["2"]["protected_changes"] == ["test.sh"]
    assert packs["3"]["protected_changes"] == ["tests/test_app.py"]
    assert packs["4"]["protected_changes"] == ["tests/conftest.py"]
    assert packs["6"]["protected_changes"] == [".gitparallel.yaml"]
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    gp("merge", "t")
    assert git(repo, "show", "main:app.py") == APP_FIXED.strip()
    for name in ("test.sh", "tests/test_app.py", ".gitparallel.yaml"):
        assert git(repo, "show", f"main:{name}") == git(repo, "show", f"main~1:{name}")


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_with_only_cheaters_nothing_can_be_picked(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", str(len(CHEATERS)))
    for n, kind in enumerate(CHEATERS, 1):
        act(gp, "t", str(n), CHEATERS[kind])
    result = gp.json("check", "t", code=1)
    assert {i["verdict"] for i in result["instances"]} == {"fail"}
    before = snapshot(repo)
    proc = gp("pick", "t", code=1)
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in proc.stderr
    assert snapshot(repo) == before


def test_protect_mode_refuse_fails_an_attempt_that_touched_a_protected_path(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, CONFIG + "protect_mode: refuse\n")
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST + " && echo '# tidied' >> tests/test_other.py")
    result = gp.json("check", "t", code=1)
    [inst] = result["instances"]
    pack = json.loads(Path(inst["evidence"]["path"]).read_text())
    assert inst["verdict"] == "fail" and pack["gates"] == []
    assert pack["refused"]["code"] == "PARALLEL_PROTECTED_PATH_CHANGED"
    assert pack["protected_changes"] == ["tests/test_other.py"]
    assert "PARALLEL_PROTECTED_PATH_CHANGED" in gp("check", "t", code=1).stdout


RECORD_FORGER = textwrap.dedent("""\
    import os, pathlib, subprocess, time, yaml
    from gitflow_parallel.config import config_sha256
    common = subprocess.check_output(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], text=True)
    path = pathlib.Path(common.strip()) / "parallel" / "runs" / (os.environ["GIT_PARALLEL_TASK"] + ".yaml")
    # Forge only once the runner has recorded this agent's start: a write
    # before that would be overwritten by it, and the forgery never tried.
    deadline = time.monotonic() + 60
    while True:
        record = yaml.safe_load(path.read_text())
        me = next(i for i in record["instances"] if i["id"] == os.environ["GIT_PARALLEL_INSTANCE"])
        if (me["status"] == "running" and me.get("pid")) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    record["config"]["gates"] = []
    record["config_sha256"] = config_sha256(record["config"])
    path.write_text(yaml.safe_dump(record, sort_keys=False))
""")


@pytest.mark.unfenced("the record is rewritten as a person, or an agent run without the sandbox, could")
def test_a_record_rewritten_with_no_gates_is_refused(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    (tmp_path / "forge.py").write_text(RECORD_FORGER)
    gp("run", "t", "--", PY, str(tmp_path / "forge.py"))
    assert gp.json("status", "t")["run"]["config"]["gates"] == []  # the forgery took
    proc = gp("check", "t", code=1)
    assert "error[PARALLEL_RECORD_INVALID]" in proc.stderr and "config.gates" in proc.stderr
    assert "PARALLEL_RECORD_INVALID" in {f["code"] for f in gp.json("validate", "t", code=1)["findings"]}
    before = snapshot(repo)
    assert "PARALLEL_RECORD_INVALID" in gp("pick", "t", code=1).stderr
    assert snapshot(repo) == before


def _forge_passing_evidence(repo: Path, task: str, inst_id: str) -> None:
    """What an agent with write access to .git can do: rewrite its failing
    pack to say pass, and bind the record to the new bytes."""
    path = repo / ".git" / "parallel" / "runs" / f"{task}.yaml"
    record = yaml.safe_load(path.read_text())
    inst = next(i for i in record["instances"] if i["id"] == inst_id)
    pack_path = Path(inst["evidence"]["path"])
    pack = json.loads(pack_path.read_text())
    pack["verdict"] = "pass"
    pack["protected_blocking"] = []  # and hide what it changed of the harness
    for gate in pack["gates"]:
        gate.update(passed=True, exit_code=0)
    data = (json.dumps(pack, sort_keys=True, indent=2) + "\n").encode()
    pack_path.write_bytes(data)
    inst["evidence"]["sha256"] = sha256_bytes(data)
    inst["verdict"] = "pass"
    path.write_text(yaml.safe_dump(record, sort_keys=False))


def test_forged_evidence_never_lands_a_failing_tree_even_by_fast_forward(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", CHEATERS["conftest"])
    assert gp.json("check", "t", code=1)["instances"][0]["verdict"] == "fail"
    _forge_passing_evidence(repo, "t", "1")
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"  # the forgery convinced pick
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_EVIDENCE_MISMATCH]" in proc.stderr and "forged" in proc.stderr
    assert snapshot(repo) == before and git(repo, "show", "main:app.py") == APP_BUGGY.strip()


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_bare_internal_marker_gets_no_pass_and_validate_sees_a_loser_on_the_base(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("hooks", "install")
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    act(gp, "t", "2", CHEATERS["gate-script"])
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    loser = git(repo, "rev-parse", "parallel/t/2")
    env = dict(os.environ, GIT_PARALLEL_INTERNAL="1")
    ff = subprocess.run(["git", "merge", "-q", "--ff-only", "parallel/t/2"], cwd=repo, env=env,
                        capture_output=True, text=True)
    assert ff.returncode != 0 and "PARALLEL" in ff.stderr
    git(repo, "reset", "-q", "--merge")
    assert git(repo, "rev-parse", "main") != loser
    assert gp.json("validate", "t")["findings"] == []
    # With the hooks skipped altogether, the base takes the loser; validate says so.
    git(repo, "-c", "core.hooksPath=/dev/null", "merge", "-q", "--ff-only", "parallel/t/2")
    findings = gp.json("validate", "t", code=1)["findings"]
    [found] = [f for f in findings if f["code"] == "PARALLEL_BASE_HAS_LOSER"]
    assert found["instance"] == "2" and loser[:12] in found["message"]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_scratch_checkouts_are_a_pool_reused_from_run_to_run(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)

    def pool() -> list[str]:
        listing = git(repo, "worktree", "list", "--porcelain").split("\n\n")
        return sorted(b.split("\n", 1)[0] for b in listing if "/scratch+" in b.split("\n", 1)[0])

    for task in ("a", "b"):
        gp("spawn", task, "-n", "2")
        act(gp, task, "1", HONEST)
        act(gp, task, "2", HONEST + " && echo '# more' >> app.py")
        gp("check", task, "--jobs", "2")
        gp("pick", task)
        gp("merge", task)
        gp("cleanup", task)
        assert 1 <= len(pool()) <= 2  # never more than were in use at once
        assert gp.json("validate")["findings"] == []
    first = pool()
    # A third run checks in the same checkouts: nothing new is registered.
    gp("spawn", "c", "-n", "2")
    act(gp, "c", "1", HONEST)
    act(gp, "c", "2", HONEST)
    gp("check", "c", "--jobs", "2")
    assert pool() == first or len(pool()) == 2


def test_protected_patterns_and_conflict_hunks() -> None:
    from gitflow_parallel.git import protected

    assert protected.matches("tests/unit/test_a.py", ["tests/**"])
    assert protected.matches("tests/unit/test_a.py", ["tests"])  # a folder protects what is under it
    assert protected.matches("conftest.py", ["**/conftest.py"]) and protected.matches("a/b/conftest.py", ["**/conftest.py"])
    assert not protected.matches("src/tests.py", ["tests"]) and not protected.matches("testsuite/x", ["tests"])
    assert protected.matches("a/x.py", ["a/*.py"]) and not protected.matches("a/b/x.py", ["a/*.py"], folders=False)
    base = [b"a\n", b"b\n", b"c\n", b"d\n", b"e\n"]
    ours = [b"a\n", b"B\n", b"c\n", b"d\n", b"e\n"]
    theirs = [b"a\n", b"W1\n", b"W2\n", b"c\n", b"d\n", b"E\n"]
    # Line 2 collides; the winner's change of line 5 is its own and merges.
    assert landing.conflict_hunks(base, ours, theirs) == [
        {"base_lines": [2, 2], "base_written": 1, "winner_lines": [2, 3], "winner_written": 2}]
    assert landing.conflict_hunks(base, ours, ours) == []  # the same change on both sides


def _set_verify(repo: Path, task: str, value: str) -> None:
    """The record as an earlier version froze it (or as a hand edited it)."""
    import yaml

    from gitflow_parallel.config import config_sha256

    path = repo / ".git" / "parallel" / "runs" / f"{task}.yaml"
    record = yaml.safe_load(path.read_text())
    record["config"]["merge"]["verify"] = value
    record["config_sha256"] = config_sha256(record["config"])
    path.write_text(yaml.safe_dump(record, sort_keys=False))


def test_a_run_frozen_under_an_earlier_default_still_runs_and_a_weaker_edit_is_refused(tmp_path: Path) -> None:
    # merge.verify's default was "always" before "auto": a run spawned by
    # that version holds "always" where its file says nothing.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    assert gp.json("status", "t")["run"]["config"]["merge"]["verify"] == "auto"
    _set_verify(repo, "t", "always")
    act(gp, "t", "1", HONEST)
    gp("check", "t")
    assert "PARALLEL_RECORD_INVALID" not in {f["code"] for f in gp.json("validate", "t")["findings"]}
    _set_verify(repo, "t", "never")  # asks less than the file: an edit, refused
    proc = gp("check", "t", "--again", code=1)
    assert "error[PARALLEL_RECORD_INVALID]" in proc.stderr and "config.merge.verify" in proc.stderr
