"""A gate's outcome, decided once.

Whether a gate passed is decided here and nowhere else, by one pure
function (``decide``) from what was seen of its run (``Ran``): how the
command ended, what its test process streamed as each test ended
(``judge/stream``), the runner's printed summary, the JUnit report of a
gate with ``expect:``, a hidden run's canary and counts.

The sources are held against each other because the attempt's own code
runs inside the test process, after the runner started, and can change
what is seen last: the exit status (``os._exit(0)``, node's
``process.exitCode = 0`` in an exit handler), the report file (rewritten by
an ``atexit`` hook).  It cannot take back what the runner printed, nor a
line already streamed.  So a failure printed or streamed fails the gate
whatever its exit status, and when the sources disagree in the attempt's
favour the gate fails as forged (``PARALLEL_RESULTS_FORGED``).

The rules, in order (docs/judging.md, "What decides a gate"):

1. the command did not end by itself (could not start, timed out, changed
   what no command may): fail, with that reason;
2. the stream holds a line its plugin never writes (a line after its
   session's end): forged; a pytest session streamed but never finished:
   fail, forged if the status was 0 (the process was ended from inside);
   a session that ended with status 0 but never said what it collected,
   collected nothing, or streamed fewer results than it collected: forged;
   a test skipped (or marked an expected failure) by no marker, or a
   pytest plugin registered once the session started, from a file of the
   checkout that is not a test's: forged;
3. a test streamed as failed (or as an error), the canary aside (with
   ``expect:``, a listed test): fail; forged if the status was 0 or the
   report says every expected test passed;
4. a hidden run's canary streamed as anything but failed, or not at all:
   forged;
5. the printed summary counts failures (without ``expect:``, whose other
   tests may fail): fail; forged if the status was 0;
6. the printed summary and the stream disagree on what passed or failed
   (same runner, pytest): forged;
7. a session's own status is not 0 while the process ended with 0
   (without ``expect:``): forged;
8. with ``expect:``, its report decides the rest: every listed test passed;
9. without, a non-zero exit status: fail (a hidden run whose only failure
   is its canary ends with pytest's 1);
10. a hidden run that counted no test, unless ``require_count: false``: fail.
"""

from __future__ import annotations

from dataclasses import dataclass

from gitflow_parallel import errors as E
from gitflow_parallel import expect
from gitflow_parallel.failures import Tally
from gitflow_parallel.judge.stream import Streamed
from gitflow_parallel.shapes.pack import ExpectResult

FORGED = E.RESULTS_FORGED
SHOWN = 3  # failing test ids named in an error


# A runner's printed summary, the last one in the log (``failures.tally``).
Printed = Tally


@dataclass(frozen=True)
class Ran:
    """What was seen of one gate's run."""

    exit_code: int | None
    error: str | None = None  # execute's: the command did not end by itself
    error_code: str | None = None
    streamed: Streamed | None = None
    printed: Printed | None = None
    expect: ExpectResult | None = None
    hidden: bool = False
    counted: bool = False  # a hidden run's tests were counted (stream, summary or report)
    require_count: bool = True
    canary: str | None = None  # a hidden run's canary test, by its function name
    listed: tuple[str, ...] = ()  # the tests ``expect:`` names: only theirs count (as in SWE-bench)


@dataclass(frozen=True)
class Outcome:
    passed: bool
    code: str | None = None
    error: str | None = None


def _fail(error: str | None, code: str | None = None) -> Outcome:
    return Outcome(False, code, error)


# A failure its exit status already tells (the sources agree) carries no
# error: ``show`` names the failing tests from the log.
PLAIN: None = None


def _forged(error: str) -> Outcome:
    return Outcome(False, FORGED, f"{FORGED}: {error}")


def _named(tests: list[str]) -> str:
    more = f" and {len(tests) - SHOWN} more" if len(tests) > SHOWN else ""
    return ", ".join(tests[:SHOWN]) + more


def is_canary(test_id: str, canary: str | None) -> bool:
    return canary is not None and test_id.rpartition("::")[2] == canary


def decide(ran: Ran) -> Outcome:
    """The gate's outcome (the module doc's rules, in order)."""
    if ran.error is not None:
        return _fail(ran.error, ran.error_code)
    status = ran.exit_code
    streamed = ran.streamed if ran.streamed is not None and ran.streamed.any else None
    canary_failed = False
    if streamed is not None:
        verdict = _stream_rules(ran, streamed, status)
        if isinstance(verdict, Outcome):
            return verdict
        canary_failed = verdict
    if ran.printed is not None and ran.expect is None:
        printed = _printed_rules(ran.printed, streamed, status, canary_failed)
        if printed is not None:
            return printed
    if ran.expect is not None:
        if not ran.expect["passed"]:
            return _fail(ran.expect["error"] or "the test report does not show every expected test passed")
    elif status != 0 and not (canary_failed and status == 1):
        return _fail(PLAIN)
    if ran.hidden and not ran.counted and ran.require_count:
        return _fail("the hidden tests reported no count of tests run (no runner summary line such as "
                     "`3 passed`): set expect: on the gate, or require_count: false")
    return Outcome(True)


