"""The command line: parsing and rendering only.

Every verb's logic is a function in the package; these modules turn options
into arguments, results into text or ``--json``, and errors into
``error[CODE]: ...`` / ``hint: ...`` with the documented exit status
(0 done, 1 refused, 2 usage, 3 internal error with a traceback log).
``base`` holds the group; ``attempts``, ``landing``, ``review``, ``live``
and ``maintenance`` add the commands (each imported when one of its
commands is asked for: ``base.HOMES``); ``render`` turns results into text;
``verb`` maps a verb's outcome to output and exit status without click,
so that ``status`` (``cli/status``) runs its plain forms without it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gitflow_parallel.cli.base import main_group, run_verb

__all__ = ["entry", "main", "main_group", "run_verb"]


def __getattr__(name: str) -> Any:
    """``main_group`` and ``run_verb`` from ``base``, imported when asked
    for: ``status`` runs without click (``cli/status``)."""
    if name in ("main_group", "run_verb"):
        from gitflow_parallel.cli import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _wants_json(args: list[str]) -> bool:
    """--json among the options (not among a command's arguments after --)."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def entry() -> None:
    """The console script (and ``python -m gitflow_parallel``): ``main`` in
    a process that ends with it.  ``status`` runs with the collector off and
    what it made frozen at its end: its imports and records make tens of
    thousands of objects, which collections while it runs, and the one at
    exit, would only walk (in-process callers use ``main``, which leaves
    the collector as it is)."""
    import gc

    from gitflow_parallel.cli import status

    try:
        if status.plain_form(sys.argv[1:]) is None:
            main()
            return
        gc.disable()
        try:
            main()
        finally:
            gc.freeze()
    except BrokenPipeError:
        _closed_pipe()


def _closed_pipe() -> None:
    """A broken pipe out of ``status``'s plain forms (run without
    ``run_verb``): quiet if it is our standard output that closed."""
    from gitflow_parallel.cli.verb import end_on_closed_pipe, stdout_closed

    if not stdout_closed():
        raise
    end_on_closed_pipe()


def main() -> None:
    """Run the CLI; a usage error is printed as JSON too when --json was given."""
    args = sys.argv[1:]
    from gitflow_parallel.cli import status

    plain = status.plain_form(args)
    if plain is not None:
        status.show(*plain)
        return
    import click

    from gitflow_parallel.cli.base import emit_json, main_group

    try:
        code = main_group.main(args=args, prog_name="git parallel", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.UsageError as exc:
        if not _wants_json(args):
            exc.show()
            sys.exit(exc.exit_code)
        hint = f"see `{exc.ctx.command_path} --help`" if exc.ctx is not None else "see `git parallel -h`"
        emit_json({"ok": False, "code": "USAGE", "message": exc.format_message(), "hint": hint})
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
