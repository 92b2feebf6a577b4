"""What real use hit (issue 26): run --tmux with no tmux server yet, a picked
winner rebased in one command, feedback too long or with a NUL byte for an
argument, a ref lock in merge's way, check skipping fresh evidence, and the
wording of merge, help and attach.  Real git, real tmux, real agents."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, make_repo, snapshot, wait_for
import scenarios

PY = sys.executable

# An agent whose instance 1 ends at once and whose others wait for a marker
# file (the test's go-ahead), then write their answer.
WAITER = textwrap.dedent("""
    import pathlib, sys, time
    instance, marker = sys.argv[1], pathlib.Path(sys.argv[2])
    if instance != "1":
        deadline = time.monotonic() + 90
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    pathlib.Path("done.txt").write_text(instance + "\\n")
""")


def _instances(gp: GP, task: str) -> dict[str, dict]:
    return {i["id"]: i for i in gp.json("status", task)["run"]["instances"]}


# -- 1. run --tmux starting the tmux server ---------------------------------------------------
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_run_tmux_that_starts_the_server_keeps_the_other_agents(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config="max_total: 4\n")
    gp = GP(repo)
    agent, marker = tmp_path / "agent.py", tmp_path / "go"
    agent.write_text(WAITER)
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))  # a private tmux server, not running yet
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["TMUX_TMPDIR"] = str(sock)

    def tmux(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, env=env)

    assert tmux("list-sessions").returncode != 0  # no server
    gp("spawn", "t", "-n", "3")
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--tmux", "--json", "--", PY, str(agent),
                               "{instance}", str(marker)], cwd=repo, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        # Instance 1 ended: the sweeps after its end are done before its
        # runner says so (its end is recorded once 2 and 3 end too).
        events = repo / ".git" / "parallel" / "events"
        wait_for(lambda: any("engine_exited" in p.read_text() for p in events.glob("*/1.*.jsonl")), 90)
        assert _instances(gp, "t")["1"]["status"] == "running"
        windows = tmux("list-windows", "-t", "=parallel-t", "-F", "#{window_name}")
        assert windows.returncode == 0 and sorted(windows.stdout.split()) == ["2", "3"], windows.stderr
        marker.write_text("go\n")
        out, err = runner.communicate(timeout=120)
        # The server it started ends with its last window, as tmux's own would.
        wait_for(lambda: tmux("list-sessions").returncode != 0, 10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        tmux("kill-server")
        shutil.rmtree(sock, ignore_errors=True)
    assert runner.returncode == 0, err
    rows = {r["id"]: r for r in json.loads(out)["instances"]}
    assert {k: (r["status"], r["exit_code"]) for k, r in rows.items()} == {
        "1": ("succeeded", 0), "2": ("succeeded", 0), "3": ("succeeded", 0)}
    for inst in ("1", "2", "3"):
        assert git(repo, "show", f"parallel/t/{inst}:done.txt") == inst


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_tmux_server_started_by_a_subreaper_is_not_its_descendant(tmp_path: Path) -> None:
    # A second round of `run --until-pass --tmux` starts the server again from
    # a process that is a subreaper already.
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))
    probe = textwrap.dedent("""
        import json, os, subprocess
        from gitflow_parallel.proc import reaper, tmux
        assert reaper.become_subreaper()
        binary = tmux.find_tmux()
        started = tmux.start_server(binary)
        pid = int(subprocess.run([binary, "display-message", "-p", "#{pid}"], capture_output=True,
                                 text=True).stdout)
        print(json.dumps({"started": started, "again": tmux.start_server(binary), "subreaper": reaper.is_subreaper(),
                          "ours": pid in reaper.descendants(), "scope": reaper._scope(pid)}))
        tmux.release_server(binary)
    """)
    env = dict(os.environ, TMUX_TMPDIR=str(sock), GIT_PARALLEL_SCOPE="outer/1/0")
    env.pop("TMUX", None)
    try:
        out = subprocess.run([PY, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"started": True, "again": False, "subreaper": True, "ours": False,
                                          "scope": None}
        wait_for(lambda: subprocess.run(["tmux", "list-sessions"], capture_output=True, env=env).returncode != 0, 10)
    finally:
        subprocess.run(["tmux", "kill-server"], capture_output=True, env=env)
        shutil.rmtree(sock, ignore_errors=True)


# -- a small project with one gate, for items 4 to 13 ----------------------------------------

# Passes unless a file FAIL exists (and counts its runs in the file its
# argument names); BIG makes it print 300 lines of 1 KB,
# NUL a line with a NUL byte and terminal escapes.
GATE = textwrap.dedent("""
    import os, pathlib, sys
    with open(sys.argv[1], "a") as runs:  # one line per gate run: what it judged
        runs.write(("verify " if os.environ.get("GIT_PARALLEL_VERIFY") else "check ")
                   + os.environ["GIT_PARALLEL_COMMIT"] + "\\n")
    if pathlib.Path("BIG").exists():
        for i in range(300):
            print(f"line {i:03d} " + "x" * 1000)
    if pathlib.Path("NUL").exists():
        sys.stdout.buffer.write(b"before\\x00after \\x1b[2Jcleared\\ttab\\x07\\r\\n")
    sys.stdout.flush()
    sys.exit(1 if pathlib.Path("FAIL").exists() else 0)
