"""An attempt's Git LFS objects: written into a store of its own, taken
into the shared one by content.

Git LFS keeps file contents outside git's object store, in
``<common>/lfs/objects/<aa>/<bb>/<sha256>``, written by its clean filter
when a file is staged.  An attempt may not write the shared common dir, so
its view of it (``git/shadow``) has an ``lfs/`` folder of its own: git-lfs
writes there what the attempt's git stages, and reads the shared objects
through the view's ``objects/info/alternates`` (git-lfs looks for objects
in ``lfs/objects`` beside each alternate store).

When the attempt ends, each object of its store is taken in only when the
SHA-256 of its content is its name; anything else (a link, a FIFO, a file
whose content is not what its name says) is never taken in and fails the
attempt.  An object the shared store already holds is left as it is."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    import pygit2

_OID = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def import_objects(common: Path, store: Path) -> list[str]:
    """Copy into ``<common>/lfs/objects`` each object of the attempt's
    ``store`` (its view's ``lfs`` folder) the shared store lacks, checked
    by content.  Returns what was refused, said for the attempt's error."""
    objects = store / "objects"
    if store.is_symlink() or objects.is_symlink() or not objects.is_dir():
        return []
    refused: list[str] = []
    for path in _object_places(objects):
        name = path.name
        target = common / "lfs" / "objects" / name[:2] / name[2:4] / name
        if os.path.lexists(target):
            continue
        problem = _take(path, target, name)
        if problem is not None:
            refused.append(f"LFS object {name}: {problem}")
    return refused


def _object_places(objects: Path) -> Iterator[Path]:
    """Each entry at ``<aa>/<bb>/<oid>`` under ``objects`` whose folders are
    named by its oid: the only places git-lfs writes.  Folders are listed two
    levels deep and no further (the agent may have made them as deep as it
    likes), and none is entered through a link."""
    for first in _folders(objects):
        for second in _folders(first):
            try:
                entries = list(os.scandir(second))
            except OSError:
                continue
            for entry in entries:
                if _OID.fullmatch(entry.name) and (entry.name[:2], entry.name[2:4]) == (first.name, second.name):
                    yield Path(entry.path)


def _folders(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if len(e.name) == 2 and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _take(path: Path, target: Path, oid: str) -> str | None:
    """Copy ``path`` to ``target`` through a temporary file, if its content
    hashes to ``oid``; else why not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            return "not a regular file"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{oid}.{os.getpid()}.tmp")
        digest = hashlib.sha256()
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            with os.fdopen(out, "wb") as handle:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    handle.write(chunk)
            if digest.hexdigest() != oid:
                return "its content does not hash to its name"
            os.replace(tmp, target)
            return None
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)


# -- judged checkouts ------------------------------------------------------------
# libgit2 runs no filter driver, so a judged checkout it writes holds LFS
# pointers where git would write the files' content.  Gates must judge the
# content: git-parallel writes it itself from the shared LFS store (objects
# git-lfs stored there, or ones taken in by content), running nothing.
POINTER_HEAD = b"version https://git-lfs.github.com/spec/v1\n"
MAX_POINTER = 1024
_POINTER = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\n(?:[a-z0-9.-]+ [^\n]*\n)*?"
                      rb"oid sha256:([0-9a-f]{64})\n(?:[a-z0-9.-]+ [^\n]*\n)*?size ([0-9]{1,15})\n"
                      rb"(?:[a-z0-9.-]+ [^\n]*\n)*")


def pointer(data: bytes) -> tuple[str, int] | None:
    """(oid, size) of an LFS pointer file's bytes, or None if they are not one."""
    if len(data) > MAX_POINTER or not data.startswith(POINTER_HEAD):
        return None
    found = _POINTER.fullmatch(data)
    return (found.group(1).decode(), int(found.group(2))) if found else None


def stored(common: Path, oid: str) -> Path:
    return common / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def smudge(repo: pygit2.Repository, tree: pygit2.Tree, root: Path, common: Path) -> list[str]:
    """Write, over each LFS pointer of the checkout at ``root`` (of ``tree``,
    in ``repo``) whose path has ``filter=lfs``, the content the shared store
    holds for it.  Returns the paths left as pointers (their object is not
    here).  A repository without an LFS store pays one ``stat``."""
    if not (common / "lfs" / "objects").is_dir():
        return []
    missing: list[str] = []
    for path, oid in _small_blobs(repo, tree):
        said = pointer(repo[oid].read_raw())
        if said is None or repo.get_attr(path, "filter") != "lfs":
            continue
        source = stored(common, said[0])
        try:
            with open(source, "rb") as data:
                if os.fstat(data.fileno()).st_size != said[1]:
                    raise OSError(f"{source}: not {said[1]} bytes")
                fd = os.open(root / path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
                with os.fdopen(fd, "wb") as out:
                    while chunk := data.read(_CHUNK):
                        out.write(chunk)
        except OSError:
            missing.append(path)
    return missing


def _small_blobs(repo: pygit2.Repository, tree: pygit2.Tree) -> Iterator[tuple[str, pygit2.Oid]]:
    """(path, oid) of each blob of ``tree`` no larger than a pointer can be."""
    import pygit2

    pending: list[tuple[str, pygit2.Tree]] = [("", tree)]
    while pending:
        prefix, folder = pending.pop()
        for entry in folder:
            if entry.filemode == pygit2.enums.FileMode.TREE:
                pending.append((f"{prefix}{entry.name}/", repo[entry.id].peel(pygit2.Tree)))
            elif entry.filemode in (pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE) \
                    and repo.odb.read_header(entry.id)[1] <= MAX_POINTER:
                yield f"{prefix}{entry.name}", entry.id


def is_smudged(common: Path, blob: bytes, file: Path) -> bool:
    """Is ``file`` what ``smudge`` writes for the pointer ``blob``?"""
    said = pointer(blob)
    if said is None:
        return False
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode) or os.fstat(handle.fileno()).st_size != said[1]:
            return False
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == said[0]
