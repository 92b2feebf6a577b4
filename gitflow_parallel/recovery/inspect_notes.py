"""Note lines checked against the records (``validate``): what
``git notes show`` prints is what people read, and anyone can append to a
note, so a line that says what no record says is flagged, not believed.

Every line of the notes refs the records name is read once (one walk of
each notes tree) and checked against the record of its run, live or
retired: a ``pick`` line must name the track's winner and sit on its
commit or on the landed commit (a pick a person took back with ``unpick``
keeps its line, beside the ``unpick`` line); an ``evidence`` line bound to
a pack the record names must carry the record's verdict; ``instance``,
``evidence`` and ``merge`` lines sit on the commit they name; the readable
landing line (``git-parallel: T won by 2 of 3 …, run PR-…``) must name
the winners on the landed commit.  A line of a run that no record and no
run ref here knows is a warning: it may come from a clone whose runs were
not fetched (``git parallel fetch``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gitflow_parallel import errors as E
from gitflow_parallel.git import notes
from gitflow_parallel.model import InstanceRecord, RunRecord
from gitflow_parallel.recovery.scan import ERROR, WARNING, Finding, Scan
from gitflow_parallel.state.share import REMOTES_PREFIX, RUNS_PREFIX

DEFAULT_NOTES_REF = "refs/notes/parallel"
LANDING = re.compile(r"git-parallel: (?P<task>\S+) won by (?P<parts>.+), run (?P<run>PR-[0-9A-Za-z-]+)")
LANDING_PART = re.compile(r"(?:^|; )(?P<id>\S+) of \d+(?: in (?P<track>\S+))? \(")
RUN_ID = re.compile(r"PR-[0-9A-Za-z-]+")


@dataclass
class Line:
    ref: str
    commit: str  # the commit the note is on
    text: str


def _notes(scan: Scan, ref: str) -> Iterator[Line]:
    for commit, lines in notes.every(scan.repo.pygit, ref):
        for text in lines:
            yield Line(ref, commit, text.strip())


def _known_runs(scan: Scan) -> set[str]:
    """Run ids a run ref here names (kept by ``push``, or fetched)."""
    names = [name for prefix in (RUNS_PREFIX, REMOTES_PREFIX) for name, _ in scan.repo.refs_under(prefix + "/")]
    return {m.group(0) for name in names for m in RUN_ID.finditer(name)}


def note_findings(scan: Scan, records: list[RunRecord], task: str | None) -> list[Finding]:
    """Every note line that contradicts its run's record (errors), and,
    without ``task``, every JSON line of a run nothing here knows (warnings)."""
    by_id = {r["run_id"]: r for r in records}
    refs = sorted({DEFAULT_NOTES_REF} | {r["config"]["notes_ref"] for r in records})
    known: set[str] | None = None
    out: list[Finding] = []
    for ref in refs:
        for line in _notes(scan, ref):
            value = _json(line.text)
            run_id = value.get("run_id") if value is not None else _landing_run(line.text)
            if not isinstance(run_id, str):
                continue
            record = by_id.get(run_id)
            if record is None:
                if task is None and value is not None:
                    known = _known_runs(scan) if known is None else known
                    if run_id not in known:
                        out.append(_unknown(line, run_id, value))
                continue
            if task is not None and record["task"] != task:
                continue
            why = _landing_why(record, line) if value is None else _why(scan, record, line, value)
            if why:
                out.append(Finding(
                    E.NOTES_CONTRADICT, ERROR, f"the note line on {line.commit[:12]} ({ref}) {why}: {line.text[:160]}",
                    fix=f"remove or rewrite it (git notes --ref={ref} edit {line.commit[:12]}); the run's record "
                        f"is what git-parallel believes (git parallel show {record['task']})",
                    task=record["task"], run_id=run_id))
    return out


def _json(text: str) -> dict[str, object] | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _landing_run(text: str) -> str | None:
    match = LANDING.fullmatch(text)
    return match.group("run") if match else None


def _unknown(line: Line, run_id: str, value: Mapping[str, object]) -> Finding:
    return Finding(E.NOTES_CONTRADICT, WARNING,
                   f"the note line on {line.commit[:12]} ({line.ref}) names run {run_id}, which no record or run ref "
                   f"here knows ({value.get('kind')} line of task {value.get('task')!r})",
                   fix=f"`git parallel fetch` brings the runs of a clone that shares its notes; else remove it "
                       f"(git notes --ref={line.ref} edit {line.commit[:12]})", run_id=run_id)


def _instance(record: RunRecord, inst_id: object) -> InstanceRecord | None:
    return next((i for i in record["instances"] if i["id"] == inst_id), None)


def _landings(record: RunRecord) -> list[str]:
    """The record's landed commit first, then those ``merge --push`` landed again over."""
    merged = record.get("merge") if record["status"] == "merged" else None
    if not merged:
        return []
    return [merged["landed"], *(r["landed"] for r in merged.get("relanded") or [])]


