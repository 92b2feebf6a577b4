"""What every command shares: the ``git parallel`` group, ``--json``, and
(from ``cli/verb``, where they need no click) ``run_verb`` (a verb's
outcome to output and exit status: 0 done, 1 refused, 2 usage, 3 internal
error with a traceback log) and the project opener."""

from __future__ import annotations

import importlib

import click

from gitflow_parallel import __version__
from gitflow_parallel.cli.verb import (EXIT_INTERNAL, EXIT_REFUSED, echo, emit_json, project, run_verb, visible,
                                       visible_stream)

__all__ = ["EXIT_INTERNAL", "EXIT_REFUSED", "HOMES", "echo", "emit_json", "json_option", "main_group", "project",
           "run_verb", "visible", "visible_stream"]

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")


# Which module of cli/ defines each command, in the order `--help` lists them.
# A command's module is imported when the command is asked for, so a verb
# pays only for its own imports (`status` starts without the engines of
# run, check and merge); `--help` and the man page import them all.
HOMES: dict[str, str] = {
    "init": "attempts", "spawn": "attempts", "publish": "review", "run": "attempts", "worker": "review",
    "collect": "review", "done": "attempts", "check": "landing", "pick": "landing", "unpick": "landing",
    "merge": "landing", "status": "review", "diff": "review", "show": "review", "logs": "review",
    "report": "review", "retry": "attempts", "abort": "attempts", "cleanup": "attempts", "push": "review",
    "fetch": "review", "prune": "review", "recover": "maintenance", "validate": "maintenance",
    "attach": "attempts", "hooks": "maintenance", "demo": "maintenance", "help": "maintenance",
    "stats": "live", "comment": "live", "watch": "live", "_hook": "maintenance",
}


class HelpGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(dict.fromkeys([*HOMES, *self.commands]))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in HOMES:
            importlib.import_module(f"gitflow_parallel.cli.{HOMES[cmd_name]}")  # its commands join the group
        return super().get_command(ctx, cmd_name)


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

