"""Several agents in one run: their names and commands, and how a run's
instances are split among them.

An agent is a name and a command (``--agent NAME=CMD`` on ``run``, or
``agents.commands`` in ``.gitparallel.yaml``).  A split says how many
instances each agent gets (``--split a:2,b:1``, ``agents.split``), handed
out in the split's order (the config's by agent name); its numbers are weights: when they add up to the number of instances being run
they are exact, otherwise each agent gets its proportional share, the
instances left over going to the largest remainders (ties to the agent named
first).  ``auto`` weighs agents by their win rate in this repository
(``state/tally``) with a floor of one instance each: every agent runs at
least once, so one that never ran here still gets its chance.

Pure data, no repository: ``config`` validates the ``agents:`` key through
:func:`validate_config`, ``commands/run`` assigns with :func:`counts`.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.argv import to_argv
from gitflow_parallel.names import check_name
from gitflow_parallel.schema import Invalid

AUTO = "auto"


def parse_agent(spec: str) -> tuple[str, list[str]]:
    """``NAME=CMD`` of ``--agent``: the name and the command split like a shell would (never run by one)."""
    name, sep, command = spec.partition("=")
    if not sep or not command.strip():
        raise ParallelError(E.EXECUTE_FAILED, f"--agent {spec!r} is not NAME=CMD",
                            hint="e.g. --agent claude='claude -p {feedback}' --agent codex='codex exec'")
    check_name(name, "agent")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ParallelError(E.EXECUTE_FAILED, f"--agent {name}: cannot split its command: {exc}",
                            hint="quote it as a shell would") from None
    return name, argv


def parse_split(spec: str, known: list[str]) -> dict[str, int] | str:
    """``a:2,b:1`` (or ``auto``) of ``--split``, each name one of ``known``."""
    if spec.strip() == AUTO:
        return AUTO
    out: dict[str, int] = {}
    for part in spec.split(","):
        name, sep, k = part.strip().partition(":")
        if not sep or not k.strip().isdigit():
            raise ParallelError(E.EXECUTE_FAILED, f"--split {spec!r}: {part.strip()!r} is not NAME:K",
                                hint="e.g. --split claude:2,codex:1 (or --split auto)")
        out[name] = int(k)
    return check_split(out, known, "--split")


def check_split(split: dict[str, int], known: list[str], where: str) -> dict[str, int]:
    unknown = [n for n in split if n not in known]
    if unknown:
        raise ParallelError(E.EXECUTE_FAILED, f"{where} names agent(s) {', '.join(unknown)} that are not given",
                            hint=f"the agents are: {', '.join(known) or 'none'} (--agent NAME=CMD or agents.commands)")
    if not any(split.values()):
        raise ParallelError(E.EXECUTE_FAILED, f"{where} gives no agent any instance",
                            hint="give at least one agent a count above 0")
    return split


def counts(weights: dict[str, float], n: int, floor: bool = False) -> dict[str, int]:
    """``n`` instances shared by ``weights`` (in their order): with ``floor``
    one each first (to the first ``n`` when there are fewer), then one at a
    time to the agent furthest below its proportional share, ties to the one
    named first.  Weights that are all 0 share evenly."""
    names = list(weights)
    out = {name: 0 for name in names}
    for name in names[:n] if floor else []:
        out[name] = 1
    total = sum(weights.values())
    share = {name: n * (weights[name] / total if total else 1 / len(names)) for name in names}
    while sum(out.values()) < n:
        best = max(names, key=lambda name: (share[name] - out[name], -names.index(name)))
        out[best] += 1
    return out


def auto_weights(names: list[str], win_rates: dict[str, float]) -> dict[str, float]:
    """``--split auto``: the agents ordered by win rate here (best first, then
    as given); an agent with no attempts here weighs 0 (it gets the floor)."""
    rate = {name: win_rates.get(name, 0.0) for name in names}
    ordered = sorted(names, key=lambda name: (-rate[name], names.index(name)))
    return {name: rate[name] for name in ordered}


def validate_config(value: object, fail: Callable[[str, str], ParallelError]) -> dict[str, object] | None:
    """The ``agents:`` key: ``commands`` (name: command) and ``split``
    (name: count, or ``auto``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) - {"commands", "split"}:
        raise fail("agents", "must be a mapping with keys commands and split")
    commands = value.get("commands")
    if not isinstance(commands, dict) or not commands:
        raise fail("agents.commands", "must map agent names to commands")
    out: dict[str, Any] = {"commands": {}, "split": None}
    for name, command in commands.items():
        try:
            check_name(str(name), "agent")
        except ParallelError as exc:
            raise fail(f"agents.commands.{name}", exc.message) from None
        try:
            out["commands"][str(name)] = to_argv(command)
        except Invalid as exc:
            raise fail(f"agents.commands.{name}", str(exc)) from None
    split = value.get("split")
    if split == AUTO or split is None:
        out["split"] = split
    elif isinstance(split, dict) and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0
                                         for k in split.values()):
        try:
            out["split"] = check_split({str(k): v for k, v in split.items()}, list(out["commands"]), "agents.split")
        except ParallelError as exc:
            raise fail("agents.split", exc.message) from None
    else:
        raise fail("agents.split", f"must be {AUTO} or a mapping of agent names to counts (integers >= 0)")
    return out
