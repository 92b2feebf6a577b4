"""The ``.gitparallel.yaml`` configuration: schema, defaults and validation.

At spawn the file is read from the *base commit*, not from any worktree, so an
agent that edits it in its own worktree cannot weaken its own gates; the
validated result is frozen into the run record together with its sha256.
Every key is checked: an unknown key, a wrong type or broken YAML is refused
with ``PARALLEL_CONFIG_INVALID`` naming the key and, where YAML knows it, the
line.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import yaml

from gitflow_parallel import expect, schema
from gitflow_parallel.errors import CONFIG_INVALID, SANDBOX_WRITE_REFUSED, ParallelError
from gitflow_parallel.files import config_sha256 as config_sha256  # callers name it config.config_sha256
from gitflow_parallel.files import load_yaml
from gitflow_parallel.model import RunRecord
# The declarations (sections, choices, defaults, converters) live in config_schema.
from gitflow_parallel.config_schema import (ADDED_TESTS_MODES, AGENT_SCRATCH, GATE_MODES, MAX_SECONDS,  # noqa: F401
                                            MERGE_POLICIES, PROTECT_MODES, SANDBOX_MODES, SELECTION_METHODS,
                                            SQUASH_MODES, VERIFY_MODES, DistinguishConfig, FrozenConfig, GateConfig,
                                            STORE_NAMES, SetupConfig, default_values, optional_keys, to_argv)

CONFIG_FILE = ".gitparallel.yaml"

if TYPE_CHECKING:
    import pygit2


class Repository(Protocol):
    """What reading the config at a commit needs of a repository (``git/repo.Repo``)."""
    @property
    def pygit(self) -> pygit2.Repository: ...

# What an empty file gives: every key of FrozenConfig has a default (test_schema
# checks that validate({}) is this), so the defaults are a FrozenConfig.
DEFAULTS = cast(FrozenConfig, schema.defaults(FrozenConfig))
# Keys a config may have that are left out of the frozen config when absent
# (so a run spawned before they existed still matches its base commit).
OPTIONAL: dict[str, None] = dict.fromkeys(optional_keys(FrozenConfig))
DISTINGUISH_DEFAULTS: dict[str, object] = default_values(DistinguishConfig)
GATE_DEFAULTS: dict[str, object] = {k: v for k, v in default_values(GateConfig).items()
                                 if k in schema.fields(GateConfig) and schema.fields(GateConfig)[k].default}
GATE_OPTIONAL = tuple(k for k in optional_keys(GateConfig) if k not in expect.GATE_KEYS)  # kept only when given
SETUP_DEFAULTS: dict[str, object] = default_values(SetupConfig)

# The commented file `init` writes (its own module: it is long): the settings,
# then the environment and the gates, which init replaces by what it finds.
from gitflow_parallel.template import TEMPLATE, TEMPLATE_RUN, TEMPLATE_SETTINGS  # noqa: E402,F401


def _fail(key: str, problem: str, line: int | None = None) -> ParallelError:
    where = f" (line {line})" if line else ""
    return ParallelError(
        CONFIG_INVALID,
        f"{CONFIG_FILE}: {key}{where}: {problem}",
        hint=f"fix {CONFIG_FILE} on the base branch and commit it; `git parallel init` writes a commented template",
    )


def _key_lines(node: yaml.Node | None, prefix: str = "", out: dict[str, int] | None = None) -> dict[str, int]:
    """Map dotted key paths to 1-based line numbers, for error messages."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            out[key] = key_node.start_mark.line + 1
            _key_lines(value_node, key + ".", out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = f"{prefix[:-1]}[{i}]"
            out[key] = item.start_mark.line + 1
            _key_lines(item, key + ".", out)
    return out


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing a key given twice in one mapping: YAML
    keeps the last, so a second ``gates:`` lower in the file would silently
    replace the one a reader sees.  Keys a merge (``<<: *anchor``) brings in
    may be overridden, as YAML means them to."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = (key_node.tag, key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r} (line {seen[key]}, and again on line {line}): "
                    "YAML would keep only the last; keep one", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep)


