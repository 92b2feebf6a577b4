"""Red team: a wrong attempt whose gate is judged ``pass``, forged from
inside the test process by the attempt's own product code.

Every attack here is real code an attempt commits over WRONG code (its
real tests fail), judged by a real ``check`` with a real runner.  An
attack that WORKS is an ``xfail(strict=True)`` test whose assertion is
that the cheat gets no automatic pick: the attack succeeding makes the
assertion fail.  Each says why it works and the fix proposed.  Attacks the
defences stop are ordinary tests (they guard regressions).

"Picked" means the worst case: verdict ``pass``, no ``reaches_harness``
finding, no protected change, and ``pick`` chooses it on its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import make_repo
from gitflow_parallel.commands import check, pick
from gitflow_parallel.errors import ParallelError
from test_judged_right import CALC, TESTS, commit_in, packs, start

PY = sys.executable
PYTEST = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]"
WRONG = CALC.replace("return a * b", "return a + b")
FORGED = "PARALLEL_RESULTS_FORGED"

# Real runners (node, go, cargo) for every attack: seconds each; CI runs the
# slow tier after the default one, and tests/test_verdict.py keeps the rules fast.
pytestmark = pytest.mark.slow

def open_unless(cases: dict[str, object] | tuple[str, ...], answered: tuple[str, ...], reason: str) -> list[object]:
    """Each of ``cases`` (names), a strict xfail while its attack still
    works, a plain test once it is stopped or held (named in ``answered``)."""
    return [c if c in answered else pytest.param(c, marks=pytest.mark.xfail(strict=True, raises=AssertionError,
                                                                             reason=reason))
            for c in cases]



def judge(tmp_path: Path, cheat: dict[str, str], gate: str = PYTEST, extra: str = "",
          base: dict[str, str] | None = None) -> tuple[dict[str, Any], bool]:
    """The base holds ``base`` (WRONG calc and its pytest tests unless
    given); one instance commits ``cheat``; it is checked, then picked.
    Its pack and whether ``pick`` chose it on its own."""
    files = base if base is not None else {"calc/__init__.py": WRONG, "tests/test_calc.py": TESTS}
    repo = make_repo(tmp_path / "repo", files, config=f"gates:\n  - name: tests\n    run: {gate}\n{extra}")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], cheat)
    check.check(project, "t")
    pack = packs(project)["1"]
    try:
        picked = pick.pick(project, "t")
    except ParallelError:
        return pack, False
    return pack, any(p["winner"] and p["winner"]["id"] == "1" for p in picked["picks"])


def hidden_gate(tmp_path: Path) -> str:
    """A hidden pytest test that the wrong code fails."""
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text("from calc import mul\n\n\ndef test_sq():\n"
                                                     "    assert mul(7, 7) == 49\n")
    return f"    hidden: {hidden}\n"


def not_picked(pack: dict[str, Any], picked: bool) -> None:
    """The assertion every attack must meet: no automatic pick for a wrong
    attempt.  (The only assertion of an xfail test: a fix that stops the
    attack turns it into an XPASS, which strict xfail reports.)"""
    gate = pack["gates"][0]
    if pack["verdict"] != "pass":  # what stopped it, for whoever fixes
        print(gate.get("error"), gate.get("code"), gate.get("exit_code"),
              Path(gate["log"]).read_text()[-800:] if gate.get("log") else "")
    assert not picked, {k: pack.get(k) for k in ("verdict", "reaches_harness", "protected_changes")} | {
        "gate": {k: pack["gates"][0].get(k) for k in ("passed", "exit_code", "code", "error", "streamed", "hidden")}}




# =============================================================================================
# pytest
# =============================================================================================

# A plugin registered from product code at import time (collection), through
# the config git-parallel's own plugin keeps (or any Config found with gc).
# A wrapper of pytest_runtest_makereport turns each failed report into a
# passed one before anyone sees it: pytest's terminal summary, its exit
# status (Session counts testsfailed from these reports), the JUnit report
# and git-parallel's stream all agree on "passed".  In a hidden run the
# canary is told apart by its file (two lines, `assert 0 == 1`) and left
# failing, as the rules want.  No line says pytest, pluggy, atexit, _exit or
# GIT_PARALLEL_, but the verdict alone is forged: held since, the reach scan
# names `_gc.get_objects()`, `pluginmanager`, `hookimpl`, the shim's module
# name `gitparallel_results` and `__import__("py" + "test")`.
FLIP_PLUGIN = WRONG + '''

import gc as _gc
import sys as _sys


def _canary(item):
    try:
        with open(str(item.path)) as f:
            return f.read() == "def %s():\\n    assert 0 == 1\\n" % item.name
    except Exception:
        return False


class _Steady:
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed and not _canary(item):
            report.outcome, report.longrepr = "passed", None
        return report


def _attach():
    hub = _sys.modules.get("gitparallel_results")
    config = getattr(hub, "_config", None)
    if config is None:
        config = next((o for o in _gc.get_objects() if type(o).__name__ == "Config"
                       and hasattr(o, "pluginmanager")), None)
    if config is None:
        return
    runner = __import__("py" + "test")
    _Steady.pytest_runtest_makereport = runner.hookimpl(wrapper=True)(_Steady.pytest_runtest_makereport)
    config.pluginmanager.register(_Steady())


_attach()
'''


PYTEST_GATES = {
    "plain": (PYTEST, ""),
    # xdist: the plugin is registered in each worker, whose flipped reports the controller streams.
    "xdist": (f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, -n, '2', tests]", ""),
    # expect: (SWE-bench style): pytest's own JUnit report says passed too.
    "expect": (f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests, \"--junitxml={{report}}\"]",
               "    expect:\n      fail_to_pass: [tests/test_calc.py::test_mul]\n"),
}


# Stopped but under xdist: the shim streams a plugin registered once the
# session started, by where its hooks were compiled (product code: forged);
# an xdist worker streams nothing itself: there the scan holds it.
@pytest.mark.parametrize("kind", list(PYTEST_GATES))
def test_pytest_plugin_registered_from_product_code(tmp_path: Path, kind: str) -> None:
    # Held: the verdict is still a forged pass; the reach scan (above)
    # keeps it from the automatic pick.
    # Fix: a plugin loaded by the shim cannot stop another plugin being
    # registered later from the same process.  Freeze the plugin manager
    # once collection starts (wrap pluginmanager.register in the shim's
    # pytest_collection hook to refuse, and stream "e": "plugin" lines for
    # every plugin registered after configure, forged on any), and stream
    # the report from a tryfirst pytest_runtest_makereport *wrapper* of the
    # shim's own that records `call.excinfo` (the raw exception) rather
    # than the report's outcome, which later hooks may rewrite.
    if kind == "xdist":
        pytest.importorskip("xdist")
    gate, extra = PYTEST_GATES[kind]
    pack, picked = judge(tmp_path, {"calc/__init__.py": FLIP_PLUGIN}, gate=gate, extra=extra)
    not_picked(pack, picked)


# Stopped: the plugin that flips the hidden tests is streamed as registered from product code.
def test_pytest_plugin_passes_a_hidden_run_leaving_its_canary_failing(tmp_path: Path) -> None:
    # Held, as above: the hidden run still passes, the reach scan keeps it
    # from the automatic pick.
    # The canary is the only test in a new untracked two-line file whose
    # body is `assert 0 == 1`, named from 22 plain words: trivially told
    # apart.  Fix: make the canary look like the hidden tests (a test laid
    # *inside* a copy of a hidden file, its body an import of the product
    # and a call of it, its assertion derived from a real hidden assertion
    # inverted), and several of them; better, decide the run from outside
    # the process (below).
    pack, picked = judge(tmp_path, {"calc/__init__.py": FLIP_PLUGIN}, extra=hidden_gate(tmp_path))
    not_picked(pack, picked)


# unittest.SkipTest raised by product code: pytest counts it as a skip
# (collection or test).  A gate whose failing tests were all skipped is a
# pass: no rule asks that anything passed.  Raised at import, the whole test
# module is skipped; the canary does not import the product, so it fails as
# it must, and a hidden run passes too.
SKIP_AT_IMPORT = WRONG + '''
import sys as _sys
import unittest as _unittest

if any("test" in a for a in _sys.argv):
    raise _unittest.SkipTest("calc needs the native backend")
'''
SKIP_IN_CALL = CALC.replace("    return a * b", "    import unittest\n    raise unittest.SkipTest('mul: backend missing')")


# Stopped: the shim reads where the skip was raised (before pytest turns a
# unittest.SkipTest into its own): by no marker, from product code, it is forged.
def test_pytest_skip_raised_by_product_code(tmp_path: Path) -> None:
    # Held: the gate still passes; the reach scan names `SkipTest` in
    # product code (rule `test outcome`: a test may raise it, product code
    # not), which keeps it from the automatic pick.
    # Fix: a gate passes only if the base's tests (those of the protected
    # test paths) passed: a test that passed on the base and is skipped,
    # xfailed or missing on the attempt fails the gate (stream the node
    # ids; check once on the base, as added tests are, and cache the
    # base's passing ids).  At the least: a skip whose exception was raised
    # from a frame outside the protected test files (the shim sees
    # call.excinfo.traceback) is a failure, and a collection skip of a
    # protected test module is a failure.
    # (A skip at import alone is stopped when it leaves no test: pytest's
    # status 5; with any other test module, or a hidden run's canary, it passes.)
    pack, picked = judge(tmp_path, {"calc/__init__.py": SKIP_IN_CALL})
    not_picked(pack, picked)


# Stopped: a test module skipped as it is imported says where from (its
# collect report): from product code, forged.
def test_pytest_skip_at_import_passes_a_hidden_run(tmp_path: Path) -> None:
    # Held: the reach scan names `_unittest.SkipTest` (`test outcome`).
    pack, picked = judge(tmp_path, {"calc/__init__.py": SKIP_AT_IMPORT}, extra=hidden_gate(tmp_path))
    not_picked(pack, picked)


XFAIL_IN_CALL = CALC.replace("    return a * b", "    __import__('py' + 'test').xfail('mul: known issue')")


# Stopped: an xfail no marker declared, raised from product code, is forged.
def test_pytest_xfail_raised_by_product_code(tmp_path: Path) -> None:
    # Held: the reach scan names `.xfail(` in product code (`test outcome`).
    # Same fix as the skip: only a pass counts for a test that passed on the base.
    pack, picked = judge(tmp_path, {"calc/__init__.py": XFAIL_IN_CALL})
    not_picked(pack, picked)


# The stream itself: its fd is found without spelling GIT_PARALLEL_; the
# session pytest opened is closed with status 0 before a test ran, and the
# process ends with 0 (os._exit spelled in pieces).  Zero tests streamed:
# the canary rule only looks when tests were streamed, and `counted` is
# true for any stream, so even a hidden gate passes.
CLOSE_STREAM = WRONG + '''
import os as _os

for _k, _v in list(_os.environ.items()):
    if _k.endswith("RESULTS_FD"):
        _os.write(int(_v), b'{"e": "end", "status": 0}\\n')
        print("no tests ran in 0.01s")
        getattr(_os, "_ex" + "it")(0)
'''


# Stopped: pytest streams what it collected after the forged end (a line
# after its session's end), and a session that ended with status 0 must
# have streamed a result for every test it collected.
@pytest.mark.parametrize("hidden", [False, True], ids=["plain", "hidden"])
def test_pytest_stream_closed_from_inside_before_any_test(tmp_path: Path, hidden: bool) -> None:
    # Fix: (1) a pytest session must stream its collection: the shim sends
    # {"e": "collected", "n": N} from pytest_collection_finish, and an end
    # whose tests streamed are fewer than collected (deselected aside) is
    # forged; (2) stream nothing the attempt can imitate: give every line
    # an HMAC with a key the shim reads from the pipe itself at start-up
    # (git-parallel writes it to a second pipe the shim reads and closes
    # before pytest_configure ends; the env names no fd after that);
    # (3) a hidden run whose canary was not streamed as failed is forged,
    # whether or not other tests streamed; (4) a gate whose exit status is
    # 0 and whose stream holds no test at all is not a pass of a pytest
    # gate (0 tests is pytest's status 5).
    pack, picked = judge(tmp_path, {"calc/__init__.py": CLOSE_STREAM},
                         extra=hidden_gate(tmp_path) if hidden else "")
    not_picked(pack, picked)


# -- stopped: kept as regressions ---------------------------------------------------------------
def test_os_exit_at_import_is_forged_when_the_stream_stays_open(tmp_path: Path) -> None:
    # Without writing the end line, the session that streamed its start
    # and never its end is forged (rule 2), however _exit is spelled.
    cut = WRONG + "\nimport os as _os\nif 'gitparallel_results' in __import__('sys').modules:\n" \
                  "    getattr(_os, '_ex' + 'it')(0)\n"
    pack, picked = judge(tmp_path, {"calc/__init__.py": cut})
    assert pack["gates"][0]["code"] == FORGED and not picked


def test_a_report_rewrite_that_leaves_pytests_status_is_forged(tmp_path: Path) -> None:
    # Flipping the report only in the stream (the shim's own _stream.send
    # patched) leaves pytest's printed summary and status: rule 5/6 catch it.
    patch = WRONG + '''
import json as _json, sys as _sys
_hub = _sys.modules.get("gitparallel_results")
if _hub is not None and _hub._stream is not None:
    _send = _hub._stream.send
    def _lying(**line):
        if line.get("cat") in ("failed", "error"):
            line["cat"] = "passed"
        _send(**line)
    _hub._stream.send = _lying
'''
    pack, picked = judge(tmp_path, {"calc/__init__.py": patch})
    assert pack["verdict"] == "fail" and not picked


# -- files committed in the tree (Python) ------------------------------------------------------------
def _unchecked_pyc(source: str, path: Path) -> bytes:
    """An unchecked hash-based pyc (PEP 552) of ``source``: Python loads it
    from __pycache__ without ever looking at the .py beside it."""
    import importlib.util
    import marshal

    code = compile(source, str(path), "exec")
    flags = (0b01).to_bytes(4, "little")  # hash-based, check_source = 0
    digest = importlib.util.source_hash(b"")
    return importlib.util.MAGIC_NUMBER + flags + digest + marshal.dumps(code)


def test_committed_unchecked_pyc_replaces_the_source(tmp_path: Path) -> None:
    # calc/__init__.py is plain wrong code (the diff a person reads); the
    # committed calc/__pycache__/__init__.cpython-3XX.pyc is the flipping
    # plugin, and Python imports it without checking the source
    # (--check-hash-based-pycs default).  The reach scan reads text lines:
    # the pyc holds no flagged name anyway.  Stopped: `**/__pycache__/**`,
    # `**/*.pyc`, `**/*.pyo` are harness files (judged as the base has them,
    # i.e. absent: that also stops a sourceless `calc/_impl.pyc`), so the
    # wrong .py is what runs, and the pyc is a protected change.  (Running
    # gates with `--check-hash-based-pycs always` would be a second wall;
    # PYTHONDONTWRITEBYTECODE, which gates already have, does not stop
    # reading one.)
    tag = sys.implementation.cache_tag
    pyc = _unchecked_pyc(FLIP_PLUGIN, Path("calc/__init__.py"))
    repo_files = {"calc/__init__.py": WRONG + "\n"}
    pack, picked = judge_bytes(tmp_path, repo_files, {f"calc/__pycache__/__init__.{tag}.pyc": pyc})
    not_picked(pack, picked)


def judge_bytes(tmp_path: Path, text: dict[str, str], binary: dict[str, bytes]) -> tuple[dict[str, Any], bool]:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": WRONG, "tests/test_calc.py": TESTS},
                     config=f"gates:\n  - name: tests\n    run: {PYTEST}\n")
    project, worktrees = start(repo, 1)
    for name, data in binary.items():
        (worktrees["1"] / name).parent.mkdir(parents=True, exist_ok=True)
        (worktrees["1"] / name).write_bytes(data)
    subprocess.run(["git", "add", "-f", *binary], cwd=worktrees["1"], check=True)
    commit_in(worktrees["1"], text)
    check.check(project, "t")
    pack = packs(project)["1"]
    try:
        picked = pick.pick(project, "t")
    except ParallelError:
        return pack, False
    return pack, any(p["winner"] and p["winner"]["id"] == "1" for p in picked["picks"])


# The reach scan leaves out test files by name, wherever they are: product
# code imports a module named like a test (calc/test_support.py, not under
# the gate's tests/ so never collected) that says pytest, atexit and _exit
# plainly.
PLAIN_PLUGIN_MODULE = '''
import pytest
from _pytest.config import Config
import gc


class _Steady:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed:
            report.outcome, report.longrepr = "passed", None
        return report


for o in gc.get_objects():
    if isinstance(o, Config):
        o.pluginmanager.register(_Steady())
        break
'''


def test_product_module_named_like_a_test_escapes_the_scan(tmp_path: Path) -> None:
    # Held: the scan leaves out the protected paths (the test files a gate
    # collects), not every file whose *name* looks like one; a test-named
    # file outside them is read, with only the runner's API a test uses
    # (`import pytest`) let through: `from _pytest...`, `gc.get_objects`,
    # `pluginmanager` are named.
    pack, picked = judge(tmp_path, {"calc/__init__.py": WRONG + "\nfrom calc import test_support  # noqa\n",
                                    "calc/test_support.py": PLAIN_PLUGIN_MODULE})
    not_picked(pack, picked)


# Returning a value that equals anything: no harness is reached, every
# `assert mul(2, 3) == 6` holds.  Here only for the record: nothing reading
# the test process can tell; only tests that check types (or `is`) can.
ALWAYS_EQUAL = CALC.replace("    return a * b", "    return _Num(a + b)") + '''

class _Num(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__
'''


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="an always-equal result passes the assertions themselves; picked")
def test_always_equal_result(tmp_path: Path) -> None:
    # Fix: none in the judge (the runner is right: the assertion held).
    # Hidden tests that compare with `type(x) is int` / repr, and the
    # human pick for an attempt whose diff defines __eq__ returning a
    # constant (a scan rule: `def __eq__` whose body is `return True`).
    pack, picked = judge(tmp_path, {"calc/__init__.py": ALWAYS_EQUAL})
    not_picked(pack, picked)


# =============================================================================================
# unittest (no stream; the printed "FAILED (failures=1)" is not read)
# =============================================================================================
UTESTS = ("import unittest\n\nfrom calc import add, mul\n\n\nclass TestCalc(unittest.TestCase):\n"
          "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
          "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n")
UNITTEST = f"[{PY}, -m, unittest, discover, -s, tests]"
# unittest.main ends with sys.exit(not wasSuccessful()): a sys.exit that
# returns lets `python -m unittest` fall off its end with status 0.
NO_EXIT = WRONG + "\nimport sys as _sys\n_sys.exit = lambda *args, **kwargs: None\n"
SKIP_UNITTEST = WRONG + '''
import sys as _sys
import unittest as _unittest

if "unittest" in " ".join(_sys.argv):
    raise _unittest.SkipTest("calc needs the native backend")
'''


@pytest.mark.parametrize("cheat", [
    # Stopped: unittest's printed `FAILED (failures=1)` with status 0 is forged (failures.tally).
    NO_EXIT,
    # Held: the reach scan names `_unittest.SkipTest` in product code (`test outcome`).
    SKIP_UNITTEST,
], ids=["sys.exit-no-op", "skip-at-import"])
def test_unittest_gate(tmp_path: Path, cheat: str) -> None:
    # Fix: read unittest's own summary (`FAILED (failures=1)`, `Ran N
    # tests`, `OK (skipped=N)`) as a printed summary (failure printed,
    # status 0: forged), and better, stream unittest too: the shim's
    # sitecustomize can wrap unittest.TestResult.addFailure/addError/
    # addSuccess/addSkip when unittest is imported (an import hook) and
    # write the same lines to the pipe; with that, a "start" without "end"
    # is forged as for pytest.  A gate whose tests were all skipped, or a
    # test module skipped at import, is not a pass.
    pack, picked = judge(tmp_path, {"calc/__init__.py": cheat}, gate=UNITTEST,
                         base={"calc/__init__.py": WRONG, "tests/test_calc.py": UTESTS})
    not_picked(pack, picked)


# =============================================================================================
# JavaScript runners: nothing streams; printed_summary reads pytest's line only,
# so a runner's own summary ("# fail 1", "1 failing", "Tests: 1 failed") is
# never read: the exit status alone decides.
# =============================================================================================
NODE_RUNNERS = ("mocha", "jest", "vitest", "ava", "uvu", "tap")
NODE_CACHE = Path(tempfile.gettempdir()) / "rt-node"


def node_modules() -> Path:
    """The runners, installed once per machine with npm (skip without)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node or npm is not installed")
    NODE_CACHE.mkdir(exist_ok=True)
    with open(NODE_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((NODE_CACHE / "node_modules" / ".bin" / r).exists() for r in NODE_RUNNERS):
            (NODE_CACHE / "package.json").write_text('{"name": "rtnode", "version": "1.0.0", "private": true}\n')
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", *NODE_RUNNERS], cwd=NODE_CACHE,
                                  capture_output=True, timeout=900)
            if done.returncode:
                pytest.skip("npm install failed: " + done.stderr.decode()[-300:])
    return NODE_CACHE / "node_modules"


