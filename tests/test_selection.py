"""Selection by behaviour: probe gates, `selection: cluster`, `selection:
tournament` with a judge, and the tie-break that never depends on timing.
Real repositories, real `git parallel` subprocesses, real agents and judges
(python scripts)."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, make_repo, snapshot

PY = sys.executable

# Five attempts at f(x) = x squared, each written differently.  The visible
# gate only checks f(2) == 4, which x + x and 2 ** x pass too.
VARIANTS = {
    "square_mul": "def f(x):\n    return x * x\n",
    "square_pow": "def f(x):\n    return x ** 2\n",
    "square_acc": "def f(x):\n    result = x\n    result *= x\n    return result\n",
    "double": "def f(x):\n    return x + x\n",
    "power_of_two": "def f(x):\n    return 2 ** x\n",
    "broken": "def f(x):\n    return 0\n",
}

# The agent writes the variant its instance was given (tools/plan.json).
AGENT = textwrap.dedent("""
    import json, os, pathlib, sys
    plan = json.loads(pathlib.Path(sys.argv[1]).read_text())
    pathlib.Path("impl.py").write_text(plan[os.environ["GIT_PARALLEL_INSTANCE"]])
""")

VISIBLE = textwrap.dedent("""
    import sys
    sys.path.insert(0, ".")
    from impl import f
    sys.exit(0 if f(2) == 4 else 1)
""")

# The probe prints behaviour on inputs the visible gate never tries, plus
# noise that must not split candidates: its cwd (each runs in its own
# checkout) and a line on stderr that differs every run.
PROBE = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, ".")
    from impl import f
    print("ran in", os.getcwd())
    print([f(x) for x in range(-3, 4)])
    print("took", time.time(), file=sys.stderr)
""")

# A judge that prefers the smaller diff, and says what it was shown.
JUDGE_SMALLER = textwrap.dedent("""
    import json, os, pathlib
    sides = [pathlib.Path(os.environ["GIT_PARALLEL_JUDGE_" + s]) for s in "AB"]
    sizes = []
    for side in sides:
        pack = json.loads((side / "evidence.json").read_text())
        worktree = pathlib.Path((side / "worktree").read_text().strip())
        sizes.append(len((side / "diff").read_bytes()))
        print(side.name, (side / "instance").read_text().strip(), (side / "commit").read_text().strip()[:12],
              "diff", sizes[-1], "verdict", pack["verdict"], "worktree", worktree.is_dir())
    print("A" if sizes[0] <= sizes[1] else "B")
""")

JUDGES = {
    "crash": "raise SystemExit('judge: out of tokens')\n",
    "garbage": "print('I think A is better')\nprint('maybe')\n",
    "hang": "import time\nprint('thinking', flush=True)\ntime.sleep(120)\nprint('A')\n",
}


def build(root: Path, plan: dict[str, str], selection: str = "cluster", probe: bool = True,
          judge: str | None = None, judge_timeout: float = 60, extra_gates: str = "") -> GP:
    tools = root / "tools"
    tools.mkdir(parents=True)
    (tools / "agent.py").write_text(AGENT)
    (tools / "visible.py").write_text(VISIBLE)
    (tools / "probe.py").write_text(PROBE)
    (tools / "plan.json").write_text(json.dumps({i: VARIANTS[v] for i, v in plan.items()}))
    config = textwrap.dedent(f"""
        max_total: 12
        selection: {selection}
        gates:
          - name: visible
            run: [{PY}, {tools / 'visible.py'}]
    """)
    if probe:
        config += f"  - name: behaviour\n    run: [{PY}, {tools / 'probe.py'}]\n    mode: probe\n"
    config += extra_gates
    if judge is not None:
        (tools / "judge.py").write_text(judge)
        config += f"judge:\n  command: [{PY}, {tools / 'judge.py'}]\n  timeout: {judge_timeout}\n"
    repo = make_repo(root / "repo", config=config)
    gp = GP(repo)
    gp("spawn", "t", "-n", str(len(plan)))
    gp("run", "t", "--", PY, str(tools / "agent.py"), str(tools / "plan.json"))
    return gp


def five() -> dict[str, str]:
    """Ids 1 and 2 are wrong but short; 3, 4 and 5 behave alike."""
    return {"1": "double", "2": "power_of_two", "3": "square_mul", "4": "square_pow", "5": "square_acc"}


