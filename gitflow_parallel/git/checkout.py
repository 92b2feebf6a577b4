"""Writing a tree's files with libgit2, and knowing when its filters have
nothing to do.

libgit2 never runs an external filter driver, but before it writes each
file it loads that file's filter list: the attributes of the path, found by
resolving the file's full path with ``realpath`` (one ``readlink`` per path
component, twice per file) and looking up every attribute file on the way.
On a fresh checkout of thousands of files that lookup is most of what is
not the kernel creating files.  The two filters libgit2 has built in change
bytes on checkout only to write CRLF line ends (an ``eol=crlf`` attribute,
``core.eol=crlf`` or ``core.autocrlf=true`` for a text file) or to expand
``$Id$`` (``ident``); ``text``, ``text=auto``, ``eol=lf``, ``binary`` and
the rest leave a blob's bytes as they are on this system (LF its native
line end).  So where no attribute file anywhere libgit2 would look sets
either, and the config asks for no CRLF, skipping the filters
(``disable_filters``) writes the very same bytes; everywhere else the
filters stay on.

The tree walk that reads every ``.gitattributes`` reads every folder of the
tree, so it pays only for a checkout that writes every file: a fresh one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pygit2
from pygit2 import ffi
from pygit2._libgit2 import lib as _C  # type: ignore[import-not-found]  # pygit2 ships no stub for its cffi module
from pygit2.callbacks import git_checkout_options

ATTRIBUTES = ".gitattributes"


def rules_idle(text: str) -> bool:
    """Do the attribute rules ``text`` (a ``.gitattributes``, macros too)
    set nothing that makes a built-in filter change bytes on checkout here:
    no ``eol=crlf`` and no ``ident`` set?  Every word after a line's first
    counts (a quoted pattern split at its spaces only errs towards False)."""
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        for word in words[1:]:
            name, _, value = word.partition("=")
            if name == "ident" or (name == "eol" and value.lower() == "crlf"):
                return False
    return True


def _tree_rules_idle(repo: pygit2.Repository, tree: pygit2.Tree) -> bool:
    """Are the rules of every ``.gitattributes`` in ``tree`` idle
    (:func:`rules_idle`)?  Reads folders, and those files (each tree object
    once: a folder repeated under many paths shares its oid)."""
    seen: set[pygit2.Oid] = set()
    pending = [tree]
    while pending:
        folder = pending.pop()
        if ATTRIBUTES in folder:
            rules = folder[ATTRIBUTES]
            # A link is followed in the worktree, to rules of anywhere; an
            # attempt's file may be of any size: not read past a MiB.
            blob = repo[rules.id] if rules.filemode != pygit2.enums.FileMode.LINK else None
            if not isinstance(blob, pygit2.Blob) or blob.size >= 1 << 20 \
                    or not rules_idle(blob.data.decode("utf-8", "replace")):
                return False
        for entry in folder:
            if entry.filemode == pygit2.enums.FileMode.TREE and entry.id not in seen:
                seen.add(entry.id)
                sub = repo[entry.id]
                if isinstance(sub, pygit2.Tree):
                    pending.append(sub)
    return True


# The files whose rules libgit2 reads from a worktree, following a link.
RULES_FILES = (ATTRIBUTES, ".gitignore", ".gitmodules")
_LINKED: dict[pygit2.Oid, bool] = {}  # tree -> does it link a rules file (trees never change)


def links_rules(repo: pygit2.Repository, tree: pygit2.Tree) -> bool:
    """Does ``tree`` hold a ``.gitignore``, ``.gitattributes`` or
    ``.gitmodules`` that is a symbolic link, at any depth?  A checkout of
    it has libgit2 follow that link the next time it writes there (a link
    to a FIFO, made after the checkout, hangs it).  Reads folders only."""
    known = _LINKED.get(tree.id)
    if known is not None:
        return known
    found, seen, pending = False, set(), [tree]
    while pending and not found:
        folder = pending.pop()
        for entry in folder:
            if entry.filemode == pygit2.enums.FileMode.LINK and entry.name in RULES_FILES:
                found = True
                break
            if entry.filemode == pygit2.enums.FileMode.TREE and entry.id not in seen:
                seen.add(entry.id)
                sub = repo[entry.id]
                if isinstance(sub, pygit2.Tree):
                    pending.append(sub)
    if len(_LINKED) > 256:
        _LINKED.clear()
    _LINKED[tree.id] = found
    return found


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
    ``repo``'s worktree: neither ``core.autocrlf`` true nor ``core.eol``
    crlf, and no attribute file, in the tree or outside it, setting
    ``eol=crlf`` or ``ident``.  Any doubt answers False."""
    autocrlf, eol = _setting(repo, "core.autocrlf", "false"), _setting(repo, "core.eol", "native")
    if autocrlf is None or eol is None or autocrlf not in ("false", "no", "off", "0", "input", "") or eol == "crlf":
        return False
    for path in _outside_attribute_files(repo, common_dir):
        try:
            text = _read_rules(path)
        except OSError:
            return False
        if text is not None and not rules_idle(text):
            return False
    return _tree_rules_idle(repo, tree)


def _setting(repo: pygit2.Repository, key: str, unset: str) -> str | None:
    """A config value, lower case (``unset`` when it is not set); None when it cannot be read."""
    try:
        return str(repo.config[key]).strip().lower()
    except KeyError:
        return unset
    except (pygit2.GitError, ValueError):
        return None


def _read_rules(path: Path) -> str | None:
    """An attribute file's text, None where there is none; ``OSError`` for
    one that is no regular file under a MiB (a FIFO is never waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size >= 1 << 20:
            raise OSError(f"{path} is not a small regular file")
        return handle.read(1 << 20).decode("utf-8", "replace")


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
