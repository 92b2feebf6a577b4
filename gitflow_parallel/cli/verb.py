"""What every verb's outcome goes through, without click: ``run_verb`` (a
verb's outcome to output and exit status: 0 done, 1 refused, 3 internal
error with a traceback log), ``echo``, ``visible`` and the project opener.

Kept apart from ``base`` (the click group) so that a verb run without the
parser (``cli/status``: ``git parallel status`` starts before click could
be imported) reads and says exactly what it says under it."""

from __future__ import annotations

import codecs
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar, cast

from gitflow_parallel.errors import ParallelError, is_no_space, no_space

# 0 done and 2 usage error come from click itself.
EXIT_REFUSED, EXIT_INTERNAL = 1, 3


if TYPE_CHECKING:
    from gitflow_parallel.state.project import Project

T = TypeVar("T")

# Control characters a terminal would obey: C0 but tab and newline, a carriage
# return not ending a line, DEL, C1 (0x9b is a CSI on some terminals), and the
# bidirectional overrides that reorder what a line appears to say.
# One table for str.translate, not a callback per match: a log of a million
# NUL bytes is escaped in C, not in a million Python calls.
_LONE_CR = re.compile(r"\r(?!\n)")
_CONTROLS = [*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20), *range(0x7f, 0xa0),
             0x200e, 0x200f, *range(0x202a, 0x202f), *range(0x2066, 0x206a)]
_ESCAPES = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _CONTROLS}
# Colour and style (SGR: ESC [ parameters m) only paint text: dropped, the
# text reads as written (a jest or vitest log in colour stays readable, and
# nothing painted to be hidden stays hidden).  Every other sequence is escaped.
_SGR = re.compile(r"\x1b\[[0-9;:]*m")
# The start of one at the end of a piece of a stream (held for the next piece,
# unless it is too long to be one).
_SGR_START = re.compile(r"\x1b(?:\[[0-9;:]{0,32})?\Z")


def visible(value: T) -> T:
    """``value`` with every control character in its strings written as a
    visible escape (``\\x1b``), colour and style sequences dropped: text
    from agents, gates and remotes is printed as what it says, never obeyed
    (a cursor move cannot turn a FAIL line into a pass).  Dicts and lists
    are walked, keys included."""
    # Each string becomes a string and each container one of its own type:
    # the shape, and so the type, is the one given.
    return cast(T, _visible(value))


def _visible(value: object) -> object:
    if isinstance(value, str):
        return _LONE_CR.sub(r"\\x0d", _SGR.sub("", value)).translate(_ESCAPES)
    if isinstance(value, dict):
        return {_visible(k): _visible(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_visible(v) for v in value)
    return value


def visible_stream(chunks: Iterable[bytes]) -> Iterator[str]:
    """``visible`` over a byte stream read in pieces: a character, a CRLF or
    a colour sequence split between two pieces still reads as one."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    held = ""
    for chunk in chunks:
        text = held + decoder.decode(chunk)
        start = _SGR_START.search(text)
        if start is not None:
            text, held = text[:start.start()], text[start.start():]
        else:
            text, held = (text[:-1], "\r") if text.endswith("\r") else (text, "")
        yield visible(text)
    yield visible(held + decoder.decode(b"", final=True))


def echo(message: object = "", err: bool = False, nl: bool = True) -> None:
    """``message`` and a newline (unless not ``nl``) on stdout (or stderr),
    flushed: what ``click.echo`` does with text, which is all git-parallel
    prints (every string it prints from elsewhere went through ``visible``)."""
    stream = sys.stderr if err else sys.stdout
    text = f"{message}\n" if nl else str(message)
    try:
        stream.write(text)
    except UnicodeEncodeError:  # a stream told to write ASCII: what it cannot say, escaped
        encoding = stream.encoding or "utf-8"
        stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def _from_click(exc: BaseException) -> bool:
    """Is ``exc`` one of click's, which click turns into output and an exit
    status itself?  (None can be without click imported.)"""
    click = sys.modules.get("click")
    return click is not None and isinstance(exc, (click.exceptions.Exit, click.exceptions.Abort,
                                                  click.ClickException))


def stdout_closed() -> bool:
    """Has the reader of our standard output gone (a pipe whose other end
    closed: ``git parallel status | head``)?"""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def emit_json(obj: object) -> None:
    echo(json.dumps(obj, sort_keys=True, default=str))


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
        echo(f"git-parallel: the traceback could not be kept in {folder} ({why}); here it is:", err=True)
        echo(text.rstrip("\n"), err=True)
        return None


def _refused(as_json: bool, exc: ParallelError) -> None:
    if as_json:
        emit_json(exc.as_json())
    else:
        echo(f"error[{exc.code}]: {visible(exc.message)}", err=True)
        if exc.hint:
            echo(f"hint: {visible(exc.hint)}", err=True)
    sys.exit(EXIT_REFUSED)


def run_verb(as_json: bool, fn: Callable[[], T], render: Callable[[T], None] | None = None,
             ok: Callable[[T], bool] | None = None, renders_warnings: bool = False) -> None:
    """Call a verb and map its outcome to output and exit status.  The
    result's ``warnings`` go to stderr, unless ``render`` prints them itself
    (``renders_warnings``: once is enough).  A reader that closed our
    output ends it as it ends git (:func:`end_on_closed_pipe`)."""
    try:
        _run_verb(as_json, fn, render, ok, renders_warnings)
    except BrokenPipeError:
        if not stdout_closed():
            raise
        end_on_closed_pipe()


def end_on_closed_pipe() -> None:
    """The reader of our output went away (``git parallel status | head``):
    end as git does there, killed by SIGPIPE without a word (the status a
    shell shows is 141), before click would say ``exit 1``."""
    import signal

    # What is still buffered for the closed pipe would fail again at exit.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def _run_verb(as_json: bool, fn: Callable[[], T], render: Callable[[T], None] | None,
              ok: Callable[[T], bool] | None, renders_warnings: bool) -> None:
    try:
        result = fn()
    except ParallelError as exc:
        _refused(as_json, exc)
    except KeyboardInterrupt:
        echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # the one place unexpected errors surface
        if _from_click(exc):  # click's own (an exit, an abort, a usage error): click says them
            raise
        if isinstance(exc, BrokenPipeError) and stdout_closed():
            raise  # the reader of our output went away (`| head`): ``cli.entry`` ends quietly, as git does
        if is_no_space(exc):  # not a bug: the disk is full; say so as a refusal, with what to run
            _refused(as_json, no_space(f"git parallel stopped ({exc})",
                                       "run it again (`git parallel recover TASK` finishes what was cut short)"))
        log = _internal_log(exc)
        where = f"; the traceback is in {log}" if log else ""
        msg = f"internal error: {type(exc).__name__}: {exc}{where}"
        if as_json:
            emit_json({"ok": False, "code": "INTERNAL", "message": msg, "hint": "please report it with the log"})
        else:
            echo(msg, err=True)
            echo("hint: this is a bug in git-parallel; please report it with the log", err=True)
        sys.exit(EXIT_INTERNAL)
    success = ok(result) if ok else True
    if not as_json and isinstance(result, dict) and result.get("notes_error"):
        echo(f"warning: {visible(result['notes_error'])}", err=True)
    if not as_json and isinstance(result, dict) and result.get("remote_warning"):
        echo(f"warning: {visible(result['remote_warning'])}", err=True)
    if not as_json and isinstance(result, dict):
        said = [] if renders_warnings else (result.get("warnings") or [])
        for warning in (result.get("notify_warnings") or []) + said:
            echo(f"warning: {visible(warning)}", err=True)
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


