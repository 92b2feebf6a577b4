"""A pytest plugin git-parallel loads into every pytest a gate starts
(``PYTEST_PLUGINS``), from a folder outside the judged checkout, before
any conftest or test module, so before any of the attempt's code.

It writes one JSON line per test outcome, as each test ends, to a pipe
git-parallel holds open (``GIT_PARALLEL_RESULTS_FD``), with the category
pytest's own summary counts it under: a line once written cannot be taken
back by code that runs later (an exit handler, ``os._exit(0)``, a rewritten
JUnit file).  git-parallel then holds the stream, the printed summary and
the exit status against each other (``judge/outcome``).

Lines: ``{"e": "start", "pid": N}`` when the session starts,
``{"e": "collected", "n": N}`` when its tests are collected,
``{"e": "test", "id": NODEID, "cat": "passed"|"failed"|"error"|"skipped"|
"xfailed"|"xpassed"|...}`` per counted report (a skip or xfail that no
marker declared says ``"from"``: the file it was raised in, relative to
the rootdir when inside it), ``{"e": "plugin", "from": PATH}`` for a plugin registered after the
session started (from an xdist worker, carried by its reports),
``{"e": "end", "status": N}`` when it finishes.  Standard library and pytest only.
"""

import json
import os
import sys

import pytest

_FD_ENV = "GIT_PARALLEL_RESULTS_FD"
_TestReport = __import__("_pytest.reports", fromlist=["TestReport"]).TestReport


class _Stream:
    def __init__(self, fd):
        self.fd = fd
        self.held = []  # passing tests' lines, written with the next line that cannot wait

    def send(self, _wait=False, **line):
        """Write ``line`` now, with any held before it; a test's
        line (``_wait``: anything but a failure) may wait for the next, 64 at most: one
        write per line cost a suite with thousands of tests 5 % of its
        time.  A failure never waits, and neither does a session's end:
        code that ends the process early loses held passes, so its session
        streams fewer results than it collected, which is forged."""
        # Each line names its session: pytest run inside pytest (pytester,
        # in process or not) is a session of its own, nested in the outer one.
        line["s"] = "%d-%d" % (os.getpid(), id(_configs[-1]) if _configs else 0)
        self.held.append(json.dumps(line))
        if _wait and len(self.held) < 64:
            return
        data = ("\n".join(self.held) + "\n").encode()
        self.held = []
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            self.fd = None  # closed under us: the missing end says so


def _open():
    try:
        fd = int(os.environ.get(_FD_ENV, ""))
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    return _Stream(fd)


_stream = _open()
_configs = []  # pytest's configs, innermost last: a nested run's events are its own
_origins = {}  # node id -> where a skip or an imperative xfail was raised


def _live():
    return _stream is not None and _stream.fd is not None


def pytest_configure(config):
    global _stream
    _configs.append(config)
    if hasattr(config, "workerinput"):
        _stream = None  # an xdist worker: its controller streams what it reports


def pytest_unconfigure(config):
    if config in _configs:
        _configs.remove(config)


_started = []  # the sessions started in this process
_foreign = []  # an xdist worker's: where plugins registered since came from (it tells its controller)


def pytest_sessionstart(session):
    _started.append(session)
    if _live():
        _stream.send(e="start", pid=os.getpid())


def pytest_plugin_registered(plugin, manager):
    # A plugin registered once the session has started: a conftest.py
    # further down, a module a conftest names, or code the tests imported.
    # Where its hook functions were compiled says which.
    if not _started:
        return
    for name in dir(plugin):
        if not name.startswith("pytest_"):
            continue
        function = getattr(plugin, name, None)
        code = getattr(function, "__code__", None) or getattr(getattr(function, "__func__", None), "__code__", None)
        if code is not None:
            where = _relative(code.co_filename)
            if _live():
                _stream.send(e="plugin", **{"from": where})
            elif _configs and hasattr(_configs[-1], "workerinput") and not os.path.isabs(where) \
                    and os.path.basename(where) != "conftest.py":
                # An xdist worker has no pipe: its reports carry the note
                # to the controller (and only for the checkout's own code,
                # so an honest run's reports carry nothing more).
                _foreign.append(where)
            return