def pick_record(gp: GP) -> dict:
    out = gp.json("pick", "t")
    assert len(out["picks"]) == 1
    return out["picks"][0]


# -- probe gates ------------------------------------------------------------------------
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_probe_records_a_signature_and_never_blocks(tmp_path: Path) -> None:
    gp = build(tmp_path, {"1": "double", "2": "square_mul", "3": "square_pow"})
    (tmp_path / "tools" / "probe.py").write_text(PROBE + "sys.exit(3)\n")  # a probe that always exits 3
    checked = gp.json("check", "t")
    for inst in checked["instances"]:
        assert inst["verdict"] == "pass", "a probe exiting 3 must not block"
        probe = next(g for g in inst["gates"] if g["name"] == "behaviour")
        assert probe["mode"] == "probe" and probe["exit_code"] == 3 and probe["signature"]["exit_code"] == 3
        assert probe["signature"]["over"] == "stdout"
        # The signature hashes stdout with the checkout's path replaced; stderr is apart.
        stdout = Path(probe["log"]).read_bytes()
        wt = stdout.split(b"ran in ", 1)[1].split(b"\n", 1)[0].decode()
        assert wt.startswith(str(gp.cwd.parent / f"{gp.cwd.name}.parallel" / ".judged" / "scratch+"))  # a clean checkout
        assert b"took" not in stdout and b"took" in Path(probe["stderr_log"]).read_bytes()
        expected = stdout.replace(wt.encode(), b"<worktree>")
        assert probe["signature"]["sha256"] == hashlib.sha256(expected).hexdigest()
    sigs = {i["id"]: next(g for g in i["gates"] if g["mode"] == "probe")["signature"]["sha256"]
            for i in checked["instances"]}
    assert sigs["2"] == sigs["3"] != sigs["1"]  # alike behaviour, alike signature, wherever it ran
    assert "seen behaviour" in gp("check", "t", "--instance", "1").stdout


@pytest.mark.unfenced("its probe also writes a file outside the checkout, to show what the glob leaves out")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_probe_outputs_globs_hash_the_files_it_wrote(tmp_path: Path) -> None:
    writer = tmp_path / "writer.py"
    writer.write_text(textwrap.dedent("""
        import pathlib, sys, time
        sys.path.insert(0, ".")
        from impl import f
        pathlib.Path("out").mkdir(exist_ok=True)
        pathlib.Path("out/values.txt").write_text(repr([f(x) for x in range(-3, 4)]))
        print("wrote at", time.time())  # stdout differs every run: not what is hashed
    """))
    gp = build(tmp_path / "p", {"1": "square_mul", "2": "square_pow", "3": "double", "4": "square_acc"}, probe=False,
               extra_gates=f"  - name: values\n    run: [{PY}, {writer}]\n    mode: probe\n    outputs: ['out/*.txt']\n")
    # A hostile attempt commits `out` as a symlink to a folder outside its checkout.
    outside = tmp_path / "outside"
    outside.mkdir()
    wt4 = Path(gp.json("status", "t")["run"]["instances"][3]["worktree"])
    (wt4 / "out").symlink_to(outside)
    git(wt4, "add", "out")
    git(wt4, "commit", "-qm", "out elsewhere")
    checked = gp.json("check", "t")
    sig = {i["id"]: next(g for g in i["gates"] if g["name"] == "values")["signature"] for i in checked["instances"]}
    assert sig["1"]["over"] == "outputs" and set(sig["1"]["files"]) == {"out/values.txt"}
    assert sig["1"]["files"]["out/values.txt"] == hashlib.sha256(b"[9, 4, 1, 0, 1, 4, 9]").hexdigest()
    assert sig["1"]["sha256"] == sig["2"]["sha256"] != sig["3"]["sha256"]
    # Outside files are never read: the symlinked attempt behaves right, but
    # its output left the checkout, so its signature names no file.
    assert (outside / "values.txt").exists() and sig["4"]["files"] == {}
    assert sig["4"]["sha256"] not in (sig["1"]["sha256"], sig["3"]["sha256"])


