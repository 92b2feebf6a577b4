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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model
from gitflow_parallel.git import notes, share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, sha256_bytes, utcnow
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.git.share import EVIDENCE_PREFIX, REMOTES_PREFIX as TRACKING_PREFIX, RUNS_PREFIX, check_remote, evidence_ref, notes_tracking_ref, run_ref, tree_file, tree_of_files
from gitflow_parallel.model import FINISHED_RUN, find_instance

CLAIMS_PREFIX = "refs/parallel/claims"
CLAIM_VERSION = 1
DEFAULT_LEASE = 120.0
NOTES_PUSH_ATTEMPTS = 8


# -- ref names ---------------------------------------------------------------------
def claim_ref(run_id: str, inst_id: str) -> str:
    return f"{CLAIMS_PREFIX}/{run_id}/{inst_id}"


def tracking(remote: str, ref: str) -> str:
    """Where a fetched ``refs/parallel/…`` ref of ``remote`` is kept."""
    return f"{TRACKING_PREFIX}/{remote}/{ref[len('refs/parallel/'):]}"


def branch_tracking(remote: str, branch: str) -> str:
    return f"refs/remotes/{remote}/{branch}"


# -- the wire: ls-remote, fetch, atomic push with leases -------------------------------
def _failed(what: str, proc: Any, hint: str) -> ParallelError:
    text = (proc.stderr or proc.stdout or b"").decode(errors="replace").strip()
    return ParallelError(E.REMOTE_FAILED, f"{what} failed: {text}", hint=hint)


def ls_remote(repo: Repo, remote: str, patterns: list[str]) -> dict[str, str]:
    proc = repo.run_git(["ls-remote", "--refs", remote, *patterns], check=False)
    if proc.returncode != 0:
        raise _failed(f"git ls-remote {remote}", proc, f"check that {remote} is reachable, then try again")
    out = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        oid, _, name = line.partition("\t")
        if name:
            out[name] = oid
    return out


def fetch(repo: Repo, remote: str, specs: list[str]) -> None:
    proc = repo.run_git(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote, *specs], check=False)
    if proc.returncode != 0:
        raise _failed(f"git fetch {remote}", proc, f"check that {remote} is reachable, then try again")


@dataclass
class Update:
    """One ref a push moves: ``src`` (an oid) to ``dst``, only if the remote
    has ``dst`` at ``expected`` now ("" for: it must not exist)."""

    src: str
    dst: str
    expected: str


@dataclass
class Pushed:
    ok: bool
    output: str


def push(repo: Repo, remote: str, updates: list[Update]) -> Pushed:
    """All of ``updates`` or none, each under its lease.  Which lease failed
    is asked of the remote afterwards (``moved``): a lease can fail in the
    client (``stale info``) or in the remote's own ref transaction, where
    ``--atomic`` reports every ref alike."""
    if not updates:
        return Pushed(True, "")
    args = ["push", "--atomic", "--porcelain", "--no-verify"]
    args += [f"--force-with-lease={u.dst}:{u.expected}" for u in updates]
    args += [remote] + [f"{u.src}:{u.dst}" for u in updates]
    proc = repo.run_git(args, check=False)
    return Pushed(proc.returncode == 0, (proc.stdout + proc.stderr).decode(errors="replace").strip())


def moved(repo: Repo, remote: str, updates: list[Update]) -> list[str]:
    """The refs of ``updates`` the remote no longer has at their expected value."""
    now = ls_remote(repo, remote, [u.dst for u in updates])
    return [u.dst for u in updates if now.get(u.dst, "") != u.expected]


# -- objects -----------------------------------------------------------------------------
def _commit(repo: Repo, files: dict[str, bytes], message: str, parents: Iterable[str]) -> str:
    sig = repo.signature()
    tree = tree_of_files(repo, files)
    return str(repo.git.create_commit(None, sig, sig, message, tree, [pygit2.Oid(hex=p) for p in parents]))


# -- the manifest ------------------------------------------------------------------------
def manifest_commit(project: Project, record: dict[str, Any]) -> str:
    """The record as a snapshot commit on top of the local manifest ref; the
    ref itself is not moved (it moves once the remote took the push)."""
    return share.snapshot_commit(project, record, project.repo.ref_target(run_ref(record["run_id"])))


def read_manifest(repo: Repo, commit: str) -> dict[str, Any] | None:
    """The run record a manifest commit holds, validated; None if it holds none."""
    return share.shared_record(repo, commit)


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


def withdraw(project: Project, record: dict[str, Any]) -> str | None:
    """Publish a run's end (merged, aborted) to its remote, so that workers
    stop taking its instances; a verb whose work is done calls it, so a
    failure is a warning (workers also skip a task's older manifests)."""
    info = record.get("remote") or {}
    if not info.get("name"):
        return None
    repo, name = project.repo, run_ref(record["run_id"])
    try:
        manifest = manifest_commit(project, record)
        there = ls_remote(repo, info["name"], [name]).get(name, "")
        pushed = push(repo, info["name"], [Update(manifest, name, there)])
        if not pushed.ok:
            raise RuntimeError(pushed.output)
        repo.cas_ref(name, manifest, repo.ref_target(name), "git-parallel: withdraw")
    except Exception as exc:
        return (f"the end of run {record['run_id']} was not published to {info['name']} ({type(exc).__name__}: "
                f"{exc}); `git parallel publish` cannot publish a finished run, but workers skip it once the task "
                "is spawned again")
    return None


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


# -- claims --------------------------------------------------------------------------------
def read_claim(repo: Repo, commit: str | None) -> dict[str, Any] | None:
    data = tree_file(repo, commit, "claim.json")
    if data is None:
        return None
    try:
        claim = json.loads(data)
    except ValueError:
        return None
    return claim if isinstance(claim, dict) and claim.get("v") == CLAIM_VERSION else None


