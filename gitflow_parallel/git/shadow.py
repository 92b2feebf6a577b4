"""An attempt's own view of the common git dir: the stash and the
``packed-refs`` lock made private, everything else the shared one.

Why.  Inside the Landlock fence (``proc/sandbox``) an agent may write its
worktree, its admin folder, ``objects/`` and its own branches' folder, but
not the common dir's top folders: a rule there would also open
``refs/heads/main``, ``config`` and ``hooks/`` (Landlock grants whole
hierarchies; there is no "deny inside allow").  Two everyday verbs write
exactly there: ``git stash`` (``refs/stash`` and ``logs/refs/stash``, taken
through ``refs/stash.lock``) and ``git branch -D`` (git 2.39 takes
``packed-refs.lock`` in the common dir on every ref deletion).  And the
stash should not be shared in the first place: it lives in the common dir,
so concurrent agents' pushes and pops would interleave (one pops what
another pushed), and any of them could pop or drop the user's own stash.

How, with what git offers.  A linked worktree finds its common dir through
the ``commondir`` file of its admin folder (the ``GIT_COMMON_DIR``
variable would do the same, but for every repository the agent touches -
a ``pip install git+…`` clone among them).  For the attempt, that file
points at ``<admin>/parallel-common/``, a folder of symlinks to every entry
of the real common dir, except that ``refs/``, ``logs/`` and ``logs/refs/``
are real folders (symlinks to every entry but ``stash``), and
``packed-refs`` and ``config`` are copies: git makes a file's lock next to
the file a symlink points at (``packed-refs.lock`` would be in the shared
dir again, and so would ``config.lock``, which ``git branch -D`` takes to
drop the branch's section), and a hard link would let the agent write the
shared file in place.  So:

- ``git stash push``/``pop``/``list`` work on a stash of the attempt's own,
  which starts empty and goes with the attempt; the user's stash is neither
  seen nor touched;
- ``git branch -D`` of a branch under its own prefix works (the ref file is
  deleted through the ``refs/heads`` symlink, inside the fence's grant;
  the shared ``packed-refs`` is never written: the copy is, when the ref
  was packed, which leaves the branch in the shared one - harmless, it is
  under its own prefix);
- ``git config`` writes land on the attempt's copy: they hold for its own
  git and go with it (nothing it configures there reaches git-parallel's
  git, the gates or the user);
- every other write goes through a symlink to the real file, where the
  fence decides as before (a commit on its branch: allowed; ``main``,
  ``hooks/``: EACCES).

What it costs the agent: refs packed or config changed by someone else
while it runs (a ``git gc`` of the user's) are not seen until its next
attempt, since its copies are those of its start.

After the attempt (``undo``) the ``commondir`` file says again what it said.
The folder stays (git-parallel's own git never reads it) and is checked and
brought up to date before the next attempt: its stash emptied, its copies
made afresh, every link made to say what it must; removing and rebuilding
it for every attempt cost more than the rest of the fence on a busy disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gitflow_parallel.git import lfs

if TYPE_CHECKING:
    import pygit2

NAME = "parallel-common"
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# Made private: these hold the shared stash.
_PRIVATE = {"refs": {"stash"}, "logs/refs": {"stash"}}
# Linked even where the common dir has none yet, so that a ref folder made
# meanwhile (the first note, the first evidence ref) is seen.
_COPIED = ("packed-refs", "config")
_ALWAYS = {"refs": {"heads", "tags", "remotes", "notes", "parallel"}}
# The largest index of an attempt's worktree git-parallel's own git reads
# (a worktree of 100,000 files has one of about 10 MB).
MAX_INDEX_BYTES = 512 << 20


@dataclass
class View:
    """A view in use: the ``commondir`` file and what it said before."""

    commondir: Path
    said: str
    common: Path
    folder: Path
    worktree: Path | None = None  # whose .git file, and its admin's gitdir file, are put back at undo

    @property
    def objects(self) -> Path:
        return self.folder / "objects"


def make(common: Path, admin: Path, branch: str | None = None, worktree: Path | None = None) -> View | None:
    """Point the worktree of ``admin`` at its own view of ``common``, for
    ``undo``; None if the worktree has no ``commondir`` file (nothing is
    changed then).  With ``branch`` (``parallel/<task>/<id>``), the refs of
    its task's folder are the attempt's own (``_private_refs``)."""
    commondir = admin / "commondir"
    try:
        said = commondir.read_text(encoding="utf-8")
    except OSError:
        return None
    if said.strip() in (NAME, str(admin / NAME)):  # left by an attempt whose runner was killed
        said = os.path.relpath(common, admin) + "\n"
    view = admin / NAME
    if view.is_symlink() or not view.is_dir():
        _remove(view)
        view.mkdir()
    # The view stays between attempts (made once, it costs a few reads to
    # check): every link is checked against what it must say, anything
    # else the last attempt left is removed, the copies are made afresh,
    # and its stash starts empty.
    _sync(common, view, "", skip={"refs", "logs", "worktrees", "objects", "lfs", *_COPIED}, extra={"worktrees"})
    _private_objects(common, view / "objects")
    _private_lfs(common, view / "lfs")
    for name in _COPIED:  # copies, not links (see the module doc)
        _remove(view / name)
        try:
            shutil.copyfile(common / name, view / name)
        except FileNotFoundError:
            pass
    own = _own_folder(branch)
    if own is not None:
        import_refs(common, admin)  # what an attempt whose runner was killed left
    own_logs = f"logs/{own}" if own is not None else None
    for folder in ("refs", "logs", "logs/refs", *_along(own), *_along(own_logs, 3)):
        if (view / folder).is_symlink() or not (view / folder).is_dir():
            _remove(view / folder)
            (view / folder).mkdir()
        skip = _PRIVATE.get(folder, set()) | ({"refs"} if folder == "logs" else set())
        private: set[str] = set()
        if own is not None and folder in ("refs", *_along(own)):
            private = {_next_part(folder, own)}  # a real folder of the view's, made below
        if own_logs is not None and folder in ("logs/refs", *_along(own_logs, 3)):
            private = {_next_part(folder, own_logs)}
        _sync(common, view, folder, skip | private, keep=private)
    if own is not None and own_logs is not None and branch is not None:  # (own: a branch given)
        _private_refs(common, admin, own, branch.rsplit("/", 1)[1])
        _private_logs(view / own_logs)
    # Absolute: libgit2 (git-parallel's own reads, recover after a killed
    # runner) does not find a common dir named by a bare relative name.
    _write(commondir, f"{view}\n")
    return View(commondir, said, common, view, worktree)


def _own_folder(branch: str | None) -> str | None:
    """``refs/heads/parallel/<task>`` for an instance branch, else None."""
    if not branch or branch.count("/") != 2 or not branch.startswith("parallel/"):
        return None
    return "refs/heads/" + branch.rsplit("/", 1)[0]


def _along(own: str | None, start: int = 2) -> list[str]:
    """The folders between ``refs`` and ``own`` (``refs/heads``, ``refs/heads/parallel``;
    from ``logs/refs`` with ``start`` 3)."""
    if own is None:
        return []
    parts = own.split("/")
    return ["/".join(parts[:k]) for k in range(start, len(parts))]


def _private_logs(folder: Path) -> None:
    """The task's reflog folder of the view is a real, empty folder of the
    view's: the attempt's git logs its refs there.  The shared one is never
    the attempt's to write: a link it planted there would have the runner's
    own ref updates append to whatever file it names."""
    if folder.is_symlink() or not folder.is_dir():
        _remove(folder)
        folder.mkdir()
    for name in os.listdir(folder):
        _remove(folder / name)


def _next_part(folder: str, own: str) -> str:
    return own[len(folder) + 1:].split("/")[0]


def _start_file(common: Path, admin: Path) -> Path:
    """Where the runner keeps the start values of an attempt's own refs: in
    git-parallel's own state, which no sandboxed command sees or writes
    (never in the view, which the attempt writes)."""
    return common / "parallel" / "views" / f"{admin.name}.json"


def _is_own(name: str, inst: str) -> bool:
    return name == inst or name.startswith(inst + "+")


def _private_refs(common: Path, admin: Path, own: str, inst: str) -> None:
    """The task's ref folder of the view is a real folder holding copies of
    the instance's own loose refs (``<id>``, ``<id>+<name>``) and nothing
    else: the attempt moves, makes and deletes refs there, never in the
    shared store, and cannot see its siblings' loose refs.  Their start
    values are kept (``_start_file``) for ``import_refs``."""
    view = admin / NAME
    folder = view / own
    if folder.is_symlink() or not folder.is_dir():
        _remove(folder)
        folder.mkdir()
    for name in os.listdir(folder):  # what the last attempt left
        _remove(folder / name)
    start: dict[str, str | None] = {}
    for name, oid in _loose(common / own, inst).items():
        _write_new(folder / name, oid + "\n")
        start[name] = oid
    packed = _packed(view / "packed-refs", own, inst)
    for name, oid in packed.items():
        start.setdefault(name, oid)
    record = _start_file(common, admin)
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(record.name + ".tmp")
    tmp.write_text(json.dumps({"own": own, "inst": inst, "refs": start}), encoding="utf-8")
    os.replace(tmp, record)


def _loose(folder: Path, inst: str) -> dict[str, str]:
    """The instance's own loose refs in ``folder``: name -> oid (a file that
    is not one object id is not a ref of its)."""
    out: dict[str, str] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return out
    for entry in entries:
        if not _is_own(entry.name, inst) or entry.name.endswith(".lock") or not entry.is_file(follow_symlinks=False):
            continue
        try:
            with open(entry.path, "rb") as handle:
                text = handle.read(128).decode("ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if _OID.fullmatch(text):
            out[entry.name] = text
    return out


def _read_own(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a file of the view, which the attempt may
    have written: never through a link, never blocking on a FIFO (a FIFO
    ``packed-refs`` hung the runner taking its refs in)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _packed(path: Path, own: str, inst: str) -> dict[str, str]:
    out: dict[str, str] = {}
    data = _read_own(path, 64 << 20)
    if data is None:
        return out
    lines = data.decode("utf-8", "replace").splitlines()
    for line in lines:
        oid, _, name = line.partition(" ")
        if name.startswith(own + "/") and _OID.fullmatch(oid) and _is_own(name[len(own) + 1:], inst):
            out[name[len(own) + 1:]] = oid
    return out


# The most refs of its own (``<id>``, ``<id>+<name>``) an attempt's end
# moves, makes or deletes.
MAX_OWN_REFS = 100


def import_refs(common: Path, admin: Path) -> list[str]:
    """Move the shared refs to what the attempt made of its own (created,
    moved or deleted), each by compare-and-swap against its start value,
    and only to a commit the shared store holds.  Which refs are its own,
    and where they started, come from the runner's record of them, never
    from the view.  Returns what was refused."""
    import pygit2

    record = _start_file(common, admin)
    view = admin / NAME
    try:
        said = json.loads(record.read_text(encoding="utf-8"))
        own, inst, start = str(said["own"]), str(said["inst"]), dict(said["refs"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if not own.startswith("refs/heads/parallel/") or "/" in inst or not inst:
        record.unlink(missing_ok=True)
        return []
    now = {**_packed(view / "packed-refs", own, inst), **_loose(view / own, inst)}
    if now == start:
        record.unlink(missing_ok=True)
        return []
    repo = pygit2.Repository(str(common))
    refused = []
    # Its own branch first, then the others by name, up to the cap: each is
    # a process of git's, and one file of the view names a million.
    changed = sorted((n for n in set(start) | set(now) if start.get(n) != now.get(n)), key=lambda n: (n != inst, n))
    if len(changed) > MAX_OWN_REFS:
        refused.append(f"{len(changed) - MAX_OWN_REFS:,} more refs of its own ({own}/{inst}+…): "
                       f"over the {MAX_OWN_REFS:,} an attempt may make (not taken in)")
        changed = changed[:MAX_OWN_REFS]
    for name in changed:
        old, new = start.get(name), now.get(name)
        ref = f"{own}/{name}"
        if new is not None:
            try:
                ok = repo.odb.read(new)[0] == pygit2.enums.ObjectType.COMMIT
            except (KeyError, ValueError, pygit2.GitError):
                ok = False
            if not ok:
                refused.append(f"{ref} -> {new[:12]} (no such commit)")
                continue
            if _reaches_unread(common, view / "objects", repo, new, start, inst):
                refused.append(f"{ref} -> {new[:12]} (it reaches an object its own store lacks and its git could "
                               "not read: another attempt's, named as a parent by hand)")
                continue
        if not _swap(common, ref, old, new):
            refused.append(f"{ref} (it moved meanwhile)")
    record.unlink(missing_ok=True)
    return refused


def _reaches_unread(common: Path, objects: Path, repo: pygit2.Repository, new: str, started: dict[str, str],
                    inst: str) -> bool:
    """Does ``new`` reach, beyond the refs a judged view shows and where
    the attempt's refs started, an object that neither its own store
    (``objects``) nor its git's view (``judged_view.for_agent``: the
    history and what its branch's start reached) held?  Every object the
    agent made or fetched is in its own store; any other is one it named
    by hand (``git hash-object --literally`` checks no parent, ``git mktree
    --missing`` no entry), a sibling attempt's, which the judged view would
    then pack with it.  True when it cannot tell."""
    import pygit2

    from gitflow_parallel import environ as proc_env
    from gitflow_parallel.git import judged_view
    from gitflow_parallel.git.repo import HARDENED

    stop = {*judged_view.shown_tips(repo), *started.values()}
    revs = [new, *(f"^{oid}" for oid in sorted(stop) if _OID.fullmatch(oid) and pygit2.Oid(hex=oid) in repo.odb)]
    proc = subprocess.run(["git", *HARDENED, f"--git-dir={common}", "rev-list", "--objects", "--stdin"],
                          input="".join(f"{r}\n" for r in revs).encode("ascii"), capture_output=True,
                          env=proc_env.for_host_git())
    if proc.returncode != 0:
        return True
    listed = [line.split(" ", 1)[0] for line in proc.stdout.decode("ascii", errors="replace").splitlines() if line]
    if not listed:
        return False
    held = pygit2.Odb()
    if objects.is_dir() and not objects.is_symlink():
        held.add_backend(pygit2.OdbBackendLoose(str(objects), 0, False), 2)
        if (objects / "pack").is_dir() and not (objects / "pack").is_symlink() and _packs_problem(objects / "pack") is None:
            held.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
    try:
        missing = [oid for oid in listed if pygit2.Oid(hex=oid) not in held]
        if not missing:
            return False
        start = started.get(inst)
        tip = start if start and _OID.fullmatch(start) and pygit2.Oid(hex=start) in repo.odb else None
        view = judged_view.make(common, common / "parallel", tip, repo=repo, refs=False)
        if view is None:  # a reftable: no view was laid, the agent read the whole store
            return False
        try:
            seen = pygit2.Odb()
            seen.add_backend(pygit2.OdbBackendPack(str(view.objects)), 1)
            return any(pygit2.Oid(hex=oid) not in seen for oid in missing)
        finally:
            view.remove()
    except (ValueError, pygit2.GitError, OSError, RuntimeError):
        return True


def _swap(common: Path, ref: str, old: str | None, new: str | None) -> bool:
    """``git update-ref`` by compare-and-swap, run hardened (no hook, no fsmonitor)."""
    import subprocess

    zero = "0" * 40
    args = ["-d", ref, old or zero] if new is None else [ref, new, old or zero]
    proc = subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                           f"--git-dir={common}", "update-ref", "-m", "git-parallel: the attempt's own ref", *args],
                          capture_output=True, stdin=subprocess.DEVNULL)
    return proc.returncode == 0


def _private_objects(common: Path, objects: Path) -> None:
    """The attempt's own object store: what its git writes lands here, and
    the shared store, which it may not write, is read through
    ``info/alternates``.  What an attempt whose runner was killed left here
    is taken in first (``import_objects``), then the folder starts empty."""
    real = os.path.realpath(common / "objects") + "\n"
    if objects.is_symlink() or not objects.is_dir():
        _remove(objects)
    else:
        import_objects(common, objects)
        if _empty_store(objects, real):
            return  # as the last attempt left it when it took nothing
        for name in os.listdir(objects):
            _remove(objects / name)
    (objects / "info").mkdir(parents=True)
    (objects / "pack").mkdir()
    _write_new(objects / "info" / "alternates", real)


def _private_lfs(common: Path, store: Path) -> None:
    """The attempt's own Git LFS store (``git/lfs``), empty: what an
    attempt whose runner was killed left there is taken in first."""
    if not store.is_symlink() and store.is_dir():
        lfs.import_objects(common, store)
    _remove(store)
    store.mkdir()


def _empty_store(objects: Path, alternates: str) -> bool:
    """Does ``objects`` hold only its empty ``pack`` folder and an
    ``info/alternates`` naming the shared store (nothing to clear)?"""
    try:
        if sorted(os.listdir(objects)) != ["info", "pack"] or os.listdir(objects / "pack") \
                or os.listdir(objects / "info") != ["alternates"]:
            return False
        entry = objects / "info" / "alternates"
        return _read_own(entry, 1 << 16) == alternates.encode("utf-8") \
            and not (objects / "info").is_symlink() and not (objects / "pack").is_symlink()
    except OSError:
        return False


# The largest object taken in from an attempt's store: each is read whole
# (twice over, to check its name and to write it), and a zlib bomb of zeros
# costs its writer one byte on disk per thousand.
MAX_OBJECT_BYTES = 512 << 20


def import_objects(common: Path, objects: Path) -> list[str]:
    """Copy into the shared store every object of the attempt's own store
    (``objects``) that it lacks, each read with libgit2's hash check on and
    written by its content, so it lands under the name its content gives.
    Returns the ids of the objects refused (their content does not match
    their name, they are over ``MAX_OBJECT_BYTES`` or cannot be read): never
    taken in."""
    import pygit2

    if objects.is_symlink() or not objects.is_dir():
        return []
    pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 1)
    own = pygit2.Odb()
    own.add_backend(pygit2.OdbBackendLoose(str(objects), 0, False), 2)
    refused: list[str] = []
    if (objects / "pack").is_dir() and not (objects / "pack").is_symlink():
        problem = _packs_problem(objects / "pack")
        if problem is None:
            own.add_backend(pygit2.OdbBackendPack(str(objects)), 1)
        else:
            refused.append(problem)  # none of its packs is read
    try:
        made = list(own)
    except (pygit2.GitError, OSError) as exc:
        return [*refused, f"its object store could not be listed: {exc}"]
    if not made:  # the usual case for an attempt that committed nothing: no shared store opened
        return refused
    shared = pygit2.Odb(str(common / "objects"))
    for oid in made:
        if oid in shared:
            continue
        try:
            size = own.read_header(oid)[1]  # inflates the header only
            if size > MAX_OBJECT_BYTES:
                refused.append(f"object {oid}: {size:,} bytes, over the {MAX_OBJECT_BYTES:,} an object may hold")
                continue
            kind, data = own.read(oid)
            if shared.write(kind, data) != oid:
                refused.append(f"object {oid}")
        except (pygit2.GitError, KeyError, ValueError, OSError):
            refused.append(f"object {oid}")
    return refused


# The most objects the packs of an attempt's own store may index (each pack
# index gives 28 bytes or more to one): every id is listed, and held, to be
# taken in.  Its fetches are packs too, of what the shared store lacks.
MAX_PACKED_OBJECTS = 2_000_000


def _packs_problem(folder: Path) -> str | None:
    """Why the packs of an attempt's store are not read, or None: an index
    that is sparse (no disk used: git never writes one) or indexes, with
    the others, over ``MAX_PACKED_OBJECTS`` objects (libgit2 maps an index
    whole, and listing its ids holds them all)."""
    total = 0
    for entry in os.scandir(folder):
        if not entry.name.endswith(".idx"):
            continue
        info = entry.stat(follow_symlinks=False)
        if info.st_size > 1 << 20 and info.st_blocks * 512 < info.st_size // 2:
            return f"{entry.path}: a sparse pack index of {info.st_size:,} bytes (its packs are not taken in)"
        total += info.st_size
    if total > MAX_PACKED_OBJECTS * 28:
        return (f"{folder}: pack indexes of {total:,} bytes, over the {MAX_PACKED_OBJECTS:,} objects an attempt's "
                "packs may hold (its packs are not taken in)")
    return None


def _sync(common: Path, view: Path, folder: str, skip: set[str], extra: set[str] = set(),  # noqa: B006
          keep: set[str] = set()) -> None:  # noqa: B006
    """Make ``view/folder`` hold a symlink to each entry of
    ``common/folder`` (and the ``_ALWAYS`` ones) but ``skip``; remove what
    else is there, but the folders and copies made beside."""
    source, here = common / folder, view / folder
    try:
        names = set(os.listdir(source))
    except OSError:
        names = set()
    wanted = (names | _ALWAYS.get(folder, set()) | extra) - skip
    kept = {"refs", "logs", "objects", "lfs", *_COPIED} if folder == "" else {"refs"} if folder == "logs" else set()
    kept = kept | {k for k in keep if (here / k).is_dir() and not (here / k).is_symlink()}
    for name in os.listdir(here):
        if name not in wanted and name not in kept:
            _remove(here / name)  # the last attempt's stash, or what it left
    for name in sorted(wanted):
        target, link = str(source / name), here / name
        try:
            if os.readlink(link) == target:
                continue
        except OSError:
            pass
        _remove(link)
        os.symlink(target, link)


def undo(made: View | None) -> list[str]:
    """The attempt's objects taken into the shared store, and the
    ``commondir`` file saying again what it said (the view stays for the
    next attempt, which checks it: ``make``).  Returns the objects refused
    (``import_objects``)."""
    if made is None:
        return []
    refused = scrub(made.common, made.folder.parent)
    refused += import_objects(made.common, made.objects)
    refused += lfs.import_objects(made.common, made.folder / "lfs")
    refused += import_refs(made.common, made.folder.parent)
    _write(made.commondir, made.said)
    if made.worktree is not None:
        refused += _put_back_pointers(made.folder.parent, made.worktree)
    return refused


def left_by_killed_runner(admin: Path) -> bool:
    """Does the worktree of ``admin`` still look through a view (its runner
    was killed before it could undo it), or through any git dir but the
    shared one?  The attempt may write its admin folder, ``commondir``
    included: a git dir of its own there (its config holding a clean filter)
    would be what recover's leftovers commit ran, unfenced."""
    try:
        fd = os.open(admin / "commondir", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            said = os.read(fd, 4096).decode("utf-8").strip() if stat.S_ISREG(os.fstat(fd).st_mode) else NAME
        finally:
            os.close(fd)
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError):
        return True  # a link, a FIFO: not what git-parallel wrote
    if said in (NAME, str(admin / NAME)):
        return True
    return os.path.realpath(os.path.join(admin, said)) != os.path.realpath(admin.parent.parent)


