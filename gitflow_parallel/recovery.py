"""Crash recovery: ``validate`` reports what is inconsistent, ``recover``
repairs what can be decided safely.

Both verbs start from one read-only *inspection* of a run against what git,
the files under ``<common>/parallel/`` and the operating system hold now.  An
inspection yields ``Finding``s: a stable code, a severity (``error`` makes
``validate`` exit 1, ``warning`` does not), a message saying what was found
and a ``fix`` saying what to run.  Every finding recover would repair is an
error, so a clean ``validate`` means ``recover`` has nothing to do; warnings
are what recover leaves alone and nothing is broken by (a lock some live git
may hold, local changes in the base worktree).  A finding that ``recover`` acts on carries
a ``Repair``; one that recover would have to act on but cannot decide safely
carries a ``refusal`` instead.  Findings recover does not own (a tampered
evidence pack, a failed instance that needs an explicit ``retry``) carry
neither and are listed as left for the user.

``recover`` is all or nothing at the decision level: it inspects under the
project lock, and if any finding is refused it raises
``PARALLEL_RECOVERY_REFUSED`` naming every one and changes nothing.
Otherwise the repairs run in a fixed order of phases, each step idempotent,
so that a ``recover`` killed half-way is finished by the next one:

1. stale git lock files are removed (later steps would trip over them);
2. git-side work that keeps commits: leftover changes of a dead agent
   committed, tips archived, half-made worktrees completed or rolled back,
   interrupted cleanups finished;
3. the base branch's worktree is moved from the previous tree to the landed
   one when a merge crashed between moving the ref and updating it;
4. every record change in **one** store update, compare-and-swap on the
   ``run_revision`` read at inspection;
5. every missing note in **one** notes commit, computed from the records as
   they are after step 4;
6. files that only described an unfinished step (the merge intent) go last,
   because until the record says merged they are what proves the landing.

Every step is appended to ``<common>/parallel/audit/<run_id>.jsonl``
(``validated`` before anything changes, one ``repaired`` per step,
``refused`` or ``idempotent_noop`` otherwise) under a recovery id derived
from ``run_id`` and ``run_revision``, so the same state always gets the same
id.  A second ``recover`` finds nothing to repair, logs ``idempotent_noop``
and changes nothing else.

What recover decides, and why:

* An instance ``running`` whose process is gone becomes ``succeeded`` only if
  its tip has fresh, complete, passing evidence (the lifecycle write was
  lost); otherwise ``failed`` with ``error: "process gone: ..."``.  The
  agent's commits stay on its branch and become the record's ``head``; with
  ``commit_leftovers`` its uncommitted changes are committed first, as the
  runner would have.  A live process is never touched.
* A spawn that never finished (revision 1, every instance pending, some
  branch or worktree missing) is completed when at least one worktree is
  usable, and rolled back otherwise: tips that differ from the base are
  archived, what exists is removed, and the record is kept as ``aborted`` so
  that ``spawn`` can start again.  A half-made worktree folder is removed only
  if every file in it is identical to the base commit's, so nobody's edits
  are deleted.
* The base branch holding the winners (the merge intent's landing, or every
  winner commit reachable from the base) makes the record ``merged``, with
  the landed commit found from the intent, or for a plain ``git merge`` as the
  oldest commit on the base's first-parent line that holds every winner.
  Cleanup is not run: it removes worktrees and stays an explicit verb.
* A pick record or evidence pack that was written but never bound to the run
  record (a crash between the two writes) is bound, if it still validates
  against the record and the branch tip exactly as the interrupted verb
  would have checked it.
* Failed and aborted instances are never retried.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pygit2
import yaml

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model, notes, provenance, worktrees
from gitflow_parallel.errors import (BASE_HAS_LOSER, BASE_MERGED, BASE_WORKTREE_STALE, BRANCH_MOVED,
                                     CLEANUP_INCOMPLETE, EVIDENCE_UNBOUND, LOCK_HELD, MERGE_INTENT_LEFT, NOTES_MISSING, OBJECT_MISSING,
                                     ORPHAN, PICK_MISSING, PICK_UNBOUND, PROCESS_GONE, REVISION_INVALID,
                                     SPAWN_INCOMPLETE, STALE_LOCK, WORKTREE_MISSING, ParallelError)
from gitflow_parallel.files import append_jsonl, utcnow
from gitflow_parallel.gitrepo import commit_all, worktree_changes
from gitflow_parallel.names import check_name
from gitflow_parallel.project import Project, instance_process_alive, notes_instance_on
from gitflow_parallel.model import FINISHED_RUN, TERMINAL, find_instance

AUDIT_SCHEMA = 1
ORIGIN = "git-parallel recover"

# A git lock file younger than this may belong to a command that is still
# running even if we cannot see it (another mount namespace, another host on
# a shared disk); older ones with no git process in the repository are left
# by a process that was killed.
STALE_LOCK_SECONDS = 5.0


ERROR, WARNING = "error", "warning"

# Phases of the git-side steps (records, notes and files come after them).
PHASE_LOCKS, PHASE_GIT, PHASE_BASE_WORKTREE = 0, 1, 2


@dataclass
class Repair:
    """One step recover takes.  ``git`` runs in its phase, ``record`` inside
    the single store update, ``after`` once the notes are written."""

    step: str
    what: str
    why: str
    phase: int = PHASE_GIT
    git: Callable[[], None] | None = None
    record: Callable[[dict[str, Any]], None] | None = None
    after: Callable[[], None] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"step": self.step, "what": self.what, "why": self.why, "details": self.details}


@dataclass
class Finding:
    code: str
    severity: str
    message: str
    fix: str
    task: str | None = None
    run_id: str | None = None
    instance: str | None = None
    repair: Repair | None = None
    refusal: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix,
                "task": self.task, "run_id": self.run_id, "instance": self.instance,
                "repair": self.repair.what if self.repair else None, "refusal": self.refusal}


def recovery_id(run_id: str, run_revision: int) -> str:
    """The same run at the same revision always gets the same recovery id."""
    return "RC-" + hashlib.sha256(f"{run_id}:{run_revision}".encode()).hexdigest()[:24]


def audit_path(project: Project, run_id: str) -> Path:
    return project.repo.parallel_dir / "audit" / f"{run_id}.jsonl"


# -- what git and the OS hold now -------------------------------------------------------
@dataclass
class WorktreeState:
    """An instance's branch, worktree folder and ``<common>/worktrees`` entry."""

    path: Path
    admin: Path
    tip: str | None
    path_exists: bool
    linked: bool  # the folder's .git names the admin folder and the admin folder names it back
    head_ok: bool  # the admin folder's HEAD is the instance branch
    index_ok: bool  # the checkout got as far as writing the index

    @property
    def usable(self) -> bool:
        return self.tip is not None and self.linked and self.head_ok and self.index_ok


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


