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

    ended: bool = False
    status: int | None = None
    tests: dict[str, str] = field(default_factory=dict)  # node id -> category (a failure stays)
    counts: dict[str, int] = field(default_factory=dict)  # category -> reports, as pytest's summary counts

    def count(self, *categories: str) -> int:
        return sum(self.counts.get(c, 0) for c in categories)

    def failed(self) -> list[str]:
        return [t for t, c in self.tests.items() if c in ("failed", "error")]


@dataclass
class Streamed:
    """What the channel read: its sessions, and whether it was cut or
    held lines that are not the plugin's."""

    sessions: list[Session] = field(default_factory=list)
    cut: bool = False
    malformed: int = 0

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


def parse(data: bytes, cut: bool = False) -> Streamed:
    """The lines the plugin wrote, read into sessions.  A test line before
    any start line opens a session of its own (not ended)."""
    streamed = Streamed(cut=cut)
    for raw in data.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            streamed.malformed += 1
            continue
        if not isinstance(line, dict):
            streamed.malformed += 1
            continue
        event = line.get("e")
        if event == "start":
            streamed.sessions.append(Session())
        elif event == "test" and isinstance(line.get("id"), str) and isinstance(line.get("cat"), str):
            if not streamed.sessions or streamed.sessions[-1].ended:
                streamed.sessions.append(Session())
            session = streamed.sessions[-1]
            session.counts[line["cat"]] = session.counts.get(line["cat"], 0) + 1
            if len(session.tests) < MAX_TESTS and session.tests.get(line["id"]) not in ("failed", "error"):
                session.tests[line["id"]] = line["cat"]  # a teardown error after a pass counts as the error
        elif event == "end" and streamed.sessions and not streamed.sessions[-1].ended:
            status = line.get("status")
            streamed.sessions[-1].ended = True
            streamed.sessions[-1].status = status if isinstance(status, int) else None
        else:
            streamed.malformed += 1
    return streamed


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

    def started(self) -> None:
        """The gate has started: only it holds the writing end now."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def result(self, timeout: float = 10.0) -> Streamed:
        """What was streamed, once the gate and all it left running ended
        (a process that still holds the pipe after that is given
        ``timeout`` seconds, then the stream is taken as cut)."""
        self.started()
        self._thread.join(timeout)
        return parse(b"".join(self._chunks), cut=self._cut or self._thread.is_alive())

    def close(self) -> None:
        self.started()
        self._thread.join(0)
        if not self._thread.is_alive():
            os.close(self.read_fd)
        remove_tree(self.folder, ignore_errors=True)


def open_channel() -> Channel:
    return Channel()
