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
import math
import os
import shlex
from typing import Any, cast

import yaml

from gitflow_parallel import expect
from gitflow_parallel.errors import CONFIG_INVALID, SANDBOX_WRITE_REFUSED, ParallelError
from gitflow_parallel.files import config_sha256  # noqa: F401 (callers name it config.config_sha256)
from gitflow_parallel.files import load_yaml
from gitflow_parallel.model import RunRecord
from gitflow_parallel.names import check_name

CONFIG_FILE = ".gitparallel.yaml"

MERGE_POLICIES = ("refuse", "first_pass_wins", "last_pass_wins", "winner_takes_all", "manual")
SELECTION_METHODS = ("critic_first_pass", "majority_vote", "cluster", "tournament", "differential")
GATE_MODES = ("enforced", "observe", "probe")
VERIFY_MODES = ("always", "changed", "never")
PROTECT_MODES = ("restore", "refuse")
ADDED_TESTS_MODES = ("observe", "enforced", "off")
SANDBOX_MODES = ("auto", "required", "off")
MAX_SECONDS = 7 * 24 * 3600  # a week: a longer timeout is a typo
SQUASH_MODES = (True, False, "auto")
# Untracked files coding agents leave in their worktree for themselves
# (.gitignore lines): never part of an attempt's leftovers commit.
AGENT_SCRATCH = [".aider.chat.history.md", ".aider.input.history", ".aider.llm.history", ".aider.tags.cache.v*/",
                 ".claude/", ".codex/", ".gemini/", "__pycache__/", ".pytest_cache/"]

DEFAULTS: dict[str, Any] = {
    "instances": 3,
    "max_total": 6,
    "worktree_root": None,
    "keep_losers": False,
    "rework_max": 2,
    "notes_ref": "refs/notes/parallel",
    "commit_leftovers": True,
    "leftovers_exclude": AGENT_SCRATCH,
    "evidence_log_bytes": 1 << 20,
    "selection": "critic_first_pass",
    "protect": [],
    "protect_mode": "restore",
    "protect_defaults": True,
    "added_tests": "observe",
    "setup": None,
    "sandbox": "auto",
    "sandbox_network": "on",
    "merge": {"policy": "refuse", "retries": 2, "timeout": 60, "verify": "always", "squash": "auto",
              "message": None},
    "score": {"threshold": 6, "command": None, "findings": None, "timeout": 300},
    "judge": {"command": None, "timeout": 300},
    "gates": [],
}
# Keys a config may have that are left out of the frozen config when absent
# (so a run spawned before they existed still matches its base commit).
OPTIONAL: dict[str, Any] = {"agents": None, "notify": None, "sandbox_write": None, "distinguish": None,
                            "gate_network": None}
DISTINGUISH_DEFAULTS: dict[str, Any] = {"command": None, "run": None, "timeout": 300}

GATE_DEFAULTS: dict[str, Any] = {
    "mode": "enforced", "timeout": 600, "tracks": None, "requires": [], "inputs": [], "outputs": [], "env": {},
    "setup": True, "hidden": None,
}
GATE_OPTIONAL = ("threads",)  # kept only when given, so that runs frozen before them still match

SETUP_DEFAULTS: dict[str, Any] = {
    "run": None,
    "cache_key": [],
    "keep": [],
    "path": [],
    "timeout": 1800,
    "worktrees": False}
STORE_NAMES = ("pnpm", "npm", "yarn", "pip", "uv", "go", "cargo")

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


