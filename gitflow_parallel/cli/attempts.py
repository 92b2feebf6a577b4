"""The verbs that make and run the attempts of a task: init, spawn, run,
attach, done, retry, abort, cleanup.  Judging and landing them (check,
pick, unpick, merge) is ``cli/landing``."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Mapping

import click

from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb

if TYPE_CHECKING:
    from gitflow_parallel.commands.init import InitResult
    from gitflow_parallel.commands.init.explain import InitCheck
    from gitflow_parallel.state.retire import Cleanup
    from gitflow_parallel.flows import Rounds
    from gitflow_parallel.shapes.records import RunRecord
    from gitflow_parallel.shapes.results import AbortResult, PublishResult, SpawnResult


# -- init ---------------------------------------------------------------------------
@main_group.command()
@click.option("--force", is_flag=True, help="Overwrite an existing .gitparallel.yaml with what init finds now.")
@click.option("--display", is_flag=True,
              help="Also set notes.displayRef, so plain `git log` prints the notes (every JSON line).")
@click.option("--remote", default=None, metavar="REMOTE",
              help="Add fetch refspecs to REMOTE for the notes and refs/parallel/ (into tracking refs).")
@click.option("--check", "explain", is_flag=True,
              help="Write nothing: explain the worktree's .gitparallel.yaml (what each gate protects, what it "
                   "does not, which fence holds).")
@json_option
def init(force: bool, display: bool, remote: str | None, explain: bool, as_json: bool) -> None:
    """Write a .gitparallel.yaml for the project's test runner and set
    notes.rewriteRef to the notes ref, so notes follow rebases and amends
    (`git log --notes=parallel` shows them; --display makes plain `git log`
    show them too).  Commit the file: spawn reads it from the base commit.

    init recognises pytest, npm/pnpm/yarn test, go test, cargo test and
    make test: the gate names the test folder (which protects it), and
    `setup:` builds the environment in the judged checkout from the
    attempt's own files.  With none found it writes the commented template."""
    from gitflow_parallel.commands import init as init_cmd

    if explain and (force or display or remote):
        raise click.UsageError("--check writes nothing: give it alone (with --json if wanted)")

    def render(r: InitResult) -> None:
        click.echo(f"{'wrote' if r['wrote'] else 'kept existing'} {r['config']}")
        gate, setup = r["gate"], r["setup"]
        if gate:
            found = next(d for d in r["detected"] if d["run"])
            found_in = found["found_in"]
            assert isinstance(found_in, list)  # (a Runner's, as init_cmd.detect made it)
            click.echo(f"found {found['tool']} ({', '.join(found_in)}): gate `{shlex.join(gate)}`"
                       + (f", setup `{shlex.join(setup['run'])}`" if setup else ""))
        else:
            click.echo("found no test runner: the gates in the file are comments; write one naming the tests")
        if not r["wrote"]:
            click.echo("(`git parallel init --force` writes what was found now; `init --check` explains the file)")
        for k, v in r["git_config"].items():
            click.echo(f"git config {k} {v}")
        refspecs = r["refspecs"]
        if refspecs:
            for spec in refspecs[f"remote.{r['remote']}.fetch"]:
                state = "added" if spec in refspecs["added"] else "already there"
                click.echo(f"git config --add remote.{r['remote']}.fetch {spec}  ({state})")
            click.echo(f"share runs with `git parallel push {r['remote']}` and `git parallel fetch {r['remote']}`")
        click.echo("next: review the file, commit it, then `git parallel spawn TASK`")

    if explain:
        run_verb(as_json, lambda: init_cmd.check(_project()), render_init_check, renders_warnings=True)
    else:
        run_verb(as_json, lambda: init_cmd.init(_project(), force=force, display=display, remote=remote), render)


