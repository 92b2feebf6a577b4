"""The clean checkouts that gates judge, and the protected paths inside them.

Gates never run in an agent's worktree: the agent can edit anything there
(the gate scripts, the tests, ``conftest.py``), leave untracked or ignored
files that change what a gate sees, or add patterns to
``<common>/info/exclude``.  Instead every gate, score command and merge
re-proof runs in a *scratch checkout*: a detached git worktree of the exact
commit being judged, reset with a forced libgit2 checkout and
``git clean -ffdx`` before each use, so nothing but the commit's tracked
files is there.  They live outside ``.git`` (``judged_root``), where test
runners treat them as ordinary project folders.  The files are written by libgit2, never by ``git checkout``:
libgit2 runs no external filter driver, so a ``filter.<x>.smudge`` that an
agent configured (in the shared config, naming ``info/attributes``) cannot
write a file the commit does not hold, nor run anything.  The repository keeps a pool of them,
``<repo>.parallel/.judged/scratch+<k>``: a command borrows one no one else
holds (an OS file lock, so a killed holder frees it at once), and the next
user simply resets it.  Switching a checkout between commits of one
repository writes the few files that differ; a fresh checkout writes them
all, so the pool is kept from run to run (at most as many checkouts as were
ever borrowed at once; ``remove_pool`` removes the idle ones).
Every git command here runs hardened (``repo.HARDENED``: no hooks, no
fsmonitor): a scratch checkout is nobody's checkout, and nothing the
repository's config names has business with it.

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

This module owns those rules and the pool of scratch checkouts.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pygit2
from filelock import FileLock, Timeout

from gitflow_parallel import errors as E
from gitflow_parallel import harness
from gitflow_parallel.config import CONFIG_FILE
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import remove_tree
from gitflow_parallel.git import lfs
from gitflow_parallel.git.checkout import checkout_tree, filters_idle
from gitflow_parallel.git.repo import Repo, note_write, read_gitdir_file

SCRATCH = "scratch"
# Who "wrote" a judged tree: fixed, so one tree gives one commit oid.
JUDGE_SIGNATURE = ("git-parallel judge", "git-parallel@localhost")
# More scratch checkouts than this at once means something is looping.
POOL_MAX = 256


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


def protected_patterns(config: Mapping[str, Any], base_tree: pygit2.Tree) -> list[str]:
    """Every pattern protected for a run with ``config`` on ``base_tree``:
    the config file, the paths the gates' and score's commands name, the
    ``protect`` globs and, unless ``protect_defaults: false``, the harness
    files (``harness.HARNESS_PATTERNS``) and the score's findings file."""
    named = [CONFIG_FILE]
    for gate in config.get("gates") or []:
        named += _named_paths(gate["run"], base_tree)
    named += _named_paths((config.get("score") or {}).get("command") or [], base_tree)
    named += _reached_files(config, base_tree)
    literal = [re.sub(r"([*?])", r"[\1]", p) for p in named]  # a file named "a*b" is literal
    defaults = list(harness.HARNESS_PATTERNS) if config.get("protect_defaults", True) else []
    findings = findings_file(config)
    defaults += [re.sub(r"([*?])", r"[\1]", findings)] if findings else []
    defaults += kept_environment(config)
    return sorted(set(literal) | set(config.get("protect") or []) | set(defaults))


def kept_environment(config: Mapping[str, Any]) -> list[str]:
    """The setup's ``keep`` paths, as patterns (each holds what is under it),
    when they are protected (``protect_defaults``).  The kept environment is
    laid there over the checkout, its folders merged with the checkout's: a
    ``.venv/bin/sh`` the attempt committed (the environment has none) came
    first on the gates' ``PATH`` and ran as their shell."""
    if not config.get("protect_defaults", True):
        return []
    keep = (config.get("setup") or {}).get("keep") or []
    paths = {posixpath.normpath(str(k)).strip("/") for k in keep}
    return sorted(re.sub(r"([*?])", r"[\1]", p) for p in paths if p not in ("", ".", "..") and not p.startswith("../"))


