"""The ``notify:`` key and the events its command reads.

``notify`` names a command (argv, never a shell) that git-parallel starts
once per event, with the event as one line of JSON on its stdin, in the
top folder of the repository and with the scrubbed environment of every
command (``environ.for_command``); ``proc/notifier`` starts it.  It only
tells: it never changes a verdict, a status or an exit code, and one that
fails or outlives its ``timeout`` is a warning.

Every event carries ``v`` (the format, 1), ``kind``, ``ts``, ``task``,
``run_id`` and ``base`` (the base ref); the kinds add:

- ``attempt_finished`` (``run``): ``instance``, ``track``, ``attempt``,
  ``agent``, ``status`` (succeeded, failed, aborted), ``exit_code``,
  ``commit`` (the attempt's tip), ``duration_s``, ``error``.
- ``waiting`` (``run``, when a running attempt turns to waiting for input,
  once per spell: see ``proc/waiting``): ``instance``, ``track``,
  ``attempt``, ``agent``, ``source`` (``terminal``: seen by the runner under
  ``--tmux``; ``agent``: the agent's own event), ``message`` (the pane's last
  line, or the agent's message), ``since``.
- ``gates_failed`` (``check``, a pack whose verdict is fail): ``instance``,
  ``track``, ``attempt``, ``verdict``, ``commit``, ``failed`` (the enforced
  gates that did not pass).
- ``all_done`` (``run``, when no attempt of the run is pending or running
  any more): ``counts`` (by status) and ``instances`` (``instance``,
  ``status``, ``attempt``, ``commit`` each).
- ``landed`` (``merge``): ``commit`` (what the base now points at),
  ``previous``, ``winners`` (``track``, ``instance``, ``attempt``,
  ``commit`` each).

New fields may appear in version 1; a reader ignores those it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from gitflow_parallel.argv import to_argv
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.schema import Invalid
from gitflow_parallel.files import canonical_json, utcnow
from gitflow_parallel.model import InstanceRecord, MergeRecord, RunRecord, Winner
from gitflow_parallel.shapes.pack import EvidencePack

VERSION = 1
KINDS = ("attempt_finished", "waiting", "gates_failed", "all_done", "landed")
DEFAULT_TIMEOUT = 10
MAX_TIMEOUT = 300  # a notification that needs longer is a job, not a notification


def validate_config(value: object, fail: Callable[[str, str], ParallelError]) -> dict[str, object] | None:
    """The ``notify:`` key: a command alone, or ``command`` and ``timeout``."""
    if value is None:
        return None
    if isinstance(value, (str, list)):
        value = {"command": value}
    if not isinstance(value, dict) or set(value) - {"command", "timeout"} or "command" not in value:
        raise fail("notify", "must be a command, or a mapping with command and timeout")
    timeout = value.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT:
        raise fail("notify.timeout", f"must be a number of seconds above 0 and at most {MAX_TIMEOUT}, got {timeout!r}")
    try:
        command = to_argv(value["command"])
    except Invalid as exc:
        raise fail("notify.command", str(exc)) from None
    return {"command": command, "timeout": timeout}


def encode(event: Mapping[str, object]) -> bytes:
    """One line of JSON, as the command reads it on stdin."""
    return (canonical_json(event) + "\n").encode("ascii")


def _event(kind: str, record: RunRecord, **fields: object) -> dict[str, object]:
    return {"v": VERSION, "kind": kind, "ts": utcnow(), "task": record["task"], "run_id": record["run_id"],
            "base": record["base"]["ref"], **fields}


def attempt_finished(record: RunRecord, inst: InstanceRecord, exit_code: int | None,
                     duration_s: float | None, error: str | None) -> dict[str, object]:
    return _event("attempt_finished", record, instance=inst["id"], track=inst["track"], attempt=inst["attempt"],
                  agent=inst.get("agent"), status=inst["status"], exit_code=exit_code, commit=inst.get("head"),
                  duration_s=duration_s, error=error)


def waiting(record: RunRecord, inst: InstanceRecord, said: Mapping[str, object]) -> dict[str, object]:
    return _event("waiting", record, instance=inst["id"], track=inst["track"], attempt=inst["attempt"],
                  agent=inst.get("agent"), source=said.get("source"), message=said.get("message"),
                  since=said.get("ts"))


def gates_failed(record: RunRecord, inst: InstanceRecord, pack: EvidencePack) -> dict[str, object]:
    failed = [g["name"] for g in pack["gates"] if g["mode"] == "enforced" and not g["passed"]]
    return _event("gates_failed", record, instance=inst["id"], track=inst["track"], attempt=pack["attempt"],
                  verdict=pack["verdict"], commit=pack["commit"], failed=failed)


def all_done(record: RunRecord) -> dict[str, object] | None:
    """The event once no attempt of the run is pending or running, else None."""
    instances = record["instances"]
    if any(i["status"] in ("pending", "running") for i in instances):
        return None
    counts: dict[str, int] = {}
    for inst in instances:
        counts[inst["status"]] = counts.get(inst["status"], 0) + 1
    return _event("all_done", record, counts=counts, instances=[
        {"instance": i["id"], "status": i["status"], "attempt": i["attempt"], "commit": i.get("head")}
        for i in instances])


def landed(record: RunRecord, merge: MergeRecord, winners: list[Winner]) -> dict[str, object]:
    return _event("landed", record, commit=merge["landed"], previous=merge.get("previous"), winners=[
        {"track": pick["track"], "instance": inst["id"], "attempt": inst["attempt"], "commit": inst.get("head")}
        for pick, inst in winners])
