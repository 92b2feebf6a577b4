"""Writing a tree's files with libgit2, and knowing when its filters have
nothing to do.

libgit2 never runs an external filter driver, but before it writes each
file it loads that file's filter list: the attributes of the path, found by
resolving the file's full path with ``realpath`` (one ``readlink`` per path
component, twice per file) and looking up every attribute file on the way.
On a fresh checkout of thousands of files that lookup is most of what is
not the kernel creating files.  The two filters libgit2 has built in change
bytes only when an attribute asks for it (``text``, ``eol``, ``crlf``,
``ident``) or when ``core.autocrlf`` is true.
So where no attribute file exists anywhere libgit2 would look and
``core.autocrlf`` is not true, skipping the filters (``disable_filters``)
writes the very same bytes; everywhere else the filters stay on.

The tree walk that proves "no ``.gitattributes``" reads every folder of the
tree, so it pays only for a checkout that writes every file: a fresh one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
from pygit2 import ffi
from pygit2._libgit2 import lib as _C  # type: ignore[import-not-found]  # pygit2 ships no stub for its cffi module
from pygit2.callbacks import git_checkout_options

ATTRIBUTES = ".gitattributes"


def _tree_has_attributes(repo: pygit2.Repository, tree: pygit2.Tree) -> bool:
    """Does ``tree`` hold a ``.gitattributes`` at any depth?  Reads folders
    only (each tree object once: a folder repeated under many paths shares
    its oid)."""
    seen: set[pygit2.Oid] = set()
    pending = [tree]
    while pending:
        folder = pending.pop()
        if ATTRIBUTES in folder:
            return True
        for entry in folder:
            if entry.filemode == pygit2.enums.FileMode.TREE and entry.id not in seen:
                seen.add(entry.id)
                sub = repo[entry.id]
                if isinstance(sub, pygit2.Tree):
                    pending.append(sub)
    return False


def _search_path(level: pygit2.enums.ConfigLevel) -> list[Path]:
    value = pygit2.option(pygit2.enums.Option.GET_SEARCH_PATH, level) or ""
    return [Path(p) for p in str(value).split(os.pathsep) if p]


def _outside_attribute_files(repo: pygit2.Repository, common_dir: Path) -> list[Path]:
    """Every attribute file outside the tree that libgit2 reads on a
    checkout: the common dir's ``info/attributes``, ``core.attributesFile``
    or the XDG default, and the system ``gitattributes``."""
    found = [common_dir / "info" / "attributes"]
    try:
        configured = repo.config["core.attributesFile"]
    except KeyError:
        configured = None
    if configured:
        found.append(Path(os.path.expanduser(configured)))
    found += [folder / "attributes" for folder in _search_path(pygit2.enums.ConfigLevel.XDG)]
    found += [folder / "gitattributes" for folder in _search_path(pygit2.enums.ConfigLevel.SYSTEM)]
    return found


def filters_idle(repo: pygit2.Repository, common_dir: Path, tree: pygit2.Tree) -> bool:
    """True when no filter could change a byte of ``tree`` on checkout into
    ``repo``'s worktree: ``core.autocrlf`` is not true and no attribute file
    exists, in the tree or outside it.  Any doubt answers False."""
    try:
        autocrlf = repo.config["core.autocrlf"]
    except KeyError:
        autocrlf = "false"
    except (pygit2.GitError, ValueError):
        return False
    if str(autocrlf).strip().lower() not in ("false", "no", "off", "0", "input", ""):
        return False
    for path in _outside_attribute_files(repo, common_dir):
        try:
            if os.stat(path).st_size:
                return False
        except FileNotFoundError:
            continue
        except OSError:
            return False
    return not _tree_has_attributes(repo, tree)


def checkout_tree(repo: pygit2.Repository, tree: pygit2.Tree, strategy: pygit2.enums.CheckoutStrategy,
                  skip_filters: bool = False) -> None:
    """``repo.checkout_tree(tree, strategy=strategy)``, with libgit2's
    filters skipped when ``skip_filters`` (only where :func:`filters_idle`
    said so)."""
    if not skip_filters:
        repo.checkout_tree(tree, strategy=strategy)  # type: ignore[no-untyped-call]  # unannotated in pygit2
        return
    # pygit2's checkout_tree, with the one option it does not pass on.
    with git_checkout_options(strategy=strategy) as payload:
        payload.checkout_options.disable_filters = 1
        target = ffi.new("git_object **")
        ffi.buffer(target)[:] = tree._pointer[:]
        payload.check_error(_C.git_checkout_tree(repo._repo, target[0], payload.checkout_options))
