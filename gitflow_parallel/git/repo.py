"""The project's own thin layer over pygit2 (and, where git must act, git).

Everything else speaks in the project's vocabulary (base, tip, archive ref)
and reaches git through here.  Ref updates are compare-and-swap: a
``Reference`` looked up before the decision is moved with ``set_target``,
which libgit2 refuses when the ref moved in between.
"""

from __future__ import annotations

import atexit
import errno
import os
import re
import secrets
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from gitflow_parallel.errors import BASE_NOT_FOUND, LOCK_HELD, NOT_A_REPO, ParallelError, is_no_space
from gitflow_parallel.git import refs
from gitflow_parallel.git.refs import read_gitdir_file as read_gitdir_file  # the one reader of a .git file
from gitflow_parallel import environ as proc_env

if TYPE_CHECKING:  # pygit2 is imported where an object is read or a ref moved (see ``refs``)
    import pygit2

# The pass our hooks honour: a random token naming a file under
# <common>/parallel/internal/ that exists while the process that made it
# runs (a bare "1" set by hand, or by an agent, names none).  Our own git
# commands do not carry it: they run no hooks at all (``HARDENED``), and a
# filter or fsmonitor they start must never hold a pass.
INTERNAL_ENV = proc_env.INTERNAL_ENV
# What every git command of ours runs with, whatever the repository's config
# (which a linked worktree's agent can write) says: no fsmonitor, no hooks,
# no external diff, no ext:: transport.  Filters cannot be named off (their
# names come from attributes); judged checkouts are written by libgit2,
# which runs none (see ``scratch``).
HARDENED = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external=",
            "-c", "protocol.ext.allow=never"]
INTERNAL_DIR = "internal"
_TOKENS: dict[str, str] = {}

# How a command runs elsewhere than here (argv, cwd, env, stdin): in an attempt's fence.
Runner = Callable[[list[str], str, dict[str, str], bytes], "subprocess.CompletedProcess[bytes]"]

# How an attempt's worktree is staged (path, paths to leave out): where
# git-parallel's own git must not run the filters an attempt can reach, in a
# fence (``proc/leftovers.fenced_stager``); by default ``stage_all``.
Stager = Callable[[Path, list[str]], None]

# Instance branches; they are never a base (see ``resolve_base``).
INSTANCE_PREFIX = "refs/heads/parallel/"

# One byte is appended to <common>/parallel/<WRITES_FILE> before every write
# of ours to a ref, the config or the scratch pool, so that the tamper check
# around an agent (``tamper``) can tell that git-parallel itself wrote meanwhile.
WRITES_FILE = "writes"

DEFAULT_NAME = "git-parallel"
DEFAULT_EMAIL = "git-parallel@localhost"

# (author, committer) of a commit the tool writes.
Identity = tuple["pygit2.Signature", "pygit2.Signature"]


def identity(path: str | os.PathLike[str]) -> Identity:
    """Author and committer as ``git commit`` in ``path`` would write them.

    Asked of ``git var`` so that GIT_AUTHOR_NAME/EMAIL/DATE and
    GIT_COMMITTER_* override the config exactly as git does (pygit2's
    ``default_signature`` reads only ``user.*``); where git knows no
    identity, the tool's own name stands in, as before."""
    return _ident(path, "AUTHOR"), _ident(path, "COMMITTER")


def _ident(path: str | os.PathLike[str], who: str) -> pygit2.Signature:
    import pygit2

    proc = subprocess.run(["git", *HARDENED, "var", f"GIT_{who}_IDENT"], cwd=str(path), env=proc_env.for_host_git(),
                          stdin=subprocess.DEVNULL, capture_output=True)
    found = re.fullmatch(r"(.*) <(.*)> (-?\d+) ([+-])(\d\d)(\d\d)", proc.stdout.decode(errors="replace").strip())
    if proc.returncode != 0 or found is None:
        return pygit2.Signature(os.environ.get(f"GIT_{who}_NAME") or DEFAULT_NAME,
                                os.environ.get(f"GIT_{who}_EMAIL") or DEFAULT_EMAIL)
    name, email, when, sign, hours, minutes = found.groups()
    offset = (int(hours) * 60 + int(minutes)) * (-1 if sign == "-" else 1)
    return pygit2.Signature(name, email, int(when), offset)



