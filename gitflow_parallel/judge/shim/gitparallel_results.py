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
``{"e": "test", "id": NODEID, "cat": "passed"|"failed"|"error"|"skipped"|
"xfailed"|"xpassed"|...}`` per counted report, ``{"e": "end", "status": N}``
when it finishes.  Standard library and pytest only.
"""

import json
import os

_FD_ENV = "GIT_PARALLEL_RESULTS_FD"


class _Stream:
    def __init__(self, fd):
        self.fd = fd

    def send(self, **line):
        data = (json.dumps(line, sort_keys=True) + "\n").encode()
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


def pytest_sessionstart(session):
    if _stream is not None:
        _stream.send(e="start", pid=os.getpid())


def pytest_runtest_logreport(report):
    if _stream is None or _stream.fd is None:
        return
    if _config is None:
        return
    status = _config.hook.pytest_report_teststatus(report=report, config=_config)
    category = status[0] if status else ""
    if category:
        _stream.send(e="test", id=report.nodeid, cat=category)


def pytest_collectreport(report):
    # A module that fails to import is an error in pytest's summary.
    if _stream is not None and _stream.fd is not None and report.failed:
        _stream.send(e="test", id=report.nodeid, cat="error")


_config = None


def pytest_configure(config):
    global _config, _stream
    _config = config
    if hasattr(config, "workerinput"):
        _stream = None  # an xdist worker: its controller streams what it reports


def pytest_sessionfinish(session, exitstatus):
    if _stream is not None and _stream.fd is not None:
        _stream.send(e="end", status=int(exitstatus))
