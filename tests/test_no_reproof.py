"""No second run of a proven tree (``merge.verify: auto``, the default): a
fast-forward of a winner whose exact tree this machine's own `check`
proved, in a pristine sandboxed checkout, by the run's frozen config,
lands on that evidence; every other landing is re-proved.

A gate run is seen in its log: `check` keeps ``<id>.<attempt>.gate-*.log``
and a re-proof ``verify-<track>-<oid12>.gate-*.log`` under the run's logs
(the gate itself, sandboxed, can write nothing outside its checkout)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git
import scenarios
from hostile import needs_namespace

PY = sys.executable
GATE = textwrap.dedent("""
    import pathlib, sys
    print("judged", sorted(p.name for p in pathlib.Path(".").iterdir()))
    sys.exit(1 if pathlib.Path("FAIL").exists() else 0)
""")


def project(tmp_path: Path, extra: str = "") -> tuple[Path, GP]:
    return scenarios.project(tmp_path, GATE, name="unit", extra=extra)


def checked_winner(gp: GP, *files: str) -> None:
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files)
    gp("check", "t")
    gp("pick", "t")


def gate_logs(repo: Path) -> tuple[list[str], list[str]]:
    """(check's gate logs, the re-proof's gate logs) of every run."""
    logs = sorted(p.name for p in (repo / ".git" / "parallel" / "logs").rglob("*.gate-*.log"))
    return [n for n in logs if not n.startswith("verify-")], [n for n in logs if n.startswith("verify-")]


def note_lines(repo: Path, commit: str) -> list[dict]:
    text = git(repo, "notes", "--ref=parallel", "show", commit)
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@needs_namespace
@pytest.mark.parametrize("squash", ["false", "auto"])
def test_a_fast_forward_of_a_checked_winner_lands_on_its_evidence(tmp_path: Path, squash: str) -> None:
    # squash: auto lands the agent's leftovers commit as one new commit on
    # the base: a new commit, but the exact tree the gates judged, on the
    # commit whose protected paths they judged it with.
    repo, gp = project(tmp_path, f"merge:\n  squash: {squash}\n")
    checked_winner(gp, "work.txt=done")
    inst = gp.json("status", "t")["run"]["instances"][0]
    pack = json.loads(Path(inst["evidence"]["path"]).read_text())
    assert pack["fence"] == "namespace" and pack["tree"] == pack["judged_tree"]
    assert gate_logs(repo) == (["1.0.gate-unit.log"], [])
    base = git(repo, "rev-parse", "main")
    out = gp("merge", "t").stdout
    assert "re-proved" not in out.replace("not re-proved", "") and "not re-proved: track main lands the tree" in out
    merged = gp.json("status", "t")["run"]["merge"]
    if squash == "false":
        assert merged["method"] == "fast-forward" and merged["landed"] == inst["head"]
    else:
        assert merged["method"] == "squash" and git(repo, "rev-parse", "main^") == base != inst["head"]
    assert gate_logs(repo)[1] == []  # the gate did not run again
    assert merged["verified"] == [] and merged["verify"] == "auto"
    [rested] = merged["rests_on"]
    assert rested["reproved"] is False and rested["track"] == "main" and rested["instance"] == "1"
    assert rested["pack_sha256"] == inst["evidence"]["sha256"] and rested["commit"] == inst["head"]
    assert rested["tree"] == git(repo, "rev-parse", "main^{tree}") == pack["tree"]
    [line] = [n for n in note_lines(repo, merged["landed"]) if n["kind"] == "merge"]
    assert line["reproved"] == [] and line["rests_on"] == [
        {"track": "main", "reproved": False, "pack_sha256": inst["evidence"]["sha256"], "commit": inst["head"],
         "tree": pack["tree"]}]


@needs_namespace
def test_a_winner_that_added_a_protected_test_lands_on_its_evidence(tmp_path: Path) -> None:
    # Its new test under a protected folder is left out of the judged
    # checkout (the base has none there) and run in the added-tests stage.
    # A re-proof of the landing would judge the very same tree again, with
    # the same test left out: it ran the suite a second time for nothing.
    repo, gp = project(tmp_path, "protect: [checks/**]\n")
    checked_winner(gp, "work.txt=done", "checks/test_new.py=ok")
    inst = gp.json("status", "t")["run"]["instances"][0]
    pack = json.loads(Path(inst["evidence"]["path"]).read_text())
    assert pack["tree"] != pack["judged_tree"] and pack["added_tests"]["paths"] == ["checks/test_new.py"]
    assert pack["added_tests"]["passed"] and pack["verdict"] == "pass"
    out = gp("merge", "t").stdout
    assert "re-proved" not in out.replace("not re-proved", "")
    assert f"with the base's protected paths ({pack['judged_tree'][:12]}), as a re-proof would" in out, out
    assert gate_logs(repo)[1] == []  # no gate ran again
    merged = gp.json("status", "t")["run"]["merge"]
    [rested] = merged["rests_on"]
    assert rested["tree"] == pack["tree"] == git(repo, "rev-parse", "main^{tree}")
    assert rested["judged_tree"] == pack["judged_tree"]
    assert "checks/test_new.py" in git(repo, "ls-tree", "-r", "--name-only", "main")  # the test landed with it
    [line] = [n for n in note_lines(repo, merged["landed"]) if n["kind"] == "merge"]
    assert line["rests_on"][0]["judged_tree"] == pack["judged_tree"]


@needs_namespace
def test_a_merge_commit_is_reproved(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    checked_winner(gp, "work.txt=done")
    (repo / "other.txt").write_text("moved on\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "-qm", "the base moves: the landing is a merged tree no gate saw")
    out = gp("merge", "t").stdout
    assert "re-proved track main on the landing tree in a clean checkout: pass (unit); the landing tree is not" in out
    merged = gp.json("status", "t")["run"]["merge"]
    assert merged["method"] != "fast-forward"
    [verified] = merged["verified"]
    assert verified["passed"] and verified["why"] == "the landing tree is not the tree its gates judged"
    assert merged["rests_on"] == [] and len(gate_logs(repo)[1]) == 1


@needs_namespace
def test_verify_always_reproves_a_fast_forward(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, "merge:\n  verify: always\n  squash: false\n")
    checked_winner(gp, "work.txt=done")
    merged = gp.json("merge", "t")["merge"]
    assert merged["method"] == "fast-forward" and merged["verify"] == "always"
    assert [v["passed"] for v in merged["verified"]] == [True] and "why" not in merged["verified"][0]
    assert merged["rests_on"] == [] and len(gate_logs(repo)[1]) == 1


@needs_namespace
def test_evidence_judged_without_the_namespace_layer_is_reproved(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    repo, gp = project(tmp_path)
    monkeypatch.setenv("GIT_PARALLEL_SANDBOX", "off")  # check judges unfenced...
    checked_winner(gp, "work.txt=done")
    monkeypatch.delenv("GIT_PARALLEL_SANDBOX")  # ...merge runs where the sandbox holds
    merged = gp.json("merge", "t")["merge"]
    [verified] = merged["verified"]
    assert verified["why"] == "it was judged without the namespace layer (sandbox: none)"
    assert merged["rests_on"] == [] and len(gate_logs(repo)[1]) == 1


@needs_namespace
def test_a_winner_that_fails_when_judged_again_is_refused_only_when_reproved(tmp_path: Path) -> None:
    # The re-proof still catches what it caught: a tree that fails now (a
    # FAIL the agent's tree holds, which the gate saw only as a protected
    # path restored) is judged again and refused; nothing moves.
    repo, gp = project(tmp_path, "protect: [FAIL]\n")
    (repo / "FAIL").write_text("the base fails\n")
    git(repo, "add", "FAIL")
    git(repo, "commit", "-qm", "a protected FAIL")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "rm FAIL && echo done > work.txt")
    assert "FAIL unit" in gp("check", "t", code=1).stdout  # FAIL is back in the judged checkout
    gp("pick", "t", "--instance", "1", "--force")  # a person takes it
    before = git(repo, "rev-parse", "main")
    out = gp("merge", "t", code=1)
    assert "error[PARALLEL_" in out.stderr and git(repo, "rev-parse", "main") == before
    assert len(gate_logs(repo)[1]) == 1


def test_stale_or_collected_evidence_is_no_ground_to_land_on(tmp_path: Path) -> None:
    # Each condition of rests_on, on a pack that passes them all: a pack
    # made under another configuration (the frozen config changed), one
    # collected from a worker, one of another tree, one judged with the
    # protected paths of another commit.
    from gitflow_parallel.judge import reprove

    pack_path = tmp_path / "pack.json"
    pack = {"origin": "git-parallel", "run_id": "PR-1", "instance": "1", "attempt": 0, "config_sha256": "c1",
            "instance_revision": 3, "commit": "a" * 40, "tree": "b" * 40, "judged_tree": "b" * 40,
            "checkout": "clean", "fence": "namespace", "base_commit": "d" * 40, "verdict": "pass",
            "complete": True}
    record = {"run_id": "PR-1", "config_sha256": "c1", "config": {"sandbox": "auto"}}

    def why(pack_changes: dict, inst_changes: dict | None = None, onto: str = "d" * 40,
            judged: dict | None = None) -> str:
        from gitflow_parallel.files import sha256_bytes

        data = json.dumps({**pack, **pack_changes}).encode()
        pack_path.write_bytes(data)
        inst = {"id": "1", "attempt": 0, "track": "main", **(inst_changes or {}),
                "evidence": {"path": str(pack_path), "sha256": sha256_bytes(data), "instance_revision": 3}}
        pick = {"track": "main", "winner": {"id": "1", "commit": "a" * 40, "evidence_sha256": sha256_bytes(data)}}
        proof, reason = reprove.rests_on(record, pick, inst, "b" * 40, onto, judged)  # type: ignore[arg-type]
        assert (proof is None) == (reason != "fresh pristine evidence made here")
        return reason

    assert why({}) == "fresh pristine evidence made here"
    assert why({"config_sha256": "c0"}) == "the pack was made under another configuration"
    assert why({}, {"origin": "remote", "worker": "w1"}) == "its evidence was collected from a worker"
    assert why({"tree": "e" * 40, "judged_tree": "e" * 40}) == "the landing tree is not the tree its gates judged"
    # Judged with protected paths restored: what a re-proof would judge too,
    # as git says (``judged``, never the pack), unless what it changed keeps
    # an attempt out of an automatic pick (a pack forged to pass it).
    restored = {"judged_tree": "e" * 40}
    assert why(restored) == "its gates judged the tree with protected paths restored"
    assert why(restored, judged={"judged_tree": "e" * 40, "protected_blocking": []}) == \
        "fresh pristine evidence made here"
    assert why(restored, judged={"judged_tree": "f" * 40, "protected_blocking": []}) == \
        "its gates judged another tree than a re-proof would"
    assert why(restored, judged={"judged_tree": "e" * 40, "protected_blocking": ["conftest.py"]}) == \
        "it changed protected path(s) that keep an attempt out of an automatic pick (conftest.py)"
    assert why({"judged_tree": None}) == "the pack does not say what it judged"
    assert why({"fence": "landlock"}) == "it was judged without the namespace layer (sandbox: landlock)"
    assert why({"layers": ["pid", "mount", "ipc", "overlay", "git-view"]}) == "fresh pristine evidence made here"
    assert why({"layers": ["pid", "mount", "ipc", "overlay"]}) == "its sandbox lacked a layer of pid, mount, overlay, git-view"
    assert why({"layers": ["pid", "mount", "ipc"]}) == "its sandbox lacked a layer of pid, mount, overlay, git-view"
    assert why({}, onto="f" * 40) == "its protected paths came from another commit than the one it lands on"
    assert why({"verdict": "fail"}) == "the evidence is not fresh and passing"
    assert os.path.exists(pack_path)
