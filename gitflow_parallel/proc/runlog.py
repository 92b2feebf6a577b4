"""An agent's run log, capped: its output reaches the log through a pipe
this process drains, so that no attempt can fill the disk its siblings'
commits and verdicts are written to.

Past ``run_log_bytes`` (frozen in the run's config) the log keeps its
start and its end, the parts a reader wants (what the agent set out to do,
how it ended): the first half of the cap goes to the log as written; what
follows is written in turn to two side files of a quarter of the cap each
(``<log>.tail-0``, ``<log>.tail-1``, the older emptied when the newer
fills), so neither memory nor disk ever holds more than the cap.  When the
output ends, a line saying how many bytes were left out and the kept end
are appended to the log and the side files removed.  A ``run`` killed
meanwhile leaves the start in the log and the end in the side files.
"""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path

CHUNK = 1 << 16
DEFAULT_LIMIT = 64 << 20  # as config_schema's default


class CappedLog:
    """The writing end of a log capped at ``limit`` bytes of what it is given."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.head_room = limit - limit // 2
        self.segment = max(1, (limit // 2) // 2)
        self.tails = [Path(f"{path}.tail-0"), Path(f"{path}.tail-1")]
        self.current: int | None = None  # the side file being written, once the head is full
        self.current_fd: int | None = None
        self.current_len = 0
        self.left_out = 0

    def write(self, data: bytes) -> None:
        if self.head_room:
            part, data = data[:self.head_room], data[self.head_room:]
            _write_all(self.fd, part)
            self.head_room -= len(part)
        while data:
            if self.current_fd is None or self.current_len == self.segment:
                self._next_segment()
            assert self.current_fd is not None
            part, data = data[:self.segment - self.current_len], data[self.segment - self.current_len:]
            _write_all(self.current_fd, part)
            self.current_len += len(part)

    def _next_segment(self) -> None:
        if self.current_fd is not None:
            os.close(self.current_fd)
        self.current = 0 if self.current is None else 1 - self.current
        target = self.tails[self.current]
        try:
            self.left_out += target.stat().st_size  # the older end, now superseded
        except FileNotFoundError:
            pass
        self.current_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.current_len = 0

    def close(self) -> int:
        """Append the kept end after a line saying what was left out; the
        number of bytes left out (0 when the output fit)."""
        if self.current_fd is None:
            os.close(self.fd)
            return 0
        os.close(self.current_fd)
        assert self.current is not None
        older, newer = self.tails[1 - self.current], self.tails[self.current]
        keep = self.limit // 2
        older_size = older.stat().st_size if older.exists() else 0
        from_older = max(0, min(older_size, keep - self.current_len))
        self.left_out += older_size - from_older
        if self.left_out:
            _write_all(self.fd, (f"\n[git-parallel: {self.left_out:,} bytes of this log were left out here: "
                                 f"it reached its cap of {self.limit:,} bytes (run_log_bytes)]\n").encode())
        _copy(older, older_size - from_older, self.fd)
        _copy(newer, 0, self.fd)
        os.close(self.fd)
        for tail in self.tails:
            tail.unlink(missing_ok=True)
        return self.left_out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _copy(path: Path, offset: int, out: int) -> None:
    """Copy ``path`` from ``offset`` on into ``out``, a chunk at a time."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        while chunk := os.read(fd, CHUNK):
            _write_all(out, chunk)
    finally:
        os.close(fd)


class Pump:
    """A thread draining a pipe into a ``CappedLog``; ``fd`` is the pipe's
    writing end, for the agent (closed here once it has its copy)."""

    def __init__(self, path: Path, limit: int) -> None:
        self.log = CappedLog(path, limit)
        self.read_fd, self.fd = os.pipe2(os.O_CLOEXEC)
        self.stopping = threading.Event()
        self.left_out = 0
        self.thread = threading.Thread(target=self._drain, name=f"log {path.name}", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        try:
            while not self.stopping.is_set():
                ready, _, _ = select.select([self.read_fd], [], [], 0.2)
                if not ready:
                    continue
                chunk = os.read(self.read_fd, CHUNK)
                if not chunk:
                    return
                self.log.write(chunk)
        except OSError:  # the disk is full, or the pipe went: the agent's output is lost, not its siblings' work
            return
        finally:
            os.close(self.read_fd)
            try:
                self.left_out = self.log.close()
            except OSError:
                pass

    def started(self) -> None:
        """The agent holds its own copy of the writing end now."""
        os.close(self.fd)

    def finish(self, timeout: float = 10.0) -> int:
        """Wait until the output ended (every writer gone), at most
        ``timeout`` seconds (a process that escaped the agent's group may
        hold the pipe): the bytes left out of the log."""
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.stopping.set()  # (a writer still holds the pipe: what it writes from now on is not kept)
            self.thread.join()
        return self.left_out


def main(argv: list[str]) -> int:
    """``runlog.py LOG LIMIT``: standard input into a capped log (what a
    tmux pane's ``pipe-pane`` runs: its output is written by tmux, not
    through ``run``'s pipe).  Standard library only: run with ``python -I``."""
    import sys

    log = CappedLog(Path(argv[0]), int(argv[1]))
    try:
        while chunk := os.read(sys.stdin.fileno(), CHUNK):
            log.write(chunk)
    finally:
        log.close()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
