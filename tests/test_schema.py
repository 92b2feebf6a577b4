"""The generic checker (schema.py) and the loaders built on it: run records
(store.validate_record) and pick records (picks.validate_pick) are checked
against their declarations in shapes/, name the key path and what was
expected, and keep keys a newer version added."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, NotRequired, Required, TypedDict

import pytest

from gitflow_parallel import model, schema
from gitflow_parallel.config import DEFAULTS, config_sha256
from gitflow_parallel.errors import PICK_SCHEMA_INVALID, RECORD_INVALID, ParallelError
from gitflow_parallel.schema import Check, Convert, Default, Invalid, Range, ShapeError
from gitflow_parallel.state.picks import validate_pick
from gitflow_parallel.state.store import validate_record

BASE = "a" * 40


class Inner(TypedDict, total=False):
    mode: Literal["on", "off"]
    size: Required[Annotated[int, Range(1, 8)]]


def _on_off(value: Any) -> Any:
    return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value


def _split(value: Any) -> Any:
    if isinstance(value, str):
        if not value:
            raise Invalid("must not be empty")
        return value.split()
    return value


class Outer(TypedDict):
    name: Annotated[str, Check(str.isidentifier, "an identifier")]
    inner: Inner | None
    items: list[Inner]
    argv: Annotated[list[str], Convert(_split)]
    switch: Annotated[Literal["on", "off"], Convert(_on_off), Default("on")]
    seconds: NotRequired[Annotated[float, Range(0.5, 10)]]
    table: NotRequired[dict[str, int]]


GOOD: dict[str, Any] = {"name": "x", "inner": None, "items": [{"size": 2}], "argv": ["a"]}


@pytest.mark.parametrize("change, path, problem", [
    ({"name": "not one"}, "name", "must be an identifier, got 'not one'"),
    ({"inner": {"size": 9}}, "inner.size", "must be an integer 1..8, got 9"),
    ({"inner": {"size": 2, "mode": "dim"}}, "inner.mode", "must be one of on, off, got 'dim'"),
    ({"inner": 3}, "inner", "must be a mapping or null, got 3"),
    ({"items": [{"size": 1}, {"size": True}]}, "items[1].size", "must be an integer 1..8, got True"),
    ({"items": [{"size": 1}, {}]}, "items[1].size", "is missing: it must be an integer 1..8"),
    ({"argv": ""}, "argv", "must not be empty"),
    ({"argv": [1]}, "argv[0]", "must be a string, got 1"),
    ({"seconds": float("nan")}, "seconds", "must be a number 0.5..10, got nan"),
    ({"seconds": False}, "seconds", "must be a number 0.5..10, got False"),
    ({"table": {"a": "1"}}, "table.a", "must be an integer, got '1'"),
])
def test_a_mismatch_names_its_path_and_what_was_expected(change: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ShapeError) as err:
        schema.check(Outer, {**GOOD, **change})
    assert (err.value.path, err.value.problem) == (path, problem)


def test_conversions_defaults_and_unknown_keys() -> None:
    out = schema.check(Outer, {**GOOD, "argv": "make test", "switch": False, "seconds": 2, "later": [1]})
    assert out["argv"] == ["make", "test"] and out["switch"] == "off" and out["seconds"] == 2
    assert out["later"] == [1]  # open: a newer version's key is kept
    assert schema.check(Outer, GOOD)["switch"] == "on"  # filled from its Default
    with pytest.raises(ShapeError) as err:
        schema.check(Outer, {**GOOD, "later": 1}, closed=True)
    assert err.value.path == "later" and err.value.problem.startswith("unknown key (known: argv, inner, items")
    with pytest.raises(ShapeError) as err:
        schema.check(Outer, {k: v for k, v in GOOD.items() if k != "name"})
    assert (err.value.path, err.value.problem) == ("name", "is missing: it must be an identifier")


def test_requiredness_is_read_from_the_declaration() -> None:
    fields = schema.fields(Outer)
    assert [k for k, f in fields.items() if f.required] == ["name", "inner", "items", "argv"]
    assert schema.fields(Inner)["size"].required and not schema.fields(Inner)["mode"].required
    instance = schema.fields(model.InstanceRecord)
    assert instance["id"].required and instance["history"].required and not instance["removed"].required
    assert schema.fields(model.RunRecord)["run_id"].required and not schema.fields(model.RunRecord)["merge"].required


# -- run records --------------------------------------------------------------------------
def run() -> model.RunRecord:
    root = Path("/tmp/wt")
    insts = [model.new_instance("t", "main", str(k), root, BASE) for k in (1, 2)]
    cfg = dict(DEFAULTS)
    return model.new_run("t", {"ref": "refs/heads/main", "commit": BASE}, ["main"], cfg, config_sha256(cfg),
                         "defaults", root, insts, "2026-01-01T00:00:00Z")


def refused(change: Callable[[Any], Any]) -> str:
    record: Any = copy.deepcopy(run())
    change(record)
    with pytest.raises(ParallelError) as err:
        validate_record(record, Path("/r/runs/t.yaml"))
    assert err.value.code == RECORD_INVALID
    prefix = "run record /r/runs/t.yaml is invalid: "
    assert err.value.message.startswith(prefix)
    return err.value.message[len(prefix):]


def test_a_broken_run_record_is_refused_naming_the_field() -> None:
    assert refused(lambda r: r.pop("run_id")) == "run_id is missing: it must be PR-<uuid>"
    assert refused(lambda r: r.update(status="exploded")) == (
        "status must be one of pending, running, completed, picked, merged, failed, aborted, got 'exploded'")
    assert refused(lambda r: r.update(run_revision=0)) == "run_revision must be an integer >= 1, got 0"
    assert refused(lambda r: r.update(schema_version=2)) == "schema_version must be 1, got 2"
    assert refused(lambda r: r.update(task="a..b")) == "task must be a valid task name, got 'a..b'"
    assert refused(lambda r: r["base"].pop("commit")).startswith("base.commit is missing")
    assert refused(lambda r: r["instances"][1].update(head="zz")) == (
        "instances[1].head must be a commit oid (40 or 64 hex digits) or null, got 'zz'")
    assert refused(lambda r: r["instances"][1].update(pid=0)) == "instances[1].pid must be a process id or null, got 0"
    assert refused(lambda r: r["instances"][0].update(verdict="maybe")) == (
        "instances[0].verdict must be one of pass, fail or null, got 'maybe'")
    assert refused(lambda r: r["instances"][0].update(evidence={"path": "/p"})) == (
        "instances[0].evidence.sha256 is missing: it must be a string")
    assert refused(lambda r: r.update(picks={"main": {"path": "p", "sha256": "s"}})) == (
        "picks.main.winner is missing: it must be a string")
    assert refused(lambda r: r["instances"][1].update(id="1")) == "instance id '1' appears twice"
    assert refused(lambda r: r["instances"][1].update(track="ui")) == (
        "instances[1].track 'ui' is not one of the run's tracks")


def test_a_run_record_keeps_what_a_newer_version_added() -> None:
    record: Any = run()
    record["later"] = {"x": 1}
    record["instances"][0]["later"] = [1, 2]
    record["picks"] = None  # as the checks before the declarations allowed
    assert validate_record(record, Path("t.yaml")) is record
    assert record["later"] == {"x": 1} and record["instances"][0]["later"] == [1, 2]


# -- pick records -------------------------------------------------------------------------
def pick(**change: Any) -> dict[str, Any]:
    rec = run()
    out = {"schema_version": 1, "run_id": rec["run_id"], "task": "t", "track": "main",
           "winner": {"id": "1", "attempt": 0, "commit": BASE, "tree": BASE, "evidence_sha256": "e"},
           "verdict": "pass", "score": None, "proof_issued_at": "now", "selection_method": "critic_first_pass",
           "decision": {"rule": "critic_first_pass", "winner": {"id": "1"}}, "arbiter": "git-parallel",
           "merge_policy": "refuse", "losers": [], "created_at": "now"}
    return {**out, **change}


def pick_refused(data: dict[str, Any], record: model.RunRecord) -> str:
    with pytest.raises(ParallelError) as err:
        validate_pick(data, Path("p.json"), record, "main")
    assert err.value.code == PICK_SCHEMA_INVALID
    return err.value.message.removeprefix("pick record p.json is invalid: ")


def test_pick_records_are_checked_against_their_shape_and_their_run() -> None:
    rec = run()
    good = pick(run_id=rec["run_id"])
    assert validate_pick(good, Path("p.json"), rec, "main") is good
    assert pick_refused({**good, "score": "9"}, rec) == "score must be an integer or null, got '9'"
    assert pick_refused({**good, "winner": {**good["winner"], "attempt": None}}, rec) == (
        "winner.attempt must be an integer, got None")
    assert pick_refused({**good, "verdict": "fail"}, rec) == "verdict is 'fail', a pick is always of a passing instance"
    assert pick_refused({**good, "proof_issued_at": None}, rec).startswith("proof_issued_at is null")
    assert pick_refused({**good, "track": "ui"}, rec) == "it names another run, task or track"
    assert pick_refused({**good, "decision": {"rule": "x"}}, rec) == "its decision does not name its rule and winner"
    assert pick_refused({**good, "selection_method": model.HUMAN, "decision": None}, rec) == (
        "a human pick must name picked_by and say whether it was forced")
    forced = {**good, "selection_method": model.HUMAN, "decision": None, "picked_by": "ada", "forced": True,
              "verdict": None, "proof_issued_at": None, "winner": {**good["winner"], "evidence_sha256": None}}
    assert validate_pick(forced, Path("p.json"), rec, "main") is forced
    assert pick_refused({**forced, "forced": False}, rec).startswith("proof_issued_at is null")
    assert json.dumps(forced)  # what is checked is what was read: nothing added or converted


# -- the declarations match what a real run writes and prints -------------------------------
@pytest.mark.slow  # a whole flow; the default tier keeps under 150 s
def test_a_real_run_writes_and_prints_what_the_shapes_declare(tmp_path: Path) -> None:
    """One run through the CLI: every --json result, the evidence packs, the
    pick record and the run record pass ``schema.check`` against their
    declarations in shapes/ (open: a key they do not declare would pass
    too, so ``closed`` says the declarations name every key)."""
    import textwrap

    from conftest import GP, git, make_repo
    from test_formats import AGENT, GATE, PY, SCORE

    from gitflow_parallel.shapes import pack, records, results

    tools = tmp_path / "tools"
    tools.mkdir()
    for name, text in (("agent.py", AGENT), ("gate.py", GATE), ("score.py", SCORE)):
        (tools / name).write_text(text)
    repo = make_repo(tmp_path / "repo", config=textwrap.dedent(f"""
        gates:
          - name: answer
            run: [{PY}, {tools / 'gate.py'}]
        score:
          command: [{PY}, {tools / 'score.py'}]
          threshold: 1
    """))
    gp = GP(repo)

    def declared(shape: Any, value: dict[str, Any]) -> None:
        value = {k: v for k, v in value.items() if k != "ok"}
        schema.check(shape, value, closed=True)

    declared(results.SpawnResult, gp.json("spawn", "t", "-n", "2"))
    gp("run", "t", "--instance", "1", "--", PY, str(tools / "agent.py"), "42")
    gp("run", "t", "--instance", "2", "--", PY, str(tools / "agent.py"), "41")
    checked = gp.json("check", "t", code=1)
    declared(results.CheckResult, checked)
    assert {i["verdict"] for i in checked["instances"]} == {"pass", "fail"}
    parallel = repo / ".git" / "parallel"
    for inst in checked["instances"]:
        declared(pack.EvidencePack, json.loads(Path(inst["evidence"]["path"]).read_text()))
    picked = gp.json("pick", "t")
    declared(results.PickResult, picked)
    declared(records.PickRecord, json.loads((parallel / "picks" / picked["run_id"] / "main.json").read_text()))
    declared(results.StatusResult, {k: v for k, v in gp.json("status", "t").items() if k != "rows"})
    declared(results.StatusListResult, gp.json("status"))
    gp.json("merge", "t")
    import yaml

    declared(records.RunRecord, yaml.safe_load((parallel / "runs" / "t.yaml").read_text()))
    assert git(repo, "notes", "--ref=parallel", "list")


# -- the config file ----------------------------------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("instances: 0\n", ".gitparallel.yaml: instances (line 1): must be an integer 1..64, got 0"),
    ("merge:\n  retries: 2\n  verify: sometimes\n",
     ".gitparallel.yaml: merge.verify (line 3): must be one of auto, always, changed, never, got 'sometimes'"),
    ("gates:\n  - name: a\n    run: [make]\n    timeout: .inf\n",
     ".gitparallel.yaml: gates[0].timeout (line 4): must be a number of seconds above 0 and at most 604800, got inf"),
    ("gates:\n  - name: a\n", ".gitparallel.yaml: gates[0].run (line 2): is missing: it must be a command: "
                              "a list of strings or one string"),
    ("gates:\n  - name: a\n    run: null\n",  # once frozen as a gate without a command
     ".gitparallel.yaml: gates[0].run (line 3): must be a command: a list of strings or one string, got None"),
    ("gates:\n  - name: a\n    run: [make]\n    requires: [b]\n",
     ".gitparallel.yaml: gates[0].requires (line 4): requires 'b', which is not a gate declared before it"),
    ("instances: 0\nbogus: 1\n", ".gitparallel.yaml: bogus (line 2): unknown key (known: added_tests, agents, "),
    ("setup:\n  run: make\n  keep: [/abs]\n", ".gitparallel.yaml: setup.keep (line 3): '/abs' must be relative "
                                                "to the top of the checkout, inside it and not in .git"),
])
def test_a_bad_config_is_refused_naming_key_line_and_what_was_expected(text: str, message: str) -> None:
    from gitflow_parallel import config
    from gitflow_parallel.errors import CONFIG_INVALID

    with pytest.raises(ParallelError) as err:
        config.parse(text)
    assert err.value.code == CONFIG_INVALID and err.value.message.startswith(message), err.value.message


def test_the_frozen_config_comes_from_its_declaration() -> None:
    from gitflow_parallel import config, config_schema

    cfg = config.parse("sandbox_network: off\nmerge: {verify: true}\nsetup: make build\n"
                       "gates:\n  - {name: t, run: 'make test', env: {N: 2}, requires: null}\n")
    assert cfg["sandbox_network"] == "off" and cfg["merge"]["verify"] == "always"
    assert cfg["setup"] == {"run": ["make", "build"], "cache_key": [], "keep": [], "path": [], "timeout": 1800,
                            "worktrees": False}
    assert cfg["gates"] == [{"name": "t", "run": ["make", "test"], "mode": "enforced", "timeout": 600, "tracks": None,
                             "requires": [], "inputs": [], "outputs": [], "env": {"N": "2"}, "setup": True,
                             "hidden": None}]
    assert config.parse(None) == config.DEFAULTS == config.validate({})
    assert set(schema.fields(config_schema.FrozenConfig)) == {*config.DEFAULTS, *config.OPTIONAL}
    assert "agents" not in config.DEFAULTS and config.OPTIONAL == dict.fromkeys(
        ["agents", "notify", "sandbox_write", "distinguish", "gate_network"])
    schema.check(config_schema.FrozenConfig, cfg, closed=True)  # a frozen config is its own valid input
