"""``git parallel collect``: bring the workers' results home: branches, evidence
refs and notes fetched, the record brought up to date, claims reported."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, TypedDict


from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, sha256_bytes
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.state import share
from gitflow_parallel.state.share import (EVIDENCE_PREFIX, capped, check_remote, evidence_ref, log_limit,
                                        notes_tracking_ref, tree_file)
from gitflow_parallel.proc.child import logs_dir
from gitflow_parallel.model import find_instance
from gitflow_parallel.shapes.records import EvidenceBinding, InstanceRecord, RunRecord
from gitflow_parallel.state.transport import (
    CLAIM_LOG, CLAIMS_PREFIX, prune_tracking, branch_tracking, claim_history, claim_state, describe_claim, fetch,
    fetched_claim, ls_remote, run_note_lines, tracking)


class Collected(TypedDict):
    """``collect``: each instance's claim as fetched, what was taken in, what to run next."""
    task: str
    run_id: str
    remote: str
    instances: list[dict[str, Any]]
    notes_error: str | None
    pending: list[str]
    next: list[str]


# -- collect ----------------------------------------------------------------------------------------
def _collect_specs(remote: str, record: RunRecord, have: dict[str, str]) -> list[str]:
    run_id, task = record["run_id"], record["task"]
    specs = [f"+refs/heads/parallel/{task}/*:refs/remotes/{remote}/parallel/{task}/*"]
    for prefix in (CLAIMS_PREFIX, EVIDENCE_PREFIX):
        if any(n.startswith(f"{prefix}/{run_id}/") for n in have):
            specs.append(f"+{prefix}/{run_id}/*:{tracking(remote, prefix + '/' + run_id)}/*")
    notes_ref = record["config"]["notes_ref"]
    if notes_ref in have:
        specs.append(f"+{notes_ref}:{notes_tracking_ref(remote, notes_ref)}")
    return specs


def _pack_problem(pack: object, record: RunRecord, inst: InstanceRecord, tip: str) -> str | None:
    """What makes a fetched pack unusable for this attempt (a pack that is
    consistent is still only a claim: merge re-proves the landing)."""
    if not isinstance(pack, dict):
        return "the pack is not a JSON object"
    for key, want in (("run_id", record["run_id"]), ("instance", inst["id"]), ("attempt", inst["attempt"]),
                      ("config_sha256", record["config_sha256"]), ("commit", tip)):
        if pack.get(key) != want:
            return f"its {key} is {pack.get(key)!r}, not {want!r}"
    return None


def _move_branch(project: Project, inst: InstanceRecord, tip: str) -> str | None:
    """Point the local instance branch (and its clean worktree) at ``tip``;
    returns a problem, or None."""
    repo = project.repo
    ref = f"refs/heads/{inst['branch']}"
    old = repo.ref_target(ref)
    if old == tip:
        return None
    path = Path(inst["worktree"])
    if old is not None and (path / ".git").exists():
        proc = repo.run_git(["merge", "--ff-only", "--quiet", tip], cwd=path, check=False)
        if proc.returncode != 0:
            return f"its worktree {path} could not follow: {proc.stderr.decode(errors='replace').strip()}"
        return None
    if old is not None and not repo.is_ancestor(old, tip):
        return f"the local branch {inst['branch']} has commits the pushed one lacks"
    if not repo.cas_ref(ref, tip, old, "git-parallel: collect"):
        return f"the local branch {inst['branch']} moved meanwhile"
    return None


def _keep_log(project: Project, record: RunRecord, inst: InstanceRecord, claim_oid: str | None) -> str | None:
    """The agent's log the worker put beside its done claim, as this clone's
    log of the attempt (capped again: the worker is not trusted to have)."""
    data = tree_file(project.repo, claim_oid, CLAIM_LOG)
    if data is None:
        return None
    path = logs_dir(project.repo.parallel_dir, record["run_id"]) / f"{inst['id']}.{inst['attempt']}.log"
    atomic_write(path, capped(data, log_limit(record)))
    return str(path)