def parse(text: str | bytes | None) -> FrozenConfig:
    """Validate configuration text and return the full config with defaults."""
    if text is None:
        return copy.deepcopy(DEFAULTS)
    try:
        data, node = load_yaml(text, StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise _fail("YAML", f"not valid YAML: {problem}", line) from None
    lines = _key_lines(node)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise _fail("(top level)", "must be a mapping of keys to values")
    return validate(data, lines)


def _no_nul(value: object, path: str, lines: dict[str, int]) -> None:
    """No string anywhere may hold a NUL byte: it cannot reach a path,
    an argument or the environment."""
    if isinstance(value, str) and "\0" in value:
        raise _fail(path, "contains a NUL character", lines.get(path))
    if isinstance(value, dict):
        for k, v in value.items():
            _no_nul(k, path or str(k), lines)
            _no_nul(v, f"{path}.{k}" if path else str(k), lines)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_nul(v, f"{path}[{i}]", lines)


def _line(lines: dict[str, int], path: str) -> int | None:
    """The line of ``path`` in the file, or of the nearest key holding it."""
    while path:
        if path in lines:
            return lines[path]
        path = path[:max(path.rfind("."), path.rfind("["), 0)]
    return None


def validate(data: dict[str, object], lines: dict[str, int] | None = None) -> FrozenConfig:
    """The frozen config of ``data`` (a parsed ``.gitparallel.yaml``): checked
    against :class:`FrozenConfig`, defaults filled, then the rules that tie
    keys together; ``lines`` (key path: line) places errors in the file."""
    lines = lines or {}
    _no_nul(data, "", lines)
    try:
        # What schema.check returns holds the declaration it was checked against.
        out = cast(FrozenConfig, schema.check(FrozenConfig, data, closed=True))
    except schema.ShapeError as exc:
        raise _fail(exc.path, exc.problem, _line(lines, exc.path)) from None
    for rule in (_sandbox_write, _score, _judge, _distinguish, _setup, _gates):
        rule(out, lines)
    return out


def _sandbox_write(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    """Extra paths a fenced agent may write (``~`` allowed; checked when a run starts: ``proc/sandbox``)."""
    relative = [p for p in cfg.get("sandbox_write") or [] if not os.path.isabs(os.path.expanduser(p))]
    if relative:
        line = lines.get("sandbox_write")
        raise ParallelError(
            SANDBOX_WRITE_REFUSED,
            f"{CONFIG_FILE}: sandbox_write{f' (line {line})' if line else ''}: {relative[0]!r} is relative: "
            "relative to what would change with each command's folder, so the fence will not guess",
            hint="give an absolute path or one under ~ (for example ~/.claude); the worktree itself is always "
                 "writable")


def _score(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    if cfg["score"]["command"] and cfg["score"]["findings"]:
        raise _fail("score", "give either command or findings, not both", lines.get("score"))
    writer = cfg["score"].get("findings_from")
    if writer is not None and (not cfg["score"]["findings"] or writer not in {g["name"] for g in cfg["gates"]}):
        raise _fail("score.findings_from", f"{writer!r} must name one of the gates, and findings the file it writes",
                    lines.get("score.findings_from") or lines.get("score"))


def _judge(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    """``judge`` is the tournament's referee; any other rule never runs it,
    so a judge configured for one is a mistake worth saying."""
    selection, command = cfg["selection"], cfg["judge"]["command"]
    if selection == "tournament" and not command:
        raise _fail("judge.command", "selection: tournament needs a judge command (last stdout line A or B)",
                    lines.get("judge") or lines.get("selection"))
    if selection != "tournament" and command:
        raise _fail("judge.command", f"a judge only runs with selection: tournament, not {selection}",
                    lines.get("judge.command"))


def _distinguish(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    if (cfg["selection"] == "differential") != bool(cfg.get("distinguish")):
        raise _fail("distinguish", "selection: differential needs distinguish (command and run), and distinguish "
                    f"runs only with it, not {cfg['selection']}", lines.get("distinguish") or lines.get("selection"))


def _setup(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    setup = cfg["setup"]
    if setup and setup["keep"] and not setup["cache_key"]:
        raise _fail("setup.keep", "what setup keeps is reused only while the cache_key files are unchanged: "
                    "name them in setup.cache_key", lines.get("setup.keep"))


def _gates(cfg: FrozenConfig, lines: dict[str, int]) -> None:
    """What ties a gate to the others and to its mode."""
    gates = cfg["gates"]
    names = [g["name"] for g in gates]
    for i, gate in enumerate(gates):
        here = f"gates[{i}]"
        if gate["name"] in names[:i]:
            raise _fail(f"{here}.name", f"duplicate gate name {gate['name']!r}", lines.get(f"{here}.name"))
        expect.read_gate_keys(gate, gate, here, lambda key, problem: _fail(key, problem, lines.get(key)))
        if gate["hidden"] and gate["mode"] == "probe":
            raise _fail(f"{here}.hidden", "a probe's output is its signature; hidden tests go on an enforced "
                        "or observe gate", lines.get(f"{here}.hidden"))
        if gate["outputs"] and gate["mode"] != "probe":
            raise _fail(f"{here}.outputs", "only a probe gate (mode: probe) hashes outputs",
                        lines.get(f"{here}.outputs"))
        for req in gate["requires"]:
            path = f"{here}.requires"
            if req not in names[:i]:
                raise _fail(path, f"requires {req!r}, which is not a gate declared before it", lines.get(path))
            # A probe never blocks; a gate that needed it to pass would make it block.
            if gates[names.index(req)]["mode"] == "probe" and gate["mode"] != "probe":
                raise _fail(path, f"requires {req!r}, a probe: probes describe behaviour and never block, "
                            "so only another probe may require one", lines.get(path))


def load_from_commit(repo: Repository, commit_oid: str) -> tuple[FrozenConfig, str]:
    """Read and validate the config at ``commit_oid``; returns (config, source)."""
    import pygit2

    commit = repo.pygit[commit_oid].peel(pygit2.Commit)
    try:
        entry = commit.tree[CONFIG_FILE]
    except KeyError:
        return parse(None), "defaults"
    blob = repo.pygit.get(entry.id)
    if not isinstance(blob, pygit2.Blob):
        raise _fail("(file)", f"{CONFIG_FILE} in {commit_oid[:12]} is not a file")
    return parse(blob.data), f"{commit_oid}:{CONFIG_FILE}"


def _first_difference(a: object, b: object, path: str = "") -> str | None:
    """The dotted path of the first place ``a`` and ``b`` differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                return f"{path}{key}"
            found = _first_difference(a[key], b[key], f"{path}{key}.")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            found = _first_difference(x, y, f"{path[:-1]}[{i}].")
            if found:
                return found
        return None
    return None if a == b and type(a) is type(b) else path.rstrip(".") or "(all)"


# Defaults that changed: a run frozen by an earlier version holds the earlier
# value where its file gave none.  Each earlier value here is the stricter
# one, so a record that says it asks no less than the file would.
EARLIER_DEFAULTS: dict[tuple[str, str], dict[object, tuple[object, ...]]] = {
    ("merge", "verify"): {"auto": ("always",)},  # "always" until merge.verify: auto (2026-12-06)
}


def _as_frozen_then(derived: Mapping[str, object], frozen: Mapping[str, object]) -> Mapping[str, object]:
    """``derived`` with each changed default as the record's earlier one."""
    out = derived
    for (section, key), earlier in EARLIER_DEFAULTS.items():
        ours, theirs = derived.get(section) or {}, frozen.get(section)
        assert isinstance(ours, dict)  # (derived is validated: its sections are mappings)
        now = ours.get(key)
        then = theirs.get(key) if isinstance(theirs, dict) else None
        if then != now and then in earlier.get(now, ()):
            kept = out[section]
            assert isinstance(kept, dict)
            out = {**out, section: {**kept, key: then}}
    return out


def verify_frozen(repo: Repository, record: RunRecord) -> None:
    """Refuse a record whose frozen config is not what its base commit says.

    The record lives under ``.git``, where an agent running as the same user
    can write; the base commit's ``.gitparallel.yaml`` is an object it cannot
    change.  So the config that judges is re-derived from that object, and a
    record that says otherwise (``gates: []`` with a recomputed sha256) is
    refused, naming the first field that differs."""
    from gitflow_parallel.errors import RECORD_INVALID

    base = record["base"]["commit"]
    task = record["task"]
    try:
        derived, _ = load_from_commit(repo, base)
    except (KeyError, ValueError, AttributeError) as exc:
        raise ParallelError(RECORD_INVALID, f"the base commit {base[:12]} of run {record['run_id']} cannot be read ({exc})",
                            hint=f"`git parallel validate {task}`; abort the run and spawn again") from None
    field = _first_difference(_as_frozen_then(derived, record["config"]), record["config"])
    if field:
        raise ParallelError(
            RECORD_INVALID,
            f"the run record of {task!r} says config.{field} differs from {base[:12]}:{CONFIG_FILE}, "
            "from which it was frozen: the record was edited",
            hint=f"nothing was judged; abort the run (`git parallel abort {task}`) and spawn it again",
            field=f"config.{field}")


def scratch_patterns(cfg: FrozenConfig) -> list[str]:
    """A frozen config's ``leftovers_exclude`` (none in a run frozen before
    the key existed)."""
    return list(cfg.get("leftovers_exclude") or [])
