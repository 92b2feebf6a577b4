"""Distinguishing inputs: the behaviour of each passing attempt on inputs
made to tell them apart, for ``selection: differential``.

When two or more candidates of a track pass the gates, two commands of the
frozen configuration run (``distinguish.command`` and ``distinguish.run``),
both through the gate runner (``gates.judge_checkout``: the checkout's
``setup``, the fence, its own process group, ``distinguish.timeout``):

1. **The generator** (``command``) runs once, in a clean scratch checkout of
   the *base commit*, so neither it nor any script it names can come from an
   attempt.  It gets ``GIT_PARALLEL_DISTINGUISH_ATTEMPTS``, a folder of its
   checkout (``ATTEMPTS``, removed when it ends) with one folder per candidate (``<id>/instance``,
   ``<id>/commit``, ``<id>/diff``: the patch from the base made from git
   objects, and ``<id>/files/<path>``: every file the attempt added or
   changed, as its commit has it), and ``GIT_PARALLEL_DISTINGUISH_OUT``, an
   empty folder (``.git-parallel-distinguish`` in its checkout, the one
   place a fenced command may write) into which it writes inputs, test
   files, anything.  Besides, the gates' ``GIT_PARALLEL_TASK``, ``_RUN_ID``,
   ``_BASE``, ``_TRACK``, ``_WORKTREE`` and ``_COMMIT`` (the base).
2. What it wrote is kept under
   ``<common>/parallel/distinguish/<run_id>/<track>-<basis>/inputs/``
   (``<basis>``: the first 12 hex digits of the sha256 of the candidates
   decided from) with the sha256 of each file and of the whole.
3. **Each candidate** then runs ``run`` in a clean scratch checkout of its
   commit as a gate judges it: protected paths from the base, and so are
   the files ``distinguish.command`` and ``distinguish.run`` name, so an
   attempt that rewrites the generator or its runner changes nothing.  A
   fresh copy of the inputs is at ``.git-parallel-distinguish`` in that
   checkout (``GIT_PARALLEL_DISTINGUISH_INPUTS``).  Its behaviour is what a
   probe gate's is (``gates.probe_signature``): the exit code and the
   sha256 of its stdout with the checkout's path replaced by
   ``<worktree>``; stderr is logged apart and not compared.  Its stdout is
   kept in ``<common>/parallel/logs/<run_id>/distinguish-<track>.<id>.gate-run.log``.

The caller (``judge/selection``) groups the candidates by behaviour.  If
the generator fails (non-zero exit, cannot start, times out, setup fails)
the result says ``fallback`` with ``PARALLEL_DISTINGUISH_FAILED``; if it
writes nothing, ``PARALLEL_DISTINGUISH_EMPTY``; if ``run`` could not run for
any candidate, ``PARALLEL_DISTINGUISH_FAILED`` too.  A fallback never
refuses the pick: the caller ranks by the ``cluster`` rule and the pick
record says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import remove_tree, sha256_bytes
from gitflow_parallel.git import protected, scratch
from gitflow_parallel.judge import gates
from gitflow_parallel.judge import place as place_mod
from gitflow_parallel.model import RunRecord
from gitflow_parallel.proc import sandbox
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.state.project import Project
from gitflow_parallel.config_schema import FrozenConfig, GateConfig, GateMode
from gitflow_parallel.shapes.records import Candidate, Differential, Inputs, Output
from gitflow_parallel.shapes.pack import GateResult

# The folder, inside a scratch checkout, that the generator writes and each
# attempt reads (a fenced command may write nowhere else).
FOLDER = ".git-parallel-distinguish"
# The candidates laid out for the generator, in its scratch checkout too:
# the pool is hidden from every other fenced command, ``/tmp`` is not (a
# ``check`` running beside ``pick`` ran a sibling's code from there).
ATTEMPTS = ".git-parallel-distinguish-attempts"


def _gate(name: str, argv: list[str], timeout: float, mode: GateMode) -> GateConfig:
    """A distinguish command in the shape the gate runner takes."""
    return {"name": name, "run": list(argv), "mode": mode, "timeout": timeout, "env": {}, "setup": True,
            "requires": [], "outputs": [], "inputs": [], "hidden": None, "tracks": None}


def _write_attempts(repo: pygit2.Repository, base: str, candidates: list[Candidate], into: Path) -> None:
    """One folder per candidate: its id, commit, patch and changed files."""
    base_tree = repo[base].peel(pygit2.Tree)
    for c in candidates:
        folder = into / c["id"]
        (folder / "files").mkdir(parents=True)
        (folder / "instance").write_text(c["id"] + "\n", encoding="utf-8")
        (folder / "commit").write_text(c["commit"] + "\n", encoding="utf-8")
        tree = repo[c["commit"]].peel(pygit2.Tree)
        diff = repo.diff(base_tree, tree)  # type: ignore[call-overload]  # the stub leaves out trees; diff takes them
        (folder / "diff").write_bytes(b"".join(p.data for p in diff))
        for delta in diff.deltas:
            entry = delta.new_file
            if delta.status == pygit2.enums.DeltaStatus.DELETED or entry.mode not in (
                    pygit2.GIT_FILEMODE_BLOB, pygit2.GIT_FILEMODE_BLOB_EXECUTABLE):
                continue
            target = folder / "files" / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(repo.odb.read(entry.id)[1])


def _regular_files(root: Path) -> dict[str, str]:
    """{relative path: sha256} of the regular files under ``root`` (no
    symlink followed: a generator's link must not carry files from elsewhere)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
        for name in sorted(names):
            full = Path(folder) / name
            if stat.S_ISREG(os.lstat(full).st_mode):
                out[full.relative_to(root).as_posix()] = sha256_bytes(full.read_bytes())
    return dict(sorted(out.items()))


def _keep_inputs(source: Path, store: Path) -> Inputs:
    """Copy what the generator wrote into ``store``; its files and hashes."""
    remove_tree(store, ignore_errors=True)
    files = _regular_files(source)
    for rel in files:
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, store / rel)
    store.mkdir(parents=True, exist_ok=True)
    return {"path": str(store), "sha256": sha256_bytes(json.dumps(files, sort_keys=True).encode()), "files": files}