def _take_result(project: Project, remote: str, record: RunRecord, inst: InstanceRecord,
                 claim: dict[str, Any], claim_oid: str | None) -> dict[str, Any]:
    """Bring one finished remote attempt into the local record."""
    repo, run_id = project.repo, record["run_id"]
    result = claim.get("result") or {}
    tip = result.get("head")
    pushed = repo.ref_target(branch_tracking(remote, inst["branch"]))
    start = (inst.get("start") or {}).get("commit") or record["base"]["commit"]
    if not tip or tip != pushed:
        return {"problem": f"the claim says {str(tip)[:12]}, the remote branch is at {str(pushed)[:12]}"}
    if not repo.is_ancestor(start, tip) and tip != start:
        return {"problem": f"{tip[:12]} is not built on the attempt's start {start[:12]}"}
    binding: EvidenceBinding | None = None
    pack: dict[str, Any] | None = None
    ev_name = evidence_ref(run_id, inst["id"], inst["attempt"])
    ev_commit = repo.ref_target(tracking(remote, ev_name))
    if result.get("evidence"):
        data = tree_file(repo, ev_commit, "pack.json")
        if data is None or sha256_bytes(data) != result.get("evidence_sha256"):
            return {"problem": "its evidence ref is missing or does not hold the pack the claim names"}
        pack = json.loads(data)
        problem = _pack_problem(pack, record, inst, tip)
        if problem:
            return {"problem": f"its evidence pack does not fit: {problem}"}
        path = evidence.pack_path(repo.parallel_dir, run_id, inst["id"], inst["attempt"])
        atomic_write(path, data)  # the exact bytes, so the sha256 the claim names still holds
        binding = {"path": str(path), "sha256": sha256_bytes(data), "instance_revision": pack["instance_revision"]}
    problem = _move_branch(project, inst, tip)
    if problem:
        return {"problem": problem}
    status = "succeeded" if result.get("status") == "succeeded" else "failed"
    log = _keep_log(project, record, inst, claim_oid)

    def apply(rec: RunRecord, i: InstanceRecord) -> None:
        if i["status"] != "pending":
            raise ParallelError(E.BRANCH_TERMINAL, f"instance {i['id']} became {i['status']} meanwhile")
        model.finish(rec, i, status, head=tip, exit_code=result.get("exit_code"), error=result.get("error"),
                     finished_at=result.get("finished_at"), origin="remote", worker=claim.get("worker"),
                     evidence=None, verdict=None, score=None, log=log)
        if binding is not None and pack is not None:
            model.bind_evidence(i, binding, pack)

    project.store.update_instance(record["task"], inst["id"], apply, expected_attempt=inst["attempt"])
    if binding is not None and ev_commit is not None:
        # The worker's evidence commit becomes ours (not a copy made from the
        # pack later), so this clone and the remote hold one commit and
        # `push` and `merge --push` have nothing to reconcile.
        share.adopt(repo, ev_name, ev_commit, "collect")
    return {"taken": status, "verdict": pack.get("verdict") if pack else None, "head": tip}


def collect(project: Project, task: str, remote: str | None = None) -> Collected:
    """Fetch what the workers pushed for ``task``'s run and bring the local
    record up to date; report every instance's claim."""
    check_name(task, "task")
    repo = project.repo
    record = project.store.load(task)
    published = record.get("remote")
    remote = remote or (published["name"] if published else None)
    if not remote:
        raise ParallelError(E.REMOTE_NOT_FOUND, f"run {record['run_id']} of {task!r} was never published",
                            hint=f"`git parallel publish {task} --remote origin`, or name one with --remote")
    check_remote(repo, remote)
    run_id = record["run_id"]
    have = ls_remote(repo, remote, [f"refs/heads/parallel/{task}/*", f"{CLAIMS_PREFIX}/{run_id}/*",
                                    f"{EVIDENCE_PREFIX}/{run_id}/*", record["config"]["notes_ref"]])
    prune_tracking(repo, remote, have, run_id)
    fetch(repo, remote, _collect_specs(remote, record, have))
    now = time.time()
    rows, tips = [], []
    for inst in record["instances"]:
        oid, claim = fetched_claim(project, remote, run_id, inst["id"])
        state = claim_state(claim, inst["attempt"], now)
        row: dict[str, Any] = {"id": inst["id"], "claim_state": state, "claim": describe_claim(claim, state, now),
                               "worker": (claim or {}).get("worker") if state != "free" else None,
                               "status": inst["status"],
                               "takeovers": [h["takeover"] for h in claim_history(repo, oid) if h.get("takeover")]}
        if state == "held":
            row["lease_left_s"] = round(claim["expires_epoch"] - now, 1)  # type: ignore[index]
            row["claimed_at"] = claim.get("claimed_at")  # type: ignore[union-attr]
        if state == "done" and inst["status"] == "pending":
            row.update(_take_result(project, remote, record, inst, claim or {}, oid))
        if state == "done":
            tips.append((claim or {}).get("result", {}).get("head"))
        rows.append(row)
    notes_error = _copy_notes(project, record, remote, [t for t in tips if t])
    record = project.store.load(task)
    for row in rows:
        inst = find_instance(record, row["id"])
        row.update(status=inst["status"], verdict=inst["verdict"], head=inst["head"])
    pending = [r["id"] for r in rows if r["status"] == "pending"]
    return {"task": task, "run_id": run_id, "remote": remote, "instances": rows, "notes_error": notes_error,
            "pending": pending, "next": _next(record, remote, pending)}


def _next(record: RunRecord, remote: str, pending: list[str]) -> list[str]:
    """What to run now: collect again, pick, or (when nothing can be picked)
    retry the attempts that failed and publish the run again for the workers."""
    task = record["task"]
    if pending:
        return [f"git parallel collect {task}"]
    if any(i["status"] == "succeeded" and i["verdict"] == "pass" for i in record["instances"]):
        return [f"git parallel pick {task}"]
    failed = [i["id"] for i in record["instances"] if i["status"] in ("failed", "aborted")
              or (i["status"] == "succeeded" and i["verdict"] != "pass")]
    return ([f"git parallel logs {task} {failed[0]}"] + [f"git parallel retry {task} {i}" for i in failed]
            + [f"git parallel publish {task} --remote {remote}"])


def _copy_notes(project: Project, record: RunRecord, remote: str, tips: list[str]) -> str | None:
    """This run's note lines from the remote's notes onto the local notes ref."""
    notes_ref = record["config"]["notes_ref"]
    theirs = project.repo.ref_target(notes_tracking_ref(remote, notes_ref))
    if theirs is None or not tips:
        return None
    entries = run_note_lines(project.repo, notes_tracking_ref(remote, notes_ref), record["run_id"], tips)
    return project.mirror_notes(record, entries, "collect") if entries else None
