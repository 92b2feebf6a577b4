"""The check engine: judge each succeeded (or named) instance in a clean
checkout and record the evidence.

``check``, ``worker`` and ``run --until-pass`` all judge through here; the
gates themselves, fingerprints and scores are ``judge/gates``'s.  See
docs/judging.md for what a gate sees and docs/formats.md for what a pack proves."""

from __future__ import annotations

import contextlib
import traceback
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

import pygit2
from filelock import FileLock, Timeout

from gitflow_parallel import errors as E
from gitflow_parallel import config, evidence, faults, model, notify, provenance, reach
from gitflow_parallel.git import lfs, protected, scratch
from gitflow_parallel.judge import stores
from gitflow_parallel.state import share
from gitflow_parallel.errors import ParallelError, is_no_space
from gitflow_parallel.files import remove_hostile_files, sha256_bytes, untrusted_json, unlink_beneath, utcnow, write_beneath
from gitflow_parallel.git.repo import worktree_changes
from gitflow_parallel.config import scratch_patterns
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import FINISHED_RUN, find_instance
from gitflow_parallel.proc import sandbox
from gitflow_parallel.proc.notifier import Notifier
from gitflow_parallel.proc.watchdog import shared as shared_watchdog
from gitflow_parallel.judge import hidden, layers, pace, proof
from gitflow_parallel.judge.fingerprints import input_fingerprints, output_fingerprints, read_head
from gitflow_parallel.judge.gates import (applicable, complete_of, gate_facts, judge_checkout, kept_paths,
                                         refused_protected, repository_of, run_gates, verdict_of, what_is_judged)
from gitflow_parallel.judge.place import Place, judging
from gitflow_parallel.judge.score import score
from gitflow_parallel.proc.child import own_events
from gitflow_parallel.shapes.records import EvidenceBinding, InstanceRecord, RunRecord
from gitflow_parallel.shapes.pack import AddedTests, EngineEvidence, EvidencePack, GateResult, Judged
from gitflow_parallel.shapes.results import CheckedInstance, CheckResult, InstanceError
from gitflow_parallel.config_schema import FrozenConfig, GateConfig

# How progress names a gate run again with the tests an attempt added.
ADDED_STAGE = "with the added tests"


# -- engine evidence --------------------------------------------------------------
def engine_evidence(inst: InstanceRecord) -> EngineEvidence:
    """Counts by event name from the instance's events log, or unavailable.

    Nothing observed is null, never 0: an empty or absent log does not prove
    that an agent did nothing, only that it told us nothing.  The runner's
    own events (``engine_*``) are counted from its copy, which the agent
    cannot write (``proc/child.engine_event``); ``engine_*`` lines of the
    agent's file that the copy lacks are ``forged``, and the copy's lines
    missing there ``erased``."""
    path = inst.get("events")
    data, size = _whole_lines(Path(path)) if path else (None, 0)
    own, _ = _whole_lines(own_events(Path(path))) if path else (None, 0)
    lines = [l for l in (data or b"").decode("utf-8", "replace").splitlines() if l.strip()]
    runner = [l for l in (own or b"").decode("utf-8", "replace").splitlines() if l.strip()]
    if not lines and not runner:
        return {"status": "unavailable", "counts": None}
    names = [_event_name(l) for l in lines]
    theirs = Counter(l for l, n in zip(lines, names) if n is not None and n.startswith("engine_"))
    ours = Counter(runner)
    counted = [n for n in names if n is not None and not n.startswith("engine_")]
    counted += [n for n in map(_event_name, runner) if n is not None]
    out: EngineEvidence = {"status": "observed", "counts": dict(sorted(Counter(counted).items())), "lines": len(lines),
                           "malformed": names.count(None), "path": str(path), "sha256": sha256_bytes(data or b""),
                           "forged": sum((theirs - ours).values()), "erased": sum((ours - theirs).values())}
    if data is not None and size > len(data):
        out["cut"] = size - len(data)  # bytes past what was read (and hashed)
    return out


