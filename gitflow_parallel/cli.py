"""The command line: parsing and rendering only.

Every verb's logic is a function in the package; this module turns options
into arguments, results into text or ``--json``, and errors into
``error[CODE]: ...`` / ``hint: ...`` with the documented exit status
(0 done, 1 refused, 2 usage, 3 internal error with a traceback log).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from gitflow_parallel import __version__
from gitflow_parallel.errors import ParallelError

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


def _emit_json(obj: Any) -> None:
    click.echo(json.dumps(obj, sort_keys=True, default=str))


def _internal_log(exc: BaseException) -> Path | None:
    """Keep the traceback of an unexpected error in the common dir's parallel/logs."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        from gitflow_parallel.files import utcnow
        from gitflow_parallel.gitrepo import Repo

        folder = Repo.open().parallel_dir / "logs"
    except Exception:
        import tempfile

        folder = Path(tempfile.gettempdir()) / "git-parallel-logs"
        from gitflow_parallel.files import utcnow
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
        order = ["init", "spawn", "run", "check", "pick", "merge", "status", "retry", "abort", "cleanup",
                 "recover", "validate", "hooks", "demo", "help"]
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


# -- init ---------------------------------------------------------------------------
@main_group.command()
@click.option("--force", is_flag=True, help="Overwrite an existing .gitparallel.yaml with the template.")
@json_option
def init(force: bool, as_json: bool) -> None:
    """Write a commented .gitparallel.yaml and set notes.rewriteRef and
    notes.displayRef to the notes ref, so notes follow rebases and show in
    git log.  Commit the file: spawn reads it from the base commit."""
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        click.echo(f"{'wrote' if r['wrote'] else 'kept existing'} {r['config']}")
        for k, v in r["git_config"].items():
            click.echo(f"git config {k} {v}")
        click.echo("next: edit the gates, commit the file, then `git parallel spawn TASK`")

    run_verb(as_json, lambda: lifecycle.init(_project(), force=force), render)


# -- spawn --------------------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.option("-n", "instances", type=click.IntRange(1, 64), default=None,
              help="Instances per track (default: `instances` from the config, 3).")
@click.option("--base", default=None, help="Base branch to start from and land on (default: the current branch).")
@click.option("--track", "tracks", multiple=True, help="A track (sub-task); repeat for fan-out. Default: one track 'main'.")
@json_option
def spawn(task: str, instances: int | None, base: str | None, tracks: tuple[str, ...], as_json: bool) -> None:
    """Create a run for TASK: N branches parallel/TASK/ID at the base commit,
    each with its own worktree, recorded in the common git dir.

    All or nothing: if any branch or worktree cannot be made, everything is
    removed again.  Refused past max_total live instances in the repository."""
    from gitflow_parallel import lifecycle

    def render(r: dict[str, Any]) -> None:
        click.echo(f"spawned run {r['run_id']} for {r['task']} on {r['base']['ref']} at {r['base']['commit'][:12]}")
        for inst in r["instances"]:
            click.echo(f"  {inst['id']:<10} {inst['branch']:<32} {inst['worktree']}")
        click.echo(f"next: git parallel run {r['task']} -- <agent command>")

    run_verb(as_json, lambda: lifecycle.spawn(_project(), task, n=instances, base=base, tracks=list(tracks)),
             render)


# -- status -------------------------------------------------------------------------
def _short(v: Any, n: int = 12) -> str:
    return "-" if v is None else str(v)[:n]


def render_status(r: dict[str, Any]) -> None:
    if "runs" in r:
        if not r["runs"] and not r["problems"]:
            click.echo("no runs (start one with `git parallel spawn TASK`)")
        for run in r["runs"]:
            click.echo(f"{run['task']:<24} {run['status']:<10} {run['instances']:>3} instances  "
                       f"{run['base']:<24} {run['run_id']}")
        for p in r["problems"]:
            click.echo(f"error[{p['code']}]: {p['message']}")
        return
    run = r["run"]
    click.echo(f"task {run['task']}  run {run['run_id']}  status {run['status']}  revision {run['run_revision']}")
    click.echo(f"base {run['base']['ref']} at {run['base']['commit'][:12]}")
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
            return {"run": run}
        return result

    run_verb(as_json, call, render_status)


