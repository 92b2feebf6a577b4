"""The run record: its shape, its statuses and every change made to it.

A run record (one per task, kept by ``state/store``) holds the run's base, its
frozen config and one instance record per attempt slot; pick and merge
records are bound into it.  This module is the one place that builds those
records and changes their fields: every verb (spawn, run, check, pick, merge,
retry, abort, cleanup, done, collect) and ``recover`` call the same named
mutations, so a repair that finishes what an interrupted verb started writes
exactly what that verb would have written.

The mutations change the mapping they are given and nothing else: the store
applies them under its lock, bumps ``run_revision`` (and, through
``Store.update_instance``, ``instance_revision``) and saves.  A caller that
changes an instance inside a plain ``Store.update`` bumps it with
:func:`bump`.  Status moves are checked against :data:`TRANSITIONS`; a move
it does not allow raises ``PARALLEL_BRANCH_TERMINAL`` (or
``PARALLEL_RECORD_INVALID``) and changes nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
# The record shapes (declared in ``shapes.records``) are named here too, beside their mutations.
from gitflow_parallel.shapes.records import INSTANCE_STATUSES as INSTANCE_STATUSES
from gitflow_parallel.shapes.records import RUN_STATUSES as RUN_STATUSES
from gitflow_parallel.shapes.records import SCHEMA_VERSION as SCHEMA_VERSION
from gitflow_parallel.shapes.records import Base as Base
from gitflow_parallel.shapes.records import ClaimHolder as ClaimHolder
from gitflow_parallel.shapes.records import Comment as Comment
from gitflow_parallel.shapes.records import EvidenceBinding as EvidenceBinding
from gitflow_parallel.shapes.records import HistoryEntry as HistoryEntry
from gitflow_parallel.shapes.records import InstanceRecord as InstanceRecord
from gitflow_parallel.shapes.records import InstanceStatus as InstanceStatus
from gitflow_parallel.shapes.records import LandingStep as LandingStep
from gitflow_parallel.shapes.records import MergeRecord as MergeRecord
from gitflow_parallel.shapes.records import PickBinding as PickBinding
from gitflow_parallel.shapes.records import PickRecord as PickRecord
from gitflow_parallel.shapes.records import PickWinner as PickWinner
from gitflow_parallel.shapes.records import PrInfo as PrInfo
from gitflow_parallel.shapes.records import Proposal as Proposal
from gitflow_parallel.shapes.records import PushedInfo as PushedInfo
from gitflow_parallel.shapes.records import RelandedEntry as RelandedEntry
from gitflow_parallel.shapes.records import Reproof as Reproof
from gitflow_parallel.shapes.records import Retried as Retried
from gitflow_parallel.shapes.records import RemoteInfo as RemoteInfo
from gitflow_parallel.shapes.records import RunRecord as RunRecord
from gitflow_parallel.shapes.records import RunStatus as RunStatus
from gitflow_parallel.shapes.records import StartPoint as StartPoint

if TYPE_CHECKING:
    from gitflow_parallel.config_schema import FrozenConfig

TERMINAL = ("succeeded", "failed", "aborted")
RETRYABLE = ("failed", "aborted")
FINISHED_RUN = ("merged", "aborted")
HUMAN = "human"  # the selection_method of a person's pick

# Status moves an instance may make; anything else is refused.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "pending": ("running", "succeeded", "failed", "aborted"),  # succeeded: work done by hand (hand.py)
    "running": ("succeeded", "failed", "aborted"),
    "succeeded": (),
    "failed": (),
    "aborted": (),
}


# A track's pick and its winning instance, as ``merge`` lands them.
Winner = tuple[PickRecord, InstanceRecord]


# -- building ------------------------------------------------------------------------
def new_instance(task: str, track: str, inst_id: str, root: Path, base_commit: str) -> InstanceRecord:
    """A pending instance at attempt 0, its branch at ``base_commit``."""
    return {
        "id": inst_id, "track": track, "branch": f"parallel/{task}/{inst_id}",
        "worktree": str(root / task / inst_id), "attempt": 0, "instance_revision": 1,
        "status": "pending", "head": base_commit, "verdict": None, "score": None,
        "evidence": None, "error": None, "history": [], "pid": None, "started_at": None,
        "finished_at": None, "exit_code": None, "log": None, "removed": False,
    }


def new_run(task: str, base: Base, tracks: list[str], config: FrozenConfig, config_sha256: str,
            config_source: object, root: Path, instances: list[InstanceRecord], now: str,
            run_id: str | None = None, **extra: object) -> RunRecord:
    """A pending run at revision 1 (a fresh run id unless ``run_id``)."""
    return {
        "schema_version": SCHEMA_VERSION, "run_id": run_id or f"PR-{uuid.uuid4()}", "task": task,
        "base": base, "run_revision": 1, "status": "pending",
        "created_at": now, "updated_at": now, "tracks": tracks, "config": config,
        "config_sha256": config_sha256, "config_source": config_source, "worktree_root": str(root),
        "instances": instances, "picks": {}, "merge": None, **extra,  # type: ignore[typeddict-item]
    }


def landing_method(steps: list[LandingStep]) -> str:
    """``squash``, ``merge`` or ``fast-forward``: what the base moved by."""
    return next((m for m in ("squash", "merge") if any(s["method"] == m for s in steps)), "fast-forward")


def new_merge(landed: str, previous: str | None, base_ref: str, steps: list[LandingStep],
              resolved_files: list[Any], policy: str, merged_at: str, *, attempts: int | None = None,
              retried: list[Retried] | None = None, verified: list[Reproof] | None = None,
              worktree: str | None = None, worktree_error: str | None = None, **extra: object) -> MergeRecord:
    """The merge record of a landing (``extra``: ``onto``, ``verify``, or
    ``recovered``/``outside`` for one that recover found)."""
    return {
        "landed": landed, "previous": previous, "base_ref": base_ref, "steps": steps,
        "method": landing_method(steps), "resolved_files": resolved_files, "policy": policy,
        "attempts": attempts, "retried": retried or [], "verified": verified or [], "worktree": worktree,
        "worktree_error": worktree_error, "merged_at": merged_at, **extra,  # type: ignore[typeddict-item]
    }


# -- reading ---------------------------------------------------------------------------
def derive_run_status(record: RunRecord) -> RunStatus:
    """The run status implied by its instances, unless a later stage set it."""
    if record["status"] in ("picked", "merged", "aborted"):
        return record["status"]
    statuses = [i["status"] for i in record["instances"]]
    if any(s == "running" for s in statuses):
        return "running"
    if statuses and all(s in TERMINAL for s in statuses):
        return "completed" if any(s == "succeeded" for s in statuses) else "failed"
    return "pending"  # some instances still wait for `run`


def find_instance(record: RunRecord, inst_id: str) -> InstanceRecord:
    for inst in record["instances"]:
        if inst["id"] == inst_id:
            return inst
    known = ", ".join(i["id"] for i in record["instances"])
    raise ParallelError(
        E.BRANCH_NOT_FOUND,
        f"run {record['run_id']} of task {record['task']!r} has no instance {inst_id!r} (it has: {known})",
        hint=f"see `git parallel status {record['task']}`",
    )


def binding_of(inst: InstanceRecord) -> dict[str, Any]:
    """The instance's evidence binding as a plain mapping (empty without one)."""
    binding = inst.get("evidence")
    return cast(dict[str, Any], binding) if binding else {}


