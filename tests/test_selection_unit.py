"""The pick rules in process, on hand-built candidates: no git, milliseconds.

``tests/test_selection.py`` drives the same rules through real runs; these
pin the ordering and tie rules one by one so a change to them shows here
first (judge/selection.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.judge.selection import candidate_basis, rank, refuse_below_threshold
from gitflow_parallel.state.picks import id_key


def cand(id: str, score: int | None = None, lines: int = 10, tree: str | None = None,
         probes: list[Any] | None = None) -> dict[str, Any]:
    return {"id": id, "attempt": 0, "commit": f"c{id}", "tree": tree or f"t{id}", "evidence_sha256": f"e{id}",
            "score": score, "score_source": None if score is None else "command", "score_error": None,
            "changed_lines": lines, "probes": probes or []}


def winner_of(method: str, *cands: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, str]]:
    won, decision, reasons, _ = rank(None, {}, "main", method, list(cands))  # type: ignore[arg-type]
    return won["id"], decision, reasons


def test_ids_order_naturally() -> None:
    assert sorted(["10", "2", "1"], key=id_key) == ["1", "2", "10"]
    assert sorted(["b10", "b9", "a"], key=id_key) == ["a", "b9", "b10"]


def test_highest_score_wins_and_a_null_score_comes_last() -> None:
    won, decision, reasons = winner_of("critic_first_pass", cand("1", 3), cand("2", 7), cand("3", None))
    assert won == "2" and decision["stage"] == "score"
    assert decision["runner_up"]["id"] == "1"
    assert set(reasons) == {"1", "3"}


def test_equal_scores_go_to_fewer_changed_lines_then_to_the_lower_id() -> None:
    won, decision, _ = winner_of("critic_first_pass", cand("1", 5, lines=30), cand("2", 5, lines=4))
    assert (won, decision["stage"]) == ("2", "changed_lines")
    won, decision, _ = winner_of("critic_first_pass", cand("10", 5, lines=4), cand("2", 5, lines=4))
    assert (won, decision["stage"]) == ("2", "id")  # "2" before "10": natural order, not text


def test_the_order_of_the_candidates_never_matters() -> None:
    cands = [cand("1", 5, 9), cand("2", 5, 9), cand("3", 4, 1), cand("10", None, 0)]
    first = winner_of("critic_first_pass", *cands)[0]
    assert all(winner_of("critic_first_pass", *order)[0] == first
               for order in (cands[::-1], cands[1:] + cands[:1], cands[2:] + cands[:2]))
    assert first == "1"


def test_a_lone_candidate_is_the_only_candidate() -> None:
    won, decision, reasons = winner_of("critic_first_pass", cand("4", 1))
    assert (won, decision["stage"], decision["runner_up"], reasons) == ("4", "only_candidate", None, {})


def test_majority_vote_takes_the_largest_group_of_identical_trees() -> None:
    won, decision, reasons = winner_of("majority_vote", cand("1", 9, tree="x"), cand("2", 1, tree="y"),
                                       cand("3", 2, tree="y"))
    assert won == "3" and decision["stage"] == "tree_group_size"  # the best of the pair beats a lone 9
    assert "shared by 1" in reasons["1"]


def test_majority_vote_with_groups_of_one_size_falls_back_to_the_critic_order() -> None:
    won, decision, _ = winner_of("majority_vote", cand("1", 2, tree="x"), cand("2", 8, tree="y"))
    assert (won, decision["stage"]) == ("2", "score")


def test_cluster_takes_the_largest_behaviour_group() -> None:
    same, other = [["p", "ok"]], [["p", "odd"]]
    won, decision, _ = winner_of("cluster", cand("1", 9, probes=other), cand("2", 1, probes=same),
                                 cand("3", 3, probes=same))
    assert (won, decision["stage"]) == ("3", "cluster_size")


def test_the_basis_is_the_same_whatever_the_order() -> None:
    a, b = cand("1", 1), cand("2", 2)
    assert candidate_basis([a, b]) == candidate_basis([b, a])
    assert candidate_basis([a]) != candidate_basis([a, b])


def test_threshold_refuses_a_low_or_missing_score_only_with_a_score_source() -> None:
    cfg = {"score": {"threshold": 6, "command": ["score"], "findings": None}}
    refuse_below_threshold(cfg, cand("1", 6), "main")  # at the threshold passes
    for low in (cand("1", 5), cand("1", None)):
        with pytest.raises(ParallelError) as exc:
            refuse_below_threshold(cfg, low, "main")
        assert exc.value.code == E.ANTI_SLOP_BELOW_THRESHOLD
    no_source = {"score": {"threshold": 6, "command": None, "findings": None}}
    refuse_below_threshold(no_source, cand("1", None), "main")  # no source: no threshold
