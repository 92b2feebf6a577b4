"""The clean checkouts that gates judge.

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

The protected paths laid over what is judged are ``git/protected``'s.

This module owns the pool of scratch checkouts.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import pygit2
from filelock import FileLock, Timeout

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import remove_tree
from gitflow_parallel.git import lfs
from gitflow_parallel.git.checkout import checkout_tree, filters_idle, links_rules
from gitflow_parallel.git.repo import Repo, note_write, read_gitdir_file

SCRATCH = "scratch"
# More scratch checkouts than this at once means something is looping.
POOL_MAX = 256


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
        if self._trusted() and not self._links_rules() and self._checkout(commit) and self._clean(keep) \
                and self._head() == commit:
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

    def _links_rules(self) -> bool:
        """Does the commit the checkout holds link a rules file
        (``git/checkout.links_rules``)?  Then it is made afresh: libgit2,
        writing over it, would follow the link, to whatever it names now."""
        held = self._head()
        if held is None:
            return True
        try:
            repo = pygit2.Repository(str(self.repo.common_dir))
            return links_rules(repo, repo[held].peel(pygit2.Commit).tree)
        except (pygit2.GitError, KeyError, ValueError):
            return True

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
