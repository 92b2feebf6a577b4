"""The commands that watch runs, steer them and learn from them: watch,
comment, stats."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb, visible

if TYPE_CHECKING:
    from gitflow_parallel.commands.watch import Event, View
    from gitflow_parallel.shapes.results import CommentResult


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


def _num(value: object, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def render_stats(r: Mapping[str, Any]) -> None:
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

    def render(r: CommentResult) -> None:
        c = r["comment"]
        where = f" on {c['file']}" + (f":{c['line']}" if c["line"] else "") if c["file"] else ""
        click.echo(f"commented{where} on attempt {c['attempt']} of {task}/{instance}"
                   + (f" at {r['commit'][:12]}" if r["commit"] else ""))
        if r.get("warning"):
            click.echo(f"warning: {r['warning']}", err=True)
        click.echo(f"next: git parallel retry {task} {instance} (the agent gets the comments in its feedback)")

    run_verb(as_json, lambda: comment_cmd.comment(_project(), task, instance, text, file=file, line=line), render)


# -- watch ---------------------------------------------------------------------------
def _who(e: Event) -> str:
    return f"{e['instance']}" + (f" ({e['agent']})" if e.get("agent") else "") if "instance" in e else ""


def _stat(d: dict[str, int] | None) -> str:
    return "-" if not d else f"{d['files']} +{d['added']} -{d['removed']}"


def event_line(e: Event) -> str:
    """One line per event, for a pipe."""
    who = _who(e)
    if e["event"] == "status":
        took = f" after {e['elapsed_s']:g}s" if e["elapsed_s"] is not None and e["status"] != "running" else ""
        return f"{who}: {e['status']}, attempt {e['attempt']}{took}"
    if e["event"] == "waiting":
        return f"{who}: waiting for input" + (f": {visible(e['message'])}" if e["message"] else "")
    if e["event"] == "resumed":
        return f"{who}: resumed"
    if e["event"] == "diff":
        return f"{who}: diff {e['files']} file{'s' if e['files'] != 1 else ''}, +{e['added']} -{e['removed']}"
    if e["event"] == "verdict":
        return f"{who}: verdict {e['verdict']}"
    if e["event"] == "pick":
        return f"pick: track {e['track']} won by {e['winner']}" + (f" ({e['agent']})" if e["agent"] else "")
    return f"run: {e['status']}"


KEYS_HELP = "keys: 1-9/up/down select  o open its window  d its diff  a abort it  q quit"


def view_lines(v: View, width: int, selected: str | None = None, message: str = "") -> list[str]:
    """The table a terminal shows, each line cut to the terminal's width;
    with ``selected`` (the keys are on) a ``>`` marks that instance and the
    keys and the last message follow."""
    rows = [("ID", "AGENT", "STATUS", "ATT", "ELAPSED", "DIFF", "VERDICT", "LAST LOG LINE")]
    for i in v["instances"]:
        waiting = i["waiting"]
        rows.append((i["id"] + (" *" if i["winner"] else ""), i["agent"] or "-",
                     "waiting" if waiting else i["status"], str(i["attempt"]),
                     "-" if i["elapsed_s"] is None else f"{i['elapsed_s']:.0f}s", _stat(i["diff"]),
                     i["verdict"] or "-", visible(str((waiting or {}).get("message") or i["last_line"] or ""))))
    widths = [max(len(r[k]) for r in rows) for k in range(7)]
    def mark(r: tuple[str, ...]) -> str:
        return "" if selected is None else "> " if r[0].split()[0] == selected else "  "

    lines = [f"watch {v['task']}  run {v['run_id']}  {v['status']}"]
    lines += [mark(r) + "  ".join(c.ljust(w) for c, w in zip(r[:7], widths)) + "  " + r[7] for r in rows]
    lines += [f"pick: track {t} won by {w}" for t, w in v["picks"].items()]
    if selected is not None:
        lines += [KEYS_HELP] + ([message] if message else [])
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

    def forget(self) -> None:
        """Something else wrote below the view: draw the next one afresh."""
        self.shown = []


class Quit(Exception):
    pass


def _watch_stream(task: str, as_json: bool) -> dict[str, object]:
    import shutil
    import sys

    from gitflow_parallel.cli.base import emit_json
    from gitflow_parallel.cli.steer import Keys, Steering
    from gitflow_parallel.commands import watch as watch_cmd

    live = sys.stdout.isatty() and not as_json
    keyed = live and sys.stdin.isatty()
    draw = Redraw()
    last: View | None = None
    with Keys(keyed) as keys:
        steer = Steering(_project(), task, keys, draw.forget)

        def show(v: View) -> None:
            draw(view_lines(v, shutil.get_terminal_size().columns, steer.selected(v) if keyed else None,
                            steer.message))

        def pause(seconds: float) -> None:
            if keyed:
                shown = last
                assert shown is not None  # watch shows a view before it pauses
                if not steer.handle(keys.read(seconds), shown, lambda: show(shown)):
                    raise Quit
            else:
                time.sleep(seconds)

        try:
            for v, events in watch_cmd.watch(_project(), task, pause=pause):
                last = v
                if live:
                    show(v)
                for e in events if not live else []:
                    if as_json:
                        emit_json({"task": task, **e})
                    else:
                        click.echo(event_line(e))
                sys.stdout.flush()
        except Quit:
            pass
    return {"task": task, "run_id": last["run_id"] if last else None, "status": last["status"] if last else None,
            "picks": last["picks"] if last else None}


@main_group.command()
@click.argument("task")
@json_option
def watch(task: str, as_json: bool) -> None:
    """A live view of every instance of TASK's run: status, agent, attempt,
    elapsed time, its diff against the base so far (files, +added
    -removed, uncommitted work included), whether it waits for input,
    verdict as the checks finish, the last line of its agent's log, and the
    pick when it happens.  On a terminal the view is redrawn in place, and
    keys steer it: 1-9 or the arrows select an instance, o opens its tmux
    window (`attach`), d shows its diff in the pager, a aborts it (after a
    y), q quits.  Piped, one line per change (an instance's status or
    attempt, waiting for input and resumed, a new diff stat, a verdict, a
    pick, the run's status); --json, one JSON object per such event.  It
    ends when the run is picked, merged, failed or aborted (exit 0), on q,
    or on Ctrl-C (exit 130)."""
    run_verb(as_json, lambda: _watch_stream(task, as_json), lambda r: None)  # Ctrl-C: "interrupted", exit 130