# -- retry / abort / cleanup ------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--revision", type=int, default=None, help="Refuse unless the run is still at this run_revision.")
@json_option
def retry(task: str, instance: str, revision: int | None, as_json: bool) -> None:
    """Start a new attempt of a failed or aborted INSTANCE: its tip is kept
    under refs/parallel/archive/, its branch and worktree are reset to the
    base commit, and its attempt goes up by one (at most rework_max times)."""
    from gitflow_parallel import lifecycle
    from gitflow_parallel.store import find_instance

    def render(r: dict[str, Any]) -> None:
        inst = find_instance(r, instance)
        click.echo(f"instance {instance} reset to base {r['base']['commit'][:12]}, attempt {inst['attempt']}")
        prev = inst["history"][-1] if inst["history"] else None
        if prev and prev.get("archive_ref"):
            click.echo(f"previous attempt kept at {prev['archive_ref']}")
        click.echo(f"next: git parallel run {task} --instance {instance} -- <agent command>")

    run_verb(as_json, lambda: lifecycle.retry(_project(), task, instance, expected_revision=revision), render)


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
@click.option("--keep-losers", is_flag=True, default=None, help="Remove only the winners' worktrees; keep the losers'.")
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (committed onto the archive ref first).")
@json_option
def cleanup(task: str, keep_losers: bool | None, force: bool, as_json: bool) -> None:
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

    run_verb(as_json, lambda: lifecycle.cleanup(_project(), task, keep_losers=keep_losers or None, force=force),
             render)


# -- pick / merge ------------------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.option("--track", default=None, help="Pick only this track (default: every unpicked track).")
@json_option
def pick(task: str, track: str | None, as_json: bool) -> None:
    """Select each track's winner among the instances with complete, fresh,
    passing evidence (critic_first_pass: highest score, then earliest proof,
    then id; or majority_vote: the largest group of identical trees), and
    write the write-once pick record and its note on the winner's commit.
    A track already picked prints its record and changes nothing."""
    from gitflow_parallel import selection

    def render(r: dict[str, Any]) -> None:
        for p in r["picks"] + r["existing"]:
            w = p["winner"]
            again = " (already picked)" if p in r["existing"] else ""
            score = "unavailable" if p["score"] is None else p["score"]
            click.echo(f"track {p['track']}: winner {w['id']} at {w['commit'][:12]}, score {score}, "
                       f"by {p['selection_method']}{again}")
            for loser in p["losers"]:
                click.echo(f"  lost {loser['id']}: {loser['reason']}")
        click.echo(f"next: git parallel merge {task}")

    run_verb(as_json, lambda: selection.pick(_project(), task, track), render)


@main_group.command()
@click.argument("task")
@json_option
def merge(task: str, as_json: bool) -> None:
    """Land the picked winner(s) on the base branch: fast-forward when
    possible, else a merge commit computed in memory and resolved by
    merge.policy; the base ref moves once, by compare-and-swap, retried if
    it moved meanwhile.  With several tracks every track needs a pick (join).
    A clean worktree of the base follows the new tip; a dirty one refuses.
    Then the run's worktrees are cleaned up (tips kept in archive refs)."""
    from gitflow_parallel import merge as merge_mod

    def render(r: dict[str, Any]) -> None:
        m = r["merge"]
        if r["already"]:
            click.echo(f"already merged: {m['base_ref']} at {m['landed'][:12]}")
            return
        click.echo(f"landed {m['method']} on {m['base_ref']}: {m['previous'][:12]} -> {m['landed'][:12]}"
                   f" (attempts {m['attempts']})")
        for f in m["resolved_files"]:
            click.echo(f"  resolved by {m['policy']}: {f['path']} (track {f['track']})")
        for v in m["verified"]:
            click.echo(f"  verified track {v['track']} on the merged tree: {'pass' if v['passed'] else 'fail'}")
        if m.get("worktree_error"):
            click.echo(f"warning: could not update {m['worktree']}: {m['worktree_error']}", err=True)
        if r.get("cleanup_error"):
            e = r["cleanup_error"]
            click.echo(f"warning: cleanup refused: error[{e['code']}]: {e['message']}", err=True)
            click.echo(f"hint: {e['hint']}", err=True)
        elif r.get("cleanup"):
            click.echo(f"cleaned up {len(r['cleanup']['removed'])} worktree(s); tips kept under refs/parallel/archive/")
        click.echo(f"provenance: git notes --ref=parallel show {m['landed'][:12]}")

    run_verb(as_json, lambda: merge_mod.merge(_project(), task), render)


def main() -> None:
    try:
        main_group.main(prog_name="git parallel", standalone_mode=True)
    except SystemExit:
        raise


if __name__ == "__main__":
    main()
