"""In-process tests of the run record's mutations and transitions (model.py)
and of the lines built from it (provenance.py): no git, no subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitflow_parallel import model, provenance
from gitflow_parallel.config import DEFAULTS, config_sha256
from gitflow_parallel.errors import BRANCH_TERMINAL, BRANCH_NOT_FOUND, RECORD_INVALID, ParallelError
from gitflow_parallel.state.store import validate_record

BASE = "a" * 40
TIP = "b" * 40


def run(n: int = 2, tracks: list[str] | None = None) -> model.RunRecord:
    tracks = tracks or ["main"]
    root = Path("/tmp/wt")
    insts = [model.new_instance("t", tr, str(k) if tracks == ["main"] else f"{tr}-{k}", root, BASE)
             for tr in tracks for k in range(1, n + 1)]
    cfg = dict(DEFAULTS)
    return model.new_run("t", {"ref": "refs/heads/main", "commit": BASE}, tracks, cfg, config_sha256(cfg),
                         "defaults", root, insts, "2026-01-01T00:00:00Z")


def test_new_run_is_a_valid_pending_record() -> None:
    rec = run()
    assert validate_record(rec, Path("t.yaml")) is rec
    assert rec["run_id"].startswith("PR-") and rec["run_revision"] == 1 and rec["status"] == "pending"
    assert [i["branch"] for i in rec["instances"]] == ["parallel/t/1", "parallel/t/2"]
    assert model.derive_run_status(rec) == "pending"
    assert run()["run_id"] != rec["run_id"]
    assert model.new_run("t", rec["base"], ["main"], {}, "", None, Path("/r"), [], "now", run_id="PR-x")["run_id"] == "PR-x"


def test_start_then_finish_moves_the_run_status() -> None:
    rec = run()
    a, b = rec["instances"]
    model.start(rec, a, 123, 45, "now", "/log", "/events")
    assert (a["status"], a["pid"], a["runner_pid"], a["log"]) == ("running", 123, 45, "/log")
    assert model.derive_run_status(rec) == "running"
    model.finish(rec, a, "succeeded", head=TIP, exit_code=0, finished_at="later")
    model.finish(rec, b, "failed", error="boom")
    assert (a["status"], a["head"], b["error"]) == ("succeeded", TIP, "boom")
    assert model.derive_run_status(rec) == "completed"
    model.bump(a)
    assert a["instance_revision"] == 2


def test_terminal_instance_refuses_every_move_and_changes_nothing() -> None:
    rec = run(1)
    inst = rec["instances"][0]
    model.finish(rec, inst, "failed")
    before = json.dumps(rec, sort_keys=True)
    for to in ("running", "succeeded", "aborted"):
        with pytest.raises(ParallelError) as exc:
            model.finish(rec, inst, to, head=TIP)
        assert exc.value.code == BRANCH_TERMINAL
        assert "retry" in (exc.value.hint or "")
    assert json.dumps(rec, sort_keys=True) == before


def test_non_terminal_refusals_name_the_move() -> None:
    rec = run(1)
    inst = rec["instances"][0]
    model.start(rec, inst, 1, 1, "now", "l", "e")
    with pytest.raises(ParallelError) as exc:
        model.start(rec, inst, 2, 1, "now", "l", "e")
    assert exc.value.code == BRANCH_TERMINAL and "running to running" in exc.value.message
    with pytest.raises(ParallelError) as exc:
        model.move(rec, inst, "pending")
    assert exc.value.code == RECORD_INVALID
    assert inst["pid"] == 1


def test_find_instance_refuses_an_unknown_id() -> None:
    with pytest.raises(ParallelError) as exc:
        model.find_instance(run(), "9")
    assert exc.value.code == BRANCH_NOT_FOUND and "it has: 1, 2" in exc.value.message


def test_bind_evidence_and_record_head() -> None:
    rec = run(1)
    inst = rec["instances"][0]
    pack = {"instance_revision": 3, "verdict": "pass", "score": 7}
    model.bind_evidence(inst, {"path": "/p.json", "sha256": "s"}, pack)
    assert inst["evidence"] == {"path": "/p.json", "sha256": "s", "instance_revision": 3}
    assert (inst["verdict"], inst["score"]) == ("pass", 7)
    model.record_head(inst, TIP)
    assert inst["head"] == TIP


def _pick(track: str, winner: str, method: str = "score") -> model.PickRecord:
    return {"run_id": "PR-1", "task": "t", "track": track, "score": 5, "selection_method": method,
            "merge_policy": "auto", "created_at": "now", "picked_by": "ada", "reason": "r", "forced": False,
            "winner": {"id": winner, "attempt": 0, "commit": TIP, "tree": "c" * 40, "evidence_sha256": "e"}}


def test_bind_pick_marks_picked_once_every_track_is_bound_and_retire_undoes_it() -> None:
    rec = run(1, ["ui", "api"])
    model.bind_pick(rec, "ui", Path("/ui.json"), "s1", _pick("ui", "ui-1"))
    assert rec["status"] == "pending"
    model.bind_pick(rec, "api", "/api.json", "s2", _pick("api", "api-1"))
    assert rec["status"] == "picked"
    assert rec["picks"]["ui"] == {"path": "/ui.json", "sha256": "s1", "winner": "ui-1", "commit": TIP}
    model.retire_picks(rec, [{"track": "ui"}])
    assert list(rec["picks"]) == ["api"] and rec["retired_picks"] == [{"track": "ui"}]
    assert rec["status"] == "pending"


def test_bind_pick_leaves_a_finished_run_finished() -> None:
    rec = run(1)
    model.mark_aborted(rec)
    model.bind_pick(rec, "main", "/p", "s", _pick("main", "1"))
    assert rec["status"] == "aborted" and "main" in rec["picks"]


def test_merge_record_method_and_reland() -> None:
    ff = model.new_merge(TIP, BASE, "refs/heads/main", [{"method": "fast-forward"}], [], "auto", "now")
    assert ff["method"] == "fast-forward" and ff["verified"] == [] and ff["attempts"] is None
    steps = [{"method": "merge"}, {"method": "squash"}]
    m = model.new_merge(TIP, BASE, "refs/heads/main", steps, [], "auto", "now", recovered={"from": "intent"})
    assert m["method"] == "squash" and m["recovered"] == {"from": "intent"}
    rec = run(1)
    model.mark_merged(rec, m)
    assert rec["status"] == "merged" and model.derive_run_status(rec) == "merged"
    model.reland(m, "d" * 40, [{"method": "merge"}], ["f"], onto="e" * 40, previous_landed=TIP,
                 previous_onto=BASE, verified=[], worktree_error=None, at="later")
    assert (m["landed"], m["onto"], m["method"]) == ("d" * 40, "e" * 40, "merge")
    assert m["relanded"] == [{"landed": TIP, "onto": BASE, "remote_tip": "e" * 40, "at": "later"}]


def test_reset_for_retry_keeps_the_old_attempt_in_history() -> None:
    rec = run(1)
    inst = rec["instances"][0]
    model.finish(rec, inst, "failed", error="boom", exit_code=1, head=TIP)
    model.reset_for_retry(inst, BASE, "base", TIP, "refs/parallel/archive/x", [], "fb")
    assert (inst["attempt"], inst["status"], inst["error"], inst["head"]) == (1, "pending", None, BASE)
    assert inst["start"] == {"commit": BASE, "from": "base"} and inst["feedback"] == "fb"
    old = inst["history"][0]
    assert (old["attempt"], old["status"], old["error"], old["head"], old["archive_ref"]) == \
        (0, "failed", "boom", TIP, "refs/parallel/archive/x")
    model.start(rec, inst, 9, 1, "now", "l", "e")  # a retried instance may run again


def test_mark_removed() -> None:
    inst = run(1)["instances"][0]
    model.mark_removed(inst)
    assert inst["removed"] is True


def test_note_lines_are_canonical_and_share_the_record() -> None:
    rec = run(1)
    inst = rec["instances"][0]
    line = json.loads(provenance.instance_note(rec, inst, TIP))
    assert line == {"v": 1, "kind": "instance", "run_id": rec["run_id"], "task": "t", "instance": "1",
                    "track": "main", "attempt": 0, "status": "pending", "branch": "parallel/t/1",
                    "commit": TIP, "base": BASE}
    human = json.loads(provenance.pick_note(_pick("main", "1", model.HUMAN)))
    assert human["picked_by"] == "ada" and "picked_by" not in json.loads(provenance.pick_note(_pick("main", "1")))
    m = model.new_merge(TIP, BASE, "refs/heads/main", [{"method": "merge", "winner_lines_dropped": 2}], [],
                        "auto", "now")
    merge = json.loads(provenance.merge_note(rec, m))
    assert (merge["method"], merge["winner_lines_dropped"], merge["reproved"]) == ("merge", 2, [])
    assert provenance.landing_line(rec, [(_pick("main", "1"), None)]) == \
        f"git-parallel: t won by 1 of 1 (no enforced gate, score 5), run {rec['run_id']}"


def test_leftovers_message_trailers() -> None:
    msg = provenance.leftovers_message("t", "PR-1", "2", 3, "Why.")
    assert msg == ("git-parallel: leftovers of t/2, attempt 3\n\nWhy.\n\nParallel-Run: PR-1\nParallel-Task: t\n"
                   "Parallel-Instance: 2\nParallel-Attempt: 3\n")
    assert provenance.leftovers_message("t", "PR-1", "2", 3, "Why.", recovery_id="RC-9") == \
        msg + "Parallel-Recovery: RC-9\n"
