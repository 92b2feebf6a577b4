"""The project's own thin layer over pygit2 (and, where git must act, git).

Everything else speaks in the project's vocabulary (base, tip, archive ref)
and reaches git through here.  Ref updates are compare-and-swap: a
``Reference`` looked up before the decision is moved with ``set_target``,
which libgit2 refuses when the ref moved in between.
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
from pathlib import Path
from typing import Iterable

import pygit2

from gitflow_parallel.errors import BASE_NOT_FOUND, LOCK_HELD, NOT_A_REPO, ParallelError
from gitflow_parallel.proc import env as proc_env

# Set on every git subprocess we start, so our own hooks let our moves
# through.  Its value is a random token naming a file under
# <common>/parallel/internal/ that exists while this process runs: a bare
# "1" set by hand (or by an agent) names none and gets no pass.
INTERNAL_ENV = "GIT_PARALLEL_INTERNAL"
INTERNAL_DIR = "internal"
_TOKENS: dict[str, str] = {}

# Instance branches; they are never a base (see ``resolve_base``).
INSTANCE_PREFIX = "refs/heads/parallel/"

DEFAULT_NAME = "git-parallel"
DEFAULT_EMAIL = "git-parallel@localhost"


class Repo:
    """A repository as git-parallel sees it: its common dir and main worktree."""

    def __init__(self, repo: pygit2.Repository, common_dir: Path) -> None:
        self.pygit = repo  # the pygit2 handle (the git CLI is run through run_git)
        self.common_dir = common_dir
        self.parallel_dir = common_dir / "parallel"
        # The worktree the command was started in (may be a linked one).
        self.workdir = Path(repo.workdir).resolve() if repo.workdir else None
        main = repo if common_dir == Path(repo.path).resolve() else pygit2.Repository(str(common_dir))
        self.main = main
        self.main_workdir = Path(main.workdir).resolve() if main.workdir else None

    # -- opening -----------------------------------------------------------
    @classmethod
    def open(cls, cwd: str | os.PathLike[str] | None = None) -> "Repo":
        start = str(cwd or os.getcwd())
        try:
            found = pygit2.discover_repository(start)
        except pygit2.GitError:
            found = None
        if not found:
            raise ParallelError(
                NOT_A_REPO,
                f"not inside a git repository: {start}",
                hint="run git parallel from inside a git repository (git init, or cd into one)",
            )
        # Opened from where we stand, not from the git dir: with a separate
        # git dir (git init --separate-git-dir) libgit2 would guess the git
        # dir's parent as the worktree.
        repo = pygit2.Repository(start) if not pygit2.Repository(found).is_bare else pygit2.Repository(found)
        gitdir = Path(repo.path).resolve()
        common = gitdir
        commondir_file = gitdir / "commondir"
        if commondir_file.exists():
            common = (gitdir / commondir_file.read_text().strip()).resolve()
        if repo.is_bare or (common == gitdir and repo.workdir is None):
            raise ParallelError(
                NOT_A_REPO,
                f"{gitdir} is a bare repository; git parallel needs a main worktree",
                hint="clone it (git clone <bare> <dir>) and run git parallel in the clone",
            )
        return cls(repo, common)

    # -- objects and refs ----------------------------------------------------
    def signature(self) -> pygit2.Signature:
        try:
            return self.pygit.default_signature
        except (KeyError, pygit2.GitError):
            return pygit2.Signature(DEFAULT_NAME, DEFAULT_EMAIL)

    def ref_target(self, name: str) -> str | None:
        try:
            ref = self.pygit.references[name]
        except (KeyError, pygit2.InvalidSpecError):
            return None
        try:
            return str(ref.resolve().target)
        except (KeyError, pygit2.GitError):
            return None

    def resolve_base(self, spec: str | None) -> tuple[str, str]:
        """The base as (full ref name, commit oid).  It must be a local branch,
        because the winner is landed by moving it."""
        if spec is None:
            # The branch of the worktree the command runs in (a linked one too).
            head = self.pygit.references.get("HEAD")
            if head is None or head.type != pygit2.enums.ReferenceType.SYMBOLIC:
                raise ParallelError(
                    BASE_NOT_FOUND,
                    "HEAD is detached, so there is no base branch to land on",
                    hint="check out a branch, or pass --base <branch>",
                )
            name = head.target if isinstance(head.target, str) else head.target.name
        else:
            name = spec if spec.startswith("refs/") else f"refs/heads/{spec}"
        oid = self.ref_target(name)
        if not name.startswith("refs/heads/") or oid is None:
            raise ParallelError(
                BASE_NOT_FOUND,
                f"base {spec or name!r} is not a local branch with a commit",
                hint="pass --base with an existing local branch (git branch --list)",
            )
        if name.startswith(INSTANCE_PREFIX):
            # Landing on another run's instance branch would move that run's
            # attempt under it (and its winner would no longer be what was proven).
            raise ParallelError(
                BASE_NOT_FOUND,
                f"base {name[len('refs/heads/'):]} is an instance branch of a git-parallel run, not a base branch",
                hint="pass --base with the branch the work should land on (spawning inside an instance's "
                     "worktree needs it too)",
            )
        commit = self.pygit.get(oid)
        if not isinstance(commit, pygit2.Commit):
            raise ParallelError(BASE_NOT_FOUND, f"base {name} does not point at a commit", hint="pass --base <branch>")
        return name, oid

    def cas_ref(self, name: str, new: str, old: str | None, message: str) -> bool:
        """Move ``name`` from ``old`` to ``new``; False if it is not at ``old``.

        ``old=None`` means the ref must not exist yet."""
        refs = self.pygit.references
        if old is None:
            return self.create_ref(name, new, message)
        try:
            ref = refs[name]
        except KeyError:
            return False
        if str(ref.target) != old:
            return False
        try:
            ref.set_target(pygit2.Oid(hex=new), message)
        except (pygit2.GitError, ValueError):
            return False
        return True

    def create_ref(self, name: str, new: str, message: str) -> bool:
        """Create ``name`` at ``new`` only if it does not exist; False if it does."""
        return create_ref_exclusive(self.common_dir, name, new, message)

    def delete_ref(self, name: str, expected: str | None = None) -> bool:
        try:
            ref = self.pygit.references[name]
        except KeyError:
            return False
        if expected is not None and str(ref.target) != expected:
            return False
        try:
            ref.delete()
        except OSError as exc:
            # libgit2 found `<ref>.lock`: a git command is writing the ref, or
            # a killed one left the lock (git itself refuses alike).
            lock = Path(self.common_dir) / f"{name}.lock"
            hint = ("wait for the git command working here; if none is, `git parallel recover TASK` "
                    "removes a stale lock (or remove it by hand)")
            raise ParallelError(LOCK_HELD, f"cannot delete {name}: {lock} is there ({exc})", hint=hint) from exc
        return True

    def refs_under(self, prefix: str) -> Iterable[tuple[str, str]]:
        for name in self.pygit.references:
            if name.startswith(prefix):
                target = self.ref_target(name)
                if target:
                    yield name, target

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        if ancestor == descendant:
            return True
        return self.pygit.descendant_of(pygit2.Oid(hex=descendant), pygit2.Oid(hex=ancestor))

    def tree_of(self, commit: str) -> str:
        return str(self.pygit.get(commit).peel(pygit2.Commit).tree_id)

    def _diff(self, old: str, new: str) -> pygit2.Diff:
        return self.pygit.diff(self.pygit.get(old).peel(pygit2.Tree), self.pygit.get(new).peel(pygit2.Tree))

    def changed_lines(self, old: str, new: str) -> int:
        """Lines added plus lines deleted from commit ``old`` to ``new``,
        from the objects (a worktree may say anything)."""
        stats = self._diff(old, new).stats
        return stats.insertions + stats.deletions

    def diff_bytes(self, old: str, new: str) -> bytes:
        """The patch from commit ``old`` to ``new`` as git would print it,
        in bytes (file contents need not be UTF-8)."""
        return b"".join(patch.data for patch in self._diff(old, new))

    # -- git itself ----------------------------------------------------------
    def run_git(self, args: list[str], cwd: str | os.PathLike[str] | None = None,
                check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        # Our git calls name their repository by cwd.
        proc = subprocess.run(["git", *args], cwd=str(cwd or self.main_workdir), env=internal_env(self.common_dir),
                              input=input, capture_output=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed ({proc.returncode}): "
                               f"{proc.stderr.decode(errors='replace').strip()}")
        return proc


def _forget_token(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked worker exiting must not end its parent's pass
        try:
            path.unlink()
        except OSError:
            pass


def _sweep_tokens(folder: Path) -> None:
    """Remove the tokens of processes that are gone (killed with -9)."""
    for path in folder.iterdir():
        try:
            pid = int(path.read_text(encoding="ascii").split()[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (OSError, ValueError, IndexError):
            continue


def internal_token(common_dir: str | os.PathLike[str]) -> str:
    """This process's token for ``common_dir``, made on first use."""
    key = os.path.realpath(common_dir)
    token = _TOKENS.get(key)
    if token is None:
        folder = Path(key) / "parallel" / INTERNAL_DIR
        folder.mkdir(parents=True, exist_ok=True)
        _sweep_tokens(folder)
        token = secrets.token_hex(16)
        path = folder / token
        path.write_text(f"{os.getpid()}\n", encoding="ascii")
        atexit.register(_forget_token, path, os.getpid())
        _TOKENS[key] = token
    return token