def _stream_rules(ran: Ran, streamed: Streamed, status: int | None) -> Outcome | bool:
    """Rules 2–4 and 7: an ``Outcome`` when the stream decides, else
    whether the hidden run's canary failed as it must."""
    if streamed.cut:
        return _fail("its test process streamed more results than are read (16 MB)")
    if streamed.malformed:
        return _forged(f"its results stream holds {streamed.malformed} line(s) its plugin never writes "
                       "(a line of a session after that session's end, or not one of its events)")
    unfinished = [s for s in streamed.sessions if not s.ended]
    if unfinished:
        why = "the test process ended before its pytest session finished"
        return _forged(f"{why}, yet it exited with status 0") if status == 0 else _fail(PLAIN)
    short = _unreported(streamed)
    if short is not None:
        return _forged(short)
    raised = _raised_in_product(ran, streamed)
    if raised is not None:
        return _forged(raised)
    tests = streamed.tests()
    failed = [t for t, c in tests.items() if c in ("failed", "error") and not is_canary(t, ran.canary)]
    if ran.expect is not None:  # only the listed tests count, and the exit status not at all
        outcomes = {t: "failed" if c in ("failed", "error") else c for t, c in tests.items()}
        failed = [t for t in ran.listed if expect.outcome_of(t, outcomes) == "failed"]
    expect_passed = ran.expect is not None and ran.expect["passed"]
    if failed:
        # A hidden test's name is never said: it would tell the agents.
        said = f"{len(failed)} test(s) failed as they ran" + ("" if ran.hidden else f" ({_named(failed)})")
        if status == 0 or expect_passed:
            whose = "the exit status was 0" if status == 0 else "the test report says they passed"
            return _forged(f"{said}, but {whose}")
        return _fail(PLAIN)
    canary = [c for t, c in tests.items() if is_canary(t, ran.canary)]
    if ran.canary is not None:
        if not canary:
            return _forged("the hidden run's canary, a test that must fail, was never run")
        if canary[0] not in ("failed", "error"):
            return _forged(f"the hidden run's canary, a test that must fail, was reported {canary[0]}")
    bad = [s.status for s in streamed.sessions if s.status not in (0, None, 5)]
    if status == 0 and bad and ran.expect is None:
        return _forged(f"the pytest session ended with status {bad[0]}, the process with 0")
    return bool(canary) and canary[0] in ("failed", "error")


def _unreported(streamed: Streamed) -> str | None:
    """A session that ended with status 0 yet never said what it collected,
    collected nothing, or streamed a result for fewer tests than it
    collected: its end was not pytest's."""
    for session in streamed.sessions:
        if session.status != 0:
            continue
        reported = sum(1 for t in session.tests if "::" in t)
        if session.collected is None:
            return "a pytest session ended with status 0 without saying what it collected"
        if session.collected == 0:
            return "a pytest session collected no test, yet ended with status 0 (pytest's is 5)"
        if reported < session.collected:
            return (f"a pytest session collected {session.collected} tests and streamed results for {reported}, "
                    "yet ended with status 0")
    return None


# Where a skip may be raised without a marker: the tests and their helpers.
_TEST_FOLDERS = {"test", "tests", "testing", "__tests__"}


def _is_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or bool(_TEST_FOLDERS & set(path.split("/")[:-1])))


def _raised_in_product(ran: Ran, streamed: Streamed) -> str | None:
    """A test skipped or marked an expected failure, with no marker saying
    so, from a file of the checkout that is not a test's: the product's
    own code turned a failure into a skip."""
    for session in streamed.sessions:
        for where in session.plugins:
            if not where.startswith("/") and not _is_test_file(where):
                return f"a pytest plugin was registered, once the session started, from the product's own code ({where})"
        for test, where in session.raised_in.items():
            if not where.startswith("/") and not _is_test_file(where):
                shown = "a hidden test" if ran.hidden else test
                return f"{shown} was skipped, by no marker, from the product's own code ({where})"
    return None


def _printed_rules(printed: Printed, streamed: Streamed | None, status: int | None,
                   canary_failed: bool) -> Outcome | None:
    """Rules 5 and 6."""
    failed = printed.failed - (1 if canary_failed else 0)
    if failed > 0:
        said = f"its runner printed `{printed.line}`"
        return _forged(f"{said}, but the exit status was 0") if status == 0 else _fail(PLAIN)
    if streamed is not None and printed.runner == "pytest":
        last = streamed.sessions[-1]  # the summary printed last is the last session's
        passed, flunked = last.count("passed", "xpassed"), last.count("failed", "error")
        if (passed, flunked) != (printed.passed, printed.failed):
            return _forged(f"its runner printed `{printed.line}`, but its tests streamed {passed} passed, "
                           f"{flunked} failed")
    return None