def findings_file(config: Mapping[str, Any]) -> str | None:
    """The ``score.findings`` file as a path of the tree (``./out//f.jsonl``
    is ``out/f.jsonl``), when it is protected (``protect_defaults``).  It is a
    gate's output: an attempt's own copy would score itself, and once landed
    would be the base's copy every later attempt is judged with."""
    findings: str | None = (config.get("score") or {}).get("findings")
    if not findings or not config.get("protect_defaults", True):
        return None
    return posixpath.normpath(findings)


def _reached_files(config: Mapping[str, Any], tree: pygit2.Tree) -> list[str]:
    """What the gates reach through package.json scripts and the runner
    configuration (``harness.reached_files``)."""
    files = {path for path, _ in _blobs(tree)}
    roots = harness.npm_scripts(g["run"] for g in config.get("gates") or [])
    return harness.reached_files(files, lambda p: _tree_blob(tree, p), roots, config.get("protect_defaults", True))


def _tree_blob(tree: pygit2.Tree, path: str) -> bytes | None:
    found = tree[path]
    return found.data if isinstance(found, pygit2.Blob) else None


def _blobs(tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, pygit2.Oid]]:
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            yield from _blobs(entry, f"{prefix}{entry.name}/")
        elif entry.type_str == "blob":
            yield f"{prefix}{entry.name}", entry.id


def _line_counts(patch: pygit2.Patch | None) -> tuple[int, int]:
    if patch is None or patch.delta.is_binary:
        return 0, 0
    _, added, deleted = patch.line_stats
    return added, deleted


