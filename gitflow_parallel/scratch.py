"""The clean checkouts that gates judge, and the protected paths inside them.

Gates never run in an agent's worktree: the agent can edit anything there
(the gate scripts, the tests, ``conftest.py``), leave untracked or ignored
files that change what a gate sees, or add patterns to
``<common>/info/exclude``.  Instead every gate, score command and merge
re-proof runs in a *scratch checkout*: a detached git worktree of the exact
commit being judged, at ``<common>/parallel/scratch/<run_id>/<name>``,
reset with ``git checkout --force --detach`` and ``git clean -ffdx`` before
each use, so nothing but the commit's tracked files is there.  One scratch
checkout per instance is kept between checks (switching a checkout to a
commit that differs in a few files is far cheaper than writing all of them
again) and removed with the instance; merge re-proves in the first winner's.
Every git command here runs with ``core.hooksPath=/dev/null``: a scratch
checkout is nobody's checkout, and no hook has business with it.

Protected paths.  What is judged is not quite the commit: it is the commit's
tree with every *protected* path as the base commit has it (a file the
attempt added under a protected pattern is left out).  So an attempt is
always tested against the real tests and the real gate scripts.  Protected
are ``.gitparallel.yaml``, every path a gate's or the score command's
argv names that exists in the base tree (a word of an argument, so
``sh -c "./test.sh && pytest tests"`` protects ``test.sh`` and ``tests``),
and the config's ``protect`` globs (``*`` within a path component, ``**``
across them; a pattern that names a folder protects what is under it).
When that changes anything, the judged tree is written as a commit of its
own (parent: the judged commit, fixed identity and date, so the same inputs
give the same oid) and that commit is checked out.

This module owns those rules, the scratch checkouts and finding the ones a
crash left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import pygit2
from filelock import FileLock, Timeout

from gitflow_parallel import errors as E
from gitflow_parallel.config import CONFIG_FILE
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.gitrepo import Repo

SCRATCH = "scratch"
# Who "wrote" a judged tree: fixed, so one tree gives one commit oid.
JUDGE_SIGNATURE = ("git-parallel judge", "git-parallel@localhost")
_NO_HOOKS = ["-c", "core.hooksPath=/dev/null"]


# -- protected paths ---------------------------------------------------------------
@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` stay within one path component, ``**`` spans any."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
        i += 1
    return re.compile("".join(out))


def matches(path: str, patterns: Iterable[str], folders: bool = True) -> bool:
    """Does ``path`` (or, with ``folders``, one of its folders) match one of ``patterns``?"""
    parts = path.split("/")
    prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)] if folders else [path]
    return any(_glob_regex(p.strip("/")).fullmatch(prefix) for p in patterns for prefix in prefixes)


def _named_paths(argv: Iterable[str], tree: pygit2.Tree) -> list[str]:
    """The words of ``argv`` that name a path of ``tree``."""
    found = []
    for arg in argv:
        for word in str(arg).split():
            rel = os.path.normpath(word).lstrip("/") if not word.startswith("/") else ""
            if not rel or rel == "." or rel.startswith(".."):
                continue
            try:
                tree[rel]
            except (KeyError, ValueError):
                continue
            found.append(rel)
    return found


def protected_patterns(config: dict[str, Any], base_tree: pygit2.Tree) -> list[str]:
    """Every pattern protected for a run with ``config`` on ``base_tree``."""
    named = [CONFIG_FILE]
    for gate in config.get("gates") or []:
        named += _named_paths(gate["run"], base_tree)
    named += _named_paths((config.get("score") or {}).get("command") or [], base_tree)
    literal = [re.sub(r"([*?])", r"[\1]", p) for p in named]  # a file named "a*b" is literal
    return sorted(set(literal) | set(config.get("protect") or []))


def changed_protected(repo: pygit2.Repository, base_tree: pygit2.Tree, tree: pygit2.Tree,
                      patterns: list[str]) -> list[str]:
    """The protected paths whose entry differs between the two trees."""
    out = set()
    for delta in repo.diff(base_tree, tree).deltas:
        for path in {delta.old_file.path, delta.new_file.path}:
            if matches(path, patterns):
                out.add(path)
    return sorted(out)


def judged_commit(repo: pygit2.Repository, commit: str, base: str, patterns: list[str]) -> tuple[str, str, list[str]]:
    """What is checked out to judge ``commit``: (commit oid, tree oid, the
    protected paths the attempt changed).  The commit is ``commit`` itself
    when it changed no protected path."""
    target = repo.get(commit).peel(pygit2.Commit)
    base_tree = repo.get(base).peel(pygit2.Tree)
    changed = changed_protected(repo, base_tree, target.tree, patterns)
    if not changed:
        return commit, str(target.tree_id), []
    index = pygit2.Index()
    index.read_tree(target.tree)
    for path in changed:
        try:
            index.remove(path)
        except (KeyError, OSError, pygit2.GitError):
            pass
        try:
            entry = base_tree[path]
        except KeyError:
            continue  # added by the attempt: left out
        if entry.type_str == "blob" or entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
            index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
    try:
        tree = index.write_tree(repo)
    except pygit2.GitError as exc:
        raise ParallelError(
            E.PROTECTED_PATH_CHANGED,
            f"{commit[:12]} turns a protected path into a folder or a file where the base has the other "
            f"({', '.join(changed[:5])}): {exc}",
            hint="leave protected paths as the base has them, or set protect_mode: refuse") from None
    name, email = JUDGE_SIGNATURE
    sig = pygit2.Signature(name, email, 0, 0)
    message = f"git-parallel: {commit} judged with protected paths from {base}\n"
    oid = repo.create_commit(None, sig, sig, message, tree, [target.id])
    return str(oid), str(tree), changed


# -- scratch checkouts -------------------------------------------------------------
def scratch_root(repo: Repo, run_id: str | None = None) -> Path:
    root = repo.parallel_dir / SCRATCH
    return root / run_id if run_id else root


def checkout_path(repo: Repo, run_id: str, name: str) -> Path:
    # The folder's name becomes the admin folder's name in <common>/worktrees;
    # "+" occurs in no run id, task or instance id, so it collides with none.
    return scratch_root(repo, run_id) / f"scratch+{run_id[3:11]}+{name}"


class Checkout:
    """One scratch checkout, used by one command at a time (a file lock)."""

    def __init__(self, repo: Repo, run_id: str, name: str) -> None:
        self.repo = repo
        self.path = checkout_path(repo, run_id, name)
        self._lock = FileLock(str(self.path) + ".lock")

    def __enter__(self) -> "Checkout":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=600)
        except Timeout:
            raise ParallelError(E.RESOURCE_LOCK_FAILED, f"the scratch checkout {self.path} stayed busy for 10 minutes",
                                hint="another git parallel check or merge holds it; wait for it, then try again") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def prepare(self, commit: str) -> Path:
        """Make the checkout hold exactly ``commit``'s tracked files."""
        if (self.path / ".git").is_file() and self._git(["checkout", "-q", "--force", "--detach", commit]) \
                and self._git(["clean", "-q", "-ffdx"]) and self._head() == commit:
            return self.path
        self.remove()
        if not self._add(commit) or not self._git(["reset", "-q", "--hard"]) or self._head() != commit:
            raise ParallelError(
                E.WORKTREE_CREATE_FAILED,
                f"could not make a clean checkout of {commit[:12]} at {self.path}: {self._last_error}",
                hint="nothing was judged; fix the cause the message names (disk space, permissions) and run again")
        return self.path

    def remove(self) -> None:
        """Remove the checkout and its admin entry, whatever state it is in."""
        remove_checkout(self.repo, self.path)

    _last_error = ""

    def _add(self, commit: str) -> bool:
        """Register the worktree without checking it out, one at a time.

        ``git worktree add`` reads every other admin folder and fails on one
        that another ``worktree add`` is still writing, so registering is
        serialised (it is quick without the checkout) and retried; the
        checkout itself, the slow part, then runs in parallel."""
        with FileLock(str(scratch_root(self.repo) / ".add.lock"), timeout=120):
            for attempt in range(5):
                if self._git(["worktree", "add", "-q", "--force", "--no-checkout", "--detach", str(self.path), commit],
                             cwd=self.repo.common_dir):
                    return True
                self.remove()
                time.sleep(0.05 * (attempt + 1))
        return False

    def _git(self, args: list[str], cwd: Path | None = None) -> bool:
        proc = self.repo.run_git([*_NO_HOOKS, *args], cwd=cwd or self.path, check=False)
        self._last_error = proc.stderr.decode(errors="replace").strip()
        return proc.returncode == 0

    def _head(self) -> str | None:
        try:
            text = (self.path / ".git").read_text(encoding="utf-8").strip()
            admin = Path(text[len("gitdir: "):])
            return (admin / "HEAD").read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            return None


