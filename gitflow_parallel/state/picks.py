"""Pick records: where they live, how they are read and checked, and
which instances a run's picks name.

A pick is write-once (``picks/<run_id>/<track>.json``); ``unpick`` moves it
to ``picks/<run_id>/retired/``.  Every reader (merge, the hooks, review,
recovery) goes through this module; ``commands/pick`` writes them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, cast

from gitflow_parallel import __version__, evidence, schema
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import sha256_bytes, utcnow
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import (HUMAN, InstanceRecord, PickBinding, PickRecord, RunRecord, binding_of,
                                     find_instance)
from gitflow_parallel.shapes.records import SCHEMA_VERSION as SCHEMA_VERSION  # a pick record's, as a run record's


ARBITER = f"git-parallel {__version__}"


def pick_path(parallel_dir: Path, run_id: str, track: str) -> Path:
    return parallel_dir / "picks" / run_id / f"{track}.json"


def _schema_invalid(path: Path, problem: str) -> ParallelError:
    return ParallelError(
        E.PICK_SCHEMA_INVALID,
        f"pick record {path} is invalid: {problem}",
        hint="pick records are write-once; restore it, or run `git parallel validate` to see what else is wrong",
    )


def is_forced(pick: Mapping[str, object]) -> bool:
    """A person's pick made with --force: its evidence was not required."""
    return pick.get("selection_method") == HUMAN and pick.get("forced") is True


def validate_pick(pick: object, path: Path, record: RunRecord, track: str) -> PickRecord:
    """Check a loaded pick record against its shape (``shapes.records.PickRecord``)
    and against the run and track it is read for; returns it unchanged."""
    if not isinstance(pick, dict):
        raise _schema_invalid(path, "not a JSON object")
    try:
        schema.check(PickRecord, pick)
    except schema.ShapeError as exc:
        raise _schema_invalid(path, f"{exc.path} {exc.problem}") from None
    checked = cast(PickRecord, pick)
    problem = _pick_problem(checked, record, track)
    if problem:
        raise _schema_invalid(path, problem)
    return checked


def _pick_problem(pick: PickRecord, record: RunRecord, track: str) -> str | None:
    """What the pick's fields say that does not hold together, if anything."""
    if pick["selection_method"] == HUMAN and not ("picked_by" in pick and "forced" in pick):
        return "a human pick must name picked_by and say whether it was forced"
    if pick["run_id"] != record["run_id"] or pick["task"] != record["task"] or pick["track"] != track:
        return "it names another run, task or track"
    unproven = None if is_forced(pick) else _unproven(pick)  # a forced pick may have no evidence at all
    if unproven:
        return unproven
    decision = pick.get("decision")  # picks written before it was recorded have none
    if decision is not None and (decision.get("rule") != pick["selection_method"]
                                 or (decision.get("winner") or {}).get("id") != pick["winner"]["id"]):
        return "its decision does not name its rule and winner"
    return None


def _unproven(pick: PickRecord) -> str | None:
    """Why a pick that was not forced lacks the proof every pick needs, if it does."""
    for key, value in (("proof_issued_at", pick["proof_issued_at"]),
                       ("winner.evidence_sha256", pick["winner"]["evidence_sha256"])):
        if value is None:
            return f"{key} is null, and only a person's forced pick has no evidence"
    if pick["verdict"] != "pass":
        return f"verdict is {pick['verdict']!r}, a pick is always of a passing instance"
    return None


def load_pick(project: Project, record: RunRecord, track: str) -> PickRecord | None:
    """The validated pick record of ``track``, or None if it was not picked."""
    path = pick_path(project.repo.parallel_dir, record["run_id"], track)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        pick = json.loads(data)
    except ValueError:
        raise _schema_invalid(path, "not valid JSON") from None
    pick = validate_pick(pick, path, record, track)
    binding = (record.get("picks") or {}).get(track)
    if binding and binding.get("sha256") != sha256_bytes(data):
        raise _schema_invalid(path, "its bytes no longer match the sha256 kept in the run record")
    return pick


def winner_check(project: Project, record: RunRecord, inst: InstanceRecord, commit: str) -> tuple[bool, str | None, str]:
    """May ``commit`` of ``inst`` land?  Only as its track's picked winner,
    with fresh, passing evidence for exactly that commit."""
    try:
        pick = load_pick(project, record, inst["track"])
    except ParallelError as exc:
        return False, exc.code, exc.message
    if pick is None:
        return False, E.SELECTION_NO_PASS, f"track {inst['track']} of {record['task']} has no pick yet"
    winner = pick["winner"]
    if winner["id"] != inst["id"]:
        return False, E.SELECTION_NO_PASS, (f"instance {inst['id']} lost the pick of track {inst['track']} "
                                            f"(winner: {winner['id']})")
    if winner["commit"] != commit or winner["attempt"] != inst["attempt"]:
        return False, E.EVIDENCE_MISMATCH, (f"the pick is for {winner['commit'][:12]} (attempt {winner['attempt']}), "
                                            f"not {commit[:12]} (attempt {inst['attempt']})")
    if is_forced(pick):
        # A person took responsibility for this exact commit with --force;
        # the record says so, and what it waived.
        return True, None, f"instance {inst['id']} is the winner {pick['picked_by']} picked with --force"
    fresh = evidence.freshness(record, inst, commit)
    if fresh.state != "fresh":
        return False, fresh.code, f"evidence of instance {inst['id']} is {fresh.state}: {fresh.reason}"
    if not fresh.passing:
        return False, E.SELECTION_NO_PASS, f"evidence of instance {inst['id']} does not pass"
    if binding_of(inst).get("sha256") != winner["evidence_sha256"]:
        return False, E.EVIDENCE_MISMATCH, "the evidence pack is not the one the pick was made from"
    return True, None, f"instance {inst['id']} is the picked winner with fresh passing evidence"


