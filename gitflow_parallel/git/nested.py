"""Nested repositories an agent made inside its worktree, kept in ours.

``git add -A`` records a nested repository as a gitlink: the id of a commit
stored only in that repository's own object store, inside the worktree.
Removing the worktree would lose that history and leave the gitlink dangling
on every branch that took the commit (the base, after a merge).  So each
gitlink a tip names whose commit this repository lacks is archived: the
objects that commit reaches are read from the nested object store and
written anew into ours, and the commit is kept under
``refs/parallel/nested/<run_id>/<instance>/<attempt>/<oid>``.

The nested store is untrusted: it is opened as a bare object database (no
config read, no program run), only through a real ``.git`` folder reached
without symlinks, and every object must hash to the id it was asked for,
so a doctored store can neither plant an object under a wrong id nor send
the copy elsewhere.  What cannot be kept that way is reported, and removal
refuses it (``worktrees.check_removable``).
"""

from __future__ import annotations

import stat
from os import lstat
from os.path import realpath
from pathlib import Path

import pygit2

from gitflow_parallel.git.repo import Repo, note_write, read_gitdir_file

NESTED_PREFIX = "refs/parallel/nested"
_GITLINK = pygit2.enums.FileMode.COMMIT


def nested_ref(run_id: str, inst_id: str, attempt: int, oid: str) -> str:
    return f"{NESTED_PREFIX}/{run_id}/{inst_id}/{attempt}/{oid}"


def gitlinks(repo: pygit2.Repository, commit: str) -> list[tuple[str, str]]:
    """``(path, oid)`` of every gitlink in the commit's tree."""
    out: list[tuple[str, str]] = []
    todo: list[tuple[str, pygit2.Tree]] = [("", repo[commit].peel(pygit2.Tree))]
    while todo:
        prefix, tree = todo.pop()
        for entry in tree:
            path = f"{prefix}{entry.name}"
            if entry.filemode == _GITLINK:
                out.append((path, str(entry.id)))
            elif entry.type_str == "tree":
                todo.append((f"{path}/", repo[entry.id].peel(pygit2.Tree)))
    return sorted(out)


def unresolved(repo: pygit2.Repository, commit: str) -> list[tuple[str, str]]:
    """The gitlinks of ``commit`` whose commit this repository does not hold."""
    return [(path, oid) for path, oid in gitlinks(repo, commit) if pygit2.Oid(hex=oid) not in repo.odb]


def _real_dir(root: Path, rel: str) -> Path | None:
    """``root/rel`` if every component below ``root`` is a real folder (no symlink)."""
    here = root
    for part in rel.split("/"):
        here = here / part
        try:
            if not stat.S_ISDIR(lstat(here).st_mode):
                return None
        except OSError:
            return None
    return here


def has_repository(worktree: Path, path: str) -> bool:
    """Is there a nested repository (a ``.git`` of any kind) at ``path``?"""
    folder = _real_dir(worktree, path)
    if folder is None:
        return False
    try:
        lstat(folder / ".git")
    except OSError:
        return False
    return True


def _object_store(repo: Repo, worktree: Path, path: str) -> Path | None:
    """The nested repository's objects folder: in its own ``.git`` folder,
    or, for a submodule, in the git dir git keeps for it under our common
    dir (a ``.git`` file naming anywhere else is not followed)."""
    own = _real_dir(worktree, f"{path}/.git/objects")
    if own is not None:
        return own
    folder = _real_dir(worktree, path)
    if folder is None or not stat.S_ISREG(lstat(folder / ".git").st_mode):
        return None
    target = read_gitdir_file(folder / ".git")
    if target is None:
        return None
    target = Path(realpath(target))
    common = Path(realpath(repo.common_dir))
    if not any(target.is_relative_to(common / place) for place in ("worktrees", "modules")):
        return None
    return target / "objects" if (target / "objects").is_dir() else None


def own_store(objects: Path) -> pygit2.Odb:
    """The object store at ``objects`` alone, its loose objects and packs:
    no ``info/alternates`` it holds is followed (an attempt wrote it)."""
    store = pygit2.Odb()
    store.add_backend(pygit2.OdbBackendLoose(str(objects), 0, False), 2)
    if (objects / "pack").is_dir() and not (objects / "pack").is_symlink():
        store.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
    return store


def copy_history(source: pygit2.Odb, repo: pygit2.Repository, oid: str) -> bool:
    """Write every object ``oid`` reaches in ``source`` into ``repo`` (what
    ``repo`` has already is not walked again); False if one is missing or
    does not hash to its id."""
    todo = [pygit2.Oid(hex=oid)]
    seen: set[pygit2.Oid] = set()
    while todo:
        want = todo.pop()
        if want in seen or want in repo.odb:
            continue
        seen.add(want)
        try:
            kind, data = source.read(want)
        except (KeyError, ValueError, pygit2.GitError):
            return False
        if repo.odb.write(kind, data) != want:
            return False
        todo += _children(repo, want)
    return True


def _children(repo: pygit2.Repository, oid: pygit2.Oid) -> list[pygit2.Oid]:
    obj = repo[oid]
    if isinstance(obj, pygit2.Commit):
        return [obj.tree_id, *obj.parent_ids]
    if isinstance(obj, pygit2.Tree):
        # A gitlink inside the nested history names a third store: not walked.
        return [entry.id for entry in obj if entry.filemode != _GITLINK]
    return []


def archive(repo: Repo, run_id: str, inst_id: str, attempt: int, worktree: Path,
            commit: str) -> tuple[list[str], list[str]]:
    """Keep in this repository the commit of each unresolved gitlink of
    ``commit`` whose nested repository is in ``worktree``: the refs made (or
    found), and the paths of nested repositories that could not be kept."""
    made: list[str] = []
    lost: list[str] = []
    for path, oid in unresolved(repo.pygit, commit):
        if not has_repository(worktree, path):
            continue  # nothing of it here to lose
        note_write(repo.common_dir)  # objects written by us, not by an agent
        store = _object_store(repo, worktree, path)
        try:
            kept = store is not None and copy_history(pygit2.Odb(str(store)), repo.pygit, oid)
        except (pygit2.GitError, OSError):
            kept = False
        if not kept:
            lost.append(path)
            continue
        name = nested_ref(run_id, inst_id, attempt, oid)
        repo.create_ref(name, oid, f"git-parallel: keep the nested repository at {path}")
        made.append(name)
    return made, lost