def _whole_lines(path: Path) -> tuple[bytes | None, int]:
    """The first bytes of a file the agent may write (``read_head``), cut
    after its last whole line when it was cut; and its size."""
    data, size = read_head(path)
    if data is not None and size > len(data):  # cut: the last line read may be half a line
        data = data[:data.rfind(b"\n") + 1]
    return data, size


def _event_name(line: str) -> str | None:
    try:
        item = untrusted_json(line)
    except ValueError:
        return None
    name = item.get("event") if isinstance(item, dict) else None
    return name if isinstance(name, str) and name else None


# -- check ----------------------------------------------------------------------
def _head_of(worktree: Path) -> str | None:
    try:
        wt = pygit2.Repository(str(worktree))
        return None if wt.head_is_unborn else str(wt.head.target)
    except (pygit2.GitError, KeyError):
        return None


def _tracked_changes(worktree: Path, common: Path) -> list[str]:
    """Tracked paths a gate modified or deleted (new untracked files are
    byproducts), but for LFS files holding the content their pointer names
    (``lfs.smudge`` wrote it there; libgit2 sees the pointer)."""
    wt = pygit2.Repository(str(worktree))
    new = pygit2.GIT_STATUS_WT_NEW | pygit2.GIT_STATUS_IGNORED
    changed = sorted(p for p, f in wt.status(untracked_files="no").items()
                     if f != pygit2.GIT_STATUS_CURRENT and not f & new)
    index = wt.index
    return [p for p in changed if p not in index or not lfs.is_smudged(common, wt[index[p].id].read_raw(), worktree / p)]


def _picked_winners(record: RunRecord) -> set[str]:
    return {p["winner"] for p in (record.get("picks") or {}).values()}


def _targets(record: RunRecord, instances: list[str] | None) -> list[InstanceRecord]:
    """The instances to check.  A picked winner is never re-checked: its pack
    would be rewritten in place, and the write-once pick record, which names
    that pack's sha256, would then refuse to merge forever."""
    task = record["task"]
    winners = _picked_winners(record)
    if instances:
        chosen = []
        for inst_id in dict.fromkeys(instances):
            inst = find_instance(record, inst_id)
            if inst.get("removed"):
                raise ParallelError(
                    E.BRANCH_NOT_FOUND, f"instance {inst_id} was cleaned up; its worktree and branch are gone",
                    hint=f"its tip is kept under refs/parallel/archive/{record['run_id']}/{inst_id}/")
            if inst["status"] in ("failed", "aborted"):
                raise ParallelError(
                    E.BRANCH_TERMINAL, f"instance {inst_id} is {inst['status']}; only succeeded instances are checked",
                    hint=f"`git parallel retry {task} {inst_id}`, then `git parallel run {task} --instance {inst_id} -- CMD`")
            if inst["status"] != "succeeded":
                raise ParallelError(
                    E.EVIDENCE_MISSING,
                    f"instance {inst_id} is {inst['status']}: it has not finished a run, so there is nothing to check",
                    hint=f"`git parallel run {task} --instance {inst_id} -- CMD` first, and check once it succeeded")
            if inst_id in winners:
                raise ParallelError(
                    E.BRANCH_TERMINAL,
                    f"instance {inst_id} won the pick of track {inst['track']}; the evidence the pick names is final",
                    hint=f"merge it with `git parallel merge {task}`; to judge new work, spawn a new run")
            chosen.append(inst)
        return chosen
    succeeded = [i for i in record["instances"] if i["status"] == "succeeded" and not i.get("removed")]
    chosen = [i for i in succeeded if i["id"] not in winners]
    if succeeded and not chosen:
        raise ParallelError(
            E.BRANCH_TERMINAL, f"every succeeded instance of {task!r} is a picked winner; their evidence is final",
            hint=f"merge with `git parallel merge {task}`")
    if not chosen:
        states = ", ".join(f"{i['id']} {i['status']}" for i in record["instances"])
        raise ParallelError(
            E.EVIDENCE_MISSING, f"run {record['run_id']} of {task!r} has no succeeded instance to check ({states})",
            hint=f"`git parallel run {task} -- CMD` first; `git parallel status {task}` shows where each stands")
    return chosen


