"""`git parallel stats` over runs made here: the win rates a person computes
from which agent won each run, and `run --split auto` following them.  The
runs are made by the verbs in-process (real git, real agent processes)."""

from __future__ import annotations

import pytest

import shlex
import sys
import textwrap
from pathlib import Path

from conftest import GP, make_repo
from gitflow_parallel.commands import check as check_cmd
from gitflow_parallel.commands import pick as pick_cmd
from gitflow_parallel.commands import run as run_cmd
from gitflow_parallel.commands import spawn as spawn_cmd
from gitflow_parallel.state.project import Project

PY = sys.executable

# argv: NAME WINS_IN FAILS_IN.  Writes one line in the tasks it should win,
# five in the others (critic_first_pass then picks the fewest changed
# lines); exits 1 in the tasks it should fail.
AGENT = textwrap.dedent("""
    import os, sys
    name, wins, fails = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
    task = os.environ["GIT_PARALLEL_TASK"]
    lines = 1 if task in wins else 5
    open(name + ".txt", "w").write("".join(f"{name} {k}\\n" for k in range(lines)))
    sys.exit(1 if task in fails else 0)
""")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_stats_win_rates_by_hand_and_split_auto_follows_them(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    repo = make_repo(tmp_path / "repo", config=f"max_total: 12\ngates:\n  - name: ok\n    run: [{PY}, -c, 'pass']\n")
    project = Project.open(repo)

    def agent(name: str, wins: str, fails: str = "-") -> list[str]:
        return [PY, str(script), name, wins, fails]

    # Five runs of one alpha and one beta each.  alpha wins r1, r2, r3 (fewer
    # lines) and r5 (beta fails there); beta wins r4.
    agents = {"alpha": agent("alpha", "r1,r2,r3,r5"), "beta": agent("beta", "r4", "r5")}
    for task in ("r1", "r2", "r3", "r4", "r5"):
        spawn_cmd.spawn(project, task, n=2)
        run_cmd.run(project, task, [], agent_commands=agents, split="alpha:1,beta:1")
        check_cmd.check(project, task)
        pick_cmd.pick(project, task)
    # By hand: alpha 5 attempts, 5 passes, 4 wins; beta 5 attempts, 4 passes
    # (its r5 attempt failed), 1 win.
    gp = GP(repo)
    out = gp.json("stats")
    rows = {a["agent"]: a for a in out["agents"]}
    assert out["runs"] == 5 and set(rows) == {"alpha", "beta"}
    assert (rows["alpha"]["attempts"], rows["alpha"]["passes"], rows["alpha"]["wins"]) == (5, 5, 4)
    assert (rows["beta"]["attempts"], rows["beta"]["passes"], rows["beta"]["wins"]) == (5, 4, 1)
    assert rows["alpha"]["win_rate"] == 4 / 5 and rows["beta"]["win_rate"] == 1 / 5
    assert rows["alpha"]["pass_rate"] == 1.0 and rows["beta"]["pass_rate"] == 4 / 5
    assert rows["alpha"]["median_lines_changed"] == 1 and rows["beta"]["median_lines_changed"] == 5
    assert rows["alpha"]["median_retries_to_pass"] == 0 and rows["alpha"]["median_time_to_pass_s"] > 0
    text = gp("stats").stdout
    assert [line.split()[:5] for line in text.splitlines()[1:3]] == [
        ["alpha", "5", "5", "100%", "80%"], ["beta", "5", "5", "80%", "20%"]]
    assert gp.json("stats", "--since", "2999-01-01")["agents"] == []

    # split auto over 6 instances and three agents (gamma never ran here):
    # one each, the other three by win rate (0.8 : 0.2 : 0 of 6 = 4.8, 1.2,
    # 0), each to the agent furthest below its share: alpha, alpha, alpha.
    # So alpha 4, beta 1, gamma 1, handed out best first.
    spawn_cmd.spawn(project, "next", n=6)
    gamma = shlex.join(agent("gamma", "-"))
    gp("run", "next", "--agent", f"alpha={shlex.join(agents['alpha'])}", "--agent",
       f"beta={shlex.join(agents['beta'])}", "--agent", f"gamma={gamma}", "--split", "auto")
    insts = gp.json("status", "next")["run"]["instances"]
    assert [i["agent"] for i in insts] == ["alpha"] * 4 + ["beta", "gamma"]
