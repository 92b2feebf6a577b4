"""The records git-parallel keeps: run, instance, pick and merge records,
what selection ranks, and the field types the loaders check (``Oid``,
``RunId``, ``Revision``, …).  What ``Required`` and ``NotRequired`` mean
here: the package's docstring.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, TypedDict, get_args

from gitflow_parallel.schema import Check, Outline

if TYPE_CHECKING:
    from gitflow_parallel.config_schema import FrozenConfig as Frozen
else:
    # At run time a record's config is checked by its outline only (below),
    # so reading records (``status``) need not load the config's declaration.
    Frozen = dict

SCHEMA_VERSION = 1

RunStatus = Literal["pending", "running", "completed", "picked", "merged", "failed", "aborted"]
InstanceStatus = Literal["pending", "running", "succeeded", "failed", "aborted"]
Outcome = Literal["no_change"]
Verdict = Literal["pass", "fail"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
INSTANCE_STATUSES: tuple[str, ...] = get_args(InstanceStatus)

_OID = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


def _valid_task(value: str) -> bool:
    from gitflow_parallel.errors import ParallelError
    from gitflow_parallel.names import check_name

    try:
        check_name(value)
    except ParallelError:
        return False
    return True


# Field types with the constraints the loaders check.
Version = Annotated[int, Check(lambda v: v == SCHEMA_VERSION, str(SCHEMA_VERSION))]
Oid = Annotated[str, Check(lambda v: bool(_OID.fullmatch(v)), "a commit oid (40 or 64 hex digits)")]
RunId = Annotated[str, Check(lambda v: bool(re.fullmatch(r"PR-[0-9a-f-]{36}", v)), "PR-<uuid>")]
TaskName = Annotated[str, Check(_valid_task, "a valid task name")]
Revision = Annotated[int, Check(lambda v: v >= 1, "an integer >= 1")]
Count = Annotated[int, Check(lambda v: v >= 0, "an integer >= 0")]
Pid = Annotated[int | None, Check(lambda v: v is None or 0 < v < 1 << 31, "a process id or null")]


class Refusal(TypedDict):
    """Why something was refused: its reason code and the message."""
    code: str
    message: str


# -- the run record ------------------------------------------------------------------
class EvidenceBinding(TypedDict):
    """The evidence pack an instance's verdict comes from."""
    path: str
    sha256: str
    instance_revision: NotRequired[int]


# Where an attempt started from (``from``: how; a keyword, hence the call form).
StartPoint = TypedDict("StartPoint", {"commit": str, "from": str}, total=False)


class ClaimHolder(TypedDict):
    """Who holds an instance's claim, in a worker's own record."""
    worker: str
    host: str
    pid: int
    generation: int
    since: str


class Comment(TypedDict):
    """A person's review comment on one attempt."""
    attempt: int
    text: str
    file: str | None
    line: int | None
    by: str
    at: str


class HistoryEntry(TypedDict, total=False):
    """One earlier attempt of an instance, as ``retry`` keeps it."""
    attempt: int
    status: str
    head: str | None
    verdict: str | None
    score: int | None
    evidence: EvidenceBinding | None
    error: str | None
    exit_code: int | None
    log: str | None
    events: str | None
    archive_ref: str | None
    kept: list[str]
    finished_at: str | None
    start: StartPoint | None
    origin: str | None
    feedback: Any
    agent: str | None
    outcome: Outcome


class InstanceRecord(TypedDict):
    id: str
    track: str
    branch: str
    worktree: str
    attempt: Count
    instance_revision: Revision
    status: InstanceStatus
    head: Oid | None
    verdict: Verdict | None
    score: int | None
    evidence: EvidenceBinding | None
    error: str | None
    history: list[HistoryEntry]
    pid: NotRequired[Pid]
    runner_pid: NotRequired[int | None]
    started_at: NotRequired[str | None]
    finished_at: NotRequired[str | None]
    exit_code: NotRequired[int | None]
    log: NotRequired[str | None]
    events: NotRequired[str | None]
    removed: NotRequired[bool]
    origin: NotRequired[str | None]
    start: NotRequired[StartPoint | None]
    feedback: NotRequired[Any]
    worker: NotRequired[Any]  # the worker that ran it (``collect``)
    protected_changes: NotRequired[list[dict[str, Any]]]
    claim: NotRequired[ClaimHolder | None]
    tampered: NotRequired[list[str] | None]  # what the attempt changed that no attempt may (restored)
    outcome: NotRequired[Outcome]  # how a succeeded attempt came out (``model.NO_CHANGE``); absent: it changed something
    agent: NotRequired[str | None]
    agent_command: NotRequired[list[str] | None]
    comments: NotRequired[list[Comment]]