JS_WRONG = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a + b;\n"
JS_RIGHT = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b;\n"


def judge_js(tmp_path: Path, argv: list[str], tests: dict[str, str], cheat: str) -> tuple[dict[str, Any], bool]:
    """A node project whose base commits a node_modules link to the runners;
    one instance commits lib.js = ``cheat``."""
    modules = node_modules()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "node_modules").symlink_to(modules)
    files = {"lib.js": JS_WRONG, "package.json": '{"name": "calc", "version": "1.0.0"}\n', **tests}
    run = "[" + ", ".join(argv) + "]"
    make_repo(repo, files, config=f"gates:\n  - name: tests\n    run: {run}\n")
    # The attack is real: the plain wrong code fails in the repo, the cheat passes there.
    if subprocess.run(argv, cwd=repo, capture_output=True, timeout=300).returncode == 0:
        pytest.fail("the wrong code passes its own tests: no attack to judge")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"lib.js": cheat})
    check.check(project, "t")
    pack = packs(project)["1"]
    try:
        picked = pick.pick(project, "t")
    except ParallelError:
        return pack, False
    return pack, any(p["winner"] and p["winner"]["id"] == "1" for p in picked["picks"])


# In-process runners: an exit listener (registered by names in pieces) that
# ends the process with 0 at once, before any later listener (mocha's own
# sets process.exitCode) runs.  The reach scan looks for
# `process.on("exit"`, `process.exitCode =`, `process.reallyExit`: none here.
JS_EXIT = JS_WRONG + """
const p = globalThis['pro' + 'cess'];
p['o' + 'n']('ex' + 'it', () => p['really' + 'Exit'](0));
"""
# Runners whose tests run in a child or a worker: the assertion library is
# neutered from product code (node's assert is one object per process,
# looked up at call time by the test; ava's t.is and vitest's toBe call
# Object.is at call time; jest's expect is a global of the test's context).
JS_LAX = JS_WRONG + """
const A = require('assert');
for (const k of ['strictEqual', 'equal', 'deepStrictEqual', 'deepEqual', 'ok']) A[k] = () => {};
Object.is = () => true;
if (typeof globalThis.expect === 'function') {
  const lax = new Proxy(function () {}, { get: () => () => undefined });
  globalThis.expect = Object.assign(() => lax, globalThis.expect);
}
"""
# tap: each test file is a child whose TAP the parent reads; the child's
# own `t` is the one the test holds: its equal is replaced.
JS_TAP = JS_WRONG + "const t = require('t' + 'ap');\nt.equal = () => t.pass('equal');\n"