def check_transition(record: RunRecord, inst: InstanceRecord, to: str) -> None:
    """Refuse a status move :data:`TRANSITIONS` does not allow."""
    if to not in TRANSITIONS.get(inst["status"], ()):
        if inst["status"] in TERMINAL:
            hint = (f"`git parallel retry {record['task']} {inst['id']}` starts a new attempt"
                    if inst["status"] in RETRYABLE else "a succeeded instance is final; check, pick or merge it")
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"instance {inst['id']} is {inst['status']} (terminal) and cannot become {to}",
                hint=hint,
            )
        raise ParallelError(
            E.BRANCH_TERMINAL if to == "running" else E.RECORD_INVALID,
            f"instance {inst['id']} cannot go from {inst['status']} to {to}",
            hint=f"see `git parallel status {record['task']}`",
        )


# -- instance mutations -------------------------------------------------------------------
def bump(inst: InstanceRecord) -> None:
    """Count a change of an instance made inside a plain ``Store.update``."""
    inst["instance_revision"] += 1


def start(record: RunRecord, inst: InstanceRecord, pid: int, runner_pid: int, now: str,
          log: str, events: str) -> None:
    """``run`` started the attempt's command as process ``pid``."""
    check_transition(record, inst, "running")
    inst.update({"status": "running", "pid": pid, "runner_pid": runner_pid, "started_at": now,
                 "finished_at": None, "exit_code": None, "error": None, "log": log, "events": events})
    inst.pop("tampered", None)


