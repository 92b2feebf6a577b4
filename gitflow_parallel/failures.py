"""Which tests failed, by name, read from a test runner's output as a gate's
log holds it.

``show`` and the report name the failing tests of a failed gate, not its
last lines (a jest failure ends with its coverage table or "Ran all test
suites.").  Each runner says it its own way; every form here was read off
a real run (``tests/fixtures/failures/`` keeps those runs' output):

* pytest's short summary, ``FAILED tests/test_a.py::test_b - assert …``
  (and ``ERROR``), unittest's ``FAIL: test_b (test_a.T)``;
* ``go test``: ``--- FAIL: TestB`` and, indented, its failing subtests;
* ``cargo test``: ``test tests::b ... FAILED`` (``-q``: ``tests::b --- FAILED``);
* jest: the ``● describe › test`` heading of each failure;
* vitest: ``FAIL  file > describe > test`` (and ``FAIL  file [ file ]``
  for a file that could not run);
* mocha: the numbered titles after ``N failing``;
* node's test runner: TAP's ``not ok N - name`` (a suite failing only
  because a test in it failed is left out) and the spec reporter's list
  after ``✖ failing tests:``.

How many passed, failed and were skipped, read from the same output
(``tally``): the last complete summary a runner printed, so a test that
runs pytest inside pytest is counted by the outer run.  ``tests/fixtures/
tally/`` keeps the real runs each form was read off:

* pytest ``1 failed, 4 passed, 2 skipped in 0.12s`` (with ``error``,
  ``xfailed``, ``xpassed``, ``deselected``, or ``no tests ran``);
  unittest ``Ran 5 tests`` then ``OK`` or ``FAILED (failures=1, errors=2)``;
* jest ``Tests:       1 failed, 4 passed, 5 total``; vitest ``Tests  1
  failed | 4 passed (5)``; mocha ``4 passing (5ms)``, ``1 pending``,
  ``1 failing``; node's test runner ``ℹ pass 4`` (spec) or ``# pass 4``
  (TAP, as tape, ``ava --tap`` and ``mocha --reporter tap`` print it too);
  tap ``# { total: 5, pass: 4, fail: 1 }``; ava ``1 test failed`` (it
  gives the passed count only when none failed: then its ``✔`` lines are
  counted); uvu ``Total:``, ``Passed:``, ``Skipped:``;
* ``go test``: per package, its ``--- PASS/FAIL/SKIP:`` lines (``-v``:
  top-level tests, a subtest fails its parent) or, without ``-v``, which
  names no passing test, each ``ok`` package as one; ``go test -json``: the
  pass, fail and skip events of top-level tests; a package that failed
  with no failing test (it did not build) counts as one failure;
* cargo: ``test result: ok. 3 passed; 0 failed; 1 ignored`` once per test
  binary, summed.

``failed`` holds errors too.  Each count read is of at most six digits:
the attempt's code prints these lines, and the counts of a hidden gate go
back to the next attempt, so no count may be a long number spelling the
hidden tests out (``judge/hidden``).

Colour codes are taken out first: runners colour their output even into a
file.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

MAX_NAMES = 200  # past this a log's failures are not all worth listing

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LINE_FORMS = (
    re.compile(r"^(?:FAILED|ERROR) (\S+)"),              # pytest
    re.compile(r"^(?:FAIL|ERROR): (.+)$"),               # unittest
    re.compile(r"^\s*--- FAIL: (\S+)"),                  # go test
    re.compile(r"^test (\S+) \.\.\. FAILED$"),           # cargo test
    re.compile(r"^(\S+) --- FAILED$"),                  # cargo test -q
    re.compile(r"^\s*● (?!Console$)(.+)$"),              # jest
    re.compile(r"^\s*FAIL\s+(\S+ > .+)$"),               # vitest
    re.compile(r"^\s*FAIL\s+(\S+) \[ \S+ \]$"),          # vitest: a file that did not run
)
_MOCHA_START = re.compile(r"^\s*\d+ failing$")
_MOCHA_TITLE = re.compile(r"^\s+\d+\) (.+)$")
_TAP_NOT_OK = re.compile(r"^(\s*)not ok \d+ - (.+?)(?: # .*)?$")
_SPEC_LIST = "✖ failing tests:"
_SPEC_FAILED = re.compile(r"^✖ (.+?) \([\d.]+m?s\)$")
# A runner's closing count, the line worth showing above the names.
_SUMMARY = re.compile(r"\b\d+ (?:passed|failed|failing|passing)\b|^Tests:|^\s*Tests\s+\d|^test result:"
                      r"|^# (?:pass|fail) \d+|^ℹ fail \d+|^(?:ok|FAIL)\s+\S+\s+[\d.]+s$")


def clean(text: str) -> list[str]:
    """The log's lines without colour codes or trailing blanks."""
    return [_ANSI.sub("", line).rstrip() for line in text.splitlines()]


