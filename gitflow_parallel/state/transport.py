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
    snapshot ``state/share`` keeps of every run, so the manifest never goes
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
    what a worker delivers, in one atomic push with its final claim state,
    whose tree also holds ``agent.log`` (the agent's log, capped at
    ``evidence_log_bytes``), passed or failed, so a failure reads on the
    coordinator as it would have here.

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
``state/share``'s; this module adds the claims and the leased atomic pushes.
``commands/publish`` and ``commands/collect`` are the verbs that use them.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel.git import notes
from gitflow_parallel.state import share
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.model import RunRecord
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.share import REMOTES_PREFIX as TRACKING_PREFIX, RUNS_PREFIX, run_ref, tree_file, tree_of_files



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
def _failed(what: str, proc: subprocess.CompletedProcess[bytes], hint: str) -> ParallelError:
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
    tree = tree_of_files(repo, files)
    return str(repo.pygit.create_commit(None, *repo.identity(), message, tree, [pygit2.Oid(hex=p) for p in parents]))


# -- the manifest ------------------------------------------------------------------------
def manifest_commit(project: Project, record: RunRecord) -> str:
    """The record as a snapshot commit on top of the local manifest ref; the
    ref itself is not moved (it moves once the remote took the push)."""
    return share.snapshot_commit(project, record, project.repo.ref_target(run_ref(record["run_id"])))


def read_manifest(repo: Repo, commit: str) -> RunRecord | None:
    """The run record a manifest commit holds, validated; None if it holds none."""
    return share.shared_record(repo, commit)


def withdraw(project: Project, record: RunRecord) -> str | None:
    """Publish a run's end (merged, aborted) to its remote, so that workers
    stop taking its instances; a verb whose work is done calls it, so a
    failure is a warning (workers also skip a task's older manifests)."""
    info = record.get("remote")
    if not info or not info.get("name"):
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


CLAIM_LOG = "agent.log"  # beside claim.json in a done claim: the agent's log, capped


def claim_commit(repo: Repo, claim: Mapping[str, object], parents: list[str], log: bytes | None = None) -> str:
    text = (json.dumps(claim, sort_keys=True, indent=2) + "\n").encode()
    message = (f"git-parallel: claim {claim['task']}/{claim['instance']} attempt {claim['attempt']} "
               f"{claim['state']} by {claim['worker']}\n\nParallel-Run: {claim['run_id']}\n")
    files = {"claim.json": text} if log is None else {"claim.json": text, CLAIM_LOG: log}
    return _commit(repo, files, message, parents)


def claim_state(claim: Mapping[str, object] | None, attempt: int, now: float | None = None) -> str:
    """``free`` (no claim, or one of an earlier attempt), ``held``, ``expired``,
    ``released`` or ``done``."""
    said = claim.get("attempt", -1) if claim is not None else -1
    # (an attempt that is no number: a claim as unreadable as none)
    if claim is None or not isinstance(said, (int, float, str)) or int(said) < attempt:
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
        parents = [str(p) for p in repo.pygit[commit].peel(pygit2.Commit).parent_ids]
        out.append({**claim, "commit": commit})
        commit = parents[0] if parents else None
    return list(reversed(out))


# -- surveying a remote ----------------------------------------------------------------------
def fetch_runs(project: Project, remote: str) -> None:
    """Bring the remote's manifests and claims into tracking refs (one
    ls-remote, and a fetch only when something moved)."""
    repo = project.repo
    have = ls_remote(repo, remote, [f"{RUNS_PREFIX}/*", f"{CLAIMS_PREFIX}/*"])
    prune_tracking(repo, remote, have, None)
    specs = []
    for prefix in (RUNS_PREFIX, CLAIMS_PREFIX):
        mine = {n: o for n, o in have.items() if n.startswith(prefix + "/")}
        if any(repo.ref_target(tracking(remote, n)) != o for n, o in mine.items()):
            specs.append(f"+{prefix}/*:{tracking(remote, prefix)}/*")
    if specs:
        fetch(repo, remote, specs)


def prune_tracking(repo: Repo, remote: str, have: dict[str, str], run_id: str | None) -> None:
    """Forget tracking copies of manifests and claims the remote no longer has."""
    for prefix in (RUNS_PREFIX, CLAIMS_PREFIX):
        local_prefix = tracking(remote, prefix + "/" + (run_id or ""))
        for name, _ in list(repo.refs_under(local_prefix)):
            original = "refs/parallel/" + name[len(f"{TRACKING_PREFIX}/{remote}/"):]
            if original not in have:
                repo.delete_ref(name)


def published_runs(project: Project, remote: str, task: str | None = None) -> list[tuple[RunRecord, str]]:
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


def describe_claim(claim: Mapping[str, object] | None, state: str, now: float) -> str:
    """``state`` (``claim_state``'s) said in words."""
    if claim is None or state == "free":
        return "unclaimed"
    who = claim.get("worker")
    if state == "released":
        return f"released by {who}"
    if state == "done":
        result = claim.get("result")
        result = result if isinstance(result, dict) else {}
        return f"done by {who}: {result.get('status')}" + (f", {result['verdict']}" if result.get("verdict") else "")
    expires = claim.get("expires_epoch")
    if not isinstance(expires, (int, float)):  # (``claim_state`` calls it expired)
        return f"claim of {who} expired (it names no lease time; a worker may take it over)"
    if state == "held":
        return f"claimed by {who}, lease {expires - now:.0f}s left"
    return f"claim of {who} expired {now - expires:.0f}s ago (a worker may take it over)"


# -- notes that travel ---------------------------------------------------------------------------
def run_note_lines(repo: Repo, notes_ref: str, run_id: str, commits: Iterable[str]) -> list[tuple[str, str]]:
    """This run's note lines on ``commits`` (lines of other runs stay where they are)."""
    out = []
    for oid in dict.fromkeys(commits):
        for text in notes.read(repo.pygit, notes_ref, oid):
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
        repo.pygit.references.create(scratch, pygit2.Oid(hex=base), force=True)
    try:
        made = notes.add(repo.pygit, scratch, entries, message, repo.identity())
    finally:
        repo.delete_ref(scratch)
    return made
