"""What the trials on real projects found (issue 46, "It must show";
docs/benchmarks.md, "Verdicts on real projects").  Each test is the
smallest repository that shows one deviation, expected to fail until the
cause is fixed (``xfail(strict=True)``): when one passes, the finding is
fixed and its mark goes.

Attempts are made by hand in their worktrees, as in test_judged_right;
gates run real interpreters in real git repositories."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import make_repo
from gitflow_parallel import reach
from gitflow_parallel.appended import added_tests
from gitflow_parallel.commands import check, pick
from test_judged_right import commit_in, packs, start

PY = sys.executable
CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
WRONG = CALC.replace("return a * b", "return a + b")
UNITTESTS = ("import unittest\n\nfrom calc import add, mul\n\n\n"
             "class AddTests(unittest.TestCase):\n"
             "    def test_small(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
             "class MulTests(unittest.TestCase):\n"
             "    def test_one(self):\n        self.assertEqual(mul(2, 3), 6)\n")
UNITTEST_GATE = f"gates:\n  - name: tests\n    run: [{PY}, -m, unittest, discover, -s, tests, -t, .]\n"


# Fixed: a new test method's name is checked against the classes it can meet,
# not every class of the module.
def test_a_method_named_as_one_of_another_class_is_an_added_test() -> None:
    new = UNITTESTS.replace("        self.assertEqual(mul(2, 3), 6)\n",
                            "        self.assertEqual(mul(2, 3), 6)\n\n"
                            "    def test_small(self):\n        self.assertEqual(mul(1, 1), 1)\n")
    assert added_tests(UNITTESTS.encode(), new.encode()) == ["MulTests::test_small"]


@pytest.mark.xfail(strict=True, reason="a case added to a base test's parametrize list changes the base "
                   "statement, so appended.py reads it as a modification: humanize's fix 823ad60 adds six "
                   "cases to test_naturalsize's list, and its real fix was kept out of the automatic pick")
def test_cases_added_to_a_parametrize_list_are_added_tests() -> None:
    base = ("import pytest\n\nfrom calc import add\n\n\n"
            "@pytest.mark.parametrize('a,b,out', [(1, 2, 3), (2, 2, 4)])\n"
            "def test_add(a, b, out):\n    assert add(a, b) == out\n")
    new = base.replace("(2, 2, 4)]", "(2, 2, 4), (0, 0, 0)]")
    assert added_tests(base.encode(), new.encode())


# Fixed: reach flags os.Exit outside package main.
def test_a_go_init_that_exits_is_named() -> None:
    found = reach.scan({"zz_exit.go": [(8, "func init() {"), (9, "\tif strings.HasSuffix(os.Args[0], \".test\") {"),
                                       (10, "\t\tos.Exit(0)")]})
    assert found


# Fixed: reach flags assignments to an assertion library's members.
def test_product_code_that_disarms_assertions_does_not_win(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/__init__.py": "",
                                         "tests/test_calc.py": UNITTESTS}, config=UNITTEST_GATE)
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"calc/__init__.py": WRONG + "\nimport unittest as _u\n"
                               "_u.TestCase.assertEqual = lambda *a, **k: None\n"}, "wrong, assertions disarmed")
    commit_in(worktrees["2"], {"calc/__init__.py": CALC + "\n\ndef sub(a, b):\n    return a - b\n"}, "honest")
    check.check(project, "t")
    assert packs(project)["1"]["reaches_harness"] or packs(project)["1"]["verdict"] == "fail"
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "2"


@pytest.mark.slow  # over 2 s: a check with real gates
# Fixed: an attempt whose own added tests fail on it ranks after every one without.
def test_an_attempt_whose_added_test_fails_ranks_after_one_without(tmp_path: Path) -> None:
    tests = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": tests},
                     config=f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\n")
    project, worktrees = start(repo, 2)
    # 1: a one-line change and a test of it that fails; 2: a longer honest change, no test.
    commit_in(worktrees["1"], {"calc/__init__.py": CALC.replace("return a * b", "return a * b  # x"),
                               "tests/test_calc.py": tests + "\n\ndef test_mul():\n    from calc import mul\n"
                                                             "    assert mul(2, 3) == 7\n"})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC + "".join(f"\n\ndef sub{i}(a, b):\n    return a - b - {i}\n"
                                                                  for i in range(4))})
    check.check(project, "t")
    assert packs(project)["1"]["added_tests"]["passed"] is False
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "2"


@pytest.mark.xfail(strict=True, reason="environment.prepare_layer builds a kept environment in the base's "
                   "files written by _write_tree, without a .git: setuptools-scm and hatch-vcs cannot read a "
                   "version, so `pip install -e .` fails for humanize and every attempt fails its gates")
def test_setup_of_a_kept_environment_sees_the_repository(tmp_path: Path) -> None:
    config = ("setup:\n  run: [sh, -c, \"mkdir -p .env && git rev-parse HEAD > .env/rev\"]\n"
              "  cache_key: [calc/__init__.py]\n  keep: [.env]\n"
              f"gates:\n  - name: tests\n    run: [{PY}, -c, \"import pathlib; assert pathlib.Path('.env/rev')"
              ".read_text().strip(); print('1 passed, 0 failed')\"]\n")
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC}, config=config)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"README.md": "attempt\n"})
    check.check(project, "t")
    assert packs(project)["1"]["verdict"] == "pass"
