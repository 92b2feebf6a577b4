"""Runs that travel: run manifests, claims, and collecting the results,
through one git remote.

A run whose attempts happen on other machines is coordinated by refs on a
remote every machine can reach; git hosting gives compare-and-swap on refs
(``git push --atomic --force-with-lease=<ref>:<expected>``) and nothing more
is needed.

``refs/parallel/runs/<run_id>`` (the **manifest**)
    one commit per publication, each on the previous one, whose tree holds
    ``record.yaml``: the run record as the coordinator has it, with the
    frozen config and its sha256, the base, the instances (id, track,
    branch, attempt, start) and ``remote`` (the remote's name, the agent
    command from ``run --remote -- CMD``, its timeout).  It is the same
    snapshot ``share.py`` keeps of every run, so the manifest never goes
    stale when that module writes the ref.  A worker needs
    nothing else from the coordinator: it re-derives the config from the
    base commit's ``.gitparallel.yaml`` and refuses a manifest that differs.
``refs/parallel/claims/<run_id>/<id>`` (a **claim**)
    a chain of commits whose tree holds ``claim.json`` (below).  It is
    created with an empty lease, so of two workers pushing at once exactly
    one succeeds; every later state (renewal, takeover, done, released) is
    a child of the previous one pushed with a lease on it, so the chain is
    linear and every push of it a fast-forward.  While an agent runs, the
    renewals carry the attempt's tip as a second parent: a worker that dies
    leaves its commits reachable from the claim.
``refs/heads/parallel/<task>/<id>``, ``refs/parallel/evidence/<run_id>/<id>/<attempt>``, the notes ref
    what a worker delivers, in one atomic push with its final claim state.

Leases.  A claim holds ``lease_s`` and ``expires_epoch`` (the holder's clock
at its last renewal plus the lease); a worker renews every third of the
lease.  Another worker may take over a claim whose expiry has passed on its
own clock (machines' clocks must agree to well within a lease), by pushing
a child commit with a lease on the expired one; the takeover names the
claim, worker and work it replaced.  A claim whose attempt is older than
the manifest's (a retried instance) is free again.

On the coordinator, ``collect`` fetches claims, branches and evidence into
tracking refs (``refs/parallel-remotes/<remote>/…``, forced, like any
remote-tracking ref; branches into ``refs/remotes/<remote>/…``), binds each
finished attempt's evidence to its pushed commit in the local record, moves
the instance branch there, and copies this run's note lines.  ``merge``
re-proves the landing on the coordinator (``merge.verify: always``), so a
worker's evidence is never the only thing trusted.

Ref names, the run snapshot, evidence commits and notes merging are
``share.py``'s; this module adds the claims and the leased atomic pushes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, sha256_bytes, utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.git.share import EVIDENCE_PREFIX, check_remote, evidence_ref, notes_tracking_ref, run_ref, tree_file
from gitflow_parallel.model import FINISHED_RUN, find_instance
from gitflow_parallel.git.transport import CLAIMS_PREFIX, Update, _prune_tracking, branch_tracking, claim_history, claim_state, describe_claim, fetch, fetched_claim, ls_remote, manifest_commit, push, run_note_lines, tracking


def _refuse_finished(record: dict[str, Any], verb: str) -> None:
    if record["status"] in FINISHED_RUN:
        raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {record['task']!r} is {record['status']}; "
                            f"nothing to {verb}", hint=f"spawn a new run with `git parallel spawn {record['task']}`")


def publish(project: Project, task: str, remote: str, agent: list[str] | None = None,
            timeout: float | None = None) -> dict[str, Any]:
    """Push the run's instance branches (and with them the base commit) and
    its manifest to ``remote``, atomically; with ``agent``, the manifest
    names the command workers run.  The record then says where it went."""
    check_name(task, "task")
    repo = project.repo
    check_remote(repo, remote)
    if agent is not None and (not agent or not agent[0]):
        raise ParallelError(E.EXECUTE_FAILED, "no command to run",
                            hint=f"give it after --: `git parallel run {task} --remote {remote} -- CMD [ARG...]`")
    record = project.store.load(task)
    _refuse_finished(record, "publish")
    before = record.get("remote") or {}
    if before.get("name") not in (None, remote):
        raise ParallelError(E.REMOTE_FAILED, f"run {record['run_id']} is published to {before['name']!r}, "
                            f"not {remote!r}", hint=f"publish it with --remote {before['name']}")
    info = {"name": remote, "agent": agent if agent is not None else before.get("agent"),
            "timeout": timeout if agent is not None else before.get("timeout"), "published_at": utcnow()}
    # The manifest is built from the record as it will be stored, and the
    # record changes only once the remote took the push.
    manifest = manifest_commit(project, {**record, "remote": info})
    name = run_ref(record["run_id"])
    there = ls_remote(repo, remote, [name, f"refs/heads/parallel/{task}/*"])
    updates = [Update(manifest, name, there.get(name, ""))]
    kept = []
    for inst in record["instances"]:
        ref, tip = f"refs/heads/{inst['branch']}", project.tip(inst)
        if tip is None or there.get(ref) == tip:
            continue
        if ref in there:
            kept.append(inst["id"])  # a worker's work is there: never overwritten from here
            continue
        updates.append(Update(tip, ref, ""))
    pushed = push(repo, remote, updates)
    if not pushed.ok:
        raise ParallelError(E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: "
                            f"{pushed.output}", hint=f"see the message; `git parallel publish {task} --remote "
                            f"{remote}` tries again")
    repo.cas_ref(name, manifest, repo.ref_target(name), f"git-parallel: publish {task}")

    def apply(rec: dict[str, Any]) -> None:
        rec["remote"] = info

    record, _ = project.store.update(task, apply)
    return {"task": task, "run_id": record["run_id"], "remote": remote, "manifest": manifest, "ref": name,
            "agent": info["agent"], "timeout": info["timeout"], "branches": [u.dst for u in updates[1:]],
            "kept_remote": kept, "instances": [i["id"] for i in record["instances"]]}


def spawn(project: Project, task: str, remote: str, **options: Any) -> dict[str, Any]:
    """``spawn`` and ``publish`` in one: the run exists here and on ``remote``."""
    from gitflow_parallel import lifecycle

    check_remote(project.repo, remote)  # before anything is made
    ls_remote(project.repo, remote, ["refs/parallel/runs/none"])  # reachable?
    record = lifecycle.spawn(project, task, **options)
    try:
        published = publish(project, task, remote)
    except ParallelError as exc:
        raise ParallelError(exc.code, f"spawned run {record['run_id']} here, but did not publish it: {exc.message}",
                            hint=f"`git parallel publish {task} --remote {remote}` once {remote} takes pushes") from None
    return {**record, "published": published}


# -- collect ----------------------------------------------------------------------------------------
def _collect_specs(remote: str, record: dict[str, Any], have: dict[str, str]) -> list[str]:
    run_id, task = record["run_id"], record["task"]
    specs = [f"+refs/heads/parallel/{task}/*:refs/remotes/{remote}/parallel/{task}/*"]
    for prefix in (CLAIMS_PREFIX, EVIDENCE_PREFIX):
        if any(n.startswith(f"{prefix}/{run_id}/") for n in have):
            specs.append(f"+{prefix}/{run_id}/*:{tracking(remote, prefix + '/' + run_id)}/*")
    notes_ref = record["config"]["notes_ref"]
    if notes_ref in have:
        specs.append(f"+{notes_ref}:{notes_tracking_ref(remote, notes_ref)}")
    return specs


def _pack_problem(pack: Any, record: dict[str, Any], inst: dict[str, Any], tip: str) -> str | None:
    """What makes a fetched pack unusable for this attempt (a pack that is
    consistent is still only a claim: merge re-proves the landing)."""
    if not isinstance(pack, dict):
        return "the pack is not a JSON object"
    for key, want in (("run_id", record["run_id"]), ("instance", inst["id"]), ("attempt", inst["attempt"]),
                      ("config_sha256", record["config_sha256"]), ("commit", tip)):
        if pack.get(key) != want:
            return f"its {key} is {pack.get(key)!r}, not {want!r}"
    return None


def _move_branch(project: Project, inst: dict[str, Any], tip: str) -> str | None:
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


def _take_result(project: Project, remote: str, record: dict[str, Any], inst: dict[str, Any],
                 claim: dict[str, Any]) -> dict[str, Any]:
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
    binding, pack = None, None
    if result.get("evidence"):
        data = tree_file(repo, repo.ref_target(tracking(remote, evidence_ref(run_id, inst["id"], inst["attempt"]))),
                         "pack.json")
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

    def apply(rec: dict[str, Any], i: dict[str, Any]) -> None:
        if i["status"] != "pending":
            raise ParallelError(E.BRANCH_TERMINAL, f"instance {i['id']} became {i['status']} meanwhile")
        model.finish(rec, i, status, head=tip, exit_code=result.get("exit_code"), error=result.get("error"),
                     finished_at=result.get("finished_at"), origin="remote", worker=claim.get("worker"),
                     evidence=None, verdict=None, score=None)
        if binding is not None:
            model.bind_evidence(i, binding, pack)

    project.store.update_instance(record["task"], inst["id"], apply, expected_attempt=inst["attempt"])
    return {"taken": status, "verdict": pack.get("verdict") if pack else None, "head": tip}


def collect(project: Project, task: str, remote: str | None = None) -> dict[str, Any]:
    """Fetch what the workers pushed for ``task``'s run and bring the local
    record up to date; report every instance's claim."""
    check_name(task, "task")
    repo = project.repo
    record = project.store.load(task)
    published = record.get("remote") or {}
    remote = remote or published.get("name")
    if not remote:
        raise ParallelError(E.REMOTE_NOT_FOUND, f"run {record['run_id']} of {task!r} was never published",
                            hint=f"`git parallel publish {task} --remote origin`, or name one with --remote")
    check_remote(repo, remote)
    run_id = record["run_id"]
    have = ls_remote(repo, remote, [f"refs/heads/parallel/{task}/*", f"{CLAIMS_PREFIX}/{run_id}/*",
                                    f"{EVIDENCE_PREFIX}/{run_id}/*", record["config"]["notes_ref"]])
    _prune_tracking(repo, remote, have, run_id)
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
            row.update(_take_result(project, remote, record, inst, claim or {}))
        if state == "done":
            tips.append((claim or {}).get("result", {}).get("head"))
        rows.append(row)
    notes_error = _copy_notes(project, record, remote, [t for t in tips if t])
    record = project.store.load(task)
    for row in rows:
        inst = find_instance(record, row["id"])
        row.update(status=inst["status"], verdict=inst["verdict"], head=inst["head"])
    return {"task": task, "run_id": run_id, "remote": remote, "instances": rows, "notes_error": notes_error,
            "pending": [r["id"] for r in rows if r["status"] == "pending"]}


def _copy_notes(project: Project, record: dict[str, Any], remote: str, tips: list[str]) -> str | None:
    """This run's note lines from the remote's notes onto the local notes ref."""
    notes_ref = record["config"]["notes_ref"]
    theirs = project.repo.ref_target(notes_tracking_ref(remote, notes_ref))
    if theirs is None or not tips:
        return None
    entries = run_note_lines(project.repo, notes_tracking_ref(remote, notes_ref), record["run_id"], tips)
    return project.mirror_notes(record, entries, "collect") if entries else None