def _special(folder: str, names: list[str]) -> list[str]:
    """Entries that are neither files, folders nor links (an overlay's
    whiteouts, devices, FIFOs): never copied."""
    out = []
    for name in names:
        mode = os.lstat(os.path.join(folder, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            out.append(name)
    return out


def _fresh(folder: Path, inputs: Path | None = None) -> None:
    """``folder`` empty (or a copy of ``inputs``), whatever was there."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    remove_tree(folder, ignore_errors=True)
    if inputs is None:
        folder.mkdir()
    else:
        shutil.copytree(inputs, folder, symlinks=True)


def _patterns(cfg: FrozenConfig, base_tree: pygit2.Tree) -> list[str]:
    """The protected patterns of a run, plus the files its distinguish
    commands name (as if they were gate commands: taken from the base)."""
    d = cfg["distinguish"]
    named = {**cfg, "gates": [*cfg["gates"], _gate("generate", d["command"], 1, "observe"),
                              _gate("run", d["run"], 1, "probe")]}
    return protected.protected_patterns(named, base_tree)


def _run_one(repo: Repo, record: RunRecord, track: str, checkout: scratch.Checkout, commit: str, judged: str,
             judged_tree: str, gate: GateConfig, prefix: str, facts: dict[str, str],
             inputs: Path | None, attempts: list[Candidate] | None = None) -> tuple[GateResult, Path]:
    """Run one distinguish command in a clean checkout of ``judged`` (with
    ``attempts`` laid out in it for the generator); its gate result and the
    checkout's distinguish folder."""
    cfg = record["config"]
    path = checkout.prepare(judged, keep=gates.kept_paths(cfg))
    folder = path / FOLDER
    _fresh(folder, inputs)
    if attempts is not None:
        laid = path / ATTEMPTS
        _fresh(laid)
        try:
            _write_attempts(repo.pygit, record["base"]["commit"], attempts, laid)
            return _judged(repo, record, track, checkout, path, folder, commit, judged, judged_tree, gate, prefix,
                           {**facts, "DISTINGUISH_ATTEMPTS": str(laid)}, inputs)
        finally:
            remove_tree(laid, ignore_errors=True)
    return _judged(repo, record, track, checkout, path, folder, commit, judged, judged_tree, gate, prefix, facts,
                   inputs)


def _judged(repo: Repo, record: RunRecord, track: str, checkout: scratch.Checkout, path: Path, folder: Path,
            commit: str, judged: str, judged_tree: str, gate: GateConfig, prefix: str, facts: dict[str, str],
            inputs: Path | None) -> tuple[GateResult, Path]:
    cfg = record["config"]
    with place_mod.judging(repo.common_dir, repo.main_workdir, repo.parallel_dir, checkout, path, cfg,
                       sandbox.siblings(record), log_dir=repo.parallel_dir / "logs" / record["run_id"],
                       log_prefix=prefix, repository=gates.repository_of(repo), judged=judged,
                       facts={**gates.gate_facts(record, None, track, path, commit), **facts,
                              ("DISTINGUISH_INPUTS" if inputs else "DISTINGUISH_OUT"): str(folder)}) as place:
        try:
            _, results = gates.judge_checkout(repo.pygit, cfg, [gate], track, place, judged_tree)
        except ParallelError as exc:  # e.g. its Python would import the checkout's code from elsewhere
            return gates.gate_result(gate, error=f"{exc.code}: {exc.message}"), folder
        # Only the generator's is ever used: a candidate's is the attempt's
        # code's to fill (a tree deeper than copytree's recursion, gigabytes).
        written = place.spaces[-1].upper / FOLDER if place.spaces and inputs is None else None
        if written is not None and written.is_dir() and not written.is_symlink():
            # What it wrote is in its layer: the judge copies it out (links as links).
            _fresh(folder)
            remove_tree(folder)
            shutil.copytree(written, folder, symlinks=True, ignore=_special)
    return results[0], folder


def _fallback(out: Differential, code: str, error: str) -> Differential:
    return {**out, "status": "fallback", "fallback": {"rule": "cluster", "code": code, "error": error}}


def _failure(result: GateResult) -> str:
    if result.get("error"):
        return str(result["error"])
    return f"it exited {result.get('exit_code')}" + (f"; see {result['log']}" if result.get("log") else "")


def distinguish(project: Project, record: RunRecord, track: str,
                candidates: list[Candidate]) -> tuple[Differential, dict[str, dict[str, object]] | None]:
    """Run the generator and every candidate on its inputs.  Returns (what
    the pick record keeps under ``differential``, the behaviour of each
    candidate by id, or None when the caller must fall back)."""
    repo, d = project.repo, record["config"]["distinguish"]
    basis = json.dumps(sorted((c["id"], c["commit"]) for c in candidates)).encode()
    store = repo.parallel_dir / "distinguish" / record["run_id"] / f"{track}-{hashlib.sha256(basis).hexdigest()[:12]}"
    out: Differential = {"command": list(d["command"]), "run": list(d["run"]), "status": "ran", "fallback": None}
    with scratch.borrow(repo) as checkout:
        gen, folder = _generate(repo, record, track, checkout, candidates)
        out["generator"] = {k: gen.get(k) for k in ("exit_code", "error", "duration_s", "log", "log_sha256")}
        if not gen["passed"]:
            return _fallback(out, E.DISTINGUISH_FAILED, f"distinguish.command failed: {_failure(gen)}"), None
        inputs = out["inputs"] = _keep_inputs(folder, store / "inputs")
        if not inputs["files"]:
            return _fallback(out, E.DISTINGUISH_EMPTY, "distinguish.command exited 0 but wrote nothing into "
                             "GIT_PARALLEL_DISTINGUISH_OUT"), None
        outputs = out["outputs"] = _run_candidates(repo, record, track, checkout, candidates, store / "inputs")
    if all(o["sha256"] is None for o in outputs.values()):
        first = next(iter(outputs.values()))
        return _fallback(out, E.DISTINGUISH_FAILED, f"distinguish.run ran for no attempt: {first['error']}"), None
    return out, {i: {"exit_code": o["exit_code"], "sha256": o["sha256"], "error": o["error"]} for i, o in outputs.items()}


def _generate(repo: Repo, record: RunRecord, track: str, checkout: scratch.Checkout,
              candidates: list[Candidate]) -> tuple[GateResult, Path]:
    """Run the generator on the base, the attempts' files laid out for it in
    its checkout (``ATTEMPTS``), removed as soon as it ends: each
    candidate's code runs next (a wrong one ran a right sibling's
    ``impl.py`` from there, and behaved as it did), and no other fenced
    command sees the scratch pool."""
    d, base = record["config"]["distinguish"], record["base"]["commit"]
    return _run_one(repo, record, track, checkout, base, base, repo.tree_of(base),
                    _gate("generate", d["command"], d["timeout"], "observe"), f"distinguish-{track}", {}, None,
                    attempts=candidates)


def _run_candidates(repo: Repo, record: RunRecord, track: str, checkout: scratch.Checkout,
                    candidates: list[Candidate], inputs: Path) -> dict[str, Output]:
    """Each candidate's behaviour on the inputs, by id (in id order)."""
    cfg, base = record["config"], record["base"]["commit"]
    patterns = _patterns(cfg, repo.pygit[base].peel(pygit2.Tree))
    gate = _gate("run", cfg["distinguish"]["run"], cfg["distinguish"]["timeout"], "probe")
    outputs: dict[str, Output] = {}
    for c in candidates:
        judged, judged_tree, _ = protected.judged_commit(repo.pygit, c["commit"], base, patterns, cfg)
        result, _ = _run_one(repo, record, track, checkout, c["commit"], judged, judged_tree, gate,
                             f"distinguish-{track}.{c['id']}", {"INSTANCE": c["id"], "ATTEMPT": str(c["attempt"])},
                             inputs)
        sig = result.get("signature")
        code, sha, error = (sig["exit_code"], sig["sha256"], sig.get("error")) if sig else (None, None, _failure(result))
        outputs[c["id"]] = {"commit": c["commit"], "judged_commit": judged, "exit_code": code,
                            "sha256": sha, "error": error, "log": result.get("log"),
                            "log_sha256": result.get("log_sha256"), "stderr_log": result.get("stderr_log"),
                            "duration_s": result.get("duration_s")}
    return outputs