class Scan:
    """Read-only views of the repository shared by every check of one command."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.repo = project.repo
        self._git_users: list[tuple[int, str]] | None = None

    def worktree(self, task: str, inst: dict[str, Any]) -> WorktreeState:
        path = Path(inst["worktree"])
        admin = self.repo.common_dir / "worktrees" / worktrees.admin_name(task, inst["id"])
        gitfile = _read_text(path / ".git") if (path / ".git").is_file() else None
        back = _read_text(admin / "gitdir")
        linked = (gitfile is not None and gitfile.startswith("gitdir:")
                  and _same_path(gitfile[len("gitdir:"):].strip(), admin)
                  and back is not None and _same_path(back, path / ".git"))
        return WorktreeState(
            path=path, admin=admin, tip=self.project.tip(inst), path_exists=os.path.lexists(path),
            linked=linked, head_ok=_read_text(admin / "HEAD") == f"ref: refs/heads/{inst['branch']}",
            index_ok=(admin / "index").is_file(),
        )

    def commit(self, oid: str | None) -> pygit2.Commit | None:
        if not oid:
            return None
        try:
            obj = self.repo.git.get(oid)
        except (ValueError, pygit2.GitError):
            return None
        return obj if isinstance(obj, pygit2.Commit) else None

    def contains(self, descendant: str, ancestor: str) -> bool:
        try:
            return self.repo.is_ancestor(ancestor, descendant)
        except (ValueError, pygit2.GitError, KeyError):
            return False

    def notes_on(self, notes_ref: str, oid: str) -> list[dict[str, Any]]:
        return notes.records(self.repo.git, notes_ref, oid)

    def git_users(self) -> list[tuple[int, str]] | None:
        """Live git (or git-parallel) processes working in this repository,
        other than this command and its ancestors; None where /proc cannot
        tell (then no lock is judged stale)."""
        if self._git_users is None:
            self._git_users = _git_users(self._roots())
        return self._git_users

    def _roots(self) -> list[Path]:
        roots = [self.repo.common_dir]
        if self.repo.main_workdir is not None:
            roots.append(self.repo.main_workdir)
        admin_root = self.repo.common_dir / "worktrees"
        if admin_root.is_dir():
            for admin in admin_root.iterdir():
                back = _read_text(admin / "gitdir")
                if back:
                    roots.append(Path(back).parent)
        return [Path(os.path.realpath(r)) for r in roots]


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                pid = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _git_users(roots: list[Path]) -> list[tuple[int, str]] | None:
    if not os.path.isdir("/proc/self"):
        return None
    skip = _ancestors()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(f"/proc/{entry.name}/cwd"))
        except OSError:
            continue
        if not argv or not argv[0]:
            continue  # a zombie or a kernel thread
        prog = os.path.basename(argv[0].decode(errors="replace"))
        if not (prog == "git" or prog.startswith("git-")
                or any(b"gitflow_parallel" in a or b"git-parallel" in a for a in argv)):
            continue
        if any(cwd == r or r in cwd.parents for r in roots):
            found.append((int(entry.name), " ".join(a.decode(errors="replace") for a in argv if a)[:120]))
    return found


# -- small helpers ------------------------------------------------------------------
def _only_files_of(path: Path, tree: pygit2.Tree | None) -> list[str]:
    """Files under ``path`` that are not byte-identical to ``tree``'s entry
    (the worktree's own ``.git`` file aside); empty means removing the folder
    loses nothing that is not in the commit."""
    foreign: list[str] = []
    for folder, dirs, files in os.walk(path):
        rel_folder = Path(folder).relative_to(path)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            rel = (rel_folder / name).as_posix()
            if rel == ".git":
                continue
            full = Path(folder) / name
            try:
                entry = tree[rel] if tree is not None else None
            except KeyError:
                entry = None
            if entry is None:
                foreign.append(rel)
                continue
            try:
                data = os.readlink(full).encode() if full.is_symlink() else full.read_bytes()
            except OSError:
                foreign.append(rel)
                continue
            if str(pygit2.hash(data)) != str(entry.id):
                foreign.append(rel)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))
                   and not (rel_folder == Path(".") and d == ".git")]
    return sorted(foreign)


def _attach_worktree(project: Project, task: str, inst: dict[str, Any]) -> None:
    """Make the worktree of an instance whose branch exists (the branch keeps
    its commits; the folder and admin entry are made fresh)."""
    repo = project.repo
    name = worktrees.admin_name(task, inst["id"])
    admin = repo.common_dir / "worktrees" / name
    path = Path(inst["worktree"])
    if admin.exists():
        shutil.rmtree(admin)
    if os.path.lexists(path):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    (repo.common_dir / "worktrees").mkdir(exist_ok=True)
    try:
        repo.git.add_worktree(name, str(path), repo.git.branches.local[inst["branch"]])
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise ParallelError(
            E.WORKTREE_CREATE_FAILED,
            f"could not make the worktree of instance {inst['id']} at {path}: {exc}",
            hint=f"remove what is in the way and run `git parallel recover {task}` again",
        ) from None


def _clear_partial(st: WorktreeState) -> None:
    """Remove a half-made worktree folder and admin entry (checked to hold
    nothing beyond the commit's files when the plan was made)."""
    if st.admin.exists():
        shutil.rmtree(st.admin)
    if os.path.lexists(st.path):
        shutil.rmtree(st.path) if st.path.is_dir() and not st.path.is_symlink() else st.path.unlink()


def _dismantle(project: Project, scan: "Scan", run_id: str, task: str, inst: dict[str, Any],
               skip_archive: str | None = None) -> None:
    """Take apart what is left of an instance that is not a usable worktree:
    archive its branch tip (unless it is ``skip_archive``), clear the partial
    folder and admin entry, delete the branch by compare-and-swap."""
    tip = project.tip(inst)
    if tip is not None and tip != skip_archive:
        worktrees.archive(project.repo, run_id, inst["id"], inst["attempt"], tip)
    _clear_partial(scan.worktree(task, inst))
    if tip is not None:
        project.repo.delete_ref(f"refs/heads/{inst['branch']}", expected=tip)
    _remove_empty_parent(Path(inst["worktree"]))


def _remove_empty_parent(path: Path) -> None:
    try:
        path.parent.rmdir()
    except OSError:
        pass


# -- notes ----------------------------------------------------------------------------
@dataclass
class NoteNeed:
    commit: str
    line: str
    key: dict[str, Any]  # fields an existing line must share to count as this one
    label: str


def required_notes(scan: Scan, record: dict[str, Any]) -> list[NoteNeed]:
    """Every note line the records say should exist, per SPEC: the instance
    line on each tip, evidence lines on checked commits, the pick line on each
    winner commit, and for a merged run the pick and merge lines on the
    landed commit."""
    from gitflow_parallel.selection import load_pick

    project = scan.project
    run_id = record["run_id"]
    needs: list[NoteNeed] = []
    for inst in record["instances"]:
        # A running agent moves its tip with every commit; the runner notes
        # the tip once the command ends, so there is nothing to require yet.
        # Likewise a person working by hand on a pending instance: `check`
        # or `done` notes the tip once the work is declared (hand.py).
        if not inst.get("removed") and inst["status"] != "running":
            tip = project.tip(inst)
            if inst["status"] == "pending" and tip != inst["head"]:
                tip = None
            if notes_instance_on(record, tip, inst):
                needs.append(NoteNeed(tip, provenance.instance_note(record, inst, tip),
                                      {"kind": "instance", "run_id": run_id, "instance": inst["id"],
                                       "attempt": inst["attempt"], "commit": tip},
                                      f"instance {inst['id']} on its tip {tip[:12]}"))
        pack = evidence.load(inst)
        if pack is not None and scan.commit(pack.get("commit")) is not None:
            sha = inst["evidence"]["sha256"]
            needs.append(NoteNeed(pack["commit"], provenance.evidence_note(record, inst["id"], pack, sha),
                                  {"kind": "evidence", "run_id": run_id, "instance": inst["id"],
                                   "evidence_sha256": sha},
                                  f"evidence of {inst['id']} on {pack['commit'][:12]}"))
    picks = []
    for track in record["tracks"]:
        if track not in (record.get("picks") or {}):
            continue
        try:
            pick = load_pick(project, record, track)
        except ParallelError:
            continue
        if pick is not None and scan.commit(pick["winner"]["commit"]) is not None:
            picks.append(pick)
            needs.append(NoteNeed(pick["winner"]["commit"], provenance.pick_note(pick),
                                  {"kind": "pick", "run_id": run_id, "track": track},
                                  f"pick of track {track} on the winner {pick['winner']['commit'][:12]}"))
    merged = record.get("merge") if record["status"] == "merged" else None
    if merged and scan.commit(merged.get("landed")) is not None:
        landed = merged["landed"]
        for pick in picks:
            needs.append(NoteNeed(landed, provenance.pick_note(pick), {"kind": "pick", "run_id": run_id, "track": pick["track"]},
                                  f"pick of track {pick['track']} on the landed commit {landed[:12]}"))
        needs.append(NoteNeed(landed, provenance.merge_note(record, merged), {"kind": "merge", "run_id": run_id},
                              f"merge record on the landed commit {landed[:12]}"))
    return needs


def missing_notes(scan: Scan, record: dict[str, Any]) -> list[NoteNeed]:
    ref = record["config"]["notes_ref"]
    cache: dict[str, list[dict[str, Any]]] = {}
    out = []
    for need in required_notes(scan, record):
        have = cache.setdefault(need.commit, scan.notes_on(ref, need.commit))
        if not any(all(h.get(k) == v for k, v in need.key.items()) for h in have):
            out.append(need)
    return out


# -- inspecting one run ---------------------------------------------------------------
class _RunCheck:
    """The findings of one run; ``rid`` names the recovery they would belong to."""

    def __init__(self, scan: Scan, record: dict[str, Any]) -> None:
        self.scan = scan
        self.project = scan.project
        self.repo = scan.repo
        self.record = record
        self.task = record["task"]
        self.run_id = record["run_id"]
        self.rid = recovery_id(self.run_id, record["run_revision"])
        self.findings: list[Finding] = []
        self.live = record["status"] not in FINISHED_RUN
        self.states = {i["id"]: scan.worktree(self.task, i) for i in record["instances"] if not i.get("removed")}
        self.rolling_back = False  # a rolled-back spawn leaves no tips to note
        # Note lines that repairs will make due (a dead instance's tip once it
        # is finished, a pick or pack once bound, a landing once recorded), so
        # that the plan shows the notes step the apply will take.
        self.will_note: list[str] = []

    def add(self, code: str, severity: str, message: str, fix: str | None = None, instance: str | None = None,
            repair: Repair | None = None, refusal: str | None = None) -> None:
        if fix is None:
            fix = f"git parallel recover {self.task}" if repair else f"git parallel status {self.task}"
        self.findings.append(Finding(code, severity, message, fix, self.task, self.run_id, instance, repair, refusal))

    def run(self) -> list[Finding]:
        self.revisions_and_objects()
        self.spawn_and_worktrees()
        self.processes()
        self.moved_branches()
        self.evidence_packs()
        self.picks_and_merge()
        self.frozen_config()
        self.base_losers()
        self.notes()
        return self.findings

    def frozen_config(self) -> None:
        """The record's config must be what its base commit's file says."""
        from gitflow_parallel import config as C

        try:
            C.verify_frozen(self.repo, self.record)
        except ParallelError as exc:
            self.add(exc.code, ERROR, exc.message, fix=exc.hint)

    # -- a base that took a loser -----------------------------------------------------
    def _history(self, tips: list[str], hide: str) -> set[str]:
        """The commits reachable from ``tips`` and not from ``hide``."""
        walker = None
        for tip in tips:
            if self.scan.commit(tip) is None:
                continue
            if walker is None:
                walker = self.repo.git.walk(pygit2.Oid(hex=tip), pygit2.enums.SortMode.NONE)
                walker.hide(pygit2.Oid(hex=hide))
            else:
                walker.push(pygit2.Oid(hex=tip))
        return {str(c.id) for c in walker} if walker is not None else set()

    def base_losers(self) -> None:
        """A live run's base must not hold commits of an instance that did
        not win: only a merge of the proven winner may bring instance work in,
        and one that did (hooks skipped, or a hand-set GIT_PARALLEL_INTERNAL)
        landed unproven work."""
        rec = self.record
        base_tip = self.repo.ref_target(rec["base"]["ref"])
        spawn_base = rec["base"]["commit"]
        if not self.live or base_tip is None or base_tip == spawn_base or self.scan.commit(spawn_base) is None:
            return
        brought = self._history([base_tip], spawn_base)
        if not brought:
            return
        winners = [p.get("winner") for p in (rec.get("picks") or {}).values() if isinstance(p, dict)]
        winner_commits = [i.get("head") for i in rec["instances"] if i["id"] in winners and i.get("head")]
        allowed = self._history(winner_commits, spawn_base) if winner_commits else set()
        for inst in rec["instances"]:
            if inst["id"] in winners:
                continue
            tips = [t for t in (self.project.tip(inst), inst.get("head")) if t]
            tips += [oid for _, oid in self.repo.refs_under(f"{worktrees.ARCHIVE_PREFIX}/{self.run_id}/{inst['id']}/")]
            taken = sorted((self._history(tips, spawn_base) & brought) - allowed)
            if taken:
                self.add(BASE_HAS_LOSER, ERROR,
                         f"{rec['base']['ref']} holds {len(taken)} commit(s) of instance {inst['id']}, which did not "
                         f"win its track (e.g. {taken[0][:12]}); they reached the base outside `git parallel merge`",
                         instance=inst["id"],
                         fix=f"inspect them (git log {spawn_base[:12]}..{rec['base']['ref']}); take them out "
                             "(git revert, or git reset --keep to the commit before) unless you meant to land them")

    # -- revisions and oids ---------------------------------------------------------
    def revisions_and_objects(self) -> None:
        rec = self.record
        for inst in rec["instances"]:
            if inst["instance_revision"] > rec["run_revision"]:
                self.add(REVISION_INVALID, ERROR,
                         f"instance {inst['id']} is at revision {inst['instance_revision']}, above the run's "
                         f"{rec['run_revision']}: every instance write also bumps the run, so the record was "
                         "edited or mixed from two copies",
                         fix="restore the record from a backup; git parallel does not guess revisions",
                         instance=inst["id"])
        if self.scan.commit(rec["base"]["commit"]) is None:
            self.add(OBJECT_MISSING, ERROR, f"the base commit {rec['base']['commit'][:12]} is not in the repository",
                     fix="fetch or restore it (git fsck --lost-found), or abort the run")
        base_ref = rec["base"]["ref"]
        tip = self.project.repo.ref_target(base_ref)
        if self.live and tip is None:
            self.add(E.BASE_NOT_FOUND, ERROR, f"the base branch {base_ref} of this live run no longer exists",
                     fix=f"recreate it (git branch {base_ref[len('refs/heads/'):]} {rec['base']['commit'][:12]}), "
                         "or abort the run")
        elif rec["status"] == "merged" and rec.get("merge") and tip is not None \
                and not self.project.repo.is_ancestor(rec["merge"]["landed"], tip):
            self.add(E.BASE_NOT_FOUND, WARNING,
                     f"the run is recorded merged at {rec['merge']['landed'][:12]}, but {base_ref} "
                     f"({tip[:12]}) no longer contains it (reset or rewritten since)",
                     fix=f"git log {base_ref}; the landed commit is still reachable from its archive and notes")
        for inst in rec["instances"]:
            if inst["head"] is not None and self.scan.commit(inst["head"]) is None:
                self.add(OBJECT_MISSING, ERROR,
                         f"instance {inst['id']} records head {inst['head'][:12]}, which is not a commit here",
                         fix="restore it from a clone, or `git parallel abort` the instance", instance=inst["id"])

    # -- spawn, worktrees, cleanup ---------------------------------------------------
    def spawn_and_worktrees(self) -> None:
        rec = self.record
        insts = [i for i in rec["instances"] if not i.get("removed")]
        if not self.live:
            for inst in insts:
                self.finished_instance(inst)
            return
        broken = [i for i in insts if not self.states[i["id"]].usable]
        # Spawn marks itself done (parallel/spawned/<run_id>) only after every
        # worktree exists, so a revision-1 record without the mark is a spawn
        # that never finished; with it, something was lost later and is
        # simply made again.
        fresh_spawn = (rec["run_revision"] == 1 and insts
                       and all(i["status"] == "pending" and i["attempt"] == 0 for i in rec["instances"])
                       and not self.spawn_noted(insts))
        if fresh_spawn and broken:
            if len(broken) == len(insts):
                self.rolling_back = True
                self.rollback_spawn(insts)
            else:
                for inst in broken:
                    self.recreate(inst, SPAWN_INCOMPLETE,
                                  f"spawn of run {self.run_id} stopped before instance {inst['id']} was made "
                                  f"({self.describe_missing(inst)})")
            return
        for inst in broken:
            st = self.states[inst["id"]]
            missing = self.describe_missing(inst)
            if inst["status"] == "running" and instance_process_alive(inst):
                self.add(WORKTREE_MISSING, ERROR,
                         f"instance {inst['id']} is running (pid {inst['pid']}) but its {missing}",
                         fix=f"git parallel abort {self.task} {inst['id']}, then git parallel retry {self.task} {inst['id']}",
                         instance=inst["id"])
            elif inst["status"] in ("failed", "aborted") or inst["status"] == "running":
                # retry makes the branch and worktree again; recover does not retry.
                self.add(E.BRANCH_NOT_FOUND if st.tip is None else WORKTREE_MISSING, ERROR,
                         f"instance {inst['id']} ({inst['status']}) has lost its {missing}",
                         fix=f"git parallel retry {self.task} {inst['id']}", instance=inst["id"])
            elif inst["status"] == "pending" or st.tip is not None:
                self.recreate(inst, WORKTREE_MISSING if st.tip is not None else E.BRANCH_NOT_FOUND,
                              f"instance {inst['id']} ({inst['status']}) has lost its {missing}")
            else:
                head = inst["head"] or rec["base"]["commit"]
                self.add(E.BRANCH_NOT_FOUND, ERROR,
                         f"the branch {inst['branch']} of succeeded instance {inst['id']} is missing",
                         fix=f"git branch {inst['branch']} {head} (its recorded head), then git parallel recover {self.task}",
                         instance=inst["id"],
                         refusal=f"instance {inst['id']} is succeeded but its branch {inst['branch']} is gone; "
                                 "recover does not guess which commit it should hold")

    def noted(self, commit: str, key: dict[str, Any]) -> bool:
        """Is there a line of this run on ``commit`` sharing every field of ``key``?"""
        have = self.scan.notes_on(self.record["config"]["notes_ref"], commit)
        return any(h.get("run_id") == self.run_id and all(h.get(k) == v for k, v in key.items()) for h in have)

    def spawn_noted(self, insts: list[dict[str, Any]]) -> bool:
        # The marker spawn writes once every worktree exists; runs spawned
        # before it existed have their instance notes on the base instead.
        if self.project.store.spawned(self.run_id):
            return True
        base = self.record["base"]["commit"]
        return all(self.noted(base, {"kind": "instance", "instance": i["id"], "attempt": 0}) for i in insts)

    def describe_missing(self, inst: dict[str, Any]) -> str:
        st = self.states[inst["id"]]
        parts = []
        if st.tip is None:
            parts.append(f"branch {inst['branch']}")
        if not st.path_exists:
            parts.append(f"worktree folder {st.path}")
        elif not st.linked:
            parts.append(f"worktree link ({st.path}/.git <-> {st.admin})")
        elif not st.index_ok:
            parts.append(f"worktree index ({st.admin}/index: the checkout did not finish)")
        if st.path_exists and st.linked and not st.head_ok:
            parts.append(f"worktree HEAD on {inst['branch']}")
        return ", ".join(parts) or "worktree"

    def _partial_refusal(self, inst: dict[str, Any], st: WorktreeState, tree: pygit2.Tree | None) -> str | None:
        """Why the half-made folder cannot be removed, or None."""
        if not st.path_exists:
            return None
        if st.path.is_symlink() or not st.path.is_dir():
            return f"{st.path} is not a folder git-parallel made"
        foreign = _only_files_of(st.path, tree)
        if foreign:
            shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
            return f"{st.path} holds files that are not in the commit ({shown}); removing it could lose work"
        return None

    def recreate(self, inst: dict[str, Any], code: str, message: str) -> None:
        st = self.states[inst["id"]]
        base = self.record["base"]["commit"]
        tip_commit = self.scan.commit(st.tip or base)
        refusal = self._partial_refusal(inst, st, tip_commit.tree if tip_commit else None)
        task, project = self.task, self.project
        inst_id = inst["id"]

        def git() -> None:
            current = project.tip(inst)
            _clear_partial(self.scan.worktree(task, inst))
            if current is None:
                if not project.repo.cas_ref(f"refs/heads/{inst['branch']}", base, None,
                                            "git-parallel: recover a half-made spawn"):
                    raise ParallelError(E.RECOVERY_REFUSED, f"the branch {inst['branch']} appeared meanwhile",
                                        hint=f"run `git parallel recover {task}` again")
            _attach_worktree(project, task, inst)

        what = (f"make the worktree of instance {inst_id} at {st.path}"
                + ("" if st.tip else f" and its branch {inst['branch']} at the base {base[:12]}")
                + (f" on its branch at {st.tip[:12]} (its commits kept)" if st.tip else ""))
        self.add(code, ERROR, message,
                 fix=(f"move {st.path} away, then git parallel recover {task}" if refusal
                      else f"git parallel recover {task}"),
                 instance=inst_id, refusal=refusal,
                 repair=None if refusal else Repair("recreate_worktree", what, message, git=git,
                                                     details={"instance": inst_id, "path": str(st.path),
                                                              "branch": inst["branch"], "tip": st.tip}))

    def rollback_spawn(self, insts: list[dict[str, Any]]) -> None:
        base = self.record["base"]["commit"]
        base_tree = self.scan.commit(base)
        refusals, archive_plan = [], {}
        for inst in insts:
            st = self.states[inst["id"]]
            why = self._partial_refusal(inst, st, base_tree.tree if base_tree else None)
            if why:
                refusals.append(why)
            if st.tip is not None and st.tip != base:
                archive_plan[inst["id"]] = st.tip
        project, task, run_id = self.project, self.task, self.run_id
        rid = self.rid

        def git() -> None:
            for inst in insts:
                # A tip still at the base holds nothing to keep.
                _dismantle(project, self.scan, run_id, task, inst, skip_archive=base)

        def record(rec: dict[str, Any]) -> None:
            now = utcnow()
            for i in rec["instances"]:
                if i.get("removed"):
                    continue
                if i["status"] not in TERMINAL:
                    model.finish(rec, i, "aborted", finished_at=now,
                                 error=f"spawn was interrupted before this worktree was made; rolled back by "
                                       f"git parallel recover ({rid})")
                model.mark_removed(i)
                model.bump(i)
            model.mark_aborted(rec)

        what = (f"roll back the half-made spawn of run {run_id}: remove what exists of instance(s) "
                f"{', '.join(i['id'] for i in insts)}"
                + (f", after archiving {len(archive_plan)} tip(s)" if archive_plan else "")
                + "; the record stays, as aborted, so `git parallel spawn` can start again")
        message = (f"spawn of run {self.run_id} stopped before any worktree was usable ("
                   + "; ".join(f"{i['id']}: {self.describe_missing(i)}" for i in insts) + ")")
        self.add(SPAWN_INCOMPLETE, ERROR, message,
                 fix=(f"move the folders named away, then git parallel recover {task}" if refusals
                      else f"git parallel recover {task}, then git parallel spawn {task}"),
                 refusal="; ".join(refusals) or None,
                 repair=None if refusals else Repair("rollback_spawn", what, message, git=git, record=record,
                                                      details={"instances": [i["id"] for i in insts],
                                                               "archived": archive_plan}))

    def finished_instance(self, inst: dict[str, Any]) -> None:
        """A merged or aborted run: an instance is either kept whole (keep_losers,
        or cleanup not run yet) or its cleanup was interrupted."""
        st = self.states[inst["id"]]
        if st.usable:
            return
        project, task, run_id, record = self.project, self.task, self.run_id, self.record
        archive = project.repo.ref_target(worktrees.archive_ref(run_id, inst["id"], inst["attempt"]))
        keep = st.tip or (inst["head"] if self.scan.commit(inst["head"]) is not None else None)
        refusal = None
        if st.path_exists and st.linked and st.tip is not None:
            if worktree_changes(st.path):
                refusal = (f"the worktree of instance {inst['id']} ({st.path}) has uncommitted changes; "
                           "recover does not decide to drop or commit them")
        elif st.path_exists:
            # Without its branch git cannot say what changed: compare the
            # files with the commit that is kept.
            tree = self.scan.commit(keep)
            refusal = self._partial_refusal(inst, st, tree.tree if tree else None)

        def git() -> None:
            tip = project.tip(inst)
            if tip is None and keep is not None and not (archive and self.scan.contains(archive, keep)):
                worktrees.archive(project.repo, run_id, inst["id"], inst["attempt"], keep)
            now = self.scan.worktree(task, inst)
            if now.linked and now.tip is not None:
                worktrees.remove(project.repo, record, inst)
            else:
                _dismantle(project, self.scan, run_id, task, inst)

        def rec_change(rec: dict[str, Any]) -> None:
            i = find_instance(rec, inst["id"])
            model.mark_removed(i)
            model.bump(i)

        message = (f"the cleanup of instance {inst['id']} of {record['status']} run {run_id} was interrupted: "
                   f"its {self.describe_missing(inst)} is gone but the record does not say removed")
        self.add(CLEANUP_INCOMPLETE, ERROR, message,
                 fix=(f"git parallel cleanup {task} --force (keeps the changes on the archive ref)" if refusal
                      else f"git parallel recover {task}"),
                 instance=inst["id"], refusal=refusal,
                 repair=None if refusal else Repair(
                     "finish_cleanup", f"finish removing instance {inst['id']} (tip kept under "
                     f"{worktrees.archive_ref(run_id, inst['id'], inst['attempt'])})", message,
                     git=git, record=rec_change, details={"instance": inst["id"], "kept": keep}))

    # -- processes ---------------------------------------------------------------
    def processes(self) -> None:
        if not self.live:
            return
        for inst in self.record["instances"]:
            if inst["status"] != "running" or instance_process_alive(inst):
                continue
            self.process_gone(inst)

    def process_gone(self, inst: dict[str, Any]) -> None:
        st = self.states.get(inst["id"])
        tip = st.tip if st else None
        fresh = evidence.freshness(self.record, inst, tip)
        pid = inst.get("pid")
        project, task, rid = self.project, self.task, self.rid
        inst_id, attempt = inst["id"], inst["attempt"]
        commit_leftovers = bool(self.record["config"].get("commit_leftovers", True))
        dirty = (st is not None and st.usable and commit_leftovers and not fresh.passing
                 and bool(worktree_changes(st.path)))
        outcome = "succeeded" if tip is not None and fresh.passing else "failed"
        if outcome == "succeeded":
            why = "its tip has fresh, complete, passing evidence: the end of the run was not recorded"
            error = None
        else:
            why = ("nothing recorded how it ended and its tip has no fresh passing evidence "
                   f"({fresh.reason})")
            error = (f"process gone: pid {pid} is no longer running and its end was never recorded "
                     f"(the runner was killed?); marked failed by git parallel recover ({rid}); "
                     f"its commits are kept on {inst['branch']}")

        def git() -> None:
            # As the runner would have: the dead agent's uncommitted work
            # becomes a commit on its branch rather than being left to a retry
            # that resets the worktree.
            message = provenance.leftovers_message(
                task, self.run_id, inst_id, attempt,
                f"Uncommitted when its process (pid {pid}) was found gone by git parallel recover.", recovery_id=rid)
            assert st is not None  # only planned for a usable worktree
            commit_all(st.path, message, signature=project.repo.signature())

        def record(rec: dict[str, Any]) -> None:
            i = find_instance(rec, inst_id)
            if i["status"] != "running" or i["attempt"] != attempt:
                raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {inst_id} changed during recovery",
                                    hint=f"run `git parallel recover {task}` again")
            model.finish(rec, i, outcome, head=project.tip(i) or i["head"], finished_at=utcnow(),
                         error=error if outcome == "failed" else i.get("error"))
            model.bump(i)

        # Committing leftovers makes a new tip to note; the base commit gets no instance line.
        if tip is not None and (dirty or (notes_instance_on(self.record, tip, inst) and not self.noted(
                tip, {"kind": "instance", "instance": inst_id, "attempt": attempt, "commit": tip}))):
            self.will_note.append(f"instance {inst_id} on its tip, once it is {outcome}")
        what = (f"mark instance {inst_id} {outcome}"
                + (" after committing its uncommitted changes" if dirty else "")
                + (f"; its commits stay on {inst['branch']} at {tip[:12]}" if tip else ""))
        self.add(PROCESS_GONE, ERROR, f"instance {inst_id} is running but its process {pid} is gone", instance=inst_id,
                 repair=Repair("instance_" + outcome, what, why, git=git if dirty else None, record=record,
                               details={"instance": inst_id, "pid": pid, "tip": tip, "outcome": outcome,
                                        "evidence": fresh.state, "leftovers_committed": dirty}))

    # -- branches that moved -----------------------------------------------------------
    def moved_branches(self) -> None:
        for inst in self.record["instances"]:
            st = self.states.get(inst["id"])
            if st is None or st.tip is None or inst["status"] not in TERMINAL or st.tip == inst["head"]:
                continue
            if inst["status"] == "aborted" and inst.get("exit_code") is None:
                # `abort` stops a command without waiting to see its last
                # tip, so its head is not a claim about the branch.
                continue
            self.branch_moved(inst, st)

    def branch_moved(self, inst: dict[str, Any], st: WorktreeState) -> None:
        head, tip = inst["head"], st.tip
        assert tip is not None
        project, run_id = self.project, self.run_id
        inst_id, attempt = inst["id"], inst["attempt"]
        archive_name = worktrees.archive_ref(run_id, inst_id, attempt)
        archive = project.repo.ref_target(archive_name)
        forward = head is None or self.scan.commit(head) is None or self.scan.contains(tip, head)
        refusal, archive_head = None, False
        if not forward:
            if archive is None:
                archive_head = True
            elif not self.scan.contains(archive, head):
                refusal = (f"the branch {inst['branch']} was rewritten away from the recorded head {head[:12]}, "
                           f"and {archive_name} already holds another commit ({archive[:12]})")

        def git() -> None:
            if project.repo.ref_target(archive_name) is None:
                project.repo.cas_ref(archive_name, head, None, "git-parallel: recover keeps the recorded head")

        def record(rec: dict[str, Any]) -> None:
            i = find_instance(rec, inst_id)
            model.record_head(i, project.tip(i) or i["head"])
            model.bump(i)

        if forward:
            message = (f"the branch {inst['branch']} of {inst['status']} instance {inst_id} moved on to {tip[:12]} "
                       f"after its run recorded {str(head)[:12]}; any evidence for it is now stale")
        else:
            message = (f"the branch {inst['branch']} of {inst['status']} instance {inst_id} no longer holds its "
                       f"recorded head {head[:12]} (now at {tip[:12]}: reset or rewritten)")
        what = (f"record {tip[:12]} as the head of instance {inst_id}"
                + (f", keeping {str(head)[:12]} at {archive_name}" if archive_head else ""))
        self.add(BRANCH_MOVED, ERROR, message, instance=inst_id, refusal=refusal,
                 fix=(f"git branch -f {inst['branch']} {head} to undo the move" if refusal
                      else f"git parallel recover {self.task}"),
                 repair=None if refusal else Repair("record_head", what, message,
                                                    git=git if archive_head else None, record=record,
                                                    details={"instance": inst_id, "from": head, "to": tip,
                                                             "archived": archive_name if archive_head else None}))

    # -- evidence -------------------------------------------------------------------
    def evidence_packs(self) -> None:
        rec = self.record
        for inst in rec["instances"]:
            binding = inst.get("evidence")
            on_disk = evidence.pack_path(self.repo.parallel_dir, rec["run_id"], inst["id"], inst["attempt"])
            loaded = evidence.load(inst) if binding else None
            if binding and loaded is not None:
                continue
            adoptable = self.adoptable_pack(inst, on_disk)
            if binding and loaded is None and adoptable is None:
                self.add(E.EVIDENCE_MISMATCH, ERROR,
                         f"the evidence pack of instance {inst['id']} ({binding.get('path')}) is gone or its bytes "
                         f"no longer match the sha256 in the record",
                         fix=(f"git parallel check {self.task} --instance {inst['id']}" if inst["status"] == "succeeded"
                              and not inst.get("removed") else "restore the pack from a backup"),
                         instance=inst["id"])
            elif adoptable is not None:
                self.bind_pack(inst, on_disk, *adoptable, rebind=bool(binding))
            elif on_disk.exists() and not binding and inst["status"] == "succeeded" and not inst.get("removed"):
                self.add(EVIDENCE_UNBOUND, WARNING,
                         f"instance {inst['id']} has an evidence pack ({on_disk}) that was never bound to the record "
                         "(the check was interrupted) and no longer matches the instance",
                         fix=f"git parallel check {self.task} --instance {inst['id']}", instance=inst["id"])

    def adoptable_pack(self, inst: dict[str, Any], path: Path) -> tuple[dict[str, Any], bytes] | None:
        """A pack `check` wrote for exactly this attempt, revision and tip,
        whose binding was lost: the record write that should have followed it."""
        if inst["status"] != "succeeded" or inst.get("removed") or not path.is_file():
            return None
        try:
            data = path.read_bytes()
            pack = json.loads(data)
        except (OSError, ValueError):
            return None
        st = self.states.get(inst["id"])
        ok = (isinstance(pack, dict) and pack.get("origin") == evidence.ORIGIN
              and pack.get("run_id") == self.run_id and pack.get("instance") == inst["id"]
              and pack.get("attempt") == inst["attempt"] and pack.get("config_sha256") == self.record["config_sha256"]
              and pack.get("instance_revision") == inst["instance_revision"]
              and st is not None and st.tip is not None and pack.get("commit") == st.tip
              and pack.get("verdict") in ("pass", "fail"))
        return (pack, data) if ok else None

    def bind_pack(self, inst: dict[str, Any], path: Path, pack: dict[str, Any], data: bytes, rebind: bool) -> None:
        sha = hashlib.sha256(data).hexdigest()
        inst_id, revision = inst["id"], inst["instance_revision"]

        def record(rec: dict[str, Any]) -> None:
            i = find_instance(rec, inst_id)
            if i["instance_revision"] != revision:
                raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {inst_id} changed during recovery",
                                    hint=f"run `git parallel recover {self.task}` again")
            model.bind_evidence(i, {"path": str(path), "sha256": sha}, pack)
            model.bump(i)

        if not self.noted(pack["commit"], {"kind": "evidence", "instance": inst_id, "evidence_sha256": sha}):
            self.will_note.append(f"evidence of {inst_id} on {pack['commit'][:12]}, once bound")
        message = (f"the evidence pack of instance {inst_id} for {pack['commit'][:12]} was written but "
                   + ("the record still binds the pack it replaced" if rebind else "never bound to the record")
                   + " (the check was interrupted)")
        self.add(EVIDENCE_UNBOUND, ERROR, message, instance=inst_id,
                 repair=Repair("bind_evidence", f"bind {path.name} ({pack['verdict']}) to instance {inst_id}",
                               "it was made by `git parallel check` for this exact attempt, revision and tip",
                               record=record, details={"instance": inst_id, "path": str(path), "sha256": sha,
                                                       "verdict": pack["verdict"]}))

    # -- picks, intent, base -----------------------------------------------------------
    def picks_and_merge(self) -> None:
        from gitflow_parallel import merge as M
        from gitflow_parallel.selection import load_pick, pick_path, winner_check

        rec = self.record
        picks: dict[str, dict[str, Any]] = {}
        for track in rec["tracks"]:
            path = pick_path(self.repo.parallel_dir, self.run_id, track)
            bound = (rec.get("picks") or {}).get(track)
            if bound and not path.exists():
                self.add(PICK_MISSING, ERROR, f"the pick record of track {track} ({path}) is gone",
                         fix=f"restore {path} from a backup; pick records are write-once")
                continue
            try:
                pick = load_pick(self.project, rec, track)
            except ParallelError as exc:
                self.add(exc.code, ERROR, exc.message, fix=exc.hint or f"git parallel status {self.task}")
                continue
            if pick is None:
                continue
            try:
                winner = find_instance(rec, pick["winner"]["id"])
            except ParallelError:
                self.add(E.PICK_SCHEMA_INVALID, ERROR,
                         f"the pick of track {track} names instance {pick['winner']['id']}, which the run does not have",
                         fix=f"restore {path}; pick records are write-once",
                         refusal=None if bound else f"the unbound pick of track {track} names no instance of the run")
                continue
            picks[track] = pick
            if not bound:
                self.bind_pick(track, path, pick)
            if rec["status"] != "merged" and not winner.get("removed"):
                ok, code, why = winner_check(self.project, rec, winner, self.project.tip(winner) or "")
                if not ok:
                    self.add(code or E.EVIDENCE_MISMATCH, ERROR,
                             f"the pick of track {track} cannot land: {why}", instance=winner["id"],
                             fix="pick records are write-once: reset the branch to the picked commit "
                                 f"(git branch -f {winner['branch']} {pick['winner']['commit']}), or start a new run")
        base_ref = rec["base"]["ref"]
        base_tip = self.repo.ref_target(base_ref)
        intent_file = M.intent_path(self.project, rec)
        if intent_file.exists():
            self.intent(intent_file, base_tip)
        elif (rec["status"] not in FINISHED_RUN and base_tip is not None and picks
              and len(picks) == len(rec["tracks"])):
            commits = [p["winner"]["commit"] for p in picks.values()]
            if (all(self.scan.contains(base_tip, c) for c in commits)
                    and not all(self.scan.contains(rec["base"]["commit"], c) for c in commits)):
                self.merged_outside(base_tip, picks)

    def bind_pick(self, track: str, path: Path, pick: dict[str, Any]) -> None:
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()

        def record(rec: dict[str, Any]) -> None:
            model.bind_pick(rec, track, path, sha, pick)

        if not self.noted(pick["winner"]["commit"], {"kind": "pick", "track": track}):
            self.will_note.append(f"pick of track {track} on the winner, once bound")
        message = (f"the pick record of track {track} (winner {pick['winner']['id']}) was written but never bound "
                   "to the run record (the pick was interrupted)")
        self.add(PICK_UNBOUND, ERROR, message,
                 repair=Repair("bind_pick", f"bind the pick of track {track} (winner {pick['winner']['id']}) "
                               "to the record", "pick records are write-once; this one validates against the run",
                               record=record, details={"track": track, "path": str(path), "sha256": sha,
                                                       "winner": pick["winner"]["id"]}))

    def _landing_record(self, landed: str, previous: str | None, steps: list[dict[str, Any]],
                        resolved: list[dict[str, Any]], worktree: str | None, source: str,
                        **extra: Any) -> dict[str, Any]:
        return model.new_merge(landed, previous, self.record["base"]["ref"], steps, resolved,
                               self.record["config"]["merge"]["policy"], utcnow(), worktree=worktree,
                               recovered={"recovery_id": self.rid, "from": source}, **extra)

    def _mark_merged(self, merge_record: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
        landed = merge_record["landed"]
        if not self.noted(landed, {"kind": "merge"}) or not all(
                self.noted(landed, {"kind": "pick", "track": t}) for t in self.record["tracks"]):
            self.will_note.append(f"pick and merge lines on the landed commit {landed[:12]}, once recorded")

        def record(rec: dict[str, Any]) -> None:
            if rec["status"] != "merged":
                model.mark_merged(rec, merge_record)
        return record

    def intent(self, path: Path, base_tip: str | None) -> None:
        from gitflow_parallel import merge as M

        rec, task, project = self.record, self.task, self.project
        try:
            intent = json.loads(path.read_text(encoding="utf-8"))
            previous, landing = intent["previous"], intent["landing"]
            if not (isinstance(previous, str) and isinstance(landing, str)):
                raise ValueError("oids are not strings")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} cannot be read ({exc})",
                     fix=f"compare {rec['base']['ref']} with the winners by hand, then remove {path}",
                     refusal=f"the merge intent {path} is unreadable, so recover cannot tell whether the base moved")
            return

        def drop() -> None:
            M.clear_intent(project, rec)

        landed_now = base_tip is not None and (base_tip == landing or self.scan.contains(base_tip, landing))
        if rec["status"] == "merged" or landed_now:
            if landed_now and base_tip == landing:
                self.base_worktree(previous, landing)
        if rec["status"] == "merged":
            self.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} outlived the merge it describes",
                     repair=Repair("remove_intent", f"remove {path.name}", "the record already says merged",
                                   after=drop, details={"path": str(path)}))
        elif landed_now:
            merge_record = self._landing_record(landing, previous, list(intent.get("steps") or []),
                                                list(intent.get("resolved_files") or []), intent.get("worktree"),
                                                "intent")
            message = (f"{rec['base']['ref']} already holds the landing {landing[:12]} of run {self.run_id} "
                       f"(moved from {previous[:12]} by `git parallel merge`), but the record is {rec['status']}")
            self.add(BASE_MERGED, ERROR, message,
                     repair=Repair("record_merged", f"record run {self.run_id} merged at {landing[:12]} "
                                   "and write its notes", "the merge intent names the commit the base now holds",
                                   record=self._mark_merged(merge_record),
                                   details={"landed": landing, "previous": previous, "from": "intent"}))
            # Last, once the record says merged: until then the intent is the proof.
            self.add(MERGE_INTENT_LEFT, ERROR, f"the merge intent {path} is left from the interrupted merge",
                     repair=Repair("remove_intent", f"remove {path.name}", "the landing it describes is recorded",
                                   after=drop, details={"path": str(path)}))
        elif base_tip == previous:
            self.add(MERGE_INTENT_LEFT, ERROR,
                     f"the merge intent {path} describes a merge that never moved {rec['base']['ref']}",
                     fix=f"git parallel recover {task}, then git parallel merge {task}",
                     repair=Repair("remove_intent", f"remove the stale {path.name}",
                                   f"{rec['base']['ref']} is still at the intent's previous commit {previous[:12]}",
                                   after=drop, details={"path": str(path)}))
        else:
            now = base_tip[:12] if base_tip else "missing"
            self.add(MERGE_INTENT_LEFT, ERROR,
                     f"the merge intent {path} says {rec['base']['ref']} was to move {previous[:12]} -> "
                     f"{landing[:12]}, but it is at {now}, which holds neither",
                     fix=f"if the base was moved on purpose, remove {path} and run git parallel recover {task}",
                     refusal=f"{rec['base']['ref']} moved to {now} after an interrupted merge; "
                             "recover cannot tell whether the landing was undone on purpose")

    def base_worktree(self, previous: str, landing: str) -> None:
        """After a crash between moving the base ref and updating its
        checkout: move a worktree still at the previous tree forward, as
        merge would have, only if git itself says nothing can be overwritten."""
        from gitflow_parallel import merge as M

        base_ref = self.record["base"]["ref"]
        wt = M.base_worktree(self.repo, base_ref)
        if wt is None:
            return
        run = self.repo.run_git
        if run(["diff-index", "--cached", "--quiet", landing, "--"], cwd=wt, check=False).returncode == 0:
            return  # the index already has the landed tree
        if run(["diff-index", "--cached", "--quiet", previous, "--"], cwd=wt, check=False).returncode != 0:
            self.add(BASE_WORKTREE_STALE, WARNING,
                     f"{wt} has {base_ref} checked out, and its index matches neither the previous tree "
                     f"{previous[:12]} nor the landed {landing[:12]}",
                     fix=f"inspect it with git -C {wt} status; git -C {wt} reset --keep {landing} updates it")
            return
        run(["update-index", "-q", "--refresh"], cwd=wt, check=False)
        dry = run(["read-tree", "-m", "-u", "-n", previous, landing], cwd=wt, check=False)
        if dry.returncode != 0:
            self.add(BASE_WORKTREE_STALE, WARNING,
                     f"{wt} still shows the tree before the merge, and updating it would overwrite local "
                     f"changes: {dry.stderr.decode(errors='replace').strip()}",
                     fix=f"commit or stash them there, then git -C {wt} read-tree -m -u {previous} {landing}")
            return

        def git() -> None:
            proc = run(["read-tree", "-m", "-u", previous, landing], cwd=wt, check=False)
            if proc.returncode != 0:
                raise ParallelError(
                    E.RECOVERY_REFUSED,
                    f"could not update {wt} to {landing[:12]}: {proc.stderr.decode(errors='replace').strip()}",
                    hint=f"commit or stash the changes there and run `git parallel recover {self.task}` again")

        self.add(BASE_WORKTREE_STALE, ERROR,
                 f"{wt} has {base_ref} checked out but still shows the tree before the merge ({previous[:12]})",
                 repair=Repair("update_base_worktree", f"update {wt} from {previous[:12]} to {landing[:12]}",
                               "its index is exactly the previous tree, and git says nothing would be overwritten",
                               phase=PHASE_BASE_WORKTREE, git=git,
                               details={"worktree": str(wt), "previous": previous, "landed": landing}))

    def merged_outside(self, base_tip: str, picks: dict[str, dict[str, Any]]) -> None:
        """The winners are on the base, landed by plain git (hooks off, or
        the manual policy): find the commit that landed them."""
        rec = self.record
        winners = [p["winner"]["commit"] for p in picks.values()]
        landed = self.scan.commit(base_tip)
        assert landed is not None
        # The oldest commit on the base's first-parent line that holds every
        # winner is where they landed; later commits were made on top.
        while landed.parents and all(self.scan.contains(str(landed.parents[0].id), w) for w in winners):
            landed = landed.parents[0]
        landed_oid = str(landed.id)
        previous = self._previous_from_reflog(landed_oid)
        if previous is None:
            if landed_oid in winners:
                previous = rec["base"]["commit"] if self.scan.contains(landed_oid, rec["base"]["commit"]) else None
            elif landed.parents:
                previous = str(landed.parents[0].id)
        steps = [{"track": t, "winner": p["winner"]["id"], "commit": p["winner"]["commit"],
                  "method": "fast-forward" if p["winner"]["commit"] == landed_oid else "merge"}
                 for t, p in picks.items()]
        if previous is not None and base_tip == landed_oid:
            # The base moved by compare-and-swap from `previous` but its
            # checkout may not have followed (a merge whose intent is gone).
            self.base_worktree(previous, landed_oid)
        # outside: landed by plain git, so git-parallel verified nothing at merge time.
        merge_record = self._landing_record(landed_oid, previous, steps, [], None, "base", outside=True)
        message = (f"{rec['base']['ref']} already holds every winner of run {self.run_id} (landed at "
                   f"{landed_oid[:12]}, not by `git parallel merge`), but the record is {rec['status']}")
        self.add(BASE_MERGED, ERROR, message,
                 repair=Repair("record_merged", f"record run {self.run_id} merged at {landed_oid[:12]} and write "
                               "its notes there", "every picked winner commit is reachable from the base",
                               record=self._mark_merged(merge_record),
                               details={"landed": landed_oid, "previous": previous, "from": "base"}))

    def _previous_from_reflog(self, landed: str) -> str | None:
        try:
            entries = list(self.repo.git.references[self.record["base"]["ref"]].log())
        except (KeyError, pygit2.GitError):
            return None
        for entry in entries:  # newest first
            if str(entry.oid_new) == landed and not str(entry.oid_old).strip("0") == "":
                return str(entry.oid_old)
        return None

    # -- notes -------------------------------------------------------------------
    def notes(self) -> None:
        missing = [] if self.rolling_back else missing_notes(self.scan, self.record)
        labels = [n.label for n in missing] + self.will_note
        ref = self.record["config"]["notes_ref"]
        if not labels:
            return
        self.add(NOTES_MISSING, ERROR,
                 f"{len(labels)} note line(s) on {ref} are missing: "
                 + "; ".join(labels[:6]) + (" …" if len(labels) > 6 else ""),
                 repair=Repair("write_notes", f"write {len(labels)} missing note line(s) in one notes commit",
                               "notes mirror the records on the commits they speak of",
                               details={"lines": labels}))


