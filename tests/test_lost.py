"""The failures a hostile pass found (issue 13), each against real git: an
agent that detaches HEAD, deletes a sibling's branch, commits in a
submodule, relies on a clean filter, spawns from inside an instance, or a
user who types an empty id or owns a branch called ``parallel``.

After each: ``git fsck`` is clean and every commit any instance made is
reachable from a branch or an archive ref."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, make_repo, snapshot
from scenarios import common, stored_record as record

PY = sys.executable


def agent(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return [PY, str(path)]


def all_reachable_from_refs(repo: Path) -> set[str]:
    return set(git(repo, "rev-list", "--all").split())


def assert_sound(repo: Path, made: set[str] = frozenset()) -> None:
    """fsck clean, and every commit in ``made`` held by a ref.  (A dangling
    commit alone is no loss: a merge that lost a race leaves its computed
    landing behind, as git's own commands leave theirs.)"""
    out = subprocess.run(["git", "fsck", "--no-progress", "--no-reflogs"], cwd=repo, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "missing" not in out.stdout + out.stderr and "broken" not in out.stdout + out.stderr, out.stdout
    missing = set(made) - all_reachable_from_refs(repo)
    assert not missing, f"commits no ref holds: {sorted(missing)}"


def commits_by_subject(repo: Path, subject: str) -> set[str]:
    """Every commit object with that subject, reachable or not (walks the object store)."""
    out = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    found = set()
    for line in out.splitlines():
        oid, kind = line.split()
        if kind == "commit" and git(repo, "log", "-1", "--format=%s", oid) == subject:
            found.add(oid)
    return found


DETACH_AND_COMMIT = """
    import pathlib, subprocess
    subprocess.run(["git", "checkout", "-q", "--detach"], check=True)
    pathlib.Path("p").write_text("p\\n")
    subprocess.run(["git", "add", "p"], check=True)
    subprocess.run(["git", "commit", "-qm", "precious"], check=True)
"""


# 1. ----------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", ["abort", "retry"])
def test_detached_head_commit_survives_abort_and_retry(repo: Path, gp: GP, tmp_path: Path, verb: str) -> None:
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", *agent(tmp_path, "detach", DETACH_AND_COMMIT), code=1)  # left on a detached HEAD
    assert "(failed or aborted: 1)" in ran.stdout, ran.stdout
    [precious] = commits_by_subject(repo, "precious")
    if verb == "abort":
        gp("abort", "t")
    else:
        gp("retry", "t", "1")
        wt = Path(record(repo)["instances"][0]["worktree"])
        assert git(wt, "rev-parse", "HEAD") == record(repo)["base"]["commit"]
    run_id = record(repo)["run_id"]
    kept = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", f"refs/parallel/archive/{run_id}/1/")
    assert f"refs/parallel/archive/{run_id}/1/0.kept-{precious[:12]} {precious}" in kept.splitlines()
    assert_sound(repo, {precious})


# 2. ----------------------------------------------------------------------------------
@pytest.mark.unfenced("a sibling deletes the branch, which the sandbox prevents outright (test_hostile_objects)")
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_branch_deleted_during_run_is_no_root_commit(repo: Path, gp: GP, tmp_path: Path) -> None:
    gp("spawn", "t", "-n", "2")
    hostile = agent(tmp_path, "hostile", """
        import os, pathlib, subprocess, time
        me = os.environ["GIT_PARALLEL_INSTANCE"]
        if me == "1":
            pathlib.Path("one.txt").write_text("one\\n")
            subprocess.run(["git", "add", "one.txt"], check=True)
            subprocess.run(["git", "commit", "-qm", "agent one"], check=True)
            pathlib.Path("left.txt").write_text("left over\\n")
            time.sleep(1.5)  # meanwhile its sibling deletes the branch
        else:
            time.sleep(0.5)
            subprocess.run(["git", "update-ref", "-d", "refs/heads/parallel/t/1"], check=True)
    """)
    out = json.loads(gp("run", "t", "--json", "--", *hostile, code=1).stdout)
    row = {r["id"]: r for r in out["instances"]}["1"]
    assert row["status"] == "failed" and "was deleted while the command ran" in row["error"], row
    assert git(repo, "branch", "--list", "parallel/t/1") == ""  # no root commit put in its place
    [one] = commits_by_subject(repo, "agent one")
    leftovers = commits_by_subject(repo, "git-parallel: leftovers of t/1, attempt 0 (its branch was gone)")
    assert len(leftovers) == 1
    [left] = leftovers
    assert git(repo, "rev-parse", f"{left}^") == one
    assert git(repo, "show", f"{left}:left.txt") == "left over"
    roots = git(repo, "rev-list", "--max-parents=0", "--branches", "--glob=refs/parallel/*").split()
    assert roots == [record(repo)["base"]["commit"]]
    assert_sound(repo, {one, left})
    found = {f["code"] for f in gp.json("validate", "t", code=1)["findings"]}
    assert found & {"PARALLEL_WORKTREE_MISSING", "PARALLEL_BRANCH_NOT_FOUND"}  # validate is not silent about it
    gp("retry", "t", "1", "--force")  # and the instance can start again (its HEAD is unborn: all is "changed")
    assert_sound(repo, {one, left})


# 3. ----------------------------------------------------------------------------------
def test_submodule_commits_survive_cleanup(tmp_path: Path) -> None:
    sub = make_repo(tmp_path / "sub", {"s.txt": "s\n"})
    repo = make_repo(tmp_path / "repo")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    git(repo, "commit", "-qm", "add sub")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    wt = Path(record(repo)["instances"][0]["worktree"])
    git(wt, "-c", "protocol.file.allow=always", "submodule", "update", "--init", "-q")
    admin_modules = common(repo) / "worktrees" / "parallel+t+1" / "modules"
    assert admin_modules.is_dir()  # git keeps the submodule's git dir in the worktree's admin folder
    (wt / "sub" / "new.txt").write_text("only here\n")
    git(wt / "sub", "add", "new.txt")
    git(wt / "sub", "commit", "-qm", "submodule work")
    sub_commit = git(wt / "sub", "rev-parse", "HEAD")
    git(wt, "add", "sub")
    git(wt, "commit", "-qm", "bump sub")
    gp("abort", "t")
    assert not admin_modules.exists()
    run_id = record(repo)["run_id"]
    refs = git(repo, "for-each-ref", "--format=%(objectname)", f"refs/parallel/archive/{run_id}/").split()
    assert sub_commit in refs
    assert git(repo, "show", f"{sub_commit}:new.txt") == "only here"
    assert_sound(repo, {sub_commit})


# 4. ----------------------------------------------------------------------------------
def test_leftovers_go_through_clean_filters(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".gitattributes": "*.up filter=upper\n"})
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    git(repo, "config", "filter.upper.smudge", "cat")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", *agent(tmp_path, "write", "open('x.up', 'w').write('hello\\n')"))
    tip = record(repo)["instances"][0]["head"]
    assert git(repo, "show", f"{tip}:x.up") == "HELLO"  # the filtered content, as git add would store it
    wt = Path(record(repo)["instances"][0]["worktree"])
    assert git(wt, "status", "--porcelain") == ""
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "status", "--porcelain") == ""  # main does not show the file modified
    assert_sound(repo)


