"""Issue 48, item 4: every damaged record has a way back inside the tool.

A notes ref that is not a commit is moved aside by `recover` (never a
crash), and an evidence pack whose bytes were cut or changed is restored
from its copy on ``refs/parallel/evidence/…`` when that copy's sha256 is
the record's.  Each `fix:` that `validate` prints is then followed, and
the flow goes on: no loop between verbs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import GP, git
import scenarios
from scenarios import stored_record as record

GATE = "import sys; sys.exit(0)"
AGENT = "import os, pathlib; i = os.environ['GIT_PARALLEL_INSTANCE']; pathlib.Path(f'{i}.txt').write_text(i)\n"


def checked(tmp_path: Path) -> tuple[Path, GP]:
    repo, gp = scenarios.project(tmp_path, GATE, name="ok", max_total=4, agent=AGENT)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--", scenarios.PY, str(tmp_path / "tools" / "agent.py"))
    gp("check", "t")
    return repo, gp


def findings(gp: GP) -> dict[str, dict[str, Any]]:
    data = gp.json("validate", "t", code=None)
    return {f["code"]: f for f in data["findings"]}


def test_a_notes_ref_on_a_blob_is_moved_aside_and_the_notes_written_again(tmp_path: Path) -> None:
    repo, gp = checked(tmp_path)
    blob = git(repo, "rev-parse", "HEAD:README.md")
    git(repo, "update-ref", "refs/notes/parallel", blob)
    found = findings(gp)
    damaged = found["PARALLEL_NOTES_REF_DAMAGED"]
    assert damaged["severity"] == "error" and "is not a commit" in damaged["message"]
    assert damaged["fix"] == "git parallel recover t"
    result = gp.json("recover", "t")
    moved = f"refs/parallel/damaged/notes/parallel/{blob}"
    assert git(repo, "rev-parse", moved) == blob  # kept, never deleted
    assert git(repo, "cat-file", "-t", "refs/notes/parallel") == "commit"
    steps = [s["step"] for s in result["repaired"]]
    assert steps.index("move_notes_ref") < steps.index("write_notes")
    assert any(moved in s["what"] for s in result["repaired"])
    winner = record(repo)["instances"][0]
    assert "evidence" in git(repo, "notes", "--ref=parallel", "show", winner["head"])
    assert gp.json("validate", "t")["ok"] is True
    gp("pick", "t")
    assert "warning" not in gp("merge", "t").stderr


def test_a_note_writer_on_a_damaged_notes_ref_sends_to_recover(tmp_path: Path) -> None:
    repo, gp = checked(tmp_path)
    git(repo, "update-ref", "refs/notes/parallel", git(repo, "rev-parse", "HEAD:README.md"))
    proc = gp("pick", "t")
    assert "InvalidSpecError" not in proc.stderr
    assert "is not a commit" in proc.stderr and "git parallel recover t" in proc.stderr


def cut_pack(repo: Path, index: int = 0) -> tuple[Path, bytes]:
    pack = Path(record(repo)["instances"][index]["evidence"]["path"])
    whole = pack.read_bytes()
    pack.write_bytes(whole[: len(whole) // 2])
    return pack, whole


def test_a_truncated_pack_is_restored_from_its_evidence_ref(tmp_path: Path) -> None:
    repo, gp = checked(tmp_path)
    pack, whole = cut_pack(repo)
    damaged = findings(gp)["PARALLEL_EVIDENCE_MISMATCH"]
    assert damaged["fix"] == "git parallel recover t" and damaged["repair"]
    assert "refs/parallel/evidence/" in damaged["repair"]
    result = gp.json("recover", "t")
    assert [s["step"] for s in result["repaired"]] == ["restore_evidence"]
    assert pack.read_bytes() == whole
    audit = (repo / ".git" / "parallel" / "audit" / f"{record(repo)['run_id']}.jsonl").read_text()
    assert "restore_evidence" in audit
    assert gp.json("validate", "t")["ok"] is True
    gp("pick", "t")
    gp("merge", "t")


def test_a_pack_whose_ref_copy_differs_is_left_to_check(tmp_path: Path) -> None:
    repo, gp = checked(tmp_path)
    rec = record(repo)
    ref = f"refs/parallel/evidence/{rec['run_id']}/1/0"
    git(repo, "update-ref", "-d", ref)
    cut_pack(repo)
    damaged = findings(gp)["PARALLEL_EVIDENCE_MISMATCH"]
    assert damaged["fix"] == "git parallel check t --instance 1" and damaged["repair"] is None
    gp(*damaged["fix"].split()[2:])  # what the finding said to run makes progress
    assert gp.json("validate", "t")["ok"] is True


def test_every_fix_line_names_a_command_that_makes_progress(tmp_path: Path) -> None:
    # Damage of several kinds at once; each finding's fix, run as written,
    # leaves validate with fewer findings, until none is left.
    repo, gp = checked(tmp_path)
    cut_pack(repo, 0)
    git(repo, "update-ref", "refs/notes/parallel", git(repo, "rev-parse", "HEAD:README.md"))
    seen = []
    for _ in range(4):
        data = gp.json("validate", "t", code=None)
        if data["ok"]:
            break
        fix = data["findings"][0]["fix"]
        assert fix.startswith("git parallel "), fix
        assert fix not in seen, f"{fix} again: a loop"
        seen.append(fix)
        gp(*fix.split()[2:])
    assert gp.json("validate", "t")["ok"] is True
    assert json.loads(Path(record(repo)["instances"][0]["evidence"]["path"]).read_text())["verdict"] == "pass"
