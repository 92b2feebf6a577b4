"""Keeping a repository sound: hooks, recover, validate, plus demo and help."""

from __future__ import annotations

import sys

import click

from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb
from gitflow_parallel.cli.render import render_hooks, render_hooks_done, render_recover, render_validate


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
    from gitflow_parallel.commands.demo import run_demo

    echo = (lambda s: click.echo(s, err=True)) if as_json else click.echo
    run_verb(as_json, lambda: run_demo(directory, keep, echo=echo))


# -- hooks --------------------------------------------------------------------------
@main_group.group("hooks")
def hooks_group() -> None:
    """Git hooks that hold plain `git merge`, fast-forwards and base-branch
    resets to the gates: only a track's picked winner, with fresh passing
    evidence for the exact commit, may land.  Installed where git runs hooks
    (`git rev-parse --git-path hooks`, so core.hooksPath is honoured and every
    linked worktree is covered); an existing hook is kept as <name>.legacy and
    runs first (behind pre-commit's script, ours is the .legacy it runs).
    After husky's or lefthook's reinstall took ours away, `hooks status`,
    `check` and `merge` warn, and `hooks install` chains them in again."""


@hooks_group.command("install")
@json_option
def hooks_install(as_json: bool) -> None:
    """Install pre-merge-commit, reference-transaction and post-checkout.
    Running it again only rewrites what changed."""
    from gitflow_parallel.commands import hooks_install as hooks_install_cmd

    run_verb(as_json, lambda: hooks_install_cmd.install(_project()), render_hooks_done)


@hooks_group.command("uninstall")
@json_option
def hooks_uninstall(as_json: bool) -> None:
    """Remove git-parallel's hook scripts (only those) and put back the hooks
    they replaced."""
    from gitflow_parallel.commands import hooks_install as hooks_install_cmd

    run_verb(as_json, lambda: hooks_install_cmd.uninstall(_project()), render_hooks_done)


@hooks_group.command("status")
@json_option
def hooks_status(as_json: bool) -> None:
    """Per hook: ours, foreign or absent, and where."""
    from gitflow_parallel.commands import hooks_install as hooks_install_cmd

    run_verb(as_json, lambda: hooks_install_cmd.status(_project()), render_hooks)


@main_group.command("_hook", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--common", "common_dir", required=True, help="The common git dir of the repository.")
@click.option("--branch", default=None, help="post-checkout: the branch HEAD now points at.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def hook_cmd(name: str, common_dir: str, branch: str | None, args: tuple[str, ...]) -> None:
    """The slow path of the installed hook scripts (not for people): exit 0
    lets git go on, 10 refuses; reference-transaction reads its stdin."""
    from gitflow_parallel.commands import hook_impl as hook_impl_cmd

    sys.exit(hook_impl_cmd.run(name, list(args), common_dir, branch=branch, stdin=sys.stdin))


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
    from gitflow_parallel.commands import recover as recover_cmd

    run_verb(as_json, lambda: recover_cmd.recover(_project(), task, dry_run=dry_run), render_recover)


@main_group.command()
@click.argument("task", required=False)
@json_option
def validate(task: str | None, as_json: bool) -> None:
    """Report every inconsistency between run records, worktrees, branches,
    archive refs, evidence, picks, notes and git lock files, each with a
    code, a severity and the command that helps.  Exits 1 when any is an
    error."""
    from gitflow_parallel.commands import validate as validate_cmd

    run_verb(as_json, lambda: validate_cmd.validate(_project(), task), render_validate, ok=lambda r: bool(r["ok"]))
