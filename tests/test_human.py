"""The human in the loop: a person's pick and unpick, retries of what failed
the gates with feedback, run --until-pass, work done by hand, run --tmux.
Real git, real agents (python scripts), real gates."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, snapshot, wait_for
import scenarios
from scenarios import shown_record as record

PY = sys.executable


# The gate: a tiny test runner.  Each file tests/test_*.txt names a file and
# the text it must hold; a failing one prints "FAILED <test name>".
GATE = textwrap.dedent("""
    import pathlib, sys
    failed = []
    for t in sorted(pathlib.Path("tests").glob("test_*.txt")):
        path, _, text = t.read_text().strip().partition(":")
        p = pathlib.Path(path)
        if not (p.exists() and text in p.read_text()):
            failed.append(t.stem)
    for name in failed:
        print("FAILED", name)
    print(len(failed), "failed")
    sys.exit(1 if failed else 0)
""")


def project(tmp_path: Path, extra: str = "", files: dict[str, str] | None = None) -> tuple[Path, GP]:
    base = {"README.md": "hello\n", "tests/test_greeting.txt": "greeting.txt:hello"}
    return scenarios.project(tmp_path, GATE, max_total=12, extra=extra, files=files or base)


def agent(gp: GP, task: str, inst: str, *files: str, code: int = 0) -> None:
    gp("run", task, "--instance", inst, "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files, code=code)


def notes_on(repo: Path, commit: str) -> list[dict]:
    # The JSON records (a landed commit also has one line for people, first).
    return [json.loads(l) for l in git(repo, "notes", "--ref=parallel", "show", commit).splitlines()
            if l.startswith("{")]


def three_passing(gp: GP) -> None:
    gp("spawn", "t", "-n", "3")
    agent(gp, "t", "1", "greeting.txt=hello world, a long one\\nwith two lines")
    agent(gp, "t", "2", "greeting.txt=hello")
    agent(gp, "t", "3", "greeting.txt=hello there")
    gp("check", "t")


# -- 1. pick --instance / unpick -----------------------------------------------------------
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_human_pick_lands_with_its_reason_in_the_landed_note(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    git(repo, "config", "user.email", "ada@example.com")
    three_passing(gp)
    out = gp.json("pick", "t", "--instance", "2", "--reason", "smaller diff")
    p = out["picks"][0]
    assert p["winner"]["id"] == "2" and p["selection_method"] == "human"
    assert p["picked_by"] == "ada@example.com" and p["reason"] == "smaller diff" and p["forced"] is False
    assert {l["id"] for l in p["losers"]} == {"1", "3"}
    assert all("ada@example.com picked 2 (smaller diff)" in l["reason"] for l in p["losers"])
    merged = gp.json("merge", "t")["merge"]
    assert git(repo, "rev-parse", "main") == merged["landed"]
    assert (repo / "greeting.txt").read_text() == "hello"
    pick_note = [n for n in notes_on(repo, merged["landed"]) if n["kind"] == "pick"]
    assert len(pick_note) == 1
    assert pick_note[0]["selection_method"] == "human" and pick_note[0]["reason"] == "smaller diff"
    assert pick_note[0]["picked_by"] == "ada@example.com" and pick_note[0]["winner"] == "2"


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_unpick_then_pick_another_before_merge_and_refused_after(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    three_passing(gp)
    first = gp.json("pick", "t", "--instance", "2", "--reason", "smaller diff")["picks"][0]
    run_id = first["run_id"]
    # A second pick of a picked track is refused and changes nothing.
    before = snapshot(repo)
    proc = gp("pick", "t", "--instance", "3", code=1)
    assert "PARALLEL_PICK_EXISTS" in proc.stderr and "unpick" in proc.stderr
    assert snapshot(repo) == before
    out = gp.json("unpick", "t")
    picks = repo / ".git" / "parallel" / "picks" / run_id
    retired = Path(out["retired"][0]["path"])
    assert retired.parent == picks / "retired" and not (picks / "main.json").exists()
    assert json.loads(retired.read_text())["winner"]["id"] == "2"
    rec = record(gp, "t")
    assert rec["status"] == "completed" and not rec["picks"]
    assert rec["retired_picks"][0]["winner"] == "2"
    gp("pick", "t", "--instance", "3")
    landed = gp.json("merge", "t")["merge"]["landed"]
    assert (repo / "greeting.txt").read_text() == "hello there"
    assert [n["winner"] for n in notes_on(repo, landed) if n["kind"] == "pick"] == ["3"]
    # The retired record is still there, never deleted.
    assert retired.exists()
    before = snapshot(repo)
    proc = gp("unpick", "t", code=1)
    assert "PARALLEL_BRANCH_TERMINAL" in proc.stderr and "merged" in proc.stderr
    assert snapshot(repo) == before


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_human_pick_needs_passing_evidence_unless_forced(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "greeting.txt=bye")
    agent(gp, "t", "2", "greeting.txt=hello")
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    before = snapshot(repo)
    proc = gp("pick", "t", "--instance", "1", code=1)
    assert "PARALLEL_DEV_SELECTION_NO_PASS" in proc.stderr and "failed enforced gates: tests" in proc.stderr
    assert "--force" in proc.stderr
    assert snapshot(repo) == before
    p = gp.json("pick", "t", "--instance", "1", "--force", "--reason", "the test is wrong")["picks"][0]
    assert p["forced"] is True and p["waived"] == ["it failed enforced gates: tests"]
    note = [n for n in notes_on(repo, p["winner"]["commit"]) if n["kind"] == "pick"][0]
    assert note["forced"] is True and note["selection_method"] == "human"
    # --reason without --instance is a usage error.
    usage = gp("pick", "t", "--reason", "x", code=2).stderr
    assert "--reason and --force go with --instance ID" in usage, usage


# -- 2, 3. retry what failed the gates, with feedback -------------------------------------
# An agent that fixes what the feedback says failed: for every "FAILED
# test_x" line it reads tests/test_x.txt (PATH:TEXT) and writes TEXT to
# PATH.  Without feedback (attempt 0) it writes a wrong greeting.  Its
# arguments ({feedback} among them) are kept in args.json.
FIXER = textwrap.dedent("""
    import json, os, pathlib, re, sys
    pathlib.Path("args.json").write_text(json.dumps(sys.argv[1:]))
    path = os.environ.get("GIT_PARALLEL_FEEDBACK")
    if not path:
        pathlib.Path("greeting.txt").write_text("bye")
        sys.exit(0)
    for name in re.findall(r"^FAILED (test_\\w+)$", pathlib.Path(path).read_text(), re.M):
        target, _, text = pathlib.Path("tests", name + ".txt").read_text().strip().partition(":")
        pathlib.Path(target).write_text(text)
