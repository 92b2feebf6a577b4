"""Reviewing and sharing runs: diff, show, logs, evidence refs, push/fetch
between real clones of a real bare remote, notes that inform, prune."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import AGENT, GP, git, make_repo, snapshot

PY = sys.executable


# Passes while the *.num files sum to at most 10; says the sum either way.
GATE = textwrap.dedent("""
    import pathlib, sys
    total = sum(int(p.read_text()) for p in pathlib.Path(".").rglob("*.num"))
    for k in range(int(pathlib.Path("NOISE").read_text()) if pathlib.Path("NOISE").exists() else 0):
        print("noise line", k)
    print("sum", total)
    sys.exit(0 if total <= 10 else 1)
""")

SCORE = textwrap.dedent("""
    import pathlib
    total = sum(int(p.read_text()) for p in pathlib.Path(".").rglob("*.num"))
    print(max(0, min(10, 10 - total)))
""")


def tools(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir(exist_ok=True)
    for name, text in (("agent.py", AGENT), ("gate.py", GATE), ("score.py", SCORE)):
        (folder / name).write_text(text)
    return folder


def config(t: Path, extra: str = "") -> str:
    return textwrap.dedent(f"""
        max_total: 12
        gates:
          - name: sum
            run: [{PY}, {t / 'gate.py'}]
        score:
          command: [{PY}, {t / 'score.py'}]
    """) + extra


def agent(gp: GP, t: Path, task: str, inst: str, *files: str) -> None:
    gp("run", task, "--instance", inst, "--", PY, str(t / "agent.py"), *files)


def three_attempts(gp: GP, t: Path, task: str = "t") -> dict:
    """1 passes (score 7), 2 passes (score 5, two files), 3 fails its gate."""
    gp("spawn", task, "-n", "3")
    agent(gp, t, task, "1", "a.num=3")
    agent(gp, t, task, "2", "a.num=5", "b.txt=x\\ny\\n")
    agent(gp, t, task, "3", "a.num=20")
    assert "FAIL sum" in gp("check", task, code=1).stdout
    gp("pick", task)
    return gp.json("status", task)["run"]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, GP, Path]:
    t = tools(tmp_path)
    repo = make_repo(tmp_path / "repo", files={"README.md": "hello\n"}, config=config(t))
    return repo, GP(repo), t


def numstat(repo: Path, a: str, b: str) -> dict[str, tuple[int, int]]:
    out = {}
    for line in git(repo, "diff", "--numstat", a, b).splitlines():
        added, removed, path = line.split("\t")
        out[path] = (int(added), int(removed))
    return out


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_diff_stat_show_logs_on_three_attempts(setup: tuple[Path, GP, Path]) -> None:
    repo, gp, t = setup
    run = three_attempts(gp, t)
    base = run["base"]["commit"]
    tips = {i["id"]: git(repo, "rev-parse", i["branch"]) for i in run["instances"]}

    # diff --stat: the README's side-by-side table, numbers as git counts them.
    text = gp("diff", "t", "--stat").stdout.splitlines()
    assert text[1].split() == ["FILE", "1", "2", "3"]
    assert text[2].split() == ["a.num", "A", "+1", "-0", "A", "+1", "-0", "A", "+1", "-0"]
    assert text[3].split() == ["b.txt", ".", "A", "+2", "-0", "."]
    assert text[-1].split() == ["lines", "+1", "-0", "+3", "-0", "+1", "-0"]
    data = gp.json("diff", "t", "--stat")
    assert data["ok"] and data["mode"] == "base" and [a["id"] for a in data["attempts"]] == ["1", "2", "3"]
    for a in data["attempts"]:
        assert a["commit"] == tips[a["id"]] and "patch" not in a
        assert {f["path"]: (f["added"], f["removed"]) for f in a["files"]} == numstat(repo, base, a["commit"])
    assert [r["path"] for r in data["files"]] == ["a.num", "b.txt"]
    assert data["files"][1]["attempts"]["1"] is None

    # Without --stat: each attempt's patch, the same change git shows.
    full = gp.json("diff", "t", "2")
    patch = full["attempts"][0]["patch"]
    assert "+x\n+y\n" in patch and "b/b.txt" in patch
    assert subprocess.run(["git", "apply", "--check", "-"], cwd=repo, input=patch, text=True).returncode == 0
    # Two ids: from one attempt to the other.
    between = gp.json("diff", "t", "1", "2")
    assert between["mode"] == "between" and [a["id"] for a in between["attempts"]] == ["1", "2"]
    assert {f["path"]: (f["added"], f["removed"]) for f in between["files"]} == numstat(repo, tips["1"], tips["2"])
    assert "-3" in between["patch"] and "+5" in between["patch"]
    assert gp("diff", "t", "9", code=1).stderr.startswith("error[PARALLEL_BRANCH_NOT_FOUND]")

    # show: record, gates with their last log lines, score, why it won or lost.
    win = gp("show", "t", "1").stdout
    assert "evidence: fresh, verdict pass" in win and "score 7" in win
    assert "| sum 3" in win and "outcome: won track main by critic_first_pass over 2 other(s)" in win
    lost = gp.json("show", "t", "3")
    assert lost["outcome"] == {"picked": True, "won": False, "code": "PARALLEL_DEV_SELECTION_NO_PASS",
                               "why": "lost track main to 1: failed enforced gates: sum"}
    [gate] = lost["gates"]
    assert gate["name"] == "sum" and gate["passed"] is False and gate["exit_code"] == 1
    assert gate["tail"] == ["sum 20"] and gate["log_source"] == "file"
    assert lost["commit"] == tips["3"] and lost["pack"]["score"] == 0
    second = gp.json("show", "t", "2")
    assert second["outcome"]["won"] is False and second["outcome"]["why"].startswith("lost track main to 1: ranked below 1")

    # logs: a gate's whole log, and the agent's.
    log = gp("logs", "t", "3", "--gate", "sum").stdout
    assert log == Path(lost["gates"][0]["log"]).read_text() == "sum 20\n"
    agent_log = gp.json("logs", "t", "1")
    assert agent_log["which"] == "agent" and agent_log["source"] == "file"
    assert agent_log["path"] == run["instances"][0]["log"]
    refused = gp.json("logs", "t", "1", "--gate", "nope", code=1)
    assert refused["code"] == "PARALLEL_INVALID_NAME" and "sum" in refused["message"]
    assert "give --gate NAME or --agent, not both" in gp("logs", "t", "1", "--gate", "sum", "--agent", code=2).stderr


def test_logs_follow_prints_while_the_agent_runs(setup: tuple[Path, GP, Path], tmp_path: Path) -> None:
    repo, gp, t = setup
    go = tmp_path / "go"
    slow = tmp_path / "slow.py"
    slow.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        print("first", flush=True)
        while not pathlib.Path({str(go)!r}).exists():
            time.sleep(0.05)
        print("second", flush=True)
    """))
    gp("spawn", "t", "-n", "1")
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", PY, str(slow)], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            inst = gp.json("status", "t")["run"]["instances"][0]
            if inst["status"] == "running" and inst["log"] and Path(inst["log"]).exists() \
                    and "first" in Path(inst["log"]).read_text():
                break
            time.sleep(0.1)
        follower = subprocess.Popen(["git", "parallel", "logs", "t", "1", "--follow"], cwd=repo,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert follower.stdout is not None
        assert follower.stdout.readline() == "first\n"  # printed while the agent still waits
        go.write_text("")
        rest, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err
        assert rest == "second\n"
    finally:
        go.write_text("")
        runner.communicate(timeout=60)
    assert runner.returncode == 0


@pytest.mark.slow  # a whole flow; the default tier keeps under 150 s
def test_evidence_refs_hold_pack_and_capped_logs(tmp_path: Path) -> None:
    t = tools(tmp_path)
    repo = make_repo(tmp_path / "repo", files={"README.md": "hello\n", "NOISE": "50\n"},
                     config=config(t, "evidence_log_bytes: 200\n"))
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    agent(gp, t, "t", "1", "a.num=3")
    agent(gp, t, "t", "2", "a.num=4")
    gp("check", "t")
    run = gp.json("status", "t")["run"]
    for inst in run["instances"]:
        ref = f"refs/parallel/evidence/{run['run_id']}/{inst['id']}/0"
        pack = subprocess.run(["git", "show", f"{ref}:pack.json"], cwd=repo, capture_output=True).stdout
        assert hashlib.sha256(pack).hexdigest() == inst["evidence"]["sha256"]
        # The proven commit is the first parent: the code travels with its proof.
        assert git(repo, "rev-parse", f"{ref}^1") == git(repo, "rev-parse", inst["branch"])
        full = Path(json.loads(pack)["gates"][0]["log"]).read_bytes()
        kept = subprocess.run(["git", "show", f"{ref}:logs/{inst['id']}.0.gate-sum.log"], cwd=repo,
                              capture_output=True).stdout
        assert len(full) > 200
        assert kept == f"git-parallel: log truncated to its last 200 of {len(full)} bytes\n".encode() + full[-200:]
        manifest = json.loads(git(repo, "show", f"{ref}:logs.json"))
        assert manifest[f"{inst['id']}.0.gate-sum.log"] == {
            "bytes": len(full), "sha256": hashlib.sha256(full).hexdigest(), "truncated": True}
        assert f"{inst['id']}.0.log" in manifest  # the agent's log
    # A re-check of the same attempt fast-forwards the ref; the older pack stays in its history.
    ref = f"refs/parallel/evidence/{run['run_id']}/2/0"
    before = git(repo, "rev-parse", ref)
    gp("check", "t", "--instance", "2")
    after = git(repo, "rev-parse", ref)
    assert after != before and git(repo, "rev-parse", f"{ref}^2") == before
    assert git(repo, "merge-base", "--is-ancestor", before, after) == ""


def bare_and_clones(tmp_path: Path, t: Path) -> tuple[Path, Path, Path]:
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = make_repo(tmp_path / "seed", files={"README.md": "hello\n"}, config=config(t))
    git(seed, "push", "-q", str(origin), "main")
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(origin), str(a))
    git(tmp_path, "clone", "-q", str(origin), str(b))
    return origin, a, b


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_run_merged_in_one_clone_reads_in_another(tmp_path: Path) -> None:
    t = tools(tmp_path)
    origin, a, b = bare_and_clones(tmp_path, t)
    ga, gb = GP(a), GP(b)
    run = three_attempts(ga, t)
    landed = ga.json("merge", "t")["merge"]["landed"]
    git(a, "push", "-q", "origin", "main")
    pushed = ga.json("push")
    assert pushed["ok"] and "refs/notes/parallel" in pushed["pushed"]
    assert f"refs/parallel/runs/{run['run_id']}" in pushed["pushed"]

    # Meanwhile B made notes of its own: the remote's notes moved under B,
    # so B's push merges them (cat_sort_uniq) before it pushes.
    gb("spawn", "u", "-n", "1")
    agent(gb, t, "u", "1", "c.num=1")
    gb("check", "u")
    b_tip = git(b, "rev-parse", "parallel/u/1")
    pushed_b = gb.json("push")
    assert pushed_b["attempts"] == 1 and pushed_b["notes"] == {"refs/notes/parallel": "merged"}

    # B reads A's run as A does.
    git(b, "pull", "-q", "--ff-only")
    fetched = gb.json("fetch")
    assert fetched["notes"] == {"refs/notes/parallel": "up to date"}  # merged during its push
    note = git(b, "notes", "--ref=parallel", "show", landed).splitlines()
    assert note[0] == f"git-parallel: t won by 1 of 3 (sum pass, score 7), run {run['run_id']}"
    assert {json.loads(l)["kind"] for l in note[1:]} >= {"pick", "merge"}  # landed as one new commit
    winner = run["instances"][0]["head"]
    assert "evidence" in {json.loads(l)["kind"] for l in git(b, "notes", "--ref=parallel", "show", winner).splitlines()
                          if l.startswith("{")}
    assert any(json.loads(l)["kind"] == "evidence" for l in git(b, "notes", "--ref=parallel", "show", b_tip).splitlines())
    status = gb.json("status", "t")
    assert status["run"]["run_id"] == run["run_id"] and status["run"]["status"] == "merged"
    assert [i["live"]["evidence"] for i in status["run"]["instances"]] == ["fresh", "fresh", "fresh"]
    assert "(fetched: read from refs/parallel/runs/" in gb("status", "t").stdout
    shown = gb.json("show", "t", "1")
    assert shown["shared"] and shown["outcome"]["won"] and shown["landed"] == landed
    assert shown["gates"][0]["tail"] == ["sum 3"] and shown["gates"][0]["log_source"] == "ref"
    assert gb("logs", "t", "3", "--gate", "sum").stdout == "sum 20\n"
    assert gb.json("diff", "t", "--stat")["attempts"][1]["added"] == 3
    page = gb.json("report", "t", "--html", str(tmp_path / "b.html"))
    assert [x["winner"] for x in page["attempts"]] == [True, False, False]

    # A fetches B's notes back; both sides' lines are on B's tip.
    got = ga.json("fetch")
    assert got["notes"]["refs/notes/parallel"] in ("fast-forward", "merged")
    assert any(json.loads(l)["kind"] == "evidence" for l in git(a, "notes", "--ref=parallel", "show", b_tip).splitlines())
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=b, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_init_remote_refspecs_and_plain_fetch(tmp_path: Path) -> None:
    t = tools(tmp_path)
    origin, a, b = bare_and_clones(tmp_path, t)
    ga, gb = GP(a), GP(b)
    before = snapshot(b)
    refused = gb.json("init", "--remote", "nope", code=1)
    assert refused["code"] == "PARALLEL_REMOTE_NOT_FOUND"
    assert snapshot(b) == before and git(b, "config", "--get-all", "notes.rewriteRef", check=False) == ""
    out = gb.json("init", "--remote", "origin")
    specs = ["+refs/parallel/*:refs/parallel-remotes/origin/*", "+refs/notes/parallel:refs/notes/remotes/origin/parallel"]
    assert out["refspecs"]["added"] == specs
    assert git(b, "config", "--get-all", "remote.origin.fetch").splitlines() == [
        "+refs/heads/*:refs/remotes/origin/*", *specs]
    assert git(b, "config", "remote.origin.push", check=False) == ""  # a plain `git push` is unchanged
    assert gb.json("init", "--remote", "origin")["refspecs"]["added"] == []  # idempotent
    # A remote with no runs and no notes yet: nothing to do, no error.
    assert gb.json("fetch")["updated"] == [] and gb.json("push")["pushed"] == []

    run = three_attempts(ga, t)
    ga("merge", "t")
    git(a, "push", "-q", "origin", "main")
    ga("push", "origin")
    git(b, "fetch", "-q")  # plain git, with the refspecs init added
    assert git(b, "rev-parse", f"refs/parallel-remotes/origin/runs/{run['run_id']}")
    assert git(b, "for-each-ref", "refs/parallel/") == ""
    assert gb.json("show", "t", "2")["outcome"]["why"].startswith("lost track main to 1")
    refused = gb.json("push", "nope", code=1)
    assert refused["code"] == "PARALLEL_REMOTE_NOT_FOUND"


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_notes_inform_instead_of_shout(setup: tuple[Path, GP, Path]) -> None:
    repo, gp, t = setup
    base = git(repo, "rev-parse", "main")
    gp("spawn", "gone", "-n", "3")
    gp("abort", "gone")
    assert git(repo, "notes", "--ref=parallel", "list", check=False) == ""  # nothing on the base
    three_attempts(gp, t)
    gp("retry", "t", "3")  # a fresh attempt back on the base commit: noted nowhere
    assert git(repo, "notes", "--ref=parallel", "show", base, check=False) == ""
    run = gp.json("merge", "t")
    landed = run["merge"]["landed"]
    shown = git(repo, "log", "--notes=parallel", "-1", "--format=%N", landed).splitlines()
    assert shown[0] == f"git-parallel: t won by 1 of 3 (sum pass, score 7), run {run['run_id']}"
    assert all(l.startswith("{") for l in shown[1:] if l)
    assert "Notes" not in git(repo, "log", "-1", landed)  # plain git log: no displayRef


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_prune_removes_only_finished_runs_refs(setup: tuple[Path, GP, Path]) -> None:
    repo, gp, t = setup
    done = three_attempts(gp, t, "old")
    gp("merge", "old")
    gp("spawn", "live", "-n", "1")
    agent(gp, t, "live", "1", "z.num=1")
    gp("check", "live")
    live = gp.json("status", "live")["run"]
    ours = git(repo, "for-each-ref", "--format=%(refname)", f"refs/parallel/*/{done['run_id']}",
               f"refs/parallel/*/{done['run_id']}/*/*").splitlines()
    assert len(ours) == 7  # 3 archive + 3 evidence + 1 run record
    live_refs = git(repo, "for-each-ref", "--format=%(refname)", f"refs/parallel/evidence/{live['run_id']}").splitlines()
    assert live_refs

    assert gp.json("prune")["removed"] == []  # younger than 30 days
    before = snapshot(repo)
    plan = gp.json("prune", "--older-than", "0", "--dry-run")
    assert [e["run_id"] for e in plan["removed"]] == [done["run_id"]] and plan["count"] == 7
    assert sorted(plan["removed"][0]["refs"]) == sorted(ours)
    assert {"run_id": live["run_id"], "why": "live", "refs": len(live_refs)} in plan["kept"]
    assert snapshot(repo) == before
    text = gp("prune", "--older-than", "0").stdout
    assert f"removed 7 ref(s) of run {done['run_id']} (old, merged)" in text
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/parallel/").splitlines()
    assert not any(done["run_id"] in r for r in left) and set(live_refs) <= set(left)
    assert git(repo, "notes", "--ref=parallel", "show", "main")  # provenance stays
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    assert gp.json("prune", "--older-than", "soon", code=1)["code"] == "PARALLEL_INVALID_NAME"
