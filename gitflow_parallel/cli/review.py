"""Reviewing attempts and sharing runs: status, diff, show, logs, report,
publish, worker, collect, push, fetch, prune."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb, visible_stream
from gitflow_parallel.cli.render import render_diff, render_published, render_show, render_worker

if TYPE_CHECKING:
    from gitflow_parallel.shapes.results import PublishResult


@main_group.command()
@click.argument("task", required=False)
@json_option
def status(task: str | None, as_json: bool) -> None:
    """Without TASK, list the runs; with TASK, a table of its instances (id,
    track, status, attempt, head, verdict, score, evidence fresh/stale,
    branch, worktree).  --json prints {"ok": true, "run": <record>}."""
    from gitflow_parallel.cli import status as status_verb

    status_verb.show(task, as_json)


@main_group.command()
@click.argument("task")
@click.option("--remote", default="origin", show_default=True, metavar="R", help="The remote to publish to.")
@json_option
def publish(task: str, remote: str, as_json: bool) -> None:
    """Publish a spawned run to remote R: push its instance branches (and
    with them the base commit) and its manifest on refs/parallel/runs/<run_id>
    (the run record: frozen config and sha256, instances, agent command),
    in one atomic push.  Workers (`git parallel worker --remote R`) take
    their instances from there."""
    from gitflow_parallel.commands import publish as publish_cmd

    def render(r: PublishResult) -> None:
        render_published(r)
        if not r["agent"]:
            click.echo(f"next: git parallel run {task} --remote {remote} -- <agent command>")

    run_verb(as_json, lambda: publish_cmd.publish(_project(), task, remote), render)


@main_group.command()
@click.argument("task")
@click.argument("ids", nargs=-1, metavar="[ID]...")
@click.option("--stat", is_flag=True, help="A side-by-side table: files and lines added/removed per attempt.")
@json_option
def diff(task: str, ids: tuple[str, ...], stat: bool, as_json: bool) -> None:
    """Each attempt's change against the run's base (all attempts, or the
    IDs named); with exactly two IDs, the change from the first attempt to
    the second.  --stat prints a table of files with +added -removed per
    attempt instead of the patches."""
    from gitflow_parallel.commands import diff as diff_cmd

    run_verb(as_json, lambda: diff_cmd.diff(_project(), task, list(ids) or None, stat=stat), render_diff)


@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--lines", "lines", type=click.IntRange(0, 10000), default=5, show_default=True,
              help="Last lines of each gate's log to show.")
@json_option
def show(task: str, instance: str, lines: int, as_json: bool) -> None:
    """One attempt: its record, its gates with the last lines of their
    logs, its score, and why it won or lost its track."""
    from gitflow_parallel.commands import show as show_cmd

    run_verb(as_json, lambda: show_cmd.show(_project(), task, instance, lines=lines), render_show)


@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--gate", default=None, metavar="NAME", help="The log of this gate (from the instance's evidence).")
@click.option("--agent", is_flag=True, help="The agent's log (the default).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, while the instance runs.")
@click.option("--raw", is_flag=True, help="The log's bytes as written, control characters included.")
@json_option
def logs(task: str, instance: str, gate: str | None, agent: bool, follow: bool, raw: bool, as_json: bool) -> None:
    """Print an instance's agent log, or with --gate NAME one gate's log:
    from <common>/parallel/logs/, or from its evidence ref where the file is
    not here (a fetched run, a pruned log folder).  Colour sequences are
    dropped; other control characters but tab and newline print as escapes
    (\\x1b) unless --raw."""
    from gitflow_parallel.commands import logs as logs_cmd

    if gate and agent:
        raise click.UsageError("give --gate NAME or --agent, not both")
    if raw and as_json:
        raise click.UsageError("give --raw or --json, not both")

    def write(chunk: bytes) -> None:
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()

    if follow and not as_json:
        def stream() -> None:
            chunks = logs_cmd.follow(_project(), task, instance, gate)
            for chunk in (chunks if raw else (text.encode("utf-8") for text in visible_stream(chunks))):
                write(chunk)

        run_verb(False, stream)
        return
    if raw:
        run_verb(False, lambda: write(logs_cmd.raw(_project(), task, instance, gate)))
        return
    run_verb(as_json, lambda: logs_cmd.logs(_project(), task, instance, gate),
             lambda r: click.echo(r["text"], nl=False))


@main_group.command()
@click.argument("task")
@click.option("--html", "html_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the page here (default: <common>/parallel/reports/<task>-<run_id>.html).")
@json_option
def report(task: str, html_file: str | None, as_json: bool) -> None:
    """Write a self-contained HTML page of TASK's run (no network, no
    external assets, no script): one column per attempt with verdict, score,
    gates and their durations, charts of gate durations and lines changed,
    the pick and why, the landing, and each attempt's highlighted diff."""
    from gitflow_parallel.commands import report as report_cmd

    def render(r: report_cmd.Report) -> None:
        click.echo(f"wrote {r['path']} ({len(r['attempts'])} attempts)")
        click.echo(f"open it: python3 -m webbrowser file://{r['path']}")

    run_verb(as_json, lambda: report_cmd.report(_project(), task, html_file), render)


