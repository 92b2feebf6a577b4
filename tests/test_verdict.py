"""A verdict the attempt's own code cannot forge (docs/judging.md, "What
decides a gate").

Each attack is real code an attempt commits, judged by real pytest (or
node) in a real check beside an honest right attempt: the runner shadowed
from the checkout, the report rewritten by an exit handler, the exit
status forced to 0 after a failure.  The cheat must fail, as forged where
the sources disagree, and the honest attempt must pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_repo
from gitflow_parallel import failures
from gitflow_parallel.commands import check
from gitflow_parallel.judge import outcome, stream
from test_judged_right import CALC, TESTS, commit_in, packs, start, verdicts

PY = sys.executable
PYTEST = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]"
WRONG = CALC.replace("return a * b", "return a + b")
RIGHT = CALC.replace("a * b", "b * a")
FORGED = "PARALLEL_RESULTS_FORGED"


def judged(tmp_path: Path, cheat: dict[str, str], gate: str = PYTEST, extra: str = "",
           files: dict[str, str] | None = None) -> dict[str, dict]:
    """Instance 1 commits ``cheat`` (over wrong code), instance 2 the right
    fix: both checked; their packs' first gate results."""
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG, "tests/test_calc.py": TESTS, **(files or {})},
                     config=f"gates:\n  - name: tests\n    run: {gate}\n{extra}")
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], cheat)
    commit_in(worktrees["2"], {"calc/__init__.py": RIGHT})
    result = check.check(project, "t")
    gates = {i: p["gates"][0] for i, p in packs(project).items()}
    assert verdicts(result) == {"1": "fail", "2": "pass"}, gates
    return gates


# -- the runner starts before any of the attempt's files --------------------------------------
FAKE_SUMMARY = "import os\nprint('1 passed in 0.01s')\nos._exit(0)\n"


def test_a_root_module_the_runner_imports_does_not_shadow_it(tmp_path: Path) -> None:
    # pytest imports iniconfig; `python -m` would put the checkout first.
    gates = judged(tmp_path, {"iniconfig.py": FAKE_SUMMARY})
    assert gates["1"]["streamed"]["failed"] == 1 and "1 passed in 0.01s" not in Path(gates["1"]["log"]).read_text()


def test_a_fake_pytest_package_at_the_root_is_not_the_runner(tmp_path: Path) -> None:
    gates = judged(tmp_path, {"pytest/__init__.py": "", "pytest/__main__.py": FAKE_SUMMARY})
    assert gates["1"]["streamed"]["failed"] == 1


def test_a_module_beside_a_test_script_does_not_replace_the_standard_library(tmp_path: Path) -> None:
    script = ("import json\nimport sys\nfrom calc import mul\n"
              "sys.exit(0 if json.dumps(mul(2, 3)) == '6' else 1)\n")
    forged = "def dumps(value):\n    return '6'\n"
    gate = f"[{PY}, scripts/check_mul.py]"
    gates = judged(tmp_path, {"scripts/json.py": forged}, gate=gate,
                   extra="    env:\n      PYTHONPATH: .\n", files={"scripts/check_mul.py": script})
    assert gates["1"]["exit_code"] == 1


def test_the_project_stays_importable_from_its_checkout(tmp_path: Path) -> None:
    # A flat layout that is not installed: `python -m pytest` finds calc in
    # the checkout, after the standard library and the installed packages.
    gates = judged(tmp_path, {"calc/__init__.py": WRONG + "\n"})
    assert gates["2"]["passed"] and gates["2"]["streamed"] == {
        "sessions": 1, "passed": 2, "failed": 0, "skipped": 0, "failed_tests": []}