def _sandbox_write(value: Any, line: int | None) -> list[str]:
    """Extra paths a fenced agent may write (``~`` allowed; checked when a run starts: ``proc/sandbox``)."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise _fail("sandbox_write", "must be a list of paths (strings)", line)
    relative = [p for p in value if not os.path.isabs(os.path.expanduser(p))]
    if relative:
        raise ParallelError(
            SANDBOX_WRITE_REFUSED,
            f"{CONFIG_FILE}: sandbox_write{f' (line {line})' if line else ''}: {relative[0]!r} is relative: "
            "relative to what would change with each command's folder, so the fence will not guess",
            hint="give an absolute path or one under ~ (for example ~/.claude); the worktree itself is always "
                 "writable")
    return list(value)


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


def _valid_ref(name: str) -> bool:
    import pygit2

    return pygit2.reference_is_valid_name(name) and not name.endswith("/")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _argv(value: Any, key: str, line: int | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise _fail(key, f"cannot split command: {exc}", line) from None
    elif isinstance(value, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        argv = [str(a) for a in value]
    elif isinstance(value, list) and any(isinstance(a, bool) for a in value):
        raise _fail(key, "YAML read a bare true/false/yes/no as a boolean; quote it (\"true\")", line)
    else:
        raise _fail(key, "must be a command: a list of strings or one string", line)
    if not argv:
        raise _fail(key, "must not be empty", line)
    return argv


def parse(text: str | bytes | None) -> dict[str, Any]:
    """Validate configuration text and return the full config with defaults."""
    if text is None:
        return copy.deepcopy(DEFAULTS)
    try:
        data, node = load_yaml(text)
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


def _no_nul(value: Any, path: str, lines: dict[str, int]) -> None:
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


def _seconds(path: str, value: Any, line: int | None) -> int | float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 < value <= MAX_SECONDS):
        raise _fail(path, f"must be a number of seconds above 0 and at most {MAX_SECONDS}, got {value!r}", line)
    return value


def validate(data: dict[str, Any], lines: dict[str, int] | None = None) -> dict[str, Any]:
    lines = lines or {}
    _no_nul(data, "", lines)
    out = copy.deepcopy(DEFAULTS)

    def check_keys(section: dict[str, Any], allowed: dict[str, Any] | tuple[str, ...], prefix: str) -> None:
        for key in section:
            if not isinstance(key, str) or key not in allowed:
                path = f"{prefix}{key}"
                known = ", ".join(sorted(allowed))
                raise _fail(path, f"unknown key (known: {known})", lines.get(path))

    check_keys(data, {**DEFAULTS, **OPTIONAL}, "")

    def want_int(path: str, v: Any, lo: int, hi: int | None = None) -> int:
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
            raise _fail(path, f"must be an integer {rng}, got {v!r}", lines.get(path))
        return cast(int, v)

    def want_bool(path: str, v: Any) -> bool:
        if not isinstance(v, bool):
            raise _fail(path, f"must be true or false, got {v!r}", lines.get(path))
        return v

    def want_choice(path: str, v: Any, choices: tuple[str, ...]) -> str:
        if v not in choices:
            raise _fail(path, f"must be one of {', '.join(choices)}, got {v!r}", lines.get(path))
        return cast(str, v)

    for key, value in data.items():
        if key in ("merge", "score", "judge"):
            continue
        if key == "instances":
            out[key] = want_int(key, value, 1, 64)
        elif key == "max_total":
            out[key] = want_int(key, value, 1, 1024)
        elif key == "rework_max":
            out[key] = want_int(key, value, 0, 100)
        elif key == "protect":
            if not isinstance(value, list) or not all(isinstance(p, str) and p.strip("/") for p in value):
                raise _fail(key, "must be a list of path globs", lines.get(key))
            if any(p.startswith("/") or ".." in p.split("/") for p in value):
                raise _fail(key, "globs are relative to the top of the repository, inside it", lines.get(key))
            out[key] = list(value)
        elif key == "protect_mode":
            out[key] = want_choice(key, value, PROTECT_MODES)
        elif key == "protect_defaults":
            out[key] = want_bool(key, value)
        elif key == "added_tests":
            out[key] = want_choice(key, value, ADDED_TESTS_MODES)
        elif key == "setup":
            out[key] = _setup(value, lines)
        elif key == "evidence_log_bytes":
            out[key] = want_int(key, value, 0, 1 << 30)
        elif key in ("keep_losers", "commit_leftovers"):
            out[key] = want_bool(key, value)
        elif key == "selection":
            out[key] = want_choice(key, value, SELECTION_METHODS)
        elif key == "sandbox":
            out[key] = want_choice(key, value, SANDBOX_MODES)
        elif key in ("sandbox_network", "gate_network"):
            # YAML 1.1 reads a bare on/off as a boolean.
            out[key] = {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value
            out[key] = want_choice(key, out[key], ("on", "off"))
        elif key == "sandbox_write":
            out[key] = _sandbox_write(value, lines.get(key))
        elif key == "worktree_root":
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise _fail(key, "must be a path (string) or null", lines.get(key))
            out[key] = value
        elif key == "notes_ref":
            if not isinstance(value, str) or not value.startswith("refs/notes/") or not _valid_ref(value):
                raise _fail(key, f"must be a ref under refs/notes/, got {value!r}", lines.get(key))
            out[key] = value
        elif key == "gates":
            out[key] = _gates(value, lines)
        elif key == "leftovers_exclude":
            if not isinstance(value, list) or not all(
                    isinstance(p, str) and p.strip() and not p.startswith("#") and "\n" not in p for p in value):
                raise _fail(key, "must be a list of .gitignore lines (strings, no comments)", lines.get(key))
            out[key] = list(value)
        elif key == "agents":
            from gitflow_parallel import mix

            out[key] = mix.validate_config(value, lambda k, problem: _fail(k, problem, lines.get(k)))
        elif key == "notify":
            from gitflow_parallel import notify

            out[key] = notify.validate_config(value, lambda k, problem: _fail(k, problem, lines.get(k)))
        elif key == "distinguish":
            out[key] = _distinguish(value, lines)

    merge = data.get("merge", {})
    if merge is None:
        merge = {}
    if not isinstance(merge, dict):
        raise _fail("merge", "must be a mapping", lines.get("merge"))
    check_keys(merge, DEFAULTS["merge"], "merge.")
    for key, value in merge.items():
        path = f"merge.{key}"
        if key == "policy":
            out["merge"][key] = want_choice(path, value, MERGE_POLICIES)
        elif key == "retries":
            out["merge"][key] = want_int(path, value, 0, 100)
        elif key == "timeout":
            out["merge"][key] = _seconds(path, value, lines.get(path))
        elif key == "verify":
            # true/false from before the three modes: true asked for proof.
            value = {True: "always", False: "never"}.get(value, value) if isinstance(value, bool) else value
            out["merge"][key] = want_choice(path, value, VERIFY_MODES)
        elif key == "squash":
            if value not in SQUASH_MODES or not isinstance(value, (bool, str)):
                raise _fail(path, f"must be true, false or auto, got {value!r}", lines.get(path))
            out["merge"][key] = value
        elif key == "message":
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise _fail(path, "must be a non-empty string (a template) or null", lines.get(path))
            out["merge"][key] = value

    score = data.get("score", {})
    if score is None:
        score = {}
    if not isinstance(score, dict):
        raise _fail("score", "must be a mapping", lines.get("score"))
    check_keys(score, DEFAULTS["score"], "score.")
    for key, value in score.items():
        path = f"score.{key}"
        if key == "threshold":
            out["score"][key] = want_int(path, value, 0, 10)
        elif key == "timeout":
            out["score"][key] = want_int(path, value, 1, MAX_SECONDS)
        elif key == "command":
            out["score"][key] = _argv(value, path, lines.get(path))
        elif key == "findings":
            if value is not None and (not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/")):
                raise _fail(path, "must be a path relative to the worktree, inside it", lines.get(path))
            out["score"][key] = value
    if out["score"]["command"] and out["score"]["findings"]:
        raise _fail("score", "give either command or findings, not both", lines.get("score"))
    out["judge"] = _judge(data.get("judge", {}), out["selection"], lines)
    if (out["selection"] == "differential") != bool(out.get("distinguish")):
        raise _fail("distinguish", "selection: differential needs distinguish (command and run), and distinguish "
                    f"runs only with it, not {out['selection']}", lines.get("distinguish") or lines.get("selection"))
    return out


def _distinguish(value: Any, lines: dict[str, int]) -> dict[str, Any]:
    """``distinguish``: the command writing inputs that tell passing attempts apart, and the one run on them."""
    if not isinstance(value, dict):
        raise _fail("distinguish", "must be a mapping with command, run and timeout", lines.get("distinguish"))
    out = copy.deepcopy(DISTINGUISH_DEFAULTS)
    for key, item in value.items():
        path = f"distinguish.{key}"
        if key not in out:
            raise _fail(path, f"unknown key (known: {', '.join(sorted(out))})", lines.get(path))
        out[key] = _seconds(path, item, lines.get(path)) if key == "timeout" else _argv(item, path, lines.get(path))
    for key in ("command", "run"):
        if not out[key]:
            raise _fail(f"distinguish.{key}", "is needed: a command (list of strings or one string)",
                        lines.get("distinguish"))
    return out


def _judge(judge: Any, selection: str, lines: dict[str, int]) -> dict[str, Any]:
    """``judge`` is the tournament's referee; any other rule never runs it,
    so a judge configured for one is a mistake worth saying."""
    out: dict[str, Any] = copy.deepcopy(DEFAULTS["judge"])
    if judge is None:
        judge = {}
    if not isinstance(judge, dict):
        raise _fail("judge", "must be a mapping with command and timeout", lines.get("judge"))
    for key in judge:
        if key not in out:
            path = f"judge.{key}"
            raise _fail(path, f"unknown key (known: {', '.join(sorted(out))})", lines.get(path))
    if "command" in judge:
        out["command"] = _argv(judge["command"], "judge.command", lines.get("judge.command"))
    if "timeout" in judge:
        out["timeout"] = _seconds("judge.timeout", judge["timeout"], lines.get("judge.timeout"))
    if selection == "tournament" and not out["command"]:
        raise _fail("judge.command", "selection: tournament needs a judge command (last stdout line A or B)",
                    lines.get("judge") or lines.get("selection"))
    if selection != "tournament" and out["command"]:
        raise _fail("judge.command", f"a judge only runs with selection: tournament, not {selection}",
                    lines.get("judge.command"))
    return out


def _relative_paths(value: Any, path: str, lines: dict[str, int]) -> list[str]:
    """A list of paths (or globs) relative to the top of the checkout, inside it."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip("/") for p in value):
        raise _fail(path, "must be a list of relative paths", lines.get(path))
    for p in value:
        parts = p.split("/")
        if p.startswith("/") or ".." in parts or parts[0] == ".git":
            raise _fail(path, f"{p!r} must be relative to the top of the checkout, inside it and not in .git",
                        lines.get(path))
    return [p.strip("/") for p in value]


