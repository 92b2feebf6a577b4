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

A person may choose instead (``pick --instance``, :func:`pick_human`): the
record says ``"selection_method": "human"``, who (``user.email``) and why
(``--reason``).  The same evidence is required (fresh, complete, passing, and
the score threshold) unless ``--force``, which lands in the record as
``forced`` with the list of what it ``waived``; a forced pick is then judged
only on being the exact commit and attempt picked.  ``unpick``
(:func:`unpick`) retires a pick that has not landed: the file moves, never
deleted, to ``picks/<run_id>/retired/<track>.<n>.json`` and the record lists
it under ``retired_picks``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pygit2

from gitflow_parallel import __version__, config, evidence, faults, notes
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import create_exclusive, sha256_bytes, utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.project import Project
from gitflow_parallel.store import find_instance

SCHEMA_VERSION = 1
ARBITER = f"git-parallel {__version__}"
HUMAN = "human"  # the selection_method of a person's pick


def pick_path(parallel_dir: Path, run_id: str, track: str) -> Path:
    return parallel_dir / "picks" / run_id / f"{track}.json"


def _schema_invalid(path: Path, problem: str) -> ParallelError:
    return ParallelError(
        E.PICK_SCHEMA_INVALID,
        f"pick record {path} is invalid: {problem}",
        hint="pick records are write-once; restore it, or run `git parallel validate` to see what else is wrong",
    )


def is_forced(pick: dict[str, Any]) -> bool:
    """A person's pick made with --force: its evidence was not required."""
    return pick.get("selection_method") == HUMAN and pick.get("forced") is True


def validate_pick(pick: Any, path: Path, record: dict[str, Any], track: str) -> dict[str, Any]:
    if not isinstance(pick, dict):
        raise _schema_invalid(path, "not a JSON object")
    forced = is_forced(pick)
    for key, types in (("schema_version", int), ("run_id", str), ("task", str), ("track", str), ("winner", dict),
                       ("verdict", str), ("selection_method", str), ("arbiter", str), ("merge_policy", str),
                       ("losers", list), ("created_at", str), ("proof_issued_at", str)):
        if forced and key in ("verdict", "proof_issued_at") and pick.get(key) is None:
            continue  # a forced pick may have no evidence at all
        if not isinstance(pick.get(key), types) or isinstance(pick.get(key), bool):
            raise _schema_invalid(path, f"field {key!r} is missing or not {types.__name__}")
    if pick["selection_method"] == HUMAN:
        if not isinstance(pick.get("picked_by"), str) or not isinstance(pick.get("forced"), bool):
            raise _schema_invalid(path, "a human pick must name picked_by and say whether it was forced")
        if pick.get("reason") is not None and not isinstance(pick["reason"], str):
            raise _schema_invalid(path, "reason must be a string or null")
    if pick["schema_version"] != SCHEMA_VERSION:
        raise _schema_invalid(path, f"schema_version {pick['schema_version']} is not {SCHEMA_VERSION}")
    if pick["run_id"] != record["run_id"] or pick["task"] != record["task"] or pick["track"] != track:
        raise _schema_invalid(path, "it names another run, task or track")
    if "score" not in pick or not (pick["score"] is None or (isinstance(pick["score"], int) and not isinstance(pick["score"], bool))):
        raise _schema_invalid(path, "score must be an integer or null")
    winner = pick["winner"]
    for key in ("id", "commit", "tree", "evidence_sha256"):
        if forced and key == "evidence_sha256" and winner.get(key) is None:
            continue
        if not isinstance(winner.get(key), str):
            raise _schema_invalid(path, f"winner.{key} is missing")
    if not isinstance(winner.get("attempt"), int):
        raise _schema_invalid(path, "winner.attempt is missing")
    if pick["verdict"] != "pass" and not forced:
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
    if is_forced(pick):
        # A person took responsibility for this exact commit with --force;
        # the record says so, and what it waived.
        return True, None, f"instance {inst['id']} is the winner {pick['picked_by']} picked with --force"
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
    human = ({"picked_by": pick["picked_by"], "reason": pick.get("reason"), "forced": pick["forced"]}
             if pick["selection_method"] == HUMAN else {})
    return notes.line("pick", pick["run_id"], task=pick["task"], track=pick["track"], winner=w["id"],
                      attempt=w["attempt"], commit=w["commit"], tree=w["tree"], evidence_sha256=w["evidence_sha256"],
                      score=pick["score"], selection_method=pick["selection_method"],
                      merge_policy=pick["merge_policy"], created_at=pick["created_at"], **human)