# -- results leave the test process as each test ends ---------------------------------------
REWRITE_AND_EXIT = WRONG + '''
import atexit, os, re, sys


def _forge():
    for arg in sys.argv:
        if arg.startswith("--junitxml="):
            path = arg.split("=", 1)[1]
            text = open(path).read()
            text = re.sub(r"<failure.*?</failure>", "", text, flags=re.S).replace('failures="1"', 'failures="0"')
            open(path, "w").write(text)
    os._exit(0)


atexit.register(_forge)
'''
EXIT_0_AFTER = WRONG + "\nimport atexit, os\natexit.register(lambda: os._exit(0))\n"


def test_an_exit_handler_that_rewrites_the_report_and_exits_0_is_forged(tmp_path: Path) -> None:
    gate = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests, \"--junitxml={{report}}\"]"
    expect = "    expect:\n      fail_to_pass: [tests/test_calc.py::test_mul]\n"
    gates = judged(tmp_path, {"calc/__init__.py": REWRITE_AND_EXIT}, gate=gate, extra=expect)
    assert gates["1"]["exit_code"] == 0 and gates["1"]["expect"]["passed"]  # the report was forged
    assert gates["1"]["code"] == FORGED and "tests/test_calc.py::test_mul" in gates["1"]["error"]


def test_exit_0_after_a_failure_is_forged(tmp_path: Path) -> None:
    gates = judged(tmp_path, {"calc/__init__.py": EXIT_0_AFTER})
    assert gates["1"]["exit_code"] == 0 and gates["1"]["code"] == FORGED


def test_a_printed_failure_fails_the_gate_whatever_its_status(tmp_path: Path) -> None:
    # No pytest here: a script that prints pytest's summary of a failure and exits 0.
    script = ("from calc import mul\n"
              "print('2 passed in 0.01s' if mul(2, 3) == 6 else '1 failed, 1 passed in 0.02s')\n")
    gates = judged(tmp_path, {"calc/__init__.py": WRONG + "\n"}, gate=f"[{PY}, check.py]",
                   files={"check.py": script})
    assert gates["1"]["code"] == FORGED and "1 failed" in gates["1"]["error"]


def test_a_session_ended_from_inside_before_its_end_is_forged(tmp_path: Path) -> None:
    cut = WRONG + "\nimport os, sys\nif 'pytest' in sys.modules:\n    os._exit(0)\n"
    gates = judged(tmp_path, {"calc/__init__.py": cut})
    assert gates["1"]["code"] == FORGED and "session finished" in gates["1"]["error"]


def test_an_xdist_run_streams_through_its_controller(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    gate = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, -n, '2', tests]"
    # The product's exit handler runs in the workers: the controller, which
    # streams their reports, ends by itself with pytest's status.
    gates = judged(tmp_path, {"calc/__init__.py": EXIT_0_AFTER}, gate=gate)
    assert gates["2"]["streamed"]["passed"] == 2
    assert gates["1"]["streamed"]["failed"] == 1 and gates["1"]["exit_code"] == 1