def move(record: RunRecord, inst: InstanceRecord, to: str, **fields: object) -> None:
    """Any allowed status move, with the fields that go with it."""
    check_transition(record, inst, to)
    inst["status"] = cast(InstanceStatus, to)  # one of TRANSITIONS, which holds only statuses
    inst.update(fields)  # type: ignore[typeddict-item]


# An attempt that exited 0 but whose branch holds nothing the base lacks
# (its tree is the one it started from, nothing left over) "did nothing".
# That is a field beside ``succeeded``, not a sixth status: the statuses,
# their transitions and TERMINAL are read by every verb, the hooks' live
# index, recovery, workers on other machines and records already written,
# and all of them stay right about a "succeeded" attempt that changed
# nothing (it ran, it ended well, it is final).  What differs is only
# that it can never win: the run summary, status, show and the report
# say ``no change``, and pick never takes it.
NO_CHANGE = "no_change"
NO_CHANGE_WHY = "it changed nothing (it exited 0 with its tree as it started), so it can never win"


def finish(record: RunRecord, inst: InstanceRecord, status: str, outcome: str | None = None,
           **fields: object) -> None:
    """The attempt ended as ``status`` (succeeded, failed or aborted); ``fields``
    say how (head, finished_at, exit_code, error, origin…); ``outcome``:
    ``NO_CHANGE`` for a succeeded attempt that changed nothing."""
    move(record, inst, status, **fields)
    if outcome == NO_CHANGE and status == "succeeded":
        inst["outcome"] = "no_change"
    else:
        inst.pop("outcome", None)


def changed_nothing(inst: InstanceRecord) -> bool:
    """Did this attempt end well having changed nothing (``NO_CHANGE``)?"""
    return inst["status"] == "succeeded" and inst.get("outcome") == NO_CHANGE


def unchanged_from(record: RunRecord, inst: InstanceRecord) -> str:
    """The commit whose tree an attempt that changed nothing still has:
    where it started (the spawn's base, or the base's tip for ``retry
    --onto-current``), but the spawn's base for one that went on from its
    previous attempt (``retry --keep``), whose earlier work is a change."""
    start = inst.get("start") or {}
    if start.get("commit") and start.get("from") != "previous-attempt":
        return start["commit"]
    return record["base"]["commit"]


def bind_evidence(inst: InstanceRecord, binding: EvidenceBinding, pack: Mapping[str, Any]) -> None:
    """Bind the evidence pack ``check`` wrote (its path and sha256) and its verdict."""
    inst["evidence"] = {"path": binding["path"], "sha256": binding["sha256"],
                        "instance_revision": pack["instance_revision"]}
    inst["verdict"] = pack.get("verdict")
    inst["score"] = pack.get("score")
    inst["protected_changes"] = pack.get("protected_detail") or []


def record_head(inst: InstanceRecord, head: str | None) -> None:
    """The branch moved after the attempt ended; its tip is the head now."""
    inst["head"] = head


