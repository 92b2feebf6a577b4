"""Instance branches and worktrees: creating them all-or-nothing, archiving
every tip before a branch goes, and removing them without losing work.

Worktrees are made as ``git worktree add`` makes them, checked out by
libgit2 (see ``_make_worktree``).  libgit2's checkout is
single-threaded and nearly all of its time is the kernel creating files, so
when several are made at once each checkout runs in a process of its own,
forked for it and all started together, as N ``git worktree add`` run in
parallel would be, the last in the spawning process itself (see
``_checkouts``).  Making one is not atomic: a
failure can leave the branch and the ``<common>/worktrees/<name>`` admin
folder behind, so every step is undone explicitly on failure.
"""

from __future__ import annotations

import os
import re
import signal
import stat
from pathlib import Path
from typing import Any, Callable, Sequence, TypedDict

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import remove_tree, tree_entries
from gitflow_parallel.git.checkout import checkout_tree, filters_idle
from gitflow_parallel.git import nested
from gitflow_parallel.git.repo import Repo, Stager, commit_all, note_write, read_gitdir_file, worktree_changes
from gitflow_parallel.model import InstanceRecord, RunRecord

ARCHIVE_PREFIX = "refs/parallel/archive"
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def admin_name(task: str, inst_id: str) -> str:
    """The worktree's name in ``<common>/worktrees/`` (unique per instance:
    ``+`` cannot occur in task names or instance ids, so task ``a`` with
    instance ``b-1`` and task ``a-b`` with instance ``1`` do not collide)."""
    return f"parallel+{task}+{inst_id}"


def archive_ref(run_id: str, inst_id: str, attempt: int) -> str:
    return f"{ARCHIVE_PREFIX}/{run_id}/{inst_id}/{attempt}"


def default_root(repo: Repo) -> Path:
    top = repo.main_workdir
    assert top is not None
    return top.parent / f"{top.name}.parallel"


def resolve_root(repo: Repo, configured: str | None) -> Path:
    if not configured:
        return default_root(repo)
    root = Path(os.path.expanduser(configured))
    if not root.is_absolute():
        root = (repo.main_workdir or Path.cwd()) / root
    root = Path(os.path.normpath(root))
    git_dir = Path(os.path.realpath(repo.common_dir))
    real = Path(os.path.realpath(root))  # a symlink must not lead into .git either
    if real == git_dir or git_dir in real.parents:
        raise ParallelError(
            E.CONFIG_INVALID,
            f"worktree_root {configured!r} resolves inside the git dir {git_dir}, which is git's own",
            hint="set worktree_root to a folder outside .git (the default is <repo>.parallel beside the repo)",
        )
    return root


# -- creation ----------------------------------------------------------------------
def _make_worktree(gitdir: str, name: str, path: str, branch: str, plain: bool = False) -> str | None:
    """Create one worktree; returns an error message or None.

    What ``git worktree add`` (and libgit2's ``git_worktree_add``) writes, by
    hand: the admin folder ``<common>/worktrees/<name>`` with ``commondir``,
    ``gitdir`` and ``HEAD`` on the branch, and the worktree's ``.git`` file
    naming it; then libgit2 checks the branch out there.  By hand because
    libgit2's worktree call takes no checkout options, and ``plain`` (no
    filter could change a byte: ``git/checkout.filters_idle``, asked once by
    the parent) lets the checkout skip the attribute lookup of every file.
    The branch is fresh and the paths were checked free, so there is no
    other worktree on it to refuse, and neither folder exists yet (``mkdir``
    refuses otherwise, and the parent rolls back)."""
    # git's own checkout does not re-hash every object it reads; libgit2 does
    # by default, which costs a large share of a big checkout.
    pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 0)
    try:
        admin = Path(gitdir).resolve() / "worktrees" / name
        admin.mkdir()
        os.mkdir(path)
        top = Path(os.path.realpath(path))  # as git and libgit2 write it
        (admin / "commondir").write_text("../..\n", encoding="utf-8")
        (admin / "gitdir").write_text(f"{top / '.git'}\n", encoding="utf-8")
        (admin / "HEAD").write_text(f"ref: refs/heads/{branch}\n", encoding="utf-8")
        (top / ".git").write_text(f"gitdir: {admin}\n", encoding="utf-8")
        repo = pygit2.Repository(str(top))
        tree = repo.head.peel(pygit2.Commit).tree
        checkout_tree(repo, tree, pygit2.enums.CheckoutStrategy.FORCE, skip_filters=plain)
    except Exception as exc:  # reported back to the parent, which rolls back
        return f"{type(exc).__name__}: {exc}"
    finally:
        # Off for the agent's own worktree only; everything read to judge or land is checked.
        pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 1)
    return None


