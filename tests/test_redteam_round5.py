"""Red team, round five: the git a judged command sees (``git/judged_view``)
and what else of the common dir a gate reads under the namespace layer.

Each test runs one route as the agent or as the attempt's committed code
and asserts the promise, so a working attack fails the test.  Routes that
still work are marked ``xfail(strict=True)`` with the fix they need."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from hostile import needs_namespace
from test_hostile import HONEST, project
from test_judged_git_view import BORROWER

pytestmark = pytest.mark.slow


def _checked(gp, task: str = "t") -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {i["id"]: i for i in gp.json("check", task, code=None)["instances"]}


def _honest_and_borrower(tmp_path: Path, gp, borrower: str) -> None:  # type: ignore[no-untyped-def]
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    (tmp_path / "borrower.py").write_text(borrower)
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'borrower.py'} app.py && git commit -qam borrowed")


# -- 1. a remote-tracking ref of an attempt branch is "history" ----------------------

@needs_namespace
def test_a_remote_tracking_copy_of_a_siblings_branch_is_not_in_the_view(tmp_path: Path) -> None:
    """``collect`` (and a worker, and any ``git fetch`` of a remote the
    attempts were published to) keeps attempt branches at
    ``refs/remotes/<remote>/parallel/...`` and claims and evidence at
    ``refs/parallel-remotes/...``: neither is in ``judged_view.HIDDEN``, so
    the judged view packed the sibling's commit as history."""
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "refs/heads/parallel/t/2:refs/heads/parallel/t/2")
    git(repo, "fetch", "-q", "origin")
    assert git(repo, "rev-parse", "origin/parallel/t/2").strip() == git(repo, "rev-parse", "parallel/t/2").strip()
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (remote-tracking ref)"


@needs_namespace
def test_a_tracking_ref_under_parallel_remotes_is_not_in_the_view(tmp_path: Path) -> None:
    """The same through ``refs/parallel-remotes/<remote>/...`` (where
    ``collect`` keeps claims, whose commits carry the attempt's tip as a
    parent, and evidence)."""
    repo, gp = project(tmp_path)
    _honest_and_borrower(tmp_path, gp, BORROWER)
    tip = git(repo, "rev-parse", "parallel/t/2").strip()
    git(repo, "update-ref", "refs/parallel-remotes/origin/claims/run/2", tip)
    checked = _checked(gp)
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code (parallel-remotes)"