def restore(common: Path, admin: Path, worktree: Path) -> list[str]:
    """What ``undo`` would have done for an attempt whose runner was killed:
    its objects and own refs taken in (from the runner's record of where its
    refs started), the ``commondir`` file naming the shared dir again, the
    pointers put back.  Returns what was refused."""
    refused = scrub(common, admin)
    refused += import_objects(common, admin / NAME / "objects")
    refused += lfs.import_objects(common, admin / NAME / "lfs")
    refused += import_refs(common, admin)
    _write(admin / "commondir", os.path.relpath(common, admin) + "\n")
    return refused + _put_back_pointers(admin, worktree)


def scrub(common: Path, admin: Path) -> list[str]:
    """Remove what the attempt left in its admin folder (and its view's
    object store) that is neither a regular file nor a folder: git-parallel's
    own reads and git there (``HEAD``, ``logs/HEAD``, the leftovers commit,
    the objects it takes in) would block forever on a FIFO, read a link to
    ``/dev/zero`` without end, or append through a link to a file of the
    user's.  A ``HEAD`` removed so is put back naming the instance's branch.
    Returns what was removed (the attempt fails)."""
    from gitflow_parallel.files import tree_entries

    removed: list[str] = []
    for top, skip in ((admin, NAME), (admin / NAME / "objects", None)):
        for entry, rel in tree_entries(top, prune=lambda rel, skip=skip: rel == skip):  # type: ignore[misc]
            if rel == skip or entry.is_dir(follow_symlinks=False):
                continue
            if not entry.is_file(follow_symlinks=False):
                _remove(Path(entry.path))
                removed.append(f"{entry.path}: not a regular file (removed)")
    removed += _drop_oversized(admin)
    head = admin / "HEAD"
    if not os.path.lexists(head):
        try:
            said = json.loads(_start_file(common, admin).read_text(encoding="utf-8"))
            branch = f"{said['own']}/{said['inst']}"
        except (OSError, ValueError, KeyError, TypeError):
            return removed
        _write_new(head, f"ref: {branch}\n")
    return removed