""")


@pytest.mark.unfenced("its agent counts its rounds in a file outside its worktree")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_gate_failure_retried_onto_current_with_feedback_wins_and_lands(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    fixer = tmp_path / "tools" / "fixer.py"
    fixer.write_text(FIXER)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(fixer), "{feedback}")
    assert gp.json("check", "t", code=1)["instances"][0]["verdict"] == "fail"
    # The base moves on meanwhile.
    (repo / "CHANGELOG").write_text("a change on the base\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base: changelog")
    moved = git(repo, "rev-parse", "main")
    out = gp.json("retry", "t", "1", "--onto-current")
    inst = out["instances"][0]
    assert inst["attempt"] == 1 and inst["head"] == moved
    assert inst["start"] == {"commit": moved, "from": "base-tip"}
    assert inst["history"][0]["verdict"] == "fail" and inst["history"][0]["archive_ref"]
    text = Path(inst["feedback"]).read_text()
    assert "failing gates: tests" in text and "FAILED test_greeting" in text and "exit 1" in text
    wt = Path(inst["worktree"])
    assert git(wt, "rev-parse", "HEAD") == moved and (wt / "CHANGELOG").exists()
    gp("run", "t", "--", PY, str(fixer), "{feedback}")
    assert json.loads((wt / "args.json").read_text()) == [text]  # {feedback} is the feedback's text
    assert (wt / "greeting.txt").read_text() == "hello"
    gp("check", "t")
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    landed = gp.json("merge", "t")["merge"]
    # Its history is one leftovers commit on the moved base: it lands as one commit on it.
    assert landed["previous"] == moved and landed["method"] == "squash"
    assert git(repo, "rev-parse", "main") == landed["landed"] and git(repo, "rev-parse", "main^") == moved
    assert (repo / "greeting.txt").read_text() == "hello" and (repo / "CHANGELOG").exists()


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_retry_refuses_a_passing_attempt_without_force_and_keep_goes_on_from_the_tip(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "greeting.txt=hello")
    agent(gp, "t", "2", "greeting.txt=hello", "notes.txt=draft")
    gp("check", "t")
    before = snapshot(repo)
    proc = gp("retry", "t", "1", code=1)
    assert "PARALLEL_BRANCH_TERMINAL" in proc.stderr and "--force" in proc.stderr
    assert snapshot(repo) == before
    tip2 = record(gp, "t")["instances"][1]["head"]
    out = gp.json("retry", "t", "2", "--keep", "--force")
    inst = out["instances"][1]
    assert inst["head"] == tip2 and inst["start"] == {"commit": tip2, "from": "previous-attempt"}
    assert (Path(inst["worktree"]) / "notes.txt").read_text() == "draft"
    assert git(repo, "rev-parse", f"refs/parallel/archive/{out['run_id']}/2/0") == tip2
    # A picked winner is not retried: unpick it first.
    gp("pick", "t", "--instance", "1")
    proc = gp("retry", "t", "1", "--force", code=1)
    assert "unpick" in proc.stderr
    usage = gp("retry", "t", "1", "--keep", "--onto-current", code=2).stderr
    assert "--onto-current and --keep exclude each other" in usage, usage


# -- 5. work done by hand ------------------------------------------------------------------
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_commits_made_by_hand_are_checked_picked_and_merged(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    out = gp.json("spawn", "t", "-n", "3")
    wt = {i["id"]: Path(i["worktree"]) for i in out["instances"]}
    # Instance 2: a person edits and commits in the worktree; no `run`.
    (wt["2"] / "greeting.txt").write_text("hello by hand")
    git(wt["2"], "add", "greeting.txt")
    git(wt["2"], "commit", "-q", "-m", "by hand")
    by_hand = git(wt["2"], "rev-parse", "HEAD")
    assert gp.json("validate", "t")["ok"] is True  # a hand commit is no inconsistency
    assert "hand work" in gp("status", "t").stdout
    # Instance 3: left uncommitted, then `git parallel done` commits it as run would.
    (wt["3"] / "greeting.txt").write_text("hello too")
    proc = gp("check", "t", code=1)
    assert "PARALLEL_EVIDENCE_MISMATCH" in proc.stderr and "git parallel done t 3" in proc.stderr
    done = gp.json("done", "t", "3")
    assert done["instance"]["status"] == "succeeded" and done["instance"]["origin"] == "hand"
    msg = git(wt["3"], "log", "-1", "--format=%B")
    assert msg.startswith("git-parallel: leftovers of t/3, attempt 0") and "Parallel-Instance: 3" in msg
    check = gp.json("check", "t")
    assert sorted(i["id"] for i in check["instances"]) == ["2", "3"]  # 1 never moved: still pending
    rec = record(gp, "t")
    assert [i["status"] for i in rec["instances"]] == ["pending", "succeeded", "succeeded"]
    assert rec["instances"][1]["origin"] == "hand" and rec["instances"][1]["head"] == by_hand
    assert gp.json("validate", "t")["ok"] is True
    gp("pick", "t", "--instance", "2", "--reason", "mine")
    landed = gp.json("merge", "t")["merge"]["landed"]
    assert landed == by_hand and (repo / "greeting.txt").read_text() == "hello by hand"
    # done is for pending instances only.
    proc = gp("done", "t", "1", code=1)
    assert "PARALLEL_BRANCH_TERMINAL" in proc.stderr


# -- 4. run --until-pass -------------------------------------------------------------------
@pytest.mark.unfenced("its agent counts its rounds in a file outside its worktree")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_until_pass_stops_after_the_round_that_passes(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    third = tmp_path / "tools" / "third.py"
    # Right only on its third attempt (attempt 2); each attempt is logged.
    third.write_text(textwrap.dedent("""
        import os, pathlib
        attempt = int(os.environ["GIT_PARALLEL_ATTEMPT"])
        with open(os.environ["LOG"], "a") as log:
            log.write(f"{attempt} {bool(os.environ.get('GIT_PARALLEL_FEEDBACK'))}\\n")
        pathlib.Path("greeting.txt").write_text("hello" if attempt == 2 else f"attempt {attempt}")
    """))
    log = tmp_path / "attempts.log"
    gp("spawn", "t", "-n", "1")
    out = json.loads(gp("run", "t", "--until-pass", "3", "--json", "--", PY, str(third), env={"LOG": str(log)}).stdout)
    assert out["ok"] is True and out["passed"] == ["1"] and len(out["rounds"]) == 3
    assert [s["retried"] for s in out["rounds"]] == [["1"], ["1"], []]
    assert log.read_text().split("\n")[:3] == ["0 False", "1 True", "2 True"]
    inst = record(gp, "t")["instances"][0]
    assert inst["attempt"] == 2 and inst["verdict"] == "pass"
    assert [h["verdict"] for h in inst["history"]] == ["fail", "fail"]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_until_pass_gives_up_at_its_round_limit(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    proc = gp("run", "t", "--until-pass", "2", "--", PY, "-c", "import sys; sys.exit(3)", code=1)
    assert "round 2:" in proc.stdout and "no passing attempt for track(s) main" in proc.stdout
    assert [i["attempt"] for i in record(gp, "t")["instances"]] == [1, 1]


# -- 7. smaller things -----------------------------------------------------------------------
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_spawn_warns_when_the_worktree_config_is_not_the_committed_one(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    cfg = repo / ".gitparallel.yaml"
    cfg.write_text(cfg.read_text() + "rework_max: 5\n")
    proc = gp("spawn", "t", "-n", "1")
    assert "warning:" in proc.stderr and "differs from the base commit's" in proc.stderr
    assert record(gp, "t")["config"]["rework_max"] == 2  # the committed one


def test_usage_errors_are_json_with_json(repo: Path, gp: GP) -> None:
    proc = gp("spawn", "t", "-n", "0", "--json", code=2)
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["code"] == "USAGE" and "-n" in out["message"]
    proc = gp("spawn", "t", "-n", "0", code=2)
    assert proc.stdout == "" and "Usage:" in proc.stderr


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_merge_goes_on_past_unrelated_changes_in_the_base_checkout(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, files={"README.md": "hello\n", "notes.txt": "mine\n",
                                        "tests/test_greeting.txt": "greeting.txt:hello"})
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "greeting.txt=hello")
    gp("check", "t")
    gp("pick", "t")
    (repo / "notes.txt").write_text("mine, edited\n")  # the landing does not touch it
    (repo / "greeting.txt").write_text("in the way\n")  # untracked, and the landing adds it
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "PARALLEL_BASE_DIRTY" in proc.stderr and "greeting.txt" in proc.stderr and "notes.txt" not in proc.stderr
    assert snapshot(repo) == before
    (repo / "greeting.txt").unlink()
    gp("merge", "t")
    assert (repo / "greeting.txt").read_text() == "hello"
    assert (repo / "notes.txt").read_text() == "mine, edited\n"
    assert git(repo, "status", "--porcelain") == "M notes.txt"


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_squash_with_a_message_template(tmp_path: Path) -> None:
    extra = "merge:\n  squash: true\n  message: \"{task}: {winner} wins ({reason}) {{literal}}\"\n"
    repo, gp = project(tmp_path, extra)
    base = git(repo, "rev-parse", "main")
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "greeting.txt=hello")
    agent_commit = record(gp, "t")["instances"][0]["head"]
    gp("check", "t")
    gp("pick", "t", "--instance", "1", "--reason", "only one")
    m = gp.json("merge", "t")["merge"]
    assert m["method"] == "squash"
    assert git(repo, "rev-parse", "main^") == base and git(repo, "rev-list", "--count", "main") == "2"
    assert git(repo, "log", "-1", "--format=%s", "main") == "t: 1 wins (only one) {{literal}}"
    assert git(repo, "rev-parse", "main^{tree}") == git(repo, "rev-parse", f"{agent_commit}^{{tree}}")
    assert any(n["kind"] == "pick" and n["selection_method"] == "human" for n in notes_on(repo, m["landed"]))


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_status_shows_the_base_tip_and_the_winner(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "greeting.txt=hello")
    gp("check", "t")
    gp("pick", "t")
    (repo / "CHANGELOG").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base moves")
    text = gp("status", "t").stdout
    assert f"now at {git(repo, 'rev-parse', 'main')[:12]}" in text and "picked winner" in text
    assert "  1 instance " in gp("status").stdout


# -- 6. run --tmux and attach, under real tmux -------------------------------------------------
ASK = textwrap.dedent("""
    import pathlib, sys
    assert sys.stdin.isatty() and sys.stdout.isatty(), "not a terminal"
    line = input("your answer: ")
    pathlib.Path("answer.txt").write_text(line + "\\n")