class PickBinding(TypedDict):
    """A written pick file, as the run record names it."""
    path: str
    sha256: str
    winner: str
    commit: NotRequired[str]


class PushedInfo(TypedDict):
    """What ``merge --push`` put on the remote (``merge["pushed"]``)."""
    remote: str
    landed: str
    pushed_at: str
    attempts: int


class RelandedEntry(TypedDict):
    """An earlier landing that ``merge --push`` replaced."""
    landed: str
    onto: str
    remote_tip: str
    at: str


class LandingStep(TypedDict, total=False):
    """How one track's winner landed (``merge["steps"]``); ``commit``,
    ``resolved_files`` and ``winner_lines_dropped`` for a step that wrote one."""
    track: str
    winner: str
    method: str  # fast-forward, merge, squash, already-contained
    commit: str
    resolved_files: list[str]
    winner_lines_dropped: int


class Retried(TypedDict):
    """A landing computed again because the base moved under it (``merge``)."""
    attempt: int
    base_was: str
    computed: str


class ReprovedGate(TypedDict, total=False):
    """A gate of a re-proof, as the merge record keeps it."""
    name: str
    mode: str
    passed: bool
    exit_code: int | None
    duration_s: float | None
    log: str | None
    error: str | None


class Reproof(TypedDict):
    """One track's enforced gates run again on the landing tree (``judge/reprove``)."""
    track: str
    passed: bool
    commit: str
    tree: str
    judged_commit: str
    protected_changes: list[str]
    refused: Refusal | None
    checkout: str
    gates: list[ReprovedGate]
    why: NotRequired[str]  # why its evidence was not rested on (``merge.verify: auto``)


class RestsOn(TypedDict):
    """The evidence a track's landing rests on, not re-proved (``merge.verify: auto``)."""
    track: str
    instance: str
    attempt: int
    pack_sha256: str | None
    pack: str | None
    commit: str
    tree: str
    proof_issued_at: str | None
    fence: str | None
    reproved: bool
    judged_tree: NotRequired[str]  # what its gates judged, when protected paths were restored (as a re-proof would)


class MergeRecord(TypedDict):
    landed: str
    previous: str | None
    base_ref: str
    steps: list[LandingStep]
    method: str
    resolved_files: list[Any]
    policy: str
    merged_at: str
    attempts: NotRequired[int | None]
    onto: NotRequired[str]
    retried: NotRequired[Annotated[list[Retried], Outline(list[dict[str, Any]])]]
    verify: NotRequired[Any]
    # Read back as mappings, as they always were.
    verified: NotRequired[Annotated[list[Reproof], Outline(list[dict[str, Any]])]]
    rests_on: NotRequired[Annotated[list[RestsOn], Outline(list[dict[str, Any]])]]  # not re-proved (verify: auto)
    worktree: NotRequired[str | None]
    worktree_error: NotRequired[str | None]
    recovered: NotRequired[dict[str, Any]]
    outside: NotRequired[bool]
    relanded: NotRequired[list[RelandedEntry]]
    pushed: NotRequired[PushedInfo]


class RemoteInfo(TypedDict):
    """Where ``publish`` pushed the run (``record["remote"]``)."""
    name: str
    agent: list[str] | None
    timeout: float | None
    published_at: str


class Proposal(TypedDict):
    """One pull (merge) request ``merge --pr`` asked for, or the command that would."""
    track: str
    winner: str
    branch: str
    commit: str
    body_file: str
    command: str
    tool: str
    ran: bool
    url: str | None
    error: str | None
    output: NotRequired[str]


class PrInfo(TypedDict):
    """The pull requests ``merge --pr`` asked for (``record["pr"]``)."""
    remote: str
    base: str
    requested_at: str
    proposals: Annotated[list[Proposal], Outline(list[dict[str, Any]])]  # read back as it always was


class Base(TypedDict):
    """The base branch a run started from: its ref name and the commit it had."""
    ref: str
    commit: Oid