def _preflight(project: Project, record: RunRecord, inst: InstanceRecord) -> str:
    """Refuse an instance whose worktree does not hold exactly its branch tip;
    returns the tip."""
    task, inst_id = record["task"], inst["id"]
    tip = project.tip(inst)
    path = Path(inst["worktree"])
    if tip is None:
        raise ParallelError(E.BRANCH_NOT_FOUND, f"the branch {inst['branch']} of instance {inst_id} is missing",
                            hint=f"`git parallel validate {task}` and `git parallel recover {task}`")
    if not (path / ".git").exists():
        raise ParallelError(E.BRANCH_NOT_FOUND, f"the worktree of instance {inst_id} ({path}) is missing",
                            hint=f"`git parallel validate {task}` and `git parallel recover {task}`")
    dirty = worktree_changes(path, scratch_patterns(record["config"]))
    if dirty:
        shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"the worktree of instance {inst_id} ({path}) has uncommitted changes ({shown}); "
            "evidence must describe a commit",
            # `git parallel run` commits left-overs, but only runs pending
            # instances; a succeeded one is final, so commit or discard here.
            hint=f"commit them on {inst['branch']} (git -C {path} add -A && git -C {path} commit) or discard them "
                 f"(git -C {path} stash -u), then check again",
            paths=dirty)
    head = _head_of(path)
    if head != tip:
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"the worktree of instance {inst_id} is at {str(head)[:12]}, its branch {inst['branch']} at {tip[:12]}",
            hint=f"check out {inst['branch']} in {path} (git -C {path} checkout {inst['branch']}) and check again")
    return tip


def _lock(project: Project, task: str, inst_id: str) -> FileLock:
    folder = project.repo.parallel_dir / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"check-{task}-{inst_id}.lock"), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ParallelError(
            E.RESOURCE_LOCK_FAILED, f"instance {inst_id} of {task!r} is being checked by another git parallel check",
            hint="wait for it to finish and read its result with `git parallel status`") from None
    return lock


def _broken(project: Project, record: RunRecord, inst: InstanceRecord, exc: Exception) -> InstanceError:
    """The error of an instance whose judging ended in an unexpected error
    (the attempt's code reaches places no test foresaw; or a bug of ours),
    its traceback kept beside its logs: it gets no evidence, and the check
    goes on with its siblings."""
    log = project.repo.parallel_dir / "logs" / record["run_id"] / f"{inst['id']}.{inst['attempt']}.check-error.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        where = f"; the traceback is in {log}"
    except OSError:
        where = ""
    return {"id": inst["id"], "code": "INTERNAL",
            "message": f"judging it ended in an internal error: {type(exc).__name__}: {str(exc)[:500]}{where}",
            "hint": f"the other instances were judged; `git parallel check {record['task']} --instance {inst['id']}` "
                    "tries it again; if it recurs, please report it with the traceback"}