def render_init_check(r: InitCheck) -> None:
    state = "committed" if r["committed"] else "not committed" if r["exists"] else "absent"
    click.echo(f"config: {r['config']} ({state})")
    setup = r["setup"]
    if setup:
        click.echo(f"setup: `{shlex.join(setup['run'])}` in the judged checkout"
                   + (f", reused while {', '.join(setup['cache_key'])} are unchanged" if setup["keep"] else "")
                   + (f"; PATH starts with {', '.join(setup['path'])}" if setup["path"] else ""))
    else:
        click.echo("setup: none (gates run with the tools on PATH)")
    for gate in r["gates"]:
        click.echo(f"gate {gate['name']} ({gate['mode']}{', after setup' if gate['setup'] else ''}): "
                   f"{shlex.join(gate['run'])}")
        click.echo(f"  its run protects: {', '.join(gate['names']) or 'nothing'}")
        if gate["hidden"]:
            click.echo(f"  hidden tests from {gate['hidden']}")
        for w in gate["warnings"]:
            click.echo(f"  warning: {w}")
    sections = "; the test sections of pyproject.toml, setup.cfg, package.json" if r["protect_defaults"] else ""
    click.echo(f"protected for every gate: {', '.join(r['protected'])}{sections}")
    click.echo(f"tests in HEAD: {r['tests']}, not protected: {len(r['unprotected_tests'])}; "
               f"tests an attempt adds: {r['added_tests']}")
    for w in r["warnings"]:
        click.echo(f"warning: {w}")
    click.echo(f"fence: {r['fence']['holds']}: {r['fence']['why']}")


# -- spawn --------------------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.option("-n", "instances", type=click.IntRange(1, 64), default=None,
              help="Instances per track (default: `instances` from the config, 3).")
@click.option("--base", default=None, help="Base branch to start from and land on (default: the current branch).")
@click.option("--track", "tracks", multiple=True, help="A track (sub-task); repeat for fan-out. Default: one track 'main'.")
@click.option("--remote", default=None, metavar="R",
              help="Also publish the run to remote R (its branches and manifest), for `git parallel worker` "
                   "on other machines.")
@json_option
def spawn(task: str, instances: int | None, base: str | None, tracks: tuple[str, ...], remote: str | None,
          as_json: bool) -> None:
    """Create a run for TASK: N branches parallel/TASK/ID at the base commit,
    each with its own worktree, recorded in the common git dir.

    All or nothing: if any branch or worktree cannot be made, everything is
    removed again.  Refused past max_total live instances in the repository."""
    import gc

    from gitflow_parallel.commands import spawn as spawn_cmd

    # What is loaded so far lives until the process ends: the collector
    # need not walk it again, neither while spawning (nor in the forked
    # checkouts, whose pages stay shared) nor at exit, where its walk of
    # everything pygit2, click and YAML made took about 20-35 ms here.
    gc.freeze()

    def render(r: SpawnResult) -> None:
        for w in r.get("warnings") or []:
            click.echo(f"warning: {w}", err=True)
        click.echo(f"spawned run {r['run_id']} for {r['task']} on {r['base']['ref']} at {r['base']['commit'][:12]}")
        for inst in r["instances"]:
            click.echo(f"  {inst['id']:<10} {inst['branch']:<32} {inst['worktree']}")
        if r.get("published"):
            from gitflow_parallel.cli.render import render_published

            render_published(r["published"])
            click.echo(f"next: git parallel run {r['task']} --remote {r['published']['remote']} -- <agent command>")
        else:
            click.echo(f"next: git parallel run {r['task']} -- <agent command>")

    def call() -> SpawnResult:
        if remote is not None:
            from gitflow_parallel.flows import spawn_remote

            return spawn_remote(_project(), task, remote, n=instances, base=base, tracks=list(tracks))
        return spawn_cmd.spawn(_project(), task, n=instances, base=base, tracks=list(tracks))

    try:
        run_verb(as_json, call, render)
    finally:
        gc.freeze()  # (the command's own objects too: the process ends next)


# -- retry / abort / cleanup ------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--revision", type=int, default=None, help="Refuse unless the run is still at this run_revision.")
@click.option("--force", is_flag=True,
              help="Retry a succeeded instance that did not fail its gates, and one whose worktree has "
                   "uncommitted changes (kept on the archive ref first).")