# 5. ----------------------------------------------------------------------------------
def test_instance_branch_is_never_a_base(repo: Path, gp: GP) -> None:
    gp("spawn", "A", "-n", "1")
    before = snapshot(repo)
    proc = gp("spawn", "B", "-n", "1", "--base", "parallel/A/1", code=1)
    assert "error[PARALLEL_BASE_NOT_FOUND]" in proc.stderr and "instance branch" in proc.stderr
    wt = Path(record(repo, "A")["instances"][0]["worktree"])
    proc = gp("spawn", "B", "-n", "1", cwd=wt, code=1)  # the default base there is A's instance branch
    assert "error[PARALLEL_BASE_NOT_FOUND]" in proc.stderr and "--base" in proc.stderr
    assert snapshot(repo) == before
    gp("spawn", "B", "-n", "1", "--base", "main", cwd=wt)  # naming the real base works from there


# 8. ----------------------------------------------------------------------------------
def test_abort_with_an_empty_id_is_an_invalid_name(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "2")
    before = snapshot(repo)
    for args in (("abort", "t", ""), ("retry", "t", "")):
        proc = gp(*args, code=1)
        assert "error[PARALLEL_INVALID_NAME]" in proc.stderr, proc.stderr
    assert snapshot(repo) == before
    assert record(repo)["status"] == "pending"