# -- repository-wide checks ---------------------------------------------------------
def _lock_files(common: Path) -> Iterator[Path]:
    for name in ("index.lock", "HEAD.lock", "packed-refs.lock"):
        if (common / name).exists():
            yield common / name
    refs = common / "refs"
    if refs.is_dir():
        yield from sorted(refs.rglob("*.lock"))
    admin = common / "worktrees"
    if admin.is_dir():
        for entry in sorted(admin.iterdir()):
            for name in ("index.lock", "HEAD.lock"):
                if (entry / name).exists():
                    yield entry / name


def lock_findings(scan: Scan, task: str | None) -> list[Finding]:
    out = []
    now = time.time()
    for path in _lock_files(scan.repo.common_dir):
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        age = now - info.st_mtime
        if age < STALE_LOCK_SECONDS:
            continue  # most likely a git command in flight
        users = scan.git_users()
        rel = path.relative_to(scan.repo.common_dir)
        fix_task = (f"git parallel recover {task}" if task
                    else f"rm {path} (git parallel recover TASK removes it too)")
        if users is None or users:
            who = ("no process table to look at" if users is None
                   else ", ".join(f"pid {p} ({cmd})" for p, cmd in users[:3]))
            out.append(Finding(LOCK_HELD, WARNING,
                               f"git lock file {rel} is {age:.0f}s old, but git may still be working here ({who})",
                               fix=f"wait for those to finish; if none is, remove {path}"))
            continue
        inode, mtime = info.st_ino, info.st_mtime

        def remove(path: Path = path, inode: int = inode, mtime: float = mtime) -> None:
            try:
                now_info = path.stat()
            except FileNotFoundError:
                return
            # Someone took the lock afresh since we looked: theirs is live.
            if now_info.st_ino == inode and now_info.st_mtime == mtime:
                path.unlink()

        out.append(Finding(STALE_LOCK, ERROR,
                           f"git lock file {rel} is {age:.0f}s old and no git process works in this repository: "
                           "a killed command left it, and git refuses to touch what it locks",
                           fix=fix_task,
                           repair=Repair("remove_lock", f"remove the stale lock {rel}",
                                         f"{age:.0f}s old, no live git process in the repository",
                                         phase=PHASE_LOCKS, git=remove, details={"path": str(path)})))
    return out