# -- a canary in every hidden run -------------------------------------------------------------
def test_a_hidden_run_that_passes_everything_is_caught_by_its_canary(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text("from calc import mul\n\n\ndef test_sq():\n"
                                                     "    assert mul(7, 7) == 49\n")
    # Product code that turns every failure into a pass, from inside pytest.
    pass_all = WRONG + '''
import sys
if "pytest" in sys.modules:
    import _pytest.runner as runner
    real = runner.call_and_report

    def call_and_report(item, when, log=True, **kw):
        item.runtest = lambda: None
        return real(item, when, log, **kw)
    runner.call_and_report = call_and_report
'''
    gates = judged(tmp_path, {"calc/__init__.py": pass_all}, extra=f"    hidden: {hidden}\n")
    assert gates["1"]["code"] == FORGED and "canary" in gates["1"]["error"]
    assert gates["2"]["hidden"] == {"files": 1, "summary": "3 passed"}
    assert "canary" not in str(gates["2"])


# -- the rules, one table -----------------------------------------------------------------------
def _stream(*lines: str) -> stream.Streamed:
    return stream.parse("\n".join(lines).encode())


S = '"s": "7-1"'
START, END0, END1 = f'{{"e": "start", {S}}}', f'{{"e": "end", "status": 0, {S}}}', f'{{"e": "end", "status": 1, {S}}}'


def collected(n: int) -> str:
    return f'{{"e": "collected", "n": {n}, {S}}}'


def line_of(name: str, category: str, **extra: str) -> str:
    more = "".join(f', "{k}": "{v}"' for k, v in extra.items())
    return f'{{"e": "test", "id": "t.py::{name}", "cat": "{category}", {S}{more}}}'


PASS_A, FAIL_B = line_of("a", "passed"), line_of("b", "failed")
CANARY, CANARY_PASSED = line_of("test_c", "failed"), line_of("test_c", "passed")
ONE, TWO = collected(1), collected(2)


@pytest.mark.parametrize("ran, passed, code", [
    (outcome.Ran(0), True, None),
    (outcome.Ran(1), False, None),
    (outcome.Ran(None, error="timed out"), False, None),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, END0)), True, None),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, FAIL_B, END1)), False, FORGED),
    (outcome.Ran(1, streamed=_stream(START, TWO, PASS_A, FAIL_B, END1)), False, None),
    # Ended from inside: no end, an end before the tests, an end with no collection.
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A)), False, FORGED),
    (outcome.Ran(1, streamed=_stream(START, ONE, PASS_A)), False, None),
    (outcome.Ran(0, streamed=_stream(START, END0, ONE, PASS_A)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, END0)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, collected(0), END0)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, END0)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, "not json", END0)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, END1)), False, FORGED),
    # A skip no marker declared, raised by the product's code; by a test's helper it stands.
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, line_of("b", "skipped", **{"from": "calc/__init__.py"}),
                                     END0)), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, line_of("b", "skipped", **{"from": "tests/helpers.py"}),
                                     END0)), True, None),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, line_of("b", "skipped", **{"from": "/usr/lib/x.py"}),
                                     END0)), True, None),
    # A plugin registered once the session started: from a conftest it stands, from product code it is forged.
    (outcome.Ran(0, streamed=_stream(START, ONE, f'{{"e": "plugin", "from": "tests/sub/conftest.py", {S}}}', PASS_A,
                                     END0)), True, None),
    (outcome.Ran(0, streamed=_stream(START, ONE, f'{{"e": "plugin", "from": "calc/__init__.py", {S}}}', PASS_A,
                                     END0)), False, FORGED),
    # A pytest run inside the gate's own (pytester): its failures are its own.
    (outcome.Ran(0, streamed=_stream(START, ONE, '{"e": "start", "s": "8-2"}', '{"e": "collected", "n": 1, "s": "8-2"}',
                                     '{"e": "test", "id": "x.py::f", "cat": "failed", "s": "8-2"}',
                                     '{"e": "end", "status": 1, "s": "8-2"}', PASS_A, END0)), True, None),
    (outcome.Ran(0, printed=outcome.Printed("pytest", 1, 1, 0, "1 failed, 1 passed")), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, END0),
                 printed=outcome.Printed("pytest", 2, 0, 0, "2 passed")), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, END0),
                 printed=outcome.Printed("pytest", 1, 0, 0, "1 passed")), True, None),
    # A hidden run's canary: failing, and its run's only failure, it passes.
    (outcome.Ran(1, streamed=_stream(START, TWO, PASS_A, CANARY, END1), hidden=True, counted=True, canary="test_c"),
     True, None),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, CANARY, END1), hidden=True, counted=True, canary="test_c"),
     False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, TWO, PASS_A, CANARY_PASSED, END0), hidden=True, counted=True,
                 canary="test_c"), False, FORGED),
    (outcome.Ran(0, streamed=_stream(START, ONE, PASS_A, END0), hidden=True, counted=True, canary="test_c"),
     False, FORGED),
    (outcome.Ran(5, streamed=_stream(START, collected(0), '{"e": "end", "status": 5, "s": "7-1"}'), hidden=True,
                 counted=True, canary="test_c"), False, FORGED),
    (outcome.Ran(0, hidden=True), False, None),
    (outcome.Ran(0, hidden=True, require_count=False), True, None),
    (outcome.Ran(0, expect={"passed": False, "tests": 1, "failed": 1, "error": "fail_to_pass: 1 of 1"}),
     False, None),
    (outcome.Ran(1, streamed=_stream(START, ONE, FAIL_B, END1), listed=("t.py::b",),
                 expect={"passed": True, "tests": 1, "failed": 0, "error": None}), False, FORGED),
    # With expect:, only the listed tests count, and the exit status not at all.
    (outcome.Ran(1, streamed=_stream(START, TWO, PASS_A, FAIL_B, END1), listed=("t.py::a",),
                 printed=outcome.Printed("pytest", 1, 1, 0, "1 failed, 1 passed"),
                 expect={"passed": True, "tests": 2, "failed": 1, "error": None}), True, None),
])
def test_a_gates_outcome_is_decided_by_one_rule_table(ran: outcome.Ran, passed: bool, code: str | None) -> None:
    decided = outcome.decide(ran)
    assert (decided.passed, decided.code) == (passed, code), decided