def _bind(rec: dict[str, Any], written: list[tuple[dict[str, Any], Path, str]]) -> None:
    """Name each written pick file (path and sha256) in the run record."""
    picks = rec.setdefault("picks", {}) or {}
    rec["picks"] = picks
    for p, path, sha in written:
        picks[p["track"]] = {"path": str(path), "sha256": sha, "winner": p["winner"]["id"],
                             "commit": p["winner"]["commit"]}
    if all(t in picks for t in rec["tracks"]) and rec["status"] not in ("merged", "aborted"):
        rec["status"] = "picked"


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
            record, _ = store.update(task, lambda rec: _bind(rec, written))
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


# -- a person's pick -------------------------------------------------------------------
def who(project: Project) -> str:
    """The person acting: ``git config user.email`` (the identity git would
    commit with when it is unset)."""
    try:
        email = project.repo.git.config["user.email"]
    except (KeyError, pygit2.GitError):
        email = None
    return email or project.repo.signature().email or "unknown"


def _human_shortfalls(project: Project, record: dict[str, Any], inst: dict[str, Any],
                      tip: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """What an automatic pick would hold against ``inst`` (its pack, if
    fresh, and every shortfall in words); a human pick refuses on any unless forced."""
    wanted: list[str] = []
    if inst["status"] != "succeeded":
        wanted.append(f"it is {inst['status']}, not succeeded")
    fresh = evidence.freshness(record, inst, tip)
    pack = fresh.pack if fresh.state == "fresh" else None
    if pack is None:
        wanted.append(f"its evidence is {fresh.state}: {fresh.reason}")
        return None, wanted
    if not pack.get("complete"):
        wanted.append("its evidence is incomplete (not every gate ran)")
    if pack.get("verdict") != "pass":
        failed = [g["name"] for g in pack.get("gates", []) if g.get("mode") == "enforced" and not g.get("passed")]
        wanted.append("it failed enforced gates: " + (", ".join(failed) or "(verdict fail)"))
    cfg = record["config"]["score"]
    if pack.get("score_source") is not None or cfg["command"] or cfg["findings"]:
        if pack.get("score") is None:
            wanted.append(f"it has no score ({pack.get('score_error') or 'the score source yielded nothing'})")
        elif pack["score"] < cfg["threshold"]:
            wanted.append(f"it scores {pack['score']}, below score.threshold {cfg['threshold']}")
    return pack, wanted


def choose_human(project: Project, record: dict[str, Any], inst_id: str, reason: str | None,
                 force: bool) -> dict[str, Any]:
    """Compute (without writing) the pick record of a person's choice."""
    inst = find_instance(record, inst_id)
    task, track = record["task"], inst["track"]
    tip = project.tip(inst)
    if inst["status"] in ("pending", "running") or inst.get("removed") or tip is None:
        what = "was cleaned up" if inst.get("removed") or tip is None else f"is {inst['status']}"
        raise ParallelError(
            E.SELECTION_NO_PASS, f"instance {inst_id} {what}; only finished work can win",
            hint=(f"let it finish (`git parallel status {task}`); work done by hand: `git parallel done {task} {inst_id}`"
                  if not inst.get("removed") else "pick another instance"))
    pack, wanted = _human_shortfalls(project, record, inst, tip)
    if wanted and not force:
        raise ParallelError(
            E.SELECTION_NO_PASS,
            f"instance {inst_id} cannot win track {track} of {task!r}: {'; '.join(wanted)}",
            hint=f"`git parallel check {task} --instance {inst_id}` first, or pass --force to pick it anyway "
                 "(recorded in the pick as forced, with what was waived)")
    person = who(project)
    because = f" ({reason})" if reason else ""
    losers = [{"id": i["id"], "code": E.SELECTION_NO_PASS, "reason": f"not chosen: {person} picked {inst_id}{because}"}
              for i in record["instances"] if i["track"] == track and i["id"] != inst_id]
    commit = pack["commit"] if pack else tip
    return {
        "schema_version": SCHEMA_VERSION, "run_id": record["run_id"], "task": task, "track": track,
        "winner": {"id": inst_id, "attempt": inst["attempt"], "commit": commit, "tree": project.repo.tree_of(commit),
                   "evidence_sha256": (inst.get("evidence") or {}).get("sha256") if pack else None},
        "verdict": pack.get("verdict") if pack else None, "score": pack.get("score") if pack else None,
        "proof_issued_at": pack.get("proof_issued_at") if pack else None,
        "selection_method": HUMAN, "picked_by": person, "reason": reason, "forced": bool(force),
        "waived": wanted if force else [], "arbiter": ARBITER, "merge_policy": record["config"]["merge"]["policy"],
        "losers": losers, "created_at": utcnow(),
    }


def _refuse_closed(record: dict[str, Any], verb: str) -> None:
    if record["status"] in ("merged", "aborted"):
        landed = (record.get("merge") or {}).get("landed")
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"run {record['run_id']} of {record['task']!r} is {record['status']}"
            + (f" (landed {landed[:12]})" if landed else "") + f"; nothing to {verb}",
            hint=f"spawn a new run with `git parallel spawn {record['task']}`")