def _landing_said(record: RunRecord) -> str:
    landed = _landings(record)
    return f"it landed at {landed[0][:12]}" if landed else "it has not landed"


def _why(scan: Scan, record: RunRecord, line: Line, value: Mapping[str, object]) -> str | None:
    kind = value.get("kind")
    if kind == "pick":
        return _pick_why(scan, record, line, value)
    if kind in ("instance", "evidence", "comment") and _instance(record, value.get("instance")) is None:
        return f"names instance {value.get('instance')}, which run {record['run_id']} does not have"
    if kind in ("instance", "evidence") and value.get("commit") != line.commit:
        return f"is a {kind} line of {str(value.get('commit'))[:12]}, copied onto another commit"
    if kind == "evidence":
        return _evidence_why(record, value)
    if kind == "merge" and (value.get("landed") != line.commit or line.commit not in _landings(record)):
        return (f"says run {record['run_id']} landed at {str(value.get('landed'))[:12]}, but the record says "
                f"{_landing_said(record)}")
    return None


def _pick_why(scan: Scan, record: RunRecord, line: Line, value: Mapping[str, object]) -> str | None:
    track = value.get("track")
    binding = (record.get("picks") or {}).get(str(track))
    winner = binding["winner"] if binding else None
    inst = _instance(record, winner) if winner else None
    commit = (binding.get("commit") if binding else None) or (inst["head"] if inst else None)
    if value.get("winner") == winner and value.get("commit") == commit:
        if line.commit == commit or line.commit in _landings(record):
            return None
        return f"is the pick line of track {track}, copied onto a commit that is neither the winner's nor the landing"
    if _unpicked(scan, line, value):
        return None  # a pick a person took back: its line stays, beside the unpick line
    said = f"names instance {value.get('winner')} ({str(value.get('commit'))[:12]}) as the winner of track {track}"
    return (f"{said}, but the record's winner is {winner} ({str(commit)[:12]})" if winner
            else f"{said}, but the record has no pick for that track")


def _unpicked(scan: Scan, line: Line, value: Mapping[str, object]) -> bool:
    """Is there an ``unpick`` line beside ``line`` taking that pick back?"""
    for other in _notes_on(scan, line):
        taken = _json(other)
        if taken and taken.get("kind") == "unpick" and taken.get("run_id") == value.get("run_id") \
                and taken.get("track") == value.get("track") and taken.get("winner") == value.get("winner"):
            return True
    return False


def _notes_on(scan: Scan, line: Line) -> list[str]:
    return notes.read(scan.repo.pygit, line.ref, line.commit)


def _evidence_why(record: RunRecord, value: Mapping[str, object]) -> str | None:
    """The verdict of the record's attempt whose pack the line names, against the line's."""
    sha = value.get("evidence_sha256")
    inst = _instance(record, value.get("instance"))
    if inst is None:
        return None
    bound: list[tuple[Mapping[str, object] | None, str | None]] = [(inst.get("evidence"), inst.get("verdict"))]
    bound += [(h.get("evidence"), h.get("verdict")) for h in inst.get("history") or []]
    for binding, verdict in bound:
        if binding and binding.get("sha256") == sha and verdict is not None and verdict != value.get("verdict"):
            return (f"gives instance {inst['id']} verdict {value.get('verdict')} for the pack {str(sha)[:12]}, but "
                    f"the record's verdict on it is {verdict}")
    return None


def _landing_why(record: RunRecord, line: Line) -> str | None:
    """The readable landing line must name the record's winners, on the landed commit."""
    match = LANDING.fullmatch(line.text)
    if match is None:
        return None
    if line.commit not in _landings(record):
        return f"says run {record['run_id']} landed here, but the record says {_landing_said(record)}"
    picks = record.get("picks") or {}
    for part in LANDING_PART.finditer(match.group("parts")):
        track = part.group("track") or "main"
        winner = picks[track]["winner"] if track in picks else None
        if part.group("id") != winner:
            return f"says track {track} was won by {part.group('id')}, but the record's winner is {winner}"
    return None