# -- sharing: push / fetch / prune ------------------------------------------------------
@main_group.command()
@click.argument("remote", default="origin")
@json_option
def push(remote: str, as_json: bool) -> None:
    """Publish the notes and every refs/parallel/ ref (evidence packs and
    logs, run records, archived tips) to REMOTE in one atomic push; notes
    that moved on the remote are merged first (cat_sort_uniq).  Packs and
    records not yet kept in git are committed first.  A ref that says what
    REMOTE's says is skipped; one that diverged from it refuses the push,
    with the two ways out."""
    from gitflow_parallel.commands import push as push_cmd

    def render(r: push_cmd.Pushed) -> None:
        click.echo(f"pushed {len(r['pushed'])} ref(s) to {remote}"
                   + (f" after {r['attempts']} attempts" if r["attempts"] > 1 else ""))
        for name in r["pushed"]:
            click.echo(f"  {name}")
        for name in r["kept_remote"]:
            click.echo(f"  {remote} has it ahead (`git parallel fetch {remote}` brings it): {name}")
        for why in r["skipped"]:
            click.echo(f"warning: not kept in git: {why}", err=True)

    run_verb(as_json, lambda: push_cmd.push(_project(), remote), render)


@main_group.command()
@click.argument("remote", default="origin")
@json_option
def fetch(remote: str, as_json: bool) -> None:
    """Fetch REMOTE's notes and refs/parallel/ refs: the notes are merged
    into yours (cat_sort_uniq), missing or older refs/parallel/ refs are
    fast-forwarded, and `status`, `show`, `diff`, `logs` and `report` can
    then read the runs a teammate pushed."""
    from gitflow_parallel.commands import fetch as fetch_cmd

    def render(r: fetch_cmd.Fetched) -> None:
        click.echo(f"fetched from {remote}: {len(r['updated'])} ref(s) updated")
        for n, how in r["notes"].items():
            click.echo(f"  {n}: {how}")
        for name in r["kept_local"]:
            click.echo(f"  kept yours (ahead of {remote}): {name}")
        for name in r.get("diverged", []):
            click.echo(f"  diverged (each has commits the other lacks; `git parallel push {remote}` says how "
                       f"to settle it): {name}")

    run_verb(as_json, lambda: fetch_cmd.fetch(_project(), remote), render)


@main_group.command()
@click.option("--older-than", "older_than", default="30d", show_default=True, metavar="AGE",
              help="Only runs that finished longer ago than AGE (30d, 12h, 2w, 90m; 0: every finished run).")
@click.option("--dry-run", is_flag=True, help="Print what would be removed and remove nothing.")
@json_option
def prune(older_than: str, dry_run: bool, as_json: bool) -> None:
    """Remove the archive, evidence and run refs (local and fetched copies)
    of finished runs older than AGE, printing each.  A live run's refs are
    never removed; notes and files under parallel/ are kept."""
    from gitflow_parallel.commands import prune as prune_cmd

    def render(r: prune_cmd.Pruned) -> None:
        verb = "would remove" if r["dry_run"] else "removed"
        for e in r["removed"]:
            click.echo(f"{verb} {len(e['refs'])} ref(s) of run {e['run_id']} ({e['task'] or '?'}, {e['status']})")
            for name in e["refs"]:
                click.echo(f"  {name}")
        live = sum(1 for k in r["kept"] if k["why"] == "live")
        click.echo(f"{verb} {r['count']} ref(s); kept {len(r['kept'])} run(s) ({live} live)")

    run_verb(as_json, lambda: prune_cmd.prune(_project(), older_than, dry_run=dry_run), render)


