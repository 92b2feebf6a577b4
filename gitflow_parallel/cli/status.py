"""``git parallel status``, the verb people type to look: run without
click when its arguments are the plain forms (``status``, ``status TASK``,
either with ``--json``), so it starts in the time Python and the records
take (click alone costs about 30 ms to import).  Any other form (``-h``,
an unknown option, ``--``) goes to the parser as every verb does; both
routes run ``show`` below, so they say the same."""

from __future__ import annotations

from gitflow_parallel.cli.verb import project, run_verb


def plain_form(args: list[str]) -> tuple[str | None, bool] | None:
    """(TASK or None, --json) when ``args`` is ``status [TASK] [--json]`` in
    any order, --json at most once; else None (the parser's to read)."""
    if args[:1] != ["status"]:
        return None
    rest = [a for a in args[1:] if a != "--json"]
    if len(args) - 1 - len(rest) > 1 or len(rest) > 1 or any(a.startswith("-") for a in rest):
        return None
    return (rest[0] if rest else None), len(rest) < len(args) - 1


def show(task: str | None, as_json: bool) -> None:
    """The verb: without TASK the list of runs, with it a table of its
    instances (``--json``: the record, each instance with its live view)."""
    from gitflow_parallel.cli.render import render_runs, render_status
    from gitflow_parallel.commands import status as status_cmd

    def live() -> dict[str, object]:  # each instance with its live view (``shapes.results.StatusResult``)
        assert task is not None
        result = status_cmd.status(project(), task)
        instances: list[dict[str, object]] = [
            {**inst, "live": {"tip": row["tip"], "evidence": row["evidence_state"], "flags": row["flags"],
                               "sandbox": row["sandbox"]}}
            for inst, row in zip(result["run"]["instances"], result["rows"])]
        return {"run": {**result["run"], "instances": instances}, "base_tip": result["base_tip"]}

    if task is None:
        run_verb(as_json, lambda: status_cmd.status(project()), render_runs)
    elif as_json:
        run_verb(as_json, live)
    else:
        run_verb(as_json, lambda: status_cmd.status(project(), task), render_status)
