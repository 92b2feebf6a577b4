"""What the hooks check before they vouch for an update that brings in a
picked winner (``commands/hook_impl``): that the commit landing carries the
tree a clean merge of its parents gives, and that no commit brought in is a
copy (same ``git patch-id``) of a change of an attempt that lost its pick.

The first catches a merge commit that names the winner as a parent but
carries other files (``git merge --no-commit`` then edits, ``-s ours``);
paths the merge leaves conflicted are the person's to resolve and are not
compared, and an octopus whose clean merge conflicts is refused.  The
second catches a cherry-pick or a squash of a losing attempt's commit or
whole change, from the ``lost`` lines of the live index (``state/live``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitflow_parallel.git import plain
from gitflow_parallel.state.live import LiveRun

if TYPE_CHECKING:  # imported where a tree is checked: a loser's copy is found without it
    import pygit2


# What the commit's tree was compared with, for the hooks' messages.
BY_GIT = "the merge git makes of its parents"
BY_PYGIT2 = "the clean in-memory merge of its parents"


@dataclass
class TreeCheck:
    differs: list[str]  # paths where the commit's tree is not the merge's
    conflicted: list[str]  # paths the merge leaves conflicted (not compared)
    unmergeable: bool = False  # an octopus whose clean merge conflicts
    compared_with: str = BY_PYGIT2


def _entries(index: pygit2.Index, skip: set[str]) -> dict[str, tuple[str, int]]:
    return {e.path: (str(e.id), e.mode) for e in index if e.path not in skip}


def _clean_merge(repo: pygit2.Repository, parents: list[str]) -> tuple[pygit2.Index, set[str], bool]:
    """The index a clean merge of ``parents`` (first one ours) gives, its
    conflicted paths, and whether an octopus step conflicted."""
    import pygit2

    first, rest = pygit2.Oid(hex=parents[0]), [pygit2.Oid(hex=p) for p in parents[1:]]
    index = repo.merge_commits(first, rest[0])
    done = [first, rest[0]]
    for nxt in rest[1:]:
        if index.conflicts:
            return index, set(), True
        ancestor = repo.merge_base_many([nxt, *done])
        base_tree = repo[ancestor if ancestor else repo.TreeBuilder().write()].peel(pygit2.Tree)
        index = repo.merge_trees(base_tree, repo[index.write_tree(repo)].peel(pygit2.Tree), repo[nxt].peel(pygit2.Tree))
        done.append(nxt)
    conflicted = {(a or o or t).path for a, o, t in index.conflicts} if index.conflicts else set()
    return index, conflicted, False


def check_tree(repo: pygit2.Repository, tree: str, parents: list[str]) -> TreeCheck:
    """Compare ``tree`` with the merge of ``parents`` (for one parent: its
    tree, so that only the exact commit or a merge of it passes).  Two
    parents are merged by git itself (``plain.merge_tree``), so a conflict
    git reports - a folder the winner moved, where the base added a file -
    is the person's to resolve as with any merge; an octopus, or a git
    before 2.38, by pygit2, whose rename handling differs from git's."""
    import pygit2

    conflicted: set[str]
    by_git = plain.merge_tree(parents[0], parents[1]) if len(parents) == 2 else None
    compared_with = BY_PYGIT2
    if by_git is not None:
        expected_index, conflicted, octopus = pygit2.Index(), set(by_git[1]), False
        expected_index.read_tree(repo[by_git[0]].peel(pygit2.Tree))
        compared_with = BY_GIT
    elif len(parents) == 1:
        expected_index, conflicted, octopus = pygit2.Index(), set(), False
        expected_index.read_tree(repo[parents[0]].peel(pygit2.Tree))
    else:
        expected_index, conflicted, octopus = _clean_merge(repo, parents)
    if octopus:
        return TreeCheck([], [], unmergeable=True)
    actual = pygit2.Index()
    actual.read_tree(repo[tree].peel(pygit2.Tree))
    expected, got = _entries(expected_index, conflicted), _entries(actual, conflicted)
    differs = sorted(p for p in set(expected) | set(got) if expected.get(p) != got.get(p))
    return TreeCheck(differs, sorted(conflicted), compared_with=compared_with)


@dataclass
class Copy:
    commit: str  # the commit brought in
    patch_id: str
    run: LiveRun
    instance: str  # the losing instance
    original: str  # its commit with that patch (its head: its whole change)


def loser_copy(runs: list[LiveRun], brought: list[str], skip: set[str]) -> Copy | None:
    """The first commit of ``brought`` (but ``skip``: instance commits,
    judged by their own rule) whose patch-id is a losing attempt's."""
    lost = {pid: run for run in runs for pid in run.lost}
    if not lost:
        return None
    for commit, pid in plain.patch_ids([c for c in brought if c not in skip]).items():
        if pid in lost:
            run = lost[pid]
            inst, original = run.lost[pid]
            return Copy(commit, pid, run, inst, original)
    return None