@pytest.mark.parametrize("extra, problem", [
    ("gates:\n  - {name: a, run: 'true', outputs: ['*.txt']}\n", "only a probe gate"),
    ("gates:\n  - {name: p, run: 'true', mode: probe}\n  - {name: e, run: 'true', requires: [p]}\n", "a probe"),
    ("gates:\n  - {name: a, run: 'true', mode: sometimes}\n", "enforced, observe, probe"),
    ("selection: tournament\n", "needs a judge command"),
    ("selection: cluster\njudge: {command: 'true'}\n", "only runs with selection: tournament"),
    ("selection: tournament\njudge: {command: 'true', timeout: 0}\n", "judge.timeout"),
    ("selection: tournament\njudge: {command: 'true', model: x}\n", "judge.model"),
])
def test_config_refuses_bad_probes_and_judges(tmp_path: Path, extra: str, problem: str) -> None:
    repo = make_repo(tmp_path / "repo", config=extra)
    gp = GP(repo)
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "2", code=1)
    assert "error[PARALLEL_CONFIG_INVALID]" in proc.stderr and problem in proc.stderr
    assert snapshot(repo) == before


def test_a_probe_may_require_a_gate_and_a_probe_another_probe(tmp_path: Path) -> None:
    cfg = ("selection: cluster\ngates:\n  - {name: e, run: 'true'}\n"
           "  - {name: p, run: 'true', mode: probe, requires: [e]}\n"
           "  - {name: q, run: 'true', mode: probe, requires: [p]}\n")
    gp = GP(make_repo(tmp_path / "repo", config=cfg))
    gp("spawn", "t", "-n", "1")


# -- cluster ----------------------------------------------------------------------------
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_cluster_picks_the_largest_behaviour_group(tmp_path: Path) -> None:
    gp = build(tmp_path, five())
    gp("check", "t")
    p = pick_record(gp)
    assert p["selection_method"] == "cluster"
    assert sorted(c["size"] for c in p["clusters"]) == [1, 1, 3]
    top = p["clusters"][0]
    assert top["size"] == 3 and top["members"] == ["3", "4", "5"]
    assert p["winner"]["id"] in top["members"]
    # Inside the cluster: fewest changed lines (3 and 4 have 2, 5 has 4), then id.
    assert p["winner"]["id"] == "3"
    assert p["decision"]["stage"] == "cluster_size"
    assert p["decision"]["winner"]["group_size"] == 3 and p["decision"]["runner_up"]["group_size"] == 1
    losers = {l["id"]: l["reason"] for l in p["losers"]}
    assert "shared by 1, the winner's by 3" in losers["1"] and "same behaviour as the winner 3" in losers["5"]
    assert [r["changed_lines"] for r in p["ranking"] if r["id"] in ("3", "5")] == [2, 4]
    # The same decision, for whoever reads the record on disk.
    run_id = p["run_id"]
    on_disk = json.loads((gp.cwd / ".git" / "parallel" / "picks" / run_id / "main.json").read_text())
    assert on_disk["clusters"] == p["clusters"] and on_disk["decision"] == p["decision"]
    text = gp("pick", "t").stdout
    assert "already picked" in text and "cluster" in text


def test_cluster_without_probes_is_one_cluster_decided_by_changed_lines(tmp_path: Path) -> None:
    gp = build(tmp_path, {"1": "square_acc", "2": "double", "3": "square_acc"}, probe=False)
    gp("check", "t")
    p = pick_record(gp)
    assert p["clusters"] == [{"signature": [], "members": ["1", "2", "3"], "size": 3}]
    assert p["winner"]["id"] == "2" and p["decision"]["stage"] == "changed_lines"


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_cluster_only_counts_candidates_that_passed_the_enforced_gates(tmp_path: Path) -> None:
    gp = build(tmp_path, {"1": "double", "2": "square_mul", "3": "square_pow", "4": "power_of_two"})
    # 3 and 4 are broken alike: they behave the same, but fail the visible gate.
    for inst in ("3", "4"):
        wt = Path(gp.json("status", "t")["run"]["instances"][int(inst) - 1]["worktree"])
        (wt / "impl.py").write_text("def f(x):\n    return 0\n")
        git(wt, "commit", "-qam", "broken")
    assert "FAIL visible" in gp("check", "t", code=1).stdout
    p = pick_record(gp)
    assert {m for c in p["clusters"] for m in c["members"]} == {"1", "2"}
    assert p["winner"]["id"] == "1"  # two clusters of one: fewest changed lines tie, then id
    assert p["decision"]["stage"] == "id"
    assert {l["id"] for l in p["losers"] if "failed enforced gates" in l["reason"]} == {"3", "4"}


