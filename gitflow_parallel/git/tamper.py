"""What no attempt may change, snapshotted before and after every agent
attempt and every gate, restored where it changed, and named.

An agent runs as the same user as git-parallel, and a linked worktree's
git writes into the shared common dir; where no fence holds (see
``proc/landlock``) nothing stops it from rewriting what judges it.  So,
fence or not, the runner and the gate runner take a ``Snapshot`` before the
command starts and compare after it ended (its whole process group gone):

- **files**: ``config``, every ``config.worktree`` (the common dir's and
  each ``worktrees/<id>/``'s), everything under ``hooks/`` and ``info/``,
  and the small files of the scratch pool's admin folders
  (``worktrees/scratch+<k>/``: ``HEAD``, ``gitdir``, ``commondir``, a
  ``config.worktree``, … - not their ``index`` or logs) - kept as bytes, so
  a change is written back and an added file removed;
- **refs**: every ref (loose files and ``packed-refs`` merged as git reads
  them) except the instance branches ``refs/heads/parallel/…`` - the
  attempt's own branch, the branches under its own prefix
  ``…/<id>+<anything>`` (``+`` is in no task or instance id), and the other
  instances' branches, which their own agents move (see below; they are
  not even read, which keeps the snapshot cheap).  A changed ref is set
  back to what it was, an added one deleted, a deleted one made again.

Attribution.  Others may write the same things while an agent runs: another
``git parallel`` command (a check's evidence refs and notes, a merge's base
move, a spawn's branches), the agents of sibling instances (their own
branches), the user (commits on their branches).  What is laid at the
attempt's door is therefore only what none of them explains:

- every git-parallel write of a ref, of the config or of the scratch pool
  first appends one byte to ``<common>/parallel/writes`` (``note_write``);
  a changed size means one happened meanwhile, and then no ref change
  and no change to the config files or the scratch pool is attributed
  (a merge moving ``main`` while a gate of another merge runs is ours);
- every other instance branch is left to its own agent, which may be
  committing on it right now (the check of that instance refuses a worktree
  whose HEAD no longer matches its branch);
- any other ref (the user's branches, ``main``) counts only when its new
  value brings in the attempt's own commits (its merge base with the
  attempt's tip is not already in the old value): that is an agent landing
  its work, while a user's commit on ``main`` brings in none of it.

Where the fence holds none of this can be written at all, and the
snapshot is the second line.  Its cost is one ``os.walk`` of ``refs/``,
``hooks/`` and ``info/`` and a read of each small file; ``scripts/bench_run.py``
measures it.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pygit2

from gitflow_parallel.files import remove_tree
from gitflow_parallel.git.repo import WRITES_FILE, note_write, read_gitdir_file

# Admin files of a scratch checkout that change on every use and prove nothing.
_SCRATCH_SKIP = {"index", "index.lock", "ORIG_HEAD", "FETCH_HEAD", "logs"}
INSTANCE_BRANCHES = "refs/heads/parallel/"
_PARALLEL_REFS = ("refs/parallel/", "refs/notes/", INSTANCE_BRANCHES)
# How long a change is given for the write of ours that made it to say so.
SETTLE = 0.1
MAX_FILE = 1 << 20  # a hook or config bigger than this is compared by size only


@dataclass
class Snapshot:
    files: dict[str, tuple[int, bytes]]  # path relative to the common dir -> (mode, bytes)
    refs: dict[str, str]  # ref name -> oid, or "ref: <target>" for a symbolic one
    writes: int  # size of parallel/writes when taken
    own: tuple[str, str] = ("", "")  # the attempt's branch ref and its prefix ("" for a gate)
    siblings: dict[str, str] = field(default_factory=dict)  # the other branches of its task (``task_refs``)


@dataclass
class Change:
    path: str  # "refs/heads/main" or a file path relative to the common dir
    kind: str  # "changed", "added" or "removed"
    restored: bool = False
    error: str | None = None


@dataclass
class Finding:
    changes: list[Change] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [c.path for c in self.changes]

    def describe(self) -> str:
        parts = [f"{c.path} ({c.kind}{', restored' if c.restored else ', NOT restored: ' + str(c.error)})"
                 for c in self.changes]
        return ", ".join(parts)


def own_refs(branch: str | None) -> tuple[str, str]:
    """The ref and the prefix an attempt on ``branch`` may move."""
    if not branch:
        return "", ""
    ref = f"refs/heads/{branch}"
    return ref, ref + "+"


def _writes(common: Path) -> int:
    try:
        return os.stat(common / "parallel" / WRITES_FILE).st_size
    except OSError:
        return 0


def _read(path: str) -> tuple[int, bytes] | None:
    # os-level calls, not pathlib: the snapshot runs twice per attempt and
    # pathlib's parsing was most of its time (scripts/bench_run.py).
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return st.st_mode, (os.readlink(path).encode("utf-8", "surrogateescape") if stat.S_ISLNK(st.st_mode)
                                else b"")
        if st.st_size > MAX_FILE:
            return st.st_mode, b"size:%d" % st.st_size
        with open(path, "rb") as handle:
            return st.st_mode, handle.read()
    except OSError:
        return None


def _tree_files(common: str, folder: str, skip: set[str] | None = None) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    cut = len(common) + 1
    for dirpath, dirnames, filenames in os.walk(os.path.join(common, folder)):
        if skip:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in filenames:
            if skip and name in skip:
                continue
            full = os.path.join(dirpath, name)
            data = _read(full)
            if data is not None:
                out[full[cut:].replace(os.sep, "/")] = data
    return out


def _files(common: str) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    for name in ("config", "config.worktree"):
        data = _read(os.path.join(common, name))
        if data is not None:
            out[name] = data
    out.update(_tree_files(common, "hooks"))
    out.update(_tree_files(common, "info"))
    try:
        entries = list(os.scandir(os.path.join(common, "worktrees")))
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.startswith("scratch+"):
            out.update(_tree_files(common, f"worktrees/{entry.name}", _SCRATCH_SKIP))
        else:
            data = _read(os.path.join(entry.path, "config.worktree"))
            if data is not None:
                out[f"worktrees/{entry.name}/config.worktree"] = data
    return out


def _packed(common: str | Path) -> dict[str, str]:
    """The refs of ``packed-refs``: name -> oid."""
    try:
        with open(os.path.join(common, "packed-refs"), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line and line[0] not in "#^":
            oid, _, name = line.partition(" ")
            out[name.strip()] = oid
    return out


def _refs(common: str, packed: dict[str, str]) -> dict[str, str]:
    """Every ref but the instance branches, which every caller leaves to
    their agents (``others``) and which are most of the refs there are."""
    refs = {name: oid for name, oid in packed.items() if not name.startswith(INSTANCE_BRANCHES)}
    cut = len(common) + 1
    skipped = os.path.join(common, INSTANCE_BRANCHES.rstrip("/"))
    for dirpath, dirnames, filenames in os.walk(os.path.join(common, "refs")):
        if dirpath == os.path.dirname(skipped) and os.path.basename(skipped) in dirnames:
            dirnames.remove(os.path.basename(skipped))
        for name in filenames:
            if name.endswith(".lock"):
                continue
            full = os.path.join(dirpath, name)
            try:
                with open(full, encoding="utf-8", errors="replace") as handle:
                    value = handle.read().strip()
            except OSError:
                continue
            refs[full[cut:].replace(os.sep, "/")] = value
    return refs


def task_refs(common: Path, own: tuple[str, str], packed: dict[str, str] | None = None) -> dict[str, str]:
    """The branches beside the attempt's own in its task's folder
    (``refs/heads/parallel/<task>/``), but its own and those under its
    prefix: the fence lets the agent write that folder (a branch of its own
    is a new file there), so the runner judges what moved in it (``child``)."""
    if not own[0]:
        return {}
    folder = own[0].rsplit("/", 1)[0] + "/"
    out = {name: oid for name, oid in (_packed(common) if packed is None else packed).items()
           if name.startswith(folder) and "/" not in name[len(folder):]}
    try:
        names = os.listdir(os.path.join(common, folder))
    except OSError:
        names = []
    for name in names:
        full = os.path.join(common, folder, name)
        if name.endswith(".lock") or not os.path.isfile(full):
            continue
        try:
            with open(full, encoding="utf-8", errors="replace") as handle:
                out[folder + name] = handle.read().strip()
        except OSError:
            continue
    return {k: v for k, v in out.items() if not _is_own(k, own)}


def take(common: Path, branch: str | None = None) -> Snapshot:
    """What must not change, now (``branch``: the attempt's own branch)."""
    own = own_refs(branch)
    # The count of our writes first: a write of ours that lands while the
    # refs and files are read then shows as one (read after, it would hide
    # the change it made before them).
    writes = _writes(common)
    packed = _packed(common)
    refs = {k: v for k, v in _refs(str(common), packed).items() if not _is_own(k, own)}
    return Snapshot(files=_files(str(common)), refs=refs, writes=writes, own=own,
                    siblings=task_refs(common, own, packed))


def _is_own(name: str, own: tuple[str, str]) -> bool:
    return bool(own[0]) and (name == own[0] or name.startswith(own[1]))


def compare(repo: pygit2.Repository, before: Snapshot, others: Iterable[str] = (),
            tip: str | None = None) -> list[Change]:
    """What changed since ``before`` and is the attempt's doing (see the
    module doc).  ``others``: the refs other agents may be moving; ``tip``:
    the attempt's commit (default: its branch's tip now)."""
    common = Path(repo.path).resolve()
    after = take(common)
    changes = _changes(repo, before, after, others, tip, after.writes != before.writes)
    if changes and after.writes == before.writes:
        # A write of ours notes itself just before and just after it: one
        # that landed between our two snapshots may not have said "after"
        # yet.  Give it that moment before laying anything at the attempt's door.
        time.sleep(SETTLE)
        if _writes(common) != before.writes:
            changes = _changes(repo, before, after, others, tip, True)
    return changes


def _changes(repo: pygit2.Repository, before: Snapshot, after: Snapshot, others: Iterable[str],
             tip: str | None, ours_wrote: bool) -> list[Change]:
    changes: list[Change] = []
    if not ours_wrote:
        for path in sorted(set(before.files) | set(after.files)):
            old, new = before.files.get(path), after.files.get(path)
            if old != new:
                changes.append(Change(path, "added" if old is None else "removed" if new is None else "changed"))
    others = list(others)
    moved_by_others = {o for o in others if not o.endswith("/")}
    prefixes = tuple(o for o in others if o.endswith("/")) or ("\0",)
    own_tip = pygit2.Oid(hex=tip) if tip else _own_tip(repo, before.own[0])
    for name in sorted(set(before.refs) | set(after.refs)):
        if _is_own(name, before.own) or name in moved_by_others or name.startswith(prefixes):
            continue
        was, now = before.refs.get(name), after.refs.get(name)
        if was == now:
            continue
        if ours_wrote:
            continue  # git-parallel moved refs meanwhile (a merge lands the base): not the attempt's doing
        if not name.startswith(_PARALLEL_REFS) and not _brings_in(repo, was, now, own_tip):
            continue
        changes.append(Change(name, "added" if was is None else "removed" if now is None else "changed"))
    return changes


def _own_tip(repo: pygit2.Repository, ref: str) -> pygit2.Oid | None:
    if not ref:
        return None
    try:
        target = repo.references[ref].resolve().target
    except (KeyError, pygit2.GitError):
        return None
    return target if isinstance(target, pygit2.Oid) else None


def _brings_in(repo: pygit2.Repository, old: str | None, new: str | None, own_tip: pygit2.Oid | None) -> bool:
    """Does ``new`` hold commits of the attempt (its tip's history) that
    ``old`` did not?  A deleted ref, or one made or left symbolic, counts
    whatever it held; so does any change when there is no tip to ask."""
    if new is None or new.startswith("ref:") or (old or "").startswith("ref:") or own_tip is None:
        return True
    try:
        base = repo.merge_base(pygit2.Oid(hex=new), own_tip)
        if base is None:
            return False
        if old is None:
            return True
        old_oid = pygit2.Oid(hex=old)
        return base != old_oid and not repo.descendant_of(old_oid, base)
    except (ValueError, pygit2.GitError, KeyError):
        return True


def restore(repo: pygit2.Repository, before: Snapshot, changes: list[Change]) -> None:
    """Put every changed path back as ``before`` has it (``restored`` set,
    or ``error`` saying why not)."""
    common = Path(repo.path).resolve()
    note_write(common)
    for change in changes:
        try:
            if change.path.startswith("refs/"):
                _restore_ref(repo, change.path, before.refs.get(change.path))
            else:
                _restore_file(common / change.path, before.files.get(change.path))
            change.restored = True
        except (OSError, pygit2.GitError, ValueError, KeyError) as exc:
            change.error = f"{type(exc).__name__}: {exc}"


def _restore_ref(repo: pygit2.Repository, name: str, value: str | None) -> None:
    if value is None:
        ref = repo.references.get(name)
        if ref is not None:
            ref.delete()
        return
    if value.startswith("ref:"):
        repo.references.create(name, value[4:].strip(), force=True)
    else:
        repo.references.create(name, pygit2.Oid(hex=value), force=True)


def _restore_file(path: Path, kept: tuple[int, bytes] | None) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    elif kept is None or path.is_symlink() or path.exists():
        path.unlink(missing_ok=True)
    if kept is None:
        return
    mode, data = kept
    if stat.S_ISLNK(mode):
        os.symlink(data.decode("utf-8", "surrogateescape"), path)
        return
    if not stat.S_ISREG(mode) or data.startswith(b"size:"):
        raise ValueError("not a small regular file; cannot be written back")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".git-parallel-restore")
    tmp.write_bytes(data)
    os.chmod(tmp, stat.S_IMODE(mode))
    os.replace(tmp, path)