def admin_dirs(common_dir: Path, path: Path) -> list[Path]:
    """The ``<common>/worktrees/*`` folders that belong to the worktree at ``path``."""
    found = []
    folder = common_dir / "worktrees"
    if not folder.is_dir():
        return found
    want = {str(path / ".git"), str(path.resolve() / ".git")}
    try:  # the worktree's own pointer, if git got as far as writing it
        pointer = (path / ".git").read_text(encoding="utf-8").strip()
        admin = Path(pointer[len("gitdir: "):]) if pointer.startswith("gitdir: ") else None
        if admin is not None and admin.resolve().parent == folder.resolve():  # never rmtree anything else
            found.append(admin)
    except OSError:
        pass
    for admin in folder.iterdir():
        try:
            if (admin / "gitdir").read_text(encoding="utf-8").strip() in want and admin not in found:
                found.append(admin)
        except OSError:
            continue
    return found


def remove_checkout(repo: Repo, path: Path) -> None:
    # Without `git worktree prune`, which would touch other worktrees' state too.
    admins = admin_dirs(repo.common_dir, path)
    shutil.rmtree(path, ignore_errors=True)
    for admin in admins:
        shutil.rmtree(admin, ignore_errors=True)


def remove_run(repo: Repo, run_id: str, names: Iterable[str] | None = None) -> None:
    """Remove a run's scratch checkouts (only ``names``, if given)."""
    root = scratch_root(repo, run_id)
    if not root.is_dir():
        return
    wanted = None if names is None else {checkout_path(repo, run_id, n).name for n in names}
    for child in sorted(root.iterdir()):
        if child.suffix == ".lock" or (wanted is not None and child.name not in wanted):
            continue
        remove_checkout(repo, child)
        try:
            (root / f"{child.name}.lock").unlink()
        except FileNotFoundError:
            pass
    if names is None or not any(root.iterdir()):
        shutil.rmtree(root, ignore_errors=True)


def leftovers(repo: Repo, live_run_ids: set[str]) -> list[Path]:
    """Scratch checkouts of runs that are no longer live (a crash, a kill -9)."""
    root = scratch_root(repo)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name not in live_run_ids)