# Checkouts running at once.  Each is one process, like one `git worktree add`;
# past this many, more processes only queue for the same disk and cores.
MAX_CHECKOUTS = 16


def _checkouts(gitdir: str, jobs: list[tuple[str, str, str]], plain: bool = False) -> list[str | None]:
    """Run ``_make_worktree`` for every job; returns each one's error or None.

    The last job runs here; the others run in forked children, all started
    at once, before it (at most ``MAX_CHECKOUTS`` checkouts at a time, this
    process's own counted): a child's checkout overlaps the others'
    completely, where a pool of a few workers would leave cores idle while
    its last jobs run alone, and this process checks one out instead of
    waiting (one fork fewer: a fork of this process costs some milliseconds
    of its own time).  A plain fork and a pipe per child cost less than
    multiprocessing (no import, no pickling, no helper threads).  If this
    process is interrupted, the children still running are killed and reaped
    before the exception goes on, so the rollback that follows never races a
    checkout."""
    if len(jobs) <= 1 or not hasattr(os, "fork"):
        return [_make_worktree(gitdir, *job, plain=plain) for job in jobs]
    results: list[str | None] = [None] * len(jobs)
    running: list[tuple[int, int, int]] = []  # (job index, pid, read end of its pipe)
    try:
        for index, job in enumerate(jobs[:-1]):
            if len(running) >= MAX_CHECKOUTS - 1:
                _reap_first(running, results)
            running.append((index, *_fork_checkout(gitdir, job, plain)))
        results[-1] = _make_worktree(gitdir, *jobs[-1], plain=plain)
        while running:
            _reap_first(running, results)
    finally:
        for _, pid, pipe in running:
            _kill(pid, pipe)
    return results


def _reap_first(running: list[tuple[int, int, int]], results: list[str | None]) -> None:
    index, pid, pipe = running[0]
    results[index] = _reap(pid, pipe)
    # Off the list only once reaped (an interrupted wait leaves it to _kill),
    # and closed only once off it (so _kill never closes a reused number).
    running.pop(0)
    os.close(pipe)


