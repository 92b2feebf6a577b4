"""Git notes on ``refs/notes/parallel``: the records mirrored on the commits
they speak of.

A note holds one compact JSON record per line (each with ``v``, ``kind`` and
``run_id``), kept sorted and unique so that notes from several runs or
machines merge with git's ``cat_sort_uniq`` strategy.  One git-parallel
command writes all of its notes as **one** notes commit, built in memory and
published by compare-and-swap on the notes ref; if another writer moved the
ref meanwhile, the batch is rebuilt on top of the new tip and tried again.
pygit2's ``create_note`` is avoided: it makes one commit per note and is not
safe under concurrency.

This module only stores lines; ``provenance.py`` builds every one of them.

A notes ref that points at anything but a commit (a blob, a tree: written
by hand or by a broken tool) is damage no note can be added to: writers
refuse with ``PARALLEL_NOTES_REF_DAMAGED`` and readers see no notes, until
``recover`` moves it aside (``move_aside``) to
``refs/parallel/damaged/<ref without refs/>/<oid>``, where its object stays
reachable, and writes the notes again from the records.
"""

from __future__ import annotations

import json
import random
import time
from typing import Iterable, Iterator

import pygit2

from gitflow_parallel.errors import NOTES_REF_DAMAGED, ParallelError
from gitflow_parallel.git.repo import Identity, common_path, create_ref_exclusive, delete_ref_if, identity, note_write

MAX_ATTEMPTS = 50
DAMAGED_PREFIX = "refs/parallel/damaged"


def damaged(repo: pygit2.Repository, notes_ref: str) -> tuple[str, str] | None:
    """``(oid, type)`` of what ``notes_ref`` points at when that is not a
    commit; None when it is a commit or there is no such ref."""
    try:
        target = repo.references[notes_ref].resolve().target
    except (KeyError, pygit2.GitError, ValueError):
        return None
    obj = repo.get(target)
    if obj is not None and obj.type == pygit2.GIT_OBJECT_COMMIT:
        return None
    kind = obj.type_str if obj is not None else "missing object"
    return str(target), kind


def aside_name(notes_ref: str, oid: str) -> str:
    """Where ``move_aside`` keeps a damaged notes ref's target."""
    return f"{DAMAGED_PREFIX}/{notes_ref.removeprefix('refs/')}/{oid}"


def move_aside(repo: pygit2.Repository, notes_ref: str, oid: str) -> str:
    """Keep the object ``notes_ref`` points at under ``aside_name`` and
    delete ``notes_ref`` if it still points there (compare-and-swap: a ref
    someone repaired meanwhile is theirs); returns the new ref's name."""
    name = aside_name(notes_ref, oid)
    common = common_path(repo)
    if name not in repo.references:
        create_ref_exclusive(common, name, oid, f"git-parallel: {notes_ref} was not a commit, moved aside")
    delete_ref_if(common, notes_ref, oid, f"git-parallel: moved aside to {name}")
    return name


def _refuse_damaged(notes_ref: str, found: tuple[str, str]) -> ParallelError:
    oid, kind = found
    return ParallelError(NOTES_REF_DAMAGED,
                         f"{notes_ref} points at a {kind} ({oid[:12]}), which is not a commit: no note can be added",
                         hint=f"`git parallel recover TASK` moves it aside to {aside_name(notes_ref, oid)} "
                              "and writes the notes again from the records")


def _find(tree: pygit2.Tree | None, oid: str) -> tuple[str, pygit2.Oid] | None:
    """Locate the note for ``oid`` in a notes tree, flat or fanned out."""
    if tree is None:
        return None
    for path in (oid, f"{oid[:2]}/{oid[2:]}", f"{oid[:2]}/{oid[2:4]}/{oid[4:]}"):
        try:
            entry = tree[path]
        except KeyError:
            continue
        return path, entry.id
    return None


def _lines(repo: pygit2.Repository, blob: pygit2.Oid) -> list[str]:
    """The non-blank lines of the note blob ``blob``."""
    return [l for l in repo[blob].peel(pygit2.Blob).data.decode("utf-8", "replace").splitlines() if l.strip()]


def read(repo: pygit2.Repository, notes_ref: str, oid: str) -> list[str]:
    """The lines of the note on ``oid`` (empty if none)."""
    try:
        tip = repo.references[notes_ref].peel(pygit2.Commit)
    except (KeyError, pygit2.GitError, ValueError):  # ValueError: InvalidSpecError, not a commit
        return []
    found = _find(tip.tree, oid)
    if not found:
        return []
    return _lines(repo, found[1])


