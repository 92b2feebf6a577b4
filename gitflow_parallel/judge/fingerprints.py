"""Fingerprints of what was judged: the files an attempt changed and the
inputs its gates read, each bound to git's own ids.

Fingerprints.  ``output_fingerprints`` lists every path that differs between
the base commit's tree and the commit's tree (a pygit2 tree-to-tree diff, no
rename detection): ``{"sha256": ...}`` of the blob's content, or
``{"deleted": true}`` (a submodule entry gives ``{"gitlink": <oid>}``, having
no content here; a symlink's content is its target, as git stores it).  The
bytes hashed are always the blob's bytes.  Inflating 2,000 loose objects is
several times slower than ``sha256sum`` reading the checked-out files, so
when a clean worktree of the commit is at hand each file is read from it
(regular files only, no symlink followed, a FIFO never opened blocking) and
used only after its git object id, recomputed from those bytes, equals the
blob's id; anything else (a filter such as ``eol=crlf``, a race, a symlink)
falls back to the object database.  ``input_fingerprints`` hash the files
of the judged tree matched by the applicable gates' ``inputs`` globs, read
from git objects (a symlink is its target text, never followed): path ->
sha256.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Iterable

import pygit2

from gitflow_parallel.files import sha256_bytes
from gitflow_parallel.git import protected


# -- fingerprints -------------------------------------------------------------------
def _open_regular(path: Path) -> int | None:
    """An fd of ``path`` if it is a regular file, never following a symlink
    nor blocking on a FIFO; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_regular(path: Path, limit: int | None = None) -> bytes | None:
    fd = _open_regular(path)
    if fd is None:
        return None
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        if limit is not None and os.fstat(handle.fileno()).st_size > limit:
            return None
        return handle.read()


# What git-parallel reads of a file a judged command or an agent wrote (an
# events file, a probe's stdout): at most this much, from its start; a
# sparse file of gigabytes costs no disk, and must cost no memory either.
READ_CAP = 16 << 20


def read_head(path: Path, limit: int = READ_CAP) -> tuple[bytes | None, int]:
    """At most ``limit`` bytes from the start of a regular file (no link
    followed, no FIFO opened blocking), and its size; (None, 0) if it is not one."""
    fd = _open_regular(path)
    if fd is None:
        return None, 0
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        size = os.fstat(handle.fileno()).st_size
        return handle.read(limit), size


# A log is hashed whole up to this size, in pieces; past it, its first part
# and its size stand for it ("<sha256>+<size>"): a gate can grow its log to
# gigabytes for nothing.
HASH_CAP = 1 << 30


def sha256_path(path: Path) -> str | None:
    fd = _open_regular(path)
    if fd is None:
        return None
    digest = hashlib.sha256()
    with open(fd, "rb", buffering=0, closefd=True) as handle:
        size = os.fstat(handle.fileno()).st_size
        left = HASH_CAP
        while left > 0:
            piece = handle.read(min(left, 1 << 20))
            if not piece:
                break
            digest.update(piece)
            left -= len(piece)
    return digest.hexdigest() if size <= HASH_CAP else f"{digest.hexdigest()}+{size}"


def _blob_id(data: bytes, oid_hex: str) -> str:
    """Git's object id of a blob with content ``data``, in the repository's hash."""
    digest = hashlib.sha1() if len(oid_hex) == 40 else hashlib.sha256()
    digest.update(b"blob %d\0" % len(data))
    digest.update(data)
    return digest.hexdigest()


def output_fingerprints(repo: pygit2.Repository, base_commit: str, commit: str,
                        worktree: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every path changed between ``base_commit`` and ``commit``: the sha256 of
    its content, or deleted.  ``worktree``, a checkout of ``commit``, is only a
    faster source of the same bytes (each checked against the blob id)."""
    old = repo[base_commit].peel(pygit2.Tree)
    new = repo[commit].peel(pygit2.Tree)
    out: dict[str, dict[str, Any]] = {}
    # pygit2's stub leaves Tree out of Repository.diff, which takes two trees.
    for delta in repo.diff(old, new).deltas:  # type: ignore[call-overload]
        if delta.status == pygit2.enums.DeltaStatus.DELETED:
            out[delta.old_file.path] = {"deleted": True}
            continue
        entry = delta.new_file
        oid = str(entry.id)
        if entry.mode == pygit2.GIT_FILEMODE_COMMIT:
            out[entry.path] = {"gitlink": oid}
            continue
        data = None
        if worktree is not None and entry.mode in (pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE):
            data = read_regular(worktree / entry.path)
            if data is not None and _blob_id(data, oid) != oid:
                data = None
        if data is None:
            data = repo.odb.read(entry.id)[1]
        out[entry.path] = {"sha256": hashlib.sha256(data).hexdigest()}
    return out


def input_fingerprints(repo: pygit2.Repository, tree: str, patterns: Iterable[str]) -> dict[str, str]:
    """sha256 of the files of ``tree`` (the judged tree) matched by ``patterns``.

    Read from git objects, never from a filesystem: a symlink is hashed as
    git stores it (its target), so nothing outside the checkout is ever
    read, and a symlink loop cannot make the walk endless.  Submodule
    entries have no content here and are left out."""
    patterns = [p for p in patterns]
    if not patterns:
        return {}
    index = pygit2.Index()
    index.read_tree(repo[tree].peel(pygit2.Tree))
    out: dict[str, str] = {}
    for entry in index:
        if entry.mode == pygit2.GIT_FILEMODE_COMMIT:
            continue
        if any(protected.matches(entry.path, [p], folders=False) for p in patterns):
            out[entry.path] = sha256_bytes(repo.odb.read(entry.id)[1])
    return dict(sorted(out.items()))