def _all_records(project: Project) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[ParallelError]]:
    """Live records, retired (runs/done/) records, and the errors of those that do not load."""
    live, problems = project.store.load_all()
    done = []
    if project.store.done_dir.is_dir():
        for path in sorted(project.store.done_dir.glob("*.yaml")):
            try:
                done.append(project.store.read(path))
            except (ParallelError, FileNotFoundError):
                continue
    return live, done, problems


def orphan_findings(scan: Scan, records: list[dict[str, Any]], task: str | None) -> list[Finding]:
    """Branches parallel/<task>/* and admin folders parallel-<task>-* that no
    record (live, or retired with the instance kept) accounts for."""
    repo = scan.repo
    known_branches, known_admin = set(), set()
    for rec in records:
        for inst in rec["instances"]:
            if not inst.get("removed"):
                known_branches.add(f"refs/heads/{inst['branch']}")
                known_admin.add(worktrees.admin_name(rec["task"], inst["id"]))
    # A task whose record exists but does not load is not "no record": its
    # branches may hold unarchived work, and the broken record is reported
    # on its own (PARALLEL_RECORD_INVALID), so none of it is called an orphan.
    loaded = {rec["task"] for rec in records}
    unreadable = {t for t in scan.project.store.tasks() if t not in loaded}
    out = []
    prefix = f"refs/heads/parallel/{task}/" if task else "refs/heads/parallel/"
    for name, oid in sorted(repo.refs_under(prefix)):
        short = name[len("refs/heads/"):]
        if name in known_branches or short.split("/")[1] in unreadable:
            continue
        out.append(Finding(ORPHAN, ERROR,
                           f"branch {short} (at {oid[:12]}) belongs to no run record",
                           fix=f"inspect it (git log {short}); keep it under another name or delete it "
                               f"(git branch -D {short})",
                           task=short.split("/")[1] if short.count("/") >= 2 else None,
                           refusal=f"branch {short} has no run record; recover does not delete work it cannot place"))
    admin_root = repo.common_dir / "worktrees"
    if admin_root.is_dir():
        for admin in sorted(admin_root.iterdir()):
            name = admin.name
            if not name.startswith(worktrees.admin_name(task, "") if task else "parallel+") or name in known_admin:
                continue
            if any(name.startswith(worktrees.admin_name(t, "")) for t in unreadable):
                continue
            back = _read_text(admin / "gitdir")
            target = Path(back) if back else None
            if target is not None and target.exists():
                out.append(Finding(ORPHAN, ERROR,
                                   f"worktree {target.parent} (admin {name}) belongs to no run record",
                                   fix=f"look at it, then git worktree remove {target.parent}",
                                   refusal=f"worktree {target.parent} has no run record; it may hold work"))
                continue

            def prune(admin: Path = admin) -> None:
                shutil.rmtree(admin, ignore_errors=True)

            out.append(Finding(ORPHAN, ERROR,
                               f"worktree admin folder {name} belongs to no run record and its worktree is gone",
                               fix="git worktree prune",
                               repair=Repair("prune_admin", f"remove the dangling worktree admin folder {name}",
                                             "its worktree folder no longer exists (what `git worktree prune` does)",
                                             git=prune, details={"admin": str(admin)})))
    return out


