"""``validate`` checks the note lines against the records, not only that
the lines the records call for are there: a pick line copied onto a loser
or naming another winner, an evidence line whose verdict is not the
record's, a line of a run no record or run ref knows, and the readable
landing line saying another instance won are flagged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
import test_hooks as hooks

NOTES = "refs/notes/parallel"


def _lines(repo: Path, commit: str) -> list[str]:
    return git(repo, "notes", f"--ref={NOTES}", "show", commit).splitlines()


def _line(repo: Path, commit: str, kind: str, **match: object) -> dict:
    for text in _lines(repo, commit):
        if text.startswith("{"):
            value = json.loads(text)
            if value["kind"] == kind and all(value.get(k) == v for k, v in match.items()):
                return value
    raise AssertionError(f"no {kind} line on {commit[:12]}")


def _append(repo: Path, commit: str, *lines: object) -> None:
    text = "\n".join(x if isinstance(x, str) else json.dumps(x, sort_keys=True, separators=(",", ":")) for x in lines)
    git(repo, "notes", f"--ref={NOTES}", "append", "-m", text, commit)


def _contradictions(gp: hooks.GP, task: str | None = None) -> list[dict]:
    out = gp.json("validate", *([task] if task else []), code=None)
    return [f for f in out["findings"] if f["code"] == "PARALLEL_NOTES_CONTRADICT"]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_forged_note_lines_on_a_live_run_are_flagged(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path, install=False)
    winner, loser = hooks.tip(repo, "parallel/t/1"), hooks.tip(repo, "parallel/t/2")
    assert _contradictions(gp, "t") == [] and gp.json("validate", "t")["ok"]

    pick = _line(repo, winner, "pick")
    _append(repo, loser, pick)  # the winner's pick line, copied onto the loser
    found = _contradictions(gp, "t")
    assert len(found) == 1 and found[0]["severity"] == "error", found
    assert loser[:12] in found[0]["message"] and "pick" in found[0]["message"], found

    git(repo, "notes", f"--ref={NOTES}", "remove", loser)
    _append(repo, loser, {**pick, "winner": "2", "commit": loser})  # a pick naming the loser
    found = _contradictions(gp, "t")
    assert len(found) == 1 and "instance 2" in found[0]["message"] and "winner is 1" in found[0]["message"], found

    git(repo, "notes", f"--ref={NOTES}", "remove", loser)
    evidence = _line(repo, loser, "evidence") if _lines_or_none(repo, loser) else None
    assert evidence is None  # removed with the forged lines; rebuilt from the record below
    gp("recover", "t")  # writes the missing lines back
    evidence = _line(repo, loser, "evidence", instance="2")
    assert evidence["verdict"] == "fail" and _contradictions(gp, "t") == []
    _append(repo, loser, {**evidence, "verdict": "pass"})  # a verdict that is not the record's
    found = _contradictions(gp, "t")
    assert len(found) == 1 and "verdict pass" in found[0]["message"] and "fail" in found[0]["message"], found
    assert gp.json("validate", "t", code=1)["ok"] is False

    # A line of a run nothing here knows: a warning, on the whole repository's validate.
    git(repo, "notes", f"--ref={NOTES}", "remove", loser)
    gp("recover", "t")
    _append(repo, loser, {**evidence, "run_id": "PR-00000000-0000-0000-0000-000000000000"})
    found = _contradictions(gp)
    assert len(found) == 1 and found[0]["severity"] == "warning", found
    assert "PR-00000000-0000-0000-0000-000000000000" in found[0]["message"], found


def _lines_or_none(repo: Path, commit: str) -> list[str] | None:
    shown = hooks.proc(repo, "notes", f"--ref={NOTES}", "show", commit)
    return shown.stdout.splitlines() if shown.returncode == 0 else None


@pytest.mark.slow  # a whole flow of about 3 s; the default tier keeps under 150 s
def test_a_forged_landing_line_on_a_merged_run_is_flagged(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path, install=False)
    landed = gp.json("merge", "t")["merge"]["landed"]
    assert _contradictions(gp, "t") == []
    said = next(line for line in _lines(repo, landed) if line.startswith("git-parallel: t won by 1 of 2"))
    _append(repo, landed, said.replace("won by 1 of 2", "won by 2 of 2"))
    found = _contradictions(gp, "t")
    assert len(found) == 1 and "won by 2" in found[0]["message"] and "winner is 1" in found[0]["message"], found