def _setup(value: Any, lines: dict[str, int]) -> dict[str, Any] | None:
    """``setup``: the command that builds the judged checkout's environment
    (a command alone, or a mapping with what caches and what it provides)."""
    if value is None:
        return None
    if isinstance(value, (str, list)):
        value = {"run": value}
    if not isinstance(value, dict):
        raise _fail("setup", "must be a command or a mapping with run, cache_key, keep, path, timeout, worktrees",
                    lines.get("setup"))
    out = copy.deepcopy(SETUP_DEFAULTS)
    for key, item in value.items():
        path = f"setup.{key}"
        if key not in SETUP_DEFAULTS and key != "stores":
            raise _fail(path, f"unknown key (known: {', '.join(sorted([*SETUP_DEFAULTS, 'stores']))})", lines.get(path))
        if key == "run":
            out[key] = _argv(item, path, lines.get(path))
        elif key in ("cache_key", "keep", "path"):
            out[key] = _relative_paths(item, path, lines)
        elif key == "timeout":
            out[key] = _seconds(path, item, lines.get(path))
        elif key == "stores":  # kept only when given, so that runs frozen before it still match (judge/stores)
            if not isinstance(item, list) or not all(isinstance(v, str) and (v in STORE_NAMES or v[:1] in ("/", "~")) for v in item):
                raise _fail(path, f"must list store names ({', '.join(STORE_NAMES)}) or folders (absolute, or under ~)", lines.get(path))
            out[key] = list(item)
        elif key == "worktrees":
            if not isinstance(item, bool):
                raise _fail(path, f"must be true or false, got {item!r}", lines.get(path))
            out[key] = item
    if not out["run"]:
        raise _fail("setup.run", "setup needs a run command", lines.get("setup"))
    if out["keep"] and not out["cache_key"]:
        raise _fail("setup.keep", "what setup keeps is reused only while the cache_key files are unchanged: "
                    "name them in setup.cache_key", lines.get("setup.keep"))
    return out


