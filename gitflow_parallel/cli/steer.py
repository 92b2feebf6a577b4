"""The keys of ``watch``'s terminal view: which instance is selected, and
what o, d and a do to it.

The terminal is put in cbreak mode (a key at a time, no echo; Ctrl-C still
interrupts) only while the view runs with a terminal on both stdin and
stdout, and is given back as it was on exit and around whatever takes it
over meanwhile (the pager, ``tmux attach``).  Keys are read between two
reads of the run record, so a key costs at most one redraw's wait.  Each
action is the verb a script would run: o is ``attach TASK ID``, d the
attempt's worktree against the base (``diff`` once it has ended), a is
``abort TASK ID`` after a ``y``.  The standard library does it (termios,
select): ``rich`` and its kin draw well but read no keys, and a second
dependency for one screen was not worth it.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import termios
import tty
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import click

from gitflow_parallel.cli.base import visible
from gitflow_parallel.errors import ParallelError

if TYPE_CHECKING:
    from gitflow_parallel.commands.watch import View
    from gitflow_parallel.state.project import Project

ARROWS = {b"\x1b[A": "up", b"\x1bOA": "up", b"\x1b[B": "down", b"\x1bOB": "down"}


def parse_keys(data: bytes) -> list[str]:
    """Key names in what one read gave: arrows by name, other escape
    sequences dropped, every other byte as its character."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        seq = next((s for s in ARROWS if data.startswith(s, i)), None)
        if seq is not None:
            keys.append(ARROWS[seq])
            i += len(seq)
        elif data[i:i + 1] == b"\x1b":
            i += 1
            if data[i:i + 1] in (b"[", b"O"):  # skip the rest of an unknown sequence
                i += 1
                while i < len(data) and not 0x40 <= data[i] <= 0x7e:
                    i += 1
                i += 1
        else:
            keys.append(chr(data[i]))
            i += 1
    return keys


class Keys:
    """stdin in cbreak mode while the view runs (nothing at all when off)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.fd = sys.stdin.fileno() if on else -1
        self.saved: list[Any] | None = None

    def __enter__(self) -> "Keys":
        if self.on:
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """The terminal as it was, for a program that takes it over."""
        self._restore()
        try:
            yield
        finally:
            if self.on:
                tty.setcbreak(self.fd)

    def read(self, seconds: float) -> list[str]:
        """The keys typed within ``seconds`` (returns at the first read);
        ``q`` when the terminal is gone."""
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if not ready:
            return []
        try:
            data = os.read(self.fd, 64)
        except OSError:
            data = b""
        return parse_keys(data) if data else ["q"]


class Steering:
    """The selection, the last message and an abort waiting for its ``y``."""

    def __init__(self, project: Project, task: str, keys: Keys, forget: Callable[[], None]) -> None:
        self.project, self.task, self.keys, self.forget = project, task, keys, forget
        self.choice: str | None = None
        self.message = ""
        self.confirm: str | None = None

    def selected(self, view: View) -> str:
        ids = [i["id"] for i in view["instances"]]
        if self.choice not in ids:
            self.choice = ids[0] if ids else None
        return self.choice or ""

    def handle(self, keys: list[str], view: View, redraw: Callable[[], None]) -> bool:
        """Act on ``keys``; False on q."""
        ids = [i["id"] for i in view["instances"]]
        for key in keys:
            if self.confirm is not None:
                target, self.confirm = self.confirm, None
                if key in ("y", "Y"):
                    self._abort(target, redraw)
                else:
                    self.message = f"abort of {target} cancelled"
                continue
            if key == "q":
                return False
            self.selected(view)
            if key.isdigit() and 0 < int(key) <= len(ids):
                self.choice = ids[int(key) - 1]
            elif key in ("up", "down", "k", "j") and self.choice in ids:
                step = -1 if key in ("up", "k") else 1
                self.choice = ids[max(0, min(len(ids) - 1, ids.index(self.choice) + step))]
            elif key == "o" and self.choice:
                self._open(self.choice)
            elif key == "d" and self.choice:
                self._diff(self.choice)
            elif key == "a" and self.choice:
                self.confirm = self.choice
                self.message = f"abort instance {self.choice} of {self.task}? y/N"
        return True

    def _abort(self, inst_id: str, redraw: Callable[[], None]) -> None:
        from gitflow_parallel.commands import abort as abort_cmd

        self.message = f"aborting {inst_id} (its agent gets SIGTERM) ..."
        redraw()
        try:
            abort_cmd.abort(self.project, self.task, inst_id)
        except ParallelError as exc:
            self.message = f"error[{exc.code}]: {exc.message}"
            return
        self.message = f"{inst_id} aborted (its worktree stays: `git parallel retry {self.task} {inst_id}`)"

    def _open(self, inst_id: str) -> None:
        from gitflow_parallel.proc import tmux

        try:
            session, steps = tmux.attach_target(self.task, inst_id)
        except ParallelError as exc:
            # The command first: a narrow terminal cuts the line at its width.
            self.message = f"`git parallel logs {self.task} {inst_id}` shows its output; no tmux window: {exc.message}"

            return
        if os.environ.get("TMUX"):  # switch this client to the window, the view stays where it was
            for step in steps:
                subprocess.run(step, check=False, stdin=subprocess.DEVNULL, capture_output=True)
            self.message = f"switched to {inst_id}'s window in {session}"
            return
        with self.keys.suspended():
            click.echo(f"\nattaching to {session} (detach with Ctrl-b d to come back)")
            for step in steps:
                subprocess.run(step, check=False)
        self.forget()
        self.message = f"back from {session}"

    def _diff(self, inst_id: str) -> None:
        from gitflow_parallel.commands import watch as watch_cmd

        try:
            text = watch_cmd.patch(self.project, self.task, inst_id)
        except ParallelError as exc:
            self.message = f"error[{exc.code}]: {exc.message}"
            return
        with self.keys.suspended():
            click.echo()
            click.echo_via_pager(visible(text) if text else f"instance {inst_id}: no change against the base yet\n")
        self.forget()
        self.message = f"shown: the diff of {inst_id}"
