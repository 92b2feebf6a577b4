"""The command line: parsing and rendering only.

Every verb's logic is a function in the package; this module turns options
into arguments, results into text or ``--json``, and errors into
``error[CODE]: ...`` / ``hint: ...`` with the documented exit status
(0 done, 1 refused, 2 usage, 3 internal error with a traceback log).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from gitflow_parallel import __version__
from gitflow_parallel.errors import ParallelError

# 0 done and 2 usage error come from click itself.
EXIT_REFUSED, EXIT_INTERNAL = 1, 3


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, sort_keys=True, default=str))


def _internal_log(exc: BaseException) -> Path | None:
    """Keep the traceback of an unexpected error in the common dir's parallel/logs."""
    from gitflow_parallel.files import utcnow

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        from gitflow_parallel.gitrepo import Repo

        folder = Repo.open().parallel_dir / "logs"
    except Exception:  # no repository to keep it in: the temp folder will do
        import tempfile

        folder = Path(tempfile.gettempdir()) / "git-parallel-logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"internal-error-{utcnow().replace(':', '')}-{os.getpid()}.log"
        path.write_text(text, encoding="utf-8")
        return path
    except OSError:
        return None


def run_verb(as_json: bool, fn: Callable[[], Any], render: Callable[[Any], None] | None = None,
             ok: Callable[[Any], bool] | None = None) -> None:
    """Call a verb and map its outcome to output and exit status."""
    try:
        result = fn()
    except ParallelError as exc:
        if as_json:
            _emit_json(exc.as_json())
        else:
            click.echo(f"error[{exc.code}]: {exc.message}", err=True)
            if exc.hint:
                click.echo(f"hint: {exc.hint}", err=True)
        sys.exit(EXIT_REFUSED)
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the one place unexpected errors surface
        log = _internal_log(exc)
        where = f"; the traceback is in {log}" if log else ""
        msg = f"internal error: {type(exc).__name__}: {exc}{where}"
        if as_json:
            _emit_json({"ok": False, "code": "INTERNAL", "message": msg, "hint": "please report it with the log"})
        else:
            click.echo(msg, err=True)
            click.echo("hint: this is a bug in git-parallel; please report it with the log", err=True)
        sys.exit(EXIT_INTERNAL)
    success = ok(result) if ok else True
    if not as_json and isinstance(result, dict) and result.get("notes_error"):
        click.echo(f"warning: {result['notes_error']}", err=True)
    if not as_json and isinstance(result, dict) and result.get("remote_warning"):
        click.echo(f"warning: {result['remote_warning']}", err=True)
    if as_json:
        payload = dict(result) if isinstance(result, dict) else {"result": result}
        payload.setdefault("ok", success)
        _emit_json(payload)
    elif render is not None:
        render(result)
    if not success:
        sys.exit(EXIT_REFUSED)


def _project():
    from gitflow_parallel.project import Project

    return Project.open()


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")


class HelpGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        order = ["init", "spawn", "publish", "run", "worker", "collect", "done", "check", "pick", "unpick", "merge",
                 "status", "diff", "show", "logs", "report", "retry", "abort", "cleanup", "push", "fetch", "prune",
                 "recover", "validate", "attach", "hooks", "demo", "help"]
        names = list(self.commands)
        return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


@click.group(cls=HelpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="git-parallel")
def main_group() -> None:
    """Run several attempts at one task side by side, each in its own git
    worktree and branch; prove each with real checks; pick a winner by a
    deterministic rule; and land it on the base branch with provenance in
    git notes (refs/notes/parallel).

    Typical flow: spawn, run, check, pick, merge.  `git parallel demo` shows
    the whole flow on a throwaway repository.
    """


@main_group.command("help")
@click.argument("command", required=False)
@click.pass_context
def help_cmd(ctx: click.Context, command: str | None) -> None:
    """Show help for git parallel or one of its commands."""
    parent = ctx.parent
    assert parent is not None
    if command is None:
        click.echo(main_group.get_help(parent))
        return
    cmd = main_group.get_command(parent, command)
    if cmd is None:
        raise click.UsageError(f"no such command {command!r}", ctx=ctx)
    with click.Context(cmd, info_name=command, parent=parent) as sub:
        click.echo(cmd.get_help(sub))


@main_group.command()
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="Build the demo repository here (kept) instead of a temporary folder.")
@click.option("--keep", is_flag=True, help="Keep the temporary demo repository and print where it is.")
@json_option
def demo(directory: str | None, keep: bool, as_json: bool) -> None:
    """Show the whole flow on a throwaway repository with scripted agents:
    spawn 3 instances, run them (one fixes the bug, one breaks a test, one
    changes nothing), check, pick, install the hooks and watch a plain
    `git merge` of a loser be refused, merge the winner, and print the
    status table and the landed commit's note.  No network, no real agent."""
    from gitflow_parallel.demo import run_demo

    echo = (lambda s: click.echo(s, err=True)) if as_json else click.echo
    run_verb(as_json, lambda: run_demo(directory, keep, echo=echo))


# -- init ---------------------------------------------------------------------------
@main_group.command()
@click.option("--force", is_flag=True, help="Overwrite an existing .gitparallel.yaml with the template.")
@click.option("--display", is_flag=True,
              help="Also set notes.displayRef, so plain `git log` prints the notes (every JSON line).")
@click.option("--remote", default=None, metavar="REMOTE",
              help="Add fetch refspecs to REMOTE for the notes and refs/parallel/ (into tracking refs).")
@json_option
def init(force: bool, display: bool, remote: str | None, as_json: bool) -> None:
    """Write a commented .gitparallel.yaml and set notes.rewriteRef to the
    notes ref, so notes follow rebases and amends (`git log
    --notes=parallel` shows them; --display makes plain `git log` show
    them too).  Commit the file: spawn reads it from the base commit."""
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        click.echo(f"{'wrote' if r['wrote'] else 'kept existing'} {r['config']}")
        for k, v in r["git_config"].items():
            click.echo(f"git config {k} {v}")
        if r["refspecs"]:
            for spec in r["refspecs"][f"remote.{r['remote']}.fetch"]:
                state = "added" if spec in r["refspecs"]["added"] else "already there"
                click.echo(f"git config --add remote.{r['remote']}.fetch {spec}  ({state})")
            click.echo(f"share runs with `git parallel push {r['remote']}` and `git parallel fetch {r['remote']}`")
        click.echo("next: edit the gates, commit the file, then `git parallel spawn TASK`")

    run_verb(as_json, lambda: lifecycle.init(_project(), force=force, display=display, remote=remote), render)


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
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        for w in r.get("warnings") or []:
            click.echo(f"warning: {w}", err=True)
        click.echo(f"spawned run {r['run_id']} for {r['task']} on {r['base']['ref']} at {r['base']['commit'][:12]}")
        for inst in r["instances"]:
            click.echo(f"  {inst['id']:<10} {inst['branch']:<32} {inst['worktree']}")
        if r.get("published"):
            _render_published(r["published"])
            click.echo(f"next: git parallel run {r['task']} --remote {r['published']['remote']} -- <agent command>")
        else:
            click.echo(f"next: git parallel run {r['task']} -- <agent command>")

    def call() -> dict[str, Any]:
        if remote is not None:
            from gitflow_parallel import remote as remote_mod

            return remote_mod.spawn(_project(), task, remote, n=instances, base=base, tracks=list(tracks))
        return lifecycle.spawn(_project(), task, n=instances, base=base, tracks=list(tracks))

    run_verb(as_json, call, render)


