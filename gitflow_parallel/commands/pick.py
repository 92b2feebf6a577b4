"""``git parallel pick``: each track's winner by the configured rule
(``judge/selection``), or a person's choice (``--instance``), kept in the
write-once pick record.  The rules, the ties and the record are described
in docs/selection.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast


from gitflow_parallel import config, evidence, faults, model, provenance
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import create_exclusive, sha256_bytes, utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import (HUMAN, InstanceRecord, PickRecord, PickWinner, RunRecord, binding_of,
                                     find_instance)
from gitflow_parallel.shapes.results import PickResult
from gitflow_parallel.state.picks import ARBITER, SCHEMA_VERSION, id_key, load_pick, pick_bytes, pick_path, who
from gitflow_parallel.judge import selection
from gitflow_parallel.judge.selection import candidate_basis
from gitflow_parallel.state.picks import refuse_closed


# A pick decided, and the candidates it was decided from (``selection.candidate_basis``).
Decided = tuple[PickRecord, list[tuple[str, int, str, str]]]


# -- an attempt that changed nothing is never a candidate (``model.NO_CHANGE``) ---------------
# Its tree is the base's, which may well pass every gate; selection sees
# the record without it, and the pick names it among the losers.
def _idle(record: RunRecord, track: str) -> list[InstanceRecord]:
    return [i for i in record["instances"] if i["track"] == track and model.changed_nothing(i)]


def _pickable(record: RunRecord) -> RunRecord:
    """The record as selection sees it: without the attempts that changed nothing."""
    if not any(model.changed_nothing(i) for i in record["instances"]):
        return record
    return cast(RunRecord, {**record, "instances": [i for i in record["instances"] if not model.changed_nothing(i)]})


def decide(project: Project, record: RunRecord, track: str) -> Decided:
    """``selection.decide`` over the attempts that changed something."""
    idle = _idle(record, track)
    try:
        pick, basis = selection.decide(project, _pickable(record), track)
    except ParallelError as exc:
        if idle and exc.code == E.SELECTION_NO_PASS:
            said = "; ".join(f"{i['id']}: {model.NO_CHANGE_WHY}" for i in idle)
            exc.message = f"{exc.message} ({said})" if "has no instances" not in exc.message else (
                f"no instance of track {track} of {record['task']!r} changed anything ({said})")
            exc.args = (exc.message,)
        raise
    if idle:
        losers = [*pick["losers"], *({"id": i["id"], "code": E.SELECTION_NO_PASS, "reason": model.NO_CHANGE_WHY}
                                     for i in idle)]
        pick["losers"] = sorted(losers, key=lambda l: id_key(l["id"]))
    return pick, basis


def choose(project: Project, record: RunRecord, track: str) -> PickRecord:
    return decide(project, record, track)[0]


def track_candidates(project: Project, record: RunRecord, track: str) -> tuple[list[Any], list[Any]]:
    return selection.track_candidates(project, _pickable(record), track)

def _bind(rec: RunRecord, written: list[tuple[PickRecord, Path, str]]) -> None:
    """Name each written pick file (path and sha256) in the run record."""
    for p, path, sha in written:
        model.bind_pick(rec, p["track"], path, sha, p)


def _tracks_to_pick(project: Project, record: RunRecord, task: str, track: str | None) -> list[str]:
    if record["status"] == "aborted":
        raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} was aborted",
                            hint=f"spawn a new run with `git parallel spawn {task}`")
    if track is not None and track not in record["tracks"]:
        raise ParallelError(E.TRACK_MISMATCH, f"run {record['run_id']} has no track {track!r} "
                            f"(tracks: {', '.join(record['tracks'])})", hint="pass one of its tracks to --track")
    config.verify_frozen(project.repo, record)
    return [track] if track else list(record["tracks"])


def _judged_outside_lock(project: Project, task: str, track: str | None) -> dict[str, Decided]:
    """A tournament's judge may take minutes (an LLM per match), and so may
    the distinguish commands of a differential pick; they run
    before the project lock is taken, so spawns, runs and checks of other
    tasks go on meanwhile.  Returns {track: (pick, basis)} for the caller to
    confirm under the lock."""
    record = project.store.load(task)
    if record["config"]["selection"] not in ("tournament", "differential"):
        return {}
    return {t: decide(project, record, t) for t in _tracks_to_pick(project, record, task, track)
            if load_pick(project, record, t) is None}


def _confirmed(project: Project, record: RunRecord, track: str, judged: Decided) -> PickRecord:
    """The pick decided outside the lock, if its candidates are still exactly
    the ones it was decided from; a changed field of candidates is refused
    rather than judged again under the lock."""
    pick, basis = judged
    candidates, _ = track_candidates(project, record, track)
    if candidate_basis(candidates) != basis:
        raise ParallelError(
            E.RUN_REVISION_CONFLICT,
            f"the candidates of track {track} of {record['task']!r} changed while the judge ran "
            "(an instance was checked, retried or moved meanwhile); nothing was written",
            hint=f"run `git parallel pick {record['task']}` again")
    return pick


def pick(project: Project, task: str, track: str | None = None) -> PickResult:
    """Pick the winner of ``track`` (or of every unpicked track)."""
    check_name(task, "task")
    store = project.store
    judged = _judged_outside_lock(project, task, track)
    with store.lock():
        record = store.load(task)
        tracks = _tracks_to_pick(project, record, task, track)
        existing: list[PickRecord] = []
        fresh_picks: list[PickRecord] = []
        for t in tracks:
            found = load_pick(project, record, t)
            if found is not None:
                existing.append(found)
            elif t in judged:
                fresh_picks.append(_confirmed(project, record, t, judged[t]))
            else:
                fresh_picks.append(choose(project, record, t))
        written: list[tuple[PickRecord, Path, str]] = []
        for p in fresh_picks:
            path = pick_path(project.repo.parallel_dir, record["run_id"], p["track"])
            data = pick_bytes(p)
            if create_exclusive(path, data):
                written.append((p, path, sha256_bytes(data)))
            else:  # someone else picked first (outside our lock: a hand-made file)
                first = load_pick(project, record, p["track"])
                existing += [first] if first is not None else []
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
        warning = project.mirror_notes(record, [(p["winner"]["commit"], provenance.pick_note(p)) for p, _, _ in written], "pick")
    return {"run_id": record["run_id"], "task": task, "notes_error": warning,
            "picks": [p for p, _, _ in written if p["track"] in created],
            "existing": existing, "status": record["status"]}


def _human_shortfalls(project: Project, record: RunRecord, inst: InstanceRecord,
                      tip: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    """What an automatic pick would hold against ``inst`` (its pack, if
    fresh, and every shortfall in words); a human pick refuses on any unless forced."""
    wanted: list[str] = []
    if inst["status"] != "succeeded":
        wanted.append(f"it is {inst['status']}, not succeeded")
    if model.changed_nothing(inst):
        wanted.append(model.NO_CHANGE_WHY)
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


def choose_human(project: Project, record: RunRecord, inst_id: str, reason: str | None,
                 force: bool) -> PickRecord:
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
    winner: PickWinner = {"id": inst_id, "attempt": inst["attempt"], "commit": commit,
                          "tree": project.repo.tree_of(commit),
                          "evidence_sha256": binding_of(inst).get("sha256") if pack else None}
    agent = inst.get("agent")
    if agent:
        winner["agent"] = agent
    return {
        "schema_version": SCHEMA_VERSION, "run_id": record["run_id"], "task": task, "track": track,
        "winner": winner,
        "verdict": pack.get("verdict") if pack else None, "score": pack.get("score") if pack else None,
        "proof_issued_at": pack.get("proof_issued_at") if pack else None,
        "selection_method": HUMAN, "picked_by": person, "reason": reason, "forced": bool(force),
        "waived": wanted if force else [],
        # What it changed of the tests, the harness or the config lands with it: said here, in the notes, by merge.
        "protected_changes": (pack.get("protected_detail") or []) if pack else [], "arbiter": ARBITER,
        "merge_policy": record["config"]["merge"]["policy"],
        "losers": losers, "created_at": utcnow(),
    }


def pick_human(project: Project, task: str, inst_id: str, reason: str | None = None,
               force: bool = False) -> PickResult:
    """A person's pick of ``inst_id`` for its track (write-once, like any pick)."""
    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        refuse_closed(record, "pick")
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
    warning = project.mirror_notes(record, [(chosen["winner"]["commit"], provenance.pick_note(chosen))], "pick")
    return {"run_id": record["run_id"], "task": task, "notes_error": warning, "picks": [chosen], "existing": [],
            "status": record["status"]}