def _check_one(project: Project, record: RunRecord, inst: InstanceRecord, commit: str,
               selected: set[str] | None, reads: sandbox.Reads, lane: pace.Lane) -> EvidencePack:
    """Run the gates and score of one instance in a clean checkout of its
    commit; returns its pack (not yet written).  ``reads``: the fences' read
    rules, shared by the check's instances; ``lane``: its way through the
    check's budget of cores."""
    repo = pygit2.Repository(str(project.repo.common_dir))  # one handle per thread
    base_commit = record["base"]["commit"]
    cfg = record["config"]
    tree = str(repo[commit].peel(pygit2.Commit).tree_id)
    judged = what_is_judged(repo, record, commit, base_commit)
    reaches = reach.scan(protected.added_lines(repo, base_commit, commit, judged["protected"]),
                         lambda path: protected.file_at(repo, commit, path))
    gates = applicable(cfg["gates"], inst["track"])
    events = engine_evidence(inst)
    if judged["protected_changes"] and cfg["protect_mode"] == "refuse":
        # Judged as it is, it would be tested against its own tests; restored,
        # it would not be the attempt any more.  Nothing runs.
        return {
            "schema_version": evidence.SCHEMA_VERSION, "origin": evidence.ORIGIN, "run_id": record["run_id"],
            "task": record["task"], "instance": inst["id"], "track": inst["track"], "attempt": inst["attempt"],
            "instance_revision": inst["instance_revision"], "commit": commit, "tree": tree,
            "base_commit": base_commit, "config_sha256": record["config_sha256"], "checkout": judged["checkout"],
            "protected": judged["protected"], "protect_mode": judged["protect_mode"],
            "protected_changes": judged["protected_changes"], "protected_detail": judged["protected_detail"],
            "protected_blocking": judged["protected_blocking"], "reaches_harness": reaches,
            "judged_commit": judged["judged_commit"],
            "judged_tree": judged["judged_tree"], "engine_evidence": events, "gates": [], "verdict": "fail",
            "complete": True, "score": None, "score_source": None,
            "score_error": None, "refused": refused_protected(judged), "input_fingerprints": {}, "setup": None,
            "added_tests": None,
            "output_fingerprints": output_fingerprints(repo, base_commit, commit), "proof_issued_at": utcnow()}
    repo_ = project.repo
    with scratch.borrow(repo_) as checkout, contextlib.ExitStack() as stack:
        path = checkout.prepare(judged["judged_commit"], keep=kept_paths(cfg))
        place = stack.enter_context(judging(
            repo_.common_dir, repo_.main_workdir, repo_.parallel_dir, checkout, path, cfg, reads,
            log_dir=repo_.parallel_dir / "logs" / record["run_id"], log_prefix=f"{inst['id']}.{inst['attempt']}",
            facts=gate_facts(record, inst, inst["track"], path, commit), repository=repository_of(repo_),
            judged=judged["judged_commit"], lane=lane))
        # Both fingerprints are taken before any gate can touch the checkout.
        outputs = output_fingerprints(repo, base_commit, commit,
                                      path if judged["judged_commit"] == commit else None)
        inputs = input_fingerprints(repo, judged["judged_tree"],
                                    [p for g in gates if selected is None or g["name"] in selected
                                     for p in g.get("inputs") or []])
        setup, results = judge_checkout(repo, cfg, gates, inst["track"], place, judged["judged_tree"], selected)
        value, source, error = score(cfg["score"], place)
        # Under the namespace layer the gates saw the checkout through a
        # throwaway layer and never wrote it: there is nothing to look for.
        written = not place.overlaid
        if written:
            _still_judged(path, judged["judged_commit"], inst["id"], repo_.common_dir)
        added = _added_stage(repo, cfg, gates, inst, place, commit, judged, results, selected)
        if added is not None and written:
            _still_judged(path, judged["judged_commit"], inst["id"], repo_.common_dir)
    if added is not None:
        added = proof.on_base(project, record, inst, commit, _again(gates, selected), added,
                              protected.test_ids(judged["protected_detail"]), reads, lane)
    verdict = verdict_of(results)
    if added and added["mode"] == "enforced" and not added["passed"]:
        verdict = "fail"
    return {
        "schema_version": evidence.SCHEMA_VERSION, "origin": evidence.ORIGIN, "run_id": record["run_id"],
        "task": record["task"], "instance": inst["id"], "track": inst["track"], "attempt": inst["attempt"],
        "instance_revision": inst["instance_revision"], "commit": commit, "tree": tree,
        "base_commit": base_commit, "config_sha256": record["config_sha256"], **judged, "reaches_harness": reaches,
        "refused": None,
        "engine_evidence": events, "fence": place.fence.kind if place.fence else "none",
        "layers": place.fence.held() if place.fence else [], "setup": setup, "gates": results,
        "added_tests": added, "verdict": verdict, "score": value, "score_source": source, "score_error": error,
        "input_fingerprints": inputs, "output_fingerprints": outputs, "proof_issued_at": utcnow(),
        "complete": complete_of(results)}