def _render_published(p: dict[str, Any]) -> None:
    click.echo(f"published run {p['run_id']} to {p['remote']}: manifest {p['ref']} at {p['manifest'][:12]}, "
               f"{len(p['branches'])} branch(es) pushed")
    if p["agent"]:
        click.echo(f"  agent: {' '.join(p['agent'])}")
    for inst_id in p["kept_remote"]:
        click.echo(f"  {inst_id}: the remote's branch holds a worker's work; left as it is")


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
    from gitflow_parallel import remote as remote_mod

    def render(r: dict[str, Any]) -> None:
        _render_published(r)
        if not r["agent"]:
            click.echo(f"next: git parallel run {task} --remote {remote} -- <agent command>")

    run_verb(as_json, lambda: remote_mod.publish(_project(), task, remote), render)


# -- status -------------------------------------------------------------------------
def _short(v: Any, n: int = 12) -> str:
    return "-" if v is None else str(v)[:n]


def render_status(r: dict[str, Any]) -> None:
    if "runs" in r:
        if not r["runs"] and not r["problems"]:
            click.echo("no runs (start one with `git parallel spawn TASK`)")
        for run in r["runs"]:
            noun = "instance" if run["instances"] == 1 else "instances"
            click.echo(f"{run['task']:<24} {run['status']:<10} {run['instances']:>3} {noun:<9}  "
                       f"{run['base']:<24} {run['run_id']}" + ("  (fetched)" if run.get("fetched") else ""))
        for p in r["problems"]:
            click.echo(f"error[{p['code']}]: {p['message']}")
        return
    run = r["run"]
    click.echo(f"task {run['task']}  run {run['run_id']}  status {run['status']}  revision {run['run_revision']}")
    if r.get("shared"):
        click.echo(f"(fetched: read from {r['shared']}; its worktrees and branches are on another machine)")
    tip = r.get("base_tip")
    now = ("now gone" if tip is None else "still there" if tip == run["base"]["commit"] else f"now at {tip[:12]}")
    click.echo(f"base {run['base']['ref']}: spawned at {run['base']['commit'][:12]}, {now}")
    if run.get("merge"):
        m = run["merge"]
        click.echo(f"landed {m['method']} at {m['landed'][:12]} on {m['merged_at']}")
    header = ("ID", "TRACK", "STATUS", "ATT", "HEAD", "VERDICT", "SCORE", "EVIDENCE", "BRANCH", "WORKTREE")
    rows = [header]
    for row in r["rows"]:
        status = row["status"] + (f" ({', '.join(row['flags'])})" if row["flags"] else "")
        rows.append((row["id"], row["track"], status, str(row["attempt"]), _short(row["tip"] or row["head"]),
                     row["verdict"] or "-", "-" if row["score"] is None else str(row["score"]),
                     row["evidence_state"], row["branch"], "(removed)" if row.get("removed") else row["worktree"]))
    widths = [max(len(x[i]) for x in rows) for i in range(len(header))]
    for x in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())


@main_group.command()
@click.argument("task", required=False)
@json_option
def status(task: str | None, as_json: bool) -> None:
    """Without TASK, list the runs; with TASK, a table of its instances (id,
    track, status, attempt, head, verdict, score, evidence fresh/stale,
    branch, worktree).  --json prints {"ok": true, "run": <record>}."""
    from gitflow_parallel import lifecycle

    def call() -> dict[str, Any]:
        result = lifecycle.status(_project(), task)
        if as_json and task is not None:
            run = result["run"]
            for inst, row in zip(run["instances"], result["rows"]):
                inst["live"] = {"tip": row["tip"], "evidence": row["evidence_state"], "flags": row["flags"]}
            return {"run": run, "base_tip": result["base_tip"]}
        return result

    run_verb(as_json, call, render_status)


# -- retry / abort / cleanup ------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--revision", type=int, default=None, help="Refuse unless the run is still at this run_revision.")
@click.option("--force", is_flag=True,
              help="Retry a succeeded instance that did not fail its gates, and one whose worktree has "
                   "uncommitted changes (kept on the archive ref first).")