# -- tournament ---------------------------------------------------------------------------
def _bracket(p: dict) -> list[tuple]:
    return [(m["round"], m["a"], m["b"], m["winner"], m["decided_by"]) for m in p["tournament"]["matches"]]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_tournament_is_reproducible_and_records_every_match(tmp_path: Path) -> None:
    picks = []
    for name in ("one", "two"):
        # No probe: every candidate enters.  Ids are not in diff-size order.
        gp = build(tmp_path / name, {"1": "square_acc", "2": "power_of_two", "3": "double", "4": "square_mul",
                                     "5": "square_pow"}, selection="tournament", probe=False, judge=JUDGE_SMALLER)
        gp("check", "t")
        picks.append(pick_record(gp))
    first, second = picks
    assert _bracket(first) == _bracket(second)
    assert first["winner"]["id"] == second["winner"]["id"]
    t = first["tournament"]
    assert t["entrants"] == ["1", "2", "3", "4", "5"] and t["judge"][-1].endswith("judge.py")
    played = [m for m in t["matches"] if m["b"] is not None]
    assert [(m["round"], m["a"], m["b"]) for m in played][:2] == [(1, "1", "2"), (1, "3", "4")]
    assert len(played) == 4 and all(m["decided_by"] == "judge" for m in played)
    assert [m["a"] for m in t["matches"] if m["decided_by"] == "bye"] == ["5", "5"]
    for m in played:
        out = m["judge"]["output"]
        assert f"A {m['a']} " in out and f"B {m['b']} " in out and "verdict pass worktree True" in out
        assert Path(m["judge"]["log"]).read_text() == out and m["judge"]["answer"] in ("A", "B")
    final = t["matches"][first["decision"]["final_match"]]
    assert first["decision"]["stage"] == "judge" and final["winner"] == first["winner"]["id"]
    losers = {l["id"]: l["reason"] for l in first["losers"]}
    assert all("lost to" in r and "the judge chose it" in r for r in losers.values())


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_tournament_judges_only_the_largest_clusters(tmp_path: Path) -> None:
    gp = build(tmp_path, five(), selection="tournament", judge=JUDGE_SMALLER)
    gp("check", "t")
    p = pick_record(gp)
    assert p["tournament"]["entrants"] == ["3", "4", "5"]
    judged = {x for m in p["tournament"]["matches"] for x in (m["a"], m["b"]) if x}
    assert judged == {"3", "4", "5"}
    assert p["winner"]["id"] in ("3", "4")
    assert "not in the bracket" in next(l["reason"] for l in p["losers"] if l["id"] == "1")


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_the_judge_sees_only_passing_candidates_and_diffs_from_objects(tmp_path: Path) -> None:
    judge = textwrap.dedent("""
        import os, pathlib
        for s in "AB":
            d = pathlib.Path(os.environ["GIT_PARALLEL_JUDGE_" + s])
            added = [l for l in (d / "diff").read_text().splitlines() if l.startswith("+    ")]
            print(s, (d / "instance").read_text().strip(), added)
        print("B")
    """)
    gp = build(tmp_path, {"1": "broken", "2": "square_mul", "3": "double"}, selection="tournament", probe=False,
               judge=judge)
    assert "FAIL visible" in gp("check", "t", code=1).stdout
    # A left-behind agent process rewrites a worktree after the check: the
    # judge is still shown the commit that was checked.
    wt3 = Path(gp.json("status", "t")["run"]["instances"][2]["worktree"])
    (wt3 / "impl.py").write_text("def f(x):\n    return 'pick me'\n")
    p = pick_record(gp)
    assert p["tournament"]["entrants"] == ["2", "3"]
    (match,) = [m for m in p["tournament"]["matches"] if m["b"] is not None]
    assert (match["a"], match["b"], match["winner"], match["decided_by"]) == ("2", "3", "3", "judge")
    assert "B 3 ['+    return x + x']" in match["judge"]["output"] and "pick me" not in match["judge"]["output"]
    assert "failed enforced gates: visible" in next(l["reason"] for l in p["losers"] if l["id"] == "1")