@click.option("--onto-current", is_flag=True,
              help="Start the new attempt from the base branch's current tip instead of the spawn's base; "
                   "on a picked winner that no longer lands, its pick is retired first.")
@click.option("--keep", is_flag=True,
              help="Start the new attempt from this attempt's own tip (iterate on the same work); nothing is reset.")
@json_option
def retry(task: str, instance: str, revision: int | None, force: bool, onto_current: bool, keep: bool,
          as_json: bool) -> None:
    """Start a new attempt of a failed, aborted or gate-failed (verdict fail)
    INSTANCE: its tip is kept under refs/parallel/archive/, its branch and
    worktree are reset to the spawn's base (or the base branch's tip with
    --onto-current, or left at its tip with --keep), and its attempt goes up
    by one (at most rework_max times).  The new attempt's agent gets
    GIT_PARALLEL_FEEDBACK and {feedback}: why this attempt failed.  A
    worktree with uncommitted changes is refused unless --force.  A picked
    winner is retried only with --onto-current (the base moved and it no
    longer lands): that retires its pick in the same step."""
    from gitflow_parallel.commands import retry as retry_cmd
    from gitflow_parallel.model import find_instance

    def render(r: RunRecord) -> None:
        inst = find_instance(r, instance)
        start = inst.get("start") or {}
        where = {"base-tip": f"the current tip of {r['base']['ref']}", "previous-attempt": "its previous tip"}.get(
            start.get("from", ""), "the base")
        click.echo(f"instance {instance} starts attempt {inst['attempt']} from {where} at {(inst['head'] or '')[:12]}")
        prev = inst["history"][-1] if inst["history"] else None
        if prev and prev.get("archive_ref"):
            click.echo(f"previous attempt kept at {prev['archive_ref']}")
        if inst.get("feedback"):
            click.echo(f"feedback for the agent: {inst['feedback']} ($GIT_PARALLEL_FEEDBACK, {{feedback}})")
        click.echo(f"next: git parallel run {task} --instance {instance} -- <agent command>")

    if onto_current and keep:
        raise click.UsageError("--onto-current and --keep exclude each other")
    run_verb(as_json, lambda: retry_cmd.retry(_project(), task, instance, expected_revision=revision, force=force,
                                              onto_current=onto_current, keep=keep), render)


@main_group.command()
@click.argument("task")
@click.argument("instance", required=False)
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (kept on the archive ref first).")
@json_option
def abort(task: str, instance: str | None, force: bool, as_json: bool) -> None:
    """Abort one INSTANCE (stopped and marked aborted; its worktree stays for
    `retry`), or the whole run (every instance aborted, then cleaned up:
    tips archived under refs/parallel/archive/, worktrees and branches removed)."""
    from gitflow_parallel.commands import abort as abort_cmd

    def render(r: AbortResult) -> None:
        what = f"instance {instance}" if instance else f"run {r['run']['run_id']}"
        click.echo(f"aborted {what} of {task}")
        for i in r["stopped"]:
            click.echo(f"  stopped the process of {i}")
        for d in r["removed"]:
            click.echo(f"  removed {d['id']}; tip kept at {d['archived']}")

    run_verb(as_json, lambda: abort_cmd.abort(_project(), task, instance, force=force), render)


@main_group.command()
@click.argument("task")
@click.option("--keep-losers", is_flag=True, help="Remove only the winners' worktrees; keep the losers'.")
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (committed onto the archive ref first).")
@json_option
def cleanup(task: str, keep_losers: bool, force: bool, as_json: bool) -> None:
    """Remove the worktrees and branches of a merged or aborted run.  Every
    tip is first kept under refs/parallel/archive/<run_id>/<id>/<attempt>;
    a worktree with uncommitted changes is refused unless --force."""

    def render(r: Cleanup) -> None:
        for d in r["removed"]:
            extra = f" (uncommitted work committed as {d['dirty_committed'][:12]})" if d["dirty_committed"] else ""
            click.echo(f"removed {d['id']}; tip kept at {d['archived']}{extra}")
        if r["kept"]:
            click.echo(f"kept: {', '.join(r['kept'])}")
        if not r["removed"]:
            click.echo("nothing to remove")

    from gitflow_parallel.commands import cleanup as cleanup_cmd

    run_verb(as_json, lambda: cleanup_cmd.cleanup(_project(), task, keep_losers=keep_losers, force=force),
             render)