def _added_stage(repo: pygit2.Repository, cfg: FrozenConfig, gates: list[GateConfig], inst: InstanceRecord,
                 place: Place, commit: str, judged: Judged, results: list[GateResult],
                 selected: set[str] | None) -> AddedTests | None:
    """The tests the attempt added under protected paths, which its judging
    left out: once the enforced gates passed on the base's tests, they run
    again with the added files in the checkout (``added_tests``: observe
    records the result, enforced also fails the attempt on it).  Gates
    with hidden tests are not run again."""
    paths = protected.added_tests(judged.get("protected_detail") or [])
    mode = cfg.get("added_tests", "observe")
    if not paths or mode == "off" or verdict_of(results) != "pass":
        return None
    again = _again(gates, selected)
    tree = repo[commit].peel(pygit2.Commit).tree
    if place.overlaid:
        return _added_layered(repo, tree, paths, again, inst, place, mode)
    written: list[str] = []
    replaced = {c["path"] for c in judged.get("protected_detail") or [] if c.get("appended")}
    try:
        _lay_added(repo, tree, paths, place.worktree, written, replaced)
        stage = Place(worktree=place.worktree, log_dir=place.log_dir, log_prefix=f"{place.log_prefix}.added",
                      facts=place.facts, path=place.path, repository=place.repository, fence=place.fence,
                      lane=place.lane.of_stage(ADDED_STAGE))
        ran = run_gates(again, inst["track"], stage)
    finally:
        base_tree = repo[judged["judged_commit"]].peel(pygit2.Commit).tree
        for rel in written:
            try:  # the stage's gates ran the attempt's code there: never through a link it left
                unlink_beneath(place.worktree, rel)
                if rel in replaced:  # the base's file again, as judged
                    entry = base_tree[rel]
                    write_beneath(place.worktree, rel, repo.odb.read(entry.id)[1], _file_mode(entry.filemode))
            except OSError:
                pass  # the checkout is made afresh before anyone judges in it again
    return {"mode": mode, "paths": paths, "gates": ran, "passed": verdict_of(ran) == "pass"}


def _again(gates: list[GateConfig], selected: set[str] | None) -> list[GateConfig]:
    """The gates the added tests run through: the enforced ones, without hidden tests."""
    return [g for g in gates if g["mode"] == "enforced" and not g.get("hidden")
            and (selected is None or g["name"] in selected)]


def _file_mode(filemode: int) -> int:
    return 0o755 if filemode == pygit2.GIT_FILEMODE_BLOB_EXECUTABLE else 0o644


def _lay_added(repo: pygit2.Repository, tree: pygit2.Tree, paths: list[str], worktree: Path,
               written: list[str], replaced: set[str]) -> None:
    """Write the added tests into the checkout the gates wrote (Landlock
    alone), each a new file (the base's file taken out first where the
    attempt only added tests to it: ``replaced``), never through a link a
    gate left at its name or on the way; ``written`` says which went in."""
    try:
        for rel in paths:
            hidden.safe_target(worktree, rel).parent.mkdir(parents=True, exist_ok=True)
            if rel in replaced:
                unlink_beneath(worktree, rel)
            write_beneath(worktree, rel, repo.odb.read(tree[rel].id)[1])
            written.append(rel)
    except OSError as exc:  # a file, or a link on the way, where an added test goes
        raise ParallelError(E.EVIDENCE_MISMATCH, f"a gate left {exc.filename or 'a link'} where an added test goes "
                            f"({exc.strerror or exc}); nothing is written through it",
                            hint="check again: the checkout is made afresh") from None


