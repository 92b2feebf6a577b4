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

The same holds for what hides a failure without touching the status: a
skip or an xfail raised from product code, an assertion library neutered
(node's ``assert``, ``Object.is``, jest's global ``expect``), code the
loader runs before the harness's ``main`` (Rust's ``.init_array``), a
runner module imported by a name built in pieces.

The scan is a tripwire, not a proof: it reads added lines one by one, and
code that spells a name in pieces passes it.  The caller leaves out the
protected paths (the test folders the gates name, the harness files): their
lines are the base's when judged.  A file named like a test outside them is
read (product code named ``calc/test_support.py`` runs in the test process
like any other), but may use the runner's API as a test does (``import
pytest``, ``pytest.skip``, ``require('vitest')``).  Prose (``README.md``)
runs nothing and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from gitflow_parallel.shapes.pack import ReachFinding

TEXT_SHOWN = 120

# JavaScript runners and their parts, as a module name is written.
_JS_RUNNERS = (r"(?:mocha|jest(?:-[\w-]+)?|@jest/[\w./-]+|vitest(?:/[\w./-]+)?|@vitest/[\w./-]+|node:test"
               r"|uvu(?:/[\w.-]+)?|ava|tap|tape)")
_JS_MODULE = rf"""['"`]{_JS_RUNNERS}['"`]"""
_PY = (".py", ".pyw", ".pyi")
_JS = (".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx")
_RS_C = (".rs", ".c", ".h", ".cc", ".cpp")
_ANY: tuple[str, ...] = ()
# An assignment, not a comparison.
_SET = r"\s*=(?![=>])"
# A member, written ``.name`` or ``[key]``.
_MEMBER = r"(?:\s*\.\s*\w+|\s*\[[^\]]*\])"
# (rule, pattern, the file suffixes it reads (none: every file), whether a
# test file by name may say it: the runner's API a test uses), in order:
# the first rule a line matches names it.
_RULES: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("exit handler", r"atexit|\bsys\.exitfunc\b"
                     r"|\bprocess\s*\.\s*(?:on|once|addListener|prependListener|prependOnceListener)\s*\(\s*"
                     r"""['"`](?:exit|beforeExit)['"`]""", _ANY, False),
    # libc's on_exit: a handler that runs after the harness set its status.
    ("exit handler", r"\bon_exit\b", _RS_C, False),
    ("exit status", r"(?<!self)(?<!cls)\._exit\b|\bimport\b.*\b_exit\b|\bos\.kill\s*\(\s*os\.getpid\b"
                    r"|\bprocess\s*\.\s*exitCode\s*=(?!=)|\bprocess\s*\.\s*reallyExit\b"
                    r"|\bprocess\s*\.\s*kill\s*\(\s*process\s*\.\s*pid\b", _ANY, False),
    # A sys.exit that returns lets unittest.main fall off its end with status 0.
    ("exit status", rf"sys\.exit{_SET}", _PY, False),
    ("exit status", r"::\s*_exit\b|\bfn\s+_exit\b", _RS_C, False),
    # os.Exit: see :func:`scan` (Go, outside package main).
    ("exit status", r"\bsyscall\.Exit\s*\(", (".go",), False),
    # Code the loader runs before the test harness's main.
    ("startup code", r"\blink_section\b|init_array|#\s*\[\s*(?:ctor|dtor)\b", _ANY, False),
    ("runner internals", r"^\s*(?:import\s+pytest\b|from\s+pytest\s+import\b)"
                         rf"|\brequire\s*\(\s*{_JS_MODULE}\s*\)|\bfrom\s+{_JS_MODULE}|\bimport\s+{_JS_MODULE}"
                         rf"|\bimport\s*\(\s*{_JS_MODULE}\s*\)", _ANY, True),
    ("runner internals", r"^\s*(?:import|from)\s+(?:_pytest|pluggy)\b|\b_pytest\b|\bpluggy\b"
                         r"|\bunittest\.result\b|\bTestResult\b|sys\.modules\b.*\b(?:_?pytest|pluggy|unittest)\b"
                         r"|\bimport_module\s*\(\s*['\"]_?pytest\b|\bpluginmanager\b|\bhookimpl\b"
                         r"|gc\.get_objects\b|\bfrom\s+gc\s+import\b.*\bget_objects\b", _ANY, False),
    # A skip or an xfail counts as no failure: raised by product code, it
    # hides the test that would fail.  Tests may raise them.
    ("test outcome", r"\bSkipTest\b|\bpytest\s*\.\s*skip\s*\(|\.\s*xfail\s*\(|\bimportorskip\b", _PY, True),
    # A module imported by a name built in pieces (``"py" + "test"``, an f-string).
    ("built module name", r"\b(?:__import__|import_module)\s*\(\s*(?:[rRbBuU]?[fF][rR]?['\"]|[^()]*\+)", _PY, False),
    ("built module name", r"""\b(?:require|import)\s*\(\s*(?:`[^`]*\$\{|[^()]*['"`]\s*\+|[^()]*\+\s*['"`])""",
     _JS, False),
    # What neuters the assertions a test makes: node's assert (one object
    # per process, looked up when the test calls it), Object.is (ava's
    # t.is, vitest's toBe), jest's global expect; computed access to
    # process (``process['really' + 'Exit']``).
    ("assertions", rf"\bObject\s*\.\s*is{_SET}|\bassert{_MEMBER}+{_SET}"
                   rf"""|\brequire\s*\(\s*['"`](?:node:)?assert(?:/strict)?['"`]\s*\){_MEMBER}+{_SET}"""
                   rf"""|\b(?:globalThis|global|window|self)(?:\s*\.\s*expect|\s*\[\s*['"`]expect['"`]\s*\]){_MEMBER}*{_SET}"""
                   r"|\bprocess\s*\[", _JS, False),
    ("assertions", rf"\bTestCase\s*\.\s*\w+{_SET}", _PY, False),
    ("git-parallel variable", r"GIT_PARALLEL_|\bgitparallel_results\b", _ANY, False),
    ("runner report", r"(?i:junit[-_]?xml)|\bPYTEST_\w*|JEST_JUNIT", _ANY, False),
)
RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((rule, re.compile(pattern)) for rule, pattern, _, _ in _RULES)
# os.Exit ends a test binary from its package's code (an ``init`` that
# exits 0 passes every test); a command's ``main`` calls it honestly, so
# it is read only outside ``package main`` (a line cannot tell an ``init``).
_GO_EXIT = re.compile(r"\bos\.Exit\s*\(")
_GO_PACKAGE = re.compile(r"^\s*package\s+(\w+)", re.M)

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