def _hidden(value: Any, path: str, lines: dict[str, int]) -> str | None:
    """A gate's hidden tests: a folder outside the repository (absolute, or
    from ``~``), laid over the judged checkout for that gate only."""
    if value is None:
        return None
    if not isinstance(value, str) or not (value.startswith("/") or value.startswith("~")):
        raise _fail(path, "must be the absolute path of a folder outside the repository", lines.get(path))
    return value


def _gates(value: Any, lines: dict[str, int]) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _fail("gates", "must be a list of gates", lines.get("gates"))
    gates: list[dict[str, Any]] = []
    seen: set[str] = set()
    allowed = ("name", "run", *GATE_OPTIONAL, *GATE_DEFAULTS, *expect.GATE_KEYS)
    for i, raw in enumerate(value):
        here = f"gates[{i}]"
        if not isinstance(raw, dict):
            raise _fail(here, "must be a mapping with at least name and run", lines.get(here))
        for key in raw:
            if key not in allowed:
                path = f"{here}.{key}"
                raise _fail(path, f"unknown key (known: {', '.join(sorted(allowed))})", lines.get(path))
        gate = copy.deepcopy(GATE_DEFAULTS)
        name = raw.get("name")
        if not isinstance(name, str):
            raise _fail(f"{here}.name", "every gate needs a name", lines.get(f"{here}.name") or lines.get(here))
        try:
            check_name(name, "gate")
        except ParallelError as exc:
            raise _fail(f"{here}.name", exc.message, lines.get(f"{here}.name")) from None
        if name in seen:
            raise _fail(f"{here}.name", f"duplicate gate name {name!r}", lines.get(f"{here}.name"))
        seen.add(name)
        gate["name"] = name
        if "run" not in raw:
            raise _fail(f"{here}.run", "every gate needs a run command", lines.get(here))
        gate["run"] = _argv(raw["run"], f"{here}.run", lines.get(f"{here}.run"))
        if "mode" in raw:
            if raw["mode"] not in GATE_MODES:
                raise _fail(f"{here}.mode", f"must be one of {', '.join(GATE_MODES)}, got {raw['mode']!r}",
                            lines.get(f"{here}.mode"))
            gate["mode"] = raw["mode"]
        if "timeout" in raw:
            gate["timeout"] = _seconds(f"{here}.timeout", raw["timeout"], lines.get(f"{here}.timeout"))
        for key in ("tracks", "requires", "inputs", "outputs"):
            if key in raw and raw[key] is not None:
                v = raw[key]
                if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                    raise _fail(f"{here}.{key}", "must be a list of strings", lines.get(f"{here}.{key}"))
                gate[key] = list(v)
        if "env" in raw and raw["env"] is not None:
            env = raw["env"]
            if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool) for k, v in env.items()):
                raise _fail(f"{here}.env", "must be a mapping of names to strings", lines.get(f"{here}.env"))
            bad = [k for k in env if not k or "=" in k]
            if bad:
                raise _fail(f"{here}.env", f"{bad[0]!r} is not a valid variable name", lines.get(f"{here}.env"))
            gate["env"] = {k: str(v) for k, v in env.items()}
        if "setup" in raw:
            if not isinstance(raw["setup"], bool):
                raise _fail(f"{here}.setup", "must be true (run after the project's setup) or false",
                            lines.get(f"{here}.setup"))
            gate["setup"] = raw["setup"]
        gate["hidden"] = _hidden(raw.get("hidden"), f"{here}.hidden", lines)
        expect.read_gate_keys(raw, gate, here, lambda key, problem: _fail(key, problem, lines.get(key)))
        if "threads" in raw:  # the cores it keeps busy, taken from check's budget (judge/pace)
            if not _is_int(raw["threads"]) or not 1 <= raw["threads"] <= 1024:
                raise _fail(f"{here}.threads", f"must be an integer 1..1024, got {raw['threads']!r}",
                            lines.get(f"{here}.threads"))
            gate["threads"] = raw["threads"]
        if gate["hidden"] and gate["mode"] == "probe":
            raise _fail(f"{here}.hidden", "a probe's output is its signature; hidden tests go on an enforced "
                        "or observe gate", lines.get(f"{here}.hidden"))
        if gate["outputs"] and gate["mode"] != "probe":
            raise _fail(f"{here}.outputs", "only a probe gate (mode: probe) hashes outputs",
                        lines.get(f"{here}.outputs"))
        gates.append(gate)
    modes = {g["name"]: g["mode"] for g in gates}
    names = [g["name"] for g in gates]
    for i, gate in enumerate(gates):
        for req in gate["requires"]:
            path = f"gates[{i}].requires"
            if req not in names[:i]:
                raise _fail(path, f"requires {req!r}, which is not a gate declared before it", lines.get(path))
            # A probe never blocks; a gate that needed it to pass would make it block.
            if modes[req] == "probe" and gate["mode"] != "probe":
                raise _fail(path, f"requires {req!r}, a probe: probes describe behaviour and never block, "
                            "so only another probe may require one", lines.get(path))
    return gates