def intent_findings(project: Project, live: list[dict[str, Any]], done: list[dict[str, Any]]) -> list[Finding]:
    folder = project.repo.parallel_dir / "merges"
    if not folder.is_dir():
        return []
    live_ids = {r["run_id"] for r in live}
    done_by_id = {r["run_id"]: r for r in done}
    out = []
    for path in sorted(folder.glob("*.intent.json")):
        run_id = path.name[: -len(".intent.json")]
        if run_id in live_ids:
            continue  # inspected with its run
        old = done_by_id.get(run_id)
        state = f"its run is retired as {old['status']}" if old else "no record names its run"
        out.append(Finding(MERGE_INTENT_LEFT, WARNING, f"merge intent {path} is left over: {state}",
                           fix=f"rm {path}", run_id=run_id))
    return out


# -- validate ------------------------------------------------------------------------
def validate(project: Project, task: str | None = None) -> dict[str, Any]:
    """Every inconsistency, as findings; ``ok`` is False when any is an error."""
    if task is not None:
        check_name(task, "task")
    scan = Scan(project)
    live, done, problems = _all_records(project)
    findings: list[Finding] = []
    for exc in problems:
        path_task = _task_of_problem(exc)
        if task is None or path_task == task:
            findings.append(Finding(E.RECORD_INVALID, ERROR, exc.message, exc.hint or "", task=path_task))
    checked = [r for r in live if task is None or r["task"] == task]
    for rec in checked:
        findings += _RunCheck(scan, rec).run()
    orphans = orphan_findings(scan, live + done, task)
    findings += orphans
    if task is None:
        findings += intent_findings(project, live, done)
    findings += lock_findings(scan, task)
    if task is not None and not checked and not orphans and not any(f.code == E.RECORD_INVALID for f in findings):
        project.store.load(task)  # raises PARALLEL_RUN_NOT_FOUND with its hint
    errors = sum(1 for f in findings if f.severity == ERROR)
    return {"ok": errors == 0, "task": task, "errors": errors, "warnings": len(findings) - errors,
            "runs": [{"task": r["task"], "run_id": r["run_id"], "status": r["status"],
                      "run_revision": r["run_revision"]} for r in checked],
            "findings": [f.as_json() for f in findings]}


