"""The git a judged command (and an agent) sees: the repository's history
without the attempts', and the commit it judges (the agent's own tip).

Why.  A gate, setup, probe, score or distinguish run, and the merge's
re-proof, run the attempt's code, and its checkout's git needs the
repository's git dir (``git status``, ``git describe`` for a version, the
tests' own git calls).  That dir holds every attempt's commits once its run
has ended: by a branch name (``git show parallel/t/2:app.py``), by a scan of
the store (``git cat-file --batch-all-objects``) or through an attempt's own
store (``git/shadow``), the code judged could find a sibling's right code
and run it instead of its own, and pass.

How.  Under the namespace layer (``proc/namespace``) the command's mount
namespace lays this view over three entries of the common dir:

- ``objects/``: two packs and nothing else.  One holds what the branches,
  tags and remote-tracking refs reach, git-parallel's left out
  (``refs/heads/parallel/`` and remote-tracking copies of attempt
  branches; no other ref is shown: ``SHOWN``): the history as the user made it.  It is built
  once for a set of ref values and kept (``CACHE_KEPT`` of them).  The other
  holds what the judged commit reaches beyond that, built for each place;
- ``refs/`` and ``packed-refs``: those same refs, and no other;
- ``worktrees/`` hidden but the checkout's own admin folder (where the
  attempts' own stores and worktrees' indexes are), and ``lfs/`` (every
  attempt's Git LFS objects; the judge wrote the checkout's files from
  it): ``GatePlan.fence``.

Both packs are written by git's own ``pack-objects`` from the shared store,
so the view holds only objects that are reachable from what it names.

An agent's git reads the same objects (``for_agent``: the history and its
own branch's tip, laid over the shared store its own store names as its
alternate), so no agent reads another attempt's commits, whichever run
took them in.
Under Landlock alone no view is laid (Landlock cannot show a path as another
folder): the judged command then reads the whole store, as
``docs/judging.md`` says.  Nor is one laid for a repository whose refs are
kept in a reftable.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitflow_parallel import environ as proc_env
from gitflow_parallel.files import remove_tree
from gitflow_parallel.git.repo import HARDENED, pid_namespace

FOLDER = "judged-git"
REMOTES = "refs/remotes/"
# The only refs it shows: branches, tags and remote-tracking refs.  Any
# other name may hold a copy of an attempt (git-parallel's archives,
# evidence, claims and notes; a fetch with a refspec of one's own,
# ``+refs/heads/*:refs/mirror/*``; ``refs/stash``, shared by every
# worktree, after a ``git stash`` in an attempt's), and no test suite's git
# reads one.
SHOWN = ("refs/heads/", "refs/tags/", REMOTES)
# Of those, the attempts' branches.
HIDDEN = ("refs/heads/parallel/",)


def hidden(name: str) -> bool:
    """Is ``name`` a ref the view leaves out: any but ``SHOWN``, one of
    ``HIDDEN``, or a remote-tracking copy of an attempt branch
    (``refs/remotes/<remote>/parallel/``: ``collect``, a worker, or a fetch
    of a remote the attempts were pushed to keeps one; a remote's name may
    hold a slash)."""
    return (not name.startswith(SHOWN) or name.startswith(HIDDEN)
            or (name.startswith(REMOTES) and "/parallel/" in name[len(REMOTES):]))


CACHE_KEPT = 4  # history folders kept, the one used last first
MAX_PACKS = 16  # packs in a history folder, before it is built as one again
TIPS = "tips"  # in a history folder: the ref values its packs reach from
_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class GitView:
    """A view in use, laid over ``<common>``'s entries of the same names;
    ``shared``: one of the process's agent views (``for_agent``), removed
    when the process ends, not by its user."""

    folder: Path
    shared: bool = False

    @property
    def objects(self) -> Path:
        return self.folder / "objects"

    @property
    def refs(self) -> Path:
        return self.folder / "refs"

    @property
    def packed_refs(self) -> Path:
        return self.folder / "packed-refs"

    def binds(self, common: Path) -> list[tuple[Path, Path]]:
        """(what, over which path of the common dir), in mount order."""
        out = [(self.objects, common / "objects"), (self.refs, common / "refs")]
        if (common / "packed-refs").is_file():
            out.append((self.packed_refs, common / "packed-refs"))
        return out

    def remove(self) -> None:
        if not self.shared:
            remove_tree(self.folder, ignore_errors=True)


# The agent views this process made, by (common dir, ref values shown, tip):
# a run's agents start from the same base, and each view is read-only to
# them, so they share one (making it cost a run's start a few ms an agent).
_AGENT_VIEWS: dict[tuple[str, str, str | None], GitView] = {}
_AGENT_VIEWS_LOCK = threading.Lock()


def for_agent(common: Path, branch: str) -> GitView | None:
    """The object store an agent on ``branch`` reads (``proc/sandbox``):
    the history and what its branch's tip reaches (its earlier attempt's
    commits after ``retry --keep``), not what its siblings' attempts took
    in: a retry of ``run --until-pass`` starts once the first round's
    objects are in the shared store.  Its refs are its view's
    (``git/shadow``).  Shared by the process's agents of the same tip while
    the refs shown stay as they were; removed when the process ends."""
    repo = pygit2.Repository(str(common))
    try:
        found = repo.references[f"refs/heads/{branch}"].resolve().target
    except (KeyError, pygit2.GitError, ValueError):
        found = None
    tip = str(found) if isinstance(found, pygit2.Oid) else None
    listed = _shown_refs(repo)
    shown = listed[0]
    key = (str(common), hashlib.sha256(repr(sorted(shown.items())).encode()).hexdigest(), tip)
    with _AGENT_VIEWS_LOCK:
        known = _AGENT_VIEWS.get(key)
        if known is not None and known.folder.is_dir():
            return known
        made = make(common, common / "parallel", tip, repo=repo, refs=False, listed=listed)
        if made is None:
            return None
        if not _AGENT_VIEWS:
            atexit.register(_remove_agent_views)
        _AGENT_VIEWS[key] = shared = GitView(made.folder, shared=True)
        return shared


def _remove_agent_views() -> None:
    with _AGENT_VIEWS_LOCK:
        for view in _AGENT_VIEWS.values():
            remove_tree(view.folder, ignore_errors=True)
        _AGENT_VIEWS.clear()


def make(common: Path, parallel_dir: Path, judged: str | None, repo: pygit2.Repository | None = None,
         refs: bool = True, listed: tuple[dict[str, str], dict[str, str]] | None = None) -> GitView | None:
    """A view of ``common`` for commands judging ``judged`` (None: the
    history alone, for the tournament's judge); None where none can be laid
    (a reftable).  ``refs``: write the refs it shows too (an agent's view
    lays its objects alone)."""
    if (common / "reftable").exists():
        return None
    repo = repo or pygit2.Repository(str(common))
    shown, symbolic = listed or _shown_refs(repo)  # (``listed``: what the caller read of them just now)
    root = parallel_dir / FOLDER
    root.mkdir(parents=True, exist_ok=True)
    _sweep_dead(root)
    folder = root / f"view-{_owner()}-{secrets.token_hex(6)}"
    pack = folder / "objects" / "pack"
    pack.mkdir(parents=True)
    (folder / "objects" / "info").mkdir()
    for tries in (1, 2):
        history = _history_pack(common, root, sorted(set(shown.values())), repo, shown)
        try:
            for name in _packs(history):
                os.link(history / name, pack / name)
            break
        except FileNotFoundError:  # pruned by another judging meanwhile: built again
            if tries == 2:
                raise
    if judged is not None and judged not in shown.values():  # (a ref's value: in the history already)
        tips = [f"^{oid}" for oid in sorted(set(shown.values()))]
        _pack(common, pack / "pack", [judged, *tips])
    if refs:
        _write_refs(folder, shown, symbolic, packed=(common / "packed-refs").is_file())
    return GitView(folder)


def _owner() -> str:
    """``<pid>-n<PID namespace>`` of this process, as its folders are named."""
    return f"{os.getpid()}-n{_PID_NAMESPACE}"


_PID_NAMESPACE = pid_namespace()
# A folder of a process in another PID namespace (a container sharing the
# repository), whose pid says nothing here, is left this long after its
# last change.
FOREIGN_KEPT_S = 24 * 3600


def _sweep_dead(root: Path) -> None:
    """Remove the views and half-built history folders of processes that
    are gone (a ``check`` killed with ``kill -9``): a pid of this PID
    namespace no longer alive, or one of another namespace (its pid cannot
    be looked up here) untouched for ``FOREIGN_KEPT_S``."""
    for entry in os.scandir(root):
        kind, _, rest = entry.name.partition("-")
        pid, _, rest = rest.partition("-")
        if kind not in ("view", "building") or not pid.isdigit():
            continue
        space = rest.partition("-")[0] if rest.startswith("n") else None  # (folders named before it: none)
        if space is not None and space[1:] != _PID_NAMESPACE:
            try:
                dead = entry.stat(follow_symlinks=False).st_mtime < time.time() - FOREIGN_KEPT_S
            except OSError:
                continue
        else:
            dead = not _alive(int(pid))
        if dead:
            remove_tree(Path(entry.path), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def shown_tips(repo: pygit2.Repository) -> set[str]:
    """The commits the refs a view shows name (``git/shadow`` stops there
    when it walks what an attempt's ref reaches)."""
    return set(_shown_refs(repo)[0].values())


def _shown_refs(repo: pygit2.Repository) -> tuple[dict[str, str], dict[str, str]]:
    """The refs the view shows: every direct ref but git-parallel's whose
    object is in the store (a ref to a missing object would fail the pack),
    by name; and the symbolic ones that name one of them."""
    shown: dict[str, str] = {}
    symbolic: dict[str, str] = {}
    for name in repo.listall_references():
        if hidden(name):
            continue
        try:
            ref = repo.references[name]
        except (KeyError, pygit2.GitError, ValueError):
            continue
        target = ref.target
        if isinstance(target, pygit2.Oid):
            if target in repo.odb:
                shown[name] = str(target)
        elif isinstance(target, str) and target.startswith("refs/"):
            symbolic[name] = target
    # A symbolic ref (``refs/remotes/origin/HEAD``) is shown where what it
    # names is: written as "ref: <name>", it reaches no object of its own.
    return shown, {name: target for name, target in symbolic.items() if target in shown}


def _history_pack(common: Path, root: Path, tips: list[str], repo: pygit2.Repository, shown: dict[str, str]) -> Path:
    """The folder of the packs holding what ``tips`` reach: built once for
    that set of values and kept for the next judging (the oldest dropped).
    A new set starts from the one used last: its packs, and one more of
    what the new tips reach beyond its tips (``MAX_PACKS`` at most, then
    one pack afresh), so a moved branch costs what it added; afresh too
    when a commit its tips reached and the new ones do not (a ref deleted
    or rewound) is an attempt's: a branch the user made at one, then
    deleted, left it in every later view."""
    key = hashlib.sha256("\n".join(tips).encode("ascii")).hexdigest()[:32]
    kept = root / f"history-{key}"
    if kept.is_dir():
        os.utime(kept)
        return kept
    building = root / f"building-{_owner()}-{secrets.token_hex(6)}"
    building.mkdir()
    try:
        revs = list(tips)
        last = _last_used(root)
        if last is not None and sum(n.endswith(".pack") for n in _packs(last)) < MAX_PACKS:
            try:
                for name in _packs(last):
                    os.link(last / name, building / name)
                before = (last / TIPS).read_text(encoding="ascii").split()
                if _lost_an_attempts(common, before, tips, repo, shown):
                    raise ValueError("it holds an attempt's commit no ref shown reaches now")
                revs += [f"^{oid}" for oid in before]
            except (OSError, UnicodeDecodeError, ValueError):  # pruned meanwhile, or a ref gone: built whole
                for name in os.listdir(building):
                    os.unlink(building / name)
                revs = list(tips)
        if tips:
            _pack(common, building / "pack", revs)
        (building / TIPS).write_text("".join(f"{t}\n" for t in tips), encoding="ascii")
        try:
            os.rename(building, kept)
        except OSError:  # another judging built it meanwhile
            if not kept.is_dir():
                raise
    finally:
        remove_tree(building, ignore_errors=True)
    _prune(root)
    return kept


def _lost_an_attempts(common: Path, before: list[str], tips: list[str], repo: pygit2.Repository,
                      shown: dict[str, str]) -> bool:
    """Does what ``before`` reached, and ``tips`` do not, hold a commit a
    hidden ref (an attempt's branch, an archive) reaches?  True when it
    cannot tell (an old tip gone from the store, a walk that failed)."""
    if not all(_OID.fullmatch(oid) and pygit2.Oid(hex=oid) in repo.odb for oid in before):
        return True
    lost = _commits(common, [*before, *(f"^{t}" for t in tips)])
    if not lost:
        return lost is None
    hidden_tips = set()
    for name in repo.listall_references():
        if hidden(name) and name not in shown:
            try:
                target = repo.references[name].target
            except (KeyError, pygit2.GitError, ValueError):
                continue
            if isinstance(target, pygit2.Oid) and target in repo.odb:
                hidden_tips.add(str(target))
    theirs = _commits(common, [*sorted(hidden_tips), *(f"^{t}" for t in tips)]) if hidden_tips else set()
    return theirs is None or bool(lost & theirs)


def _commits(common: Path, revs: list[str]) -> set[str] | None:
    """The commits ``git rev-list`` lists for ``revs`` (None: it failed)."""
    proc = subprocess.run(["git", *HARDENED, f"--git-dir={common}", "rev-list", "--stdin"],
                          input="".join(f"{r}\n" for r in revs).encode("ascii"), capture_output=True,
                          env=proc_env.for_host_git())
    return set(proc.stdout.decode("ascii", errors="replace").split()) if proc.returncode == 0 else None


def _packs(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith("pack-"))


def _history_folders(root: Path) -> list[tuple[float, Path]]:
    """The kept history folders, the one used last first."""
    found = []
    for entry in os.scandir(root):
        if entry.name.startswith("history-"):
            try:
                found.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
            except OSError:
                continue
    return sorted(found, reverse=True)


def _last_used(root: Path) -> Path | None:
    found = _history_folders(root)
    return found[0][1] if found else None


def _prune(root: Path) -> None:
    """Keep the ``CACHE_KEPT`` history folders used last."""
    for _, old in _history_folders(root)[CACHE_KEPT:]:
        remove_tree(old, ignore_errors=True)


def _pack(common: Path, prefix: Path, revs: list[str]) -> None:
    """``git pack-objects --revs`` of ``revs`` into ``<prefix>-<hash>.pack``
    (and its index), from the shared store."""
    # No delta search and light compression: the pack is a cache on this
    # disk, written where a check waits (deltas the store has are reused).
    # A partial clone's promised objects stay out (never fetched: a judging
    # needs no network, and an unreachable remote would fail it).
    proc = subprocess.run(["git", *HARDENED, "-c", "pack.compression=1", f"--git-dir={common}", "pack-objects",
                           "--revs", "--window=0", "-q", "--missing=allow-promisor", str(prefix)],
                          input="".join(f"{r}\n" for r in revs).encode("ascii"), capture_output=True,
                          env=proc_env.for_host_git())
    if proc.returncode != 0:
        raise RuntimeError(f"git pack-objects for a judged command's view failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()[-400:]}")


def _write_refs(folder: Path, shown: dict[str, str], symbolic: dict[str, str], packed: bool) -> None:
    """The view's ``refs/`` (and ``packed-refs``): the refs it shows, in the
    one file where the repository has one (thousands of tags), else loose;
    a symbolic ref always loose."""
    refs = folder / "refs"
    for sub in ("heads", "tags"):
        (refs / sub).mkdir(parents=True)
    loose = {name: f"ref: {target}" for name, target in symbolic.items()}
    if packed:
        lines = "".join(f"{oid} {name}\n" for name, oid in sorted(shown.items()))
        (folder / "packed-refs").write_text(lines, encoding="utf-8")
    else:
        loose.update(shown)
    for name, text in loose.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{text}\n", encoding="utf-8")
    if not packed:
        # Empty, and laid over a ``packed-refs`` made while the view is in
        # use (``git branch -D`` makes one): else bwrap finds no source to bind.
        (folder / "packed-refs").write_bytes(b"")
