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
    for folder, _, names in os.walk(objects):
        for name in names:
            path = Path(folder, name)
            if path.relative_to(objects).parts[:2] != (name[:2], name[2:4]) or not _OID.fullmatch(name):
                continue  # not an object's place (git-lfs keeps nothing else there)
            target = common / "lfs" / "objects" / name[:2] / name[2:4] / name
            if os.path.lexists(target):
                continue
            problem = _take(path, target, name)
            if problem is not None:
                refused.append(f"LFS object {name}: {problem}")
    return refused


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