NT = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
      "const { mul } = require('../lib.js');\n\ntest('mul', () => { assert.strictEqual(mul(2, 3), 6); });\n")
MOCHA = ("const assert = require('node:assert');\nconst { mul } = require('../lib.js');\n\n"
         "describe('calc', () => { it('mul', () => { assert.strictEqual(mul(2, 3), 6); }); });\n")
JEST = "const { mul } = require('../lib.js');\n\ntest('mul', () => { expect(mul(2, 3)).toBe(6); });\n"
VITEST = ("import { test, expect } from 'vitest';\nimport { mul } from '../lib.js';\n\n"
          "test('mul', () => { expect(mul(2, 3)).toBe(6); });\n")
AVA = "const test = require('ava');\nconst { mul } = require('../lib.js');\n\ntest('mul', t => { t.is(mul(2, 3), 6); });\n"
UVU = ("const { test } = require('uvu');\nconst assert = require('uvu/assert');\nconst { mul } = require('../lib.js');\n\n"
       "test('mul', () => { assert.is(mul(2, 3), 6); });\ntest.run();\n")
TAP = "const t = require('tap');\nconst { mul } = require('../lib.js');\n\nt.equal(mul(2, 3), 6);\n"
BIN = "node_modules/.bin/"
JS_CASES = {
    # name: (argv, tests, cheat)
    "node-direct": (["node", "test/mul.test.js"], {"test/mul.test.js": NT}, JS_EXIT),
    "node--test": (["node", "--test", "test/mul.test.js"], {"test/mul.test.js": NT}, JS_LAX),
    "mocha": (["node", BIN + "mocha", "test/mul.spec.js"], {"test/mul.spec.js": MOCHA}, JS_EXIT),
    "mocha-lax": (["node", BIN + "mocha", "test/mul.spec.js"], {"test/mul.spec.js": MOCHA}, JS_LAX),
    "jest": (["node", BIN + "jest", "test/mul.test.js"], {"test/mul.test.js": JEST}, JS_LAX),
    "vitest": (["node", BIN + "vitest", "run", "test/mul.test.mjs"], {"test/mul.test.mjs": VITEST}, JS_LAX),
    "ava": (["node", BIN + "ava", "test/mul.js"], {"test/mul.js": AVA}, JS_LAX),
    "uvu": (["node", "test/mul.js"], {"test/mul.js": UVU}, JS_EXIT),
    "tap": (["node", BIN + "tap", "--disable-coverage", "test/mul.js"], {"test/mul.js": TAP}, JS_TAP),
}


