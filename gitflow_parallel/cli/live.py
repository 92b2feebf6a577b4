"""The commands that watch runs, steer them and learn from them: watch,
comment, stats."""

from __future__ import annotations

from typing import Any

import click

from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb


@main_group.command()
@click.option("--since", default=None, metavar="DATE", help="Only runs created on or after DATE (2026-01-31).")
@json_option
def stats(since: str | None, as_json: bool) -> None:
    """Which agent wins here: per agent, over the runs this clone knows
    (live, finished, and fetched from teammates), its attempts, pass rate,
    win rate (attempts its track's pick chose, over its attempts), median
    time to pass, median lines changed against the base, and median retries
    before a pass.  `run --split auto` gives more instances to the agents
    with the higher win rate."""
    from gitflow_parallel.commands import stats as stats_cmd

    run_verb(as_json, lambda: stats_cmd.stats(_project(), since), render_stats)


def _num(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def render_stats(r: dict[str, Any]) -> None:
    if not r["agents"]:
        click.echo("no finished attempts yet" + (f" since {r['since']}" if r["since"] else ""))
        return
    header = ("AGENT", "RUNS", "ATTEMPTS", "PASS", "WIN", "TIME TO PASS", "LINES", "RETRIES")
    rows = [header] + [(a["agent"], str(a["runs"]), str(a["attempts"]), f"{a['pass_rate']:.0%}",
                        f"{a['win_rate']:.0%}", _num(a["median_time_to_pass_s"], "s"),
                        _num(a["median_lines_changed"]), _num(a["median_retries_to_pass"]))
                       for a in r["agents"]]
    widths = [max(len(x[i]) for x in rows) for i in range(len(header))]
    for x in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())
    click.echo(f"({r['runs']} run(s){' since ' + r['since'] if r['since'] else ''}; medians over the "
               "attempts that have the figure)")


@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.argument("text")
@click.option("--file", "file", default=None, metavar="F", help="The file the comment is about (as `git diff` names it).")
@click.option("--line", "line", type=int, default=None, metavar="L", help="With --file: the line it is about.")
@json_option
def comment(task: str, instance: str, text: str, file: str | None, line: int | None, as_json: bool) -> None:
    """Keep a review comment on INSTANCE's current attempt: in the run
    record and as a note line on its commit.  `retry` puts the comments on
    the attempt it replaces in the next agent's feedback, beside the gates
    that failed; `show` and the report list them."""
    from gitflow_parallel.commands import comment as comment_cmd

    def render(r: dict[str, Any]) -> None:
        c = r["comment"]
        where = f" on {c['file']}" + (f":{c['line']}" if c["line"] else "") if c["file"] else ""
        click.echo(f"commented{where} on attempt {c['attempt']} of {task}/{instance}"
                   + (f" at {r['commit'][:12]}" if r["commit"] else ""))
        if r.get("warning"):
            click.echo(f"warning: {r['warning']}", err=True)
        click.echo(f"next: git parallel retry {task} {instance} (the agent gets the comments in its feedback)")

    run_verb(as_json, lambda: comment_cmd.comment(_project(), task, instance, text, file=file, line=line), render)
