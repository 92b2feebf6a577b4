"""What one inspection reads, and the findings it yields.

``Scan`` holds read-only views of the repository (worktrees, commits, notes,
the git processes working in it) shared by every check of one command;
``Finding`` and ``Repair`` are what a check reports and what recover would
do about it; ``required_notes`` lists every note line the records say
should exist (each built by ``provenance``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pygit2

from gitflow_parallel.model import InstanceRecord, RunRecord
from gitflow_parallel import evidence, provenance
from gitflow_parallel.git import notes, worktrees
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import read_gitdir_file
from gitflow_parallel.state.project import Project, notes_instance_on


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
    record: Callable[[RunRecord], None] | None = None
    after: Callable[[], None] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
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

    def as_json(self) -> dict[str, object]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "fix": self.fix,
                "task": self.task, "run_id": self.run_id, "instance": self.instance,
                "repair": self.repair.what if self.repair else None, "refusal": self.refusal}


def recovery_id(run_id: str, run_revision: int) -> str:
    """The same run at the same revision always gets the same recovery id."""
    return "RC-" + hashlib.sha256(f"{run_id}:{run_revision}".encode()).hexdigest()[:24]


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


def text_of(path: Path) -> str | None:
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

    def worktree(self, task: str, inst: InstanceRecord) -> WorktreeState:
        path = Path(inst["worktree"])
        admin = self.repo.common_dir / "worktrees" / worktrees.admin_name(task, inst["id"])
        gitfile = read_gitdir_file(path / ".git") if (path / ".git").is_file() else None
        back = text_of(admin / "gitdir")
        linked = (gitfile is not None and _same_path(gitfile, admin)
                  and back is not None and _same_path(back, path / ".git"))
        return WorktreeState(
            path=path, admin=admin, tip=self.project.tip(inst), path_exists=os.path.lexists(path),
            linked=linked, head_ok=text_of(admin / "HEAD") == f"ref: refs/heads/{inst['branch']}",
            index_ok=(admin / "index").is_file(),
        )

    def commit(self, oid: str | None) -> pygit2.Commit | None:
        if not oid:
            return None
        try:
            obj = self.repo.pygit.get(oid)
        except (ValueError, pygit2.GitError):
            return None
        return obj if isinstance(obj, pygit2.Commit) else None

    def contains(self, descendant: str, ancestor: str) -> bool:
        try:
            return self.repo.is_ancestor(ancestor, descendant)
        except (ValueError, pygit2.GitError, KeyError):
            return False

    def notes_on(self, notes_ref: str, oid: str) -> list[dict[str, object]]:
        return notes.records(self.repo.pygit, notes_ref, oid)

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
                back = text_of(admin / "gitdir")
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


# -- notes ----------------------------------------------------------------------------
@dataclass
class NoteNeed:
    commit: str
    line: str
    key: dict[str, Any]  # fields an existing line must share to count as this one
    label: str


def required_notes(scan: Scan, record: RunRecord) -> list[NoteNeed]:
    """Every note line the records say should exist, per SPEC: the instance
    line on each tip, evidence lines on checked commits, the pick line on each
    winner commit, and for a merged run the pick and merge lines on the
    landed commit."""
    from gitflow_parallel.state.picks import load_pick

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
            if tip and notes_instance_on(record, tip, inst):
                needs.append(NoteNeed(tip, provenance.instance_note(record, inst, tip),
                                      {"kind": "instance", "run_id": run_id, "instance": inst["id"],
                                       "attempt": inst["attempt"], "commit": tip},
                                      f"instance {inst['id']} on its tip {tip[:12]}"))
        binding, pack = inst.get("evidence"), evidence.load(inst)
        if binding and pack is not None and scan.commit(pack.get("commit")) is not None:
            sha = binding["sha256"]
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


def missing_notes(scan: Scan, record: RunRecord) -> list[NoteNeed]:
    ref = record["config"]["notes_ref"]
    cache: dict[str, list[dict[str, object]]] = {}
    out = []
    for need in required_notes(scan, record):
        have = cache.setdefault(need.commit, scan.notes_on(ref, need.commit))
        if not any(all(h.get(k) == v for k, v in need.key.items()) for h in have):
            out.append(need)
    return out