# The largest file but the index git-parallel's own reads (and git) find at
# the top of an admin folder (``HEAD``, ``ORIG_HEAD``, ``gitdir``, ``MERGE_MSG``,
# …): git and libgit2 read each whole.
MAX_ADMIN_FILE_BYTES = 1 << 20


def _drop_oversized(admin: Path) -> list[str]:
    """Remove the files of the admin folder git-parallel or git would read
    whole and that git could not have written: a top-level file over
    ``MAX_ADMIN_FILE_BYTES`` (the index over ``MAX_INDEX_BYTES``), and a
    sparse file (no disk used: ``truncate -s 8G HEAD`` after its first
    line had every later verb hold 8 GB) anywhere but in the view and in
    the git dirs of submodules.  Returns what was removed."""
    from gitflow_parallel.files import tree_entries

    removed = []
    for entry, rel in tree_entries(admin, prune=lambda rel: rel in (NAME, "modules")):
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        cap = MAX_INDEX_BYTES if rel == "index" else MAX_ADMIN_FILE_BYTES if "/" not in rel else None
        sparse = info.st_size > 1 << 20 and info.st_blocks * 512 < info.st_size // 2
        if sparse or (cap is not None and info.st_size > cap):
            _remove(Path(entry.path))
            removed.append(f"{entry.path}: {info.st_size:,} bytes, {info.st_blocks * 512:,} of them on disk (removed)")
    return removed