def pytest_collection_finish(session):
    if _live():
        _stream.send(e="collected", n=len(session.items))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    # Under xdist the controller collects nothing itself; every worker
    # collects the same tests, the first to finish says how many.
    global _xdist_counted
    if _live() and not _xdist_counted:
        _xdist_counted = True
        _stream.send(e="collected", n=len(ids))


_xdist_counted = False


def _where(longrepr):
    """The file a skip or failure was raised in, as pytest reports it."""
    if isinstance(longrepr, tuple) and longrepr:
        return str(longrepr[0])
    crash = getattr(longrepr, "reprcrash", None)
    return str(getattr(crash, "path", "")) if crash is not None else ""


# The interpreter's own folders (a venv setup built inside the checkout
# among them): what is installed there is not the checkout's code.
_INSTALLED = tuple(sorted({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}))


def _relative(path):
    """``path`` relative to the rootdir when it is the checkout's own code,
    else absolute (installed packages, the standard library)."""
    try:
        root = os.path.realpath(str(_configs[-1].rootpath))
        real = os.path.realpath(path)
        if real.startswith(root + os.sep) and not real.startswith(_INSTALLED):
            return os.path.relpath(real, root)
    except (AttributeError, IndexError, OSError, ValueError):
        pass
    return os.path.abspath(path) if path else ""


# The runner's own packages: a skip is raised inside them on behalf of the
# code that called them, which is what is looked for.
_RUNNER = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep
                for m in (pytest, __import__("_pytest"), __import__("pluggy"), __import__("unittest")))
_SKIPS = (pytest.skip.Exception, pytest.xfail.Exception, __import__("unittest").SkipTest)


def _raiser(excinfo):
    """The innermost frame, outside the runner, of the code that raised."""
    try:
        for entry in reversed(excinfo.traceback):
            path = os.path.abspath(str(entry.path))
            if not path.startswith(_RUNNER):
                return path
    except Exception:  # noqa: BLE001 (a traceback the test made strange)
        pass
    return ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Called first, and makes no report (the next implementation does):
    # read before any other runs, since pytest's unittest support turns a
    # unittest.SkipTest into its own skip, raised in its own code.  Not a
    # wrapper: one runs for every phase of every test, and costs more.
    if _foreign and ("git-parallel-plugin", _foreign[0]) not in item.user_properties:
        item.user_properties.append(("git-parallel-plugin", _foreign[0]))  # the report copies them
    raised = call.excinfo
    if raised is not None and isinstance(raised.value, _SKIPS) and not (
            item.get_closest_marker("skip") or item.get_closest_marker("skipif") or item.get_closest_marker("xfail")):
        # Raised, not declared: by the test, a fixture, or the code it called.
        _origins[item.nodeid] = _relative(_raiser(raised))
    return None


def pytest_runtest_logreport(report):
    if not _live() or not _configs:
        return
    if report.passed and report.when != "call":
        return  # a setup or teardown that passed: pytest's summary counts nothing for it
    config = _configs[-1]
    for key, value in getattr(report, "user_properties", None) or ():
        if key == "git-parallel-plugin" and isinstance(value, str):  # from an xdist worker
            _stream.send(e="plugin", **{"from": value})
    if type(report) is _TestReport and report.passed and not hasattr(report, "wasxfail"):
        category = "passed"  # what every teststatus says of it, without asking each (most reports are these)
    else:
        status = config.hook.pytest_report_teststatus(report=report, config=config)
        category = status[0] if status else ""
    if category:
        line = {"e": "test", "id": report.nodeid, "cat": category}
        origin = _origins.pop(report.nodeid, None) if category in ("skipped", "xfailed") else None
        if origin:
            line["from"] = origin
        _stream.send(_wait="fail" not in category and "error" not in category, **line)


def pytest_collectreport(report):
    if not _live():
        return
    if report.failed:  # a module that fails to import: an error in pytest's summary
        _stream.send(e="test", id=report.nodeid, cat="error")
    elif report.skipped:  # a module skipped as it was imported
        _stream.send(e="test", id=report.nodeid, cat="skipped", **{"from": _relative(_where(report.longrepr))})


def pytest_sessionfinish(session, exitstatus):
    if _live():
        _stream.send(e="end", status=int(exitstatus))