# -- candidates -------------------------------------------------------------------------
def id_key(inst_id: str) -> tuple[tuple[int, int, str], ...]:
    """Ids in their natural order: "2" before "10", "a-2" before "a-10"."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", inst_id) if p)


def pick_bytes(pick: PickRecord) -> bytes:
    return (json.dumps(pick, sort_keys=True, indent=2) + "\n").encode("utf-8")


def winner_instances(project: Project, record: RunRecord) -> list[tuple[PickRecord, InstanceRecord]]:
    """(pick, instance) for every track in track order; JOIN_INCOMPLETE if any is missing."""
    out, missing = [], []
    for t in record["tracks"]:
        p = load_pick(project, record, t)
        if p is None:
            missing.append(t)
        else:
            out.append((p, find_instance(record, p["winner"]["id"])))
    if missing:
        raise ParallelError(
            E.JOIN_INCOMPLETE,
            f"run {record['run_id']} of {record['task']!r} has no pick for track(s): {', '.join(missing)}",
            hint=f"run `git parallel pick {record['task']}` first",
        )
    return out


# -- a person's pick -------------------------------------------------------------------
def who(project: Project) -> str:
    """The person acting: ``git config user.email`` (the identity git would
    commit with when it is unset)."""
    import pygit2

    try:
        email = project.repo.pygit.config["user.email"]
    except (KeyError, pygit2.GitError):
        email = None
    return email or project.repo.signature().email or "unknown"


# -- unpick ----------------------------------------------------------------------------
def retired_dir(parallel_dir: Path, run_id: str) -> Path:
    return parallel_dir / "picks" / run_id / "retired"


def retire_file(path: Path, folder: Path, track: str) -> Path:
    """Hard-link the pick file to the next free ``retired/<track>.<n>.json``,
    then remove it from its place: at every moment one of the two holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        target = folder / f"{track}.{n}.json"
        try:
            os.link(path, target)
            break
        except FileExistsError:
            n += 1
    os.unlink(path)
    return target


def find_retired(folder: Path, track: str, binding: PickBinding) -> Path:
    for candidate in sorted(folder.glob(f"{track}.*.json")):
        if sha256_bytes(candidate.read_bytes()) == binding.get("sha256"):
            return candidate
    raise ParallelError(
        E.PICK_MISSING, f"the pick record of track {track} ({binding.get('path')}) is gone, and not under {folder}",
        hint="restore it from a backup; `git parallel validate` shows what else is off")


def retire_picks(project: Project, record: RunRecord, tracks: list[str]) -> list[dict[str, Any]]:
    """Move the pick files of ``tracks`` to ``retired/`` (under the project
    lock); returns the entries ``model.retire_picks`` records.  Refused while
    a merge of the run is interrupted: its pick may have landed."""
    from gitflow_parallel.state import intent

    if intent.intent_path(project, record).exists():
        raise ParallelError(
            E.MERGE_CONFLICT, f"a merge of run {record['run_id']} was interrupted; its pick may have landed",
            hint=f"run `git parallel recover {record['task']}` first")
    bound = record.get("picks") or {}
    folder = retired_dir(project.repo.parallel_dir, record["run_id"])
    person, now = who(project), utcnow()
    retired: list[dict[str, Any]] = []  # as ``model.retire_picks`` takes them
    for t in tracks:
        pick = load_pick(project, record, t)  # refuses an edited pick file
        path = pick_path(project.repo.parallel_dir, record["run_id"], t)
        # Half done by a crash: the file already moved, the record not yet.
        target = retire_file(path, folder, t) if pick is not None else find_retired(folder, t, bound[t])
        retired.append({"track": t, "path": str(target), "sha256": bound[t]["sha256"],
                        "winner": bound[t]["winner"], "commit": bound[t].get("commit"),
                        "retired_by": person, "retired_at": now})
    return retired


def picks_of_track(project: Project, record: RunRecord, track: str) -> list[PickRecord]:
    """Every pick the track has had, oldest first: the retired ones, then the
    current one.  Unreadable files are skipped (this feeds feedback only)."""
    out = []
    for r in record.get("retired_picks") or []:
        if r.get("track") != track:
            continue
        try:
            out.append(json.loads(Path(r["path"]).read_bytes()))
        except (OSError, ValueError, KeyError):
            continue
    try:
        current = load_pick(project, record, track)
    except ParallelError:
        current = None
    return out + ([current] if current else [])


def refuse_closed(record: RunRecord, verb: str) -> None:
    if record["status"] in ("merged", "aborted"):
        merge = record.get("merge")
        landed = merge["landed"] if merge else None
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"run {record['run_id']} of {record['task']!r} is {record['status']}"
            + (f" (landed {landed[:12]})" if landed else "") + f"; nothing to {verb}",
            hint=f"spawn a new run with `git parallel spawn {record['task']}`")