def _lock_held(what: str, lock: Path, exc: Exception, task: str | None) -> ParallelError:
    """libgit2 found ``<ref>.lock``: a git command is writing the ref, or a
    killed one left the lock (git itself refuses alike)."""
    return ParallelError(
        LOCK_HELD, f"{what}: {lock} is there, so git or another program is writing it ({exc}); nothing moved",
        hint=f"wait for the git command working here; if none is, `git parallel recover {task or 'TASK'}` removes "
             f"a stale lock, or remove it by hand (rm {lock}), then run the command again")

class Repo:
    """A repository as git-parallel sees it: its common dir and main worktree.

    The pygit2 handles (``pygit``, ``main``) are opened on first use: a verb
    that only reads records and refs never imports pygit2 (see ``refs``)."""

    def __init__(self, found: refs.Found, repo: pygit2.Repository | None = None) -> None:
        self._found = found
        self._pygit = repo
        self._main: pygit2.Repository | None = None
        self.common_dir = found.common
        self.parallel_dir = found.common / "parallel"
        # The worktree the command was started in (may be a linked one).
        self.workdir: Path = found.workdir
        self._main_workdir: Path | None = found.workdir if found.gitdir == found.common else None
        if self._main_workdir is None and found.common.name == ".git" and repo is None:
            self._main_workdir = found.common.parent  # (``refs.discover`` saw no core.worktree)

    @property
    def pygit(self) -> pygit2.Repository:
        """The pygit2 handle (the git CLI is run through run_git)."""
        if self._pygit is None:
            import pygit2

            self._pygit = pygit2.Repository(str(self._found.workdir))
        return self._pygit

    @property
    def main(self) -> pygit2.Repository:
        """The main worktree's repository."""
        if self._main is None:
            import pygit2

            linked = self._found.gitdir != self._found.common
            self._main = pygit2.Repository(str(self.common_dir)) if linked else self.pygit
        return self._main

    @property
    def main_workdir(self) -> Path | None:
        if self._main_workdir is None and self._found.gitdir != self._found.common:
            workdir = self.main.workdir
            self._main_workdir = Path(workdir).resolve() if workdir else None
        return self._main_workdir

    # -- opening -----------------------------------------------------------
    @classmethod
    def open(cls, cwd: str | os.PathLike[str] | None = None) -> "Repo":
        start = str(cwd or os.getcwd())
        found = refs.discover(start)
        return cls(found) if found is not None else cls(*_found_by_pygit2(start))

    # -- objects and refs ----------------------------------------------------
    def signature(self) -> pygit2.Signature:
        """The configured ``user.*`` (a record's "who"); commits take ``identity``."""
        import pygit2

        try:
            return self.pygit.default_signature
        except (KeyError, pygit2.GitError):
            return pygit2.Signature(DEFAULT_NAME, DEFAULT_EMAIL)

    def identity(self) -> Identity:
        """Author and committer of a commit of ours here, as git would write
        them: every commit the tool makes (leftovers, landing, notes,
        evidence and run refs, claims) takes them from here."""
        return identity(self.workdir or self.common_dir)

    def ref_target(self, name: str) -> str | None:
        if self._readable():
            return refs.target(self._found, name)
        import pygit2

        try:
            ref = self.pygit.references[name]
        except (KeyError, pygit2.InvalidSpecError):
            return None
        try:
            return str(ref.resolve().target)
        except (KeyError, pygit2.GitError):
            return None

    def _readable(self) -> bool:
        """Are refs read from the files (see ``refs``), not through pygit2?"""
        return not (self._found.common / "reftable").exists()

    def resolve_base(self, spec: str | None) -> tuple[str, str]:
        """The base as (full ref name, commit oid).  It must be a local branch,
        because the winner is landed by moving it."""
        import pygit2

        if spec is None:
            # The branch of the worktree the command runs in (a linked one too).
            head = self.pygit.references.get("HEAD")
            target = head.target if head is not None else None
            if head is None or head.type != pygit2.enums.ReferenceType.SYMBOLIC or not isinstance(target, str):
                raise ParallelError(
                    BASE_NOT_FOUND,
                    "HEAD is detached, so there is no base branch to land on",
                    hint="check out a branch, or pass --base <branch>",
                )
            name = target
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

    def cas_ref(self, name: str, new: str, old: str | None, message: str, task: str | None = None) -> bool:
        """Move ``name`` from ``old`` to ``new``; False if it is not at ``old``
        (a lost race).  A ``<name>.lock`` in the way is no race: it raises
        ``PARALLEL_LOCK_HELD`` (``task`` names the run in its hint), and any
        other failure to write the ref is raised as it is.

        ``old=None`` means the ref must not exist yet."""
        note_write(self.common_dir)
        try:
            return self._cas_ref(name, new, old, message, task)
        finally:
            note_write(self.common_dir)  # and after: a tamper check may have started meanwhile

    def _cas_ref(self, name: str, new: str, old: str | None, message: str, task: str | None) -> bool:
        import pygit2

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
        except (pygit2.GitError, ValueError, OSError) as exc:
            if self.ref_target(name) != old:
                return False  # it moved under us: libgit2's own compare-and-swap said no
            lock = Path(self.common_dir) / f"{name}.lock"
            if lock.exists():
                raise _lock_held(f"cannot move {name}", lock, exc, task) from exc
            raise
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
        note_write(self.common_dir)
        try:
            ref.delete()
        except OSError as exc:
            # libgit2 found `<ref>.lock`: a git command is writing the ref, or
            # a killed one left the lock (git itself refuses alike).
            raise _lock_held(f"cannot delete {name}", Path(self.common_dir) / f"{name}.lock", exc, None) from exc
        finally:
            note_write(self.common_dir)
        return True

    def refs_under(self, prefix: str) -> Iterable[tuple[str, str]]:
        if self._readable():
            yield from refs.under(self._found, prefix)
            return
        for name in self.pygit.references:
            if name.startswith(prefix):
                target = self.ref_target(name)
                if target:
                    yield name, target

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        import pygit2

        if ancestor == descendant:
            return True
        return self.pygit.descendant_of(pygit2.Oid(hex=descendant), pygit2.Oid(hex=ancestor))

    def tree_of(self, commit: str) -> str:
        import pygit2

        return str(self.pygit[commit].peel(pygit2.Commit).tree_id)

    def _diff(self, old: str, new: str) -> pygit2.Diff:
        import pygit2

        return self.pygit[old].peel(pygit2.Tree).diff_to_tree(self.pygit[new].peel(pygit2.Tree))

    def changed_lines(self, old: str, new: str) -> int:
        """Lines added plus lines deleted from commit ``old`` to ``new``,
        from the objects (a worktree may say anything)."""
        stats = self._diff(old, new).stats
        return stats.insertions + stats.deletions

    def diff_bytes(self, old: str, new: str) -> bytes:
        """The patch from commit ``old`` to ``new`` as git would print it,
        in bytes (file contents need not be UTF-8)."""
        return b"".join(patch.data for patch in self._diff(old, new) if patch is not None)

    # -- git itself ----------------------------------------------------------
    def run_git(self, args: list[str], cwd: str | os.PathLike[str] | None = None,
                check: bool = True, input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        # Our git calls name their repository by cwd.
        note_write(self.common_dir)
        proc = subprocess.run(["git", *HARDENED, *args], cwd=str(cwd or self.main_workdir), env=proc_env.for_host_git(),
                              input=input, capture_output=True)
        note_write(self.common_dir)  # and after: a tamper check may have started meanwhile
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed ({proc.returncode}): "
                               f"{proc.stderr.decode(errors='replace').strip()}")
        return proc


