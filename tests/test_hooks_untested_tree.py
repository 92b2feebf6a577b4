"""A plain merge never lands an untested tree silently: when the base
moved since the winner's check (a teammate's commit; a ``merge=union`` file
that merges both sides' lines without a conflict), the merge commit's tree
is not the tree the check judged, and the hooks refuse it, naming
``git parallel merge``, which re-proves the landing tree.  A fast-forward,
or a merge onto the base the winner started from, lands the judged tree
and passes; with ``merge.verify: never`` the merge passes with a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import git
import scenarios
import test_hooks as hooks


def _teammate(repo: Path, name: str, text: str, attributes: str | None = None) -> str:
    """A commit of someone else's on main, after the pick."""
    (repo / name).write_text(text)
    if attributes is not None:
        (repo / ".gitattributes").write_text(attributes)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"teammate: {name}")
    return hooks.tip(repo, "main")


@pytest.mark.slow  # a whole flow of about 3 s; the default tier keeps under 150 s
def test_a_winner_merged_onto_a_moved_base_is_refused_and_git_parallel_merge_reproves_it(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path)
    base = _teammate(repo, "test_new.txt", "a teammate's new test\n")
    merged = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert merged.returncode != 0, merged.stderr
    assert "error[PARALLEL_EVIDENCE_MISMATCH]" in merged.stderr, merged.stderr
    assert "is not the tree its check judged" in merged.stderr and "fresh, passing evidence" not in merged.stderr
    assert "git parallel merge t" in merged.stderr and "re-proves" in merged.stderr, merged.stderr
    assert hooks.tip(repo, "main") == base
    git(repo, "merge", "--abort")

    # The same merge made off the base and moved onto it: reference-transaction.
    git(repo, "checkout", "-q", "--detach")
    git(repo, "merge", "-q", "--no-ff", "--no-verify", "-m", "made elsewhere", "parallel/t/1")
    made = hooks.tip(repo, "HEAD")
    git(repo, "checkout", "-q", "main")
    moved = hooks.proc(repo, "update-ref", "refs/heads/main", made)
    assert moved.returncode != 0 and "is not the tree its check judged" in moved.stderr, moved.stderr
    assert hooks.tip(repo, "main") == base

    result = gp.json("merge", "t")  # re-proves the merged tree, then lands it
    assert [v["passed"] for v in result["merge"]["verified"]] == [True]
    assert hooks.tip(repo, "main") == result["merge"]["landed"]


@pytest.mark.slow  # a whole flow of about 3 s; the default tier keeps under 150 s
def test_a_union_merge_of_both_sides_is_refused(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path)
    # result.txt merges by union: the winner's "good one" and main's "bad
    # main" both stay, without a conflict, and the gate would fail the result.
    base = _teammate(repo, "result.txt", "bad main\n", attributes="result.txt merge=union\n")
    merged = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert "CONFLICT" not in merged.stdout
    assert merged.returncode != 0 and "is not the tree its check judged" in merged.stderr, merged.stderr
    assert hooks.tip(repo, "main") == base
    git(repo, "merge", "--abort")


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_the_judged_tree_lands_by_fast_forward_or_merge_onto_the_unmoved_base(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path)
    merged = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert merged.returncode == 0, merged.stderr
    assert git(repo, "rev-parse", "main^{tree}") == git(repo, "rev-parse", "parallel/t/1^{tree}")


@pytest.mark.slow  # a whole flow of about 3 s; the default tier keeps under 150 s
def test_with_merge_verify_never_the_untested_tree_passes_with_a_warning(tmp_path: Path) -> None:
    repo, gp = scenarios.project(tmp_path, hooks.GATE, name="good", max_total=12, agent=hooks.AGENT,
                                 files={"README.md": "hello\n", "result.txt": "good base\n"},
                                 extra="merge:\n  verify: never\n")
    gp("hooks", "install")
    hooks.spawn(gp, "t", 1)
    hooks.agent(gp, "t", "1", "result.txt=good one")
    gp("check", "t")
    gp("pick", "t")
    _teammate(repo, "notes.txt", "base work\n")
    merged = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert merged.returncode == 0, merged.stderr
    assert "warning" in merged.stderr and "no check judged" in merged.stderr and "merge.verify: never" in merged.stderr
