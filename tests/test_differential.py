"""`selection: differential`: inputs generated from the attempts' diffs
(examples/distinguish_functions.py as the distinguish command), every
passing attempt run on them in a clean checkout, the largest group of
alike behaviour picked; the record holds the inputs and outputs; a
generator that fails or writes nothing falls back and says so; an attempt
that rewrites the distinguish script cannot change the verdict.  Real
repositories, real `git parallel` subprocesses, real agents."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, ROOT, git, make_repo

PY = sys.executable
SCRIPT = (ROOT / "examples" / "distinguish_functions.py").read_text()
STUB = "def f(x):\n    raise NotImplementedError\n"
DOUBLE = "def f(x):\n    return x + x\n"          # passes f(2) == 4, wrong elsewhere
SQUARE_MUL = "def f(x):\n    return x * x\n"
SQUARE_POW = "def f(x):\n    return x ** 2\n"
# The cheater's runner answers as a square would, whatever its impl.py does.
CHEAT = SCRIPT.replace("fn, shown = getattr(target, name), _shown", "fn, shown = (lambda x: x * x), _shown")

AGENT = textwrap.dedent("""
    import json, os, pathlib, sys
    plan = json.loads(pathlib.Path(sys.argv[1]).read_text())
    for path, text in plan[os.environ["GIT_PARALLEL_INSTANCE"]].items():
        pathlib.Path(path).write_text(text)
""")
VISIBLE = "import sys\nsys.path.insert(0, '.')\nfrom impl import f\nsys.exit(0 if f(2) == 4 else 1)\n"
# Says how many checks ran, as a test runner would: a hidden gate needs a count.
HIDDEN = ("import sys\nsys.path.insert(0, '.')\nfrom impl import f\n"
          "ok = all(f(x) == x * x for x in range(-5, 9))\n"
          "print('1 passed' if ok else '1 failed')\nsys.exit(0 if ok else 1)\n")
DISTINGUISH = f"""\
distinguish:
  command: [{PY}, tools/distinguish.py, generate]
  run: [{PY}, tools/distinguish.py, run]
  timeout: 60