def scan(added: Mapping[str, Iterable[tuple[int, str]]],
         read: Callable[[str], bytes | None] | None = None) -> list[ReachFinding]:
    """The findings in ``added``: the lines each path gained, as (line
    number, text); prose is not read.  A test file by name is read too
    (the protected test paths are left out by the caller: what remains is
    product code named like a test, or a new test outside them), but may
    use the runner's API (``import pytest``, ``pytest.skip``).  ``read``
    gives a path's content as the attempt has it (a Go file's package)."""
    found: list[ReachFinding] = []
    for path in sorted(added):
        if path.lower().endswith(_PROSE):
            continue
        rules = _rules_for(path, read)
        for number, text in added[path]:
            for rule, pattern in rules:
                match = pattern.search(text)
                if match:
                    found.append({"path": path, "line": number, "rule": rule, "text": _shown(text, match.start())})
                    break
    return found


def _rules_for(path: str, read: Callable[[str], bytes | None] | None) -> list[tuple[str, re.Pattern[str]]]:
    """The rules that read ``path``, in order."""
    test = is_test_file(path)
    rules = [(rule, pattern) for (rule, pattern), (_, _, suffixes, api) in zip(RULES, _RULES)
             if not (test and api) and (not suffixes or path.endswith(suffixes))]
    if path.endswith(".go") and _go_package(path, read) != "main":
        rules.insert(0, ("exit status", _GO_EXIT))
    return rules


def _go_package(path: str, read: Callable[[str], bytes | None] | None) -> str | None:
    data = read(path) if read is not None else None
    found = _GO_PACKAGE.search(data.decode("utf-8", "replace")) if data is not None else None
    return found.group(1) if found else None


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