@click.option("--onto-current", is_flag=True,
              help="Start the new attempt from the base branch's current tip instead of the spawn's base.")
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
    worktree with uncommitted changes is refused unless --force."""
    from gitflow_parallel import lifecycle
    from gitflow_parallel.model import find_instance

    def render(r: dict[str, Any]) -> None:
        inst = find_instance(r, instance)
        start = inst.get("start") or {}
        where = {"base-tip": f"the current tip of {r['base']['ref']}", "previous-attempt": "its previous tip"}.get(
            start.get("from"), "the base")
        click.echo(f"instance {instance} starts attempt {inst['attempt']} from {where} at {inst['head'][:12]}")
        prev = inst["history"][-1] if inst["history"] else None
        if prev and prev.get("archive_ref"):
            click.echo(f"previous attempt kept at {prev['archive_ref']}")
        if inst.get("feedback"):
            click.echo(f"feedback for the agent: {inst['feedback']} ($GIT_PARALLEL_FEEDBACK, {{feedback}})")
        click.echo(f"next: git parallel run {task} --instance {instance} -- <agent command>")

    if onto_current and keep:
        raise click.UsageError("--onto-current and --keep exclude each other")
    run_verb(as_json, lambda: lifecycle.retry(_project(), task, instance, expected_revision=revision, force=force,
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
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        what = f"instance {instance}" if instance else f"run {r['run']['run_id']}"
        click.echo(f"aborted {what} of {task}")
        for i in r["stopped"]:
            click.echo(f"  stopped the process of {i}")
        for d in r["removed"]:
            click.echo(f"  removed {d['id']}; tip kept at {d['archived']}")

    run_verb(as_json, lambda: lifecycle.abort(_project(), task, instance, force=force), render)


@main_group.command()
@click.argument("task")
@click.option("--keep-losers", is_flag=True, help="Remove only the winners' worktrees; keep the losers'.")
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (committed onto the archive ref first).")
@json_option
def cleanup(task: str, keep_losers: bool, force: bool, as_json: bool) -> None:
    """Remove the worktrees and branches of a merged or aborted run.  Every
    tip is first kept under refs/parallel/archive/<run_id>/<id>/<attempt>;
    a worktree with uncommitted changes is refused unless --force."""
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        for d in r["removed"]:
            extra = f" (uncommitted work committed as {d['dirty_committed'][:12]})" if d["dirty_committed"] else ""
            click.echo(f"removed {d['id']}; tip kept at {d['archived']}{extra}")
        if r["kept"]:
            click.echo(f"kept: {', '.join(r['kept'])}")
        if not r["removed"]:
            click.echo("nothing to remove")

    run_verb(as_json, lambda: lifecycle.cleanup(_project(), task, keep_losers=keep_losers, force=force),
             render)


# -- pick / merge ------------------------------------------------------------------------
def _figures_text(f: dict[str, Any]) -> str:
    score = "unavailable" if f["score"] is None else f["score"]
    size = f", group of {f['group_size']}" if "group_size" in f else ""
    return f"{f['id']} (score {score}, {f['changed_lines']} changed lines{size})"


@main_group.command()
@click.argument("task")
@click.option("--track", default=None, help="Pick only this track (default: every unpicked track).")
@click.option("--instance", "instance", default=None, metavar="ID",
              help="A person's pick: ID wins its track (recorded as selection_method human, with user.email).")
@click.option("--reason", default=None, metavar="TEXT", help="With --instance: why, kept in the pick record and note.")
@click.option("--force", is_flag=True,
              help="With --instance: pick it even without fresh, complete, passing evidence (recorded as forced).")
@json_option
def pick(task: str, track: str | None, instance: str | None, reason: str | None, force: bool, as_json: bool) -> None:
    """Select each track's winner among the instances with complete, fresh,
    passing evidence, by the run's `selection` rule, and write the write-once
    pick record and its note on the winner's commit.  critic_first_pass:
    highest score, then fewest changed lines against the base, then id (never
    timing).  majority_vote: the largest group of byte-identical trees (rare
    for agents, which seldom write the same bytes).  cluster: the largest
    group of candidates whose probe gates saw the same behaviour.  tournament:
    the judge command decides a bracket, in id order, among the largest
    clusters.  Every rule breaks its ties by score, changed lines, then id,
    and the record names the stage and the figures that decided.  A track
    already picked prints its record and changes nothing.

    With --instance ID a person chooses instead: the record says
    "selection_method": "human", who (git config user.email) and why
    (--reason).  It needs the same evidence unless --force, which is
    recorded too.  `git parallel unpick` retires a pick that has not landed."""
    from gitflow_parallel import selection

    def render(r: dict[str, Any]) -> None:
        for p in r["picks"] + r["existing"]:
            w = p["winner"]
            again = " (already picked)" if p in r["existing"] else ""
            score = "unavailable" if p["score"] is None else p["score"]
            by = p["selection_method"]
            if by == selection.HUMAN:
                by = f"{p['picked_by']}" + (f" ({p['reason']})" if p.get("reason") else "")
                if p["forced"]:
                    by += "; forced, waiving: " + ("; ".join(p.get("waived") or []) or "nothing")
            click.echo(f"track {p['track']}: winner {w['id']} at {w['commit'][:12]}, score {score}, "
                       f"by {by}{again}")
            decision = p.get("decision")  # absent from picks made before it was recorded
            if decision:
                click.echo(f"  decided by {decision['stage']}: {_figures_text(decision['winner'])}"
                           + (f" against {_figures_text(decision['runner_up'])}" if decision["runner_up"] else ""))
            for c in p.get("clusters") or []:
                click.echo(f"  cluster of {c['size']}: {', '.join(c['members'])}")
            for m in (p.get("tournament") or {}).get("matches", []):
                if m["b"] is not None:
                    ran = m["judge"]
                    said = f"answered {ran['answer']}" if ran["answer"] else f"gave no answer: {ran['error']}"
                    click.echo(f"  round {m['round']}: {m['a']} vs {m['b']} -> {m['winner']} "
                               f"(decided by {m['decided_by']}; the judge {said}; log {ran['log']})")
            for loser in p["losers"]:
                click.echo(f"  lost {loser['id']}: {loser['reason']}")
        click.echo(f"next: git parallel merge {task}")

    def call() -> dict[str, Any]:
        if instance is None:
            if reason is not None or force:
                raise click.UsageError("--reason and --force go with --instance ID (a person's pick)")
            return selection.pick(_project(), task, track)
        if track is not None:
            raise click.UsageError("--instance picks the instance's own track; leave out --track")
        return selection.pick_human(_project(), task, instance, reason=reason, force=force)

    run_verb(as_json, call, render)


@main_group.command()
@click.argument("task")
@click.option("--track", default=None, help="Retire only this track's pick (default: every picked track).")
@json_option
def unpick(task: str, track: str | None, as_json: bool) -> None:
    """Retire a pick that has not landed, so the track can be picked again.
    The pick record is never deleted: it moves to
    parallel/picks/<run_id>/retired/<track>.<n>.json and the run record
    lists it under retired_picks.  Refused once the run is merged."""
    from gitflow_parallel import selection

    def render(r: dict[str, Any]) -> None:
        for x in r["retired"]:
            click.echo(f"retired the pick of track {x['track']} (winner {x['winner']}); kept at {x['path']}")
        click.echo(f"next: git parallel pick {task} [--instance ID]")

    run_verb(as_json, lambda: selection.unpick(_project(), task, track), render)


@main_group.command()
@click.argument("task")
@click.option("--push", "push_remote", default=None, metavar="REMOTE",
              help="Land onto REMOTE's tip of the base, then move REMOTE's base by one atomic push with a lease "
                   "(with the notes, run snapshot and evidence refs); a merged run is only pushed.")
@click.option("--pr", "as_pr", is_flag=True,
              help="Do not land: push the winner's branch and its provenance, and open a pull request with gh "
                   "(or a merge request with glab), or print the command and write its body file.")
@click.option("--remote", "pr_remote", default=None, metavar="REMOTE",
              help="The remote --pr pushes to (default: origin).")
@json_option
def merge(task: str, push_remote: str | None, as_pr: bool, pr_remote: str | None, as_json: bool) -> None:
    """Land the picked winner(s) on the base branch: fast-forward when
    possible, else a merge commit computed in memory and resolved by
    merge.policy; the base ref moves once, by compare-and-swap, retried if
    it moved meanwhile.  With several tracks every track needs a pick (join).
    A clean worktree of the base follows the new tip; a dirty one refuses.
    Then the run's worktrees are cleaned up (tips kept in archive refs).

    --push REMOTE lands where the team lands: onto REMOTE's base when it is
    ahead (refused when the two diverged), then pushes it with a lease, so
    another clone's commit is never overwritten; if REMOTE moved meanwhile
    the landing is computed again onto its new tip (up to merge.retries).
    --pr proposes the winner for review instead; the run stays picked."""
    from gitflow_parallel import merge as merge_mod

    if as_pr and push_remote:
        raise click.UsageError("--push and --pr exclude each other: --pr does not move the base")
    if pr_remote and not as_pr:
        raise click.UsageError("--remote goes with --pr (--push names its remote itself)")
    if as_pr:
        run_verb(as_json, lambda: merge_mod.merge_pr(_project(), task, pr_remote or "origin"), _render_pr)
        return

    def render(r: dict[str, Any]) -> None:
        m = r["merge"]
        if r["already"]:
            click.echo(f"already merged: {m['base_ref']} at {m['landed'][:12]}")
            _render_push(r.get("push"))
            return
        click.echo(f"landed {m['method']} on {m['base_ref']}: {m['previous'][:12]} -> {m['landed'][:12]}"
                   f" (attempts {m['attempts']})")
        for f in m["resolved_files"]:
            dropped = f.get("winner_lines_dropped", 0) if f.get("kept") == "base" else 0
            click.echo(f"  resolved by {m['policy']}: {f['path']} (track {f['track']}; "
                       f"{dropped} line(s) of the winner dropped)")
        for v in m["verified"]:
            names = ", ".join(g["name"] for g in v["gates"]) or "no enforced gate"
            click.echo(f"  re-proved track {v['track']} on the landing tree in a clean checkout: "
                       f"{'pass' if v['passed'] else 'fail'} ({names})")
        if not m["verified"] and m.get("verify") == "never":
            click.echo("  not re-proved (merge.verify: never)")
        if m.get("worktree_error"):
            click.echo(f"warning: could not update {m['worktree']}: {m['worktree_error']}", err=True)
        if r.get("cleanup_error"):
            e = r["cleanup_error"]
            click.echo(f"warning: cleanup refused: error[{e['code']}]: {e['message']}", err=True)
            click.echo(f"hint: {e['hint']}", err=True)
        elif r.get("cleanup"):
            click.echo(f"cleaned up {len(r['cleanup']['removed'])} worktree(s); tips kept under refs/parallel/archive/")
        click.echo(f"provenance: git notes --ref=parallel show {m['landed'][:12]}")
        _render_push(r.get("push"))

    if push_remote:
        run_verb(as_json, lambda: merge_mod.merge_push(_project(), task, push_remote), render)
    else:
        run_verb(as_json, lambda: merge_mod.merge(_project(), task), render)


def _render_push(p: dict[str, Any] | None) -> None:
    if not p:
        return
    base = p["base_ref"][len("refs/heads/"):]
    for again in p["relanded"]:
        click.echo(f"  {p['remote']} had moved to {again['remote_tip'][:12]}: landed again onto it "
                   f"(was {again['landed'][:12]})")
    if p["up_to_date"]:
        click.echo(f"{p['remote']} is up to date: {base} there has {p['landed'][:12]}")
        return
    where = f"{base} at {p['landed'][:12]}" if p["moved_base"] else f"{base} untouched (it has {p['landed'][:12]})"
    click.echo(f"pushed to {p['remote']}: {where}, {len(p['refs'])} ref(s) in one atomic push"
               + (f" after {p['attempts']} attempts" if p["attempts"] > 1 else ""))
    for name in p["kept_remote"]:
        click.echo(f"  kept {p['remote']}'s (ahead of yours): {name}")


def _render_pr(r: dict[str, Any]) -> None:
    click.echo(f"pushed to {r['remote']}: {len(r['push']['refs'])} ref(s) in one atomic push")
    if not r["push"]["base_on_remote"]:
        click.echo(f"warning: {r['remote']} has no {r['base']} branch to propose against", err=True)
    for p in r["proposals"]:
        if p["ran"]:
            click.echo(f"{p['tool']}: requested {p['branch']} -> {r['base']}" + (f": {p['url']}" if p["url"] else ""))
        else:
            click.echo(f"no {p['tool']} on PATH; to request {p['branch']} -> {r['base']}, run:")
            click.echo(f"  {p['command']}")
        click.echo(f"body: {p['body_file']}")
    click.echo("the base did not move; the run stays picked (`git parallel merge` lands it)")


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
    from gitflow_parallel import hand

    def render(r: dict[str, Any]) -> None:
        extra = f"; leftovers committed as {r['committed'][:12]}" if r["committed"] else ""
        click.echo(f"instance {instance} of {task} finished by hand at {r['instance']['head'][:12]}{extra}")
        click.echo(f"next: git parallel check {task}")

    run_verb(as_json, lambda: hand.done(_project(), task, instance), render)


# -- review: diff / show / logs / report ------------------------------------------------
def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    for x in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())


def _cell(change: dict[str, Any] | None) -> str:
    if change is None:
        return "."
    if change["binary"]:
        return f"{change['status']} bin"
    return f"{change['status']} +{change['added']} -{change['removed']}"


def render_diff(r: dict[str, Any]) -> None:
    if r["mode"] == "between":
        a, b = r["attempts"]
        click.echo(f"{r['task']}: {a['id']} ({_short(a['commit'])}) -> {b['id']} ({_short(b['commit'])})")
        if r["stat"]:
            _table([("FILE", "CHANGE")] + [(f["path"], _cell(f)) for f in r["files"]]
                   + [("total", f"+{r['added']} -{r['removed']}")])
        else:
            click.echo(r["patch"], nl=False)
        return
    click.echo(f"{r['task']}: each attempt against the base {r['base']['ref']} at {r['base']['commit'][:12]}")
    if r["stat"]:
        header = ("FILE",) + tuple(a["id"] for a in r["attempts"])
        rows = [header] + [(f["path"],) + tuple(_cell(f["attempts"][a["id"]]) for a in r["attempts"])
                           for f in r["files"]]
        rows.append(("files",) + tuple(str(len(a["files"])) for a in r["attempts"]))
        rows.append(("lines",) + tuple("(no commit)" if a["missing"] else f"+{a['added']} -{a['removed']}"
                                       for a in r["attempts"]))
        _table(rows)
        return
    for a in r["attempts"]:
        click.echo(f"=== {a['id']} (attempt {a['attempt']}, {a['status']}) at {_short(a['commit'])}: "
                   f"{len(a['files'])} file(s), +{a['added']} -{a['removed']}")
        if a["missing"]:
            click.echo("(its commit is not in this repository)")
        else:
            click.echo(a["patch"], nl=False)


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
    from gitflow_parallel import review

    run_verb(as_json, lambda: review.diff(_project(), task, list(ids) or None, stat=stat), render_diff)


def render_show(r: dict[str, Any]) -> None:
    i = r["instance"]
    click.echo(f"{r['task']} instance {i['id']} (track {i['track']}, attempt {i['attempt']}): {i['status']}"
               + (f", {i['error']}" if i["error"] else ""))
    click.echo(f"run {r['run_id']} ({r['run_status']})" + ("  [fetched]" if r["shared"] else ""))
    click.echo(f"commit {_short(r['commit'], 40)}  branch {i['branch']}")
    ev = r["evidence"]
    p = r["pack"]
    if p is None:
        click.echo(f"evidence: {ev['state']} ({ev['reason']})")
    else:
        score = "unavailable" if p["score"] is None else str(p["score"])
        click.echo(f"evidence: {ev['state']}, verdict {p['verdict']}{'' if p['complete'] else ' (incomplete)'}, "
                   f"score {score}, proof {p['proof_issued_at']}")
        if p["score_error"]:
            click.echo(f"  score unavailable: {p['score_error']}")
    for g in r["gates"]:
        mark = "skip" if g["skipped"] else ("pass" if g["passed"] else "FAIL")
        what = g["error"] if g["skipped"] or g["exit_code"] is None else f"exit {g['exit_code']} in {g['duration_s']:.2f}s"
        click.echo(f"  {mark:<4} {g['name']:<16} {g['mode']:<8} {what}")
        for line in g["tail"]:
            click.echo(f"       | {line}")
    click.echo(f"outcome: {r['outcome']['why']}")
    if r["landed"]:
        click.echo(f"landed at {r['landed'][:12]}")
    for h in r["history"]:
        click.echo(f"earlier attempt {h['attempt']}: {h['status']}, verdict {h['verdict'] or '-'}"
                   + (f", kept at {h['archive_ref']}" if h.get("archive_ref") else ""))


@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--lines", "lines", type=click.IntRange(0, 10000), default=5, show_default=True,
              help="Last lines of each gate's log to show.")
@json_option
def show(task: str, instance: str, lines: int, as_json: bool) -> None:
    """One attempt: its record, its gates with the last lines of their
    logs, its score, and why it won or lost its track."""
    from gitflow_parallel import review

    run_verb(as_json, lambda: review.show(_project(), task, instance, lines=lines), render_show)


@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--gate", default=None, metavar="NAME", help="The log of this gate (from the instance's evidence).")
@click.option("--agent", is_flag=True, help="The agent's log (the default).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, while the instance runs.")
@json_option
def logs(task: str, instance: str, gate: str | None, agent: bool, follow: bool, as_json: bool) -> None:
    """Print an instance's agent log, or with --gate NAME one gate's log:
    from <common>/parallel/logs/, or from its evidence ref where the file is
    not here (a fetched run, a pruned log folder)."""
    from gitflow_parallel import review

    if gate and agent:
        raise click.UsageError("give --gate NAME or --agent, not both")
    if follow and not as_json:
        def stream() -> None:
            for chunk in review.follow(_project(), task, instance, gate):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()

        run_verb(False, stream)
        return
    run_verb(as_json, lambda: review.logs(_project(), task, instance, gate),
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
    from gitflow_parallel import report as report_mod

    def render(r: dict[str, Any]) -> None:
        click.echo(f"wrote {r['path']} ({len(r['attempts'])} attempts)")
        click.echo(f"open it: python3 -m webbrowser file://{r['path']}")

    run_verb(as_json, lambda: report_mod.report(_project(), task, html_file), render)


# -- share: push / fetch / prune --------------------------------------------------------
@main_group.command()
@click.argument("remote", default="origin")
@json_option
def push(remote: str, as_json: bool) -> None:
    """Publish the notes and every refs/parallel/ ref (evidence packs and
    logs, run records, archived tips) to REMOTE in one atomic push; notes
    that moved on the remote are merged first (cat_sort_uniq).  Packs and
    records not yet kept in git are committed first."""
    from gitflow_parallel import share

    def render(r: dict[str, Any]) -> None:
        click.echo(f"pushed {len(r['pushed'])} ref(s) to {remote}"
                   + (f" after {r['attempts']} attempts" if r["attempts"] > 1 else ""))
        for name in r["pushed"]:
            click.echo(f"  {name}")
        for why in r["skipped"]:
            click.echo(f"warning: not kept in git: {why}", err=True)

    run_verb(as_json, lambda: share.push(_project(), remote), render)


@main_group.command()
@click.argument("remote", default="origin")
@json_option
def fetch(remote: str, as_json: bool) -> None:
    """Fetch REMOTE's notes and refs/parallel/ refs: the notes are merged
    into yours (cat_sort_uniq), missing or older refs/parallel/ refs are
    fast-forwarded, and `status`, `show`, `diff`, `logs` and `report` can
    then read the runs a teammate pushed."""
    from gitflow_parallel import share

    def render(r: dict[str, Any]) -> None:
        click.echo(f"fetched from {remote}: {len(r['updated'])} ref(s) updated")
        for n, how in r["notes"].items():
            click.echo(f"  {n}: {how}")
        for name in r["kept_local"]:
            click.echo(f"  kept yours (ahead of {remote}): {name}")

    run_verb(as_json, lambda: share.fetch(_project(), remote), render)


@main_group.command()
@click.option("--older-than", "older_than", default="30d", show_default=True, metavar="AGE",
              help="Only runs that finished longer ago than AGE (30d, 12h, 2w, 90m; 0: every finished run).")
@click.option("--dry-run", is_flag=True, help="Print what would be removed and remove nothing.")
@json_option
def prune(older_than: str, dry_run: bool, as_json: bool) -> None:
    """Remove the archive, evidence and run refs (local and fetched copies)
    of finished runs older than AGE, printing each.  A live run's refs are
    never removed; notes and files under parallel/ are kept."""
    from gitflow_parallel import share

    def render(r: dict[str, Any]) -> None:
        verb = "would remove" if r["dry_run"] else "removed"
        for e in r["removed"]:
            click.echo(f"{verb} {len(e['refs'])} ref(s) of run {e['run_id']} ({e['task'] or '?'}, {e['status']})")
            for name in e["refs"]:
                click.echo(f"  {name}")
        live = sum(1 for k in r["kept"] if k["why"] == "live")
        click.echo(f"{verb} {r['count']} ref(s); kept {len(r['kept'])} run(s) ({live} live)")

    run_verb(as_json, lambda: share.prune(_project(), older_than, dry_run=dry_run), render)


# -- check --------------------------------------------------------------------------
def _render_check(r: dict[str, Any]) -> None:
    click.echo(f"check of {r['task']}  run {r['run_id']}")
    for inst in r["instances"]:
        state = inst["verdict"] + ("" if inst["complete"] else " (incomplete: not every gate ran)")
        score = "-" if inst["score"] is None else str(inst["score"])
        click.echo(f"  {inst['id']:<10} {state:<6} score {score:<3} commit {inst['commit'][:12]}  "
                   f"evidence {inst['evidence']['path']}")
        if inst["score_error"]:
            click.echo(f"    score unavailable: {inst['score_error']}")
        if inst.get("refused"):
            click.echo(f"    [{inst['refused']['code']}] {inst['refused']['message']}; no gate ran")
        elif inst.get("protected_changes"):
            click.echo(f"    judged with the base's version of the protected path(s) it changed: "
                       f"{', '.join(inst['protected_changes'][:10])}")
        if not inst.get("refused") and not any(g["mode"] == "enforced" for g in inst["gates"]):
            click.echo("    no enforced gate applies to this track: the verdict proves only which commit was seen")
        for g in inst["gates"]:
            mark = "skip" if g["skipped"] else ("pass" if g["passed"] else "FAIL")
            what = (g["error"] if g["skipped"] or g["exit_code"] is None
                    else f"exit {g['exit_code']} in {g['duration_s']:.2f}s")
            code = f"[{g['code']}] " if g["code"] else ""
            if g.get("signature") and not g["skipped"]:
                # A probe neither passes nor fails: it says how the attempt behaves.
                mark = "seen"
                sig = g["signature"]
                what += f", {sig['over']} sha256 {(sig['sha256'] or 'none')[:12]}"
            click.echo(f"    {mark:<4} {g['name']:<16} {g['mode']:<8} {code}{what}")
            if g["log"] and not g["passed"] and g["mode"] != "probe":
                click.echo(f"         log: {g['log']}")
    for err in r["errors"]:
        click.echo(f"error[{err['code']}]: instance {err['id']}: {err['message']}", err=True)
        if err["hint"]:
            click.echo(f"hint: {err['hint']}", err=True)


@main_group.command()
@click.argument("task")
@click.option("--instance", "instances", multiple=True, help="Check only this instance (repeatable). Default: every succeeded one.")
@click.option("--gate", "gates", multiple=True,
              help="Run only this gate (repeatable). Gates it requires count as not passed unless also named; "
                   "the evidence is then incomplete and not a pick candidate.")
@click.option("--jobs", type=click.IntRange(1, 1024), default=None,
              help="Instances checked at once (default: max_total from the config).")
@json_option
def check(task: str, instances: tuple[str, ...], gates: tuple[str, ...], jobs: int | None, as_json: bool) -> None:
    """Run the gates of the run's frozen configuration in each succeeded
    instance's worktree (clean, at its branch tip), write an evidence pack
    per instance bound to that commit and tree, and set verdict and score.
    Exits 1 when any checked instance's verdict is fail."""
    from gitflow_parallel import gates as G

    run_verb(as_json, lambda: G.check(_project(), task, instances=list(instances) or None,
                                      gates=list(gates) or None, jobs=jobs), _render_check, ok=G.check_ok)