def pick_human(project: Project, task: str, inst_id: str, reason: str | None = None,
               force: bool = False) -> dict[str, Any]:
    """A person's pick of ``inst_id`` for its track (write-once, like any pick)."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        _refuse_closed(record, "pick")
        track = find_instance(record, inst_id)["track"]
        existing = load_pick(project, record, track)
        if existing is not None:
            raise ParallelError(
                E.PICK_EXISTS,
                f"track {track} of {task!r} is already picked (winner {existing['winner']['id']}, "
                f"by {existing['selection_method']}); pick records are write-once",
                hint=f"`git parallel unpick {task} --track {track}` retires it (kept under retired/), then pick again")
        chosen = choose_human(project, record, inst_id, reason, force)
        path = pick_path(project.repo.parallel_dir, record["run_id"], track)
        data = pick_bytes(chosen)
        if not create_exclusive(path, data):
            raise ParallelError(E.PICK_EXISTS, f"a pick record of track {track} appeared at {path} meanwhile",
                                hint=f"see `git parallel status {task}`")
        faults.point("pick.after_record")
        record, _ = store.update(task, lambda rec: _bind(rec, [(chosen, path, sha256_bytes(data))]))
    warning = project.mirror_notes(record, [(chosen["winner"]["commit"], pick_note(chosen))], "pick")
    return {"run_id": record["run_id"], "task": task, "notes_error": warning, "picks": [chosen], "existing": [],
            "status": record["status"]}


# -- unpick ----------------------------------------------------------------------------
def retired_dir(parallel_dir: Path, run_id: str) -> Path:
    return parallel_dir / "picks" / run_id / "retired"


def _retire_file(path: Path, folder: Path, track: str) -> Path:
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


def unpick(project: Project, task: str, track: str | None = None) -> dict[str, Any]:
    """Retire the pick of ``track`` (or of every picked track) before it lands."""
    from gitflow_parallel import merge as M

    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        _refuse_closed(record, "unpick")
        if track is not None and track not in record["tracks"]:
            raise ParallelError(E.TRACK_MISMATCH, f"run {record['run_id']} has no track {track!r} "
                                f"(tracks: {', '.join(record['tracks'])})", hint="pass one of its tracks to --track")
        if M.intent_path(project, record).exists():
            raise ParallelError(
                E.MERGE_CONFLICT, f"a merge of run {record['run_id']} was interrupted; its pick may have landed",
                hint=f"run `git parallel recover {task}` first")
        bound = record.get("picks") or {}
        tracks = [track] if track else [t for t in record["tracks"] if t in bound]
        if not tracks or any(t not in bound for t in tracks):
            raise ParallelError(E.NOT_PICKED, f"track {track or 'of ' + repr(task)} has no pick to retire",
                                hint=f"`git parallel status {task}` shows the picks")
        folder = retired_dir(project.repo.parallel_dir, record["run_id"])
        person, now, retired = who(project), utcnow(), []
        for t in tracks:
            pick = load_pick(project, record, t)  # refuses an edited pick file
            path = pick_path(project.repo.parallel_dir, record["run_id"], t)
            # Half done by a crash: the file already moved, the record not yet.
            target = _retire_file(path, folder, t) if pick is not None else _find_retired(folder, t, bound[t])
            retired.append({"track": t, "path": str(target), "sha256": bound[t]["sha256"],
                            "winner": bound[t]["winner"], "commit": bound[t].get("commit"),
                            "retired_by": person, "retired_at": now})

        def apply(rec: dict[str, Any]) -> None:
            for r in retired:
                rec["picks"].pop(r["track"], None)
            rec.setdefault("retired_picks", []).extend(retired)
            if rec["status"] == "picked":
                rec["status"] = "pending"  # re-derived from the instances by the store

        record, _ = store.update(task, apply)
    entries = [(r["commit"], notes.line("unpick", record["run_id"], task=task, track=r["track"], winner=r["winner"],
                                        retired=r["path"], retired_by=person, retired_at=now))
               for r in retired if r["commit"]]
    warning = project.mirror_notes(record, entries, "unpick") if entries else None
    return {"run_id": record["run_id"], "task": task, "retired": retired, "status": record["status"],
            "notes_error": warning}


def _find_retired(folder: Path, track: str, binding: dict[str, Any]) -> Path:
    for candidate in sorted(folder.glob(f"{track}.*.json")):
        if sha256_bytes(candidate.read_bytes()) == binding.get("sha256"):
            return candidate
    raise ParallelError(
        E.PICK_MISSING, f"the pick record of track {track} ({binding.get('path')}) is gone, and not under {folder}",
        hint="restore it from a backup; `git parallel validate` shows what else is off")


def picks_of_track(project: Project, record: dict[str, Any], track: str) -> list[dict[str, Any]]:
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