def every(repo: pygit2.Repository, notes_ref: str) -> Iterator[tuple[str, list[str]]]:
    """Each annotated object of ``notes_ref`` and its note's lines (a flat or fanned-out tree)."""
    try:
        tree: pygit2.Tree | None = repo.references[notes_ref].peel(pygit2.Commit).tree
    except (KeyError, pygit2.GitError):
        tree = None
    stack = [("", tree)] if tree is not None else []
    while stack:
        prefix, folder = stack.pop()
        for entry in folder or []:
            if isinstance(entry, pygit2.Tree):
                stack.append((prefix + (entry.name or ""), entry))
            elif entry.type_str == "blob":
                yield prefix + (entry.name or ""), _lines(repo, entry.id)


def records(repo: pygit2.Repository, notes_ref: str, oid: str) -> list[dict[str, object]]:
    """The note's lines that are JSON objects (the records ``provenance`` writes)."""
    out: list[dict[str, object]] = []
    for text in read(repo, notes_ref, oid):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _put(repo: pygit2.Repository, tree: pygit2.Tree | None, path: str, blob: pygit2.Oid) -> pygit2.Oid:
    """Write ``blob`` at ``path`` (one or more components) into ``tree``."""
    head, _, rest = path.partition("/")
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    if not rest:
        builder.insert(head, blob, pygit2.GIT_FILEMODE_BLOB)
        return builder.write()
    sub = None
    if tree is not None:
        try:
            entry = tree[head]
            sub = repo[entry.id].peel(pygit2.Tree)
        except KeyError:
            sub = None
    builder.insert(head, _put(repo, sub, rest, blob), pygit2.GIT_FILEMODE_TREE)
    return builder.write()


def add(repo: pygit2.Repository, notes_ref: str, entries: Iterable[tuple[str, str]], message: str,
        who: Identity | None = None) -> str | None:
    """Add note lines ``(commit oid, line)`` as one notes commit, by ``who``
    (author and committer; ``Repo.identity``, as ``git notes add`` would
    write them); returns its oid.

    Lines already present are not duplicated; returns None if nothing new."""
    wanted: dict[str, set[str]] = {}
    for oid, text in entries:
        wanted.setdefault(str(oid), set()).add(text)
    if not wanted:
        return None
    if who is None:
        who = identity(repo.workdir or repo.path)
    for attempt in range(MAX_ATTEMPTS):
        bad = damaged(repo, notes_ref)
        if bad is not None:
            raise _refuse_damaged(notes_ref, bad)
        try:
            ref = repo.references[notes_ref]
            parent = ref.peel(pygit2.Commit)
            tree = parent.tree
        except KeyError:
            ref, parent, tree = None, None, None
        changed = False
        new_tree = tree
        for oid, lines in sorted(wanted.items()):
            found = _find(new_tree, oid)
            existing: set[str] = set()
            path = oid
            if found:
                path = found[0]
                existing = set(_lines(repo, found[1]))
            merged = existing | lines
            if merged == existing:
                continue
            blob = repo.create_blob(("\n".join(sorted(merged)) + "\n").encode("utf-8"))
            new_tree = repo[_put(repo, new_tree, path, blob)].peel(pygit2.Tree)
            changed = True
        if not changed or new_tree is None:
            return None
        parents = [parent.id] if parent is not None else []
        commit = repo.create_commit(None, *who, message, new_tree.id, parents)
        note_write(common_path(repo))
        try:
            if ref is None:
                if not create_ref_exclusive(repo.path, notes_ref, str(commit), message):
                    raise ValueError("created meanwhile")
            else:
                ref.set_target(commit, message)  # a real compare-and-swap
            note_write(common_path(repo))  # and after: a tamper check may have started meanwhile
            return str(commit)
        except (pygit2.AlreadyExistsError, pygit2.GitError, ValueError, OSError):
            # Someone else published first (or holds the ref's lock file right
            # now): rebuild on their tip.
            note_write(common_path(repo))
            time.sleep(random.uniform(0.002, 0.02) * (1 + attempt))
            continue
    raise RuntimeError(f"could not update {notes_ref} after {MAX_ATTEMPTS} attempts")
