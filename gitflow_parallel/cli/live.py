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


# -- watch ---------------------------------------------------------------------------
def event_line(e: dict[str, Any]) -> str:
    """One line per event, for a pipe."""
    who = f"{e['instance']}" + (f" ({e['agent']})" if e.get("agent") else "") if "instance" in e else ""
    if e["event"] == "status":
        took = f" after {e['elapsed_s']:g}s" if e["elapsed_s"] is not None and e["status"] != "running" else ""
        return f"{who}: {e['status']}, attempt {e['attempt']}{took}"
    if e["event"] == "verdict":
        return f"{who}: verdict {e['verdict']}"
    if e["event"] == "pick":
        return f"pick: track {e['track']} won by {e['winner']}" + (f" ({e['agent']})" if e["agent"] else "")
    return f"run: {e['status']}"


def view_lines(v: dict[str, Any], width: int) -> list[str]:
    """The table a terminal shows, each line cut to the terminal's width."""
    rows = [("ID", "AGENT", "STATUS", "ATT", "ELAPSED", "VERDICT", "LAST LOG LINE")]
    for i in v["instances"]:
        rows.append((i["id"] + (" *" if i["winner"] else ""), i["agent"] or "-", i["status"], str(i["attempt"]),
                     "-" if i["elapsed_s"] is None else f"{i['elapsed_s']:.0f}s", i["verdict"] or "-",
                     i["last_line"] or ""))
    widths = [max(len(r[k]) for r in rows) for k in range(6)]
    lines = [f"watch {v['task']}  run {v['run_id']}  {v['status']}"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6] for r in rows]
    lines += [f"pick: track {t} won by {w}" for t, w in v["picks"].items()]
    return [line.rstrip()[:max(width - 1, 20)] for line in lines]


class Redraw:
    """Draws the view in place: back to the first line it drew, each line
    cleared and written again, then whatever is left below cleared."""

    def __init__(self) -> None:
        self.shown: list[str] = []

    def __call__(self, lines: list[str]) -> None:
        if lines == self.shown:
            return
        up = f"\x1b[{len(self.shown)}F" if self.shown else ""
        click.echo(up + "".join(f"\x1b[2K{line}\n" for line in lines) + "\x1b[J", nl=False)
        self.shown = lines


@main_group.command()
@click.argument("task")
@json_option
def watch(task: str, as_json: bool) -> None:
    """A live view of every instance of TASK's run: status, agent, attempt,
    elapsed time, verdict as the checks finish, the last line of its
    agent's log, and the pick when it happens.  On a terminal the view is
    redrawn in place; piped, one line per change of state (an instance's
    status or attempt, a verdict, a pick, the run's status); --json, one
    JSON object per such event.  It ends when the run is picked, merged,
    failed or aborted (exit 0), or on Ctrl-C (exit 130)."""
    import shutil
    import sys

    from gitflow_parallel.commands import watch as watch_cmd
    from gitflow_parallel.cli.base import emit_json

    live = sys.stdout.isatty() and not as_json
    draw = Redraw()

    def stream() -> dict[str, Any]:
        last: dict[str, Any] = {}
        for v, events in watch_cmd.watch(_project(), task):
            last = v
            if live:
                draw(view_lines(v, shutil.get_terminal_size().columns))
            for e in events if not live else []:
                if as_json:
                    emit_json({"task": task, **e})
                else:
                    click.echo(event_line(e))
            sys.stdout.flush()
        return {"task": task, "run_id": last.get("run_id"), "status": last.get("status"), "picks": last.get("picks")}

    run_verb(as_json, stream, lambda r: None)  # Ctrl-C: "interrupted", exit 130
