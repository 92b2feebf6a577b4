"""Product code that reaches the test harness: the lines an attempt added to
its own code that act on the test process rather than the product.

The product's code runs inside the test process.  An ``atexit`` handler
runs after pytest wrote its JUnit report and can rewrite it; ``os._exit(0)``
sets the status whatever failed; in node ``process.on("exit", …)`` runs
after the runner set its status; code that imports the runner's internals,
or reads ``GIT_PARALLEL_*`` or the runner's report settings, knows it is
being judged.  Such code is rarely what a task needs, and when it is, a
person should say so: :func:`scan` names each line, the check records the
findings in the pack (``reaches_harness``), and they keep the attempt out
of an automatic pick (``PARALLEL_REACHES_HARNESS``), as a protected change
does.

The scan is a tripwire, not a proof: it reads added lines one by one, and
code that spells a name in pieces passes it.  Tests are the harness's own
and may use it: test files by name are left out here, and the caller leaves
out the protected paths (the test folders the gates name).  So is prose
(``README.md``), which runs nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gitflow_parallel.shapes.pack import ReachFinding

TEXT_SHOWN = 120

# JavaScript runners and their parts, as a module name is written.
_JS_RUNNERS = (r"(?:mocha|jest(?:-[\w-]+)?|@jest/[\w./-]+|vitest(?:/[\w./-]+)?|@vitest/[\w./-]+|node:test"
               r"|uvu(?:/[\w.-]+)?|ava|tap|tape)")
_JS_MODULE = rf"""['"`]{_JS_RUNNERS}['"`]"""
# (rule, pattern): the first rule a line matches names it.
RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((rule, re.compile(pattern)) for rule, pattern in (
    ("exit handler", r"atexit|\bsys\.exitfunc\b"
                     r"|\bprocess\s*\.\s*(?:on|once|addListener|prependListener|prependOnceListener)\s*\(\s*"
                     r"""['"`](?:exit|beforeExit)['"`]"""),
    ("exit status", r"(?<!self)(?<!cls)\._exit\b|\bimport\b.*\b_exit\b|\bos\.kill\s*\(\s*os\.getpid\b"
                    r"|\bprocess\s*\.\s*exitCode\s*=(?!=)|\bprocess\s*\.\s*reallyExit\b"
                    r"|\bprocess\s*\.\s*kill\s*\(\s*process\s*\.\s*pid\b"),
    ("runner internals", r"^\s*(?:import|from)\s+(?:_pytest|pytest|pluggy)\b|\b_pytest\b|\bpluggy\b"
                         r"|\bunittest\.result\b|\bTestResult\b|\bsys\.modules\b.*\bpytest\b"
                         r"|\bimport_module\s*\(\s*['\"]_?pytest\b"
                         rf"|\brequire\s*\(\s*{_JS_MODULE}\s*\)|\bfrom\s+{_JS_MODULE}|\bimport\s+{_JS_MODULE}"
                         rf"|\bimport\s*\(\s*{_JS_MODULE}\s*\)"),
    ("git-parallel variable", r"GIT_PARALLEL_"),
    ("runner report", r"(?i:junit[-_]?xml)|\bPYTEST_\w*|JEST_JUNIT"),
))

# Test files by name: pytest's and unittest's, go's, and the JavaScript
# runners' ``*.test.js``/``*.spec.ts`` (and their jsx, tsx, mjs, cjs, mts,
# cts kin) and every file under ``__tests__/`` (jest's), and pytest's
# ``conftest.py``.
_TEST_FILE = re.compile(r"(?:.*/)?(?:test_[^/]*\.py|[^/]*_test\.(?:py|go)|conftest\.py"
                        r"|[^/]*\.(?:test|spec)\.[cm]?[jt]sx?|__tests__/.*)")
_PROSE = (".md", ".markdown", ".rst", ".txt", ".adoc", ".rdoc")


def is_test_file(path: str) -> bool:
    """Is ``path`` a test file by its name?"""
    return _TEST_FILE.fullmatch(path) is not None


def scan(added: Mapping[str, Iterable[tuple[int, str]]]) -> list[ReachFinding]:
    """The findings in ``added``: the lines each path gained, as (line
    number, text); test files and prose are not read."""
    found: list[ReachFinding] = []
    for path in sorted(added):
        if is_test_file(path) or path.lower().endswith(_PROSE):
            continue
        for number, text in added[path]:
            for rule, pattern in RULES:
                match = pattern.search(text)
                if match:
                    found.append({"path": path, "line": number, "rule": rule, "text": _shown(text, match.start())})
                    break
    return found


def _shown(text: str, at: int) -> str:
    """The line cut to about :data:`TEXT_SHOWN` characters around what matched."""
    line = text.strip()
    at = max(0, at - (len(text) - len(text.lstrip())))
    if len(line) <= TEXT_SHOWN:
        return line
    start = 0 if at < TEXT_SHOWN - 20 else at - 40
    return ("…" if start else "") + line[start:start + TEXT_SHOWN - (1 if start else 0)]


def summary(findings: Iterable[ReachFinding]) -> list[str]:
    """One line per finding: ``path:line (rule): text``."""
    return [f"{f['path']}:{f['line']} ({f['rule']}): {f['text']}" for f in findings]