""")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_run_tmux_gives_the_agent_a_terminal_a_person_types_into(tmp_path: Path) -> None:
    import tempfile

    repo, gp = project(tmp_path)
    ask = tmp_path / "tools" / "ask.py"
    ask.write_text(ASK)
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))  # a private tmux server; short socket path
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["TMUX_TMPDIR"] = str(sock)

    def tmux(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env)

    gp("spawn", "t", "-n", "1")
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--tmux", "--json", "--", PY, str(ask)], cwd=repo,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def window() -> str | None:
            out = tmux("list-windows", "-t", "=parallel-t", "-F", "#{window_id} #{window_name}").stdout
            return next((l.split()[0] for l in out.splitlines() if l.split()[1:] == ["1"]), None)

        wid = wait_for(window)
        wait_for(lambda: "your answer:" in tmux("capture-pane", "-p", "-t", wid).stdout)
        shown = json.loads(gp("attach", "t", "1", "--json", env=env).stdout)
        assert shown["session"] == "parallel-t" and ["tmux", "select-window", "-t", wid] in [
            [Path(c[0]).name, *c[1:]] for c in shown["commands"]]
        assert record(gp, "t")["instances"][0]["status"] == "running"
        tmux("send-keys", "-t", wid, "typed by a person", "Enter")
        out, err = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
        tmux("kill-server")
        shutil.rmtree(sock, ignore_errors=True)
    assert runner.returncode == 0, err
    row = json.loads(out)["instances"][0]
    assert row["status"] == "succeeded" and row["exit_code"] == 0 and row["committed"]
    assert git(repo, "show", "parallel/t/1:answer.txt") == "typed by a person"
    assert git(repo, "log", "-1", "--format=%s", "parallel/t/1") == "git-parallel: leftovers of t/1, attempt 0"
    inst = record(gp, "t")["instances"][0]
    assert inst["status"] == "succeeded" and inst["head"] == row["committed"]
    assert wait_for(lambda: "your answer:" in Path(inst["log"]).read_text(errors="replace"), 10)
    assert any(n["kind"] == "instance" and n["status"] == "succeeded" for n in notes_on(repo, row["committed"]))


def test_run_tmux_without_tmux_names_the_package(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git"))
    shim = next(p for p in os.environ["PATH"].split(os.pathsep) if (Path(p) / "git-parallel").exists())
    before = snapshot(repo)
    proc = gp("run", "t", "--tmux", "--", PY, "-c", "pass", code=1, env={"PATH": f"{shim}{os.pathsep}{bare}"})
    assert "tmux is not installed" in proc.stderr and "apt-get install tmux" in proc.stderr
    assert snapshot(repo) == before