def _pointer(path: Path) -> str | None:
    """The text of a pointer file, or None if it is a link or unreadable."""
    data = _read_own(path, 1 << 16)
    try:
        return None if data is None else data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _names(text: str | None, prefix: str, path: Path, relative_to: Path) -> bool:
    """Does a pointer file's ``text`` (``prefix`` and a path, relative ones
    taken from ``relative_to``, as git does) name ``path``?"""
    if text is None or not text.startswith(prefix):
        return False
    said = Path(text[len(prefix):].strip())
    if not said.is_absolute():
        said = relative_to / said
    return os.path.realpath(said) == os.path.realpath(path)


def _put_back_pointers(admin: Path, worktree: Path) -> list[str]:
    """The two files that tie the worktree to its admin folder, as git wrote
    them: the worktree's ``.git`` file and the admin's ``gitdir``.  The
    attempt could write both; git-parallel's own git after it (the
    leftovers commit) must find this repository through them, not one the
    attempt made.  Returns what had been changed (the attempt fails)."""
    changed = []
    gitfile = worktree / ".git"
    if os.path.lexists(gitfile) and not gitfile.is_symlink() and gitfile.is_dir():
        changed.append(f"{gitfile} was replaced by a folder (left as it is; nothing is committed from it)")
    else:
        if not _names(_pointer(gitfile), "gitdir:", admin, worktree):
            changed.append(f"{gitfile} was rewritten (put back)")
            if os.path.lexists(gitfile):
                gitfile.unlink()
            _write_new(gitfile, f"gitdir: {admin}\n")
    pointer = admin / "gitdir"
    if not _names(_pointer(pointer), "", gitfile, admin):
        changed.append(f"{pointer} was rewritten (put back)")
        _write(pointer, f"{gitfile}\n")
    return changed


# The admin folder is the agent's to write: whatever it left there (a
# symlink where a folder or a file is expected) is removed, never followed.
def _remove(path: Path) -> None:
    from gitflow_parallel.files import remove_tree

    if path.is_dir() and not path.is_symlink():
        remove_tree(path, ignore_errors=True)
    elif os.path.lexists(path):  # a file, a link, a FIFO, a socket
        path.unlink()


def _write_new(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(NAME + ".commondir")
    _remove(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
