"""Whether the tests an attempt added prove its fix: they pass on the
attempt (the added-tests stage, ``judge/check``) and fail on the base.

A test that passes with and without the fix proves nothing, so once the
added tests passed on the attempt they run once more, in a clean checkout
of the base commit with the attempt's test files laid in (new ones, and
those it only added tests to: ``appended``), through the same enforced
gates.  They prove the fix when a gate fails there and the runner names an
added test among its failures (or names none at all: a runner whose output
``failures`` cannot read).  A base whose own tests fail would make every
added test look like proof, which the names rule out.  What ran, and the
verdict in words, go in the pack's ``added_tests``; ``judge/selection``
ranks a passing attempt whose tests prove its fix above one without.
See docs/judging.md and docs/selection.md.
"""

from __future__ import annotations

import contextlib
import os
import posixpath

import pygit2

from gitflow_parallel import failures
from gitflow_parallel.config_schema import FrozenConfig, GateConfig
from gitflow_parallel.git import protected, scratch
from gitflow_parallel.judge import pace
from gitflow_parallel.judge.gates import gate_facts, judge_checkout, kept_paths, repository_of
from gitflow_parallel.judge.place import judging
from gitflow_parallel.proc import sandbox
from gitflow_parallel.shapes.pack import AddedOnBase, AddedTests, GateResult
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord
from gitflow_parallel.state.project import Project

# How progress names a gate run on the base with the added tests.
BASE_STAGE = "on the base with the added tests"
# How much of a failed gate's log is read for the names of failing tests.
LOG_TAIL = 4 << 20


def on_base(project: Project, record: RunRecord, inst: InstanceRecord, commit: str, again: list[GateConfig],
            stage: AddedTests, tests: list[str], reads: sandbox.Reads, lane: pace.Lane) -> AddedTests:
    """``stage`` (the added tests' run on the attempt) with what they did on
    the base and whether that proves the fix (``proved``, ``proof``)."""
    out: AddedTests = {**stage, "tests": tests, "on_base": None, "proved": False}
    if not stage["passed"]:
        return {**out, "proof": "they fail on the attempt"}
    repo = pygit2.Repository(str(project.repo.common_dir))
    try:
        judged, tree = protected.base_with_tests(repo, commit, record["base"]["commit"], stage["paths"])
    except (KeyError, pygit2.GitError) as exc:
        return {**out, "proof": f"not run on the base: its tree cannot hold them ({exc})"}
    ran = _run(project, record, inst, repo, judged, tree, again, reads, lane)
    out["on_base"] = ran
    proved, proof = verdict(ran, tests)
    return {**out, "proved": proved, "proof": proof}


def _run(project: Project, record: RunRecord, inst: InstanceRecord, repo: pygit2.Repository, judged: str,
         tree: str, again: list[GateConfig], reads: sandbox.Reads, lane: pace.Lane) -> AddedOnBase:
    """The enforced gates in a clean checkout of the base with the added tests."""
    cfg: FrozenConfig = record["config"]
    repo_ = project.repo
    with scratch.borrow(repo_) as checkout, contextlib.ExitStack() as stack:
        path = checkout.prepare(judged, keep=kept_paths(cfg))
        place = stack.enter_context(judging(
            repo_.common_dir, repo_.main_workdir, repo_.parallel_dir, checkout, path, cfg, reads,
            log_dir=repo_.parallel_dir / "logs" / record["run_id"], log_prefix=f"{inst['id']}.{inst['attempt']}.base",
            facts=gate_facts(record, inst, inst["track"], path, judged), repository=repository_of(repo_),
            judged=judged, lane=lane.of_stage(BASE_STAGE)))
        setup, results = judge_checkout(repo, cfg, again, inst["track"], place, tree)
    return {"commit": judged, "tree": tree, "setup": setup, "gates": results,
            "passed": all(g["passed"] for g in results), "failing": _failing(results)}


def _failing(results: list[GateResult]) -> list[str]:
    """The failing tests the failed gates' logs name."""
    names: list[str] = []
    for g in results:
        log = g.get("log")
        if g["passed"] or not log:
            continue
        try:
            with open(log, "rb") as handle:  # the runner's summary is at its end
                handle.seek(max(0, os.fstat(handle.fileno()).st_size - LOG_TAIL))
                text = handle.read(LOG_TAIL).decode("utf-8", "replace")
        except OSError:
            continue
        names += [n for n in failures.failing_tests(text) if n not in names]
    return names[:failures.MAX_NAMES]


def verdict(ran: AddedOnBase, tests: list[str]) -> tuple[bool, str]:
    """(proved, in words) from the run on the base."""
    if ran["passed"]:
        return False, "they pass on the base too: they prove nothing"
    if not any(not g["passed"] and g["exit_code"] is not None and not g.get("skipped") for g in ran["gates"]):
        return False, "the gates did not run on the base (" + "; ".join(
            str(g["error"]) for g in ran["gates"] if g["error"])[:300] + ")"
    if ran["failing"] and not any(names_added(n, tests) for n in ran["failing"]):
        return False, "the base fails, but not in the added tests: " + ", ".join(ran["failing"][:5])
    return True, "they fail on the base and pass on the attempt"


def _same_file(a: str, b: str) -> bool:
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def names_added(name: str, tests: list[str]) -> bool:
    """Does a runner's failing ``name`` (``tests/test_a.py::T::test_b[1]``,
    or the file alone for a collection error) name one of ``tests``
    (``path::name``, or a new file's path)?"""
    file, *rest = name.split("::")
    if rest:
        rest[-1] = rest[-1].split("[", 1)[0]
    for test in tests:
        path, *parts = test.split("::")
        if not parts:  # a new file: any of its tests
            if _same_file(file, path) or posixpath.basename(path) in name:
                return True
        elif _same_file(file, path) and (not rest or rest == parts):
            return True
    return False
