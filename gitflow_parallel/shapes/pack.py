"""The evidence pack (``parallel/evidence/<run_id>/<id>.<attempt>.json``):
what ``check`` proved of one attempt, and the parts it is made of (each
gate's result, the judged checkout, its setup, the added tests), which
``merge``'s re-proof reuses.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from gitflow_parallel.shapes.records import Oid, Refusal, Verdict, Version


class ProbeSignature(TypedDict):
    """A probe's behaviour: its exit code and the sha256 of what it wrote
    (``over``: its stdout or the files its ``outputs`` match)."""
    exit_code: int | None
    over: str
    sha256: str | None
    error: NotRequired[str]
    files: NotRequired[dict[str, str]]
    cut: NotRequired[int]


class HiddenCounts(TypedDict):
    """What a gate with hidden tests keeps of them: how many files, its runner's count line."""
    files: int
    summary: str | None


class StreamedCounts(TypedDict):
    """What a gate's test process streamed as each test ended (``judge/stream``)."""
    sessions: int
    passed: int
    failed: int
    skipped: int
    failed_tests: list[str]  # the first of them (none for hidden tests)


class Judged(TypedDict):
    """What is judged of an attempt: its protected paths, the commit and tree
    checked out, and the protected changes it made (``judge/gates``)."""
    checkout: str
    protected: list[str]
    protect_mode: str
    protected_changes: list[str]
    protected_detail: list[dict[str, Any]]
    protected_blocking: list[str]
    judged_commit: str
    judged_tree: str


class ReachFinding(TypedDict):
    """A line the attempt added to its product code that reaches the test
    harness (``reach.scan``): where, the rule it matched, its text (cut)."""
    path: str
    line: int
    rule: str
    text: str


class SetupEntry(TypedDict):
    """How the judged checkout's environment was built (a pack's ``setup``):
    the command, its cache key, whether a kept one was reused, how it ended."""
    argv: list[str]
    key: str
    keep: list[str]
    path: list[str]
    cached: bool
    exit_code: int | None
    duration_s: float | None
    log: str | None
    passed: bool
    code: str | None
    error: str | None
    built_from: NotRequired[str]  # base or attempt: the tree a layered one was built from
    stores: NotRequired[list[str]]  # the package stores it (and the gates) read


class AddedOnBase(TypedDict):
    """The added tests run on the base (``judge/proof``): the commit of the
    base's tree with them laid in, the gates, the failing tests they named."""
    commit: Oid
    tree: Oid
    setup: SetupEntry | None
    gates: list[GateResult]
    passed: bool
    failing: list[str]


class AddedTests(TypedDict):
    """The tests an attempt added under protected paths (new files, and
    tests appended to a file), run as a second stage; and whether they
    prove its fix (fail on the base, pass on the attempt)."""
    mode: str
    paths: list[str]
    gates: list[GateResult]
    passed: bool
    tests: NotRequired[list[str]]  # path::name of each appended test, a new file's path
    on_base: NotRequired[AddedOnBase | None]
    proved: NotRequired[bool]
    proof: NotRequired[str]


class ListOutcome(TypedDict):
    """How many ids a list of ``expect`` names, and those that did not pass (with what became of each)."""
    expected: int
    not_passed: dict[str, str]


class ExpectResult(TypedDict):
    """What a gate's JUnit report said of its ``expect`` (``expect.judge``)."""
    passed: bool
    tests: int | None
    failed: int | None
    error: str | None
    fail_to_pass: NotRequired[ListOutcome]
    pass_to_pass: NotRequired[ListOutcome]


class Verification(Judged):
    """A tree's enforced gates run once more (``gates.verify_tree``, for merge)."""
    commit: str
    tree: str
    refused: Refusal | None
    passed: bool
    gates: list[GateResult]
    setup: NotRequired[SetupEntry | None]


class GateResult(TypedDict):
    """One gate as a pack records it (docs/formats.md says what each key means)."""
    name: str
    mode: str
    passed: bool
    exit_code: int | None
    error: str | None
    argv: NotRequired[list[str]]
    duration_s: NotRequired[float | None]
    skipped: NotRequired[bool]
    code: NotRequired[str | None]
    log: NotRequired[str | None]
    log_sha256: NotRequired[str | None]
    signature: NotRequired[ProbeSignature]  # a probe's
    stderr_log: NotRequired[str | None]
    hidden: NotRequired[HiddenCounts]
    expect: NotRequired[ExpectResult]
    streamed: NotRequired[StreamedCounts]
    cut: NotRequired[int]


class EngineEvidence(TypedDict):
    """What the attempt's events log held, counted by event name."""
    status: Literal["observed", "unavailable"]
    counts: dict[str, int] | None
    lines: NotRequired[int]
    malformed: NotRequired[int]
    path: NotRequired[str]
    sha256: NotRequired[str]
    cut: NotRequired[int]
    forged: NotRequired[int]  # engine_* lines of the agent's file that the runner's copy lacks
    erased: NotRequired[int]  # lines of the runner's copy missing from the agent's file


class EvidencePack(TypedDict):
    """What ``check`` proved of one attempt, bound to one commit and tree."""
    schema_version: Version
    origin: str
    run_id: str
    task: str
    instance: str
    track: str
    attempt: int
    instance_revision: int
    commit: Oid
    tree: Oid
    base_commit: Oid
    config_sha256: str
    gates: list[GateResult]
    verdict: Verdict
    complete: bool
    proof_issued_at: str
    score: int | None
    score_source: dict[str, Any] | None
    score_error: str | None
    refused: Refusal | None
    input_fingerprints: dict[str, str]
    output_fingerprints: dict[str, dict[str, Any]]
    setup: SetupEntry | None
    added_tests: AddedTests | None
    engine_evidence: NotRequired[EngineEvidence]
    checkout: NotRequired[str]
    fence: NotRequired[str]
    layers: NotRequired[list[str]]  # the sandbox layers its gates ran in (``GatePlan.held``)
    judged_commit: NotRequired[Oid]
    judged_tree: NotRequired[Oid]
    protect_mode: NotRequired[str]
    protected: NotRequired[list[str]]
    protected_changes: NotRequired[list[str]]
    protected_detail: NotRequired[list[dict[str, Any]]]
    protected_blocking: NotRequired[list[str]]
    reaches_harness: NotRequired[list[ReachFinding]]  # lines of its product code that reach the harness