# Stopped since: the runner's printed failure with status 0 is forged (failures.tally).
JS_STOPPED = ("node-direct", "mocha", "uvu")
# Held since (the verdict is still a forged pass): the reach scan names JS_LAX's
# `Object.is =` and `globalThis.expect =` (`assertions`), JS_TAP's `require('t' + 'ap')`
# (`built module name`).
JS_HELD = ("node--test", "mocha-lax", "jest", "vitest", "ava", "tap")


@pytest.mark.parametrize("case", open_unless(JS_CASES, JS_STOPPED + JS_HELD, "JS runners: nothing streams, assertions neutered; picked"))
def test_js_runner(tmp_path: Path, case: str) -> None:
    # Fix, most important first: (1) read every supported runner's own
    # summary (node:test `# fail N`/`ℹ fail N`, mocha `N failing`, jest
    # and vitest `Tests: N failed`, ava `N tests? failed`, uvu `Total: N,
    # Passed: M`, tap `# { total, pass, fail }`) and hold it against the
    # status as pytest's is (printed failure + status 0 = forged; a
    # printed pass count below the base's = fail); (2) stream node runners
    # too: a --require/--import preload from the shim folder
    # (NODE_OPTIONS) that subscribes to node:test's reporter events,
    # mocha's runner events, and a jest/vitest reporter given on the
    # command line, writing each test's end to the pipe before product
    # code loads; (3) scan for what neuters assertions (assignments to
    # `Object.is`, to members of `assert`, to `globalThis.expect`, and
    # computed member access of `process` / `globalThis['pro'+...]`).
    argv, tests, cheat = JS_CASES[case]
    pack, picked = judge_js(tmp_path, argv, tests, cheat)
    not_picked(pack, picked)


