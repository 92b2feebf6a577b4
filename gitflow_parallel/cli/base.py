"""What every command shares: the ``git parallel`` group, ``run_verb`` (a
verb's outcome to output and exit status: 0 done, 1 refused, 2 usage, 3
internal error with a traceback log), ``--json`` and the project opener."""

from __future__ import annotations

import codecs
import importlib
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar, cast

import click

from gitflow_parallel import __version__
from gitflow_parallel.errors import ParallelError, is_no_space, no_space

# 0 done and 2 usage error come from click itself.
EXIT_REFUSED, EXIT_INTERNAL = 1, 3


# Control characters a terminal would obey: C0 but tab and newline, a carriage
# return not ending a line, DEL, C1 (0x9b is a CSI on some terminals), and the
# bidirectional overrides that reorder what a line appears to say.
if TYPE_CHECKING:
    from gitflow_parallel.state.project import Project

T = TypeVar("T")

# One table for str.translate, not a callback per match: a log of a million
# NUL bytes is escaped in C, not in a million Python calls.
_LONE_CR = re.compile(r"\r(?!\n)")
_CONTROLS = [*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20), *range(0x7f, 0xa0),
             0x200e, 0x200f, *range(0x202a, 0x202f), *range(0x2066, 0x206a)]
_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _CONTROLS}


def visible(value: T) -> T:
    """``value`` with every control character in its strings written as a
    visible escape (``\\x1b``): text from agents, gates and remotes is
    printed as what it says, never obeyed (a cursor move cannot turn a FAIL
    line into a pass).  Dicts and lists are walked, keys included."""
    # Each string becomes a string and each container one of its own type:
    # the shape, and so the type, is the one given.
    return cast(T, _visible(value))


def _visible(value: object) -> object:
    if isinstance(value, str):
        return _LONE_CR.sub(r"\\x0d", value).translate(_ESCAPES)
    if isinstance(value, dict):
        return {_visible(k): _visible(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_visible(v) for v in value)
    return value


def visible_stream(chunks: Iterable[bytes]) -> Iterator[str]:
    """``visible`` over a byte stream read in pieces: a character or a CRLF
    split between two pieces still reads as one."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    held = ""
    for chunk in chunks:
        text = held + decoder.decode(chunk)
        text, held = (text[:-1], "\r") if text.endswith("\r") else (text, "")
        yield visible(text)
    yield visible(held + decoder.decode(b"", final=True))


def emit_json(obj: object) -> None:
    click.echo(json.dumps(obj, sort_keys=True, default=str))


def _internal_log(exc: BaseException) -> Path | None:
    """Keep the traceback of an unexpected error in the common dir's
    parallel/logs; where it cannot be written whole (a full disk), no empty
    file is left and the traceback goes to stderr instead."""
    import traceback

    from gitflow_parallel.files import utcnow

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        from gitflow_parallel.git.repo import Repo

        folder = Repo.open().parallel_dir / "logs"
    except Exception:  # no repository to keep it in: the temp folder will do
        import tempfile

        folder = Path(tempfile.gettempdir()) / "git-parallel-logs"
    path = folder / f"internal-error-{utcnow().replace(':', '')}-{os.getpid()}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return path
    except OSError as why:
        try:
            path.unlink()
        except OSError:
            pass
        click.echo(f"git-parallel: the traceback could not be kept in {folder} ({why}); here it is:", err=True)
        click.echo(text.rstrip("\n"), err=True)
        return None


def _refused(as_json: bool, exc: ParallelError) -> None:
    if as_json:
        emit_json(exc.as_json())
    else:
        click.echo(f"error[{exc.code}]: {visible(exc.message)}", err=True)
        if exc.hint:
            click.echo(f"hint: {visible(exc.hint)}", err=True)
    sys.exit(EXIT_REFUSED)


def run_verb(as_json: bool, fn: Callable[[], T], render: Callable[[T], None] | None = None,
             ok: Callable[[T], bool] | None = None, renders_warnings: bool = False) -> None:
    """Call a verb and map its outcome to output and exit status.  The
    result's ``warnings`` go to stderr, unless ``render`` prints them itself
    (``renders_warnings``: once is enough)."""
    try:
        result = fn()
    except ParallelError as exc:
        _refused(as_json, exc)
    except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
        raise
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the one place unexpected errors surface
        if is_no_space(exc):  # not a bug: the disk is full; say so as a refusal, with what to run
            _refused(as_json, no_space(f"git parallel stopped ({exc})",
                                       "run it again (`git parallel recover TASK` finishes what was cut short)"))
        log = _internal_log(exc)
        where = f"; the traceback is in {log}" if log else ""
        msg = f"internal error: {type(exc).__name__}: {exc}{where}"
        if as_json:
            emit_json({"ok": False, "code": "INTERNAL", "message": msg, "hint": "please report it with the log"})
        else:
            click.echo(msg, err=True)
            click.echo("hint: this is a bug in git-parallel; please report it with the log", err=True)
        sys.exit(EXIT_INTERNAL)
    success = ok(result) if ok else True
    if not as_json and isinstance(result, dict) and result.get("notes_error"):
        click.echo(f"warning: {visible(result['notes_error'])}", err=True)
    if not as_json and isinstance(result, dict) and result.get("remote_warning"):
        click.echo(f"warning: {visible(result['remote_warning'])}", err=True)
    if not as_json and isinstance(result, dict):
        said = [] if renders_warnings else (result.get("warnings") or [])
        for warning in (result.get("notify_warnings") or []) + said:
            click.echo(f"warning: {visible(warning)}", err=True)
    if as_json:
        payload = dict(result) if isinstance(result, dict) else {"result": result}
        payload.setdefault("ok", success)
        emit_json(payload)
    elif render is not None:
        render(visible(result))  # text only: --json escapes control characters itself
    if not success:
        sys.exit(EXIT_REFUSED)


def project() -> Project:
    """The repository this command runs in (opened only when a verb runs)."""
    from gitflow_parallel.state.project import Project

    return Project.open()


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

