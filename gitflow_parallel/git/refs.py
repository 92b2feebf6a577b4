"""Finding a repository and reading its refs as git stores them on disk,
standard library only.

The verbs people type to look (``status``, ``show``, ``logs``) need a few
ref values and the records, never an object: importing pygit2 to read a
40-byte file costs more than the whole rest of such a verb (about 80 ms
of CPU).  So ``Repo`` opens pygit2 only when an object or a ref update is
asked for, and reads refs here: a loose ref file first, then
``packed-refs``, as git and libgit2 both do (git writes ``packed-refs``
before it deletes a loose ref, so this order never misses a ref being
packed).  A repository whose refs are not in files (``reftable``), or
one found in a way this module does not mirror, is left to pygit2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator, NamedTuple

# Refs each worktree has of its own (in its git dir); all others are shared
# (in the common dir).  As git's ``is_per_worktree_ref``.
_PER_WORKTREE = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
_OID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
# What no ref name component may hold (git check-ref-format), and a ``..``
# that could read outside the refs folder.
_BAD_NAME = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|/\.|\.lock(/|$)|^/|/$|\.$")


# Settings that move the worktree or make the repository bare.
_ELSEWHERE = re.compile(r"^\s*(worktree\s*=|bare\s*=\s*true)", re.MULTILINE | re.IGNORECASE)


class Found(NamedTuple):
    """A working repository: its git dir, common dir and worktree."""
    gitdir: Path
    common: Path
    workdir: Path


def _is_gitdir(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() or (path / "commondir").is_file()


def discover(start: str | os.PathLike[str]) -> Found | None:
    """The repository ``start`` is in, as libgit2's discovery finds it, or
    None where this simple walk is not sure (inside a git dir, a bare
    repository, ceiling directories, a folder owned by someone else, refs
    not stored as files): the caller then asks pygit2."""
    if os.environ.get("GIT_CEILING_DIRECTORIES"):
        return None
    here = Path(os.path.abspath(start))
    uid = os.geteuid()
    gitdir: Path | None
    for folder in (here, *here.parents):
        if folder.name == ".git" or _is_gitdir(folder):
            return None  # inside a git dir: pygit2 knows what that means
        dotgit = folder / ".git"
        if dotgit.is_dir():
            gitdir = dotgit
        elif dotgit.is_file():
            gitdir = read_gitdir_file(dotgit)
            if gitdir is None:
                return None
        else:
            continue
        return _found(gitdir, folder, uid)
    return None


def read_gitdir_file(gitfile: str | os.PathLike[str]) -> Path | None:
    """Where a linked worktree's ``.git`` file points (``gitdir: <path>``,
    a relative path taken from the file's folder, as git does), or None when
    it is missing, unreadable, a folder, or not such a file."""
    gitfile = Path(gitfile)
    try:
        text = gitfile.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    target = Path(text[len("gitdir:"):].strip())
    return target if target.is_absolute() else gitfile.parent / target


def _found(gitdir: Path, workdir: Path, uid: int) -> Found | None:
    gitdir = gitdir.resolve()
    if not _is_gitdir(gitdir):
        return None
    common = gitdir
    try:
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError):
        return None
    try:
        owners = {workdir.stat().st_uid, gitdir.stat().st_uid}
    except OSError:
        return None
    if owners != {uid} or (common / "reftable").exists() or not (common / "refs").is_dir():
        return None  # safe.directory and reftable are pygit2's to judge
    for config in {gitdir / "config", common / "config", gitdir / "config.worktree"}:
        try:
            text = config.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if _ELSEWHERE.search(text):
            return None  # core.worktree or core.bare: pygit2 reads what they mean
    return Found(gitdir, common, workdir.resolve())


def valid_name(name: str) -> bool:
    return name == "HEAD" or (name.startswith("refs/") and not _BAD_NAME.search(name))


def _home(found: Found, name: str) -> Path:
    shared = name.startswith("refs/") and not name.startswith(_PER_WORKTREE)
    return found.common if shared else found.gitdir


def _read_loose(found: Found, name: str) -> str | None:
    try:
        with open(_home(found, name) / name, "rb") as handle:
            return handle.read(4096).decode("ascii", errors="replace").strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def packed(common: Path) -> dict[str, str]:
    """The refs of ``packed-refs``: name -> oid (peeled lines skipped)."""
    try:
        with open(common / "packed-refs", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[str, str] = {}
    for line in lines:
        if line and line[0] not in "#^":
            oid, _, name = line.partition(" ")
            out[name.strip()] = oid
    return out


def target(found: Found, name: str, packed_refs: dict[str, str] | None = None) -> str | None:
    """The commit (or other object) ``name`` points at, symbolic refs
    followed, or None when it does not exist or is no valid ref
    (``packed_refs``: ``packed`` already read).  An unreadable ref file
    raises ``OSError``, as pygit2 would fail."""
    for _ in range(6):  # git follows at most 5 levels of symbolic refs
        if not valid_name(name):
            return None
        value = _read_loose(found, name)
        if value is None and name.startswith("refs/"):
            packed_refs = packed(found.common) if packed_refs is None else packed_refs
            value = packed_refs.get(name)
        if value is None:
            return None
        if value.startswith("ref:"):
            name = value[4:].strip()
            continue
        return value if _OID.fullmatch(value) else None
    return None


def under(found: Found, prefix: str) -> Iterator[tuple[str, str]]:
    """(name, target) of every shared ref whose name starts with ``prefix``
    (a ``refs/…/`` folder), loose ones over packed ones, sorted by name."""
    packed_refs = packed(found.common)
    names = {n for n in packed_refs if n.startswith(prefix)}
    top = prefix.rsplit("/", 1)[0]
    root = found.common / top
    cut = len(str(found.common)) + 1
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            if not filename.endswith(".lock"):
                name = os.path.join(dirpath, filename)[cut:].replace(os.sep, "/")
                if name.startswith(prefix):
                    names.add(name)
    for name in sorted(names):
        oid = target(found, name, packed_refs)
        if oid is not None:
            yield name, oid