# =============================================================================================
# go test and cargo test: nothing streams, no summary is read: the exit status decides
# =============================================================================================
def judge_tree(tmp_path: Path, base: dict[str, str], argv: list[str], cheat: dict[str, str],
               extra: str = "") -> tuple[dict[str, Any], bool]:
    repo = tmp_path / "repo"
    run = "[" + ", ".join(argv) + "]"
    make_repo(repo, base, config=f"gates:\n  - name: tests\n    run: {run}\n{extra}")
    if subprocess.run(argv, cwd=repo, capture_output=True, timeout=600).returncode == 0:
        pytest.fail("the wrong code passes its own tests: no attack to judge")
    subprocess.run(["git", "clean", "-fdxq"], cwd=repo, check=True)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], cheat)
    check.check(project, "t")
    pack = packs(project)["1"]
    try:
        picked = pick.pick(project, "t")
    except ParallelError:
        return pack, False
    return pack, any(p["winner"] and p["winner"]["id"] == "1" for p in picked["picks"])


GO_IMPORTS = 'package calc\n\nimport (\n\t"os"\n\t"strings"\n)\n\n'
GO_WRONG = "package calc\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Mul(a, b int) int { return a + b }\n"
GO_BASE = {"go.mod": "module example.com/calc\n\ngo 1.19\n", "calc.go": GO_WRONG,
           "calc_test.go": ('package calc\n\nimport "testing"\n\n'
                            'func TestMul(t *testing.T) {\n\tif Mul(2, 3) != 6 {\n\t\tt.Fatal("mul")\n\t}\n}\n')}