def common_of(checkout: Path) -> Path | None:
    """The common dir of the linked worktree at ``checkout``."""
    admin = read_gitdir_file(checkout / ".git")
    try:
        return (admin / (admin / "commondir").read_text(encoding="utf-8").strip()).resolve() if admin else None
    except OSError:
        return None


@dataclass
class Before:
    """What ``before_command`` saw: the checkout's common dir and the commit
    judged (its HEAD), and the snapshot of what no command may change."""

    common: Path
    tip: str | None
    snapshot: Snapshot


def before_command(checkout: Path) -> Before | None:
    """The snapshot before a gate, score or judge command runs in the
    scratch checkout ``checkout`` (None if it is no linked worktree)."""
    common = common_of(Path(checkout))
    if common is None:
        return None
    try:
        tip: str | None = str(pygit2.Repository(str(checkout)).head.target)
    except (pygit2.GitError, KeyError):
        tip = None
    return Before(common, tip, take(common))


def after_command(before: Before) -> Finding:
    """Compare and restore after that command: any instance branch may be
    moved by its agent meanwhile, and the commit judged is HEAD.  The common
    dir and HEAD are those read before it ran, never through the checkout's
    ``.git`` file again: a command that wrote the checkout (Landlock alone)
    repointed it, at a git dir that is not there (libgit2 raised, and check
    ended in an internal error) or one of its choosing, which this would
    then have "restored"."""
    return check(pygit2.Repository(str(before.common)), before.snapshot, [INSTANCE_BRANCHES], before.tip)


def check(repo: pygit2.Repository, before: Snapshot, others: Iterable[str] = (), tip: str | None = None) -> Finding:
    """Compare with ``before`` and restore what the attempt changed."""
    changes = compare(repo, before, others, tip)
    if changes:
        restore(repo, before, changes)
    return Finding(changes)