def reset_for_retry(inst: InstanceRecord, start_commit: str, how: str, tip: str | None,
                    archived: str | None, kept: list[str], feedback: object) -> None:
    """Attempt + 1, pending at ``start_commit``; the old attempt goes to history."""
    inst["history"].append({
        "attempt": inst["attempt"], "status": inst["status"], "head": tip, "verdict": inst["verdict"],
        "score": inst["score"], "evidence": inst["evidence"], "error": inst["error"],
        "exit_code": inst.get("exit_code"), "log": inst.get("log"), "events": inst.get("events"),
        "archive_ref": archived, "kept": kept, "finished_at": inst.get("finished_at"), "start": inst.get("start"),
        "origin": inst.get("origin"), "feedback": inst.get("feedback"),
        **({"agent": inst["agent"]} if inst.get("agent") else {}),
        **({"outcome": inst["outcome"]} if inst.get("outcome") else {}),
    })
    inst.update({"attempt": inst["attempt"] + 1, "status": "pending", "head": start_commit, "verdict": None,
                 "score": None, "evidence": None, "error": None, "pid": None, "started_at": None,
                 "finished_at": None, "exit_code": None, "log": None, "events": None, "removed": False,
                 "origin": None, "feedback": feedback, "start": {"commit": start_commit, "from": how}})
    inst.pop("protected_changes", None)
    inst.pop("outcome", None)


def assign_agent(inst: InstanceRecord, name: str | None, command: list[str] | None) -> None:
    """``run --agent``/``agents:``: the named agent (and its command) runs this
    instance, now and in its retries; ``None`` clears it (a plain ``run -- CMD``)."""
    if name is None:
        inst.pop("agent", None)
        inst.pop("agent_command", None)
    else:
        inst.update({"agent": name, "agent_command": list(command or [])})


def new_comment(attempt: int, text: str, file: str | None, line: int | None, by: str, at: str) -> Comment:
    """A person's review comment on one attempt (``git parallel comment``)."""
    return {"attempt": attempt, "text": text, "file": file, "line": line, "by": by, "at": at}


def add_comment(inst: InstanceRecord, comment: Comment) -> None:
    """Keep a review comment on the instance; ``retry`` gives those on the
    attempt it replaces to the next agent (``state/feedback``)."""
    inst["comments"] = list(inst.get("comments") or []) + [comment]


def mark_removed(inst: InstanceRecord) -> None:
    """Its worktree and branch are gone (its tip archived)."""
    inst["removed"] = True


# -- a worker's own record of an instance (``git parallel worker``) ---------------------
def new_claim_holder(worker: str, host: str, pid: int, generation: int, since: str) -> ClaimHolder:
    """Who holds an instance's claim, as the worker's own record keeps it:
    the worker's name and process, the claim's generation, when it was taken."""
    return {"worker": worker, "host": host, "pid": pid, "generation": generation, "since": since}


def hold_claim(inst: InstanceRecord, holder: ClaimHolder) -> None:
    inst["claim"] = holder


def worker_instance(task: str, inst: InstanceRecord, root: Path, start_commit: str,
                    holder: ClaimHolder) -> InstanceRecord:
    """The worker's own instance for the coordinator's ``inst``: its attempt
    and start, pending at ``start_commit`` under ``root``, claimed by ``holder``."""
    local = new_instance(task, inst["track"], inst["id"], root, start_commit)
    local.update({"attempt": inst["attempt"], "start": inst.get("start")})
    hold_claim(local, holder)
    return local


def put_instance(record: RunRecord, inst: InstanceRecord) -> None:
    """Put ``inst`` in the record (last), in place of the one with its id."""
    drop_instance(record, inst["id"])
    record["instances"] = record["instances"] + [inst]


def drop_instance(record: RunRecord, inst_id: str) -> None:
    """Take the instance ``inst_id`` out of the record (a worker that could not make its worktree)."""
    record["instances"] = [i for i in record["instances"] if i["id"] != inst_id]


def worker_gone(record: RunRecord, inst: InstanceRecord, why: str, now: str) -> None:
    """The worker that held this instance is gone (killed, its machine
    stopped) and its claim is no longer its: an unfinished attempt is aborted
    with ``why``; the instance is then taken apart (:func:`mark_removed`)."""
    if inst["status"] in ("pending", "running"):
        move(record, inst, "aborted", finished_at=now, error=why)


# -- run mutations ---------------------------------------------------------------------
def bind_pick(record: RunRecord, track: str, path: Path | str, sha256: str, pick: PickRecord) -> None:
    """Name a written pick file in the record; once every track has one the run is picked."""
    picks = record.get("picks") or {}
    record["picks"] = picks
    picks[track] = {"path": str(path), "sha256": sha256, "winner": pick["winner"]["id"],
                    "commit": pick["winner"]["commit"]}
    if all(t in picks for t in record["tracks"]) and record["status"] not in FINISHED_RUN:
        record["status"] = "picked"


