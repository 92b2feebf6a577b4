"""What the verbs print with ``--json`` (besides ``ok``, which the CLI
adds), for the results several modules build or render: ``spawn``,
``check``, ``pick``, ``status``, ``retry``, ``publish``, ``abort``,
``comment``.  A verb's own result is declared beside it (``merge``,
``recover``, ``validate``, …: docs/formats.md lists each).
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from gitflow_parallel.shapes.pack import AddedTests, GateResult, ReachFinding
from gitflow_parallel.shapes.records import (Comment, EvidenceBinding, InstanceRecord, Oid, PickRecord, Refusal, RunRecord,
                                             RunStatus, Verdict)


class SpawnResult(RunRecord):
    """``spawn``: the new run's record (``published``: where ``spawn --remote`` published it)."""
    warnings: NotRequired[list[str]]
    published: NotRequired[PublishResult]


class CheckedInstance(TypedDict):
    id: str
    track: str
    attempt: int
    commit: Oid
    tree: Oid
    verdict: Verdict
    complete: bool
    score: int | None
    score_error: str | None
    gates: list[GateResult]
    evidence: EvidenceBinding
    proof_issued_at: str
    protected_changes: list[str]
    protected_detail: list[dict[str, Any]]
    reaches_harness: list[ReachFinding]
    refused: Refusal | None
    added_tests: NotRequired[AddedTests | None]


class SkippedInstance(TypedDict):
    """An instance ``check`` left alone: its evidence is fresh and complete."""
    id: str
    track: str
    attempt: int
    commit: str
    verdict: str
    score: int | None
    evidence: EvidenceBinding
    refused: Refusal | None
    failing: list[str]
    hidden: NotRequired[dict[str, str]]  # a failing hidden-tests gate's counts, by gate name


class InstanceError(TypedDict):
    id: str
    code: str
    message: str
    hint: str | None


class CheckResult(TypedDict):
    """``check``: each instance judged (or its error), and those skipped as fresh."""
    task: str
    run_id: str
    jobs: int
    notes_error: str | None
    instances: list[CheckedInstance]
    errors: list[InstanceError]
    notify_warnings: NotRequired[list[str]]
    skipped: NotRequired[list[SkippedInstance]]
    warnings: NotRequired[list[str]]


class PickResult(TypedDict):
    """``pick``: the picks written now, and those that were already there."""
    run_id: str
    task: str
    notes_error: str | None
    picks: list[PickRecord]
    existing: list[PickRecord]
    status: RunStatus


class Held(TypedDict):
    """The sandbox layers an attempt's agent and its gates ran in, as the
    runner's dispatch event and the evidence pack recorded them (None: not
    run, or not judged, here): ``evidence.layers_held``."""
    agent: list[str] | None
    gates: list[str] | None


class LiveView(TypedDict):
    """How ``status`` sees an instance's branch now."""
    evidence: str
    flags: list[str]
    tip: str | None
    sandbox: NotRequired[Held]


class StatusInstance(InstanceRecord):
    live: NotRequired[LiveView]


class StatusRun(RunRecord):
    instances: list[StatusInstance]  # type: ignore[misc]  # each with its live view


class StatusResult(TypedDict):
    """``status TASK``: the record, each instance with its live view."""
    run: StatusRun
    base_tip: str | None


class StatusRow(InstanceRecord):
    """An instance as ``status TASK`` finds it: the record, its branch's tip
    now, its evidence judged against that tip, and what looks wrong."""
    tip: str | None
    evidence_state: str
    evidence_reason: str
    flags: list[str]
    sandbox: Held


class StatusDetail(TypedDict):
    """What the ``status TASK`` verb returns, which the CLI renders (``--json``
    folds the rows into the record: :class:`StatusResult`); ``shared``: the
    run ref it was read from, for a run only fetched."""
    run: RunRecord
    rows: list[StatusRow]
    base_tip: str | None
    shared: NotRequired[str]


class RunSummary(TypedDict):
    task: str
    run_id: str
    status: RunStatus
    base: str
    instances: int
    updated_at: str
    fetched: bool


class Problem(TypedDict):
    code: str
    message: str


class StatusListResult(TypedDict):
    """``status``: every run, and the records that did not load."""
    runs: list[RunSummary]
    problems: list[Problem]


# -- the other verbs' results (``--json``) ----------------------------------------------------
class RetryResult(RunRecord):
    """``retry``: the run's record, and why its notes were not written (if so)."""
    notes_error: NotRequired[str]


class PublishResult(TypedDict):
    """``publish``: the manifest pushed, the branches with it, and those the remote's workers hold."""
    task: str
    run_id: str
    remote: str
    manifest: str
    ref: str
    agent: list[str] | None
    timeout: float | None
    branches: list[str]
    kept_remote: list[str]
    instances: list[str]


class AbortResult(TypedDict):
    """``abort``: the run, the instances stopped now, and (a whole run) what was removed."""
    run: RunRecord
    stopped: list[str]
    removed: list[dict[str, Any]]
    remote_warning: NotRequired[str | None]


class CommentResult(TypedDict):
    """``comment``: the comment kept, the commit it is noted on, how many the attempt has."""
    task: str
    run_id: str
    instance: str
    comment: Comment
    commit: str | None
    comments: int
    warning: NotRequired[str]