def _task_of_problem(exc: ParallelError) -> str | None:
    match = re.search(r"runs/([^/\s]+)\.yaml", exc.message)
    return match.group(1) if match else None


# -- recover --------------------------------------------------------------------------
def _audit(project: Project, run_id: str, rid: str, record: dict[str, Any] | None, task: str, action: str,
           **fields: Any) -> None:
    append_jsonl(audit_path(project, run_id), {
        "schema_version": AUDIT_SCHEMA, "origin": ORIGIN, "recovery_id": rid, "run_id": run_id, "task": task,
        "run_revision": record["run_revision"] if record else fields.pop("run_revision", None),
        "action": action, "at": utcnow(), **fields,
    })


def _refuse_unloadable(project: Project, task: str, exc: ParallelError) -> ParallelError:
    """A record that does not load cannot be reconciled; say so, in its audit
    log if its run id can still be read."""
    try:
        raw = yaml.safe_load(project.store.path(task).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        raw = None
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    if isinstance(run_id, str) and re.fullmatch(r"PR-[0-9a-f-]{36}", run_id):
        rev = raw.get("run_revision") if isinstance(raw.get("run_revision"), int) else 0
        _audit(project, run_id, recovery_id(run_id, rev), None, task, "refused", run_revision=rev,
               what="load the run record", why=exc.message)
    return ParallelError(
        E.RECOVERY_REFUSED,
        f"cannot recover {task!r}: {exc.message}",
        hint="the record itself is damaged; restore it from a backup (recover never rewrites what it cannot read)",
    )


def recover(project: Project, task: str, dry_run: bool = False) -> dict[str, Any]:
    """Repair what a crash left, or refuse and change nothing."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        try:
            record = store.load(task)
        except ParallelError as exc:
            if exc.code == E.RECORD_INVALID:
                raise _refuse_unloadable(project, task, exc) from None
            if exc.code != E.RUN_NOT_FOUND:
                raise
            live, done, _ = _all_records(project)
            orphans = orphan_findings(Scan(project), live + done, task)
            if not orphans:
                raise
            raise ParallelError(
                E.RECOVERY_REFUSED,
                f"task {task!r} has no run record, but git holds leftovers named after it: "
                + "; ".join(f.message for f in orphans),
                hint="; ".join(dict.fromkeys(f.fix for f in orphans)),
                findings=[f.as_json() for f in orphans],
            ) from None
        scan = Scan(project)
        check = _RunCheck(scan, record)
        findings = check.run() + lock_findings(scan, task)
        live, done, _ = _all_records(project)
        findings += [f for f in orphan_findings(scan, live + done, task) if f.repair or f.refusal]
        rid, run_id = check.rid, record["run_id"]
        refused = [f for f in findings if f.refusal]
        repairs = [f.repair for f in findings if f.repair is not None]
        left = [f for f in findings if f.repair is None and f.refusal is None]
        base = {"task": task, "run_id": run_id, "recovery_id": rid, "run_revision": record["run_revision"],
                "dry_run": dry_run, "audit": str(audit_path(project, run_id))}
        if refused:
            if not dry_run:
                _audit(project, run_id, rid, record, task, "refused",
                       what="recover", why="; ".join(f.refusal or "" for f in refused),
                       findings=[f.as_json() for f in refused])
            raise ParallelError(
                E.RECOVERY_REFUSED,
                f"recover of {task!r} cannot decide {len(refused)} thing(s), so nothing was changed: "
                + "; ".join(f.refusal or "" for f in refused),
                hint="; ".join(dict.fromkeys(f.fix for f in refused)),
                recovery_id=rid, findings=[f.as_json() for f in refused],
            )
        left_json = [f.as_json() for f in left] + _left_instances(record)
        if not repairs:
            if not dry_run:
                _audit(project, run_id, rid, record, task, "idempotent_noop",
                       what="recover", why="nothing to repair: the records agree with git",
                       left=[f["message"] for f in left_json])
            return {**base, "noop": True, "plan": [], "repaired": [], "left": left_json,
                    "next": _next_steps(record)}
        repairs = _in_order(repairs)
        plan = [r.as_json() for r in repairs]
        if dry_run:
            return {**base, "noop": False, "plan": plan, "repaired": [], "left": left_json, "next": []}
        _audit(project, run_id, rid, record, task, "validated", what="plan",
               why="every candidate repair was decided before any change", plan=plan)
        try:
            done_steps = _apply(project, record, rid, repairs)
        except BaseException as exc:
            # Every step is idempotent, so what was done stays done and the
            # next recover picks up from there; the log says where it stopped.
            why = exc.message if isinstance(exc, ParallelError) else f"{type(exc).__name__}: {exc}"
            _audit(project, run_id, rid, record, task, "refused", what="apply the plan",
                   why=f"a step failed, the steps logged before it are done: {why}")
            raise
        record = store.load(task)
        left_json = [f.as_json() for f in left] + _left_instances(record)
        return {**base, "noop": False, "plan": plan, "repaired": done_steps, "left": left_json,
                "run_revision_after": record["run_revision"], "status": record["status"],
                "next": _next_steps(record)}


def _in_order(repairs: list[Repair]) -> list[Repair]:
    """The order ``_apply`` completes (and logs) the steps in: git-only steps
    by phase, then those that change the record, the notes, and last the
    files removed once the record no longer needs them."""
    def key(r: Repair) -> tuple[int, int]:
        if r.after is not None:
            return (3, 0)
        if r.step == "write_notes":
            return (2, 0)
        if r.record is not None:
            return (1, 0)
        return (0, r.phase)
    return sorted(repairs, key=key)


def _apply(project: Project, record: dict[str, Any], rid: str, repairs: list[Repair]) -> list[dict[str, Any]]:
    task, run_id = record["task"], record["run_id"]
    started = record  # every line of this recovery names the revision it started from
    done: list[dict[str, Any]] = []

    def log(r: Repair, **extra: Any) -> None:
        entry = {**r.as_json(), **extra}
        done.append(entry)
        _audit(project, run_id, rid, started, task, "repaired", **entry)

    for r in sorted((r for r in repairs if r.git is not None), key=lambda r: r.phase):
        assert r.git is not None
        r.git()
        if r.record is None:
            log(r)
    recorded = [r for r in repairs if r.record is not None]
    if recorded:
        def mutate(rec: dict[str, Any]) -> None:
            for r in recorded:
                assert r.record is not None
                r.record(rec)

        new, _ = project.store.update(task, mutate, expected_revision=record["run_revision"])
        for r in recorded:
            log(r, run_revision_after=new["run_revision"])
        record = new
    scan = Scan(project)
    missing = missing_notes(scan, record)
    if missing:
        oid = project.add_notes(record, [(n.commit, n.line) for n in missing], f"recover {rid}")
        note_step = next((r for r in repairs if r.step == "write_notes"), None) or Repair(
            "write_notes", f"write {len(missing)} note line(s) in one notes commit",
            "the repairs above changed what the records say")
        note_step.details = {"lines": [n.label for n in missing], "notes_commit": oid}
        log(note_step)
    for r in repairs:
        if r.after is not None:
            r.after()
            log(r)
    return done


def _left_instances(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Failed and aborted instances are consistent, but they are what a user
    most likely wants to act on next; recover never retries them."""
    if record["status"] in FINISHED_RUN:
        return []
    return [{"code": E.BRANCH_TERMINAL, "severity": "info", "task": record["task"], "run_id": record["run_id"],
             "instance": i["id"], "message": f"instance {i['id']} is {i['status']}: {i.get('error') or 'no reason recorded'}",
             "fix": f"git parallel retry {record['task']} {i['id']}", "repair": None, "refusal": None}
            for i in record["instances"] if i["status"] in ("failed", "aborted") and not i.get("removed")]


def _next_steps(record: dict[str, Any]) -> list[str]:
    task, status = record["task"], record["status"]
    if status == "merged":
        if any(not i.get("removed") for i in record["instances"]):
            return [f"git parallel cleanup {task}"]
        return [f"git parallel spawn {task}"]
    if status == "aborted":
        return [f"git parallel spawn {task}"]
    if status == "picked":
        return [f"git parallel merge {task}"]
    if any(i["status"] == "pending" for i in record["instances"]):
        return [f"git parallel run {task} -- CMD"]
    if any(i["status"] == "succeeded" for i in record["instances"]):
        return [f"git parallel check {task}", f"git parallel pick {task}"]
    return [f"git parallel retry {task} ID"]
