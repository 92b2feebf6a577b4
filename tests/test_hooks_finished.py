"""The hooks after a run ends: the losers of a merged or aborted run stay
refused to plain git (`git merge`, `git merge --ff-only`, `git cherry-pick`)
until `git parallel prune` removes the run's refs; the winner's commits and
unrelated branches go on merging."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git
from test_hooks import _spy, agent, common_dir, proc, setup, spawn, tip

REFUSED = "error[PARALLEL_DEV_SELECTION_NO_PASS]"


def archived(repo: Path, run_id: str, inst: str) -> str:
    return tip(repo, f"refs/parallel/archive/{run_id}/{inst}/0")


def assert_refused(result: object, *words: str) -> None:
    stderr = getattr(result, "stderr")
    assert getattr(result, "returncode") != 0, stderr
    assert REFUSED in stderr, stderr
    assert "git parallel prune" in stderr, stderr  # the command that lifts it
    for word in words:
        assert word in stderr, stderr


@pytest.mark.slow  # a whole flow of about 4 s; the default tier keeps under 150 s
def test_losers_of_a_merged_run_are_refused_until_it_is_pruned(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 2)
    # The winner and the loser change different files, so that a copy of the
    # loser applies cleanly on top of the landed winner.
    agent(gp, "t", "1", "one.txt=one")
    agent(gp, "t", "2", "result.txt=bad two")
    gp("check", "t", code=1)  # instance 2 fails its gate
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    start, winner = tip(repo, "main"), tip(repo, "parallel/t/1")
    gp.json("merge", "t")
    landed = tip(repo, "main")
    assert not git(repo, "branch", "--list", "parallel/t/*")  # the losers' branches are gone
    loser = archived(repo, run["run_id"], "2")

    merged = proc(repo, "merge", "--no-ff", "-m", "merge loser", loser)
    assert_refused(merged, "instance 2 of task 't'", run["run_id"], "merged", "lost")
    git(repo, "merge", "--abort")
    # A copy of its change: a cherry-pick onto the base.
    picked = proc(repo, "cherry-pick", loser)
    assert_refused(picked, "patch-id")
    git(repo, "cherry-pick", "--abort")
    assert tip(repo, "main") == landed
    # Into any branch, and by a branch made from it.
    git(repo, "checkout", "-q", "-b", "other", start)
    git(repo, "branch", "old-two", loser)
    assert_refused(proc(repo, "merge", "--no-ff", "-m", "merge loser", "old-two"), "merging old-two")
    git(repo, "merge", "--abort")

    # The winner's own commit still merges elsewhere, and unrelated work merges too.
    won = proc(repo, "merge", "--no-ff", "-m", "merge winner", winner)
    assert won.returncode == 0, won.stderr
    git(repo, "checkout", "-q", "-b", "feature", "main")
    (repo / "feature.txt").write_text("feature\n")
    git(repo, "add", "feature.txt")
    git(repo, "commit", "-q", "-m", "feature")
    git(repo, "checkout", "-q", "main")
    plain = proc(repo, "merge", "--no-ff", "-m", "merge feature", "feature")
    assert plain.returncode == 0, plain.stderr

    # Pruned: the run's refs are gone, and so is its guard.
    gp("prune", "--older-than", "0")
    assert not (common_dir(repo) / "parallel" / "live").exists()
    after = proc(repo, "merge", "--no-ff", "-m", "merge loser", "old-two")
    assert after.returncode == 0, after.stderr


def test_instances_of_an_aborted_run_are_refused_until_it_is_pruned(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 2)
    agent(gp, "t", "1", "result.txt=good one")
    agent(gp, "t", "2", "result.txt=good two", "two.txt=two")
    gp("abort", "t")
    base = tip(repo, "main")
    one, two = archived(repo, run["run_id"], "1"), archived(repo, run["run_id"], "2")
    assert git(repo, "rev-parse", f"{one}^") == base  # nothing landed: a fast-forward is possible

    ff = proc(repo, "merge", "--ff-only", one)
    assert_refused(ff, "instance 1 of task 't'", "aborted", "main stays at")
    git(repo, "reset", "-q", "--merge")
    assert tip(repo, "main") == base
    merged = proc(repo, "merge", "--no-ff", "-m", "merge two", two)
    assert_refused(merged, "instance 2 of task 't'", "aborted")
    git(repo, "merge", "--abort")
    assert tip(repo, "main") == base

    # An ordinary commit on the base still passes; a copy of a loser on top does not.
    (repo / "notes.txt").write_text("base work\n")
    git(repo, "add", "notes.txt")
    assert proc(repo, "commit", "-q", "-m", "ordinary").returncode == 0
    ordinary = tip(repo, "main")
    picked = proc(repo, "cherry-pick", two)
    assert_refused(picked, "patch-id", "aborted")
    git(repo, "cherry-pick", "--abort")
    assert tip(repo, "main") == ordinary

    gp("prune", "--older-than", "0")
    assert not (common_dir(repo) / "parallel" / "live").exists()
    after = proc(repo, "merge", "--no-ff", "-m", "merge two", two)
    assert after.returncode == 0, after.stderr


@pytest.mark.slow  # a whole flow of about 4 s; the default tier keeps under 150 s
def test_a_new_run_of_the_task_keeps_the_old_runs_losers_refused(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    old = spawn(gp, "t", 2)
    agent(gp, "t", "1", "result.txt=good one")
    agent(gp, "t", "2", "result.txt=good two")
    gp("abort", "t")
    loser = archived(repo, old["run_id"], "2")
    new = spawn(gp, "t", 1)  # the old record goes to runs/done/, its lines stay in the index
    assert (common_dir(repo) / "parallel" / "runs" / "done" / f"{old['run_id']}.yaml").is_file()
    assert_refused(proc(repo, "merge", "--ff-only", loser), "instance 2 of task 't'", old["run_id"], "aborted")
    git(repo, "reset", "-q", "--merge")

    gp("prune", "--older-than", "0")  # the old run only: the new one is live
    live = (common_dir(repo) / "parallel" / "live").read_text()
    assert old["run_id"] not in live and new["run_id"] in live
    after = proc(repo, "merge", "--ff-only", loser)
    assert after.returncode == 0, after.stderr


def _branch_with_commit(repo: Path, name: str, start: str) -> str:
    git(repo, "checkout", "-q", "-b", name, start)
    (repo / f"{name}.txt").write_text(f"{name}\n")
    git(repo, "add", f"{name}.txt")
    git(repo, "commit", "-q", "-m", name)
    git(repo, "checkout", "-q", "main")
    return tip(repo, name)


@pytest.mark.slow  # a whole flow of about 4 s; the default tier keeps under 150 s
def test_with_only_finished_runs_sh_decides_what_brings_no_loser_in(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 2)
    agent(gp, "t", "1", "one.txt=one")
    agent(gp, "t", "2", "result.txt=bad two")
    gp("check", "t", code=1)
    gp("pick", "t")
    gp("merge", "t")
    loser = archived(repo, run["run_id"], "2")
    log = _spy(repo / ".git" / "hooks", tmp_path)

    # A merge commit on the base, a fast-forward of it, a merge elsewhere: no Python.
    _branch_with_commit(repo, "feature", "main")
    assert proc(repo, "merge", "-q", "--no-ff", "-m", "merge feature", "feature").returncode == 0
    assert proc(repo, "merge", "-q", "--ff-only", _branch_with_commit(repo, "ahead", "main")).returncode == 0
    git(repo, "checkout", "-q", "-b", "side", "main~2")
    assert proc(repo, "merge", "-q", "--no-ff", "-m", "merge ahead", "ahead").returncode == 0
    git(repo, "checkout", "-q", "main")
    assert log.read_text() == ""

    # What brings a loser in, or a copy of its patch, reaches Python and is refused.
    assert_refused(proc(repo, "merge", "--no-ff", "-m", "merge loser", loser))
    assert "_hook pre-merge-commit" in log.read_text()
    git(repo, "merge", "--abort")
    log.write_text("")
    assert_refused(proc(repo, "cherry-pick", loser), "patch-id")
    assert "_hook reference-transaction" in log.read_text()
    git(repo, "cherry-pick", "--abort")