def internal_env(common_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The environment of a git subprocess of ours: our own location
    variables dropped (an inherited GIT_DIR or GIT_WORK_TREE, say from
    `git --git-dir=… parallel`, would aim it elsewhere), our token added."""
    env = proc_env.for_git()
    env[INTERNAL_ENV] = internal_token(common_dir)
    return env


def create_ref_exclusive(git_dir: str | os.PathLike[str], name: str, new: str, message: str) -> bool:
    """Create a ref only if it does not exist yet; False if it does.

    libgit2 checks for an existing ref *before* taking the ref's lock, so two
    ``references.create(force=False)`` at once can both succeed, the second
    silently replacing the first.  git's update-ref with the null oid as the
    old value makes that check under the lock."""
    proc = subprocess.run(["git", f"--git-dir={git_dir}", "update-ref", "-m", message, name, new, "0" * len(new)],
                          env=internal_env(git_dir), capture_output=True)
    return proc.returncode == 0


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


def worktree_changes(path: str | os.PathLike[str], scratch: Iterable[str] = ()) -> list[str]:
    """Paths with uncommitted changes in a worktree (untracked included,
    ignored not, nor untracked files the ``scratch`` patterns match)."""
    repo = pygit2.Repository(str(path))
    flags = repo.status(untracked_files="all", ignored=False)
    changed = {p for p, f in flags.items() if f != pygit2.GIT_STATUS_CURRENT and not f & pygit2.GIT_STATUS_IGNORED}
    return sorted(changed - scratch_files(path, scratch))


def scratch_files(path: str | os.PathLike[str], patterns: Iterable[str]) -> set[str]:
    """Untracked files of the worktree at ``path`` that ``patterns`` (lines
    of a .gitignore) match, as git itself matches them; a tracked file never
    is one."""
    patterns = list(patterns)
    if not patterns:
        return set()
    proc = subprocess.run(["git", "ls-files", "-z", "--others", "--ignored",
                           *(f"--exclude={p}" for p in patterns)],
                          cwd=str(path), env=git_env(), stdin=subprocess.DEVNULL, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git ls-files in {path} failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    return {os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}


def git_env() -> dict[str, str]:
    """The environment of a git command we start: no inherited location
    variables (it names its repository by cwd), marked as ours for the hooks."""
    env = proc_env.for_git()
    env[INTERNAL_ENV] = "1"
    return env


def stage_all(path: str | os.PathLike[str], skip: Iterable[str] = ()) -> None:
    """``git add -A`` in a worktree: everything but the paths in ``skip``,
    .gitignore respected, filters run."""
    # Pathspecs on stdin: a scratch folder can hold thousands of files.
    specs = b"".join(os.fsencode(s) + b"\0" for s in [".", *(f":(exclude,literal){p}" for p in skip)])
    proc = subprocess.run(["git", "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd=str(path),
                          env=git_env(), input=specs, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git add -A in {path} failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()}")


def commit_all(path: str | os.PathLike[str], message: str, ref: str | None = "HEAD",
               parent: str | None = None, signature: pygit2.Signature | None = None,
               scratch: Iterable[str] = ()) -> str | None:
    """Commit everything uncommitted in the worktree at ``path`` (respecting
    .gitignore), but untracked files the ``scratch`` patterns match.  With
    ``ref=None`` the commit is written without moving any ref and without
    touching the worktree's index (used to archive a dirty worktree before
    removing it).  Returns the new oid, or None if clean."""
    repo = pygit2.Repository(str(path))
    if not worktree_changes(path, scratch):
        return None
    # Staged by git itself: libgit2 runs no clean filters (filter.*.clean,
    # Git LFS), so its add_all would commit raw content that git then shows
    # as modified.  With ref=None the worktree is about to be removed (or
    # reset), so staging into its own index is harmless.
    stage_all(path, sorted(scratch_files(path, scratch)))
    index = repo.index
    index.read(True)
    tree = index.write_tree()
    try:
        sig = signature or repo.default_signature
    except (KeyError, pygit2.GitError):
        sig = pygit2.Signature(DEFAULT_NAME, DEFAULT_EMAIL)
    parents = [pygit2.Oid(hex=parent)] if parent else ([repo.head.target] if not repo.head_is_unborn else [])
    oid = repo.create_commit(ref, sig, sig, message, tree, parents)
    return str(oid)
