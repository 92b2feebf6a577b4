"""Mixed agents in one run: `run --agent NAME=CMD --split`, `agents:` in the
config, the agent recorded per instance and named by status, show, the
report, the pick note and `stats`.  Real git, real agent processes (python
scripts named by --agent), real gates."""

from __future__ import annotations

import pytest

import json
import shlex
import sys
import textwrap
from pathlib import Path

from conftest import GP, git, make_repo

PY = sys.executable

# Writes <name>.txt holding its own agent name; fails (exit 1) when told to.
AGENT = textwrap.dedent("""
    import os, sys
    name = sys.argv[1]
    open(name + "-" + os.environ["GIT_PARALLEL_INSTANCE"] + ".txt", "w").write(name + "\\n")
    sys.exit(1 if len(sys.argv) > 2 and sys.argv[2] == "fail" else 0)
""")


def setup_repo(tmp_path: Path, extra: str = "") -> tuple[Path, GP, Path]:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "agent.py").write_text(AGENT)
    config = textwrap.dedent(f"""
        max_total: 12
        gates:
          - name: ok
            run: [{PY}, -c, "pass"]
    """) + extra
    repo = make_repo(tmp_path / "repo", config=config)
    return repo, GP(repo), tools / "agent.py"


def cmd(script: Path, *args: str) -> str:
    return shlex.join([PY, str(script), *args])


def instances(gp: GP, task: str) -> dict[str, dict]:
    return {i["id"]: i for i in gp.json("status", task)["run"]["instances"]}


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_two_agents_split_two_to_one_are_recorded_and_named(tmp_path: Path) -> None:
    repo, gp, script = setup_repo(tmp_path)
    gp("spawn", "T", "-n", "3")
    out = gp("run", "T", "--agent", f"alpha={cmd(script, 'alpha')}", "--agent", f"beta={cmd(script, 'beta')}",
             "--split", "alpha:2,beta:1").stdout
    assert "1 (alpha)" in out and "3 (beta)" in out
    insts = instances(gp, "T")
    assert {i: insts[i]["agent"] for i in insts} == {"1": "alpha", "2": "alpha", "3": "beta"}
    # each instance ran its own agent's command: the files on the branches say so
    for i, name in (("1", "alpha"), ("2", "alpha"), ("3", "beta")):
        assert git(repo, "show", f"parallel/T/{i}:{name}-{i}.txt") == name
    status = gp("status", "T").stdout.splitlines()
    header = next(line for line in status if line.startswith("ID"))
    assert header.split()[:3] == ["ID", "TRACK", "AGENT"]
    assert [line.split()[2] for line in status if line.split()[:1] in (["1"], ["2"], ["3"])] == [
        "alpha", "alpha", "beta"]
    assert "agent beta" in gp("show", "T", "3").stdout
    # the instance note on each tip names its agent
    tip = git(repo, "rev-parse", "parallel/T/3")
    note = [json.loads(x) for x in git(repo, "notes", "--ref=parallel", "show", tip).splitlines() if x.startswith("{")]
    assert any(n["kind"] == "instance" and n.get("agent") == "beta" for n in note)

    gp("check", "T")
    pick = gp.json("pick", "T")["picks"][0]
    winner = pick["winner"]
    assert winner["agent"] == insts[winner["id"]]["agent"]
    lines = [json.loads(x) for x in git(repo, "notes", "--ref=parallel", "show", winner["commit"]).splitlines()
             if x.startswith("{")]
    assert any(n["kind"] == "pick" and n["agent"] == winner["agent"] for n in lines)
    page = Path(gp.json("report", "T")["path"]).read_text()
    assert page.count('data-role="agent">alpha<') == 2 and page.count('data-role="agent">beta<') == 1
    # ... and stats: alpha's two attempts, beta's one, the win on the winner's agent
    rows = {a["agent"]: a for a in gp.json("stats")["agents"]}
    assert {a: (r["attempts"], r["wins"]) for a, r in rows.items()} == {
        winner["agent"]: (2 if winner["agent"] == "alpha" else 1, 1),
        {"alpha": "beta", "beta": "alpha"}[winner["agent"]]: (1 if winner["agent"] == "alpha" else 2, 0)}
    assert {line.split()[0] for line in gp("stats").stdout.splitlines()[1:3]} == {"alpha", "beta"}


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_agents_from_the_config_and_a_retry_keeps_its_agent(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    extra = textwrap.dedent(f"""
        agents:
          commands:
            good: [{PY}, {tools / 'agent.py'}, good]
            bad: [{PY}, {tools / 'agent.py'}, bad, fail]
          split: {{good: 1, bad: 3}}
    """)
    repo, gp, script = setup_repo(tmp_path, extra)
    gp("spawn", "T", "-n", "4")
    ran = gp("run", "T", code=1)  # no command: the config's agents by its split, in name order
    assert "(failed or aborted: 1, 2, 3)" in ran.stdout, ran.stdout
    insts = instances(gp, "T")
    assert [insts[i]["agent"] for i in "1234"] == ["bad", "bad", "bad", "good"]
    assert [insts[i]["status"] for i in "1234"] == ["failed", "failed", "failed", "succeeded"]
    gp("retry", "T", "2")
    ran = gp("run", "T", "--instance", "2", code=1)  # its retry runs the same agent
    assert "(failed or aborted: 2)" in ran.stdout, ran.stdout
    two = instances(gp, "T")["2"]
    assert two["agent"] == "bad" and two["attempt"] == 1 and two["history"][0]["agent"] == "bad"
    assert git(repo, "show", "parallel/T/2:bad-2.txt") == "bad"
    # a plain command replaces the agent of what it runs
    gp("retry", "T", "3")
    gp("run", "T", "--instance", "3", "--", PY, str(script), "plain")
    three = instances(gp, "T")["3"]
    assert "agent" not in three and three["status"] == "succeeded"


def test_bad_agent_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    repo, gp, script = setup_repo(tmp_path)
    gp("spawn", "T", "-n", "2")
    err = gp("run", "T", "--agent", f"a={cmd(script, 'a')}", "--split", "a:1,zz:1", code=None).stderr
    assert "zz" in err and "error[" in err
    err = gp("run", "T", "--agent", "a", code=None).stderr
    assert "NAME=CMD" in err
    err = gp("run", "T", "--agent", f"a={cmd(script, 'a')}", "--", PY, "-c", "pass", code=None).stderr
    assert "not both" in err
    assert all(i["status"] == "pending" and "agent" not in i for i in instances(gp, "T").values())
    bad = make_repo(tmp_path / "bad", config="agents:\n  commands: {a: [x]}\n  split: {b: 1}\n")
    err = GP(bad)("spawn", "T", code=None).stderr
    assert "agents.split" in err and "PARALLEL_CONFIG_INVALID" in err
