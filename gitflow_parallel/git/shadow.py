"""An attempt's own view of the common git dir: the stash and the
``packed-refs`` lock made private, everything else the shared one.

Why.  Inside the Landlock fence (``proc/sandbox``) an agent may write its
worktree, its admin folder, ``objects/`` and its own branches' folder, but
not the common dir's top folders: a rule there would also open
``refs/heads/main``, ``config`` and ``hooks/`` (Landlock grants whole
hierarchies; there is no "deny inside allow").  Two everyday verbs write
exactly there: ``git stash`` (``refs/stash`` and ``logs/refs/stash``, taken
through ``refs/stash.lock``) and ``git branch -D`` (git 2.39 takes
``packed-refs.lock`` in the common dir on every ref deletion).  And the
stash should not be shared in the first place: it lives in the common dir,
so concurrent agents' pushes and pops would interleave (one pops what
another pushed), and any of them could pop or drop the user's own stash.

How, with what git offers.  A linked worktree finds its common dir through
the ``commondir`` file of its admin folder (the ``GIT_COMMON_DIR``
variable would do the same, but for every repository the agent touches -
a ``pip install git+…`` clone among them).  For the attempt, that file
points at ``<admin>/parallel-common/``, a folder of symlinks to every entry
of the real common dir, except that ``refs/``, ``logs/`` and ``logs/refs/``
are real folders (symlinks to every entry but ``stash``), and
``packed-refs`` and ``config`` are copies: git makes a file's lock next to
the file a symlink points at (``packed-refs.lock`` would be in the shared
dir again, and so would ``config.lock``, which ``git branch -D`` takes to
drop the branch's section), and a hard link would let the agent write the
shared file in place.  So:

- ``git stash push``/``pop``/``list`` work on a stash of the attempt's own,
  which starts empty and goes with the attempt; the user's stash is neither
  seen nor touched;
- ``git branch -D`` of a branch under its own prefix works (the ref file is
  deleted through the ``refs/heads`` symlink, inside the fence's grant;
  the shared ``packed-refs`` is never written: the copy is, when the ref
  was packed, which leaves the branch in the shared one - harmless, it is
  under its own prefix);
- ``git config`` writes land on the attempt's copy: they hold for its own
  git and go with it (nothing it configures there reaches git-parallel's
  git, the gates or the user);
- every other write goes through a symlink to the real file, where the
  fence decides as before (a commit on its branch: allowed; ``main``,
  ``hooks/``: EACCES).

What it costs the agent: refs packed or config changed by someone else
while it runs (a ``git gc`` of the user's) are not seen until its next
attempt, since its copies are those of its start.

After the attempt (``undo``) the ``commondir`` file says again what it said
and the folder is removed; before the next attempt it is made afresh.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

NAME = "parallel-common"
# Made private: these hold the shared stash.
_PRIVATE = {"refs": {"stash"}, "logs/refs": {"stash"}}
# Linked even where the common dir has none yet, so that a ref folder made
# meanwhile (the first note, the first evidence ref) is seen.
_COPIED = ("packed-refs", "config")
_ALWAYS = {"refs": {"heads", "tags", "remotes", "notes", "parallel"}}


def make(common: Path, admin: Path) -> tuple[Path, str] | None:
    """Point the worktree of ``admin`` at its own view of ``common``;
    (the ``commondir`` file, what it said) for ``undo``, or None if the
    worktree has no ``commondir`` file (nothing is changed then)."""
    commondir = admin / "commondir"
    try:
        said = commondir.read_text(encoding="utf-8")
    except OSError:
        return None
    if said.strip() == NAME:  # left by an attempt whose runner was killed
        said = os.path.relpath(common, admin) + "\n"
    view = admin / NAME
    _remove(view)
    view.mkdir()
    _link_entries(common, view, "", skip={"refs", "logs", "worktrees", *_COPIED})
    for name in _COPIED:  # copies, not links (see the module doc)
        try:
            shutil.copyfile(common / name, view / name)
        except FileNotFoundError:
            pass
    os.symlink(common / "worktrees", view / "worktrees")
    for folder in ("refs", "logs", "logs/refs"):
        (view / folder).mkdir(exist_ok=True)
        skip = _PRIVATE.get(folder, set()) | ({"refs"} if folder == "logs" else set())
        _link_entries(common, view, folder, skip)
    _write(commondir, NAME + "\n")
    return commondir, said


def _link_entries(common: Path, view: Path, folder: str, skip: set[str]) -> None:
    source = common / folder
    try:
        names = set(os.listdir(source))
    except OSError:
        names = set()
    for name in sorted((names | _ALWAYS.get(folder, set())) - skip):
        os.symlink(source / name, view / folder / name)


def undo(made: tuple[Path, str] | None) -> None:
    """The ``commondir`` file says again what it said; the view goes."""
    if made is None:
        return
    commondir, said = made
    _write(commondir, said)
    _remove(commondir.parent / NAME)


# The admin folder is the agent's to write: whatever it left there (a
# symlink where a folder or a file is expected) is removed, never followed.
def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(NAME + ".commondir")
    _remove(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