@main_group.command()
@click.argument("task")
@click.argument("instance")
@json_option
def done(task: str, instance: str, as_json: bool) -> None:
    """Mark a pending INSTANCE finished by a person (work done by hand in its
    worktree, no `git parallel run`): whatever is uncommitted there is
    committed as `run` would (commit_leftovers), and it becomes succeeded
    with "origin": "hand", ready for check, pick and merge.  (`check` also
    takes pending instances whose branch moved, or that it is given with
    --instance.)"""
    from gitflow_parallel.state import hand

    def render(r: Mapping[str, Any]) -> None:
        extra = f"; leftovers committed as {r['committed'][:12]}" if r["committed"] else ""
        click.echo(f"instance {instance} of {task} finished by hand at {r['instance']['head'][:12]}{extra}")
        click.echo(f"next: git parallel check {task}")

    def finish() -> Mapping[str, Any]:
        from gitflow_parallel.proc import leftovers

        project = _project()
        return hand.done(project, task, instance, leftovers.fenced_stager(project, task))

    run_verb(as_json, finish, render)


@main_group.command()
@click.argument("task")
@click.option("--instance", "instances", multiple=True, metavar="ID",
              help="Run only this instance (repeatable). Default: every pending instance.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Stop a command after S seconds (its whole process group); the instance fails.")
@click.option("-j", "--jobs", type=click.IntRange(1, 1024), default=None, metavar="J",
              help="At most J commands at once (default: max_total).")
@click.option("--until-pass", "until_pass", type=click.IntRange(1, 100), default=None, metavar="K",
              help="Up to K rounds of run, check, and retry (with feedback) of the attempts that failed, "
                   "until each track has a passing one (rework_max still bounds the retries).")
@click.option("--tmux", "use_tmux", is_flag=True,
              help="Run each command in its own window of the tmux session parallel-TASK, with a real terminal "
                   "(`git parallel attach TASK [ID]` shows it); recorded as headless runs are.")
@click.option("--allow-tmux-escape", "allow_tmux_escape", is_flag=True,
              help="With --tmux where the namespace layer is missing (Landlock alone): run anyway, although an "
                   "agent can then reach the tmux server's socket and have it run commands outside the fence.")
@click.option("--remote", default=None, metavar="R",
              help="Run nothing here: publish CMD (and --timeout) in the run's manifest on remote R, for "
                   "`git parallel worker --remote R` on other machines.")
@click.option("--agent", "agent_specs", multiple=True, metavar="NAME=CMD",
              help="A named agent (repeatable) instead of one command: the instances are split among them by "
                   "--split, each records its agent, and its retries run the same one.")
@click.option("--split", default=None, metavar="NAME:K,...|auto",
              help="How many instances each agent gets (weights when they do not add up); auto: by each "
                   "agent's win rate here (`git parallel stats`), at least one each. Default: agents.split, "
                   "else even.")