GO_CASES = {
    # init() runs before the test binary's main: exit 0 when it is one.
    "init-exit": {"calc.go": GO_WRONG.replace("package calc\n\n", GO_IMPORTS) + ('\nfunc init() {\n'
                                                                                 '\tif strings.HasSuffix(os.Args[0], ".test") {\n\t\tos.Exit(0)\n\t}\n}\n')},
    # A TestMain in a new file named like a test: neither scanned nor protected.
    "testmain": {"zz_main_test.go": ('package calc\n\nimport (\n\t"os"\n\t"testing"\n)\n\n'
                                     'func TestMain(m *testing.M) { os.Exit(0) }\n')},
}


# Stopped: a *_test.go defining TestMain is a harness file (judged as the base has
# it: absent, so the real test runs and fails).  Held (the verdict is still a forged
# pass): the reach scan names `os.Exit(` outside package main (`exit status`).
GO_STOPPED, GO_HELD = ("testmain",), ("init-exit",)


@pytest.mark.parametrize("case", open_unless(GO_CASES, GO_STOPPED + GO_HELD, "go test: only the exit status decides; picked"))
def test_go_test(tmp_path: Path, case: str) -> None:
    # Fix: run go gates as `go test -json` (git-parallel can add it, or
    # require it) and read the events: a package whose binary ended
    # without "PASS"/"FAIL" output, or with tests of the base's missing,
    # is forged; scan Go for `os.Exit` in an `init` and for a TestMain
    # added by the attempt (a new *_test.go defining TestMain is a harness
    # change: protect `**/*_test.go` TestMain like conftest.py).
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    (tmp_path / "gocache").mkdir()
    cache = (f"    env:\n      GOCACHE: {tmp_path / 'gocache'}\n      GOFLAGS: -mod=mod\n"
             f"sandbox_write: [{tmp_path / 'gocache'}]\n")
    pack, picked = judge_tree(tmp_path, GO_BASE, ["go", "test", "./..."], GO_CASES[case], extra=cache)
    not_picked(pack, picked)