class RunRecord(TypedDict):
    schema_version: Version
    run_id: RunId
    task: TaskName
    base: Base
    run_revision: Revision
    status: RunStatus
    created_at: str
    updated_at: str
    tracks: list[str]
    # The frozen config, bound by config_sha256: checked in full where it is
    # made (``config.validate`` at spawn), as a mapping where it is read back.
    config: Annotated[Frozen, Outline(dict[str, Any])]
    config_sha256: str
    instances: list[InstanceRecord]
    config_source: NotRequired[Any]
    worktree_root: NotRequired[str]
    picks: NotRequired[dict[str, PickBinding] | None]
    retired_picks: NotRequired[list[dict[str, Any]]]
    merge: NotRequired[MergeRecord | None]
    worker: NotRequired[dict[str, Any]]  # a worker's own record: {"remote": the remote it serves}
    remote: NotRequired[RemoteInfo]
    pr: NotRequired[PrInfo]


# -- differential picks (``judge/differential``) ---------------------------------------------------
class Inputs(TypedDict):
    """The distinguishing inputs the generator wrote, as stored: folder, sha256 of the listing, files."""
    path: str
    sha256: str
    files: dict[str, str]  # path: sha256


class Output(TypedDict):
    """One candidate's behaviour on the inputs (its probe's signature and where its log is)."""
    commit: str
    judged_commit: str
    exit_code: int | None
    sha256: str | None
    error: str | None
    log: str | None
    log_sha256: str | None
    stderr_log: str | None
    duration_s: float | None


class Differential(TypedDict):
    """What a differential pick ran (``pick["differential"]``); ``fallback``:
    why it fell back to the cluster rule, if it did."""
    status: str
    fallback: dict[str, str] | None
    command: NotRequired[list[str]]
    run: NotRequired[list[str]]
    reason: NotRequired[str]
    generator: NotRequired[dict[str, object]]
    inputs: NotRequired[Inputs]
    outputs: NotRequired[dict[str, Output]]


# -- the pick record ---------------------------------------------------------------------
class PickWinner(TypedDict):
    id: str
    attempt: int
    commit: str
    tree: str
    evidence_sha256: str | None  # None only in a person's forced pick
    agent: NotRequired[str]


class PickRecord(TypedDict):
    schema_version: Version
    run_id: str
    task: str
    track: str
    winner: PickWinner
    verdict: str | None  # "pass", but for a person's forced pick
    score: int | None
    proof_issued_at: str | None
    selection_method: str
    arbiter: str
    merge_policy: str
    losers: list[dict[str, Any]]
    created_at: str
    decision: NotRequired[dict[str, Any] | None]  # picks written before it was recorded have none
    picked_by: NotRequired[str]  # a person's pick (``selection_method``: human)
    reason: NotRequired[str | None]
    forced: NotRequired[bool]
    waived: NotRequired[list[str]]
    protected_changes: NotRequired[list[dict[str, Any]]]
    ranking: NotRequired[list[dict[str, Any]]]  # how the rule saw the candidates (``judge/selection``)
    tree_groups: NotRequired[list[dict[str, Any]]]
    clusters: NotRequired[list[dict[str, Any]]]
    tournament: NotRequired[dict[str, Any]]
    # The distinguishing inputs and each candidate's behaviour on them; read back as a mapping.
    differential: NotRequired[Annotated[Differential, Outline(dict[str, Any])]]


# -- selection --------------------------------------------------------------------------------
class JudgeRun(TypedDict):
    """What a tournament's judge did in one match: its answer (A, B or None) and how it ended."""
    answer: str | None
    exit_code: int | None
    error: str | None
    duration_s: float
    log: str
    log_sha256: str | None
    stderr_log: str
    output: str


class Candidate(TypedDict):
    """An instance with complete, fresh, passing evidence, as the rules see it."""
    id: str
    attempt: int
    commit: str
    tree: str
    evidence_sha256: str
    evidence_path: str
    score: int | None
    score_source: dict[str, Any] | None
    score_error: str | None
    proof_issued_at: str
    changed_lines: int
    proved: bool  # its added tests fail on the base and pass on it (``judge/proof``)
    added_failed: NotRequired[bool]  # its own added tests fail on it (``added_tests: observe``)
    probes: list[dict[str, object]]
    worktree: str
    agent: str | None
