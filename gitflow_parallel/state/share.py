"""Provenance that travels: evidence packs, their logs and run records kept in
git, and moving them (with the notes) between clones.

Everything under ``<common>/parallel/`` stays on the machine that made it.
So that a teammate can read a run from their own clone, three kinds of refs
hold what the files hold:

``refs/parallel/evidence/<run_id>/<id>/<attempt>``
    one commit per evidence pack.  Its tree is ``pack.json`` (the pack's exact
    bytes, so its sha256 still matches the record), ``logs/<name>`` (the gate,
    score and agent logs, each capped at ``evidence_log_bytes``: the *end*
    of a longer log is kept, where the failure usually is) and ``logs.json``
    (per log: its full size and sha256, how much was kept).  Its parents are
    the proven commit (so the code travels with its proof) and the previous
    pack commit of the same attempt, so a re-check fast-forwards the ref.
``refs/parallel/runs/<run_id>``
    a snapshot of the run record: ``record.yaml`` and ``picks/<track>.json``
    (exact bytes), one commit per change, each on the previous one.
``refs/parallel/archive/<run_id>/<id>/<attempt>``
    every attempt's tip (``worktrees.py``).

``push`` publishes those refs and the notes ref in one atomic push; a notes
ref that moved on the remote is merged first with ``git notes merge -s
cat_sort_uniq`` (our note lines are sorted, unique, one record per line).
``fetch`` brings the remote's copies into ``refs/parallel-remotes/<remote>/``
and the notes into ``refs/notes/remotes/<remote>/<name>`` (forced: these are
tracking refs, so a plain ``git fetch`` with the refspecs ``init --remote``
adds can never fail on them), then fast-forwards the local ``refs/parallel/``
refs that are missing or behind, takes the remote's commit of a ref that
says the same (``relation``), and merges the notes.  A local ref that is
ahead (newer evidence not pushed yet) is left alone; ``push`` skips refs
that say what the remote's say and refuses diverged ones, named.  Readers look up a ref
locally first, then in every ``refs/parallel-remotes/*/``.

No push refspec is ever configured: a ``remote.<name>.push`` entry replaces
what a plain ``git push`` pushes, and the user's branches would stop going out.

``prune`` deletes the evidence, archive and run refs of finished runs older
than a cut-off (local ones and fetched copies), never those of a live run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
import subprocess
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypedDict

from gitflow_parallel import errors as E
from gitflow_parallel import evidence
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import read_tail, sha256_bytes, sha256_file
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.model import EvidenceBinding, InstanceRecord, RunRecord
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.store import dump, parse_yaml, validate_record

if TYPE_CHECKING:  # imported where an object is read or written: `status` lists runs without it
    import pygit2

PARALLEL_PREFIX = "refs/parallel"
EVIDENCE_PREFIX = "refs/parallel/evidence"
RUNS_PREFIX = "refs/parallel/runs"
REMOTES_PREFIX = "refs/parallel-remotes"
DEFAULT_LOG_BYTES = 1 << 20
CAS_ATTEMPTS = 20
PUSH_ATTEMPTS = 5


def evidence_ref(run_id: str, inst_id: str, attempt: int) -> str:
    return f"{EVIDENCE_PREFIX}/{run_id}/{inst_id}/{attempt}"


def run_ref(run_id: str) -> str:
    return f"{RUNS_PREFIX}/{run_id}"


def notes_tracking_ref(remote: str, notes_ref: str) -> str:
    return f"refs/notes/remotes/{remote}/{notes_ref[len('refs/notes/'):]}"


# -- finding refs, here or fetched ---------------------------------------------------
def lookup(repo: Repo, name: str) -> str | None:
    """The oid of ``name`` (a ``refs/parallel/…`` ref), or of a fetched copy."""
    oid = repo.ref_target(name)
    if oid is not None or not name.startswith(PARALLEL_PREFIX + "/"):
        return oid
    rest = name[len(PARALLEL_PREFIX) + 1:]
    for remote in fetched_remotes(repo):
        oid = repo.ref_target(f"{REMOTES_PREFIX}/{remote}/{rest}")
        if oid is not None:
            return oid
    return None


def fetched_remotes(repo: Repo) -> list[str]:
    names = set()
    for ref, _ in repo.refs_under(REMOTES_PREFIX + "/"):
        names.add(ref.split("/")[2])
    return sorted(names)


def tree_file(repo: Repo, commit: str | None, path: str) -> bytes | None:
    import pygit2

    if commit is None:
        return None
    try:
        entry = repo.pygit[commit].peel(pygit2.Commit).tree[path]
    except (KeyError, ValueError, AttributeError, pygit2.GitError):
        return None
    blob = repo.pygit.get(entry.id)
    return blob.data if isinstance(blob, pygit2.Blob) else None


def tree_of_files(repo: Repo, files: dict[str, bytes]) -> pygit2.Oid:
    """A tree holding ``files`` (paths with at most one folder level)."""
    import pygit2

    folders: dict[str, dict[str, bytes]] = {}
    top = repo.pygit.TreeBuilder()
    for path, data in sorted(files.items()):
        folder, _, name = path.rpartition("/")
        if folder:
            folders.setdefault(folder, {})[name] = data
        else:
            top.insert(name, repo.pygit.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
    for folder, entries in folders.items():
        sub = repo.pygit.TreeBuilder()
        for name, data in entries.items():
            sub.insert(name, repo.pygit.create_blob(data), pygit2.GIT_FILEMODE_BLOB)
        top.insert(folder, sub.write(), pygit2.GIT_FILEMODE_TREE)
    return top.write()


def _publish(repo: Repo, name: str, build: Callable[[str | None], str | None]) -> str | None:
    """Move ``name`` by compare-and-swap to ``build(current)`` (a commit oid,
    or None when there is nothing to add); rebuilt if another writer won."""
    for _ in range(CAS_ATTEMPTS):
        current = repo.ref_target(name)
        new = build(current)
        if new is None:
            return current
        if repo.cas_ref(name, new, current, f"git-parallel: {name}"):
            return new
        time.sleep(0.01)
    raise RuntimeError(f"could not update {name}: it kept moving")


# -- evidence refs --------------------------------------------------------------------
def capped(data: bytes, limit: int) -> bytes:
    """The end of a log longer than ``limit`` bytes, after a line that says so."""
    if len(data) <= limit:
        return data
    head = f"git-parallel: log truncated to its last {limit} of {len(data)} bytes\n".encode()
    return head + (data[len(data) - limit:] if limit else b"")


def pack_logs(pack: Mapping[str, object], agent_log: str | None) -> list[Path]:
    """The logs that belong to a pack: each gate's, the score command's, the agent's."""
    gates, source = pack.get("gates"), pack.get("score_source")
    paths = [g.get("log") for g in gates if isinstance(g, dict)] if isinstance(gates, list) else []
    paths.append(source.get("log") if isinstance(source, dict) else None)
    paths.append(agent_log)
    return [Path(p) for p in dict.fromkeys(p for p in paths if isinstance(p, str) and p)]


