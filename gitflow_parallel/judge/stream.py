"""The results channel of one gate: what its test process says of each
test as that test ends, on a pipe git-parallel holds.

The attempt's code runs inside the test process, after the runner started:
it can rewrite a report file, register an exit handler, end the process
with status 0.  It cannot take back what was already written to a pipe
whose reading end is in git-parallel.  So before a gate starts, ``open_channel``
makes a pipe and a folder outside the checkout holding two files of
git-parallel's own (``shim/``): a ``sitecustomize`` that keeps the
checkout's folders off the front of ``sys.path`` (with ``PYTHONSAFEPATH``)
and a pytest plugin, loaded through ``PYTEST_PLUGINS`` before any conftest
or test module, that writes each test's outcome to the pipe.  A thread
drains the pipe while the gate runs (a gate cannot block on it) and keeps
at most ``MAX_STREAM_BYTES``.

``Streamed`` is what was read: the sessions (a gate may start pytest more
than once), each started, ended or not, with its exit status and its tests'
categories.  ``judge/outcome`` holds it against the printed summary and the
exit status.

The folder is made under ``/tmp`` itself, mode 0700: a gate under either
sandbox layer reads it (``/tmp`` is read-only there) and cannot write it;
it is made afresh for each gate, so a gate run without a sandbox, which
could rewrite it, changes only its own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from gitflow_parallel.files import remove_tree

SHIM = Path(__file__).with_name("shim")
PLUGIN = "gitparallel_results"
FD_ENV = "GIT_PARALLEL_RESULTS_FD"
MAX_STREAM_BYTES = 16 << 20  # past this the stream is cut, and says so
MAX_TESTS = 1_000_000


@dataclass
class Session:
    """One pytest session as streamed."""

    key: str = ""
    ended: bool = False
    status: int | None = None
    collected: int | None = None  # how many tests it collected (None: it never said)
    tests: dict[str, str] = field(default_factory=dict)  # node id -> category (a failure stays)
    counts: dict[str, int] = field(default_factory=dict)  # category -> reports, as pytest's summary counts
    raised_in: dict[str, str] = field(default_factory=dict)  # node id -> the file an undeclared skip came from
    plugins: list[str] = field(default_factory=list)  # where plugins registered after its start came from

    def count(self, *categories: str) -> int:
        return sum(self.counts.get(c, 0) for c in categories)


@dataclass
class Streamed:
    """What the channel read: its sessions (a pytest run inside another,
    pytester's, is not one of them: ``nested`` counts those), and whether
    it was cut or held lines the plugin never writes (``malformed``: not
    JSON, an event it has no name for, a line of a session after its end)."""

    sessions: list[Session] = field(default_factory=list)
    cut: bool = False
    malformed: int = 0
    nested: int = 0

    @property
    def any(self) -> bool:
        return bool(self.sessions)

    def tests(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for session in self.sessions:
            for test, category in session.tests.items():
                # A test failed in any session stays failed.
                if out.get(test) not in ("failed", "error"):
                    out[test] = category
        return out


def _event(line: object) -> tuple[str, str] | None:
    """The event and session key of a line the plugin could have written."""
    if not isinstance(line, dict) or not isinstance(line.get("s"), str):
        return None
    event = line.get("e")
    if event == "test" and not (isinstance(line.get("id"), str) and isinstance(line.get("cat"), str)):
        return None
    if event == "collected" and not isinstance(line.get("n"), int):
        return None
    if event == "plugin" and not isinstance(line.get("from"), str):
        return None
    return (event, line["s"]) if event in ("start", "collected", "test", "plugin", "end") else None


def parse(data: bytes, cut: bool = False) -> Streamed:
    """The lines the plugin wrote, read into sessions by their key.  A
    session that starts while another is open is nested in it (pytest run
    by a test): kept apart, never judged.  A line of a key that never
    started opens a session of its own (never ended)."""
    streamed = Streamed(cut=cut)
    by_key: dict[str, Session] = {}
    nested: set[str] = set()
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            line = None
        found = _event(line)
        if found is None:
            streamed.malformed += 1
            continue
        event, key = found
        session = by_key.get(key)
        if session is None or event == "start":
            inner = any(not s.ended for s in by_key.values())
            session = by_key[key] = Session(key)
            if inner:
                nested.add(key)
                streamed.nested += 1
            else:
                streamed.sessions.append(session)
            if event == "start":
                continue
        if session.ended:
            streamed.malformed += 1  # its end was already written: by whom?
        elif event == "collected":
            session.collected = line["n"]
        elif event == "plugin":
            if len(session.plugins) < 100:
                session.plugins.append(line["from"])
        elif event == "end":
            session.ended, status = True, line.get("status")
            session.status = status if isinstance(status, int) else None
        else:
            _add_test(session, line)
    return streamed


def _add_test(session: Session, line: dict[str, object]) -> None:
    test, category = str(line["id"]), str(line["cat"])
    session.counts[category] = session.counts.get(category, 0) + 1
    if len(session.tests) < MAX_TESTS and session.tests.get(test) not in ("failed", "error"):
        session.tests[test] = category  # a teardown error after a pass counts as the error
    where = line.get("from")
    if isinstance(where, str) and where:
        session.raised_in[test] = where


class Channel:
    """The pipe and the folder of one gate (``open_channel``)."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="git-parallel-shim-"))
        for name in ("sitecustomize.py", f"{PLUGIN}.py"):
            shutil.copyfile(SHIM / name, self.folder / name)
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.write_fd, True)
        self._chunks: list[bytes] = []
        self._size = 0
        self._cut = False
        self._thread = threading.Thread(target=self._drain, name="gate-results", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 65536):
            if self._size + len(chunk) > MAX_STREAM_BYTES:
                self._cut = True  # read on, kept no more: the gate never blocks on a full pipe
                continue
            self._chunks.append(chunk)
            self._size += len(chunk)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """The entries to lay over the gate's environment ``env``."""
        python_path = [str(self.folder), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
        plugins = [p for p in env.get("PYTEST_PLUGINS", "").split(",") if p.strip() and p.strip() != PLUGIN]
        return {"PYTHONPATH": os.pathsep.join(python_path), "PYTHONSAFEPATH": "1", "GIT_PARALLEL_SAFE_PATH": "1",
                "PYTEST_PLUGINS": ",".join([PLUGIN, *plugins]), FD_ENV: str(self.write_fd)}

    def _close_writer(self) -> None:
        """Kept open while the gate may be started again (``place.execute``
        starts it afresh when its sandbox could not be made); closed once it
        has ended, so that the reading thread sees the pipe's end."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def result(self, timeout: float = 10.0) -> Streamed:
        """What was streamed, once the gate and all it left running ended
        (a process that still holds the pipe after that is given
        ``timeout`` seconds, then the stream is taken as cut)."""
        self._close_writer()
        self._thread.join(timeout)
        return parse(b"".join(self._chunks), cut=self._cut or self._thread.is_alive())

    def close(self) -> None:
        self._close_writer()
        self._thread.join(0)
        if not self._thread.is_alive():
            os.close(self.read_fd)
        remove_tree(self.folder, ignore_errors=True)


def open_channel() -> Channel:
    return Channel()
