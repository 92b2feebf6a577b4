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

After the attempt (``undo``) the ``commondir`` file says again what it said.
The folder stays (git-parallel's own git never reads it) and is checked and
brought up to date before the next attempt: its stash emptied, its copies
made afresh, every link made to say what it must; removing and rebuilding
it for every attempt cost more than the rest of the fence on a busy disk.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

NAME = "parallel-common"
# Made private: these hold the shared stash.
_PRIVATE = {"refs": {"stash"}, "logs/refs": {"stash"}}
# Linked even where the common dir has none yet, so that a ref folder made
# meanwhile (the first note, the first evidence ref) is seen.
_COPIED = ("packed-refs", "config")
_ALWAYS = {"refs": {"heads", "tags", "remotes", "notes", "parallel"}}


@dataclass
class View:
    """A view in use: the ``commondir`` file and what it said before."""

    commondir: Path
    said: str
    common: Path
    folder: Path

    @property
    def objects(self) -> Path:
        return self.folder / "objects"


def make(common: Path, admin: Path) -> View | None:
    """Point the worktree of ``admin`` at its own view of ``common``, for
    ``undo``; None if the worktree has no ``commondir`` file (nothing is
    changed then)."""
    commondir = admin / "commondir"
    try:
        said = commondir.read_text(encoding="utf-8")
    except OSError:
        return None
    if said.strip() in (NAME, str(admin / NAME)):  # left by an attempt whose runner was killed
        said = os.path.relpath(common, admin) + "\n"
    view = admin / NAME
    if view.is_symlink() or not view.is_dir():
        _remove(view)
        view.mkdir()
    # The view stays between attempts (made once, it costs a few reads to
    # check): every link is checked against what it must say, anything
    # else the last attempt left is removed, the copies are made afresh,
    # and its stash starts empty.
    _sync(common, view, "", skip={"refs", "logs", "worktrees", "objects", *_COPIED}, extra={"worktrees"})
    _private_objects(common, view / "objects")
    for name in _COPIED:  # copies, not links (see the module doc)
        _remove(view / name)
        try:
            shutil.copyfile(common / name, view / name)
        except FileNotFoundError:
            pass
    for folder in ("refs", "logs", "logs/refs"):
        if (view / folder).is_symlink() or not (view / folder).is_dir():
            _remove(view / folder)
            (view / folder).mkdir()
        skip = _PRIVATE.get(folder, set()) | ({"refs"} if folder == "logs" else set())
        _sync(common, view, folder, skip)
    # Absolute: libgit2 (git-parallel's own reads, recover after a killed
    # runner) does not find a common dir named by a bare relative name.
    _write(commondir, f"{view}\n")
    return View(commondir, said, common, view)


def _private_objects(common: Path, objects: Path) -> None:
    """The attempt's own object store: what its git writes lands here, and
    the shared store, which it may not write, is read through
    ``info/alternates``.  What an attempt whose runner was killed left here
    is taken in first (``import_objects``), then the folder starts empty."""
    if objects.is_symlink() or not objects.is_dir():
        _remove(objects)
    else:
        import_objects(common, objects)
        for name in os.listdir(objects):
            _remove(objects / name)
    (objects / "info").mkdir(parents=True)
    (objects / "pack").mkdir()
    real = os.path.realpath(common / "objects")
    _write_new(objects / "info" / "alternates", real + "\n")


def import_objects(common: Path, objects: Path) -> list[str]:
    """Copy into the shared store every object of the attempt's own store
    (``objects``) that it lacks, each read with libgit2's hash check on and
    written by its content, so it lands under the name its content gives.
    Returns the ids of the objects refused (their content does not match
    their name, or they cannot be read): never taken in."""
    import pygit2

    if objects.is_symlink() or not objects.is_dir():
        return []
    pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 1)
    own = pygit2.Odb()
    own.add_backend(pygit2.OdbBackendLoose(str(objects), 0, False), 2)
    if (objects / "pack").is_dir() and not (objects / "pack").is_symlink():
        own.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
    shared = pygit2.Odb(str(common / "objects"))
    refused: list[str] = []
    for oid in own:
        if oid in shared:
            continue
        try:
            kind, data = own.read(oid)
            if shared.write(kind, data) != oid:
                refused.append(str(oid))
        except (pygit2.GitError, KeyError, ValueError, OSError):
            refused.append(str(oid))
    return refused


def _sync(common: Path, view: Path, folder: str, skip: set[str], extra: set[str] = set()) -> None:  # noqa: B006
    """Make ``view/folder`` hold a symlink to each entry of
    ``common/folder`` (and the ``_ALWAYS`` ones) but ``skip``; remove what
    else is there, but the folders and copies made beside."""
    source, here = common / folder, view / folder
    try:
        names = set(os.listdir(source))
    except OSError:
        names = set()
    wanted = (names | _ALWAYS.get(folder, set()) | extra) - skip
    kept = {"refs", "logs", "objects", *_COPIED} if folder == "" else {"refs"} if folder == "logs" else set()
    for name in os.listdir(here):
        if name not in wanted and name not in kept:
            _remove(here / name)  # the last attempt's stash, or what it left
    for name in sorted(wanted):
        target, link = str(source / name), here / name
        try:
            if os.readlink(link) == target:
                continue
        except OSError:
            pass
        _remove(link)
        os.symlink(target, link)


def undo(made: View | None) -> list[str]:
    """The attempt's objects taken into the shared store, and the
    ``commondir`` file saying again what it said (the view stays for the
    next attempt, which checks it: ``make``).  Returns the objects refused
    (``import_objects``)."""
    if made is None:
        return []
    refused = import_objects(made.common, made.objects)
    _write(made.commondir, made.said)
    return refused


# The admin folder is the agent's to write: whatever it left there (a
# symlink where a folder or a file is expected) is removed, never followed.
def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(NAME + ".commondir")
    _remove(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