# 10. ---------------------------------------------------------------------------------
def test_branch_named_parallel_refuses_spawn_cleanly(repo: Path, gp: GP) -> None:
    git(repo, "branch", "parallel")
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "2", code=1)
    assert "error[PARALLEL_DEV_WORKTREE_CREATE_FAILED]" in proc.stderr and "refs/heads/parallel" in proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    after = snapshot(repo)
    assert after["refs"] == before["refs"] and after["worktrees"] == before["worktrees"]
    assert after["admin"] == before["admin"] and after["status"] == before["status"]
    assert_sound(repo)


# 14b. --------------------------------------------------------------------------------
def test_kill_9_of_spawn_while_retiring_keeps_a_record(repo: Path, gp: GP, tmp_path: Path) -> None:
    from gitflow_parallel import faults

    gp("spawn", "t", "-n", "1")
    gp("abort", "t")
    old = record(repo)
    proc = gp("spawn", "t", "-n", "1", env={faults.ENV: "spawn.after_retire"}, code=None)
    assert proc.returncode in (-9, 137), proc.stderr
    assert record(repo)["run_id"] == old["run_id"]  # the task still has its record
    assert gp.json("validate", "t")["ok"] is True
    assert gp.json("recover", "t")["ok"] is True
    gp("spawn", "t", "-n", "1")
    assert record(repo)["run_id"] != old["run_id"]
    assert (common(repo) / "parallel" / "runs" / "done" / f"{old['run_id']}.yaml").is_file()


# 6. ----------------------------------------------------------------------------------
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_kept_loser_cannot_be_merged_with_plain_git_after_the_run_merged(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config="keep_losers: true\n")
    gp = GP(repo)
    gp("hooks", "install")
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--", *agent(tmp_path, "w", """
        import os
        me = os.environ["GIT_PARALLEL_INSTANCE"]
        open(me + ".txt", "w").write(me + "\\n")
    """))
    gp("check", "t")
    gp("pick", "t")
    winner = json.loads((common(repo) / "parallel" / "picks" / record(repo)["run_id"] / "main.json").read_text())
    loser = "2" if winner["winner"]["id"] == "1" else "1"
    gp("merge", "t")
    assert record(repo)["status"] == "merged"
    assert git(repo, "branch", "--list", f"parallel/t/{loser}")  # kept
    landed = git(repo, "rev-parse", "main")
    proc = subprocess.run(["git", "merge", "--no-edit", f"parallel/t/{loser}"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in proc.stderr, proc.stderr
    git(repo, "merge", "--abort")
    proc = subprocess.run(["git", "reset", "-q", "--hard", f"parallel/t/{loser}"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0 and "lost the pick" in proc.stderr, proc.stderr
    git(repo, "reset", "-q", "--hard", landed)
    assert git(repo, "rev-parse", "main") == landed
    gp("cleanup", "t")  # once cleaned up, the branch is gone, but its archived tip is still a loser
    proc = subprocess.run(["git", "merge", "--no-edit", f"refs/parallel/archive/{record(repo)['run_id']}/{loser}/0"],
                          cwd=repo, capture_output=True, text=True)
    assert proc.returncode != 0 and "git parallel prune" in proc.stderr, proc.stderr
    git(repo, "merge", "--abort")
    gp("prune", "--older-than", "0")  # once pruned, the hooks are cheap again
    assert not (common(repo) / "parallel" / "live").exists()
    assert_sound(repo)


# 14a. --------------------------------------------------------------------------------
@pytest.mark.unfenced("its gate waits on a file outside the checkout")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_two_merges_racing_both_report_the_one_landing(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    gate = tmp_path / "gate.py"
    gate.write_text(textwrap.dedent(f"""
        import os, pathlib, time
        marks = pathlib.Path({str(marks)!r})
        if marks.is_dir():
            (marks / str(os.getpid())).write_text("")
            time.sleep(2)
    """))
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: g\n    run: [{PY}, {gate}]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", *agent(tmp_path, "w", "open('x', 'w').write('x\\n')"))
    (repo / "b").write_text("b\n")
    git(repo, "add", "b")
    git(repo, "commit", "-qm", "the base moves, so the landing is a merge that verify checks")
    gp("check", "t")
    gp("pick", "t")
    marks.mkdir()
    first = subprocess.Popen(["git", "parallel", "merge", "t", "--json"], cwd=repo, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    import time
    deadline = time.monotonic() + 60
    while not any(marks.iterdir()):  # the first is verifying, its record read as picked
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.02)
    second = subprocess.Popen(["git", "parallel", "merge", "t", "--json"], cwd=repo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=120) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outs
    results = [json.loads(o) for o, _ in outs]
    assert sorted(r["already"] for r in results) == [False, True]
    assert results[0]["merge"]["landed"] == results[1]["merge"]["landed"] == git(repo, "rev-parse", "main")
    lands = [l for l in git(repo, "reflog", "--format=%gs", "main").splitlines() if l.startswith("git-parallel: land")]
    assert len(lands) == 1
    assert_sound(repo)


# 9. ----------------------------------------------------------------------------------
TERM_WRITER = """
    import os, pathlib, signal, sys, time
    def on_term(*_):
        pathlib.Path("written-on-term.txt").write_text("last words\\n")
        time.sleep(0.3)
        sys.exit(1)
    signal.signal(signal.SIGTERM, on_term)
    pathlib.Path(sys.argv[1], os.environ["GIT_PARALLEL_INSTANCE"]).write_text(str(os.getpid()))
    time.sleep(60)