def _added_layered(repo: pygit2.Repository, tree: pygit2.Tree, paths: list[str], again: list[GateConfig],
                   inst: InstanceRecord, place: Place, mode: str) -> AddedTests:
    """The added-tests stage under the namespace layer: the added files in a
    layer of their own over the checkout, the gates in a fresh upper layer."""
    parallel_dir = place.log_dir.parent.parent
    folder = layers.files_layer(parallel_dir, {rel: repo.odb.read(tree[rel].id)[1] for rel in paths})
    stage = Place(worktree=place.worktree, log_dir=place.log_dir, log_prefix=f"{place.log_prefix}.added",
                  facts=place.facts, path=place.path, repository=place.repository, fence=place.fence,
                  layer_root=place.layer_root, above=[folder], lane=place.lane.of_stage(ADDED_STAGE))
    try:
        ran = run_gates(again, inst["track"], stage)
    finally:
        stage.close()
        layers.remove(folder)
    return {"mode": mode, "paths": paths, "gates": ran, "passed": verdict_of(ran) == "pass"}


def _still_judged(path: Path, commit: str, what: str, common: Path) -> None:
    """Gates may leave byproducts, but what they ran on must still be the
    judged commit: a gate that moved HEAD or rewrote tracked files has
    judged something else (and the gates after it saw that)."""
    # Under Landlock alone the gates wrote it: libgit2 would block on a FIFO
    # there, or read a 20 GB .gitignore whole.
    remove_hostile_files(path)
    # Nor is its `.git` file followed unless git wrote it as it is: to a git
    # dir that is not there libgit2 raised; to one of the gate's making it
    # read a 16 GB index whole.
    own = scratch.own_gitfile(common, path)
    moved = _head_of(path) if own else None
    try:
        changed = _tracked_changes(path, common) if own else []
    except pygit2.GitError as exc:  # it could not read them as they are
        changed = [f"(unreadable: {exc})"]
    if not own or moved != commit or changed:
        what_changed = ("its .git file no longer names its own git dir" if not own
                        else f"HEAD moved to {str(moved)[:12]}" if moved != commit
                        else "tracked files changed: " + ", ".join(changed[:10]) + (" …" if len(changed) > 10 else ""))
        raise ParallelError(
            E.EVIDENCE_MISMATCH,
            f"while {what} was checked, a gate changed its clean checkout ({what_changed}), so the gates did not "
            f"all test {commit[:12]}; no evidence was written",
            hint="make the gates leave tracked files alone (write to untracked, ignored paths) and check again")


def _select_gates(record: RunRecord, gates: list[str] | None) -> set[str] | None:
    if not gates:
        return None
    known = [g["name"] for g in record["config"]["gates"]]
    for name in gates:
        if name not in known:
            raise ParallelError(
                E.INVALID_NAME,
                f"no gate named {name!r} in the configuration frozen for run {record['run_id']}"
                f" (it has: {', '.join(known) or 'no gates'})",
                hint="name one of those with --gate; gates come from .gitparallel.yaml at the base commit, "
                     "as it was at spawn")
    return set(gates)


def _store_pack(project: Project, task: str, pack: EvidencePack) -> EvidenceBinding:
    binding = evidence.write(project.repo.parallel_dir, pack)
    faults.point("check.after_pack")

    def apply(record: RunRecord, inst: InstanceRecord) -> None:
        if inst["status"] != "succeeded":
            raise ParallelError(E.BRANCH_TERMINAL, f"instance {inst['id']} became {inst['status']} during the check",
                                hint=f"see `git parallel status {task}`")
        model.bind_evidence(inst, binding, pack)

    project.store.update_instance(task, pack["instance"], apply, expected_attempt=pack["attempt"])
    return binding


