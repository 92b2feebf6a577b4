"""Product code that reaches the harness is shown and kept out of the
automatic pick, as a protected change is (issue 46, item 7).

The product's own code runs inside the test process: an ``atexit`` hook
runs after pytest wrote its JUnit report and can rewrite it, ``os._exit(0)``
sets the status whatever failed.  The lines an attempt added to its
non-test files are scanned (``reach``); what they reach is in the pack
(``reaches_harness``), in ``check``, ``show`` and ``pick``, and only a
person's ``pick --instance`` lands it.  Real git, real pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GP, make_repo
from gitflow_parallel import reach
from gitflow_parallel.commands import check, pick
from test_judged_right import CALC, TESTS, commit_in, packs, start

PY = sys.executable
PYTEST = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests, \"--junitxml={{report}}\"]"
EXPECT = ("    expect:\n      fail_to_pass: [tests/test_calc.py::test_mul]\n"
          "      pass_to_pass: [tests/test_calc.py::test_add]\n")
WRONG_MUL = CALC.replace("return a * b", "return a + b")
# The attack of the issue: a wrong fix whose package, once imported, rewrites
# the JUnit report pytest wrote (named by --junitxml= or $GIT_PARALLEL_REPORT)
# without its failures, and ends the process with status 0.
FORGE = '''

import atexit as _atexit
import os as _os
import re as _re
import sys as _sys


def _forge():
    path = _os.environ.get("GIT_PARALLEL_REPORT")
    for arg in _sys.argv:
        if arg.startswith("--junitxml="):
            path = arg.split("=", 1)[1]
    if path and _os.path.exists(path):
        text = open(path).read()
        text = _re.sub(r"<failure.*?</failure>", "", text, flags=_re.S)
        text = _re.sub(r'failures="\\d+"', 'failures="0"', text)
        open(path, "w").write(text)
    _os._exit(0)


_atexit.register(_forge)
'''


def test_the_scan_names_what_product_code_reaches() -> None:
    added = {"calc/__init__.py": [(3, "import atexit"), (4, "atexit.register(f)"), (5, "os._exit(0)"),
                                  (6, "x = os.environ['GIT_PARALLEL_REPORT']"), (7, "from _pytest import runner"),
                                  (8, "import pluggy"), (9, "opts = '--junitxml=out.xml'"),
                                  (10, "return a + b"), (11, "# " + "y" * 300 + " os._exit(1)")],
             "web/index.js": [(1, 'process.on("exit", () => { process.exitCode = 0 })'),
                              (2, "const m = require('mocha')"), (3, "import { test } from 'node:test'"),
                              (4, "process.kill(process.pid, 'SIGKILL')"), (5, "const x = 1")]}
    found = reach.scan(added)
    lines = {(f["path"], f["line"]) for f in found}
    assert lines == {("calc/__init__.py", n) for n in (3, 4, 5, 6, 7, 8, 9, 11)} | {
        ("web/index.js", n) for n in (1, 2, 3, 4)}
    assert {f["rule"] for f in found if f["path"] == "calc/__init__.py" and f["line"] == 4} == {"exit handler"}
    assert all(len(f["text"]) <= 121 for f in found)
    # A file named like a test (outside the protected paths, which the
    # caller leaves out) may use the runner's API as a test does...
    assert reach.scan({"tests/test_calc.py": [(1, "import pytest"), (2, "pytest.skip('slow')")],
                       "conftest.py": [(1, "from pytest import fixture")],
                       "src/calc_test.py": [(1, "import pytest"), (2, "np = pytest.importorskip('numpy')")],
                       "tests/test_u.py": [(1, "raise unittest.SkipTest('no backend')"), (2, "@pytest.mark.xfail")],
                       "web/a.test.js": [(1, "require('mocha')")],
                       "web/a.spec.ts": [(1, "import { vi } from 'vitest'")],
                       "web/__tests__/setup.js": [(1, "require('jest')")],
                       "README.md": [(1, "run `pytest --junitxml=out.xml` with GIT_PARALLEL_REPORT set")]}) == []
    # ... and nothing more: product code named like a test is read.
    named = reach.scan({"calc/test_support.py": [(1, "import pytest"), (2, "from _pytest.config import Config"),
                                                 (3, "o.pluginmanager.register(_Steady())")],
                        "conftest.py": [(1, "import atexit")]})
    assert [(f["path"], f["line"], f["rule"]) for f in named] == [
        ("calc/test_support.py", 2, "runner internals"), ("calc/test_support.py", 3, "runner internals"),
        ("conftest.py", 1, "exit handler")]
    # Ordinary code that merely mentions the words is not a finding.
    assert reach.scan({"calc/util.py": [(1, "def exit_code(status):"), (2, "text = 'pytest is a runner'"),
                                        (3, "import pytesting"), (4, "from tapestry import weave"),
                                        (5, "avatar = load()"), (6, "exitfunc = 1")]}) == []


# (path, line, rule) the scan names, each beside a near miss it must not name.
WIDER = [
    ("calc/a.py", "raise _unittest.SkipTest('needs the backend')", "test outcome", "def skip_test(self):"),
    ("calc/a.py", "pytest.skip('no')", "test outcome", "rows = it.skip(3)"),
    ("calc/a.py", "__import__('os').xfail('known')", "test outcome", "if mark.xfail:"),
    ("calc/a.py", "m = pytest.importorskip('x')", "test outcome", "m = import_or_skip('x')"),
    ("calc/a.py", "config.pluginmanager.register(p)", "runner internals", "plugin_manager = PluginManager()"),
    ("calc/a.py", "f = runner.hookimpl(wrapper=True)(f)", "runner internals", "def hook_impl(self):"),
    ("calc/a.py", "for o in _gc.get_objects():", "runner internals", "gc.collect()"),
    ("calc/a.py", "_sys.exit = lambda *a, **k: None", "exit status", "if sys.exit == handler:"),
    ("calc/a.py", "sys.modules['_pytest.runner'] = fake", "runner internals", "sys.modules[__name__] = Lazy()"),
    ("calc/a.py", "runner = __import__('py' + 'test')", "built module name", "json = __import__('json')"),
    ("calc/a.py", "m = importlib.import_module(f'py{x}')", "built module name", "m = importlib.import_module(name)"),
    ("calc/a.py", "unittest.TestCase.assertEqual = lambda *a: None", "assertions", "self.assertEqual(a, b)"),
    ("calc/a.py", "hub = sys.modules.get('gitparallel_results')", "git-parallel variable", "hub = sys.modules.get('json')"),
    ("lib.js", "Object.is = () => true;", "assertions", "if (Object.is(a, b)) return;"),
    ("lib.js", "assert.equal = () => {};", "assertions", "assert.equal(a, b);"),
    ("lib.js", "assert.strict.deepEqual = f;", "assertions", "const eq = assert.strict.deepEqual;"),
    ("lib.js", "require('node:assert').ok = () => {};", "assertions", "const ok = require('node:assert').ok;"),
    ("lib.js", "globalThis.expect = lax;", "assertions", "globalThis.expected = 1;"),
    ("lib.js", "global.expect = lax;", "assertions", "expect(x).toBe(1);"),
    ("lib.js", "const exit = process['really' + 'Exit'];", "assertions", "const home = process.env['HOME'];"),
    ("lib.js", "const t = require('t' + 'ap');", "built module name", "const t = require('./tap-format');"),
    ("src/lib.rs", '#[link_section = ".init_array"]', "startup code", "#[inline]"),
    ("src/lib.rs", "static BOOT: extern \"C\" fn() = boot; // in init_array", "startup code", "static BOOT: u8 = 0;"),
    ("src/lib.rs", "fn on_exit(f: extern \"C\" fn(i32, *mut u8), arg: *mut u8) -> i32;", "exit handler",
     "let on_exit_code = 3;"),
    ("src/lib.rs", "unsafe { libc::_exit(0) }", "exit status", "std::process::exit(1)"),
    ("calc.go", "\t\tos.Exit(0)", "exit status", "\t\tlog.Print(err)"),
    ("calc.go", "\tsyscall.Exit(0)", "exit status", "\tsyscall.Getpid()"),
]


@pytest.mark.parametrize("path, line, rule, near", WIDER, ids=[f"{w[2]}:{w[1][:30]}" for w in WIDER])
def test_the_scan_names_each_rule_and_not_its_near_miss(path: str, line: str, rule: str, near: str) -> None:
    files = {"calc.go": b"package calc\n"}
    found = reach.scan({path: [(1, line), (2, near)]}, files.get)
    assert [(f["line"], f["rule"]) for f in found] == [(1, rule)], found


def test_os_exit_is_named_outside_package_main_only() -> None:
    # A command's main calls os.Exit honestly; a library package's init that
    # does ends the test binary before any test runs.
    files = {"cmd/calc/main.go": b"package main\n\nfunc main() {\n\tos.Exit(run())\n}\n",
             "calc.go": b"// Package calc.\npackage calc\n"}
    added = {path: [(4, "\tos.Exit(run())")] for path in files}
    assert [f["path"] for f in reach.scan(added, files.get)] == ["calc.go"]
    assert [f["path"] for f in reach.scan(added)] == ["calc.go", "cmd/calc/main.go"]  # package unknown: named


def test_an_atexit_forgery_is_named_and_loses_to_an_honest_sibling(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG_MUL, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n" + EXPECT)
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"calc/__init__.py": WRONG_MUL + FORGE}, "wrong fix, forged report")
    commit_in(worktrees["2"], {"calc/__init__.py": CALC}, "right fix")
    # The attack is real: in its own worktree pytest's report says nothing
    # failed and the run ends with status 0.
    report = tmp_path / "alone.xml"
    alone = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", f"--junitxml={report}"],
                           cwd=worktrees["1"], capture_output=True, text=True)
    assert alone.returncode == 0 and "<failure" not in report.read_text(), alone.stdout[-300:]

    result = check.check(project, "t")
    assert result["errors"] == []
    by_id = packs(project)
    found = by_id["1"]["reaches_harness"]
    rules = {f["rule"] for f in found}
    assert {"exit handler", "exit status", "runner report"} <= rules, found
    assert all(f["path"] == "calc/__init__.py" for f in found)
    assert any(f["text"] == "_atexit.register(_forge)" for f in found)
    assert by_id["2"]["reaches_harness"] == []

    picked = pick.pick(project, "t")["picks"][0]
    assert picked["winner"]["id"] == "2"
    losers = {l["id"]: l for l in picked["losers"]}
    if by_id["1"]["verdict"] == "pass":  # the forgery fooled the gate: the scan keeps it out
        assert losers["1"]["code"] == "PARALLEL_REACHES_HARNESS" and "calc/__init__.py" in losers["1"]["reason"]


def test_reaching_the_harness_is_shown_and_lands_only_by_a_person(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC + "\nimport atexit\natexit.register(print)\n"})
    gp = GP(repo)
    checked = gp("check", "t").stdout
    assert "reaches the test harness" in checked and "calc/__init__.py:8" in checked, checked
    assert packs(project)["1"]["verdict"] == "pass"
    refused = gp("pick", "t", code=1)
    assert "PARALLEL_REACHES_HARNESS" in refused.stderr, refused.stderr
    shown = gp("show", "t", "1").stdout
    assert "calc/__init__.py:9" in shown and "exit handler" in shown, shown
    gp("pick", "t", "--instance", "1", "--reason", "the exit handler is intended")
    gp("merge", "t")


@pytest.mark.parametrize("honest", [
    {},
    {"calc/__init__.py": CALC + "\n\ndef exit_code(status):\n    return status\n",
     "calc/cli.py": "import sys\n\n\ndef main():\n    sys.exit(0)\n"},
])
def test_an_honest_fix_reaches_nothing(tmp_path: Path, honest: dict[str, str]) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG_MUL, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n" + EXPECT)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC, **honest})
    check.check(project, "t")
    assert packs(project)["1"]["reaches_harness"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "1"