def failing_tests(text: str) -> list[str]:
    """The failing tests ``text`` (a gate's log) names, first seen first."""
    lines = clean(text)
    found = list(dict.fromkeys(_by_line(lines) + _mocha(lines) + _tap(lines) + _node_spec(lines)))
    # go's TestT fails because TestT/case did: the case says which.
    return [n for n in found if not any(o.startswith(f"{n}/") for o in found)][:MAX_NAMES]


def summary_line(text: str) -> str | None:
    """The last line that counts tests, else the last line."""
    lines = [line for line in clean(text) if line.strip()]
    counted = [line for line in lines if _SUMMARY.search(line)]
    shown = counted or lines
    return shown[-1] if shown else None


def _by_line(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        for form in _LINE_FORMS:
            match = form.match(line)
            if match:
                out.append(match.group(1).strip())
                break
    return out


def _mocha(lines: list[str]) -> list[str]:
    """mocha's failure details: ``  2) suite`` then the nested titles, one
    per line, the test's own ending with ``:``."""
    try:
        start = next(i for i, line in enumerate(lines) if _MOCHA_START.match(line))
    except StopIteration:
        return []
    out, i = [], start + 1
    while i < len(lines):
        match = _MOCHA_TITLE.match(lines[i])
        i += 1
        if not match:
            continue
        parts = [match.group(1).strip()]
        while not parts[-1].endswith(":") and i < len(lines) and lines[i].strip():
            parts.append(lines[i].strip())
            i += 1
        if parts[-1].endswith(":"):
            out.append(" ".join(parts)[:-1])
    return out


def _tap(lines: list[str]) -> list[str]:
    """TAP ``not ok`` lines, less the suites that failed only through a
    test (their YAML block says ``subtestsFailed``)."""
    out = []
    for i, line in enumerate(lines):
        match = _TAP_NOT_OK.match(line)
        if not match:
            continue
        block = []
        for after in lines[i + 1:]:
            if after.strip() == "...":
                break
            block.append(after)
        if not any("failureType: 'subtestsFailed'" in b for b in block):
            out.append(match.group(2))
    return out


def _node_spec(lines: list[str]) -> list[str]:
    if _SPEC_LIST not in lines:
        return []
    after = lines[lines.index(_SPEC_LIST) + 1:]
    return [m.group(1) for m in map(_SPEC_FAILED.match, after) if m]


# -- counts ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Tally:
    """A runner's closing counts; ``failed`` holds failures and errors (and
    the tests a runner cancelled), ``skipped`` the skipped, todo and expected
    failures, and ``line`` says them (``1 failed, 4 passed``).  Without
    ``-v``, go's ``passed`` counts each package that passed as one."""
    runner: str
    passed: int
    failed: int
    skipped: int
    line: str


_N = r"(?<![\d.])(\d{1,6})(?![\d.]\d)"  # a count: six digits at most, not part of a longer number
_PYTEST = re.compile(_N + r" (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_PYTEST_NONE = re.compile(r"\bno tests ran\b")
_UNITTEST_RAN = re.compile(r"^Ran " + _N + r" tests? in [\d.]+s$")
_UNITTEST_END = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \((.+)\))?$")
_JEST = re.compile(r"^Tests:\s+(\d.*), " + _N + " total$")
_JEST_SUITES = re.compile(r"^Test Suites:.*?" + _N + " failed")
_VITEST = re.compile(r"\s*Tests\s+(?=\d|no tests$)")
_VITEST_FILES = re.compile(r"^\s*Test Files\s+" + _N + " failed")
_KIND = re.compile(_N + r" ([a-z][a-z ]*)$")
_MOCHA_PASSING = re.compile(r"^\s+" + _N + r" passing \(\S+\)$")
_MOCHA_MORE = re.compile(r"^\s+" + _N + " (pending|failing)$")
_NODE_SPEC = re.compile(r"^ℹ (?P<word>tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) (?P<n>\d{1,6})(?:\.\d+)?$")
_TAP = re.compile(r"^# (?P<word>tests|suites|pass|fail|cancelled|skipped|skip|todo|duration_ms)\s+(?P<n>\d{1,6})(?:\.\d+)?$")
_TAP21 = re.compile(r"^# \{ (total: \d.*) \}$")
_AVA = re.compile(r"^\s*(?P<n>\d{1,6}) (?P<word>tests? passed|tests? failed|hooks? failed|known failures?|tests? skipped"
                  r"|tests? todo|unhandled rejections?|uncaught exceptions?|tests? remained pending after a timeout)$")
_AVA_PASSED = re.compile(r"^\s+✔ ")
_UVU = (re.compile(r"^\s+Total:\s+" + _N + "$"), re.compile(r"^\s+Passed:\s+" + _N + "$"),
        re.compile(r"^\s+Skipped:\s+" + _N + "$"))
_GO_TEST = re.compile(r"^--- (PASS|FAIL|SKIP): \S+")  # top level only: a subtest's line is indented
_GO_PACKAGE = re.compile(r"^(ok|FAIL)\s+\S+\s+(?:[\d.]+s\b|\(cached\)|\[(?:build|setup) failed\])")
_CARGO = re.compile(r"^test result: (?:ok|FAILED)\. " + _N + " passed; " + _N + " failed; " + _N + " ignored;")

Found = Iterator[tuple[int, Tally]]  # each summary a reader finds, with the index of its last line


def _counted(runner: str, passed: int, failed: int, skipped: int) -> Tally:
    """A tally with its line in one form for every runner."""
    parts = [f"{n} {word}" for n, word in ((failed, "failed"), (passed, "passed"), (skipped, "skipped")) if n]
    return Tally(runner, passed, failed, skipped, ", ".join(parts) or "no tests ran")


def tally(text: str) -> Tally | None:
    """The counts of the last complete runner summary in ``text`` (a gate's
    output), else None."""
    lines = clean(text)
    # Where two readers end on one line (jest's ``Tests:`` line also reads
    # as pytest's counts), the first reader listed wins.
    found = [(end, -rank, counts) for rank, read in enumerate(_READERS) for end, counts in read(lines)]
    return max(found, key=lambda f: f[:2])[2] if found else None


def _read_pytest(lines: list[str]) -> Found:
    """pytest's closing line, kept as pytest says it (each kind once)."""
    for i, line in enumerate(lines):
        said: dict[str, tuple[int, str]] = {}
        for m in _PYTEST.finditer(line):
            kind = "error" if m.group(2).startswith("error") else m.group(2)
            said.setdefault(kind, (int(m.group(1)), m.group(0)))
        if said:
            n = {kind: said.get(kind, (0, ""))[0] for kind in ("passed", "xpassed", "failed", "error", "skipped",
                                                                "xfailed")}
            yield i, Tally("pytest", n["passed"] + n["xpassed"], n["failed"] + n["error"], n["skipped"] + n["xfailed"],
                           ", ".join(words for _, words in said.values()))
        elif _PYTEST_NONE.search(line):
            yield i, Tally("pytest", 0, 0, 0, "no tests ran")


def _read_unittest(lines: list[str]) -> Found:
    """``Ran N tests in S`` then, past a blank line, ``OK`` or ``FAILED (…)``."""
    for i, line in enumerate(lines):
        ran = _UNITTEST_RAN.match(line)
        end = next((j for j in range(i + 1, min(i + 3, len(lines))) if lines[j]), None) if ran else None
        verdict = _UNITTEST_END.match(lines[end]) if ran and end is not None else None
        if ran and end is not None and verdict:
            n = _pairs((verdict.group(2) or "").split(", "), "=")
            failed = n["failures"] + n["errors"] + n["unexpected successes"]
            skipped = n["skipped"] + n["expected failures"]
            yield end, _counted("unittest", max(int(ran.group(1)) - failed - skipped, 0), failed, skipped)


def _kinds(parts: list[str]) -> Counter[str]:
    """``["1 failed", "4 passed"]`` as counts by word."""
    out: Counter[str] = Counter()
    for part in parts:
        m = _KIND.match(part.strip())
        if m:
            out[m.group(2)] += int(m.group(1))
    return out


def _pairs(parts: list[str], sign: str) -> Counter[str]:
    """``["failures=1", "errors=2"]`` as counts by name."""
    split = (part.partition(sign) for part in parts)
    return Counter({k.strip(): int(v) for k, _, v in split if v.isdigit() and len(v) <= 6})


def _suites_failed(lines: list[str], i: int, form: re.Pattern[str]) -> int:
    """Test files that failed before a test ran, said on the line above."""
    m = form.match(lines[i - 1]) if i else None
    return int(m.group(1)) if m else 0


def _read_jest(lines: list[str]) -> Found:
    for i, line in enumerate(lines):
        m = _JEST.match(line)
        if m:
            n = _kinds(m.group(1).split(", "))
            failed = n["failed"] or _suites_failed(lines, i, _JEST_SUITES)
            yield i, _counted("jest", n["passed"], failed, n["skipped"] + n["todo"])


def _read_vitest(lines: list[str]) -> Found:
    for i, line in enumerate(lines):
        m = _VITEST.match(line)
        if not m:
            continue
        said = line[m.end():]  # ``1 failed | 4 passed (5)``, ``no tests``
        n = _kinds(said.rsplit(" (", 1)[0].split("|"))
        if n or said == "no tests":
            failed = n["failed"] or _suites_failed(lines, i, _VITEST_FILES)
            yield i, _counted("vitest", n["passed"], failed, n["skipped"] + n["todo"])


def _read_mocha(lines: list[str]) -> Found:
    """``N passing (T)``, then ``N pending`` and ``N failing`` if any."""
    for i, line in enumerate(lines):
        m = _MOCHA_PASSING.match(line)
        if not m:
            continue
        n, end = Counter({"passing": int(m.group(1))}), i
        while end + 1 < len(lines) and (more := _MOCHA_MORE.match(lines[end + 1])):
            n[more.group(2)] += int(more.group(1))
            end += 1
        yield end, _counted("mocha", n["passing"], n["failing"], n["pending"])


def _blocks(lines: list[str], form: re.Pattern[str]) -> Iterator[tuple[int, dict[str, int]]]:
    """Runs of consecutive lines of ``form`` (``word count``), by word."""
    block: dict[str, int] = {}
    for i, line in enumerate(lines + [""]):
        m = form.match(line)
        if m:
            block[m.group("word")] = int(m.group("n"))
        elif block:
            yield i - 1, block
            block = {}


def _read_node_spec(lines: list[str]) -> Found:
    for end, n in _blocks(lines, _NODE_SPEC):
        if "pass" in n and "fail" in n:
            yield end, _counted("node", n["pass"], n["fail"] + n.get("cancelled", 0), n.get("skipped", 0) + n.get("todo", 0))


def _read_tap(lines: list[str]) -> Found:
    """TAP's closing comments: node's reporter (with ``# suites`` and
    ``# cancelled``), tape, ``ava --tap``, ``mocha --reporter tap``."""
    for end, n in _blocks(lines, _TAP):
        if "pass" in n or "fail" in n:
            runner = "node" if "suites" in n or "cancelled" in n else "tap"
            yield end, _counted(runner, n.get("pass", 0), n.get("fail", 0) + n.get("cancelled", 0),
                               n.get("skipped", 0) + n.get("skip", 0) + n.get("todo", 0))


def _read_tap21(lines: list[str]) -> Found:
    """tap's own reporter: ``# { total: 4, pass: 2, fail: 1, skip: 1 }``."""
    for i, line in enumerate(lines):
        m = _TAP21.match(line)
        if m:
            n = _pairs(m.group(1).split(", "), ": ")
            yield i, _counted("tap", n["pass"], n["fail"], n["skip"] + n["todo"])


def _read_ava(lines: list[str]) -> Found:
    """ava's closing lines; with a failure it leaves the passed count out,
    so its ``✔`` lines since the last summary are counted instead."""
    start = 0
    for end, n in _blocks(lines, _AVA):
        word = Counter({kind.split()[-1] if kind.split()[0] in ("test", "tests", "hook", "hooks") else kind.split()[0]:
                        v for kind, v in n.items()})
        passed = word["passed"] or sum(1 for line in lines[start:end] if _AVA_PASSED.match(line))
        failed = word["failed"] + word["unhandled"] + word["uncaught"] + word["timeout"]
        yield end, _counted("ava", passed, failed, word["skipped"] + word["todo"] + word["known"])
        start = end + 1


def _read_uvu(lines: list[str]) -> Found:
    """``Total:``, ``Passed:``, ``Skipped:``: the total leaves skipped tests out."""
    for i in range(len(lines) - 2):
        found = [form.match(lines[i + k]) for k, form in enumerate(_UVU)] if _UVU[0].match(lines[i]) else []
        if found and all(found):
            total, passed, skipped = (int(m.group(1)) for m in found if m)
            yield i + 2, _counted("uvu", passed, max(total - passed, 0), skipped)


def _read_go(lines: list[str]) -> Found:
    """Per package: its top-level tests as ``-v`` names them, or the
    package as one when go names none; one failure for a package that
    failed with no failing test (a build failure, a crash)."""
    total: Counter[str] = Counter()
    named: Counter[str] = Counter()
    end = None
    for i, line in enumerate(lines):
        test, package = _GO_TEST.match(line), _GO_PACKAGE.match(line)
        if test:
            named[test.group(1)] += 1
        elif package:
            end, result = i, package.group(1)
            if result == "FAIL" and not named["FAIL"]:
                named["FAIL"] = 1
            elif result == "ok" and not named and "[no tests to run]" not in line:
                named["package"] = 1
            total, named = total + named, Counter()
    if end is not None:
        tests = _counted("go", total["PASS"], total["FAIL"], total["SKIP"])
        packages = total["package"]
        if packages:  # go names no passing test without -v: the line says what was counted
            ok = f"{packages} package{'s' * (packages > 1)} ok"
            tests = Tally("go", tests.passed + packages, tests.failed, tests.skipped,
                          ok if tests.line == "no tests ran" else f"{tests.line}, {ok}")
        yield end, tests


def _read_go_json(lines: list[str]) -> Found:
    """``go test -json``: the pass, fail and skip events of top-level tests,
    and a package's own fail when none of its tests failed."""
    total: Counter[str] = Counter()
    failing: set[str] = set()
    end = None
    for i, line in enumerate(lines):
        event = _event(line)
        action, package, test = event.get("Action"), str(event.get("Package")), event.get("Test")
        if action not in ("pass", "fail", "skip"):
            continue
        end = i
        if isinstance(test, str) and "/" not in test:
            total[action] += 1
            if action == "fail":
                failing.add(package)
        elif test is None and action == "fail" and package not in failing:
            total["fail"] += 1
    if end is not None:
        yield end, _counted("go", total["pass"], total["fail"], total["skip"])


def _event(line: str) -> dict[str, object]:
    if not line.startswith("{") or '"Action"' not in line:
        return {}
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    return event if isinstance(event, dict) else {}


def _read_cargo(lines: list[str]) -> Found:
    """One ``test result:`` per test binary (unit, integration, doc tests), summed."""
    sums, end = [0, 0, 0], None
    for i, line in enumerate(lines):
        m = _CARGO.match(line)
        if m:
            sums, end = [s + int(v) for s, v in zip(sums, m.groups())], i
    if end is not None:
        yield end, _counted("cargo", *sums)


# The more particular forms first: pytest's reads any line of counts.
_READERS: tuple[Callable[[list[str]], Found], ...] = (
    _read_cargo, _read_jest, _read_vitest, _read_go, _read_go_json, _read_unittest, _read_mocha, _read_node_spec,
    _read_tap, _read_tap21, _read_ava, _read_uvu, _read_pytest)


# -- which runner a gate runs ------------------------------------------------------------
RUNNERS = ("pytest", "unittest", "jest", "vitest", "mocha", "node --test", "tap", "tape", "ava", "uvu", "go test",
           "cargo test")  # as init --check names them
_COMMANDS = {"pytest": "pytest", "py.test": "pytest", "jest": "jest", "vitest": "vitest", "mocha": "mocha",
             "_mocha": "mocha", "tap": "tap", "tape": "tap", "ava": "ava", "uvu": "uvu"}
_MODULES = {"pytest": "pytest", "unittest": "unittest"}
# Commands that start the next word: (its verb, if it needs one) and whether the verb may be left out.
_LAUNCHERS = {"env": ((), True), "npx": ((), True), "bunx": ((), True), "pnpx": ((), True),
              "pnpm": (("exec", "dlx"), True), "yarn": (("exec", "dlx"), True), "npm": (("exec",), False),
              "uv": (("run",), False), "poetry": (("run",), False), "pipenv": (("run",), False),
              "pdm": (("run",), False), "hatch": (("run",), False)}
_PYTHON = re.compile(r"(?:python|pypy)[0-9.]*")
_NODE_REPORTERS = ("spec", "tap")  # the node reporters that print counts


def runner_of(argv: list[str]) -> str | None:
    """The test runner a gate's ``run`` starts, as ``tally`` names it, or
    None when it is none of them or cannot be told (``npm test``, ``make
    test`` and ``sh -c`` run whatever their script says)."""
    words = _launched(argv)
    if not words:
        return None
    name, rest = os.path.basename(words[0]), words[1:]
    if _PYTHON.fullmatch(name) or (name == "coverage" and rest[:1] == ["run"]):
        return _MODULES.get(_module(rest[name == "coverage":]) or "")
    if name == "node":
        return _node_runner(rest)
    if name in ("go", "cargo"):
        return name if rest[:1] == ["test"] else None
    return _COMMANDS.get(name)


def _launched(argv: list[str]) -> list[str]:
    """``argv`` without what only starts the command (``npx``, ``uv run``,
    ``env X=1``)."""
    words = list(argv)
    while words:
        if "=" in words[0] and not words[0].startswith("-"):  # X=1
            words = words[1:]
            continue
        verbs, optional = _LAUNCHERS.get(os.path.basename(words[0]), (None, False))
        if verbs is None:
            return words
        words = _options_dropped(words[1:])
        if words[:1] and words[0] in verbs:
            words = _options_dropped(words[1:])
        elif verbs and not optional:  # `npm test`, `uv sync`: no runner named
            return []
    return words


def _options_dropped(words: list[str]) -> list[str]:
    while words and words[0].startswith("-"):
        words = words[1:]
    return words


def _module(words: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE``, else None (a script, ``-c``)."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-m":
            return words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-m"):
            return word[2:]
        if word == "-c" or not word.startswith("-"):
            return None
        i += 2 if word in ("-X", "-W") else 1
    return None


def _node_runner(words: list[str]) -> str | None:
    """``node --test`` (with a reporter that prints counts), or node
    starting a runner's script (``node node_modules/.bin/mocha``)."""
    reporters = [w.split("=", 1)[1] for w in words if w.startswith("--test-reporter=")]
    reporters += [b for a, b in zip(words, words[1:]) if a == "--test-reporter"]
    if "--test" in words:
        return "node" if not reporters or set(reporters) & set(_NODE_REPORTERS) else None
    scripts = [w for w in words if not w.startswith("-")]
    return _COMMANDS.get(Path(scripts[0]).stem) if scripts else None