def check(project: Project, task: str, instances: list[str] | None = None, gates: list[str] | None = None,
          jobs: int | None = None, skip: Callable[[RunRecord, InstanceRecord], bool] | None = None,
          progress: pace.Report | None = None) -> CheckResult:
    """Run the gates of every succeeded (or each named) instance and record
    the evidence.  Refusals before anything runs raise; what goes wrong for
    one instance afterwards is reported under ``errors``.  ``skip(record,
    inst)`` leaves an instance out (``check`` without --again: fresh evidence).
    ``jobs``: the gate threads run at once (default: this machine's cores);
    ``progress`` hears of each gate started and finished (``judge/pace``)."""
    check_name(task, "task")
    record = project.store.load(task)
    if record["status"] in FINISHED_RUN:
        raise ParallelError(
            E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} is {record['status']}; nothing to check",
            hint=f"spawn a new run with `git parallel spawn {task}`")
    config.verify_frozen(project.repo, record)
    stores.refuse_agents_writing(record["config"])  # (a record frozen before it was refused)
    sandbox.tmp_root()  # where the gates' TMPDIRs, reports and hidden output go: refused now if unsafe
    selected = _select_gates(record, gates)
    from gitflow_parallel.state import hand

    record = hand.adopt(project, record, instances)  # pending work done by hand counts as finished
    targets = [i for i in _targets(record, instances) if skip is None or not skip(record, i)]
    jobs = jobs or pace.machine_cores()
    if jobs < 1:
        raise ParallelError(E.RESOURCE_CAP_EXHAUSTED, f"--jobs {jobs} is below 1", hint="pass --jobs 1 or more")
    if not targets:
        return {"task": task, "run_id": record["run_id"], "jobs": jobs, "notes_error": None, "instances": [],
                "errors": []}
    locks: list[FileLock] = []
    notifier = Notifier(project, record)
    reads = sandbox.siblings(record)  # the fences' read rules, worked out once for every instance
    cores = pace.Pace(task, jobs, progress)
    try:
        commits = {}
        for inst in targets:
            locks.append(_lock(project, task, inst["id"]))
            commits[inst["id"]] = _preflight(project, record, inst)
        checked: dict[str, CheckedInstance] = {}
        errors: dict[str, InstanceError] = {}
        entries: list[tuple[str, str]] = []
        warnings: list[str | None] = []  # evidence refs not written (push writes them)
        shared_watchdog()  # forked before the threads
        with ThreadPoolExecutor(max_workers=min(jobs, len(targets))) as pool:
            futures: dict[Future[EvidencePack], InstanceRecord] = {
                pool.submit(_check_one, project, record, inst, commits[inst["id"]], selected, reads,
                            cores.lane(inst["id"])): inst
                for inst in targets}
            for future in as_completed(futures):
                inst = futures[future]
                try:
                    pack = future.result()
                    binding = _store_pack(project, task, pack)
                    warnings.append(share.store_evidence(project, record, {**inst, "evidence": binding}))
                except ParallelError as exc:
                    errors[inst["id"]] = {"id": inst["id"], "code": exc.code, "message": exc.message, "hint": exc.hint}
                    continue
                except Exception as exc:  # noqa: BLE001 - one attempt's judging broke: its siblings are still judged
                    if is_no_space(exc):
                        raise
                    errors[inst["id"]] = _broken(project, record, inst, exc)
                    continue
                checked[inst["id"]] = {
                    "id": inst["id"], "track": inst["track"], "attempt": inst["attempt"], "commit": pack["commit"],
                    "tree": pack["tree"], "verdict": pack["verdict"], "complete": pack["complete"],
                    "score": pack["score"], "score_error": pack["score_error"], "gates": pack["gates"],
                    "evidence": binding, "proof_issued_at": pack["proof_issued_at"],
                    "protected_changes": pack["protected_changes"], "protected_detail": pack["protected_detail"],
                    "reaches_harness": pack.get("reaches_harness") or [], "refused": pack["refused"],
                    "added_tests": pack["added_tests"]}
                entries.append((pack["commit"], provenance.evidence_note(record, inst["id"], pack, binding["sha256"])))
                if pack["verdict"] == "fail":
                    notifier.send(notify.gates_failed(record, inst, pack))
    finally:
        reads.close()
        for lock in locks:
            lock.release()
    notes_error = project.mirror_notes(record, entries, "check") if entries else None
    notes_error = "; ".join(w for w in (notes_error, *warnings) if w) or None
    order = [i["id"] for i in targets]
    return {"task": task, "run_id": record["run_id"], "jobs": jobs, "notes_error": notes_error,
            "instances": [checked[i] for i in order if i in checked],
            "errors": [errors[i] for i in order if i in errors], "notify_warnings": notifier.finish()}