def _found_by_pygit2(start: str) -> tuple[refs.Found, pygit2.Repository]:
    """The repository at ``start`` as libgit2 finds it, where ``refs.discover`` was not sure."""
    import pygit2

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
    return refs.Found(gitdir, common, Path(repo.workdir).resolve()), repo


def common_path(repo: pygit2.Repository) -> str:
    """The common dir of ``repo`` (a linked worktree's ``path`` is its admin folder)."""
    path = Path(repo.path)
    try:
        return str((path / (path / "commondir").read_text(encoding="utf-8").strip()).resolve())
    except OSError:
        return str(path)


def note_write(common_dir: str | os.PathLike[str]) -> None:
    """Say that git-parallel is writing a ref, the config or the scratch
    pool (see ``WRITES_FILE``); called before such a write and again after."""
    try:
        fd = os.open(os.path.join(common_dir, "parallel", WRITES_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.join(common_dir, "parallel"), exist_ok=True)
        fd = os.open(os.path.join(common_dir, "parallel", WRITES_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        os.write(fd, b".")
    finally:
        os.close(fd)


def _forget_token(path: Path, owner: int) -> None:
    if os.getpid() == owner:  # a forked worker exiting must not end its parent's pass
        try:
            path.unlink()
        except OSError:
            pass


def pid_namespace() -> str:
    """This process's PID namespace (the inode number ``/proc/self/ns/pid``
    names), "0" where it cannot be read: a pid means something only there."""
    try:
        return "".join(c for c in os.readlink("/proc/self/ns/pid") if c.isdigit()) or "0"
    except OSError:
        return "0"


# A token of a process in another PID namespace (a container sharing the
# repository), whose pid cannot be looked up here, is kept this long.
FOREIGN_TOKEN_S = 24 * 3600


def _sweep_tokens(folder: Path) -> None:
    """Remove the tokens of processes that are gone (killed with -9): a pid
    of this PID namespace not alive, or one of another untouched for
    ``FOREIGN_TOKEN_S``."""
    here = pid_namespace()
    for path in folder.iterdir():
        try:
            fields = path.read_text(encoding="ascii").split()
            pid = int(fields[0])
            if fields[1:2] and fields[1] != f"n{here}":
                if path.stat().st_mtime < time.time() - FOREIGN_TOKEN_S:
                    path.unlink(missing_ok=True)
                continue
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
        path.write_text(f"{os.getpid()} n{pid_namespace()}\n", encoding="ascii")
        atexit.register(_forget_token, path, os.getpid())
        _TOKENS[key] = token
    return token


def create_ref_exclusive(git_dir: str | os.PathLike[str], name: str, new: str, message: str) -> bool:
    """Create a ref only if it does not exist yet; False if it does.

    libgit2 checks for an existing ref *before* taking the ref's lock, so two
    ``references.create(force=False)`` at once can both succeed, the second
    silently replacing the first.  git's update-ref with the null oid as the
    old value makes that check under the lock."""
    note_write(git_dir)
    proc = subprocess.run(["git", *HARDENED, f"--git-dir={git_dir}", "update-ref", "-m", message, name, new,
                           "0" * len(new)], env=proc_env.for_host_git(), capture_output=True)
    return proc.returncode == 0


def delete_ref_if(git_dir: str | os.PathLike[str], name: str, old: str, message: str) -> bool:
    """Delete a ref only if it still points at ``old`` (under the ref's lock,
    as ``create_ref_exclusive``; a ref pointing at any object, not only a
    commit); False if it moved or is gone."""
    note_write(git_dir)
    try:
        proc = subprocess.run(["git", *HARDENED, f"--git-dir={git_dir}", "update-ref", "-m", message, "-d", name, old],
                              env=proc_env.for_host_git(), capture_output=True)
    finally:
        note_write(git_dir)
    return proc.returncode == 0


def worktree_changes(path: str | os.PathLike[str], scratch: Iterable[str] = ()) -> list[str]:
    """Paths with uncommitted changes in a worktree (untracked included,
    ignored not, nor untracked files the ``scratch`` patterns match)."""
    import pygit2

    repo = pygit2.Repository(str(path))
    flags = repo.status(untracked_files="all", ignored=False)
    changed = {p for p, f in flags.items() if f != pygit2.GIT_STATUS_CURRENT and not f & pygit2.GIT_STATUS_IGNORED}
    if not changed:
        return []
    scratch = list(scratch)
    return sorted(changed - scratch_files(path, scratch) - agents_ignore_lines(repo, scratch))


# aider writes ``.env`` into .gitignore along with its ``.aider*`` line
# (aider 0.86, ``main.check_gitignore``), in one go.
_WITH_AIDER = ".env"


def agents_ignore_lines(repo: pygit2.Repository, scratch: Iterable[str]) -> set[str]:
    """``{".gitignore"}`` when the top .gitignore's only change from HEAD is
    lines an agent appended for itself (aider adds ``.aider*``, and ``.env``
    with it): lines that are ``scratch`` patterns; else nothing.  Such a
    change is the agent's, not the task's: never committed, and not
    uncommitted work."""
    import pygit2

    patterns = set(scratch)
    file = Path(repo.workdir or "") / ".gitignore"
    if not patterns or not repo.workdir or file.is_symlink() or not file.is_file():
        return set()
    try:
        now = file.read_bytes()
        head = repo.revparse_single("HEAD").peel(pygit2.Tree) if not repo.head_is_unborn else None
    except (OSError, KeyError, pygit2.GitError):
        return set()
    entry = head[".gitignore"] if head is not None and ".gitignore" in head else None
    blob = repo[entry.id] if entry is not None and entry.type_str == "blob" else None
    before = blob.data if isinstance(blob, pygit2.Blob) else b""
    if before and not before.endswith(b"\n"):
        before += b"\n"  # what aider does before it appends
    if now == before or not now.startswith(before):
        return set()
    added = {line.strip() for line in now[len(before):].decode(errors="replace").splitlines() if line.strip()}
    ours = added <= patterns | ({_WITH_AIDER} if ".aider*" in added else set())
    return {".gitignore"} if ours else set()


def scratch_files(path: str | os.PathLike[str], patterns: Iterable[str], run: Runner | None = None) -> set[str]:
    """Untracked files of the worktree at ``path`` that ``patterns`` (lines
    of a .gitignore) match, as git itself matches them; a tracked file never
    is one.  ``run``: where git runs (see ``stage_all``)."""
    patterns = list(patterns)
    if not patterns:
        return set()

    def git(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        if run is not None:
            return run(argv, str(path), proc_env.for_host_git(), b"")
        return subprocess.run(argv, cwd=str(path), env=proc_env.for_host_git(), stdin=subprocess.DEVNULL,
                              capture_output=True)

    proc = git(["git", *HARDENED, "ls-files", "-z", "--others", "--ignored", *(f"--exclude={p}" for p in patterns)])
    if proc.returncode != 0:
        raise RuntimeError(f"git ls-files in {path} failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    matched = {os.fsdecode(p) for p in proc.stdout.split(b"\0") if p}
    if not matched:
        return matched
    # Only those .gitignore does not already keep out: git refuses a
    # pathspec, even an excluding one, that names an ignored path.
    visible = git(["git", *HARDENED, "ls-files", "-z", "--others", "--exclude-standard"])
    if visible.returncode != 0:
        raise RuntimeError(f"git ls-files in {path} failed ({visible.returncode}): "
                           f"{visible.stderr.decode(errors='replace').strip()}")
    return matched & {os.fsdecode(p) for p in visible.stdout.split(b"\0") if p}


def stage_all(path: str | os.PathLike[str], skip: Iterable[str] = (), run: Runner | None = None) -> None:
    """``git add -A`` in a worktree: everything but the paths in ``skip``,
    .gitignore respected, filters run; by ``run`` (argv, cwd, env, stdin)
    when given: the attempt's fence, where the filters run what the attempt
    may have written.

    On a full disk git dies leaving the object it was writing as a
    ``tmp_obj_*`` file that fills what space was left; that garbage is
    removed (only files made since this add began), so the caller can still
    record why the commit failed, and ``ENOSPC`` is raised."""
    started = time.time() - 1.0
    # Pathspecs on stdin: a scratch folder can hold thousands of files.
    specs = b"".join(os.fsencode(s) + b"\0" for s in [".", *(f":(exclude,literal){p}" for p in skip)])
    argv = ["git", *HARDENED, "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"]
    if run is None:
        proc = subprocess.run(argv, cwd=str(path), env=proc_env.for_host_git(), input=specs, capture_output=True)
    else:
        proc = run(argv, str(path), proc_env.for_host_git(), specs)
    if proc.returncode == 0:
        return
    said = proc.stderr.decode(errors="replace").strip()
    if is_no_space(RuntimeError(said)):
        _drop_temp_objects(path, started)
        raise OSError(errno.ENOSPC, f"git add -A in {path}: {os.strerror(errno.ENOSPC).lower()}")
    raise RuntimeError(f"git add -A in {path} failed ({proc.returncode}): {said}")


def _drop_temp_objects(path: str | os.PathLike[str], since: float) -> None:
    proc = subprocess.run(["git", *HARDENED, "rev-parse", "--path-format=absolute", "--git-path", "objects"], cwd=str(path),
                          env=proc_env.for_host_git(), stdin=subprocess.DEVNULL, capture_output=True)
    objects = Path(proc.stdout.decode(errors="replace").strip())
    if proc.returncode != 0 or not objects.is_dir():
        return
    for tmp in [*objects.glob("tmp_obj_*"), *objects.glob("??/tmp_obj_*")]:
        try:
            if tmp.stat().st_mtime >= since:
                tmp.unlink()
        except OSError:
            continue


def _as_in_head(repo: pygit2.Repository, index: pygit2.Index, paths: Iterable[str]) -> None:
    """Index entries for ``paths`` put back as HEAD has them (or removed)."""
    import pygit2

    head = None if repo.head_is_unborn else repo.revparse_single("HEAD").peel(pygit2.Tree)
    for path in paths:
        if head is not None and path in head:
            item = head[path]
            index.add(pygit2.IndexEntry(path, item.id, item.filemode))
        elif path in index:
            index.remove(path)


def commit_all(path: str | os.PathLike[str], message: str, ref: str | None = "HEAD",
               parent: str | None = None, scratch: Iterable[str] = (), staged: bool = False,
               stage: Stager | None = None) -> str | None:
    """Commit everything uncommitted in the worktree at ``path`` (respecting
    .gitignore), but untracked files the ``scratch`` patterns match; with
    ``staged``, what its index holds (``stage_all`` has run already); else
    it is staged by ``stage`` (default ``stage_all``).  With
    ``ref=None`` the commit is written without moving any ref and without
    touching the worktree's index (used to archive a dirty worktree before
    removing it).  Returns the new oid, or None if clean."""
    import pygit2

    repo = pygit2.Repository(str(path))
    if not worktree_changes(path, scratch):
        return None
    # Staged by git itself: libgit2 runs no clean filters (filter.*.clean,
    # Git LFS), so its add_all would commit raw content that git then shows
    # as modified.  With ref=None the worktree is about to be removed (or
    # reset), so staging into its own index is harmless.
    scratch = list(scratch)
    agents_own = agents_ignore_lines(repo, scratch)
    if not staged:
        (stage or stage_all)(Path(path), sorted(scratch_files(path, scratch) | agents_own))
    note_write(common_path(repo))  # the instance's branch moves (see tamper)
    index = repo.index
    index.read(True)
    _as_in_head(repo, index, agents_own)  # even if the agent staged it itself
    tree = index.write_tree()
    author, committer = identity(path)
    parents = [pygit2.Oid(hex=parent)] if parent else ([repo.head.target] if not repo.head_is_unborn else [])
    oid = repo.create_commit(ref, author, committer, message, tree, parents)
    note_write(common_path(repo))
    return str(oid)