class LogKept(TypedDict):  # what was kept of a log: its full size and sha256, whether it was cut
    bytes: int
    sha256: str
    truncated: bool


def capped_log(path: str | Path | None, limit: int) -> tuple[bytes, LogKept] | None:
    """A log's bytes capped at ``limit`` (:func:`capped`) and what was kept
    of it (its full size and sha256, whether it was cut); None if unreadable."""
    if not path:
        return None
    try:
        # Read by seeking, hashed in chunks: a gate can grow its own log
        # to any size (a sparse ftruncate costs it no disk).
        tail, cut = read_tail(path, limit)
        size, digest = cut + len(tail), sha256_file(path)
    except OSError:
        return None
    if not cut:
        return tail, {"bytes": size, "sha256": digest, "truncated": False}
    head = f"git-parallel: log truncated to its last {limit} of {size} bytes\n".encode()
    return head + tail, {"bytes": size, "sha256": digest, "truncated": True}


def log_limit(record: RunRecord) -> int:
    return int(record["config"].get("evidence_log_bytes", DEFAULT_LOG_BYTES))


def _pack_files(pack_bytes: bytes, logs: list[Path], limit: int) -> dict[str, bytes]:
    files = {"pack.json": pack_bytes}
    manifest: dict[str, LogKept] = {}
    for path in logs:
        got = capped_log(path, limit)
        if got is not None:
            files[f"logs/{path.name}"], manifest[path.name] = got
    files["logs.json"] = (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode()
    return files


def commit_pack(project: Project, record: RunRecord, inst_id: str, attempt: int,
                binding: EvidenceBinding, agent_log: str | None) -> str:
    """Keep the pack bound by ``binding`` and its logs on the attempt's
    evidence ref; returns the ref.  A ref that already holds these pack
    bytes is left as it is."""
    import pygit2

    repo = project.repo
    pack_bytes = Path(binding["path"]).read_bytes()
    if sha256_bytes(pack_bytes) != binding["sha256"]:
        raise ValueError(f"the evidence pack {binding['path']} no longer matches its sha256")
    pack: dict[str, Any] = json.loads(pack_bytes)
    name = evidence_ref(record["run_id"], inst_id, attempt)
    limit = log_limit(record)

    def build(current: str | None) -> str | None:
        if current is not None and tree_file(repo, current, "pack.json") == pack_bytes:
            return None
        tree = tree_of_files(repo, _pack_files(pack_bytes, pack_logs(pack, agent_log), limit))
        parents = [p for p in (pack.get("commit"), current) if p and p in repo.pygit]
        who = repo.identity()
        message = (f"git-parallel: evidence of {record['task']}/{inst_id} attempt {attempt} ({pack.get('verdict')})\n\n"
                   f"Parallel-Run: {record['run_id']}\nParallel-Commit: {pack.get('commit')}\n"
                   f"Evidence-Sha256: {binding['sha256']}\n")
        return str(repo.pygit.create_commit(None, *who, message, tree, [pygit2.Oid(hex=p) for p in parents]))

    _publish(repo, name, build)
    return name


def store_evidence(project: Project, record: RunRecord, inst: InstanceRecord) -> str | None:
    """``commit_pack`` for an instance's current pack, as ``check`` calls it:
    the check's work is done, so a failure is returned as a warning (``push``
    writes missing evidence refs from the packs)."""
    binding = inst["evidence"]
    if binding is None:
        return f"the evidence ref of {inst['id']} was not written (it has no evidence pack)"
    try:
        commit_pack(project, record, inst["id"], inst["attempt"], binding, inst.get("log"))
    except Exception as exc:
        return (f"the evidence ref of {inst['id']} was not written ({type(exc).__name__}: {exc}); "
                "`git parallel push` writes it from the pack")
    return None


def load_pack(project: Project, record: RunRecord, inst: InstanceRecord) -> dict[str, Any] | None:
    """The pack the instance's evidence binding names: the local file, else the one kept
    on the evidence ref (or an earlier commit of it), only if its bytes match."""
    if not inst.get("evidence"):
        return None
    local = evidence.load(inst)
    if local is not None:
        return local
    kept = kept_pack(project, record, inst)
    if kept is None:
        return None
    pack = json.loads(kept[1])
    return pack if isinstance(pack, dict) else None


def kept_pack(project: Project, record: RunRecord, inst: InstanceRecord) -> tuple[str, bytes] | None:
    """``(commit, bytes)`` of the pack kept on the attempt's evidence ref (or
    an earlier commit of it) whose sha256 is the one the instance's binding
    names: the copy a damaged local pack is restored from."""
    import pygit2

    binding = inst.get("evidence")
    if not binding:
        return None
    commit = lookup(project.repo, evidence_ref(record["run_id"], inst["id"], inst["attempt"]))
    while commit is not None:
        data = tree_file(project.repo, commit, "pack.json")
        if data is not None and sha256_bytes(data) == binding.get("sha256"):
            return commit, data
        parents = project.repo.pygit[commit].peel(pygit2.Commit).parent_ids
        commit = str(parents[-1]) if len(parents) > 1 else None
    return None


def stored_log(project: Project, record: RunRecord, inst_id: str, attempt: int, name: str) -> bytes | None:
    """A log kept on the attempt's evidence ref, by file name."""
    commit = lookup(project.repo, evidence_ref(record["run_id"], inst_id, attempt))
    return tree_file(project.repo, commit, f"logs/{name}")


# -- run snapshots --------------------------------------------------------------------
def _snapshot_files(record: RunRecord) -> dict[str, bytes]:
    files = {"record.yaml": dump(record).encode("utf-8")}
    for track, binding in (record.get("picks") or {}).items():
        try:
            data = Path(binding["path"]).read_bytes()
        except OSError:
            continue
        if sha256_bytes(data) == binding.get("sha256"):
            files[f"picks/{track}.json"] = data
    return files


def snapshot_commit(project: Project, record: RunRecord, parent: str | None,
                    files: dict[str, bytes] | None = None) -> str:
    """A commit on ``parent`` holding the record (and its pick records); no ref moves."""
    import pygit2

    repo = project.repo
    tree = tree_of_files(repo, files if files is not None else _snapshot_files(record))
    who = repo.identity()
    message = (f"git-parallel: run {record['task']} {record['status']} (revision {record['run_revision']})\n\n"
               f"Parallel-Run: {record['run_id']}\n")
    return str(repo.pygit.create_commit(None, *who, message, tree, [pygit2.Oid(hex=parent)] if parent else []))


def snapshot_run(project: Project, record: RunRecord) -> str:
    """Keep the record (and its pick records) on ``refs/parallel/runs/<run_id>``
    (also the manifest workers read, see ``state/transport``)."""
    import pygit2

    repo = project.repo
    files = _snapshot_files(record)
    name = run_ref(record["run_id"])

    def build(current: str | None) -> str | None:
        if current is not None and repo.pygit[current].peel(pygit2.Commit).tree_id == tree_of_files(repo, files):
            return None
        return snapshot_commit(project, record, current, files)

    _publish(repo, name, build)
    return name


def mirror_run(project: Project, record: RunRecord) -> str | None:
    """``snapshot_run`` as a verb whose work is done calls it: a warning, never a failure."""
    try:
        snapshot_run(project, record)
    except Exception as exc:
        return (f"the run record was not kept on {run_ref(record['run_id'])} ({type(exc).__name__}: {exc}); "
                "`git parallel push` writes it")
    return None


def _snapshots(repo: Repo) -> dict[str, str]:
    """run_id -> snapshot commit, local ones first, then fetched ones."""
    found: dict[str, str] = {}
    prefixes = [RUNS_PREFIX + "/"] + [f"{REMOTES_PREFIX}/{r}/runs/" for r in fetched_remotes(repo)]
    for prefix in prefixes:
        for name, oid in repo.refs_under(prefix):
            found.setdefault(name[len(prefix):], oid)
    return found


def shared_record(repo: Repo, commit: str) -> RunRecord | None:
    data = tree_file(repo, commit, "record.yaml")
    if data is None:
        return None
    try:
        return validate_record(parse_yaml(data.decode("utf-8")), Path("record.yaml"))
    except (ParallelError, ValueError, UnicodeDecodeError):
        return None


def shared_runs(project: Project, task: str | None = None,
                known: Iterable[str] = ()) -> list[tuple[RunRecord, str]]:
    """(record, snapshot commit) of every run kept in git, newest first, but
    the runs ``known`` (run ids the caller has records of: not read)."""
    out = []
    skip = set(known)
    for run_id, commit in _snapshots(project.repo).items():
        if run_id in skip:
            continue
        rec = shared_record(project.repo, commit)
        if rec is not None and rec["run_id"] == run_id and (task is None or rec["task"] == task):
            out.append((rec, commit))
    out.sort(key=lambda rc: rc[0]["created_at"], reverse=True)
    return out


def shared_pick(project: Project, snapshot: str, track: str) -> bytes | None:
    return tree_file(project.repo, snapshot, f"picks/{track}.json")


# -- every local record, live or retired ----------------------------------------------------
def local_records(project: Project) -> list[RunRecord]:
    records, _ = project.store.load_all()
    done = project.store.done_dir
    if done.is_dir():
        for path in sorted(done.glob("*.yaml")):
            try:
                records.append(project.store.read(path))
            except (ParallelError, OSError):
                continue
    return records


def _attempt_bindings(record: RunRecord) -> Iterator[tuple[str, int, EvidenceBinding, str | None]]:
    for inst in record["instances"]:
        for h in inst.get("history") or []:
            if earlier := h.get("evidence"):
                yield inst["id"], h["attempt"], earlier, h.get("log")
        if binding := inst.get("evidence"):
            yield inst["id"], inst["attempt"], binding, inst.get("log")


class Backfilled(TypedDict):  # what ``backfill`` wrote (refs) and skipped (why, per attempt)
    written: list[str]
    skipped: list[str]


def backfill(project: Project) -> Backfilled:
    """Make sure every local pack and record is kept in git (before a push)."""
    written: list[str] = []
    skipped: list[str] = []
    for record in local_records(project):
        filled = backfill_run(project, record)
        written += filled["written"]
        skipped += filled["skipped"]
    return {"written": written, "skipped": skipped}


def backfill_run(project: Project, record: RunRecord) -> Backfilled:
    """``backfill`` for one run: its packs on evidence refs, its record on its run ref."""
    written: list[str] = []
    skipped: list[str] = []
    for inst_id, attempt, binding, log in _attempt_bindings(record):
        try:
            before = project.repo.ref_target(evidence_ref(record["run_id"], inst_id, attempt))
            name = commit_pack(project, record, inst_id, attempt, binding, log)
            if project.repo.ref_target(name) != before:
                written.append(name)
        except (OSError, ValueError):
            skipped.append(f"{record['task']}/{inst_id} attempt {attempt}: its pack file is gone or changed")
    before = project.repo.ref_target(run_ref(record["run_id"]))
    if project.repo.ref_target(snapshot_run(project, record)) != before:
        written.append(run_ref(record["run_id"]))
    return {"written": written, "skipped": skipped}


# -- remotes ----------------------------------------------------------------------------
def check_remote(repo: Repo, remote: str) -> None:
    proc = repo.run_git(["remote", "get-url", remote], check=False)
    if proc.returncode != 0:
        known = repo.run_git(["remote"], check=False).stdout.decode(errors="replace").split()
        raise ParallelError(
            E.REMOTE_NOT_FOUND, f"no remote named {remote!r} (remotes: {', '.join(known) or 'none'})",
            hint=f"add it with `git remote add {remote} URL`, or name one of those")


def notes_refs(project: Project) -> list[str]:
    """The notes refs the local runs write (the default one if none)."""
    from gitflow_parallel.config import DEFAULTS

    refs = {r["config"]["notes_ref"] for r in local_records(project)}
    return sorted(refs or {DEFAULTS["notes_ref"]})


def git_failed(what: str, proc: subprocess.CompletedProcess[bytes], hint: str) -> ParallelError:
    return ParallelError(E.REMOTE_FAILED, f"{what} failed: {proc.stderr.decode(errors='replace').strip()}", hint=hint)


def _identity(repo: Repo) -> list[str]:
    """``-c user.*`` for git commands that commit, when no identity is configured."""
    import pygit2

    try:
        _ = repo.pygit.default_signature  # raises where none is configured
        return []
    except (KeyError, pygit2.GitError):
        sig = repo.signature()
        return ["-c", f"user.name={sig.name}", "-c", f"user.email={sig.email}"]


def merge_notes(project: Project, notes_ref: str, theirs: str) -> str:
    """Merge the notes commit ``theirs`` into ``notes_ref`` with cat_sort_uniq.

    The merge runs on a scratch notes ref; the real one then moves by
    compare-and-swap, so a notes commit written meanwhile is never lost.
    Returns "up to date", "fast-forward" or "merged"."""
    repo = project.repo
    for _ in range(CAS_ATTEMPTS):
        ours = repo.ref_target(notes_ref)
        if ours is None:
            if repo.cas_ref(notes_ref, theirs, None, "git-parallel: fetch notes"):
                return "fast-forward"
            continue
        if repo.is_ancestor(theirs, ours):
            return "up to date"
        if repo.is_ancestor(ours, theirs):
            if repo.cas_ref(notes_ref, theirs, ours, "git-parallel: fetch notes"):
                return "fast-forward"
            continue
        scratch = f"refs/notes/git-parallel-merge-{os.getpid()}"
        repo.run_git(["update-ref", scratch, ours])
        try:
            proc = repo.run_git([*_identity(repo), "notes", f"--ref={scratch}", "merge", "-q", "-s", "cat_sort_uniq",
                                 theirs], check=False)
            if proc.returncode != 0:
                raise git_failed("git notes merge", proc, "see the message; nothing of the notes was changed")
            merged = repo.ref_target(scratch)
        finally:
            repo.run_git(["update-ref", "-d", scratch], check=False)
        if merged and repo.cas_ref(notes_ref, merged, ours, "git-parallel: merge notes (cat_sort_uniq)"):
            return "merged"
    raise RuntimeError(f"could not merge into {notes_ref}: it kept moving")


def has_object(repo: Repo, oid: str) -> bool:
    import pygit2

    try:
        return repo.pygit.get(oid) is not None
    except (ValueError, pygit2.GitError):
        return False


def same_content(repo: Repo, name: str, mine: str, theirs: str) -> bool:
    """Two commits of ``name`` that say the same: one tree, or, for an
    evidence ref, one pack (the bytes the record's sha256 binds; the logs
    kept beside it are what the pack's writer had).  An archive ref keeps a
    commit with its history, so only that commit is the same."""
    # Imported here: `status` reads fetched runs through this module, and
    # needs none of what making worktrees takes.
    from gitflow_parallel.git.worktrees import ARCHIVE_PREFIX

    if name.startswith(ARCHIVE_PREFIX + "/"):
        return False
    if repo.tree_of(mine) == repo.tree_of(theirs):
        return True
    if not name.startswith(EVIDENCE_PREFIX + "/"):
        return False
    pack = tree_file(repo, mine, "pack.json")
    return pack is not None and pack == tree_file(repo, theirs, "pack.json")


def relation(repo: Repo, name: str, mine: str | None, theirs: str | None) -> str:
    """How our ``name`` stands to another copy of it (a remote's): "same"
    (one commit or one content: nothing to move), "ahead" (ours
    fast-forwards theirs, or they have none), "behind", "diverged" (each
    has what the other lacks) or "unknown" (their commit is not here)."""
    if mine == theirs:
        return "same"
    if theirs is None:
        return "ahead"
    if not has_object(repo, theirs):
        return "unknown"
    if mine is None:
        return "behind"
    if same_content(repo, name, mine, theirs):
        return "same"
    if repo.is_ancestor(theirs, mine):
        return "ahead"
    return "behind" if repo.is_ancestor(mine, theirs) else "diverged"


def adopt(repo: Repo, name: str, theirs: str, why: str) -> bool:
    """Make our ``name`` the fetched commit ``theirs`` when ours is missing,
    behind it or says the same, so that both sides hold one commit and later
    pushes are fast-forwards; True if ours is ``theirs`` now."""
    mine = repo.ref_target(name)
    if mine == theirs:
        return True
    if relation(repo, name, mine, theirs) not in ("same", "behind"):
        return False
    return repo.cas_ref(name, theirs, mine, f"git-parallel: {why}")


def diverged_refs(remote: str, names: list[str], there: dict[str, str]) -> ParallelError:
    """The refusal for refs that both sides changed apart, with the two ways out."""
    first = names[0]
    return ParallelError(
        E.REMOTE_DIVERGED,
        f"{len(names)} ref(s) here and on {remote} have diverged (each has commits the other lacks): "
        + ", ".join(names) + "; nothing was pushed",
        hint=f"keep {remote}'s copy: `git update-ref {first} {there[first]}`, or replace it: `git push "
             f"--force-with-lease={first}:{there[first]} {remote} {first}`; then push again",
        diverged=names)


def refs_snapshot(repo: Repo, prefixes: Iterable[str]) -> dict[str, str]:
    out = {}
    for prefix in prefixes:
        out.update(dict(repo.refs_under(prefix)))
    return out


def configure_remote(project: Project, remote: str, notes: list[str] | None = None) -> dict[str, list[str]]:
    """Add fetch refspecs for the notes and ``refs/parallel/`` to ``remote``
    (into tracking refs; see the module doc).  Returns the lines added."""
    repo = project.repo
    check_remote(repo, remote)
    key = f"remote.{remote}.fetch"
    proc = repo.run_git(["config", "--get-all", key], check=False)
    have = proc.stdout.decode(errors="replace").split()
    wanted = [f"+{PARALLEL_PREFIX}/*:{REMOTES_PREFIX}/{remote}/*"] + [
        f"+{n}:{notes_tracking_ref(remote, n)}" for n in (notes or notes_refs(project))]
    added = []
    for spec in wanted:
        if spec not in have:
            repo.run_git(["config", "--add", key, spec])
            added.append(spec)
    return {key: wanted, "added": added}




def remote_notes_refs(repo: Repo, remote: str) -> list[str]:
    """Our notes refs that the remote has (so a missing one is not an error)."""
    proc = repo.run_git(["ls-remote", "--refs", remote, "refs/notes/*"], check=False)
    if proc.returncode != 0:
        raise git_failed(f"git ls-remote {remote}", proc, f"check that {remote} is reachable")
    names = [line.split("\t", 1)[1] for line in proc.stdout.decode(errors="replace").splitlines() if "\t" in line]
    return [n for n in names if not n.startswith("refs/notes/remotes/")]