def retire_picks(record: RunRecord, retired: list[dict[str, Any]]) -> None:
    """``unpick``: the tracks' picks move to ``retired_picks``; a picked run
    goes back to what its instances say."""
    for r in retired:
        (record.get("picks") or {}).pop(r["track"], None)
    record.setdefault("retired_picks", []).extend(retired)
    if record["status"] == "picked":
        record["status"] = "pending"  # re-derived from the instances by the store


def mark_merged(record: RunRecord, merge: MergeRecord) -> None:
    record["status"] = "merged"
    record["merge"] = merge


def merge_of(record: RunRecord) -> MergeRecord:
    """The merge record of a merged run."""
    merge = record.get("merge")
    if merge is None:
        raise ParallelError(E.RECORD_INVALID, f"run {record['run_id']} of {record['task']!r} has no merge record",
                            hint=f"see `git parallel validate {record['task']}`")
    return merge


def reland(merge: MergeRecord, landed: str, steps: list[LandingStep], resolved_files: list[Any], *, onto: str,
           previous_landed: str, previous_onto: str, verified: list[Reproof], worktree_error: str | None,
           at: str) -> None:
    """``merge --push`` landed the winners again on a remote base that moved;
    the earlier landing is kept under ``relanded``."""
    merge["relanded"] = list(merge.get("relanded") or []) + [
        {"landed": previous_landed, "onto": previous_onto, "remote_tip": onto, "at": at}]
    merge.update({"landed": landed, "onto": onto, "steps": steps, "method": landing_method(steps),
                  "resolved_files": resolved_files, "verified": verified, "worktree_error": worktree_error})


def mark_pushed(merge: MergeRecord, pushed: PushedInfo) -> None:
    """``merge --push``: the remote's base now has the landing."""
    merge["pushed"] = pushed


def new_pushed(remote: str, landed: str, pushed_at: str, attempts: int) -> PushedInfo:
    return {"remote": remote, "landed": landed, "pushed_at": pushed_at, "attempts": attempts}


def new_remote(name: str, agent: list[str] | None, timeout: float | None, published_at: str) -> RemoteInfo:
    return {"name": name, "agent": agent, "timeout": timeout, "published_at": published_at}


def mark_published(record: RunRecord, remote: RemoteInfo) -> None:
    """``publish`` pushed the run to ``remote["name"]``; workers there take it."""
    record["remote"] = remote


def new_pr(remote: str, base: str, requested_at: str, proposals: list[Proposal]) -> PrInfo:
    return {"remote": remote, "base": base, "requested_at": requested_at, "proposals": proposals}


def mark_proposed(record: RunRecord, pr: PrInfo) -> None:
    """``merge --pr`` pushed the winners and asked for pull requests."""
    record["pr"] = pr


def mark_aborted(record: RunRecord) -> None:
    record["status"] = "aborted"


def refuse_finished(record: RunRecord, verb: str) -> None:
    if record["status"] in FINISHED_RUN:
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"run {record['run_id']} of {record['task']!r} is {record['status']}; nothing to {verb}",
            hint=f"spawn a new run with `git parallel spawn {record['task']}`",
        )


# -- rounds of run --until-pass ------------------------------------------------
def satisfied_tracks(record: RunRecord) -> set[str]:
    """Tracks with a passing attempt: ``run --until-pass`` is done with them."""
    return {i["track"] for i in record["instances"] if i["status"] == "succeeded" and i["verdict"] == "pass"}


def retry_candidates(record: RunRecord, ids: list[str]) -> list[str]:
    """Of ``ids``, the instances the next ``--until-pass`` round retries: a
    failed attempt (the agent or its gates) of a track with no passing one,
    with retries left under ``rework_max``."""
    done = satisfied_tracks(record)
    out = []
    for inst_id in ids:
        inst = find_instance(record, inst_id)
        failed = inst["status"] == "failed" or (inst["status"] == "succeeded" and inst["verdict"] == "fail")
        if failed and inst["track"] not in done and inst["attempt"] < record["config"]["rework_max"]:
            out.append(inst_id)
    return out