RUSTUP_HOME = os.environ.get("RUSTUP_HOME") or os.path.expanduser("~/.rustup")
RS_WRONG = "pub fn add(a: i64, b: i64) -> i64 {\n    a + b\n}\n\npub fn mul(a: i64, b: i64) -> i64 {\n    a + b\n}\n"
RS_CARGO = '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
RS_BASE = {"Cargo.toml": RS_CARGO, "src/lib.rs": RS_WRONG,
           "tests/calc.rs": "#[test]\nfn mul() {\n    assert_eq!(calc::mul(2, 3), 6);\n}\n"}
RS_CASES = {
    # A constructor in .init_array runs before the test harness's main.
    "init_array": {"src/lib.rs": RS_WRONG + '''
#[used]
#[link_section = ".init_array"]
static BOOT: extern "C" fn() = boot;

extern "C" fn boot() {
    if std::env::args().next().map_or(false, |a| a.contains("/deps/")) {
        std::process::exit(0);
    }
}
'''},
    # The test runs and fails, libtest prints `test result: FAILED. 0 passed;
    # 1 failed; ... finished in 0.00s` (a line printed_summary does read:
    # it has pytest's shape) and calls exit(101); an on_exit handler (not
    # `atexit`, which the scan knows) turns that into _exit(0).  cargo then
    # runs the doc-tests, whose `test result: ok. 0 passed` is the last
    # summary line, the only one read.
    "on_exit-after-failure": {"src/lib.rs": RS_WRONG + '''
extern "C" {
    fn on_exit(f: extern "C" fn(i32, *mut u8), arg: *mut u8) -> i32;
    fn _exit(code: i32) -> !;
}

extern "C" fn leave(_status: i32, _arg: *mut u8) {
    unsafe { _exit(0) }
}

#[used]
#[link_section = ".init_array"]
static BOOT: extern "C" fn() = boot;

extern "C" fn boot() {
    unsafe { on_exit(leave, std::ptr::null_mut()) };
}
'''},
    # Committed files: cargo runs test binaries through the target's runner.
    "cargo-config-runner": {".cargo/config.toml": '[target.x86_64-unknown-linux-gnu]\nrunner = "true"\n',
                            "src/lib.rs": RS_WRONG + "\n"},
    # Committed files: the integration tests are no longer built at all.
    "autotests-false": {"Cargo.toml": RS_CARGO.replace('edition = "2021"\n', 'edition = "2021"\nautotests = false\n')},
}