def _fork_checkout(gitdir: str, job: tuple[str, str, str], plain: bool) -> tuple[int, int]:
    """Start one child that makes one worktree and writes its error, if any,
    to a pipe; returns (pid, read end)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        # The child: never back into the caller's code (no finally, no atexit,
        # no flushing of buffers the parent also holds).
        code = 1
        try:
            os.close(read_end)
            error = _make_worktree(gitdir, *job, plain=plain)
            with os.fdopen(write_end, "wb") as out:
                out.write((error or "").encode("utf-8", "replace"))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    return pid, read_end


def _reap(pid: int, pipe: int) -> str | None:
    """Wait for a checkout child; its error, or None if it made its worktree."""
    with os.fdopen(pipe, "rb", closefd=False) as source:
        said = source.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return said or f"the checkout process {how}"
    return said or None


def _kill(pid: int, pipe: int) -> None:
    """Stop a checkout child whose result is no longer wanted, and reap it."""
    for step in (lambda: os.kill(pid, signal.SIGKILL), lambda: os.waitpid(pid, 0), lambda: os.close(pipe)):
        try:
            step()
        except OSError:
            pass  # already gone, already reaped, already closed


def create(repo: Repo, task: str, base_commit: str, instances: Sequence[InstanceRecord],
           fault: Callable[[str], None] | None = None) -> None:
    """Create a branch at ``base_commit`` and a worktree for every instance.

    All or nothing: on any failure everything made here is removed again and
    ``PARALLEL_DEV_WORKTREE_CREATE_FAILED`` is raised."""
    made_branches: list[str] = []
    made_paths: list[Path] = []
    made_admin: list[str] = []
    commit = repo.pygit[base_commit].peel(pygit2.Commit)
    try:
        refs = set(repo.pygit.references)  # listed once for every instance (archive refs pile up)
        for inst in instances:
            _refuse_in_the_way(repo, task, inst, refs)
        # libgit2 creates <common>/worktrees without tolerating a concurrent
        # mkdir, so make it before the workers race for it.
        (repo.common_dir / "worktrees").mkdir(exist_ok=True)
        for inst in instances:
            try:
                note_write(repo.common_dir)
                repo.pygit.branches.local.create(inst["branch"], commit)
            except (OSError, pygit2.GitError, ValueError) as exc:
                raise _create_failed(inst, f"git refused the branch {inst['branch']}: {exc}") from None
            made_branches.append(inst["branch"])
        jobs = []
        for inst in instances:
            path = Path(inst["worktree"])
            if path.is_dir():
                path.rmdir()  # _make_worktree makes it (and refuses one that exists)
            jobs.append((admin_name(task, inst["id"]), str(path), inst["branch"]))
        if fault:
            fault("spawn.before_worktrees")
        plain = filters_idle(repo.pygit, repo.common_dir, commit.tree)
        results = _checkouts(str(repo.common_dir), jobs, plain)
        failures = []
        for inst, (name, folder, _), err in zip(instances, jobs, results):
            if (repo.common_dir / "worktrees" / name).exists():
                made_admin.append(name)
            if Path(folder).exists():
                made_paths.append(Path(folder))
            if err is not None:
                failures.append((inst, err))
        if failures:
            inst, err = failures[0]
            raise _create_failed(inst, err)
    except BaseException:
        _rollback(repo, task, made_branches, made_paths, made_admin, instances)
        raise


def _refuse_in_the_way(repo: Repo, task: str, inst: InstanceRecord, refs: set[str]) -> None:
    """Refuse an instance whose path, admin folder, branch or ref (of
    ``refs``, every ref's name) is taken; make its worktree's parent folder."""
    path = Path(inst["worktree"])
    name = admin_name(task, inst["id"])
    if os.path.lexists(path) and (path.is_symlink() or not path.is_dir() or any(path.iterdir())):
        raise _create_failed(inst, f"the path {path} already exists")
    if (repo.common_dir / "worktrees" / name).exists():
        raise _create_failed(inst, f"a worktree named {name} is already registered")
    if inst["branch"] in repo.pygit.branches.local:
        raise _create_failed(inst, f"the branch {inst['branch']} already exists")
    clash = _ref_in_the_way(refs, f"refs/heads/{inst['branch']}")
    if clash:
        raise _create_failed(inst, f"the ref {clash} is in the way of the branch {inst['branch']} "
                                   "(git cannot hold a ref and a folder of refs under one name)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _create_failed(inst, f"cannot make the folder {path.parent}: {exc.strerror}") from None


def _ref_in_the_way(refs: set[str], name: str) -> str | None:
    """A ref of ``refs`` that makes ``name`` impossible: one named like a
    folder on its path (a branch called ``parallel``), or one nested under it."""
    parts = name.split("/")
    for k in range(2, len(parts)):
        prefix = "/".join(parts[:k])
        if prefix != "refs/heads" and prefix in refs:
            return prefix
    for other in sorted(refs):
        if other.startswith(name + "/"):
            return other
    return None


def _create_failed(inst: InstanceRecord, why: str) -> ParallelError:
    return ParallelError(
        E.WORKTREE_CREATE_FAILED,
        f"could not create the worktree of instance {inst['id']} at {inst['worktree']}: {why}",
        hint="nothing was kept; remove what is in the way (or set worktree_root in .gitparallel.yaml) and spawn again",
    )


def _rollback(repo: Repo, task: str, branches: list[str], paths: list[Path], admin: list[str],
              instances: Sequence[InstanceRecord]) -> None:
    # Only what this spawn made: the pre-checks refused any path, admin folder
    # or branch that existed before, so whatever is there now is ours.
    if branches:
        paths = paths + [Path(inst["worktree"]) for inst in instances]
        admin = admin + [admin_name(task, inst["id"]) for inst in instances]
    for path in set(paths):
        remove_tree(path, ignore_errors=True)
    for name in set(admin):
        remove_tree(repo.common_dir / "worktrees" / name, ignore_errors=True)
    for branch in branches:
        try:
            repo.pygit.branches.local.delete(branch)
        except (KeyError, pygit2.GitError):
            pass
    # Remove empty task folders we may have created under the worktree root.
    for inst in instances:
        parent = Path(inst["worktree"]).parent
        try:
            parent.rmdir()
        except OSError:
            pass


# -- archiving and removal -------------------------------------------------------------
def archive(repo: Repo, run_id: str, inst_id: str, attempt: int, oid: str) -> str:
    """Keep ``oid`` under the instance's archive ref (idempotent)."""
    name = archive_ref(run_id, inst_id, attempt)
    current = repo.ref_target(name)
    if current == oid or (current is not None and repo.is_ancestor(oid, current)):
        # Already kept (e.g. a retry interrupted after resetting to the base
        # archives the base next time): moving the ref would drop the tip.
        return name
    note_write(repo.common_dir)
    if current is None:
        repo.pygit.references.create(name, pygit2.Oid(hex=oid), force=False)
    elif repo.is_ancestor(current, oid):
        # The attempt produced more since it was archived: keep the newer tip.
        repo.pygit.references[name].set_target(pygit2.Oid(hex=oid), "git-parallel: archive")
    else:
        raise ParallelError(
            E.WORKTREE_CLEANUP_FAILED,
            f"{name} keeps {current[:12]}, and the tip to keep now ({oid[:12]}) does not contain it "
            "(the branch was rewritten); moving the archive ref would lose that work",
            hint=f"keep one under another name first (git update-ref refs/parallel/keep/{inst_id} {oid}), "
                 f"then reset the branch to {current[:12]} and try again",
        )
    return name


def _commit_oid(repo: Repo, text: str) -> str | None:
    text = text.strip()
    if text.startswith("ref:"):
        return repo.ref_target(text[4:].strip())
    try:
        obj = repo.pygit.get(text)
    except (ValueError, pygit2.GitError):
        return None
    return str(obj.id) if isinstance(obj, pygit2.Commit) else None


def worktree_heads(repo: Repo, admin: Path) -> list[str]:
    """Commits the worktree's HEAD pointed at since it was made, newest first:
    HEAD itself, ORIG_HEAD, and every entry of its reflog (git and libgit2
    log HEAD in the admin folder, also while it is detached, and that log
    outlives a deleted branch)."""
    found: list[str] = []
    for name in ("HEAD", "ORIG_HEAD", "rebase-merge/orig-head", "rebase-apply/orig-head"):
        oid = _commit_oid(repo, _admin_file(admin / name, 4096)[0])
        if oid:
            found.append(oid)
    # The newest entries, at the end: the agent could grow the file (a sparse
    # 8 GB of zeros costs it no disk) and it was read whole.
    text, cut = _admin_file(admin / "logs" / "HEAD", MAX_REFLOG_BYTES)
    lines = text.splitlines()[1 if cut else 0:]  # (a cut line is no entry)
    for line in reversed(lines):
        parts = line.split()
        for text in (parts[1], parts[0]) if len(parts) >= 2 else ():
            oid = _commit_oid(repo, text) if text.strip("0") else None
            if oid:
                found.append(oid)
    return list(dict.fromkeys(found))


# The most of an admin folder's HEAD reflog read (its newest entries): about
# 25,000 of them.
MAX_REFLOG_BYTES = 4 << 20


def _admin_file(path: Path, limit: int, head: bool = False) -> tuple[str, int]:
    """The last ``limit`` bytes of a file of an attempt's admin folder (its
    first with ``head``), which its agent wrote, and how many were not read:
    no link followed, no FIFO waited on ("" if it is neither a regular file
    nor readable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "", 0
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "", 0
        cut = max(0, info.st_size - limit)
        handle.seek(0 if head else cut)
        return handle.read(limit).decode("utf-8", "replace"), cut


def stray_ref(run_id: str, inst_id: str, attempt: int, oid: str) -> str:
    """Where a commit the branch does not contain is kept (next to the tip's archive ref)."""
    return f"{archive_ref(run_id, inst_id, attempt)}.kept-{oid[:12]}"


class BranchAttempt(TypedDict):
    """What ``keep_strays`` reads of an instance (an instance record is one)."""
    id: str
    branch: str
    attempt: int


def keep_strays(repo: Repo, run_id: str, task: str, inst: BranchAttempt, extra: Sequence[str] = ()) -> list[str]:
    """Archive every commit the worktree's HEAD reached that neither the
    branch nor an archive ref of the instance holds: work made on a detached
    HEAD (a rebase stopped half-way, ``git checkout --detach``), on another
    branch, or on a branch deleted meanwhile.  Returns the refs made."""
    admin = repo.common_dir / "worktrees" / admin_name(task, inst["id"])
    candidates = list(dict.fromkeys([*extra, *worktree_heads(repo, admin)]))
    if not candidates:
        return []
    held = [t for t in [repo.ref_target(f"refs/heads/{inst['branch']}")] if t]
    held += [oid for _, oid in repo.refs_under(f"{ARCHIVE_PREFIX}/{run_id}/{inst['id']}/")]
    made = []
    for oid in candidates:
        if any(repo.is_ancestor(oid, h) for h in held):
            continue
        name = stray_ref(run_id, inst["id"], inst["attempt"], oid)
        if repo.ref_target(name) != oid and not repo.create_ref(name, oid, "git-parallel: keep a stray commit"):
            raise ParallelError(
                E.WORKTREE_CLEANUP_FAILED,
                f"could not keep commit {oid[:12]} of instance {inst['id']} at {name}",
                hint=f"keep it yourself (git update-ref refs/parallel/keep/{inst['id']} {oid}) and run it again",
            )
        held.append(oid)
        made.append(name)
    return made


def _module_dirs(admin: Path) -> list[Path]:
    """The git dirs of submodules initialised in a linked worktree: git keeps
    them in ``<admin>/modules/<name>`` (nested ones under ``…/modules/…``)."""
    root = admin / "modules"
    if not root.is_dir():
        return []
    found = []
    for entry, _ in tree_entries(root):  # no recursion: the attempt made this folder, to any depth
        folder = Path(entry.path).parent
        if entry.name == "HEAD" and not entry.is_symlink() and (folder / "objects").is_dir() \
                and (folder / "refs").is_dir():
            found.append(folder)
    return sorted(found)


def keep_modules(repo: Repo, run_id: str, task: str, inst: InstanceRecord) -> list[str]:
    """Keep the HEAD and branches of every submodule git dir in the
    instance's admin folder under archive refs, so that commits made in a
    submodule survive the removal of that folder.  Returns the refs made.

    That folder is the attempt's to write: no git runs in such a git dir
    (a ``git fetch`` from it ran ``upload-pack`` there, unfenced, reading a
    config the agent wrote: an include of ``/dev/stdin`` hung cleanup for
    ever).  Its refs are read from their files and its objects as a bare
    store, each written here by its content (``nested.copy_history``)."""
    admin = repo.common_dir / "worktrees" / admin_name(task, inst["id"])
    made = []
    for gitdir in _module_dirs(admin):
        rel = gitdir.relative_to(admin / "modules").as_posix().replace("/modules/", "/")
        safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in rel) or "module"
        dest = f"{archive_ref(run_id, inst['id'], inst['attempt'])}.modules/{safe}"
        store = nested.own_store(gitdir / "objects")
        lost = []
        for name, oid in _module_refs(gitdir).items():
            ref = f"{dest}/{name}"
            if not pygit2.reference_is_valid_name(ref) or not nested.copy_history(store, repo.pygit, oid):
                lost.append(name)
                continue
            note_write(repo.common_dir)
            repo.pygit.create_reference_direct(ref, pygit2.Oid(hex=oid), True,
                                               message="git-parallel: keep a submodule's commits")
            made.append(ref)
        if lost:
            raise ParallelError(
                E.WORKTREE_CLEANUP_FAILED,
                f"the submodule git dir {gitdir} of instance {inst['id']} could not be kept: "
                f"{', '.join(lost[:5])} name commits it does not hold",
                hint=f"push or copy the submodule's commits elsewhere, then remove {gitdir} and run it again",
            )
    return made


# The most of a submodule git dir's ``packed-refs`` read (its first lines).
MAX_PACKED_REFS_BYTES = 16 << 20


def _module_refs(gitdir: Path) -> dict[str, str]:
    """``HEAD`` (when it names a commit id, directly or through a branch) and
    ``heads/<branch>`` -> commit id, of a submodule git dir, read from its
    files (loose refs over packed ones, as git reads them), no link
    followed and no FIFO waited on."""
    heads: dict[str, str] = {}
    packed, _ = _admin_file(gitdir / "packed-refs", MAX_PACKED_REFS_BYTES, head=True)
    for line in packed.splitlines():
        oid, _, name = line.partition(" ")
        if name.startswith("refs/heads/") and _OID.fullmatch(oid):
            heads[name[len("refs/"):]] = oid
    for entry, rel in tree_entries(gitdir / "refs" / "heads"):
        if entry.is_file(follow_symlinks=False) and not rel.endswith(".lock"):
            oid = _admin_file(Path(entry.path), 128)[0].strip()
            if _OID.fullmatch(oid):
                heads[f"heads/{rel}"] = oid
    said = _admin_file(gitdir / "HEAD", 4096)[0].strip()
    if said.startswith("ref: refs/"):
        said = heads.get(said[len("ref: refs/"):], "")
    if _OID.fullmatch(said):
        heads["HEAD"] = said
    return heads


def is_our_worktree(repo: Repo, task: str, inst: InstanceRecord) -> bool:
    """Is the folder at the instance's path the worktree git-parallel made?
    (Its ``.git`` file points at our admin folder.)"""
    target = read_gitdir_file(Path(inst["worktree"]) / ".git")
    if target is None:
        return False
    return os.path.realpath(target) == os.path.realpath(repo.common_dir / "worktrees" / admin_name(task, inst["id"]))


def check_removable(repo: Repo, record: RunRecord, inst: InstanceRecord) -> None:
    """Refuse, before anything changes, what removal could not keep safely:
    a folder at the worktree path that is not our worktree, and a nested git
    repository inside it (its history cannot be archived in ours)."""
    path = Path(inst["worktree"])
    if not os.path.lexists(path):
        return
    if not is_our_worktree(repo, record["task"], inst):
        raise ParallelError(
            E.WORKTREE_CLEANUP_FAILED,
            f"{path} is not the worktree git-parallel made for instance {inst['id']}; it is left alone",
            hint="move it away if it is yours (or remove it), then run the command again",
        )
    found = [p for p in worktree_changes(path) if p.endswith("/")] + _unkept_gitlinks(repo, record, inst)
    if found:
        raise ParallelError(
            E.WORKTREE_CLEANUP_FAILED,
            f"the worktree of instance {inst['id']} holds nested git repositories: {', '.join(found)}",
            hint="move them out of the worktree (their history is not part of this repository), then run it again",
        )


def _unkept_gitlinks(repo: Repo, record: RunRecord, inst: InstanceRecord) -> list[str]:
    """The nested repositories the branch tip records as gitlinks whose
    commits could not be archived here (those that could now are)."""
    tip = repo.ref_target(f"refs/heads/{inst['branch']}")
    if tip is None:
        return []
    _, lost = nested.archive(repo, record["run_id"], inst["id"], inst["attempt"], Path(inst["worktree"]), tip)
    return [f"{p}/ (committed as a gitlink)" for p in lost]


def remove(repo: Repo, record: RunRecord, inst: InstanceRecord, force: bool = False,
           stage: Stager | None = None) -> dict[str, Any]:
    """Archive the instance's tip (and, with ``force``, its uncommitted work,
    staged by ``stage``: see ``commit_all``), then remove its worktree and
    branch.  Returns what was done."""
    path = Path(inst["worktree"])
    name = admin_name(record["task"], inst["id"])
    branch = inst["branch"]
    tip = repo.ref_target(f"refs/heads/{branch}")
    done: dict[str, Any] = {"id": inst["id"], "archived": None, "dirty_committed": None, "kept": []}
    check_removable(repo, record, inst)
    if path.is_dir() and (path / ".git").exists():
        dirty = worktree_changes(path, scratch_patterns(record["config"]))  # scratch goes with the worktree
        if dirty and not force:
            shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
            raise ParallelError(
                E.WORKTREE_CLEANUP_FAILED,
                f"the worktree of instance {inst['id']} ({path}) has uncommitted changes: {shown}",
                hint="commit or discard them, or pass --force to keep them on the archive ref and remove it",
            )
        if dirty:
            message = (f"git-parallel: uncommitted work of {record['task']}/{inst['id']} "
                       f"attempt {inst['attempt']}, kept at cleanup")
            wt_repo = pygit2.Repository(str(path))
            parent = None if wt_repo.head_is_unborn else str(wt_repo.head.target)
            oid = commit_all(path, message, ref=None, parent=parent, stage=stage)
            if oid:
                tip = oid
                done["dirty_committed"] = oid
    if tip:
        done["archived"] = archive(repo, record["run_id"], inst["id"], inst["attempt"], tip)
    # What git keeps only in the admin folder goes with it: commits reached
    # from a detached HEAD, and the git dirs of submodules.
    done["kept"] = keep_strays(repo, record["run_id"], record["task"], inst)
    done["kept"] += keep_modules(repo, record["run_id"], record["task"], inst)
    if path.exists():
        remove_tree(path)
    admin = repo.common_dir / "worktrees" / name
    if admin.exists():
        remove_tree(admin)
    try:
        repo.pygit.branches.local.delete(branch)
    except KeyError:
        pass
    try:
        path.parent.rmdir()  # the task folder, once empty
    except OSError:
        pass
    return done


def reset(repo: Repo, inst: InstanceRecord, commit: str) -> None:
    """Point the instance's branch at ``commit`` and make its worktree match,
    untracked files removed (used by retry, after archiving)."""
    branch_ref = repo.pygit.references[f"refs/heads/{inst['branch']}"]
    note_write(repo.common_dir)
    branch_ref.set_target(pygit2.Oid(hex=commit), "git-parallel: retry from base")
    path = Path(inst["worktree"])
    wt = pygit2.Repository(str(path))
    # HEAD is in the admin folder the agent wrote, and a hard reset moves the
    # branch HEAD names: pointed at main (or a sibling's branch), the reset
    # to the base moved that one back.  HEAD names the instance's branch first.
    wt.set_head(f"refs/heads/{inst['branch']}")
    _remove_links_in_the_way(wt, path, commit)
    wt.reset(pygit2.Oid(hex=commit), pygit2.enums.ResetMode.HARD)
    for rel, flags in wt.status(untracked_files="all", ignored=True).items():
        if flags & (pygit2.GIT_STATUS_WT_NEW | pygit2.GIT_STATUS_IGNORED):
            target = path / rel
            if target.is_dir() and not target.is_symlink():
                remove_tree(target, ignore_errors=True)
            else:
                try:
                    target.unlink()
                except FileNotFoundError:
                    pass


def _remove_links_in_the_way(wt: pygit2.Repository, path: Path, commit: str) -> None:
    """Remove every link of the worktree at ``path`` that stands where
    ``commit`` has a folder: libgit2's hard reset wrote through one (an agent
    had turned ``tests`` into a link to a folder of the user's, and retry
    wrote the base's tests there).  What the link held is the attempt's and
    was archived before."""
    todo: list[tuple[str, pygit2.Tree]] = [("", wt[commit].peel(pygit2.Tree))]
    while todo:
        prefix, tree = todo.pop()
        for entry in tree:
            if entry.type_str != "tree":
                continue
            here = path / f"{prefix}{entry.name}"
            if here.is_symlink():
                here.unlink()
            elif here.is_dir():
                todo.append((f"{prefix}{entry.name}/", wt[entry.id].peel(pygit2.Tree)))


# -- the base branch's worktree ------------------------------------------------------
def base_worktree(repo: Repo, base_ref: str) -> Path | None:
    """The worktree that has ``base_ref`` checked out, if any."""
    candidates: list[Path] = []
    if repo.main_workdir is not None:
        candidates.append(repo.main_workdir)
    for name in repo.main.list_worktrees():
        try:
            candidates.append(Path(repo.main.lookup_worktree(name).path))
        except (pygit2.GitError, KeyError):
            continue
    for path in candidates:
        head = _head_ref(path)
        if head == base_ref:
            return path
    return None


def _head_ref(path: Path) -> str | None:
    gitfile = path / ".git"
    if gitfile.is_dir():
        head = gitfile / "HEAD"
    elif gitfile.is_file():
        gitdir = read_gitdir_file(gitfile)
        if gitdir is None:
            return None
        head = gitdir / "HEAD"
    else:
        return None
    try:
        content = head.read_text().strip()
    except OSError:
        return None
    return content[len("ref: "):] if content.startswith("ref: ") else None