# -- node: a reset exit status ----------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_an_exit_status_reset_in_node_fails_on_the_printed_failure(tmp_path: Path) -> None:
    lib = "exports.mul = (a, b) => a + b;\n"
    right = "exports.mul = (a, b) => a * b;\n"
    reset = lib + "process.on('exit', () => { process.exitCode = 0; });\n"
    test = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { mul } = require('../lib.js');\n"
            "test('mul', () => { assert.strictEqual(mul(2, 3), 6); });\n"
            "test('mul one', () => { assert.strictEqual(mul(1, 1), 1); });\n")
    # The test file run by node itself: the runner and the product share a process.
    argv = ["node", "--test-reporter=tap", "test/mul.test.js"]
    repo = make_repo(tmp_path / "repo", {"lib.js": lib, "test/mul.test.js": test},
                     config=f"gates:\n  - name: tests\n    run: [{', '.join(argv)}]\n")
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"lib.js": reset})
    commit_in(worktrees["2"], {"lib.js": right})
    alone = subprocess.run(argv, cwd=worktrees["1"], capture_output=True)
    assert alone.returncode == 0  # the attack is real
    result = check.check(project, "t")
    gates = {i: p["gates"][0] for i, p in packs(project).items()}
    assert verdicts(result) == {"1": "fail", "2": "pass"}, gates
    assert gates["1"]["code"] == FORGED


def test_a_conftest_further_down_leaves_the_runners_report_as_it_was(tmp_path: Path) -> None:
    # A conftest.py in a subfolder is a plugin registered once the session
    # started: it stands, and nothing of the stream reaches the JUnit report.
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "sub" / "conftest.py").write_text("import pytest\n\n\n@pytest.fixture\ndef two():\n"
                                                            "    return 2\n\n\ndef pytest_runtest_setup(item):\n"
                                                            "    pass\n")
    (tmp_path / "tests" / "sub" / "test_two.py").write_text("def test_two(two):\n    assert two == 2\n")
    channel = stream.open_channel()
    try:
        env = dict(os.environ)
        run = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "--junitxml=out.xml"],
                             cwd=tmp_path, env={**env, **channel.env(env)}, pass_fds=(channel.write_fd,),
                             capture_output=True, text=True)
        streamed = channel.result()
    finally:
        channel.close()
    decided = outcome.decide(outcome.Ran(run.returncode, streamed=streamed,
                                         printed=failures.tally(run.stdout)))
    assert decided.passed, (decided, run.stdout)
    assert "tests/sub/conftest.py" in streamed.sessions[0].plugins
    assert "git-parallel" not in (tmp_path / "out.xml").read_text()
