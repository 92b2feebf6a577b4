"""Gates and scores: running the checks of a run's frozen configuration on
a clean checkout of an instance's commit, fingerprinting what they saw, and
turning the outcome into an evidence pack bound to one exact commit and tree
(``check``); and running the enforced gates once more on an arbitrary tree
(``verify_tree``, used by merge before the base moves).

How gates are chosen, run, ordered and skipped, what the verdict and
``complete`` mean (a check with no enforced gate passes), probes, scores and
the order in which packs and records are written: docs/judging.md, "How
``check`` runs the gates"; the pack's fields: docs/formats.md.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Iterable

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import expect, failures
from gitflow_parallel.git import protected, scratch
from gitflow_parallel.judge import environment, hidden, outcome, reported, stores, stream
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import read_tail, sha256_bytes
from gitflow_parallel.model import RunRecord
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.state.project import Project
from gitflow_parallel.proc import sandbox
from gitflow_parallel.judge.fingerprints import READ_CAP, read_head, read_regular, sha256_path
from gitflow_parallel.judge.place import Layer, Place, execute, failure_code, gate_env, judging
from gitflow_parallel.shapes.records import InstanceRecord, Refusal, Verdict
from gitflow_parallel.shapes.pack import (ExpectResult, GateResult, Judged, ProbeSignature, SetupEntry, StreamedCounts,
                                          Verification)
from gitflow_parallel.config_schema import FrozenConfig, GateConfig, SetupConfig


def applicable(gates: list[GateConfig], track: str) -> list[GateConfig]:
    """The gates that apply to ``track`` (``tracks`` null means all)."""
    return [g for g in gates if (tracks := g.get("tracks")) is None or track in tracks]


def gate_result(gate: GateConfig, *, exit_code: int | None = None, passed: bool = False,
            duration_s: float | None = None, log: str | None = None, log_sha256: str | None = None,
            skipped: bool = False, code: str | None = None, error: str | None = None) -> GateResult:
    return {"name": gate["name"], "argv": list(gate["run"]), "mode": gate["mode"], "exit_code": exit_code,
            "passed": passed, "duration_s": duration_s, "log": log, "log_sha256": log_sha256, "skipped": skipped,
            "code": code, "error": error}


def run_gate(gate: GateConfig, place: Place) -> GateResult:
    env = gate_env(gate.get("env") or {}, place.facts, place.path if gate.get("setup", True) else (),
                   home=place.home)
    with reported.report_file(gate) as report, contextlib.closing(stream.open_channel()) as channel:
        argv, extra = reported.command(gate, report)
        env.update(extra)
        env.update(channel.env(env))
        if gate.get("hidden"):
            return _run_hidden(gate, place, env, argv, report, channel)
        log = place.log(f"gate-{gate['name']}")
        # A probe's stdout is its behaviour; stderr (warnings, timings) is kept
        # apart so that it cannot split candidates that behave alike.
        err_log = place.log(f"gate-{gate['name']}-stderr") if gate["mode"] == "probe" else None
        layer = place.layer(gate["name"])
        layer.writable = report and report.parent
        code, error, seconds = execute(argv, place.worktree, env, float(gate["timeout"]), log, err_log, layer=layer,
                                       channel=channel)
        result = gate_result(gate, exit_code=code, duration_s=round(seconds, 3), log=str(log),
                             log_sha256=sha256_path(log))
        expected = reported.judged(gate, report)
        ran = outcome.Ran(code, error, failure_code(error), channel.result(), _printed(log), expected,
                          listed=_listed(gate))
        _decided(result, ran, expected)
    if gate["mode"] == "probe":
        result["stderr_log"] = str(err_log)
        result["signature"] = probe_signature(gate, place, log, code, error)
    return result


def _printed(log: Path) -> outcome.Printed | None:
    """The runner's summary printed last in ``log`` (its tail: a gate can
    grow its log to any size)."""
    try:
        text = read_tail(log, PRINTED_TAIL)[0].decode("utf-8", "replace")
    except OSError:
        return None
    return failures.tally(text)


def _listed(gate: GateConfig) -> tuple[str, ...]:
    spec = gate.get("expect")
    return (*spec["fail_to_pass"], *spec["pass_to_pass"]) if spec else ()


# Bytes of a log's end read for the printed summary: mocha and node's spec
# reporter print their counts before the failures' details.
PRINTED_TAIL = 1 << 20


def _decided(result: GateResult, ran: outcome.Ran, expected: ExpectResult | None) -> None:
    """``result`` given the outcome of ``ran`` (``judge/outcome``), and
    what the stream counted."""
    decided = outcome.decide(ran)
    result.update({"passed": decided.passed, "code": decided.code, "error": decided.error})
    if expected is not None:
        result["expect"] = expected
    if ran.streamed is not None and ran.streamed.any:
        result["streamed"] = _counts(ran.streamed, ran.canary)


def _counts(streamed: stream.Streamed, canary: str | None) -> StreamedCounts:
    tests = {t: c for t, c in streamed.tests().items() if not outcome.is_canary(t, canary)}
    failed = sorted(t for t, c in tests.items() if c in ("failed", "error"))
    return {"sessions": len(streamed.sessions), "passed": sum(c == "passed" for c in tests.values()),
            "failed": len(failed), "skipped": sum(c == "skipped" for c in tests.values()),
            "failed_tests": failed[:20]}


def _run_hidden(gate: GateConfig, place: Place, env: dict[str, str], argv: list[str],
                report: Path | None, channel: stream.Channel) -> GateResult:
    """A gate with hidden tests (``judge/hidden``): they are in the checkout
    only while it runs, beside a canary (a test that must fail, named at
    random for this run), and nothing of its output but the counts is kept.
    Without a count of tests run it fails, unless ``require_count: false``."""
    folder = gate["hidden"]
    assert folder is not None  # run_gate sends only a gate with hidden tests here
    root = hidden.folder_of(folder, place.repository)
    log = hidden.scratch_log()
    try:
        writable = report and report.parent
        with hidden.canary_layer(root) as (canary, canary_root):
            if place.overlaid:
                # Laid over the checkout in its own throwaway layer: nothing the
                # gate copies out of them is seen by a gate after it.
                files = hidden.listing(root)
                above = [root, *([canary_root] if canary_root else [])]
                code, error, seconds = execute(argv, place.worktree, env, float(gate["timeout"]), log,
                                               layer=Layer(above=above, writable=writable), channel=channel)
            else:
                with hidden.overlaid(root, place.worktree, canary_root) as files:
                    code, error, seconds = execute(argv, place.worktree, env, float(gate["timeout"]), log,
                                                   layer=Layer(writable=writable), channel=channel)
        printed = _printed(log)  # read once: its counts are the one line kept (``hidden.summary``'s)
        counts = printed.line if printed else None
    finally:
        log.unlink(missing_ok=True)
    result = gate_result(gate, exit_code=code, duration_s=round(seconds, 3))
    expected = reported.judged(gate, report)
    streamed = channel.result()
    counted = streamed.any or counts is not None or (expected is not None and expected["tests"] is not None)
    _decided(result, outcome.Ran(code, error, failure_code(error), streamed, printed, expected, hidden=True,
                                 counted=counted, require_count=gate.get("require_count", True), canary=canary,
                                 listed=_listed(gate)),
             expected)
    if "streamed" in result and all(s.ended for s in streamed.sessions):
        shown = result["streamed"]
        counts = f"{shown['failed']} failed, {shown['passed']} passed" if shown["failed"] else f"{shown['passed']} passed"
    elif expected is not None:
        counts = expect.count_line(expected)
    if "streamed" in result:
        result["streamed"]["failed_tests"] = []  # their names would tell the hidden tests
    result["hidden"] = {"files": len(files), "summary": counts}
    return result


# How much of a probe's ``outputs`` the judge reads: the attempt's code,
# run by the probe, decides how many files it leaves and how large (sparse
# files of gigabytes cost it nothing), and each is listed in the pack.
MAX_OUTPUT_FILES = 10_000
MAX_OUTPUT_BYTES = 256 << 20


def _files_written(place: Place, patterns: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """sha256 of the regular files the gates left that ``patterns`` match
    (what a probe wrote, so what it saw, not the commit's tree); nothing
    outside the checkout or under ``.git``, no link followed.  With the
    error that stopped the reading: over ``MAX_OUTPUT_FILES`` files, or
    over ``MAX_OUTPUT_BYTES`` read."""
    merged = place.merged()
    out: dict[str, str] = {}
    read = 0
    for pattern in patterns:
        for rel in merged.names(pattern, limit=MAX_OUTPUT_FILES):
            relpath = os.path.normpath(rel)
            if relpath.startswith("..") or relpath.split("/")[0] == ".git":
                continue
            if len(out) >= MAX_OUTPUT_FILES:
                return {}, f"its outputs hold over {MAX_OUTPUT_FILES} files; none is read"
            found = merged.find(relpath)
            inside = found is not None and _inside(found, merged.layers)
            data, size = read_head(found, min(READ_CAP, MAX_OUTPUT_BYTES - read)) if found and inside else (None, 0)
            if data is not None:  # over the cap: its first part, and its size
                read += len(data)
                if read >= MAX_OUTPUT_BYTES and size > len(data):
                    return {}, f"its outputs hold over {MAX_OUTPUT_BYTES >> 20} MB; they are not read further"
                digest = sha256_bytes(data)
                out[Path(relpath).as_posix()] = digest if size <= len(data) else f"{digest}+{size}"
    return dict(sorted(out.items())), None


def _inside(path: Path, roots: list[Path]) -> bool:
    """Is ``path``, its folders' links resolved, still inside one of ``roots``?"""
    real = Path(os.path.realpath(path.parent))
    return any(real == Path(os.path.realpath(r)) or Path(os.path.realpath(r)) in real.parents for r in roots)


# What a probe's stdout says instead of the checkout it ran in: every
# candidate runs in a folder of its own, and a path in the output (a test
# runner's rootdir, a traceback) must not make alike behaviour look different.
WORKTREE_PLACEHOLDER = b"<worktree>"


def probe_signature(gate: GateConfig, place: Place, log: Path, code: int | None,
                    error: str | None) -> ProbeSignature:
    """A probe's behaviour: its exit code and the sha256 of its stdout (with
    the checkout's path replaced), or of the files its ``outputs`` globs
    match after it ran.  A probe that could not start or timed out has no
    output to speak for it: ``sha256`` null and ``error`` set."""
    over = "outputs" if gate.get("outputs") else "stdout"
    if error is not None:
        return {"exit_code": None, "over": over, "sha256": None, "error": error}
    if over == "outputs":
        files, too_much = _files_written(place, gate["outputs"])
        if too_much is not None:
            return {"exit_code": None, "over": over, "sha256": None, "error": too_much}
        return {"exit_code": code, "over": over, "sha256": sha256_bytes(json.dumps(files, sort_keys=True).encode()),
                "files": files}
    head, size = read_head(log)
    data = head or b""
    worktree = place.worktree
    # The longer form first: one may contain the other (a symlinked /tmp).
    for form in sorted({str(worktree).encode(), str(worktree.resolve()).encode()}, key=len, reverse=True):
        data = data.replace(form, WORKTREE_PLACEHOLDER)
    if size > len(data):  # over the cap: the signature is of its first part, and says so
        return {"exit_code": code, "over": over, "sha256": sha256_bytes(data), "cut": size - len(data)}
    return {"exit_code": code, "over": over, "sha256": sha256_bytes(data)}


def run_gates(gates: list[GateConfig], track: str, place: Place,
              selected: set[str] | None = None) -> list[GateResult]:
    """Run ``gates`` (already those that apply) in order, honouring ``requires``.

    ``selected`` limits which run; the rest are reported as not selected."""
    names_here = {g["name"] for g in gates}
    passed: dict[str, bool] = {}
    results: list[GateResult] = []
    for gate in gates:
        if selected is not None and gate["name"] not in selected:
            results.append(gate_result(gate, skipped=True, error="not run: not selected with --gate"))
            passed[gate["name"]] = False
            continue
        missing = [r for r in gate.get("requires") or [] if not passed.get(r)]
        if missing:
            why = []
            for req in missing:
                if req not in names_here:
                    why.append(f"{req} (does not apply to track {track})")
                elif selected is not None and req not in selected:
                    why.append(f"{req} (not selected with --gate)")
                else:
                    why.append(f"{req} (did not pass)")
            results.append(gate_result(gate, skipped=True, code=E.PREDECESSOR_INCOMPLETE,
                                   error=f"skipped: requires {', '.join(why)}"))
            passed[gate["name"]] = False
            continue
        with place.lane.turn(gate):
            result = run_gate(gate, place)
        place.lane.done(result)
        results.append(result)
        passed[gate["name"]] = result["passed"]
    return results


def judge_checkout(repo: pygit2.Repository, cfg: FrozenConfig, gates: list[GateConfig], track: str,
                   place: Place, tree: str, selected: set[str] | None = None
                   ) -> tuple[SetupEntry | None, list[GateResult]]:
    """Build the checkout's environment (``setup``), refuse gates that would
    import code from outside it, then run ``gates``: (setup entry, results).
    A failed setup fails every gate (``judge/environment``)."""
    running = [g for g in gates if selected is None or g["name"] in selected]
    setup = environment.needed(cfg, running)
    entry = None
    if setup is not None:
        entry = _setup(repo, setup, place, tree)
        if not entry["passed"]:
            return entry, [gate_result(g, code=failure_code(entry["error"]) or E.EXECUTE_FAILED, log=entry["log"],
                                   error=f"not run: setup failed ({entry['error']}); see {entry['log']}")
                           for g in gates]
        place.path = environment.path_entries(setup, place.worktree)
    packages = environment.provided_packages(repo, tree)
    seen: set[str] = set()
    for gate in running:
        env = gate_env(gate.get("env") or {}, place.facts, place.path if gate.get("setup", True) else (),
                   home=place.home)
        python = _interpreter(list(gate["run"]), place, env)
        if python and python not in seen:
            seen.add(python)
            # Sandboxed like a gate: the question runs the attempt's code too
            # (a committed json.py, a .pth its build planted).
            def ask(argv: list[str], env: dict[str, str] = env) -> bytes:
                log = place.log("imports")
                probe = Layer(above=list(place.above), main=True)  # its own throwaway layer
                # Asked with the gate's import path: the checkout after the
                # installed packages (an editable install of the main worktree first).
                with contextlib.closing(stream.open_channel()) as channel:
                    execute(argv, place.worktree, {**env, **channel.env(env)}, 60.0, log, place.log("imports-stderr"),
                            layer=probe, channel=channel)
                return read_regular(log, limit=1 << 20) or b""

            environment.check_imports(python, packages, place.worktree, ask)
    return entry, run_gates(gates, track, place, selected)


def _interpreter(argv: list[str], place: Place, env: dict[str, str]) -> str | None:
    """The Python a gate starts (``environment.interpreter``), looked for
    where its command will find it: under the namespace layer, a folder of
    the checkout on its ``PATH`` is in the kept environment's layer."""
    layer = place.fence.layers[0] if place.fence is not None and place.overlaid and place.fence.layers else None
    if layer is None:
        return environment.interpreter(argv, place.worktree, env)
    top = str(place.worktree)
    mapped = [str(layer) + p[len(top):] if p == top or p.startswith(top + "/") else p
              for p in env.get("PATH", "").split(os.pathsep)]
    found = environment.interpreter(argv, place.worktree, {**env, "PATH": os.pathsep.join(mapped)})
    if found and found.startswith(str(layer) + "/"):
        return top + found[len(str(layer)):]
    return found


def _setup(repo: pygit2.Repository, setup: SetupConfig, place: Place, tree: str) -> SetupEntry:
    """Build or reuse the environment the gates run in (``judge/environment``)."""
    log = place.log("setup")
    env = gate_env({}, place.facts, home=place.home)
    read = stores.for_plan(setup, place.fence) if place.overlaid and place.fence is not None else []
    if place.fence is not None:
        place.fence.stores = read  # setup's and the gates' (Go's caches serve its tests too)
    network = (place.fence.config.get("sandbox_network") or "on") != "off" if place.fence else None
    if not place.overlaid:
        def run(argv: list[str], timeout: float) -> tuple[int | None, str | None, float, Path]:
            return (*execute(argv, place.worktree, env, timeout, log, layer=Layer(network=network)), log)

        built = environment.prepare(repo, setup, tree, place.worktree, run)
        built["stores"] = []
        return built

    def run_layered(argv: list[str], timeout: float, lower: list[Path] | None,
                    upper: tuple[Path, Path]) -> tuple[int | None, str | None, float, Path]:
        layer = Layer(upper=upper, network=network, lower=lower)
        return (*execute(argv, place.worktree, env, timeout, log, layer=layer), log)

    parallel_dir = place.log_dir.parent.parent
    entry, folder, done = environment.prepare_layer(repo, setup, tree, place.facts["BASE"], parallel_dir,
                                                    place.worktree, run_layered)
    place.cleanups.append(done)
    if folder is not None and place.fence is not None:
        place.fence.layers = [folder]
    entry["stores"] = [str(p) for p in read]
    return entry


def verdict_of(results: list[GateResult]) -> Verdict:
    """``pass`` iff every enforced gate passed (vacuously with none; see
    docs/judging.md).  Observe gates and probes never count."""
    return "pass" if all(r["passed"] for r in results if r["mode"] == "enforced") else "fail"


def complete_of(results: list[GateResult]) -> bool:
    """Every gate ran, or was skipped by the predecessor rule."""
    return all(not r["skipped"] or r["code"] == E.PREDECESSOR_INCOMPLETE for r in results)


# -- verify a tree (merge) ---------------------------------------------------------------
def _with_requirements(gates: list[GateConfig], wanted: list[GateConfig]) -> list[GateConfig]:
    """``wanted`` plus every gate they need first, transitively, in order."""
    by_name = {g["name"]: g for g in gates}
    need: set[str] = set()
    stack = [g["name"] for g in wanted]
    while stack:
        name = stack.pop()
        if name in need or name not in by_name:
            continue
        need.add(name)
        stack.extend(by_name[name].get("requires") or [])
    return [g for g in gates if g["name"] in need]


def verify_tree(project: Project, record: RunRecord, track: str, commit: str,
                base: str | None = None) -> Verification:
    """Run the enforced gates that apply to ``track`` (with the gates they
    require) on ``commit`` as judged with the protected paths of ``base``
    (default: the run's base commit), in a clean scratch checkout.  Returns
    {"passed", "commit", "tree", "gates", ...what was judged}."""
    repo = project.repo
    try:
        tree = repo.tree_of(commit)
    except (KeyError, ValueError, AttributeError, pygit2.GitError):
        raise ParallelError(E.BASE_NOT_FOUND, f"{commit!r} is not a commit in this repository",
                            hint="pass the oid of the commit to verify") from None
    base = base or record["base"]["commit"]
    judged = what_is_judged(repo.pygit, record, commit, base)
    outcome: Verification = {
        "commit": commit, "tree": tree, "checkout": judged["checkout"], "protected": judged["protected"],
        "protect_mode": judged["protect_mode"], "protected_changes": judged["protected_changes"],
        "protected_detail": judged["protected_detail"], "protected_blocking": judged["protected_blocking"],
        "judged_commit": judged["judged_commit"], "judged_tree": judged["judged_tree"], "refused": None,
        "passed": True, "gates": []}
    gates = applicable(record["config"]["gates"], track)
    wanted = _with_requirements(gates, [g for g in gates if g["mode"] == "enforced"])
    if judged["protected_changes"] and record["config"]["protect_mode"] == "refuse":
        outcome.update({"passed": False, "refused": refused_protected(judged)})
        return outcome
    if not wanted:
        return outcome
    with scratch.borrow(repo) as checkout:
        path = checkout.prepare(judged["judged_commit"], keep=kept_paths(record["config"]))
        with judging(repo.common_dir, repo.main_workdir, repo.parallel_dir, checkout, path, record["config"],
                     sandbox.siblings(record), log_dir=repo.parallel_dir / "logs" / record["run_id"],
                     log_prefix=f"verify-{track}-{commit[:12]}",
                     facts={**gate_facts(record, None, track, path, commit), "VERIFY": commit},
                     repository=repository_of(repo), judged=judged["judged_commit"]) as place:
            setup, results = judge_checkout(repo.pygit, record["config"], wanted, track, place,
                                            judged["judged_tree"])
    outcome.update({"passed": verdict_of(results) == "pass", "gates": results, "setup": setup})
    return outcome


def repository_of(repo: Repo) -> list[Path]:
    """The folders of the repository (its main worktree and common dir)."""
    return [Path(p) for p in (repo.main_workdir, repo.common_dir) if p]


def kept_paths(cfg: FrozenConfig) -> list[str]:
    """What the clean of a scratch checkout spares: what setup built."""
    setup = cfg.get("setup")
    return list(setup.get("keep") or []) if setup else []


def gate_facts(record: RunRecord, inst: InstanceRecord | None, track: str, path: Path, commit: str) -> dict[str, str]:
    facts = {"TASK": record["task"], "RUN_ID": record["run_id"], "BASE": record["base"]["commit"], "TRACK": track,
             "WORKTREE": str(path), "COMMIT": commit}
    if inst is not None:
        facts.update({"INSTANCE": inst["id"], "ATTEMPT": str(inst["attempt"])})
    return facts


def what_is_judged(repo: pygit2.Repository, record: RunRecord, commit: str, base: str) -> Judged:
    """What is judged for ``commit``: the protected patterns, the commit and
    tree checked out, and the protected paths the attempt changed."""
    cfg = record["config"]
    patterns = protected.protected_patterns(cfg, repo[base].peel(pygit2.Tree))
    judged, judged_tree, details = protected.judged_commit(repo, commit, base, patterns, cfg)
    return {"checkout": "clean", "protected": patterns, "protect_mode": cfg["protect_mode"],
            "protected_changes": [c["path"] for c in details], "protected_detail": details,
            "protected_blocking": [c["path"] for c in details if protected.blocks_pick(c)],
            "judged_commit": judged, "judged_tree": judged_tree}


def refused_protected(judged: Judged) -> Refusal:
    shown = ", ".join(judged["protected_changes"][:10])
    return {"code": E.PROTECTED_PATH_CHANGED,
            "message": f"the attempt changed protected path(s) {shown}, and protect_mode is refuse"}
