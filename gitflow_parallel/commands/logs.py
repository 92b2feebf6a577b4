"""``git parallel logs``: an agent's or a gate's log of one attempt, or
``--follow`` while it is written."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator, TypedDict


from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import LOG_TAIL_BYTES, cut_notice
from gitflow_parallel.state.project import Project, instance_process_alive
from gitflow_parallel.model import find_instance
from gitflow_parallel.state.view import log_path, open_view



class LogInfo(TypedDict):
    """Which log of an attempt, and where its bytes came from (``file``, ``ref``)."""
    task: str
    run_id: str
    instance: str
    attempt: int
    which: str
    path: str
    source: str


class LogText(LogInfo):
    """``logs``: the log, as text."""
    text: str

def _read(project: Project, task: str, inst_id: str, gate: str | None) -> tuple[LogInfo, bytes]:
    view = open_view(project, task)
    inst = view.instance(inst_id)
    path = log_path(view, inst, gate)
    data, source = view.log(inst, path)
    if data is None:
        raise ParallelError(E.EVIDENCE_MISSING, f"the log {path} is gone, and no evidence ref keeps it",
                            hint="logs live under <common>/parallel/logs/ and on refs/parallel/evidence/")
    return {"task": task, "run_id": view.record["run_id"], "instance": inst_id, "attempt": inst["attempt"],
            "which": f"gate {gate}" if gate else "agent", "path": path, "source": source}, data


def logs(project: Project, task: str, inst_id: str, gate: str | None = None) -> LogText:
    """The log as text (bytes that are not UTF-8 replaced)."""
    info, data = _read(project, task, inst_id, gate)
    return {**info, "text": data.decode("utf-8", "replace")}


def raw(project: Project, task: str, inst_id: str, gate: str | None = None) -> bytes:
    """The log's bytes, exactly as the agent or gate wrote them (its last
    ``LOG_TAIL_BYTES``, after a line saying so, if it is longer)."""
    return _read(project, task, inst_id, gate)[1]


def follow(project: Project, task: str, inst_id: str, gate: str | None = None,
           poll: float = 0.2) -> Iterator[bytes]:
    """The agent's log as it grows, until its instance stops running."""
    view = open_view(project, task)
    inst = view.instance(inst_id)
    path = Path(log_path(view, inst, gate))
    # Start at most a tail's length from the end, and read a tail's length at a time: the file may be huge.
    try:
        offset = max(0, path.stat().st_size - LOG_TAIL_BYTES)
    except OSError:
        offset = 0
    if offset:
        yield cut_notice(offset)

    def more() -> bytes:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read(LOG_TAIL_BYTES)
        except FileNotFoundError:
            return b""

    while True:
        chunk = more()
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if view.shared:
            current, alive = inst, instance_process_alive(inst)
        else:
            record = project.store.load(task)
            current = find_instance(record, inst_id)
            alive = project.instance_alive(record, current)  # (its claim held: a runner elsewhere)
        if current["status"] != "running" or current["attempt"] != inst["attempt"] or not alive:
            # What it wrote between our last read and its end.
            chunk = more()
            if chunk:
                yield chunk
            return
        time.sleep(poll)
