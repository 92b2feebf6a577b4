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

Colour codes are taken out first: runners colour their output even into a
file.
"""

from __future__ import annotations

import re

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
