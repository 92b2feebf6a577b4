"""``git parallel run``: the agent in every pending (or named) instance.

The engine is ``proc/engine`` (claims under the lock, slots, process groups,
the watchdog, leftovers committed, the record and notes), because ``worker``
and ``run --until-pass`` run agents through it too; this module is the
verb's contract: what it refuses before anything starts, and when it
counts as succeeded (exit 0), and which agent runs which instance (``--agent
NAME=CMD``, ``--split``, ``agents:`` in the config: see ``mix``), assigned in
the record before the engine starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

from gitflow_parallel import errors as E
from gitflow_parallel import mix, model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.names import check_name
from gitflow_parallel.judge import stores
from gitflow_parallel.proc import engine, sandbox
from gitflow_parallel.proc import tmux as tmux_proc
from gitflow_parallel.state.project import Project
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord


def run(project: Project, task: str, argv: list[str], instances: list[str] | None = None,
        timeout: float | None = None, jobs: int | None = None,
        progress: Callable[[Mapping[str, Any]], None] | None = None, tmux: bool = False,
        agent_commands: dict[str, list[str]] | None = None, split: str | None = None,
        allow_tmux_escape: bool = False) -> engine.RunSummary:
    """Run ``argv`` in every selected instance (or each one's agent); returns
    the summary, with a warning when the namespace layer is missing.  A run
    refused before it starts (``claims.refuse_options``; ``--tmux`` under
    Landlock alone without ``allow_tmux_escape``) claims nothing."""
    check_name(task, "task")
    if tmux:
        tmux_proc.require_tmux()  # said first: without tmux nothing else matters
        sandbox.refuse_tmux(project.store.load(task)["config"], allow_tmux_escape)
    argv = assign_agents(project, task, argv, instances, agent_commands or {}, split)
    config = project.store.load(task)["config"]
    stores.refuse_agents_writing(config)  # (a record frozen before it was refused)
    summary = engine.run(project, task, argv, instances=instances, timeout=timeout, jobs=jobs, progress=progress,
                         tmux=tmux)
    said = sandbox.fallback_warning(config)
    return {**summary, "warnings": [said]} if said else summary


def assign_agents(project: Project, task: str, argv: list[str], wanted: list[str] | None,
                  given: dict[str, list[str]], split: str | None) -> list[str]:
    """Record which agent runs each selected instance; returns the command
    the summary names.  A plain ``-- CMD`` runs CMD everywhere (and clears an
    earlier assignment); ``--agent`` assigns every selected instance by the
    split; with neither, an instance keeps its agent (a retry runs the same
    one) and the others get the config's ``agents:`` by its split."""
    check_name(task, "task")
    if argv and (given or split):
        raise ParallelError(E.EXECUTE_FAILED, "give the agents as --agent NAME=CMD (with --split) or one command "
                            "after --, not both", hint=f"`git parallel run {task} --agent a=CMD --agent b=CMD "
                            "--split a:2,b:1`")
    record = project.store.load(task)
    configured = record["config"].get("agents") or {}
    commands = given or configured.get("commands") or {}
    chosen = [i for i in record["instances"] if (i["id"] in wanted if wanted else i["status"] == "pending")]
    if argv:
        if any(i.get("agent") for i in chosen):
            _write(project, task, {i["id"]: (None, None) for i in chosen})
        return argv
    todo = chosen if given else [i for i in chosen if not i.get("agent_command")]
    if todo and not commands:
        if split:
            raise ParallelError(E.EXECUTE_FAILED, "--split needs agents to split among",
                                hint="name them with --agent NAME=CMD, or under agents.commands in the config")
        raise ParallelError(E.EXECUTE_FAILED, "no command to run",
                            hint=f"give it after --: `git parallel run {task} -- CMD [ARG...]`, or name agents "
                                 "with --agent NAME=CMD (or under agents: in the config)")
    if not given:  # the frozen config keeps its mappings sorted: agents go by name
        commands = dict(sorted(commands.items()))
    plan = _plan(project, list(commands), todo, split or (None if given else configured.get("split")))
    if plan:
        _write(project, task, {inst_id: (name, commands[name]) for inst_id, name in plan.items()})
    first = next((i.get("agent_command") for i in chosen if i.get("agent_command") and i["id"] not in plan), None)
    return first or (commands[next(iter(plan.values()))] if plan else argv)


def _plan(project: Project, names: list[str], todo: list[InstanceRecord],
          split: str | dict[str, int] | None) -> dict[str, str]:
    """Instance id -> agent name for ``todo``, track by track in id order
    (``split``: as given to ``--split``, or the config's mapping)."""
    if isinstance(split, str):
        split = mix.parse_split(split, names)
    elif split:
        split = dict(sorted(split.items()))
    if isinstance(split, str):  # the one word parse_split lets through: auto
        from gitflow_parallel.state import tally

        weights, floor = mix.auto_weights(names, tally.win_rates(project)), True
    else:
        weights, floor = {n: float(k) for n, k in (split or dict.fromkeys(names, 1)).items()}, False
    plan: dict[str, str] = {}
    for track in dict.fromkeys(i["track"] for i in todo):
        ids = [i["id"] for i in todo if i["track"] == track]
        order = iter(ids)
        for name, k in mix.counts(weights, len(ids), floor).items():
            for _ in range(k):
                plan[next(order)] = name
    return plan


def _write(project: Project, task: str, assignments: dict[str, tuple[str | None, list[str] | None]]) -> None:
    def mutate(record: RunRecord) -> None:
        for inst_id, (name, command) in assignments.items():
            inst = model.find_instance(record, inst_id)
            model.assign_agent(inst, name, command)
            model.bump(inst)

    project.store.update(task, mutate)


def succeeded(summary: Mapping[str, Any]) -> bool:
    """True when every selected instance ran and succeeded, the run was not
    interrupted, and the notes were written."""
    return (not summary["interrupted"] and summary["notes_error"] is None
            and all(r["ran"] and r["status"] == "succeeded" for r in summary["instances"]))