"""


def _start_run_and_wait(repo: Path, argv: list[str], ready: Path, count: int) -> subprocess.Popen[str]:
    import time

    proc = subprocess.Popen(["git", "parallel", "run", "t", "--", *argv, str(ready)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < count:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    return proc


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_abort_waits_for_the_agents_it_stops(repo: Path, gp: GP, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ready.mkdir()
    gp("spawn", "t", "-n", "2")
    runner = _start_run_and_wait(repo, agent(tmp_path, "term", TERM_WRITER), ready, 2)
    try:
        out = gp.json("abort", "t")  # the runner commits what the TERM handlers wrote, then abort removes
    finally:
        runner.communicate(timeout=60)
    assert out["ok"] is True and sorted(out["stopped"]) == ["1", "2"]
    rec = record(repo)
    assert rec["status"] == "aborted" and all(i["removed"] for i in rec["instances"])
    for inst in ("1", "2"):
        archived = f"refs/parallel/archive/{rec['run_id']}/{inst}/0"
        assert git(repo, "show", f"{archived}:written-on-term.txt") == "last words"
    assert_sound(repo)


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_abort_refused_after_stopping_says_what_it_did(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config="commit_leftovers: false\n")
    gp = GP(repo)
    ready = tmp_path / "ready"
    ready.mkdir()
    gp("spawn", "t", "-n", "1")
    runner = _start_run_and_wait(repo, agent(tmp_path, "term", TERM_WRITER), ready, 1)
    try:
        proc = gp("abort", "t", code=1)
    finally:
        runner.communicate(timeout=60)
    assert "error[PARALLEL_DEV_WORKTREE_CLEANUP_FAILED]" in proc.stderr
    assert "stopped instance(s) 1 and recorded every instance aborted, but did not abort the run nor remove anything" in proc.stderr
    assert "written-on-term.txt" in proc.stderr and "--force" in proc.stderr
    rec = record(repo)
    assert rec["status"] != "aborted" and rec["instances"][0]["status"] == "aborted"
    assert Path(rec["instances"][0]["worktree"], "written-on-term.txt").is_file()  # nothing removed
    gp("abort", "t", "--force")
    rec = record(repo)
    assert rec["status"] == "aborted"
    assert git(repo, "show", f"refs/parallel/archive/{rec['run_id']}/1/0:written-on-term.txt") == "last words"
    assert_sound(repo)


# 12. ---------------------------------------------------------------------------------
DAEMONIZE = """
    import os, sys, time
    out, scrub = sys.argv[1], sys.argv[2] == "scrub"
    me = os.environ.get("GIT_PARALLEL_INSTANCE", "gate")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            code = ("import os, sys, time\\n"
                    "open(sys.argv[1], 'w').write(str(os.getpid()))\\n"
                    "while True:\\n"
                    "    open(sys.argv[2], 'a').write('x')\\n"
                    "    time.sleep(0.05)\\n")
            args = [sys.executable, "-c", code, os.path.join(out, me + ".pid"), os.path.abspath("daemon.txt")]
            # A scrubbed daemon carries no trace of its origin in its environment.
            os.execve(sys.executable, args, {} if scrub else dict(os.environ))
        os._exit(0)
    while not os.path.exists(os.path.join(out, me + ".pid")):
        time.sleep(0.01)
