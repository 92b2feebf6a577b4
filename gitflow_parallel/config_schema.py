"""The shape of ``.gitparallel.yaml`` and of the config frozen from it.

One declaration per section: its keys, their types, ranges and choices, the
default a missing key takes (``Default``) and how a value read by YAML is
turned into its frozen form (``Convert``: a command string split into its
argv, a bare ``on``/``off`` read as a boolean turned back into its word).
``config.validate`` checks a file against :class:`FrozenConfig` with
``schema.check`` (closed: an unknown key is a typo) and then applies the
rules that tie keys together; :data:`DEFAULTS` is what an empty file gives.

Keys declared ``NotRequired`` without a default (``agents``, ``notify``,
``sandbox_write``, ``distinguish``, ``gate_network``, ``score.findings_from``; a gate's ``threads``,
``expect`` and ``require_count``) are left out of the frozen config when
absent, so a run spawned before they existed still matches its base commit.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, NotRequired, TypedDict, get_args

from gitflow_parallel.errors import ParallelError
from gitflow_parallel.argv import to_argv as to_argv  # the commands' converter; config imports it here
from gitflow_parallel.schema import Check, Convert, Default, Expect, Invalid, Range, ShapeError, fields

MAX_SECONDS = 7 * 24 * 3600  # a week: a longer timeout is a typo

MergePolicy = Literal["refuse", "first_pass_wins", "last_pass_wins", "winner_takes_all", "manual"]
SelectionMethod = Literal["critic_first_pass", "majority_vote", "cluster", "tournament", "differential"]
GateMode = Literal["enforced", "observe", "probe"]
VerifyMode = Literal["auto", "always", "changed", "never"]
ProtectMode = Literal["restore", "refuse"]
AddedTestsMode = Literal["observe", "enforced", "off"]
SandboxMode = Literal["auto", "required", "off"]
OnOff = Literal["on", "off"]

# Untracked files coding agents leave in their worktree for themselves
# (.gitignore lines): never part of an attempt's leftovers commit.
# aider's files all start with .aider (the line it adds to .gitignore);
# a .gitignore whose only change is such lines stays out too (git/repo).
AGENT_SCRATCH = [".aider*", ".claude/", ".codex/", ".gemini/", "__pycache__/", "*.pyc", ".pytest_cache/"]


# -- converters: what YAML read, turned into the frozen form --------------------------------
def _on_off(value: object) -> object:
    """YAML 1.1 reads a bare on/off as a boolean."""
    return {True: "on", False: "off"}[value] if isinstance(value, bool) else value


def _verify(value: object) -> object:
    """true/false from before the modes: true asked for proof."""
    return {True: "always", False: "never"}[value] if isinstance(value, bool) else value


def _empty(fill: Callable[[], object]) -> Callable[[object], object]:
    """``null`` for a section or list means its empty form."""
    return lambda value: fill() if value is None else value


def protect_glob(pattern: str) -> str:
    """A ``protect`` glob as the matcher reads it: ``./`` and empty or ``.``
    components dropped, no trailing ``/`` (a folder protects what is under
    it), so ``./tests/**``, ``tests//**`` and ``./tests`` protect what
    ``tests/**`` and ``tests`` do.  Raises ``Invalid`` with the reason
    where no reading is sound."""
    if pattern.startswith("/"):
        raise Invalid(f"{pattern!r}: globs are relative to the top of the repository; drop the leading /")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Invalid(f"{pattern!r}: '..' would name a path outside the folder it follows (or the repository); "
                      "write the path from the top of the repository")
    if not parts:
        raise Invalid(f"{pattern!r} names the whole repository; write ** to protect every path")
    return "/".join(parts)


def _protect(value: object) -> object:
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise Invalid("must be a list of path globs")
    return list(dict.fromkeys(protect_glob(p) for p in value))


def _relative_paths(value: object) -> object:
    """A list of paths (or globs) relative to the top of the checkout, inside it."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip("/") for p in value):
        raise Invalid("must be a list of relative paths")
    for p in value:
        parts = p.split("/")
        if p.startswith("/") or ".." in parts or parts[0] == ".git":
            raise Invalid(f"{p!r} must be relative to the top of the checkout, inside it and not in .git")
    return [p.strip("/") for p in value]


def _env(value: object) -> object:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
            for k, v in value.items()):
        raise Invalid("must be a mapping of names to strings")
    bad = [k for k in value if not k or "=" in k]
    if bad:
        raise Invalid(f"{bad[0]!r} is not a valid variable name")
    return {k: str(v) for k, v in value.items()}


def _gate_name(value: object) -> object:
    from gitflow_parallel.names import check_name

    if not isinstance(value, str):
        raise Invalid("every gate needs a name")
    try:
        check_name(value, "gate")
    except ParallelError as exc:
        raise Invalid(exc.message) from None
    return value


def _setup_form(value: object) -> object:
    """``setup`` may be its command alone."""
    return {"run": value} if isinstance(value, (str, list)) else value


def _delegate(key: str, validate: Callable[[object, Callable[[str, str], ParallelError]], object]) -> Convert:
    """A key another module validates (``mix``, ``notify``) with its own ``fail(path, problem)``."""
    def fail(path: str, problem: str) -> ParallelError:
        raise ShapeError(path.removeprefix(key).lstrip("."), problem)

    return Convert(lambda value: validate(value, fail))


def _agents(value: object, fail: Callable[[str, str], ParallelError]) -> object:
    from gitflow_parallel import mix

    return mix.validate_config(value, fail)


def _notify(value: object, fail: Callable[[str, str], ParallelError]) -> object:
    from gitflow_parallel import notify

    return notify.validate_config(value, fail)


def _valid_ref(name: str) -> bool:
    import pygit2

    return bool(pygit2.reference_is_valid_name(name)) and not name.endswith("/")


def _gitignore_lines(value: list[str]) -> bool:
    return all(p.strip() and not p.startswith("#") and "\n" not in p for p in value)


def _inside(value: str | None) -> bool:
    return value is None or bool(value) and not value.startswith("/") and ".." not in value.split("/")


# -- field types --------------------------------------------------------------------------
Seconds = Annotated[float, Check(lambda v: 0 < v <= MAX_SECONDS,
                                 f"a number of seconds above 0 and at most {MAX_SECONDS}")]
Command = Annotated[list[str], Convert(to_argv), Expect("a command: a list of strings or one string")]
OptionalCommand = Annotated[list[str] | None, Convert(to_argv), Expect("a command (list of strings or one string)")]
Names = Annotated[list[str], Check(lambda v: all(v), "a list of strings")]
Flag = Annotated[bool, Expect("true or false")]
NonBlank = Check(lambda v: v is None or bool(v.strip()), "a non-empty string or null")


# -- the sections ---------------------------------------------------------------------------
class MergeConfig(TypedDict):
    policy: Annotated[MergePolicy, Default("refuse")]
    retries: Annotated[int, Range(0, 100), Default(2)]
    timeout: Annotated[Seconds, Default(60)]
    verify: Annotated[VerifyMode, Convert(_verify), Default("auto")]
    squash: Annotated[bool | Literal["auto"], Expect("true, false or auto"), Default("auto")]
    message: Annotated[str | None, Check(lambda v: v is None or bool(v.strip()),
                                         "a non-empty string (a template) or null"), Default(None)]


class ScoreConfig(TypedDict):
    threshold: Annotated[int, Range(0, 10), Default(6)]
    command: Annotated[OptionalCommand, Default(None)]
    findings: Annotated[str | None, Check(_inside, "a path relative to the worktree, inside it"), Default(None)]
    # The gate that writes it (config._score checks the name); absent unless
    # given, so that a run frozen before the key existed still verifies.
    findings_from: NotRequired[str]
    timeout: Annotated[int, Range(1, MAX_SECONDS), Default(300)]


class JudgeConfig(TypedDict):
    """The tournament's referee (``selection: tournament`` only)."""
    command: Annotated[OptionalCommand, Default(None)]
    timeout: Annotated[Seconds, Default(300)]


class DistinguishConfig(TypedDict):
    """``distinguish``: the command writing inputs that tell passing attempts apart, and the one run on them."""
    command: Command
    run: Command
    timeout: Annotated[Seconds, Default(300)]


# The package stores setup and gates may read (judge/stores), by tool.
STORE_NAMES = ("pnpm", "npm", "yarn", "pip", "uv", "go", "cargo")


def _stores(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and (v in STORE_NAMES or v[:1] in ("/", "~")) for v in value)


class SetupConfig(TypedDict):
    """``setup``: the command that builds the judged checkout's environment."""
    run: Command
    cache_key: Annotated[list[str], Convert(_relative_paths), Default([])]
    keep: Annotated[list[str], Convert(_relative_paths), Default([])]
    path: Annotated[list[str], Convert(_relative_paths), Default([])]
    timeout: Annotated[Seconds, Default(1800)]
    worktrees: Annotated[Flag, Default(False)]
    # Kept only when given, so that runs frozen before it still match (judge/stores).
    stores: NotRequired[Annotated[list[str], Check(_stores, f"store names ({', '.join(STORE_NAMES)}) or folders "
                                                            "(absolute, or under ~)")]]


class GateConfig(TypedDict):
    name: Annotated[str, Convert(_gate_name), Expect("a gate name (every gate needs one)")]
    run: Command
    mode: Annotated[GateMode, Default("enforced")]
    timeout: Annotated[Seconds, Default(600)]
    tracks: Annotated[Names | None, Expect("a list of strings"), Default(None)]
    requires: Annotated[Names, Convert(_empty(list)), Default([])]
    inputs: Annotated[Names, Convert(_empty(list)), Default([])]
    outputs: Annotated[Names, Convert(_empty(list)), Default([])]
    env: Annotated[dict[str, str], Convert(_env), Default({})]
    setup: Annotated[bool, Expect("true (run after the project's setup) or false"), Default(True)]
    hidden: Annotated[str | None, Check(lambda v: v is None or v.startswith(("/", "~")),
                                        "the absolute path of a folder outside the repository"), Default(None)]
    threads: NotRequired[Annotated[int, Range(1, 1024)]]  # the cores it keeps busy (judge/pace)
    expect: NotRequired[Any]  # checked by ``expect`` (it needs the gate's mode and run)
    require_count: NotRequired[Any]


class FrozenConfig(TypedDict):
    """A validated ``.gitparallel.yaml``, as a run record freezes it."""
    instances: Annotated[int, Range(1, 64), Default(3)]
    max_total: Annotated[int, Range(1, 1024), Default(6)]
    worktree_root: Annotated[str | None, Check(lambda v: v is None or bool(v.strip()), "a path (string) or null"),
                             Default(None)]
    keep_losers: Annotated[Flag, Default(False)]
    rework_max: Annotated[int, Range(0, 100), Default(2)]
    notes_ref: Annotated[str, Check(lambda v: v.startswith("refs/notes/") and _valid_ref(v), "a ref under refs/notes/"),
                         Default("refs/notes/parallel")]
    commit_leftovers: Annotated[Flag, Default(True)]
    leftovers_exclude: Annotated[list[str], Check(_gitignore_lines, "a list of .gitignore lines (strings, no comments)"),
                                 Default(AGENT_SCRATCH)]
    evidence_log_bytes: Annotated[int, Range(0, 1 << 30), Default(1 << 20)]
    # An agent's run log: its start and its end are kept past this (``files.CappedLog``).
    run_log_bytes: Annotated[int, Range(1 << 16, 1 << 40), Default(64 << 20)]
    selection: Annotated[SelectionMethod, Default("critic_first_pass")]
    protect: Annotated[list[str], Convert(_protect), Default([])]
    protect_mode: Annotated[ProtectMode, Default("restore")]
    protect_defaults: Annotated[Flag, Default(True)]
    added_tests: Annotated[AddedTestsMode, Default("observe")]
    setup: Annotated[SetupConfig | None, Convert(_setup_form),
                     Expect("a command or a mapping with run, cache_key, keep, path, timeout, worktrees"), Default(None)]
    sandbox: Annotated[SandboxMode, Default("auto")]
    sandbox_network: Annotated[OnOff, Convert(_on_off), Default("on")]
    merge: Annotated[MergeConfig, Convert(_empty(dict)), Default({})]
    score: Annotated[ScoreConfig, Convert(_empty(dict)), Default({})]
    judge: Annotated[JudgeConfig, Convert(_empty(dict)), Expect("a mapping with command and timeout"), Default({})]
    gates: Annotated[list[Annotated[GateConfig, Expect("a mapping with at least name and run")]], Convert(_empty(list)),
                     Expect("a list of gates"), Default([])]
    agents: NotRequired[Annotated[dict[str, Any] | None, _delegate("agents", _agents)]]
    notify: NotRequired[Annotated[dict[str, Any] | None, _delegate("notify", _notify)]]
    sandbox_write: NotRequired[Annotated[list[str], Check(lambda v: all(p.strip() for p in v),
                                                          "a list of paths (strings)")]]
    distinguish: NotRequired[Annotated[DistinguishConfig, Expect("a mapping with command, run and timeout")]]
    gate_network: NotRequired[Annotated[OnOff, Convert(_on_off)]]


def _choices(hint: object) -> tuple[str, ...]:
    return tuple(get_args(hint))


MERGE_POLICIES = _choices(MergePolicy)
SELECTION_METHODS = _choices(SelectionMethod)
GATE_MODES = _choices(GateMode)
VERIFY_MODES = _choices(VerifyMode)
PROTECT_MODES = _choices(ProtectMode)
ADDED_TESTS_MODES = _choices(AddedTestsMode)
SANDBOX_MODES = _choices(SandboxMode)
SQUASH_MODES = (True, False, "auto")


def default_values(shape: type) -> dict[str, object]:
    """Each key of ``shape`` with the default it takes (``None`` for one that
    must be given), as written in the declaration."""
    return {key: field.default.value if field.default else None for key, field in fields(shape).items()}


def optional_keys(shape: type) -> tuple[str, ...]:
    """Keys left out when absent: neither required nor defaulted."""
    return tuple(key for key, field in fields(shape).items() if not field.required and field.default is None)



