"""The test report a gate with ``expect:`` writes, and its verdict
(``expect`` owns the rule; this module owns the file).

The report goes to a fresh folder outside the judged checkout and outside
the repository, made just before the gate runs and removed after it is
read: a report the attempt committed, or one an earlier gate left, cannot
stand in for the run.  The folder is the only place past the checkout that
the gate's fence lets it write (``place.execute``'s ``writable``).
"""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gitflow_parallel import expect
from gitflow_parallel.files import remove_tree
from gitflow_parallel.proc import sandbox
from gitflow_parallel.config_schema import GateConfig
from gitflow_parallel.shapes.pack import ExpectResult

MAX_REPORT_BYTES = 64 * 1024 * 1024  # past this a report is not read


@contextmanager
def report_file(gate: GateConfig) -> Iterator[Path | None]:
    """Where the gate writes its report (None: it declares no ``expect``)."""
    if not gate.get("expect"):
        yield None
        return
    folder = sandbox.private_tmp("git-parallel-report-")  # hidden from every other sandboxed command
    try:
        yield folder / "report.xml"
    finally:
        remove_tree(folder, ignore_errors=True)


def command(gate: GateConfig, report: Path | None) -> tuple[list[str], dict[str, str]]:
    """The gate's argv, and the env entries to lay over its environment."""
    if report is None:
        return list(gate["run"]), {}
    return expect.substitute(gate, str(report))


def _read(report: Path) -> bytes | None:
    """The report's bytes: a regular file, no symlink followed, not huge."""
    try:
        fd = os.open(report, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO would block
    except OSError:
        return None
    with open(fd, "rb", closefd=True) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_REPORT_BYTES:
            return None
        return handle.read()


def judged(gate: GateConfig, report: Path | None) -> ExpectResult | None:
    """What the report says of the gate's ``expect`` (None: it declares
    none); ``judge/outcome`` weighs it with the rest."""
    if report is None:
        return None
    return expect.judge(gate["expect"], _read(report))  # report_file made one: the gate has expect