def claim_commit(repo: Repo, claim: dict[str, Any], parents: list[str]) -> str:
    text = (json.dumps(claim, sort_keys=True, indent=2) + "\n").encode()
    message = (f"git-parallel: claim {claim['task']}/{claim['instance']} attempt {claim['attempt']} "
               f"{claim['state']} by {claim['worker']}\n\nParallel-Run: {claim['run_id']}\n")
    return _commit(repo, {"claim.json": text}, message, parents)


def claim_state(claim: dict[str, Any] | None, attempt: int, now: float | None = None) -> str:
    """``free`` (no claim, or one of an earlier attempt), ``held``, ``expired``,
    ``released`` or ``done``."""
    if claim is None or int(claim.get("attempt", -1)) < attempt:
        return "free"
    state = claim.get("state")
    if state in ("done", "released"):
        return str(state)
    expires = claim.get("expires_epoch")
    if not isinstance(expires, (int, float)) or (now if now is not None else time.time()) > expires:
        return "expired"
    return "held"


def claimable(state: str) -> bool:
    return state in ("free", "expired", "released")


def claim_history(repo: Repo, commit: str | None) -> list[dict[str, Any]]:
    """Every state of a claim chain, oldest first, each with its commit and
    the work it carried (first parents are the chain; a second parent is
    the attempt's tip at that renewal)."""
    out = []
    while commit is not None:
        claim = read_claim(repo, commit)
        if claim is None:
            break
        parents = [str(p) for p in repo.git.get(commit).parent_ids]
        out.append({**claim, "commit": commit})
        commit = parents[0] if parents else None
    return list(reversed(out))


# -- surveying a remote ----------------------------------------------------------------------
def fetch_runs(project: Project, remote: str) -> None:
    """Bring the remote's manifests and claims into tracking refs (one
    ls-remote, and a fetch only when something moved)."""
    repo = project.repo
    have = ls_remote(repo, remote, [f"{RUNS_PREFIX}/*", f"{CLAIMS_PREFIX}/*"])
    _prune_tracking(repo, remote, have, None)
    specs = []
    for prefix in (RUNS_PREFIX, CLAIMS_PREFIX):
        mine = {n: o for n, o in have.items() if n.startswith(prefix + "/")}
        if any(repo.ref_target(tracking(remote, n)) != o for n, o in mine.items()):
            specs.append(f"+{prefix}/*:{tracking(remote, prefix)}/*")
    if specs:
        fetch(repo, remote, specs)


def _prune_tracking(repo: Repo, remote: str, have: dict[str, str], run_id: str | None) -> None:
    """Forget tracking copies of manifests and claims the remote no longer has."""
    for prefix in (RUNS_PREFIX, CLAIMS_PREFIX):
        local_prefix = tracking(remote, prefix + "/" + (run_id or ""))
        for name, _ in list(repo.refs_under(local_prefix)):
            original = "refs/parallel/" + name[len(f"{TRACKING_PREFIX}/{remote}/"):]
            if original not in have:
                repo.delete_ref(name)


def published_runs(project: Project, remote: str, task: str | None = None) -> list[tuple[dict[str, Any], str]]:
    """(manifest record, manifest commit) of every run on ``remote`` as last
    fetched, oldest first."""
    prefix = tracking(remote, RUNS_PREFIX) + "/"
    out = []
    for name, oid in project.repo.refs_under(prefix):
        record = read_manifest(project.repo, oid)
        if record is None or record["run_id"] != name[len(prefix):]:
            continue
        if task is None or record["task"] == task:
            out.append((record, oid))
    out.sort(key=lambda rc: rc[0]["created_at"])
    return out


def fetched_claim(project: Project, remote: str, run_id: str, inst_id: str) -> tuple[str | None, dict[str, Any] | None]:
    oid = project.repo.ref_target(tracking(remote, claim_ref(run_id, inst_id)))
    return oid, read_claim(project.repo, oid)


def describe_claim(claim: dict[str, Any] | None, state: str, now: float) -> str:
    if claim is None or state == "free":
        return "unclaimed"
    who = claim.get("worker")
    if state == "held":
        return f"claimed by {who}, lease {claim['expires_epoch'] - now:.0f}s left"
    if state == "expired":
        return f"claim of {who} expired {now - claim['expires_epoch']:.0f}s ago (a worker may take it over)"
    if state == "released":
        return f"released by {who}"
    result = claim.get("result") or {}
    return f"done by {who}: {result.get('status')}" + (f", {result['verdict']}" if result.get("verdict") else "")


# -- notes that travel ---------------------------------------------------------------------------
def run_note_lines(repo: Repo, notes_ref: str, run_id: str, commits: Iterable[str]) -> list[tuple[str, str]]:
    """This run's note lines on ``commits`` (lines of other runs stay where they are)."""
    out = []
    for oid in dict.fromkeys(commits):
        for text in notes.read(repo.git, notes_ref, oid):
            try:
                if json.loads(text).get("run_id") == run_id:
                    out.append((oid, text))
            except ValueError:
                continue
    return out


def notes_on(repo: Repo, base: str | None, entries: list[tuple[str, str]], message: str) -> str | None:
    """A notes commit: ``base`` (a notes commit, or None) with ``entries``
    added, sorted and unique per note, as ``cat_sort_uniq`` would merge them.
    Built on a scratch ref, which is removed again; None if nothing is new."""
    scratch = f"refs/parallel-tmp/notes-{time.monotonic_ns()}"
    if base is not None:
        repo.git.references.create(scratch, pygit2.Oid(hex=base), force=True)
    try:
        made = notes.add(repo.git, scratch, entries, message, repo.signature())
    finally:
        repo.delete_ref(scratch)
    return made


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