def _blob_data(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> bytes | None:
    try:
        entry = tree[path]
    except KeyError:
        return None
    return repo.odb.read(entry.id)[1] if entry.type_str == "blob" else None


def changed_protected(repo: pygit2.Repository, base_tree: pygit2.Tree, tree: pygit2.Tree,
                      patterns: list[str], config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The protected paths whose entry differs between the two trees, each
    with how (``added``, ``deleted``, ``modified``), its line counts and
    whether it is the harness's (``harness``).  A mixed file
    (``harness.MIXED_FILES``) counts only when its harness sections differ."""
    config = config or {}
    mixed = config.get("protect_defaults", True)
    findings = findings_file(config)
    kept = kept_environment(config)
    scripts = harness.npm_scripts(g["run"] for g in config.get("gates") or [])
    out: dict[str, dict[str, Any]] = {}
    diff = base_tree.diff_to_tree(tree)
    for i, delta in enumerate(diff.deltas):
        for path in {delta.old_file.path, delta.new_file.path}:
            if path in out:
                continue
            is_mixed = mixed and harness.is_mixed(path)
            restored, dependencies = True, False
            if matches(path, patterns):
                harness_file = is_mixed or matches(path, harness.HARNESS_PATTERNS, folders=False) or matches(path, kept)
            elif is_mixed and harness.harness_changed(path, _blob_data(repo, base_tree, path),
                                                      _blob_data(repo, tree, path), scripts):
                harness_file = True
            elif mixed and (matches(path, harness.DEPENDENCY_PATTERNS, folders=False) or is_mixed and
                            harness.dependencies_changed(path, _blob_data(repo, base_tree, path),
                                                         _blob_data(repo, tree, path))):
                harness_file, restored, dependencies = False, False, True
            else:
                continue
            added, deleted = _line_counts(diff[i])  # a patch only for what is shown
            status = delta.status
            change = ("added" if status == pygit2.enums.DeltaStatus.ADDED
                      else "deleted" if status == pygit2.enums.DeltaStatus.DELETED else "modified")
            out[path] = {"path": path, "change": change, "lines_added": added, "lines_deleted": deleted,
                         "harness": harness_file or path in (CONFIG_FILE, findings), "dependencies": dependencies,
                         "restored": restored}
    return [out[p] for p in sorted(out)]


def blocks_pick(change: dict[str, Any]) -> bool:
    """Does this protected change keep its attempt out of an automatic pick?
    Every change does but a new test file: a changed config or harness, a
    deleted or rewritten test, would land and change how later runs judge."""
    return bool(change["harness"] or change.get("dependencies", False) or change["change"] != "added")


def added_tests(changes: list[dict[str, Any]]) -> list[str]:
    """The new files under protected paths that are not the harness's: tests
    the attempt added, run as a second stage (``judge/check``)."""
    return [c["path"] for c in changes if not blocks_pick(c)]


def judged_commit(repo: pygit2.Repository, commit: str, base: str, patterns: list[str],
                  config: Mapping[str, Any] | None = None) -> tuple[str, str, list[dict[str, Any]]]:
    """What is checked out to judge ``commit``: (commit oid, tree oid, the
    protected changes the attempt made, as :func:`changed_protected`).  The
    commit is ``commit`` itself when it changed no protected path."""
    target = repo[commit].peel(pygit2.Commit)
    base_tree = repo[base].peel(pygit2.Tree)
    details = changed_protected(repo, base_tree, target.tree, patterns, config)
    changed = [c["path"] for c in details if c["restored"]]
    if not changed:
        return commit, str(target.tree_id), details
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
    return str(oid), str(tree), details


# -- scratch checkouts -------------------------------------------------------------
# Where the pool lives: outside the repository's .git and its main
# worktree, so that test runners, watchers and linters that skip every path
# holding "/.git/" (jest's haste map among them) see an ordinary project
# folder; beside the worktrees by default, or where the git config
# ``parallel.judgedRoot`` says.
JUDGED = ".judged"
ROOT_KEY = "parallel.judgedRoot"


def judged_root(common_dir: Path, main_workdir: Path | None) -> Path:
    """The folder of the pool of judged checkouts of a repository."""
    try:
        configured = pygit2.Config(str(common_dir / "config"))[ROOT_KEY]
    except (KeyError, pygit2.GitError, OSError, ValueError):
        configured = None
    if configured:
        root = Path(os.path.expanduser(str(configured)))
        return root if root.is_absolute() else (main_workdir or common_dir) / root
    if main_workdir is None:  # a bare repository: no project folder to mirror
        return common_dir / "parallel" / SCRATCH
    return main_workdir.parent / f"{main_workdir.name}.parallel" / JUDGED


def scratch_root(repo: Repo) -> Path:
    return judged_root(repo.common_dir, repo.main_workdir)


def pool_path(repo: Repo, k: int) -> Path:
    # The folder's name becomes the admin folder's name in <common>/worktrees;
    # "+" occurs in no task or instance id, so it collides with no instance.
    return scratch_root(repo) / f"scratch+{k}"


# Rent or make.  A thread that finds every made checkout busy with its own
# process's work (a check judging several instances) waits for one to come
# free for as long as making a new one took here, and only then makes its
# own: quick gates then take turns in one checkout instead of each writing
# the whole tree, and slow gates lose at most that long.  The time is kept
# in COST_FILE for the next command; a wait never exceeds MAX_WAIT.
COST_FILE = ".make-seconds"
MAX_WAIT = 60.0


class _Turns:
    """What one process knows of a pool: the checkouts its threads hold and
    the ones they are making."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.held: set[Path] = set()
        self.making: set[Path] = set()


_TURNS: dict[Path, _Turns] = {}
_TURNS_LOCK = threading.Lock()


def _turns(root: Path) -> _Turns:
    with _TURNS_LOCK:
        return _TURNS.setdefault(root, _Turns())


def _known_cost(root: Path) -> float | None:
    try:
        return min(max(float((root / COST_FILE).read_text(encoding="ascii")), 0.0), MAX_WAIT)
    except (OSError, ValueError):
        return None


def _made_cost(root: Path, seconds: float) -> None:
    try:
        (root / COST_FILE).write_text(f"{seconds:.3f}\n", encoding="ascii")
    except OSError:
        pass  # the next command measures again
    turns = _turns(root)
    with turns.cond:
        turns.cond.notify_all()


def _made(repo: Repo) -> list[int]:
    """The numbers of the pool's checkouts that exist (made, or being made)."""
    root = scratch_root(repo)
    found = []
    for name in os.listdir(root):
        head, plus, k = name.partition("+")
        if head == "scratch" and plus and k.isdigit() and os.path.isfile(os.path.join(root, name, ".git")):
            found.append(int(k))
    return sorted(found)


def _take(repo: Repo, made: bool) -> tuple[Path, FileLock] | None:
    """A checkout of the pool no one holds (``made``: only one that exists),
    its lock acquired."""
    for k in _made(repo) if made else range(1, POOL_MAX + 1):
        path = pool_path(repo, k)
        lock = FileLock(str(path) + ".lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue
        return path, lock
    return None


def _wait_or_make(repo: Repo, turns: _Turns) -> tuple[Path, FileLock]:
    """Under ``turns.cond``: a made checkout, once one of this process's
    comes free within the time making one takes; else one to make."""
    root = scratch_root(repo)
    since: float | None = None
    while True:
        taken = _take(repo, made=True)
        if taken is not None:
            return taken
        cost = _known_cost(root)
        if not turns.held or (cost is None and not turns.making):
            break  # nothing of ours to wait for, or nothing to go by
        if cost is None:  # the first is being made: its time says how long to wait
            turns.cond.wait(MAX_WAIT)
            continue
        since = time.monotonic() if since is None else since
        left = cost - (time.monotonic() - since)
        if left <= 0:
            break
        turns.cond.wait(left)
    taken = _take(repo, made=False)
    if taken is None:
        raise ParallelError(E.RESOURCE_CAP_EXHAUSTED, f"all {POOL_MAX} scratch checkouts are in use",
                            hint="wait for other checks and merges to finish, or check fewer at once (--jobs)")
    turns.making.add(taken[0])
    return taken


@contextmanager
def borrow(repo: Repo) -> Iterator["Checkout"]:
    """A scratch checkout of the repository's pool that no one else is
    using, held (an OS file lock, freed even by ``kill -9``) until the
    ``with`` ends: a made one that is free, or one that comes free soon
    enough (above), or a new one."""
    root = scratch_root(repo)
    root.mkdir(parents=True, exist_ok=True)
    turns = _turns(root)
    with turns.cond:
        path, lock = _wait_or_make(repo, turns)
        turns.held.add(path)
    try:
        yield Checkout(repo, path)
    finally:
        with turns.cond:
            turns.held.discard(path)
            turns.making.discard(path)
            lock.release()
            turns.cond.notify_all()


class Checkout:
    """One scratch checkout; whoever has it borrowed uses it alone."""

    def __init__(self, repo: Repo, path: Path) -> None:
        self.repo = repo
        self.path = path
        self._last_error = ""

    def used(self) -> None:
        """Untrusted code ran in the checkout itself (Landlock alone, no
        overlay): it may have left links, a rewritten ``.git`` file or
        anything else, so the next ``prepare`` makes it afresh instead of
        writing into (and through) what it left."""
        try:
            _used(self.path).touch()
        except OSError:
            remove_checkout(self.repo, self.path)

    def _trusted(self) -> bool:
        """Is the checkout as git-parallel left it: never marked used, its
        ``.git`` a regular file naming its own admin folder, which names it back?"""
        return not os.path.lexists(_used(self.path)) and own_gitfile(self.repo.common_dir, self.path)

    def prepare(self, commit: str, keep: Iterable[str] = ()) -> Path:
        """Make the checkout hold exactly ``commit``'s tracked files (and,
        untouched by the clean, the paths ``keep`` names)."""
        if self._trusted() and self._checkout(commit) and self._clean(keep) and self._head() == commit:
            return self.path
        started = time.monotonic()
        remove_checkout(self.repo, self.path)
        # Nothing but the commit's files is in a checkout just made: no clean.
        if not self._add(commit) or not self._checkout(commit, fresh=True) or self._head() != commit:
            raise ParallelError(
                E.WORKTREE_CREATE_FAILED,
                f"could not make a clean checkout of {commit[:12]} at {self.path}: {self._last_error}",
                hint="nothing was judged; fix the cause the message names (disk space, permissions) and run again")
        _made_cost(scratch_root(self.repo), time.monotonic() - started)
        return self.path

    def _checkout(self, commit: str, fresh: bool = False) -> bool:
        """Write ``commit``'s files with libgit2 (no filter driver, no hook,
        no fsmonitor runs) and detach HEAD at it.  A ``fresh`` checkout
        writes every file, so it first asks whether libgit2's own filters
        could change any (``git/checkout``), and skips them if not."""
        # Every object read to judge is checked against its name.
        pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 1)
        strategy = pygit2.enums.CheckoutStrategy
        note_write(self.repo.common_dir)
        try:
            wt = pygit2.Repository(str(self.path))
            target = wt[commit].peel(pygit2.Commit)
            # Untracked files go with the clean after it, which spares ``keep``.
            idle = fresh and filters_idle(wt, self.repo.common_dir, target.tree)
            checkout_tree(wt, target.tree, strategy.FORCE, skip_filters=idle)
            lfs.smudge(wt, target.tree, self.path, self.repo.common_dir)  # what libgit2 left as pointers
            wt.set_head(target.id)
        except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False
        finally:
            note_write(self.repo.common_dir)
        return True

    def _clean(self, keep: Iterable[str]) -> bool:
        return self._git(["clean", "-q", "-ffdx", *[f"-e/{path.strip('/')}" for path in keep]])

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
                remove_checkout(self.repo, self.path)
                time.sleep(0.05 * (attempt + 1))
        return False

    def _git(self, args: list[str], cwd: Path | None = None) -> bool:
        proc = self.repo.run_git(args, cwd=cwd or self.path, check=False)
        self._last_error = proc.stderr.decode(errors="replace").strip()
        return proc.returncode == 0

    def _head(self) -> str | None:
        admin = read_gitdir_file(self.path / ".git")
        if admin is None:
            return None
        try:
            return (admin / "HEAD").read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            return None


def own_gitfile(common_dir: Path, path: Path) -> bool:
    """Is the ``.git`` of the checkout at ``path`` as git wrote it: a regular
    file naming its own admin folder in ``<common>/worktrees``, which names
    it back?  Else libgit2 must not open the checkout: a gate that wrote in
    it (Landlock alone) may have pointed it at a git dir of its making."""
    gitfile = path / ".git"
    if gitfile.is_symlink() or not gitfile.is_file():
        return False
    admin = read_gitdir_file(gitfile)
    try:
        folder = (common_dir / "worktrees").resolve()
        return (admin is not None and admin.parent.resolve() == folder and not admin.is_symlink()
                and Path((admin / "gitdir").read_text(encoding="utf-8").strip()) == gitfile)
    except OSError:
        return False


def _used(path: Path) -> Path:
    return path.with_name(path.name + ".used")


def admin_dirs(common_dir: Path, path: Path) -> list[Path]:
    """The ``<common>/worktrees/*`` folders that belong to the worktree at ``path``."""
    found: list[Path] = []
    folder = common_dir / "worktrees"
    if not folder.is_dir():
        return found
    want = {str(path / ".git"), str(path.resolve() / ".git")}
    # Never by the checkout's own ``.git`` file: under Landlock alone a gate
    # writes the checkout, and repointed it at the admin folder of another
    # worktree (the user's own, an instance's), which went with it.  git
    # writes an admin folder's ``gitdir`` before the worktree's ``.git``.
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
    if path.is_symlink():
        path.unlink()
    remove_tree(path, ignore_errors=True)
    _used(path).unlink(missing_ok=True)
    for admin in admins:
        remove_tree(admin, ignore_errors=True)


def remove_pool(repo: Repo) -> list[Path]:
    """Remove every scratch checkout no one is using; returns those removed."""
    removed = []
    root = scratch_root(repo)
    for path in sorted(root.glob("scratch+*")) if root.is_dir() else []:
        if path.is_symlink() or not path.is_dir():
            continue
        lock = FileLock(str(path) + ".lock", timeout=0)
        try:
            lock.acquire()
        except Timeout:
            continue
        try:
            remove_checkout(repo, path)
            removed.append(path)
        finally:
            lock.release()
    return removed
