"""The right fix can win: an attempt that fixes the bug and adds its
regression test to the existing test file, as upstream fixes do.

The test file is protected, so the gates judge every attempt with the
base's file; an attempt that only *added* tests to it (``appended``) runs
its own file as added tests, which must pass on it and fail on the base,
stays eligible for the automatic pick and ranks above a fix without a
test.  A change that edits or shadows a base test still keeps its attempt
out.  Real git, real pytest gates (docs/judging.md, docs/selection.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, make_repo
from gitflow_parallel import errors as E
from gitflow_parallel.commands import check, merge, pick, spawn
from gitflow_parallel.state.project import Project

PY = sys.executable
GATE = f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\nmax_total: 12\n"
# The bug: clamp ignores its upper bound; no base test sees it.
CALC = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return max(lo, x)\n"
TESTS = ("from calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_clamp_low():\n    assert clamp(-1, 0, 10) == 0\n")
RIGHT = CALC.replace("return max(lo, x)", "return max(lo, min(x, hi))")
RIGHT_TOO = CALC.replace("return max(lo, x)", "return min(hi, max(lo, x))")
WRONG = CALC.replace("return max(lo, x)", "return min(max(lo, x), hi - 1)")
REGRESSION = "\n\ndef test_clamp_high():\n    assert clamp(11, 0, 10) == 10\n"


def commit_in(worktree: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (worktree / name).write_text(text)
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "attempt")


def packs(project: Project) -> dict[str, dict[str, Any]]:
    record = project.store.load("t")
    return {i["id"]: json.loads(Path(i["evidence"]["path"]).read_text()) for i in record["instances"]
            if i.get("evidence")}


def start(tmp_path: Path, n: int) -> tuple[Project, dict[str, Path]]:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS}, config=GATE)
    project = Project.open(repo)
    run = spawn.spawn(project, "t", n)
    return project, {i["id"]: Path(i["worktree"]) for i in run["instances"]}


def test_the_right_fix_with_its_own_test_wins(tmp_path: Path) -> None:
    project, wt = start(tmp_path, 4)
    commit_in(wt["1"], {"calc/__init__.py": RIGHT, "tests/test_calc.py": TESTS + REGRESSION})   # (a)
    commit_in(wt["2"], {"calc/__init__.py": RIGHT_TOO})                                        # (b)
    commit_in(wt["3"], {"calc/__init__.py": WRONG,                                             # (c)
                        "tests/test_calc.py": TESTS.replace("== 0", "== 0 or True") + REGRESSION.replace("11", "9")
                        .replace("== 10", "== 9")})
    commit_in(wt["4"], {"calc/__init__.py": WRONG,                                             # (d)
                        "tests/test_calc.py": TESTS + REGRESSION.replace("11", "9").replace("== 10", "== 9")
                        + "\n\ndef test_clamp_low():\n    assert True\n"})
    result = GP(project.repo.main_workdir).json("check", "t")
    assert result["errors"] == [] and {i["id"]: i["verdict"] for i in result["instances"]} == {
        "1": "pass", "2": "pass", "3": "pass", "4": "pass"}  # each passes the base's tests
    shown = GP(project.repo.main_workdir)("show", "t", "1").stdout
    assert "tests/test_calc.py modified +4 -0  (tests only added: test_clamp_high; run as added tests)" in shown
    assert "added tests (observe): pass on it; they fail on the base and pass on the attempt" in shown
    assert "tests/test_calc.py modified +5 -1  (blocks an automatic pick)" in GP(project.repo.main_workdir)(
        "show", "t", "3").stdout
    by_id = packs(project)

    right = by_id["1"]
    assert right["protected_detail"] == [{"path": "tests/test_calc.py", "change": "modified", "lines_added": 4,
                                          "lines_deleted": 0, "harness": False, "dependencies": False,
                                          "restored": True, "appended": ["test_clamp_high"]}]
    assert right["protected_blocking"] == []
    stage = right["added_tests"]
    assert stage["paths"] == ["tests/test_calc.py"] and stage["passed"] is True
    assert stage["tests"] == ["tests/test_calc.py::test_clamp_high"]
    assert "3 passed" in Path(stage["gates"][0]["log"]).read_text()  # the fix's own test ran on it
    on_base = stage["on_base"]
    assert on_base["passed"] is False and on_base["failing"] == ["tests/test_calc.py::test_clamp_high"]
    assert on_base["gates"][0]["log"].endswith(".0.base.gate-tests.log")
    assert stage["proved"] is True and stage["proof"] == "they fail on the base and pass on the attempt"

    assert by_id["2"]["added_tests"] is None and by_id["2"]["protected_blocking"] == []
    for cheat in ("3", "4"):
        assert by_id[cheat]["protected_blocking"] == ["tests/test_calc.py"], cheat
        assert "appended" not in by_id[cheat]["protected_detail"][0]
        assert by_id[cheat]["added_tests"] is None

    chosen = pick.pick(project, "t")["picks"][0]
    assert chosen["winner"]["id"] == "1"
    assert chosen["decision"]["stage"] == "proved"
    assert chosen["decision"]["runner_up"]["id"] == "2"  # eligible, and fewer changed lines than 1
    assert [f["id"] for f in chosen["ranking"]] == ["1", "2"]
    assert [f["proved"] for f in chosen["ranking"]] == [True, False]
    losers = {l["id"]: l for l in chosen["losers"]}
    assert losers["2"]["code"] == E.SELECTION_NO_PASS and "prove its fix" in losers["2"]["reason"]
    assert losers["3"]["code"] == losers["4"]["code"] == E.PROTECTED_PATH_CHANGED

    # It lands on its evidence, its regression test with it.
    landed = merge.merge(project, "t")["merge"]
    repo = project.repo.main_workdir
    assert git(repo, "show", f"{landed['landed']}:tests/test_calc.py") == (TESTS + REGRESSION).strip()


@pytest.mark.parametrize("namespace", ["auto", "off"])
def test_an_appended_test_that_passes_on_the_base_proves_nothing(tmp_path: Path, namespace: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if namespace == "off":  # the Landlock fence alone: the test file is swapped in the checkout and back
        monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    project, wt = start(tmp_path, 2)
    commit_in(wt["1"], {"calc/__init__.py": RIGHT,
                        "tests/test_calc.py": TESTS + "\n\ndef test_add_more():\n    assert add(1, 1) == 2\n"})
    commit_in(wt["2"], {"calc/__init__.py": RIGHT_TOO})
    result = check.check(project, "t")
    assert result["errors"] == [] and [i["verdict"] for i in result["instances"]] == ["pass", "pass"]
    stage = packs(project)["1"]["added_tests"]
    assert stage["passed"] is True and stage["on_base"]["passed"] is True
    assert stage["proved"] is False and stage["proof"] == "they pass on the base too: they prove nothing"
    chosen = pick.pick(project, "t")["picks"][0]
    # No boost: the critic order decides (2 changed fewer lines).
    assert chosen["winner"]["id"] == "2" and chosen["decision"]["stage"] == "changed_lines"


def test_tests_that_fail_on_the_attempt_are_not_run_on_the_base(tmp_path: Path) -> None:
    project, wt = start(tmp_path, 1)
    commit_in(wt["1"], {"calc/__init__.py": WRONG, "tests/test_calc.py": TESTS + REGRESSION})
    assert [i["verdict"] for i in check.check(project, "t")["instances"]] == ["pass"]  # observe
    stage = packs(project)["1"]["added_tests"]
    assert stage["passed"] is False and stage["on_base"] is None
    assert stage["proved"] is False and stage["proof"] == "they fail on the attempt"


def test_a_base_that_fails_its_own_tests_proves_nothing_for_others(tmp_path: Path) -> None:
    # The task came as a failing test: every added test would fail "on the base".
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS + REGRESSION},
                     config=GATE)
    project = Project.open(repo)
    wt = {i["id"]: Path(i["worktree"]) for i in spawn.spawn(project, "t", 1)["instances"]}
    commit_in(wt["1"], {"calc/__init__.py": RIGHT, "tests/test_calc.py": TESTS + REGRESSION
                        + "\n\ndef test_add_zero():\n    assert add(0, 0) == 0\n"})
    assert [i["verdict"] for i in check.check(project, "t")["instances"]] == ["pass"]
    stage = packs(project)["1"]["added_tests"]
    assert stage["tests"] == ["tests/test_calc.py::test_add_zero"]
    assert stage["on_base"]["failing"] == ["tests/test_calc.py::test_clamp_high"]
    assert stage["proved"] is False
    assert stage["proof"] == "the base fails, but not in the added tests: tests/test_calc.py::test_clamp_high"


@pytest.mark.parametrize("name, proved", [
    ("tests/test_calc.py::test_new", True),
    ("tests/test_calc.py::test_new[1-2]", True),
    ("tests/test_calc.py::TestK::test_new", False),
    ("tests/test_calc.py", True),                 # the file did not import on the base
    ("tests/test_calc.py::test_add", False),
    ("tests/test_other.py::test_new", False),
    ("tests/test_more.py::test_x", True),         # any test of a new file
])
def test_which_failures_name_an_added_test(name: str, proved: bool) -> None:
    from gitflow_parallel.judge.proof import names_added

    assert names_added(name, ["tests/test_calc.py::test_new", "tests/test_more.py"]) is proved