@main_group.command()
@click.option("--remote", default="origin", show_default=True, metavar="R", help="The remote runs are published to.")
@click.option("--task", default=None, metavar="T", help="Only instances of task T.")
@click.option("--once", is_flag=True, help="Take at most one instance, then exit.")
@click.option("--max", "max_instances", type=click.IntRange(1, 10000), default=None, metavar="N",
              help="Take at most N instances, then exit.")
@click.option("--instance", default=None, metavar="ID", help="Take only instance ID of T's newest run (needs --task).")
@click.option("--index", type=click.IntRange(0, 10000), default=None, metavar="K",
              help="Take only the K-th instance (from 0) of T's newest run, as a Kubernetes Indexed Job's "
                   "JOB_COMPLETION_INDEX counts (needs --task).")
@click.option("--lease", "lease_s", type=click.FloatRange(min=1.0), default=120.0, show_default=True, metavar="S",
              help="Seconds a claim holds without renewal; renewed every S/3 while the instance runs.")
@click.option("--wait", is_flag=True,
              help="While instances are held by other workers (or the run has no agent command yet), wait, "
                   "and take over claims whose lease expires (implied by --instance and --index).")
@click.option("--name", default=None, metavar="NAME", help="The worker's name in claims (default: HOST:PID).")
@json_option
def worker(remote: str, task: str | None, once: bool, max_instances: int | None, instance: str | None,
           index: int | None, lease_s: float, wait: bool, name: str | None, as_json: bool) -> None:
    """Take instances of runs published to remote R and do them here: claim
    one (an atomic push that fails if another worker holds it), run the
    manifest's agent command in a worktree of this clone, commit leftovers,
    run the gates in a clean checkout, and deliver branch, evidence and
    notes in one atomic push.  The claim is renewed while it runs; a worker
    that dies leaves a claim that expires, and its pushed commits stay
    reachable from the claim.  Exit 0 when every instance it claimed was
    delivered (whatever the agent's own outcome)."""
    from gitflow_parallel.commands import worker as worker_cmd

    def say(text: str) -> None:
        if not as_json:
            click.echo(f"git parallel worker: {text}", err=True)

    run_verb(as_json, lambda: worker_cmd.work(_project(), remote, task=task, once=once, max_instances=max_instances,
                                              instance=instance, index=index, lease_s=lease_s, wait=wait,
                                              name=name, progress=say),
             render_worker, ok=lambda r: all(row.get("delivered") for row in r["instances"]))


@main_group.command()
@click.argument("task")
@click.option("--remote", default=None, metavar="R", help="The remote (default: the one the run was published to).")
@json_option
def collect(task: str, remote: str | None, as_json: bool) -> None:
    """Fetch what workers delivered for TASK's run: each finished attempt
    becomes succeeded or failed here, its evidence bound to the pushed
    commit and its branch moved there; this run's note lines are copied.
    Says which instances are still claimed, by which worker, and for how
    long.  Then pick and merge as usual (merge re-proves the landing)."""
    from gitflow_parallel.commands import collect as collect_cmd

    def render(r: collect_cmd.Collected) -> None:
        click.echo(f"collected run {r['run_id']} of {r['task']} from {r['remote']}")
        for row in r["instances"]:
            verdict = f" {row['verdict']}" if row.get("verdict") else ""
            click.echo(f"  {row['id']:<8} {row['status']}{verdict:<6} {row['claim']}")
            for t in row["takeovers"]:
                click.echo(f"           taken over from {t['worker']} ({t['state']}; its work: "
                           f"{(t.get('work') or 'none')[:12]})")
            if row.get("problem"):
                click.echo(f"           not taken: {row['problem']}")
        if r["pending"]:
            click.echo(f"pending: {', '.join(r['pending'])}; collect again when the workers are done")
        elif not r["next"][0].startswith("git parallel pick"):
            click.echo("no attempt passed: nothing can be picked")
        for step in [] if r["pending"] else r["next"]:
            click.echo(f"next: {step}")

    run_verb(as_json, lambda: collect_cmd.collect(_project(), task, remote), render)
