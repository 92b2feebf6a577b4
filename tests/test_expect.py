"""Gates that must run tests by name (``expect:``), checked from the test
runner's own JUnit XML report, and hidden gates that must report a count.

Real pytest runs in real checkouts; the attack is real: an attempt whose
code ends the interpreter with status 0 as soon as pytest imports it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import make_repo
from gitflow_parallel import config as C
from gitflow_parallel import expect
from gitflow_parallel.commands import check
from gitflow_parallel.errors import ParallelError
from test_judged_right import CALC, TESTS, commit_in, packs, start, verdicts

PY = sys.executable
PYTEST = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests, \"--junitxml={{report}}\"]"
EXPECT = ("    expect:\n      fail_to_pass: [tests/test_calc.py::test_mul]\n"
          "      pass_to_pass: [tests/test_calc.py::test_add]\n")
WRONG_MUL = CALC.replace("return a * b", "return a + b")
# Ends the run with status 0 as soon as pytest imports the code: no test fails.
EXIT_UNDER_PYTEST = "import os\nimport sys\n\nif 'pytest' in sys.modules:\n    os._exit(0)\n" + WRONG_MUL
HIDDEN_TEST = "from calc import mul\n\n\ndef test_square():\n    assert mul(7, 7) == 49\n"


def test_junit_reports_are_read_case_by_case(tmp_path: Path) -> None:
    """On a report real pytest wrote: node ids, classes, parameters."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(textwrap.dedent("""
        import pytest

        def test_ok():
            pass

        def test_bad():
            assert 0

        class TestK:
            @pytest.mark.parametrize("n", [1, 2])
            def test_p(self, n):
                assert n == 1

        @pytest.mark.skip
        def test_skipped():
            pass
    """))
    report = tmp_path / "out" / "r.xml"
    subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", f"--junitxml={report}"],
                   cwd=tmp_path, capture_output=True)
    cases = expect.parse_junit(report.read_bytes())
    assert len(cases) == 5
    assert expect.outcome_of("tests/test_a.py::test_ok", cases) == "passed"
    assert expect.outcome_of("tests/test_a.py::test_bad", cases) == "failed"
    assert expect.outcome_of("tests/test_a.py::TestK::test_p[1]", cases) == "passed"
    assert expect.outcome_of("tests/test_a.py::TestK::test_p[2]", cases) == "failed"
    assert expect.outcome_of("tests/test_a.py::test_skipped", cases) == "skipped"
    assert expect.outcome_of("test_ok", cases) == "passed"  # by name alone when no full id matches
    assert expect.outcome_of("tests/test_a.py::test_gone", cases) == "missing"
    judged = expect.judge({"fail_to_pass": ["tests/test_a.py::test_ok"],
                           "pass_to_pass": ["tests/test_a.py::test_bad", "tests/test_a.py::test_gone"]},
                          report.read_bytes())
    assert not judged["passed"] and judged["tests"] == 5 and judged["failed"] == 2
    assert judged["pass_to_pass"]["not_passed"] == {"tests/test_a.py::test_bad": "failed",
                                                    "tests/test_a.py::test_gone": "missing"}
    assert expect.judge({"fail_to_pass": ["x"], "pass_to_pass": []}, b"<html/>")["error"].startswith(
        "the test report is unreadable")
    assert not expect.judge({"fail_to_pass": ["x"], "pass_to_pass": []}, None)["passed"]


@pytest.mark.parametrize("gate, problem", [
    (f"run: [{PY}, -m, pytest]\n" + EXPECT, "must pass {report}"),
    (f"run: {PYTEST}\n    expect: {{}}\n", "names no test"),
    (f"run: {PYTEST}\n    expect:\n      fail_to_pass: a\n", "must be a list of test ids"),
    (f"run: {PYTEST}\n    expect:\n      report: tap\n      fail_to_pass: [a]\n", "must be one of junit"),
    (f"run: {PYTEST}\n    mode: probe\n" + EXPECT, "a probe's output is its signature"),
    (f"run: {PYTEST}\n    require_count: maybe\n", "must be true"),
])
def test_a_bad_expect_is_refused_with_its_line(gate: str, problem: str) -> None:
    with pytest.raises(ParallelError) as refused:
        C.parse(f"gates:\n  - name: tests\n    {gate}")
    assert refused.value.code == "PARALLEL_CONFIG_INVALID" and problem in refused.value.message
    assert "(line " in refused.value.message


def test_expect_judges_from_the_report_not_the_exit_status(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG_MUL, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n" + EXPECT)
    project, worktrees = start(repo, 3)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC})
    commit_in(worktrees["2"], {"calc/__init__.py": WRONG_MUL + "\n"})
    tip = commit_in(worktrees["3"], {"calc/__init__.py": EXIT_UNDER_PYTEST})
    # The attack is real: in its own worktree pytest exits 0 and says nothing failed.
    alone = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=worktrees["3"],
                           capture_output=True)
    assert alone.returncode == 0 and tip
    assert verdicts(check.check(project, "t")) == {"1": "pass", "2": "fail", "3": "fail"}
    gates = {i: p["gates"][0] for i, p in packs(project).items()}
    assert gates["1"]["expect"]["tests"] == 2 and gates["1"]["expect"]["error"] is None
    assert gates["2"]["expect"]["fail_to_pass"]["not_passed"] == {"tests/test_calc.py::test_mul": "failed"}
    assert gates["3"]["exit_code"] == 0 and not gates["3"]["passed"]
    # Its pytest session streamed its start and never its end: ended from inside.
    assert gates["3"]["code"] == "PARALLEL_RESULTS_FORGED" and "session finished" in gates["3"]["error"]


def _hidden_project(tmp_path: Path, extra: str) -> tuple:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text(HIDDEN_TEST)
    config = (f"gates:\n  - name: hidden\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\n"
              f"    hidden: {hidden}\n{extra}")
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS}, config=config)
    return start(repo, 2)


def test_a_hidden_gate_that_reports_no_count_fails(tmp_path: Path) -> None:
    project, worktrees = _hidden_project(tmp_path, "")
    commit_in(worktrees["1"], {"calc/__init__.py": EXIT_UNDER_PYTEST})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC.replace("a * b", "b * a")})
    assert verdicts(check.check(project, "t")) == {"1": "fail", "2": "pass"}
    gates = {i: p["gates"][0] for i, p in packs(project).items()}
    assert gates["1"]["exit_code"] == 0 and gates["1"]["hidden"]["summary"] is None
    assert gates["1"]["code"] == "PARALLEL_RESULTS_FORGED"
    assert gates["2"]["hidden"]["summary"] == "3 passed"


def test_require_count_false_still_catches_a_pytest_run_ended_from_inside(tmp_path: Path) -> None:
    project, worktrees = _hidden_project(tmp_path, "    require_count: false\n")
    commit_in(worktrees["1"], {"calc/__init__.py": EXIT_UNDER_PYTEST})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC + "\n"})
    # No count is asked for, but pytest streamed that its session started
    # and never that it finished.
    assert verdicts(check.check(project, "t")) == {"1": "fail", "2": "pass"}
    assert packs(project)["1"]["gates"][0]["code"] == "PARALLEL_RESULTS_FORGED"


def test_require_count_false_lets_a_silent_hidden_gate_pass(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "check.sh").write_text("test -f calc/__init__.py\n")
    config = f"gates:\n  - name: hidden\n    run: [sh, check.sh]\n    hidden: {hidden}\n"
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS},
                     config=config + "    require_count: false\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC + "\n"})
    assert verdicts(check.check(project, "t")) == {"1": "pass"}  # a runner that counts nothing


def test_a_hidden_gate_with_expect_counts_from_its_report(tmp_path: Path) -> None:
    project, worktrees = _hidden_project(tmp_path, "    env:\n      PYTEST_ADDOPTS: --junitxml={report}\n"
                                         "    expect:\n      fail_to_pass: [tests/test_hidden.py::test_square]\n")
    commit_in(worktrees["1"], {"calc/__init__.py": EXIT_UNDER_PYTEST})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC + "\n"})
    assert verdicts(check.check(project, "t")) == {"1": "fail", "2": "pass"}
    gates = {i: p["gates"][0] for i, p in packs(project).items()}
    assert gates["2"]["hidden"]["summary"] == "3 passed"  # as streamed, the canary aside
    assert gates["2"]["log"] is None


@pytest.mark.skipif(__import__("gitflow_parallel.proc.landlock", fromlist=["abi"]).abi() == 0,
                    reason="this kernel has no Landlock")
def test_under_the_fence_the_gate_writes_its_report_and_nothing_else_outside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside.xml"
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG_MUL, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n" + EXPECT
                     + f"  - name: elsewhere\n    mode: observe\n    run: [sh, -c, 'echo x > {outside}']\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC})
    monkeypatch.setenv("GIT_PARALLEL_SANDBOX", "auto")
    assert verdicts(check.check(project, "t")) == {"1": "pass"}
    pack = packs(project)["1"]
    assert pack["fence"] in ("namespace", "landlock") and pack["gates"][0]["expect"]["tests"] == 2
    assert not pack["gates"][1]["passed"] and not outside.exists()


def test_check_and_show_say_why_a_gate_that_exited_0_failed(tmp_path: Path) -> None:
    from conftest import GP

    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG_MUL, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n" + EXPECT)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": EXIT_UNDER_PYTEST})
    gp = GP(repo)
    checked = gp("check", "t", code=1)
    assert "FAIL tests" in checked.stdout and "exit 0" in checked.stdout
    assert "PARALLEL_RESULTS_FORGED" in checked.stdout
    assert "PARALLEL_RESULTS_FORGED" in gp("show", "t", "1").stdout
    gp("retry", "t", "1")  # and the next attempt is told
    feedback = Path(project.store.load("t")["instances"][0]["feedback"]).read_text()
    assert "## Gate tests: exit 0; PARALLEL_RESULTS_FORGED" in feedback
