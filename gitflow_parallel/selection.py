"""Selection: choosing each track's winner and keeping the write-once pick record.

Candidates are the instances whose latest evidence is complete, fresh (bound
to the branch's current tip) and passes every enforced gate.  Two rules:

* ``critic_first_pass`` (default): highest score first; ties by earliest
  ``proof_issued_at``, then by instance id.  A null score sorts after every
  number.
* ``majority_vote``: the largest group of candidates with an identical tree
  wins; ties between groups, and the member chosen inside the group, follow
  the critic order.

With no score source configured the score is null ("unavailable") and no
threshold applies.  With a source configured, a winner whose score is null
(the source yielded nothing) or below ``score.threshold`` is refused with
``PARALLEL_DEV_ANTI_SLOP_BELOW_THRESHOLD``.  Nothing is written unless every
requested track has a winner.

The pick record is created exclusively (hard link of a complete temporary
file) at ``<common>/parallel/picks/<run_id>/<track>.json``; a second pick of
the same track returns the existing record and changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gitflow_parallel import __version__, config, evidence, faults, notes
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import create_exclusive, sha256_bytes, utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.project import Project
from gitflow_parallel.store import find_instance

SCHEMA_VERSION = 1
ARBITER = f"git-parallel {__version__}"


def pick_path(parallel_dir: Path, run_id: str, track: str) -> Path:
    return parallel_dir / "picks" / run_id / f"{track}.json"


def _schema_invalid(path: Path, problem: str) -> ParallelError:
    return ParallelError(
        E.PICK_SCHEMA_INVALID,
        f"pick record {path} is invalid: {problem}",
        hint="pick records are write-once; restore it, or run `git parallel validate` to see what else is wrong",
    )


def validate_pick(pick: Any, path: Path, record: dict[str, Any], track: str) -> dict[str, Any]:
    if not isinstance(pick, dict):
        raise _schema_invalid(path, "not a JSON object")
    for key, types in (("schema_version", int), ("run_id", str), ("task", str), ("track", str), ("winner", dict),
                       ("verdict", str), ("selection_method", str), ("arbiter", str), ("merge_policy", str),
                       ("losers", list), ("created_at", str), ("proof_issued_at", str)):
        if not isinstance(pick.get(key), types) or isinstance(pick.get(key), bool):
            raise _schema_invalid(path, f"field {key!r} is missing or not {types.__name__}")
    if pick["schema_version"] != SCHEMA_VERSION:
        raise _schema_invalid(path, f"schema_version {pick['schema_version']} is not {SCHEMA_VERSION}")
    if pick["run_id"] != record["run_id"] or pick["task"] != record["task"] or pick["track"] != track:
        raise _schema_invalid(path, "it names another run, task or track")
    if "score" not in pick or not (pick["score"] is None or (isinstance(pick["score"], int) and not isinstance(pick["score"], bool))):
        raise _schema_invalid(path, "score must be an integer or null")
    winner = pick["winner"]
    for key in ("id", "commit", "tree", "evidence_sha256"):
        if not isinstance(winner.get(key), str):
            raise _schema_invalid(path, f"winner.{key} is missing")
    if not isinstance(winner.get("attempt"), int):
        raise _schema_invalid(path, "winner.attempt is missing")
    if pick["verdict"] != "pass":
        raise _schema_invalid(path, f"verdict is {pick['verdict']!r}, a pick is always of a passing instance")
    return pick


def load_pick(project: Project, record: dict[str, Any], track: str) -> dict[str, Any] | None:
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


def winner_check(project: Project, record: dict[str, Any], inst: dict[str, Any], commit: str) -> tuple[bool, str | None, str]:
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
    fresh = evidence.freshness(record, inst, commit)
    if fresh.state != "fresh":
        return False, fresh.code, f"evidence of instance {inst['id']} is {fresh.state}: {fresh.reason}"
    if not fresh.passing:
        return False, E.SELECTION_NO_PASS, f"evidence of instance {inst['id']} does not pass"
    if (inst.get("evidence") or {}).get("sha256") != winner["evidence_sha256"]:
        return False, E.EVIDENCE_MISMATCH, "the evidence pack is not the one the pick was made from"
    return True, None, f"instance {inst['id']} is the picked winner with fresh passing evidence"


def _critic_key(c: dict[str, Any]) -> tuple[Any, ...]:
    score = c["score"]
    return (0 if score is not None else 1, -(score or 0), c["proof_issued_at"], c["id"])


def _order(cands: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    ranked = sorted(cands, key=_critic_key)
    if method != "majority_vote":
        return ranked
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in ranked:
        groups.setdefault(c["tree"], []).append(c)
    ordered_groups = sorted(groups.values(), key=lambda g: (-len(g), _critic_key(g[0])))
    return [c for g in ordered_groups for c in g]


def choose(project: Project, record: dict[str, Any], track: str) -> dict[str, Any]:
    """Compute (without writing) the pick record of one track."""
    cfg = record["config"]
    method = cfg["selection"]
    candidates: list[dict[str, Any]] = []
    losers: list[dict[str, Any]] = []
    for inst in record["instances"]:
        if inst["track"] != track:
            continue
        tip = project.tip(inst)
        if inst["status"] != "succeeded":
            losers.append({"id": inst["id"], "code": E.SELECTION_NO_PASS, "reason": f"status {inst['status']}"})
            continue
        fresh = evidence.freshness(record, inst, tip)
        if fresh.state != "fresh":
            losers.append({"id": inst["id"], "code": fresh.code, "reason": f"evidence {fresh.state}: {fresh.reason}"})
            continue
        pack = fresh.pack or {}
        if not pack.get("complete"):
            losers.append({"id": inst["id"], "code": E.EVIDENCE_MISSING, "reason": "evidence incomplete"})
            continue
        if pack.get("verdict") != "pass":
            failed = [g["name"] for g in pack.get("gates", []) if g.get("mode") == "enforced" and not g.get("passed")]
            losers.append({"id": inst["id"], "code": E.SELECTION_NO_PASS,
                           "reason": "failed enforced gates: " + (", ".join(failed) or "(verdict fail)")})
            continue
        candidates.append({"id": inst["id"], "attempt": inst["attempt"], "commit": pack["commit"], "tree": pack["tree"],
                           "evidence_sha256": inst["evidence"]["sha256"], "score": pack.get("score"),
                           "score_source": pack.get("score_source"), "score_error": pack.get("score_error"),
                           "proof_issued_at": pack["proof_issued_at"]})
    if not candidates:
        why = "; ".join(f"{l['id']}: {l['reason']}" for l in losers) or "it has no instances"
        raise ParallelError(
            E.SELECTION_NO_PASS,
            f"no instance of track {track} of {record['task']!r} has fresh, complete, passing evidence ({why})",
            hint=f"run `git parallel check {record['task']}` after the agents finish, or retry failed instances",
        )
    ordered = _order(candidates, method)
    winner = ordered[0]
    threshold = cfg["score"]["threshold"]
    if winner["score_source"] is not None or cfg["score"]["command"] or cfg["score"]["findings"]:
        if winner["score"] is None:
            raise ParallelError(
                E.ANTI_SLOP_BELOW_THRESHOLD,
                f"the best candidate {winner['id']} of track {track} has no score: "
                f"{winner.get('score_error') or 'the score source yielded nothing'}",
                hint="fix the score command or findings file, commit, and `git parallel check` again",
            )
        if winner["score"] < threshold:
            raise ParallelError(
                E.ANTI_SLOP_BELOW_THRESHOLD,
                f"the best candidate {winner['id']} of track {track} scores {winner['score']}, below threshold {threshold}",
                hint="improve the attempts (retry) or lower score.threshold in .gitparallel.yaml for new runs",
            )
    for c in ordered[1:]:
        if method == "majority_vote" and c["tree"] != winner["tree"]:
            reason = "its tree is not the majority's"
        elif c["tree"] == winner["tree"] and method == "majority_vote":
            reason = "same tree as the winner, ranked lower"
        else:
            score = "unavailable" if c["score"] is None else c["score"]
            reason = f"ranked below {winner['id']} (score {score}, proof {c['proof_issued_at']})"
        losers.append({"id": c["id"], "code": E.SELECTION_NO_PASS, "reason": reason})
    losers.sort(key=lambda l: l["id"])
    return {
        "schema_version": SCHEMA_VERSION, "run_id": record["run_id"], "task": record["task"], "track": track,
        "winner": {k: winner[k] for k in ("id", "attempt", "commit", "tree", "evidence_sha256")},
        "verdict": "pass", "score": winner["score"], "proof_issued_at": winner["proof_issued_at"],
        "selection_method": method, "arbiter": ARBITER, "merge_policy": cfg["merge"]["policy"],
        "losers": losers, "created_at": utcnow(),
    }


def pick_bytes(pick: dict[str, Any]) -> bytes:
    return (json.dumps(pick, sort_keys=True, indent=2) + "\n").encode("utf-8")


def pick_note(pick: dict[str, Any]) -> str:
    w = pick["winner"]
    return notes.line("pick", pick["run_id"], task=pick["task"], track=pick["track"], winner=w["id"],
                      attempt=w["attempt"], commit=w["commit"], tree=w["tree"], evidence_sha256=w["evidence_sha256"],
                      score=pick["score"], selection_method=pick["selection_method"],
                      merge_policy=pick["merge_policy"], created_at=pick["created_at"])


def pick(project: Project, task: str, track: str | None = None) -> dict[str, Any]:
    """Pick the winner of ``track`` (or of every unpicked track)."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        if record["status"] == "aborted":
            raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} was aborted",
                                hint=f"spawn a new run with `git parallel spawn {task}`")
        if track is not None and track not in record["tracks"]:
            raise ParallelError(E.TRACK_MISMATCH, f"run {record['run_id']} has no track {track!r} "
                                f"(tracks: {', '.join(record['tracks'])})", hint="pass one of its tracks to --track")
        tracks = [track] if track else list(record["tracks"])
        config.verify_frozen(project.repo, record)
        existing, fresh_picks = [], []
        for t in tracks:
            found = load_pick(project, record, t)
            if found is not None:
                existing.append(found)
            else:
                fresh_picks.append(choose(project, record, t))
        written = []
        for p in fresh_picks:
            path = pick_path(project.repo.parallel_dir, record["run_id"], p["track"])
            data = pick_bytes(p)
            if create_exclusive(path, data):
                written.append((p, path, sha256_bytes(data)))
            else:  # someone else picked first (outside our lock: a hand-made file)
                existing.append(load_pick(project, record, p["track"]))
        created = {p["track"] for p, _, _ in written}
        # A pick file that exists but is not in the record (a pick that crashed
        # between the two) is bound now, exactly as its own pick would have.
        for p in existing:
            if p["track"] not in (record.get("picks") or {}):
                path = pick_path(project.repo.parallel_dir, record["run_id"], p["track"])
                written.append((p, path, sha256_bytes(path.read_bytes())))
        faults.point("pick.after_record")
        if written:
            def apply(rec: dict[str, Any]) -> None:
                picks = rec.setdefault("picks", {}) or {}
                rec["picks"] = picks
                for p, path, sha in written:
                    picks[p["track"]] = {"path": str(path), "sha256": sha, "winner": p["winner"]["id"],
                                         "commit": p["winner"]["commit"]}
                if all(t in picks for t in rec["tracks"]) and rec["status"] not in ("merged", "aborted"):
                    rec["status"] = "picked"
            record, _ = store.update(task, apply)
    warning = None
    if written:
        warning = project.mirror_notes(record, [(p["winner"]["commit"], pick_note(p)) for p, _, _ in written], "pick")
    return {"run_id": record["run_id"], "task": task, "notes_error": warning,
            "picks": [p for p, _, _ in written if p["track"] in created],
            "existing": existing, "status": record["status"]}


def winner_instances(project: Project, record: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
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