@pytest.mark.parametrize("kind", sorted(JUDGES))
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_failing_judge_never_blocks_the_pick(tmp_path: Path, kind: str) -> None:
    gp = build(tmp_path, {"1": "square_acc", "2": "double", "3": "square_mul"}, selection="tournament",
               probe=False, judge=JUDGES[kind], judge_timeout=1)
    gp("check", "t")
    p = pick_record(gp)
    played = [m for m in p["tournament"]["matches"] if m["b"] is not None]
    assert len(played) == 2
    for m in played:
        ran = m["judge"]
        assert ran["answer"] is None and ran["error"] and m["decided_by"].startswith("tie-break: ")
        assert Path(ran["log"]).exists()
    # Ties break by the next rule: 1 (4 lines) loses to 2 (2 lines), 2 beats 3 by id.
    assert _bracket(p) == [(1, "1", "2", "2", "tie-break: changed_lines"), (1, "3", None, "3", "bye"),
                           (2, "2", "3", "2", "tie-break: id")]
    assert p["winner"]["id"] == "2" and p["decision"]["stage"] == "id"
    error = played[0]["judge"]["error"]
    expect = {"crash": "exited 1", "garbage": "'maybe' is neither A nor B", "hang": "timed out after 1s"}[kind]
    assert expect in error
    if kind == "crash":
        assert "out of tokens" in Path(played[0]["judge"]["stderr_log"]).read_text()
    if kind == "hang":
        assert "thinking" in played[0]["judge"]["output"]
    assert "the judge gave no answer" in next(l["reason"] for l in p["losers"] if l["id"] == "1")


@pytest.mark.unfenced("its judge changes the run record while it runs, as a person could")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_the_judge_runs_outside_the_lock_and_a_changed_field_is_refused(tmp_path: Path) -> None:
    # A judge that re-checks a candidate mid-pick: it needs the project lock
    # (so pick must not hold it), and its new evidence changes what the
    # judge was deciding between, so the pick must refuse, writing nothing.
    judge = textwrap.dedent(f"""
        import os, pathlib, subprocess
        marker = pathlib.Path({str(tmp_path / 'rechecked')!r})
        if not marker.exists():
            marker.write_text("x")
            subprocess.run(["git", "parallel", "check", "t", "--instance", "3"], cwd={str(tmp_path / 'repo')!r},
                           check=True, timeout=60)
        print("A")
    """)
    gp = build(tmp_path, {"1": "square_acc", "2": "double", "3": "square_mul"}, selection="tournament",
               probe=False, judge=judge, judge_timeout=90)
    gp("check", "t")
    proc = gp("pick", "t", code=1)
    assert "error[PARALLEL_RUN_REVISION_CONFLICT]" in proc.stderr and "changed while the judge ran" in proc.stderr
    record = gp.json("status", "t")["run"]
    assert not record.get("picks") and record["status"] != "picked"
    assert not list((gp.cwd / ".git" / "parallel" / "picks").rglob("*.json"))
    assert "refs/notes/parallel" in git(gp.cwd, "for-each-ref")  # the judge's check did run, under its own lock
    # Asked again, with nothing moving, the pick goes through.
    assert pick_record(gp)["selection_method"] == "tournament"


# -- the tie-break ----------------------------------------------------------------------
@pytest.mark.parametrize("selection", ["critic_first_pass", "majority_vote", "cluster"])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_checks_in_different_orders_pick_the_same_winner(tmp_path: Path, selection: str) -> None:
    winners = []
    for name, order in (("forward", ["1", "2", "3"]), ("backward", ["3", "2", "1"])):
        gp = build(tmp_path / name, {"1": "square_acc", "2": "square_pow", "3": "square_mul"},
                   selection=selection, probe=False)
        for inst in order:
            gp("check", "t", "--instance", inst)
        p = pick_record(gp)
        winners.append((p["winner"]["id"], p["decision"]["stage"], p["decision"]["winner"], p["decision"]["runner_up"]))
    assert winners[0] == winners[1]
    # 2 and 3 have 2 changed lines, 1 has 4: the tie of 2 and 3 goes to the id.
    winner, stage, figures, runner_up = winners[0]
    assert winner == "2" and stage == "id"
    assert figures["changed_lines"] == 2 and figures["score"] is None and runner_up["id"] == "3"


def test_ids_sort_naturally() -> None:
    from gitflow_parallel.state.picks import id_key

    assert sorted(["10", "2", "1", "a-10", "a-2", "b-1"], key=id_key) == ["1", "2", "10", "a-2", "a-10", "b-1"]
