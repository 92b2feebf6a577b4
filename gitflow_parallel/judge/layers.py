"""The overlay layers the judge lays over a pristine checkout (namespace
layer only; see ``proc/namespace`` and ``proc/sandbox.GatePlan``).

- **An attempt's scratch layer** (``space``): the upper layer one
  attempt's gates share while it is judged (a ``build`` gate's output is
  there for the ``test`` gate after it), made empty under
  ``<common>/parallel/layers/`` and removed when the attempt's judging
  ends.  Nothing in it is ever seen by another attempt or another check.
- **A layer of files the judge writes** (``files_layer``): the added tests,
  written into a folder the judge has just made, so no path on the way can
  be a link an attempt planted.
- **A kept environment** (``judge/environment``): setup's upper layer,
  pruned to its ``keep`` paths (``prune``).

What gates leave for the judge (a findings file, a probe's ``outputs``) is
read through ``Merged``: the scratch layer first, then the checkout, never
following a link, a whiteout hiding the file below it.

``<common>/parallel`` is hidden from every sandboxed command, so no one but
the judge sees these folders.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from gitflow_parallel.files import remove_tree

LAYERS = "layers"
# What overlayfs marks a folder with when it hides the lower one's content.
_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")


def root(parallel_dir: Path) -> Path:
    return parallel_dir / LAYERS


def _remove(path: Path) -> None:
    """Remove ``path`` whole, at any depth; overlayfs leaves its work folder
    unreadable, and a gate's layer holds what it made (no link followed)."""
    remove_tree(path, ignore_errors=True)


@dataclass
class Space:
    """An upper layer and its overlayfs work folder, on one file system."""

    folder: Path

    @property
    def upper(self) -> Path:
        return self.folder / "upper"

    @property
    def work(self) -> Path:
        return self.folder / "work"

    @property
    def pair(self) -> tuple[Path, Path]:
        return self.upper, self.work


def make_space(parallel_dir: Path, prefix: str = "space-") -> Space:
    base = root(parallel_dir)
    base.mkdir(parents=True, exist_ok=True)
    space = Space(Path(tempfile.mkdtemp(prefix=prefix, dir=base)))
    space.upper.mkdir()
    space.work.mkdir()
    return space


@contextmanager
def space(parallel_dir: Path, prefix: str = "space-") -> Iterator[Space]:
    made = make_space(parallel_dir, prefix)
    try:
        yield made
    finally:
        _remove(made.folder)


def remove(path: Path) -> None:
    if os.path.lexists(path):
        _remove(path)


def files_layer(parallel_dir: Path, files: dict[str, bytes]) -> Path:
    """A new folder holding ``files`` (relative path: content)."""
    base = root(parallel_dir)
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="files-", dir=base))
    for rel, data in files.items():
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    return folder


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def prune(upper: Path, keep: list[str]) -> None:
    """Leave in ``upper`` only the ``keep`` paths (and the folders on the
    way to them): no whiteout, no opaque folder and no other file of setup's
    may hide or replace a file of the checkout it is later laid over."""
    wanted = {os.path.normpath(k).strip("/") for k in keep}
    along = {str(parent) for k in wanted for parent in Path(k).parents if str(parent) != "."}

    def visit(folder: Path, rel: str) -> None:
        for entry in os.scandir(folder):
            name = f"{rel}/{entry.name}" if rel else entry.name
            if name in wanted and not _whiteout(entry.stat(follow_symlinks=False)):
                continue
            if name in along and entry.is_dir(follow_symlinks=False):
                for attr in _OPAQUE:
                    try:
                        os.removexattr(entry.path, attr, follow_symlinks=False)
                    except OSError:
                        pass
                visit(Path(entry.path), name)
                continue
            remove(Path(entry.path))

    visit(upper, "")


class Merged:
    """Reads of the files a command left: ``layers`` looked at topmost
    first; a whiteout hides what is below it; nothing is followed."""

    def __init__(self, *layers: Path) -> None:
        self.layers = [p for p in layers if p is not None]

    def find(self, rel: str) -> Path | None:
        """Where ``rel`` is, as the command saw it; None if it was deleted or
        never there.  A folder on the way that is a link or a whiteout in a
        higher layer hides the lower ones."""
        parts = Path(os.path.normpath(rel)).parts
        if not parts or parts[0] in ("..", "/"):
            return None
        for layer in self.layers:
            path, hidden = layer, False
            for i, part in enumerate(parts):
                path = path / part
                try:
                    st = os.lstat(path)
                except OSError:
                    break
                if _whiteout(st) or (i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode)):
                    hidden = True
                    break
            else:
                return path
            if hidden:
                return None
        return None

    def names(self, pattern: str, limit: int | None = None) -> list[str]:
        """Relative paths matching the glob ``pattern`` (``**`` for any
        folders) in any layer, no link followed on the way: ``glob`` follows
        them, so a probe's ``out -> /`` had the judge walk the host's tree,
        and ``/proc/<pid>/root`` around it again, for ever.  Past ``limit``
        matches the walk stops (more than ``limit`` are then returned)."""
        found: set[str] = set()
        parts = [p for p in pattern.split("/") if p not in ("", ".")]
        for layer in self.layers:
            _match(str(layer), "", parts, found, limit)
        return sorted(f for f in found if f)


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(folder))
    except OSError:
        return []


def _match(root: str, rel: str, parts: list[str], out: set[str], limit: int | None = None) -> None:
    """Add to ``out`` the paths under ``root``/``rel`` that ``parts`` (a
    glob's segments) match, descending only into real folders; without
    recursion (a probe may leave a tree deeper than Python's limit); no
    further once ``out`` holds over ``limit``."""
    stack = [(rel, parts)]
    while stack and (limit is None or len(out) <= limit):
        rel, parts = stack.pop()
        if not parts:
            out.add(rel)
            continue
        head, rest = parts[0], parts[1:]
        folder = os.path.join(root, rel)
        if head == "**":
            stack.append((rel, rest))
            stack += [(os.path.join(rel, e.name), parts) for e in _entries(folder)
                      if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
            continue
        for entry in _entries(folder):
            if entry.name.startswith(".") and not head.startswith("."):
                continue
            if fnmatch.fnmatchcase(entry.name, head):
                if not rest:
                    out.add(os.path.join(rel, entry.name))
                elif entry.is_dir(follow_symlinks=False):
                    stack.append((os.path.join(rel, entry.name), rest))