"""


def _gone(pid: int) -> bool:
    from gitflow_parallel.state.project import pid_alive
    import time

    deadline = time.monotonic() + 5  # killed before the report: this is only the kernel's tidying
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not pid_alive(pid)


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
@pytest.mark.parametrize("scrub", ["keep-env", "scrub"])
def test_daemonized_agent_does_not_outlive_run(repo: Path, gp: GP, tmp_path: Path, scrub: str) -> None:
    out = tmp_path / "pids"
    out.mkdir()
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", *agent(tmp_path, "daemon", DAEMONIZE), str(out), scrub)
    pid = int((out / "1.pid").read_text())
    assert _gone(pid), f"the daemon {pid} outlived `git parallel run`"
    wt = Path(record(repo)["instances"][0]["worktree"])
    assert git(wt, "status", "--porcelain") == ""  # nothing writes into the worktree after the commit


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_daemonized_gate_does_not_outlive_check(tmp_path: Path) -> None:
    out = tmp_path / "pids"
    out.mkdir()
    script = tmp_path / "daemon.py"
    script.write_text(textwrap.dedent(DAEMONIZE))
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: d\n    run: [{PY}, {script}, {out}, keep-env]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, "-c", "open('w', 'w').write('w')")
    gp("check", "t", code=None)
    [pid_file] = out.glob("*.pid")
    pid = int(pid_file.read_text())
    assert _gone(pid), f"the gate's daemon {pid} outlived `git parallel check`"


# 11. -----------------------------------------------------------------------------------
GATE_THAT_WAITS = """
    import os, sys, time
    out = sys.argv[1]
    if os.fork() == 0:  # a daemon of the gate, out of its process group
        os.setsid()
        open(os.path.join(out, "daemon.pid.tmp"), "w").write(str(os.getpid()))
        os.rename(os.path.join(out, "daemon.pid.tmp"), os.path.join(out, "daemon.pid"))  # whole when seen
        time.sleep(120)
        os._exit(0)
    open(os.path.join(out, "gate.pid.tmp"), "w").write(str(os.getpid()))
    os.rename(os.path.join(out, "gate.pid.tmp"), os.path.join(out, "gate.pid"))  # whole when seen
    time.sleep(120)
"""


@pytest.mark.unfenced("its gate leaves a pid file outside the checkout")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_kill_9_of_check_stops_its_gates(tmp_path: Path) -> None:
    import signal
    import time

    out = tmp_path / "pids"
    out.mkdir()
    script = tmp_path / "gate.py"
    script.write_text(textwrap.dedent(GATE_THAT_WAITS))
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: w\n    run: [{PY}, {script}, {out}]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, "-c", "open('w', 'w').write('w')")
    # The real git-parallel process, not git's wrapper: python -m with the checkout on the path.
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    check = subprocess.Popen([PY, "-m", "gitflow_parallel", "check", "t"], cwd=repo, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ((out / "gate.pid").exists() and (out / "daemon.pid").exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    gate, daemon = int((out / "gate.pid").read_text()), int((out / "daemon.pid").read_text())
    check.send_signal(signal.SIGKILL)
    check.wait()
    assert _gone(gate), f"the gate {gate} outlived a kill -9 of `git parallel check`"
    assert _gone(daemon), f"the gate's daemon {daemon} outlived a kill -9 of `git parallel check`"
    # And the run goes on: a new check decides.
    (out / "gate.pid").unlink()
    script.write_text("import sys\nsys.exit(0)\n")
    gp("check", "t", code=None)


AGENT_THAT_WAITS = DAEMONIZE + """
    open(os.path.join(out, "agent.pid.tmp"), "w").write(str(os.getpid()))
    os.rename(os.path.join(out, "agent.pid.tmp"), os.path.join(out, "agent.pid"))  # whole when seen
    time.sleep(120)