# -- run ----------------------------------------------------------------------------
class _RunProgress:
    """The live progress line, on a terminal only: one line redrawn in place
    with a carriage return; cleared before the summary is printed."""

    def __init__(self) -> None:
        self.shown = ""

    def __call__(self, s: dict[str, Any]) -> None:
        text = (f"{s['task']}: {s['running']} running, {s['succeeded']} done, {s['failed']} failed, "
                f"{s['queued']} queued, {s['elapsed_s']:.1f}s")
        if s["stopping"]:
            text += f" (stopping on {s['stopping']})"
        elif s["waiting_for_slot"]:
            text += f" (waiting for a free slot; max_total {s['max_total']})"
        if text != self.shown:
            click.echo("\r" + text + "\x1b[K", nl=False, err=True)
            self.shown = text

    def clear(self) -> None:
        if self.shown:
            click.echo("\r\x1b[K", nl=False, err=True)
            self.shown = ""


class _RunWaitNotice:
    """Off a terminal: no progress line, but say once that the run is
    waiting for slots other runs hold, so a silent pause has a reason."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, s: dict[str, Any]) -> None:
        if s["waiting_for_slot"] and not self.said:
            click.echo(f"git parallel run: waiting for a free slot (max_total {s['max_total']} instances "
                       "run at once in this repository)", err=True)
            self.said = True


def render_run(r: dict[str, Any]) -> None:
    c = r["counts"]
    head = f"run {r['run_id']} of {r['task']}: {c['succeeded']} succeeded, {c['failed']} failed"
    if c["aborted"]:
        head += f", {c['aborted']} aborted"
    click.echo(f"{head} ({r['elapsed_s']:.1f}s)")
    header = ("ID", "STATUS", "EXIT", "TIME", "HEAD", "LOG")
    rows = [header]
    for row in r["instances"]:
        rows.append((row["id"], row["status"], _short(row["exit_code"]),
                     "-" if row["duration_s"] is None else f"{row['duration_s']:.1f}s", _short(row["head"]),
                     row["log"] or "-"))
    widths = [max(len(x[i]) for x in rows) for i in range(len(header))]
    for x in rows:
        click.echo("  ".join(col.ljust(w) for col, w in zip(x, widths)).rstrip())
    for row in r["instances"]:
        if row["error"]:
            click.echo(f"  {row['id']}: {row['error']}")
    if r["interrupted"]:
        click.echo(f"stopped on {r['interrupted']}: running commands were stopped and marked aborted")
    if r["notes_error"]:
        click.echo(f"warning: the notes were not written ({r['notes_error']}); "
                   f"`git parallel recover {r['task']}` writes missing notes", err=True)
    bad = [row["id"] for row in r["instances"] if row["status"] in ("failed", "aborted")]
    if bad:
        click.echo(f"next: read the logs; `git parallel retry {r['task']} ID` starts a new attempt "
                   f"(failed or aborted: {', '.join(bad)})")
    elif all(row["status"] == "succeeded" for row in r["instances"]):
        click.echo(f"next: git parallel check {r['task']}")


def render_rounds(r: dict[str, Any]) -> None:
    for step in r["rounds"]:
        run = step["run"]
        c = run["counts"]
        verdicts = {i["id"]: i["verdict"] for i in (step["check"] or {}).get("instances", [])}
        cells = [f"{row['id']}:{row['status']}" + (f"/{verdicts[row['id']]}" if row["id"] in verdicts else "")
                 for row in run["instances"]]
        click.echo(f"round {step['round']}: {c['succeeded']} succeeded, {c['failed']} failed  ({', '.join(cells)})")
        for err in (step["check"] or {}).get("errors", []):
            click.echo(f"  check of {err['id']}: error[{err['code']}]: {err['message']}")
        if step["retried"]:
            click.echo(f"  retried with feedback: {', '.join(step['retried'])}")
    if r["ok"]:
        click.echo(f"passed after {len(r['rounds'])} round(s): {', '.join(r['passed'])}")
        click.echo(f"next: git parallel pick {r['task']}")
    else:
        left = sorted(set(r["tracks"]) - set(r["tracks_passed"]))
        click.echo(f"no passing attempt for track(s) {', '.join(left)} after {len(r['rounds'])} round(s)")
        click.echo(f"next: read the feedback and logs (`git parallel status {r['task']}`); retry by hand or spawn anew")


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
@click.option("--remote", default=None, metavar="R",
              help="Run nothing here: publish CMD (and --timeout) in the run's manifest on remote R, for "
                   "`git parallel worker --remote R` on other machines.")
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARG]...")
def run(task: str, instances: tuple[str, ...], timeout: float | None, jobs: int | None, until_pass: int | None,
        use_tmux: bool, remote: str | None, as_json: bool, command: tuple[str, ...]) -> None:
    """Run CMD in the worktree of every pending instance of TASK, at most J
    at once and at most max_total in the whole repository.

    Arguments go to CMD as given, never through a shell; {task}, {instance},
    {track}, {attempt} and {worktree} in them are replaced, and the
    environment has GIT_PARALLEL_TASK, _RUN_ID, _INSTANCE, _TRACK, _ATTEMPT,
    _WORKTREE and _EVENTS (a JSONL file the command may append to).  Output
    goes to <git common dir>/parallel/logs/<run_id>/<id>.<attempt>.log.
    Whatever CMD leaves uncommitted is committed on the instance branch
    (commit_leftovers).  Exit status 0 only when every selected instance
    succeeded."""
    from gitflow_parallel import runner

    if remote is not None:
        given = [o for o, v in (("--instance", instances), ("--jobs", jobs), ("--until-pass", until_pass),
                                ("--tmux", use_tmux)) if v]
        if given:
            raise click.UsageError(f"{', '.join(given)} cannot go with --remote (workers run every instance)")
        from gitflow_parallel import remote as remote_mod

        def render(r: dict[str, Any]) -> None:
            _render_published(r)
            click.echo(f"next: git parallel worker --remote {remote} --task {task}  (on each worker machine), "
                       f"then git parallel collect {task}")

        run_verb(as_json, lambda: remote_mod.publish(_project(), task, remote, agent=list(command), timeout=timeout),
                 render)
        return
    live = sys.stderr.isatty() and not as_json
    progress: Any = _RunProgress() if live else _RunWaitNotice()

    def call() -> dict[str, Any]:
        try:
            if until_pass is not None:
                from gitflow_parallel import iterate

                return iterate.until_pass(_project(), task, list(command), until_pass,
                                          instances=list(instances) or None, timeout=timeout, jobs=jobs,
                                          progress=progress, tmux=use_tmux)
            return runner.run(_project(), task, list(command), instances=list(instances) or None,
                              timeout=timeout, jobs=jobs, progress=progress, tmux=use_tmux)
        finally:
            if live:
                progress.clear()

    if until_pass is not None:
        run_verb(as_json, call, render_rounds, ok=lambda r: bool(r["ok"]))
    else:
        run_verb(as_json, call, render_run, ok=runner.succeeded)


def render_worker(r: dict[str, Any]) -> None:
    rows = r["instances"]
    click.echo(f"worker {r['worker']} on {r['remote']}: {r['delivered']} of {len(rows)} instance(s) delivered "
               f"({r['stopped']})")
    for row in rows:
        what = ("delivered" if row.get("delivered") else "lost its claim" if row.get("lost")
                else "released" if row.get("released") else "not delivered")
        extra = f", verdict {row['verdict']}" if row.get("verdict") else ""
        took = f"; took over from {row['takeover']['worker']}" if row.get("takeover") else ""
        click.echo(f"  {row['task']}/{row['id']} attempt {row['attempt']}: {row.get('status')}{extra}, {what}{took}")
        if row.get("error"):
            click.echo(f"    {row['error']}")


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
    from gitflow_parallel import worker as worker_mod

    def say(text: str) -> None:
        if not as_json:
            click.echo(f"git parallel worker: {text}", err=True)

    run_verb(as_json, lambda: worker_mod.work(_project(), remote, task=task, once=once, max_instances=max_instances,
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
    from gitflow_parallel import remote as remote_mod

    def render(r: dict[str, Any]) -> None:
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
        else:
            click.echo(f"next: git parallel pick {task}")

    run_verb(as_json, lambda: remote_mod.collect(_project(), task, remote), render)


@main_group.command()
@click.argument("task")
@click.argument("instance", required=False)
@json_option
def attach(task: str, instance: str | None, as_json: bool) -> None:
    """Attach to the tmux session of `git parallel run TASK --tmux`
    (parallel-TASK), at INSTANCE's window if given; inside tmux, switch to
    it.  With --json, print the tmux commands instead of running them."""
    from gitflow_parallel import tmux

    def call() -> dict[str, Any]:
        _project().store.load(task)  # the task must have a run
        session, steps = tmux.attach_target(task, instance)
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


# -- hooks --------------------------------------------------------------------------
@main_group.group("hooks")
def hooks_group() -> None:
    """Git hooks that hold plain `git merge`, fast-forwards and base-branch
    resets to the gates: only a track's picked winner, with fresh passing
    evidence for the exact commit, may land.  Installed where git runs hooks
    (`git rev-parse --git-path hooks`, so core.hooksPath is honoured and every
    linked worktree is covered); an existing hook is kept as <name>.legacy and
    runs first."""


def _render_hooks(r: dict[str, Any]) -> None:
    click.echo(f"hooks dir: {r['hooks_dir']}" + (f" (core.hooksPath {r['core_hooks_path']})"
                                                  if r.get("core_hooks_path") else ""))
    for h in r["hooks"]:
        if "action" in h:
            extra = (f"; the existing hook runs first as {Path(h['legacy']).name}"
                     if h.get("kept_foreign") else "")
            click.echo(f"  {h['name']:<22} {h['action']}{extra}")
        else:
            where = "" if h["state"] == "absent" else f" at {h['path']}"
            extra = f"; chained: {Path(h['legacy']).name}" if h.get("legacy") else ""
            if h["state"] == "ours" and not h.get("python_exists"):
                extra += f"; warning: its Python {h.get('python')} is gone (git-parallel on PATH is used, if any)"
            elif h["state"] == "ours" and not h.get("current"):
                extra += "; outdated (`git parallel hooks install` rewrites it)"
            click.echo(f"  {h['name']:<22} {h['state']}{where}{extra}")
    if "live_runs" in r:
        runs = ", ".join(r["live_runs"]) or "none"
        click.echo(f"live runs: {runs}")


@hooks_group.command("install")
@json_option
def hooks_install(as_json: bool) -> None:
    """Install pre-merge-commit, reference-transaction and post-checkout.
    Running it again only rewrites what changed."""
    from gitflow_parallel import hooks

    run_verb(as_json, lambda: hooks.install(_project()), _render_hooks)


@hooks_group.command("uninstall")
@json_option
def hooks_uninstall(as_json: bool) -> None:
    """Remove git-parallel's hook scripts (only those) and put back the hooks
    they replaced."""
    from gitflow_parallel import hooks

    run_verb(as_json, lambda: hooks.uninstall(_project()), _render_hooks)


@hooks_group.command("status")
@json_option
def hooks_status(as_json: bool) -> None:
    """Per hook: ours, foreign or absent, and where."""
    from gitflow_parallel import hooks

    run_verb(as_json, lambda: hooks.status(_project()), _render_hooks)


@main_group.command("_hook", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--common", "common_dir", required=True, help="The common git dir of the repository.")
@click.option("--branch", default=None, help="post-checkout: the branch HEAD now points at.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook_cmd(name: str, common_dir: str, branch: str | None, args: tuple[str, ...]) -> None:
    """The slow path of the installed hook scripts (not for people): exit 0
    lets git go on, 10 refuses; reference-transaction reads its stdin."""
    from gitflow_parallel import hooks

    sys.exit(hooks.run(name, list(args), common_dir, branch=branch, stdin=sys.stdin))


# -- recover / validate -------------------------------------------------------------------
def _finding_line(f: dict[str, Any]) -> str:
    where = f["task"] + (f"/{f['instance']}" if f.get("instance") else "") if f.get("task") else "repository"
    return f"{f['severity']}[{f['code']}] {where}: {f['message']}"


def render_validate(r: dict[str, Any]) -> None:
    for f in r["findings"]:
        click.echo(_finding_line(f))
        if f["repair"]:
            click.echo(f"  recover will: {f['repair']}")
        click.echo(f"  fix: {f['fix']}")
    runs = len(r["runs"])
    if not r["findings"]:
        click.echo(f"validate: {runs} run(s) checked, records agree with git")
    else:
        click.echo(f"validate: {runs} run(s) checked, {r['errors']} error(s), {r['warnings']} warning(s)")


def render_recover(r: dict[str, Any]) -> None:
    head = f"recovery {r['recovery_id']} of run {r['run_id']} ({r['task']}) at revision {r['run_revision']}"
    if r["noop"]:
        click.echo(f"{head}: nothing to repair, the records agree with git")
    elif r["dry_run"]:
        click.echo(f"{head}: plan (dry run, nothing changed)")
        for step in r["plan"]:
            click.echo(f"  would {step['what']}")
            click.echo(f"    because {step['why']}")
    else:
        click.echo(f"{head}: repaired, now revision {r['run_revision_after']} ({r['status']})")
        for step in r["repaired"]:
            click.echo(f"  {step['what']}")
    for f in r["left"]:
        click.echo(f"left: {_finding_line(f)}")
        click.echo(f"  fix: {f['fix']}")
    if not r["dry_run"]:
        click.echo(f"audit: {r['audit']}")
    for step in r["next"]:
        click.echo(f"next: {step}")


@main_group.command()
@click.argument("task")
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing (not even the audit log).")
@json_option
def recover(task: str, dry_run: bool, as_json: bool) -> None:
    """Reconcile TASK's run record with what git holds after a crash:
    instances left running by a dead process, half-made spawns, a base that
    already holds the winners, picks or evidence written but not recorded,
    missing notes, stale git lock files.  Every candidate repair is decided
    first; if any cannot be, nothing changes (PARALLEL_RECOVERY_REFUSED).
    Each step goes to <common>/parallel/audit/<run_id>.jsonl; running it
    again is a no-op.  Failed instances are never retried."""
    from gitflow_parallel import recovery

    run_verb(as_json, lambda: recovery.recover(_project(), task, dry_run=dry_run), render_recover)


@main_group.command()
@click.argument("task", required=False)
@json_option
def validate(task: str | None, as_json: bool) -> None:
    """Report every inconsistency between run records, worktrees, branches,
    archive refs, evidence, picks, notes and git lock files, each with a
    code, a severity and the command that helps.  Exits 1 when any is an
    error."""
    from gitflow_parallel import recovery

    run_verb(as_json, lambda: recovery.validate(_project(), task), render_validate, ok=lambda r: bool(r["ok"]))


def _wants_json(args: list[str]) -> bool:
    """--json among the options (not among a command's arguments after --)."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def main() -> None:
    """Run the CLI; a usage error is printed as JSON too when --json was given."""
    args = sys.argv[1:]
    try:
        code = main_group.main(args=args, prog_name="git parallel", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.UsageError as exc:
        if not _wants_json(args):
            exc.show()
            sys.exit(exc.exit_code)
        hint = f"see `{exc.ctx.command_path} --help`" if exc.ctx is not None else "see `git parallel -h`"
        _emit_json({"ok": False, "code": "USAGE", "message": exc.format_message(), "hint": hint})
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