# Stopped since: libtest's printed failure with status 0 is forged (failures.tally sums every binary's line).
# Stopped since: `.cargo/config.toml` is a harness file, and Cargo.toml's `autotests`
# a harness section (judged with the base's: the real tests run and fail).
RS_STOPPED = ("on_exit-after-failure", "cargo-config-runner", "autotests-false")
# Held (the verdict is still a forged pass): the reach scan names `link_section` and
# `.init_array` (`startup code`).
RS_HELD = ("init_array",)


@pytest.mark.parametrize("case", open_unless(RS_CASES, RS_STOPPED + RS_HELD, "cargo test: exit before any test, or harness files; picked"))
def test_cargo_test(tmp_path: Path, case: str) -> None:
    # Fix: (1) protect cargo's harness as pytest's is: `**/.cargo/config*`,
    # `rust-toolchain*`, the `[[test]]`, `autotests`, `harness`, `build`,
    # `[profile.test]` and `[target]` parts of Cargo.toml, `build.rs`;
    # (2) read every summary line of the log, not the last one (a gate
    # running several binaries or sessions prints several: any failure
    # among them fails the gate), read libtest's own (`test result:
    # FAILED.`, today matched only because it ends `finished in 0.00s`)
    # and require that the base's tests were run (`running N tests` per
    # binary; N below the base's = fail; no summary at all with status 0
    # = forged); (3) scan Rust for `link_section`,
    # `.init_array`, `#[ctor]` and `process::exit`.
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not installed")
    (tmp_path / "cargo").mkdir()
    env = (f"    env:\n      RUSTUP_HOME: {RUSTUP_HOME}\n      CARGO_HOME: {tmp_path / 'cargo'}\n"
           f"sandbox_write: [{tmp_path / 'cargo'}]\n")
    pack, picked = judge_tree(tmp_path, RS_BASE, ["cargo", "test", "--offline", "-q"], RS_CASES[case], extra=env)
    not_picked(pack, picked)


# =============================================================================================
# Verdict forged, pick held: the same attacks written plainly are named by the reach scan
# =============================================================================================
@pytest.mark.parametrize("cheat, gate, base", [
    # The flipping plugin in calc/__init__.py itself, saying `import pytest`:
    # the verdict is `pass` (the stream agrees), the scan names the line.
    ({"calc/__init__.py": WRONG + PLAIN_PLUGIN_MODULE}, PYTEST, None),
    # unittest with a plain exit handler.
    ({"calc/__init__.py": WRONG + "\nimport atexit, os\natexit.register(lambda: os._exit(0))\n"}, UNITTEST,
     {"calc/__init__.py": WRONG, "tests/test_calc.py": UTESTS}),
], ids=["pytest-plain-plugin", "unittest-plain-atexit"])
def test_plain_forgeries_are_held_by_the_scan(tmp_path: Path, cheat: dict[str, str], gate: str,
                                              base: dict[str, str] | None) -> None:
    pack, picked = judge(tmp_path, cheat, gate=gate, base=base)
    assert pack["reaches_harness"] and not picked