"""


@pytest.mark.unfenced("it watches its agents' host pids and marker files outside their worktrees")
def test_kill_9_of_run_stops_a_daemon_that_scrubbed_its_environment(repo: Path, gp: GP, tmp_path: Path) -> None:
    """The one the scope and the subreaper cannot catch: the daemon carries no
    scope, and the runner that would reap it is gone.  Its cgroup holds it."""
    import signal
    import time

    from gitflow_parallel.proc import cgroup

    if cgroup.base() is None:
        pytest.skip("cgroup v2 is not writable here: the scope and the subreaper are the fences")
    out = tmp_path / "pids"
    out.mkdir()
    gp("spawn", "t", "-n", "1")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), GIT_PARALLEL_KILL_GRACE="0.5")
    run = subprocess.Popen([PY, "-m", "gitflow_parallel", "run", "t", "--",
                            *agent(tmp_path, "daemon", AGENT_THAT_WAITS), str(out), "scrub"],
                           cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (out / "agent.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    daemon = int((out / "1.pid").read_text())
    assert not _gone_within(daemon, 0.2)  # it is running, outside the agent's group, with no scope
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert _gone_within(daemon, 30), f"the scrubbed daemon {daemon} outlived a kill -9 of `git parallel run`"
    inst = record(repo)["instances"][0]
    [dispatched] = [json.loads(line) for line in Path(inst["events"]).read_text().splitlines()
                    if json.loads(line)["event"] == "engine_dispatched"]
    assert dispatched["fence"] == "cgroup"
    left = [p.name for p in cgroup.base().glob("git-parallel-*") if record(repo)["run_id"] in p.name]
    assert left == [], f"the watchdog left the cgroups {left}"


def _gone_within(pid: int, seconds: float) -> bool:
    import time

    from gitflow_parallel.state.project import pid_alive

    deadline = time.monotonic() + seconds
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not pid_alive(pid)


# Issue 35, finding 10 ----------------------------------------------------------------
NESTED_CONFIG = f"gates:\n  - name: ok\n    run: [{PY}, -c, 'pass']\n"
MAKE_NESTED = ("git init -q sub && cd sub && echo only-here > n.txt && git add n.txt "
               "&& git commit -qm nested-work && git rev-parse HEAD > \"$OID_FILE\"")


@pytest.mark.unfenced("its agent hands the nested commit over through a file outside its worktree")
def test_a_nested_repository_an_agent_commits_is_archived_and_lands_resolvable(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config=NESTED_CONFIG)
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    # The leftovers commit records sub as a gitlink to a commit only sub/.git held.
    gp("run", "t", "--", "sh", "-c", f"echo top > top.txt && {MAKE_NESTED}", env={"OID_FILE": str(tmp_path / "oid")})
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    oid = (tmp_path / "oid").read_text().strip()
    assert git(repo, "ls-tree", "main", "sub").split()[:3] == ["160000", "commit", oid]
    assert git(repo, "show", f"{oid}:n.txt") == "only-here"
    run_id = record(repo)["run_id"]
    assert git(repo, "for-each-ref", "--format=%(objectname)", f"refs/parallel/nested/{run_id}/1/0/") == oid
    assert not Path(record(repo)["instances"][0]["worktree"]).exists()  # removed, since nothing is lost now
    assert_sound(repo, {oid})


@pytest.mark.unfenced("its agent hides the nested repository behind a link to a folder outside its worktree")
def test_a_nested_repository_that_cannot_be_kept_is_refused_and_its_folder_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", config=NESTED_CONFIG)
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    # Its git dir sits behind a symlink, which git-parallel does not follow.
    hide = "mv sub/.git ../hidden-git && ln -s ../../hidden-git sub/.git"
    ran = gp("run", "t", "--", "sh", "-c", f"{MAKE_NESTED} && cd .. && {hide}", code=1, env={"OID_FILE": "/dev/null"})
    assert "nested repositories" in ran.stdout, ran.stdout
    inst = record(repo)["instances"][0]
    assert inst["status"] == "failed" and "nested repositories" in inst["error"] and "sub" in inst["error"]
    wt = Path(inst["worktree"])
    proc = gp("abort", "t", "--force", code=1)
    assert "PARALLEL_DEV_WORKTREE_CLEANUP_FAILED" in proc.stderr and "sub/" in proc.stderr
    assert (wt / "sub" / "n.txt").read_text() == "only-here\n" and wt.is_dir()