"""


def build(root: Path, plan: dict[str, dict[str, str]], distinguish: str = DISTINGUISH) -> GP:
    outside = root / "outside"
    (outside / "hidden").mkdir(parents=True)
    (outside / "hidden" / "hidden_check.py").write_text(HIDDEN)
    (outside / "agent.py").write_text(AGENT)
    (outside / "plan.json").write_text(json.dumps(plan))
    config = (f"max_total: 8\nselection: differential\n{distinguish}gates:\n"
              f"  - name: visible\n    run: [{PY}, tools/visible.py]\n"
              f"  - name: hidden\n    run: [{PY}, hidden_check.py]\n    mode: observe\n"
              f"    hidden: {outside / 'hidden'}\n")
    repo = make_repo(root / "repo", files={"impl.py": STUB, "tools/visible.py": VISIBLE,
                                           "tools/distinguish.py": SCRIPT}, config=config)
    gp = GP(repo)
    gp("spawn", "t", "-n", str(len(plan)))
    gp("run", "t", "--", PY, str(outside / "agent.py"), str(outside / "plan.json"))
    gp("check", "t")
    return gp


def three() -> dict[str, dict[str, str]]:
    """1 is wrong and first by id (the critic order picks it); 2 and 3 are
    right, written differently."""
    return {"1": {"impl.py": DOUBLE}, "2": {"impl.py": SQUARE_MUL}, "3": {"impl.py": SQUARE_POW}}


def hidden_passed(gp: GP, inst: str) -> bool:
    shown = gp.json("show", "t", inst)
    return next(g for g in shown["gates"] if g["name"] == "hidden")["passed"]


@pytest.mark.slow
def test_differential_picks_the_behaviour_most_attempts_share(tmp_path: Path) -> None:
    gp = build(tmp_path, three())
    out = gp.json("pick", "t")
    p = out["picks"][0]
    assert p["selection_method"] == "differential" and p["winner"]["id"] == "2"
    assert p["decision"] == {**p["decision"], "rule": "differential", "stage": "cluster_size"}
    assert hidden_passed(gp, "2") and hidden_passed(gp, "3") and not hidden_passed(gp, "1")
    assert [(c["members"], c["size"]) for c in p["clusters"]] == [(["2", "3"], 2), (["1"], 1)]
    ran = p["differential"]
    assert ran["status"] == "ran" and ran["fallback"] is None and ran["generator"]["exit_code"] == 0
    # The inputs are kept, hashed file by file and as a whole.
    stored = Path(ran["inputs"]["path"])
    assert stored.is_relative_to(gp.cwd / ".git" / "parallel" / "distinguish")
    cases = stored / "cases.json"
    assert ran["inputs"]["files"] == {"cases.json": hashlib.sha256(cases.read_bytes()).hexdigest()}
    assert {c["qualname"] for c in json.loads(cases.read_text())} == {"f"}
    # Each attempt's output: its stdout log, hashed; the two squares alike.
    outs = ran["outputs"]
    assert outs["2"]["sha256"] == outs["3"]["sha256"] != outs["1"]["sha256"]
    for i, o in outs.items():
        assert o["exit_code"] == 0 and o["commit"] == gp.json("show", "t", i)["commit"]
        assert hashlib.sha256(Path(o["log"]).read_bytes()).hexdigest() == o["sha256"]
    assert "-> 9" in Path(outs["2"]["log"]).read_text() and "-> 6" in Path(outs["1"]["log"]).read_text()
    assert "losers" in p and any("distinguishing inputs" in l["reason"] for l in p["losers"] if l["id"] == "1")
    # The note on the winner's commit names the inputs and the outputs.
    note = git(gp.cwd, "notes", "--ref=parallel", "show", p["winner"]["commit"])
    line = next(json.loads(l) for l in note.splitlines() if json.loads(l)["kind"] == "pick")
    assert line["differential"] == {"status": "ran", "fallback": None, "inputs": str(stored),
                                    "inputs_sha256": ran["inputs"]["sha256"],
                                    "outputs": {i: o["sha256"] for i, o in outs.items()}}
    shown = gp("show", "t", "1").stdout
    assert "distinguishing inputs: 1 file(s)" in shown and f"1: exit 0, stdout sha256 {outs['1']['sha256'][:16]}" in shown


@pytest.mark.slow
@pytest.mark.parametrize("command, code", [
    (f"[{PY}, -c, 'import sys; print(\"no model today\"); sys.exit(4)']", "PARALLEL_DISTINGUISH_FAILED"),
    (f"[{PY}, -c, 'print(\"nothing to say\")']", "PARALLEL_DISTINGUISH_EMPTY"),
])
def test_a_distinguish_command_that_fails_or_writes_nothing_falls_back(tmp_path: Path, command: str,
                                                                         code: str) -> None:
    gp = build(tmp_path, three(), distinguish=DISTINGUISH.replace(
        f"[{PY}, tools/distinguish.py, generate]", command))
    text = gp("pick", "t").stdout
    assert f"distinguish fell back to cluster: error[{code}]" in text
    p = gp.json("show", "t", "1")["differential"]
    assert p["status"] == "fallback" and p["fallback"]["code"] == code and "outputs" not in p
    pick = json.loads(next((gp.cwd / ".git" / "parallel" / "picks").rglob("main.json")).read_text())
    # The cluster rule decided (no probe: the critic order, 1 first by id), and the record says so.
    assert pick["winner"]["id"] == "1" and pick["decision"]["fallback"]["code"] == code
    assert pick["decision"]["stage"] == "id"
    if code.endswith("FAILED"):
        assert "exited 4" in pick["differential"]["fallback"]["error"]
        assert "no model today" in Path(pick["differential"]["generator"]["log"]).read_text()


@pytest.mark.slow
def test_an_attempt_that_rewrites_the_distinguish_script_changes_nothing(tmp_path: Path) -> None:
    plan = three()
    plan["1"]["tools/distinguish.py"] = CHEAT
    gp = build(tmp_path, plan)
    p = gp.json("pick", "t")["picks"][0]
    assert p["winner"]["id"] == "2"
    outs = p["differential"]["outputs"]
    assert outs["1"]["sha256"] != outs["2"]["sha256"]
    assert outs["1"]["judged_commit"] != outs["1"]["commit"]  # judged with the base's script
    # The cheat would have worked: its own script, in its own worktree, on the
    # same inputs, prints what the squares printed.
    worktree = Path(gp.json("show", "t", "1")["instance"]["worktree"])
    env = {**os.environ, "GIT_PARALLEL_DISTINGUISH_INPUTS": p["differential"]["inputs"]["path"]}
    own = subprocess.run([PY, "tools/distinguish.py", "run"], cwd=worktree, env=env, capture_output=True, check=True)
    assert hashlib.sha256(own.stdout).hexdigest() == outs["2"]["sha256"]


def test_differential_and_distinguish_go_together_in_the_config() -> None:
    from gitflow_parallel import config
    from gitflow_parallel.errors import ParallelError

    cfg = config.validate({"selection": "differential",
                           "distinguish": {"command": "python3 gen.py --seed 3", "run": ["python3", "run.py"]}})
    assert cfg["distinguish"] == {"command": ["python3", "gen.py", "--seed", "3"], "run": ["python3", "run.py"],
                                  "timeout": 300}
    assert "distinguish" not in config.validate({})  # absent stays absent (older frozen configs match)
    for data, words in (({"selection": "differential"}, "needs distinguish"),
                        ({"distinguish": {"command": "a", "run": "b"}}, "not critic_first_pass"),
                        ({"selection": "differential", "distinguish": {"command": "a"}}, "distinguish.run"),
                        ({"selection": "differential", "distinguish": {"command": "a", "run": "b", "seed": 1}},
                         "unknown key"),
                        ({"selection": "differential", "distinguish": ["a"]}, "must be a mapping")):
        with pytest.raises(ParallelError) as err:
            config.validate(data)
        assert err.value.code == "PARALLEL_CONFIG_INVALID" and words in err.value.message
