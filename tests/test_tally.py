"""Counts of passed, failed and skipped tests from each common runner's
printed summary, and which runner a gate's command starts.

Every sample is a real run's output (``tests/fixtures/tally`` and
``tests/fixtures/failures``; each file's first line says how it was made):
2 passing tests, 1 failing, 1 skipped where the runner has skips."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from gitflow_parallel import failures
from gitflow_parallel.failures import Tally
from gitflow_parallel.judge import hidden

FIXTURES = Path(__file__).parent / "fixtures"
TWO_ONE_ONE = (2, 1, 1, "1 failed, 2 passed, 1 skipped")
# fixture: (runner, passed, failed, skipped, line)
EXPECTED: dict[str, tuple[str, int, int, int, str]] = {
    "tally/pytest.log": ("pytest", 3, 3, 2, "2 failed, 2 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 error"),
    "tally/pytest-deselected.log": ("pytest", 2, 0, 0, "2 passed, 6 deselected"),
    "tally/pytest-empty.log": ("pytest", 0, 0, 0, "no tests ran"),
    "tally/pytest-errors.log": ("pytest", 0, 2, 0, "2 errors"),
    "tally/pytest-nested.log": ("pytest", 1, 0, 0, "1 passed"),  # the inner run's "1 failed" came first
    "tally/unittest.log": ("unittest", 2, 2, 2, "2 failed, 2 passed, 2 skipped"),  # an expected failure is skipped
    "tally/unittest-ok.log": ("unittest", 1, 0, 0, "1 passed"),
    "tally/jest.log": ("jest", *TWO_ONE_ONE),
    "tally/vitest.log": ("vitest", *TWO_ONE_ONE),  # coloured
    "tally/mocha.log": ("mocha", *TWO_ONE_ONE),
    "tally/mocha-passing.log": ("mocha", 2, 0, 0, "2 passed"),
    "tally/mocha-tap.log": ("tap", 2, 1, 0, "1 failed, 2 passed"),
    "tally/node-spec.log": ("node", *TWO_ONE_ONE),
    "tally/node-tap.log": ("node", *TWO_ONE_ONE),
    "tally/tape.log": ("tap", 2, 1, 0, "1 failed, 2 passed"),  # tape counts no skip
    "tally/tape-passing.log": ("tap", 2, 0, 0, "2 passed"),
    "tally/tap.log": ("tap", *TWO_ONE_ONE),
    "tally/tap-passing.log": ("tap", 2, 0, 0, "2 passed"),
    "tally/ava.log": ("ava", *TWO_ONE_ONE),  # ava says no passed count beside a failure: its ✔ lines
    "tally/ava-passing.log": ("ava", 2, 0, 0, "2 passed"),
    "tally/ava-one.log": ("ava", 1, 0, 0, "1 passed"),
    "tally/ava-tap.log": ("tap", *TWO_ONE_ONE),
    "tally/uvu.log": ("uvu", *TWO_ONE_ONE),  # coloured
    "tally/go.log": ("go", 1, 2, 0, "2 failed, 1 package ok"),  # without -v go names no passing test
    "tally/go-verbose.log": ("go", 3, 2, 1, "2 failed, 3 passed, 1 skipped"),
    "tally/go-json.log": ("go", 3, 2, 1, "2 failed, 3 passed, 1 skipped"),
    "tally/cargo.log": ("cargo", 4, 1, 1, "1 failed, 4 passed, 1 skipped"),  # lib + tests/more.rs + doc tests
    "tally/cargo-q.log": ("cargo", 4, 1, 1, "1 failed, 4 passed, 1 skipped"),
    "tally/cargo-stops.log": ("cargo", 3, 1, 1, "1 failed, 3 passed, 1 skipped"),  # no doc tests after a failure
    "failures/jest.log": ("jest", 1, 3, 0, "3 failed, 1 passed"),
    "failures/vitest.log": ("vitest", 1, 3, 0, "3 failed, 1 passed"),
    "failures/mocha.log": ("mocha", 1, 3, 0, "3 failed, 1 passed"),
    "failures/node-spec.log": ("node", 2, 2, 0, "2 failed, 2 passed"),
    "failures/node-tap.log": ("node", 2, 2, 0, "2 failed, 2 passed"),
    "failures/go.log": ("go", 0, 2, 0, "2 failed"),
    "failures/go-verbose.log": ("go", 1, 2, 0, "2 failed, 1 passed"),
    "failures/cargo.log": ("cargo", 1, 2, 0, "2 failed, 1 passed"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_runners_real_output_is_counted(name: str) -> None:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# captured on ")  # how it was made, said in the file
    assert failures.tally(text) == Tally(*EXPECTED[name])


def test_a_hidden_gate_keeps_the_line_of_every_runner(tmp_path: Path) -> None:
    log = tmp_path / "hidden.log"
    for name, expected in EXPECTED.items():
        log.write_bytes((FIXTURES / name).read_bytes())
        assert hidden.summary(log) == expected[-1], name
    log.write_text("AssertionError: SECRET != 42\n")
    assert hidden.summary(log) is None  # no counts: nothing of the output is kept


def test_the_last_summary_counts_and_output_without_one_counts_nothing() -> None:
    inner = (FIXTURES / "tally" / "mocha.log").read_text()
    outer = (FIXTURES / "tally" / "unittest-ok.log").read_text()
    assert failures.tally(inner + outer) == Tally("unittest", 1, 0, 0, "1 passed")
    assert failures.tally(outer + inner).runner == "mocha"  # type: ignore[union-attr]
    for text in ("", "Compiling calc v0.1.0\nerror[E0425]: cannot find value `x`\n", "make: *** [test] Error 2\n",
                 "  Total:     3\n  Passed:    2\n"):  # uvu's, cut off
        assert failures.tally(text) is None, text


def test_a_count_is_never_a_long_number() -> None:
    # The attempt's code prints these lines; a hidden gate's counts go back
    # to the next attempt, so a count must not spell a file out.
    assert failures.tally("12345678901234567890 passed\n") is None
    assert failures.tally("3 passed, 1.5 failed in 0.1s\n") == Tally("pytest", 3, 0, 0, "3 passed")


@pytest.mark.parametrize("text", [
    "Tests  1" + " " * 200_000 + "x", "Tests:" + " " * 200_000 + "x", "      Tests  1 failed |" + " a" * 100_000,
    "Ran 1 test in 0.1s\n\nFAILED (" + "a" * 200_000 + ")", "# { total: 1, " + "a" * 200_000 + " }",
    "1 " * 100_000, "\n" * 200_000,
])
def test_a_long_line_is_read_in_linear_time(text: str) -> None:
    # The attempt's code writes what is read: a pattern that backtracks
    # over a line would hold the judge for hours.
    started = time.monotonic()
    failures.tally(text)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("argv", "runner"), [
    (["python", "-m", "pytest", "-q", "tests"], "pytest"),
    ([".venv/bin/python", "-X", "dev", "-m", "pytest"], "pytest"),
    (["pytest"], "pytest"),
    (["uv", "run", "pytest"], "pytest"),
    (["coverage", "run", "-m", "pytest"], "pytest"),
    (["python3", "-m", "unittest", "discover"], "unittest"),
    (["npx", "jest"], "jest"),
    (["./node_modules/.bin/jest", "--ci"], "jest"),
    (["npx", "vitest", "run"], "vitest"),
    (["pnpm", "exec", "vitest", "run"], "vitest"),
    (["mocha", "test"], "mocha"),
    (["node", "--test"], "node"),
    (["node", "--test", "--test-reporter=tap"], "node"),
    (["node", "--test", "--test-reporter=dot"], None),  # prints no counts
    (["tap"], "tap"),
    (["tape", "test/*.js"], "tap"),
    (["npx", "ava"], "ava"),
    (["uvu", "tests"], "uvu"),
    (["go", "test", "./..."], "go"),
    (["go", "vet", "./..."], None),
    (["cargo", "test"], "cargo"),
    (["npm", "test"], None),  # whatever the package's test script says
    (["yarn", "test"], None),
    (["make", "test"], None),
    (["sh", "-c", "pytest"], None),
    (["python", "tests/run.py"], None),
])
def test_which_runner_a_gates_run_starts(argv: list[str], runner: str | None) -> None:
    assert failures.runner_of(argv) == runner


NODE_TESTS = """\
const test = require('node:test');
const assert = require('node:assert');
test('adds', () => { assert.strictEqual(1 + 1, 2); });
test('subtracts', () => { assert.strictEqual(3 - 1, 2); });
test('multiplies', () => { assert.strictEqual(2 * 3, 6); });
"""


@pytest.mark.slow  # a whole spawn, run and check
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_a_hidden_gate_on_nodes_test_runner_is_counted(tmp_path: Path) -> None:
    from conftest import GP, make_repo

    secret = tmp_path / "hidden"
    (secret / "spec").mkdir(parents=True)
    (secret / "spec" / "hidden.test.js").write_text(NODE_TESTS)
    repo = make_repo(tmp_path / "repo", {"spec/a.test.js": NODE_TESTS.replace("2 * 3, 6", "1, 1")},
                     config=f"gates:\n  - name: hidden\n    run: [node, --test, spec/]\n    hidden: {secret}\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo change > notes.txt")
    [gate] = gp.json("check", "t")["instances"][0]["gates"]
    assert gate["passed"] and gate["hidden"] == {"files": 1, "summary": "6 passed"}, gate