@json_option
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED, metavar="[-- CMD [ARG]...]")
def run(task: str, instances: tuple[str, ...], timeout: float | None, jobs: int | None, until_pass: int | None,
        use_tmux: bool, allow_tmux_escape: bool, remote: str | None, agent_specs: tuple[str, ...], split: str | None,
        as_json: bool, command: tuple[str, ...]) -> None:
    """Run CMD in the worktree of every pending instance of TASK, at most J
    at once and at most max_total in the whole repository.

    Arguments go to CMD as given, never through a shell; {task}, {instance},
    {track}, {attempt}, {worktree} and {feedback} in them are replaced, and
    the environment has GIT_PARALLEL_TASK, _RUN_ID, _INSTANCE, _TRACK,
    _ATTEMPT, _WORKTREE and _EVENTS (a JSONL file the command may append
    to).  On a retried attempt, GIT_PARALLEL_FEEDBACK names a file saying
    why the previous attempt failed (its gates' and its own output), and
    {feedback} is that text (empty on attempt 0; its last 64 KiB when
    longer), e.g. claude -p "Fix what failed: {feedback}".  Output goes to
    <git common dir>/parallel/logs/<run_id>/<id>.<attempt>.log.
    Whatever CMD leaves uncommitted is committed on the instance branch
    (commit_leftovers).  Exit status 0 only when every selected instance
    succeeded.

    Without CMD, each instance runs its agent: given by --agent NAME=CMD
    (split by --split), kept from an earlier run (a retry), or from
    `agents:` in the config."""
    from gitflow_parallel import mix
    from gitflow_parallel.cli.render import RunProgress, RunWaitNotice, render_published, render_rounds, render_run
    from gitflow_parallel.commands import run as run_cmd

    if remote is not None:
        given = [o for o, v in (("--instance", instances), ("--jobs", jobs), ("--until-pass", until_pass),
                                ("--tmux", use_tmux), ("--allow-tmux-escape", allow_tmux_escape),
                                ("--agent", agent_specs), ("--split", split)) if v]
        if given:
            raise click.UsageError(f"{', '.join(given)} cannot go with --remote (workers run every instance)")
        from gitflow_parallel.commands import publish as publish_cmd

        def render(r: PublishResult) -> None:
            render_published(r)
            click.echo(f"next: git parallel worker --remote {remote} --task {task}  (on each worker machine), "
                       f"then git parallel collect {task}")

        run_verb(as_json, lambda: publish_cmd.publish(_project(), task, remote, agent=list(command), timeout=timeout),
                 render)
        return
    live = sys.stderr.isatty() and not as_json
    progress = RunProgress() if live else RunWaitNotice()

    def rounds(k: int) -> Rounds:
        from gitflow_parallel.flows import until_pass as run_until_pass

        try:
            return run_until_pass(_project(), task, list(command), k, instances=list(instances) or None,
                                  timeout=timeout, jobs=jobs, progress=progress, tmux=use_tmux,
                                  agent_commands=dict(mix.parse_agent(spec) for spec in agent_specs), split=split,
                                  allow_tmux_escape=allow_tmux_escape)
        finally:
            if isinstance(progress, RunProgress):
                progress.clear()

    def call() -> Mapping[str, Any]:
        try:
            return run_cmd.run(_project(), task, list(command), instances=list(instances) or None,
                               timeout=timeout, jobs=jobs, progress=progress, tmux=use_tmux,
                               agent_commands=dict(mix.parse_agent(spec) for spec in agent_specs), split=split,
                               allow_tmux_escape=allow_tmux_escape)
        finally:
            if isinstance(progress, RunProgress):
                progress.clear()

    if until_pass is not None:
        k = until_pass
        run_verb(as_json, lambda: rounds(k), render_rounds, ok=lambda r: r["ok"])
    else:
        run_verb(as_json, call, render_run, ok=run_cmd.succeeded)


@main_group.command()
@click.argument("task")
@click.argument("instance", required=False)
@json_option
def attach(task: str, instance: str | None, as_json: bool) -> None:
    """Attach to the tmux session of `git parallel run TASK --tmux`
    (parallel-TASK), at INSTANCE's window if given; inside tmux, switch to
    it.  With --json, print the tmux commands instead of running them."""
    from gitflow_parallel.proc import tmux

    def call() -> dict[str, Any]:
        _project().store.load(task)  # the task must have a run
        session, steps = tmux.attach_target(task, instance)
        if not as_json:
            tmux.refuse_without_terminal(session)
        return {"session": session, "commands": steps}

    if as_json:
        run_verb(True, call)
        return
    holder: dict[str, Any] = {}
    run_verb(False, lambda: holder.update(call()), lambda r: None)
    steps = holder["commands"]
    for step in steps[:-1]:
        subprocess.run(step, check=False)
    sys.stdout.flush()
    os.execvp(steps[-1][0], steps[-1])