def load_from_commit(repo: Any, commit_oid: str) -> tuple[dict[str, Any], str]:
    """Read and validate the config at ``commit_oid``; returns (config, source)."""
    import pygit2

    commit = repo.pygit.get(commit_oid).peel(pygit2.Commit)
    try:
        entry = commit.tree[CONFIG_FILE]
    except KeyError:
        return parse(None), "defaults"
    blob = repo.pygit.get(entry.id)
    if not isinstance(blob, pygit2.Blob):
        raise _fail("(file)", f"{CONFIG_FILE} in {commit_oid[:12]} is not a file")
    return parse(blob.data), f"{commit_oid}:{CONFIG_FILE}"


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
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


def verify_frozen(repo: Any, record: RunRecord) -> None:
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
    field = _first_difference(derived, record["config"])
    if field:
        raise ParallelError(
            RECORD_INVALID,
            f"the run record of {task!r} says config.{field} differs from {base[:12]}:{CONFIG_FILE}, "
            "from which it was frozen: the record was edited",
            hint=f"nothing was judged; abort the run (`git parallel abort {task}`) and spawn it again",
            field=f"config.{field}")


def scratch_patterns(cfg: dict[str, Any]) -> list[str]:
    """A frozen config's ``leftovers_exclude`` (none in a run frozen before
    the key existed)."""
    return list(cfg.get("leftovers_exclude") or [])
