"""Git-side steps of repairs: make, clear or take apart an instance's
worktree and branch, keeping every tip that holds work.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from gitflow_parallel.model import InstanceRecord
from gitflow_parallel import errors as E
from gitflow_parallel.files import remove_tree, tree_entries
from gitflow_parallel.git import worktrees
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.state.project import Project
from gitflow_parallel.recovery.scan import Scan, WorktreeState


# -- small helpers ------------------------------------------------------------------
def only_files_of(path: Path, tree: pygit2.Tree | None) -> list[str]:
    """Files under ``path`` that are not byte-identical to ``tree``'s entry
    (the worktree's own ``.git`` file aside); empty means removing the folder
    loses nothing that is not in the commit."""
    foreign: list[str] = []
    # Walked without recursion: the attempt's tree may be deeper than Python's limit.
    for item, rel in tree_entries(path, prune=lambda rel: rel == ".git"):
        if rel == ".git" or (item.is_dir(follow_symlinks=False) and not item.is_symlink()):
            continue
        try:
            entry = tree[rel] if tree is not None else None
        except KeyError:
            entry = None
        if entry is None:
            foreign.append(rel)
            continue
        try:
            data = os.readlink(item.path).encode() if item.is_symlink() else Path(item.path).read_bytes()
        except OSError:
            foreign.append(rel)
            continue
        if str(pygit2.hash(data)) != str(entry.id):
            foreign.append(rel)
    return sorted(foreign)


def attach_worktree(project: Project, task: str, inst: InstanceRecord) -> None:
    """Make the worktree of an instance whose branch exists (the branch keeps
    its commits; the folder and admin entry are made fresh)."""
    repo = project.repo
    name = worktrees.admin_name(task, inst["id"])
    admin = repo.common_dir / "worktrees" / name
    path = Path(inst["worktree"])
    if admin.exists():
        remove_tree(admin)
    if os.path.lexists(path):
        remove_tree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    (repo.common_dir / "worktrees").mkdir(exist_ok=True)
    try:
        repo.pygit.add_worktree(name, str(path), repo.pygit.branches.local[inst["branch"]])
    except (pygit2.GitError, KeyError, ValueError) as exc:
        raise ParallelError(
            E.WORKTREE_CREATE_FAILED,
            f"could not make the worktree of instance {inst['id']} at {path}: {exc}",
            hint=f"remove what is in the way and run `git parallel recover {task}` again",
        ) from None


def clear_partial(st: WorktreeState) -> None:
    """Remove a half-made worktree folder and admin entry (checked to hold
    nothing beyond the commit's files when the plan was made)."""
    if st.admin.exists():
        remove_tree(st.admin)
    if os.path.lexists(st.path):
        remove_tree(st.path) if st.path.is_dir() and not st.path.is_symlink() else st.path.unlink()


def dismantle_instance(project: Project, scan: "Scan", run_id: str, task: str, inst: InstanceRecord,
               skip_archive: str | None = None) -> None:
    """Take apart what is left of an instance that is not a usable worktree:
    archive its branch tip (unless it is ``skip_archive``), clear the partial
    folder and admin entry, delete the branch by compare-and-swap."""
    tip = project.tip(inst)
    if tip is not None and tip != skip_archive:
        worktrees.archive(project.repo, run_id, inst["id"], inst["attempt"], tip)
    clear_partial(scan.worktree(task, inst))
    if tip is not None:
        project.repo.delete_ref(f"refs/heads/{inst['branch']}", expected=tip)
    _remove_empty_parent(Path(inst["worktree"]))


def _remove_empty_parent(path: Path) -> None:
    try:
        path.parent.rmdir()
    except OSError:
        pass