""")


def project(tmp_path: Path, extra: str = "") -> tuple[Path, GP]:
    tools = tmp_path / "tools"
    return scenarios.project(tmp_path, GATE, max_total=4, gate_args=(str(tools / "runs.txt"),), extra=extra,
                             files={"README.md": "hello\n", "shared.txt": "a\nb\nc\n"})


def agent(gp: GP, task: str, inst: str, *files: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    return gp("run", task, "--instance", inst, "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files,
              code=code)


def commit_on_base(repo: Path, name: str, content: str) -> str:
    (repo / name).write_text(content)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"base: {name}")
    return git(repo, "rev-parse", "HEAD")


# -- 4. a picked winner that no longer lands, started again in one command ---------------------
@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_retry_onto_current_of_a_picked_winner_unpicks_it_in_one_command(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "shared.txt=a\\nWINNER\\nc\\n")
    gp("check", "t")
    gp("pick", "t")
    won = _instances(gp, "t")["1"]["head"]
    moved = commit_on_base(repo, "shared.txt", "a\nBASE\nc\n")
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr
    assert "`git parallel retry t 1 --onto-current`" in proc.stderr  # the real task and id
    plain = gp("retry", "t", "1", code=1)  # without --onto-current the winner stays
    assert "git parallel retry t 1 --onto-current" in plain.stderr

    gp("retry", "t", "1", "--onto-current")
    run = gp.json("status", "t")["run"]
    inst = _instances(gp, "t")["1"]
    assert run["status"] != "picked" and not run.get("picks")
    assert [(r["track"], r["winner"], r["commit"]) for r in run["retired_picks"]] == [("main", "1", won)]
    assert inst["status"] == "pending" and inst["attempt"] == 1
    assert inst["start"] == {"commit": moved, "from": "base-tip"} and git(repo, "rev-parse", "parallel/t/1") == moved
    told = Path(inst["feedback"]).read_text()
    assert "## The base moved" in told and "won the pick of track main" in told
    assert "conflicts with the base in: shared.txt" in told and won in told
    assert git(repo, "rev-parse", "refs/parallel/archive/" + run["run_id"] + "/1/0") == won
    assert any('"kind":"unpick"' in line.replace(" ", "") for line in
               git(repo, "notes", "--ref=parallel", "show", won).splitlines())

    agent(gp, "t", "1", "shared.txt=a\\nBASE\\nWINNER\\nc\\n")
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "show", "main:shared.txt") == "a\nBASE\nWINNER\nc"


# -- 6 and 7. feedback that cannot be an argument as it is --------------------------------------
def _failed_then_retried(gp: GP, *files: str) -> dict:
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "FAIL=x", *files)
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    gp("retry", "t", "1")
    return _instances(gp, "t")["1"]


@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
def test_feedback_over_the_argument_limit_is_cut_to_its_tail(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    inst = _failed_then_retried(gp, "BIG=x")
    full = Path(inst["feedback"]).read_bytes()
    assert len(full) > 128 * 1024  # over Linux's MAX_ARG_STRLEN
    agent(gp, "t", "1", "got.txt={feedback}")
    after = _instances(gp, "t")["1"]
    assert after["status"] == "succeeded" and after["exit_code"] == 0, after["error"]
    got = git(repo, "show", "parallel/t/1:got.txt").encode() + b"\n"
    assert len(got) <= 64 * 1024
    assert b"cut" in got.splitlines()[0] and b"GIT_PARALLEL_FEEDBACK" in got.splitlines()[0]
    assert full.endswith(got.split(b"\n", 1)[1])  # the tail, whole lines
    assert b"line 299 " in got and b"line 100 " not in got
    assert Path(inst["feedback"]).read_bytes() == full  # the file keeps it all


@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_nul_and_escapes_in_gate_output_reach_the_agent_as_plain_text(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    inst = _failed_then_retried(gp, "NUL=x")
    proc = agent(gp, "t", "1", "got.txt={feedback}")
    assert "Traceback" not in proc.stderr
    after = _instances(gp, "t")["1"]
    assert after["status"] == "succeeded", after["error"]
    got = git(repo, "show", "parallel/t/1:got.txt")
    assert "beforeafter cleared\ttab" in got
    assert not any(ord(c) < 32 and c not in "\t\n" for c in got)
    assert "\0" not in Path(inst["feedback"]).read_text()


# -- 9. a lock file in the way of the base ref -------------------------------------------------
@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
def test_merge_with_the_base_ref_locked_says_lock_held_and_retries_nothing(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "w.txt=work")
    gp("check", "t")
    gp("pick", "t")
    commit_on_base(repo, "other.txt", "moved")  # not a fast-forward: merge re-proves the landing
    lock = repo / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text("left by a killed git\n")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_LOCK_HELD]" in proc.stderr and str(lock) in proc.stderr, proc.stderr
    assert "kept moving" not in proc.stderr and "hint:" in proc.stderr and "git parallel recover t" in proc.stderr
    assert snapshot(repo) == before and lock.exists()
    runs = (tmp_path / "tools" / "runs.txt").read_text().split()
    assert runs.count("verify") == 1  # the landing was proved once, not again for every "retry"
    lock.unlink()
    gp("merge", "t")
    assert git(repo, "show", "main:w.txt") == "work"


# -- 12. check leaves fresh evidence alone unless told --again ----------------------------------
@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
@pytest.mark.slow  # a whole flow; the default tier keeps under 150 s
def test_check_skips_fresh_evidence_unless_again(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    runs = tmp_path / "tools" / "runs.txt"
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "a.txt=1")
    agent(gp, "t", "2", "b.txt=2")
    gp("check", "t")
    assert len(runs.read_text().splitlines()) == 2
    first = gp.json("check", "t")
    assert len(runs.read_text().splitlines()) == 2  # nothing ran again
    assert first["instances"] == [] and [s["id"] for s in first["skipped"]] == ["1", "2"]
    text = gp("check", "t").stdout
    assert "skipped" in text and "fresh" in text and "--again" in text
    # Instance 2 moves on by hand: only its evidence is stale now.
    worktree = Path(_instances(gp, "t")["2"]["worktree"])
    (worktree / "b.txt").write_text("3\n")
    git(worktree, "commit", "-qam", "by hand")
    second = gp.json("check", "t")
    assert [i["id"] for i in second["instances"]] == ["2"] and [s["id"] for s in second["skipped"]] == ["1"]
    assert len(runs.read_text().splitlines()) == 3
    again = gp.json("check", "t", "--again")
    assert [i["id"] for i in again["instances"]] == ["1", "2"] and again["skipped"] == []
    assert len(runs.read_text().splitlines()) == 5


# -- 13. wording: merge's tries, help run, attach without a terminal ---------------------------
@pytest.mark.unfenced("its gate counts its runs in a file outside the checkout")
def test_merge_output_does_not_read_as_the_winners_attempt(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "w.txt=work")
    gp("check", "t")
    gp("pick", "t")
    out = gp("merge", "t").stdout
    assert out.startswith("landed ") and "attempt" not in out.splitlines()[0]


def test_help_run_names_feedback() -> None:
    text = subprocess.run(["git", "parallel", "help", "run"], capture_output=True, text=True, check=True).stdout
    assert "{feedback}" in text and "GIT_PARALLEL_FEEDBACK" in text


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_attach_without_a_terminal_says_so(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
    env["TMUX_TMPDIR"] = str(sock)
    try:
        subprocess.run(["tmux", "new-session", "-d", "-s", "parallel-t", "sleep", "60"], env=env, check=True)
        proc = subprocess.run(["git", "parallel", "attach", "t"], cwd=repo, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=60)
    finally:
        subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
        shutil.rmtree(sock, ignore_errors=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error[PARALLEL_DEV_EXECUTE_FAILED]: ") and "terminal" in proc.stderr
    assert "hint: " in proc.stderr and "tmux attach -t parallel-t" in proc.stderr
