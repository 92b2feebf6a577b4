"""Which refs a judged command's git view shows (``git/judged_view``):
branches, tags and remote-tracking refs, never an attempt's, and nothing
else.  Found after round five: the view hid refs by name, so a copy of an
attempt branch under any other name was packed as history, and the code
judged ran its sibling's commit:

- a fetch with a refspec of one's own (``+refs/heads/*:refs/mirror/*``,
  as a backup of every branch is often made);
- ``git stash`` in an attempt's worktree (``refs/stash`` is shared by
  every worktree, and a stash commit's parent is the attempt's tip)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from gitflow_parallel.git import judged_view
from hostile import needs_namespace
from test_hostile import project
from test_judged_git_view import BORROWER
from test_redteam_round5 import _checked, _honest_and_borrower

pytestmark = pytest.mark.slow


def test_only_branches_tags_and_remote_tracking_refs_are_shown() -> None:
    shown = ["refs/heads/main", "refs/heads/feature/x", "refs/tags/v1.0", "refs/remotes/origin/main"]
    hidden = ["refs/heads/parallel/t/2", "refs/remotes/origin/parallel/t/2", "refs/remotes/b/heads/parallel/t/2",
              "refs/mirror/parallel/t/2", "refs/mirror/main", "refs/stash", "refs/original/refs/heads/main",
              "refs/replace/" + "0" * 40, "refs/notes/parallel", "refs/parallel/archive/r/1/0",
              "refs/parallel-remotes/origin/claims/r/1", "refs/bisect/bad"]
    assert [n for n in shown if judged_view.hidden(n)] == []
    assert [n for n in hidden if not judged_view.hidden(n)] == []


@needs_namespace
def test_a_mirror_of_every_branch_is_not_in_the_view(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    git(repo, "fetch", "-q", ".", "+refs/heads/*:refs/mirror/*")
    assert git(repo, "rev-parse", "refs/mirror/parallel/t/2").strip() == git(repo, "rev-parse", "parallel/t/2").strip()
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (a mirror ref)"


@needs_namespace
def test_a_stash_made_in_a_siblings_worktree_is_not_in_the_view(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    two = Path(next(i["worktree"] for i in gp.json("status", "t")["run"]["instances"] if i["id"] == "2"))
    (two / "scratch.txt").write_text("a person's note\n")
    git(two, "stash", "-q", "--include-untracked")
    assert git(repo, "rev-parse", "refs/stash^").strip() == git(repo, "rev-parse", "parallel/t/2").strip()
    checked = _checked(gp)
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (refs/stash)"
