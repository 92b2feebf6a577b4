"""Pick and merge end to end: real agents (python scripts) run by
`git parallel run`, real gates run by `git parallel check`, real merges."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, snapshot
import scenarios
from scenarios import shown_record as record

PY = sys.executable


# The gate: every *.num file holds an integer and their sum is at most 10;
# every PATH:TEXT line of REQUIRE names a file that contains TEXT.
GATE = textwrap.dedent("""
    import pathlib, sys
    total = sum(int(p.read_text()) for p in pathlib.Path(".").rglob("*.num"))
    req = pathlib.Path("REQUIRE")
    def holds(line):
        path, _, text = line.partition(":")
        p = pathlib.Path(path)
        return p.exists() and text in p.read_text()
    missing = [l for l in (req.read_text().split() if req.exists() else []) if not holds(l)]
    print("sum", total, "missing", missing)
    sys.exit(0 if total <= 10 and not missing else 1)
""")


def project(tmp_path: Path, extra: str = "", files: dict[str, str] | None = None) -> tuple[Path, GP]:
    base = {"README.md": "hello\n", "shared.txt": "a\nb\nc\n"}
    return scenarios.project(tmp_path, GATE, name="sum", max_total=12, extra=extra, files=files or base)


def agent(gp: GP, task: str, inst: str, *files: str) -> None:
    gp("run", task, "--instance", inst, "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files)


def picked(gp: GP, *files: str) -> None:
    """One instance whose agent writes ``files``, checked and picked."""
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", *files)
    gp("check", "t")
    gp("pick", "t")


def commit_on_base(repo: Path, name: str, content: str) -> str:
    (repo / name).write_text(content)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", f"base: {name}")
    return git(repo, "rev-parse", "HEAD")


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_fast_forward_lands_winner_with_notes(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, extra="merge:\n  squash: false\n")  # its leftovers commit, as it is
    gp("spawn", "t", "-n", "3")
    agent(gp, "t", "1", "a.num=3")
    agent(gp, "t", "2", "a.num=30")  # fails the gate
    agent(gp, "t", "3", "b.num=4")
    gp("check", "t", code=None)
    picked = gp.json("pick", "t")
    winner = picked["picks"][0]["winner"]
    assert winner["id"] in ("1", "3")
    losers = {l["id"]: l for l in picked["picks"][0]["losers"]}
    assert "2" in losers and "sum" in losers["2"]["reason"]
    result = gp.json("merge", "t")
    m = result["merge"]
    assert m["method"] == "fast-forward" and m["landed"] == winner["commit"]
    assert git(repo, "rev-parse", "main") == winner["commit"]
    assert git(repo, "status", "--porcelain") == ""  # the base worktree followed
    note = git(repo, "notes", "--ref=parallel", "show", "main").splitlines()
    # One line for people first, then the JSON records.
    assert note[0] == f"git-parallel: t won by {winner['id']} of 3 (sum pass, score n/a), run {result['run_id']}"
    kinds = {json.loads(l)["kind"] for l in note[1:]}
    assert {"pick", "merge"} <= kinds
    run = record(gp, "t")
    assert run["status"] == "merged" and run["merge"]["landed"] == winner["commit"]
    # Losers stay reachable from archive refs after cleanup; nothing dangling.
    assert git(repo, "branch", "--list", "parallel/*") == ""
    for inst in run["instances"]:
        ref = f"refs/parallel/archive/{run['run_id']}/{inst['id']}/0"
        assert git(repo, "rev-parse", ref) == inst["head"]
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    # A second merge is a no-op; a second pick prints the existing record.
    again = gp.json("merge", "t")
    assert again["already"] is True
    assert gp.json("pick", "t")["existing"][0]["winner"] == winner


def test_moved_base_gives_two_parent_merge(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, extra="merge:\n  squash: false\n")
    picked(gp, "w.num=2")
    base_tip = commit_on_base(repo, "base.txt", "from base\n")
    m = gp.json("merge", "t")["merge"]
    assert m["method"] == "merge" and m["verified"] and m["verified"][0]["passed"]
    parents = git(repo, "rev-list", "--parents", "-n", "1", "main").split()[1:]
    assert parents[0] == base_tip and len(parents) == 2
    assert (repo / "w.num").read_text() == "2" and (repo / "base.txt").read_text() == "from base\n"
    assert git(repo, "status", "--porcelain") == ""
    assert any(json.loads(l)["kind"] == "pick" for l in git(repo, "notes", "--ref=parallel", "show", "main").splitlines()
               if l.startswith("{"))


@pytest.mark.parametrize("policy, expect", [
    ("first_pass_wins", "BASE"), ("last_pass_wins", "WINNER"), ("winner_takes_all", "WINNER")])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_conflict_resolved_by_policy(tmp_path: Path, policy: str, expect: str) -> None:
    repo, gp = project(tmp_path, extra=f"merge:\n  policy: {policy}\n  squash: false\n")
    picked(gp, "shared.txt=a\\nWINNER\\nc\\n", "more.txt=also mine")
    commit_on_base(repo, "shared.txt", "a\nBASE\nc\n")
    proc = gp("merge", "t")
    assert f"resolved by {policy}: shared.txt" in proc.stdout
    m = record(gp, "t")["merge"]
    assert m["method"] == "merge"
    [f] = m["resolved_files"]
    assert f["path"] == "shared.txt" and f["hunks"] == [{"base_lines": [2, 2], "base_written": 1,
                                                        "winner_lines": [2, 2], "winner_written": 1}]
    # The output and the record say how much of the winner the policy dropped.
    dropped = 1 if expect == "BASE" else 0
    assert m["steps"][0]["winner_lines_dropped"] == dropped
    assert f"{dropped} line(s) of the winner dropped" in proc.stdout
    assert git(repo, "show", "main:shared.txt").splitlines()[1] == expect
    assert (repo / "shared.txt").read_text().splitlines()[1] == expect
    assert (repo / "more.txt").read_text() == "also mine"


def test_conflict_with_the_moved_base_refuses_by_default(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    picked(gp, "shared.txt=a\\nWINNER\\nWINNER2\\nc\\n", "more.txt=mine")
    commit_on_base(repo, "shared.txt", "a\nBASE\nc\n")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr
    assert "shared.txt (base lines 2-2, winner lines 2-3)" in proc.stderr
    assert "git parallel retry" in proc.stderr and "--onto-current" in proc.stderr
    assert snapshot(repo) == before and record(gp, "t")["status"] == "picked"


def test_a_merge_that_would_land_nothing_is_refused(tmp_path: Path) -> None:
    # first_pass_wins keeps the base side of the only hunk the winner wrote:
    # the merge commit would bring in nothing and still say "landed".
    repo, gp = project(tmp_path, extra="merge:\n  policy: first_pass_wins\n")
    picked(gp, "shared.txt=a\\nWINNER\\nc\\n")
    commit_on_base(repo, "shared.txt", "a\nBASE\nc\n")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr and "would land nothing" in proc.stderr
    assert "dropped 1 line(s) of the winner" in proc.stderr
    assert snapshot(repo) == before


def test_manual_policy_moves_nothing(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, extra="merge:\n  policy: manual\n")
    picked(gp, "w.num=1")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MANUAL_HALT]" in proc.stderr
    assert "git merge --no-ff parallel/t/1" in proc.stderr
    assert snapshot(repo) == before


MOVER = textwrap.dedent("""
    # Moves the base branch (a real other writer) while the merge verifies.
    import os, pathlib, sys, pygit2
    arm = pathlib.Path(sys.argv[1])
    if arm.exists():
        budget = int(arm.read_text() or "0")
        if budget != 0:
            arm.write_text(str(budget - 1))
            repo = pygit2.Repository(pygit2.discover_repository("."))
            main = repo.references["refs/heads/main"]
            parent = repo.get(main.target)
            blob = repo.create_blob(b"moved %d\\n" % budget)
            builder = repo.TreeBuilder(parent.tree)
            builder.insert("mover-%d.txt" % budget, blob, pygit2.GIT_FILEMODE_BLOB)
            sig = pygit2.Signature("Mover", "mover@example.com")
            new = repo.create_commit(None, sig, sig, "concurrent commit %d" % budget, builder.write(), [parent.id])
            main.set_target(new)
    sys.exit(0)
""")


@pytest.mark.unfenced("its gate moves the base branch while merge re-proves, as a person would")
@pytest.mark.parametrize("moves, retries, lands", [(1, 2, True), (5, 1, False)])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_base_moving_during_merge(tmp_path: Path, moves: int, retries: int, lands: bool) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "mover.py").write_text(MOVER)
    arm = tmp_path / "arm"
    repo, gp = project(tmp_path, extra=textwrap.dedent(f"""
          - name: mover
            run: [{PY}, {tools / 'mover.py'}, {arm}]
        merge:
          retries: {retries}
    """))
    git(repo, "switch", "-q", "-c", "side")  # main is checked out nowhere
    gp("spawn", "t", "-n", "1", "--base", "main")
    agent(gp, "t", "1", "w.num=1")
    gp("check", "t")
    gp("pick", "t")
    commit_on_base_ref(repo, "first.txt")  # so the merge is not a fast-forward and verify runs
    arm.write_text(str(moves))
    if lands:
        m = gp.json("merge", "t")["merge"]
        assert m["attempts"] == 2 and len(m["retried"]) == 1
        tip = git(repo, "rev-parse", "main")
        assert tip == m["landed"]
        files = git(repo, "ls-tree", "--name-only", "main").split()
        assert "w.num" in files and f"mover-{moves}.txt" in files and "first.txt" in files
    else:
        proc = gp("merge", "t", code=1)
        assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr
        tip = git(repo, "rev-parse", "main")
        assert "w.num" not in git(repo, "ls-tree", "--name-only", tip).split()
        assert "concurrent commit" in git(repo, "log", "-1", "--format=%s", "main")
        assert record(gp, "t")["status"] == "picked"


def commit_on_base_ref(repo: Path, name: str) -> None:
    """Commit onto main while another branch is checked out."""
    tree = git(repo, "rev-parse", "main^{tree}")
    blob = git(repo, "hash-object", "-w", "--stdin", input=f"{name}\n")
    listing = git(repo, "ls-tree", "main") + f"\n100644 blob {blob}\t{name}\n"
    new_tree = git(repo, "mktree", input=listing)
    commit = git(repo, "commit-tree", new_tree, "-p", "main", "-m", f"base: {name}")
    git(repo, "update-ref", "refs/heads/main", commit)
    assert tree != new_tree


def test_semantic_conflict_caught_by_verify(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    picked(gp, "w.num=6")
    commit_on_base(repo, "b.num", "5")  # passes alone (5), the winner passes alone (6)
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr and "sum" in proc.stderr
    assert snapshot(repo) == before


def test_dirty_base_worktree_refused_then_lands(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    picked(gp, "w.num=1", "README.md=by the agent\\n")
    (repo / "README.md").write_text("local edit\n")  # a path the landing changes too
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_BASE_DIRTY]" in proc.stderr and "README.md" in proc.stderr
    assert snapshot(repo) == before
    assert (repo / "README.md").read_text() == "local edit\n"
    git(repo, "checkout", "README.md")
    gp("merge", "t")
    assert (repo / "w.num").read_text() == "1"


def join_project(tmp_path: Path, third: str) -> tuple[Path, GP]:
    repo, gp = project(tmp_path)
    gp("spawn", "j", "-n", "1", "--track", "api", "--track", "ui", "--track", "docs")
    agent(gp, "j", "api-1", "api.txt=api", "shared.txt=a\\nAPI\\nc\\n")
    agent(gp, "j", "ui-1", "ui.txt=ui")
    agent(gp, "j", "docs-1", *third.split())
    gp("check", "j")
    gp("pick", "j")
    return repo, gp


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_join_lands_all_tracks_in_one_move(tmp_path: Path) -> None:
    repo, gp = join_project(tmp_path, "docs.txt=docs")
    before = git(repo, "rev-parse", "main")
    reflog_before = len(git(repo, "reflog", "show", "main").splitlines())
    m = gp.json("merge", "j")["merge"]
    assert [s["track"] for s in m["steps"]] == ["api", "ui", "docs"]
    files = set(git(repo, "ls-tree", "--name-only", "main").split())
    assert {"api.txt", "ui.txt", "docs.txt"} <= files
    assert len(git(repo, "reflog", "show", "main").splitlines()) == reflog_before + 1
    assert git(repo, "merge-base", "--is-ancestor", before, "main") == ""


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_join_refused_whole_when_third_conflicts(tmp_path: Path) -> None:
    # The third track rewrites the line the first track changed: the default
    # merge.policy (refuse) refuses the conflict, and nothing lands.
    repo, gp = join_project(tmp_path, "shared.txt=a\\nDOCS\\nc\\n REQUIRE=shared.txt:DOCS")
    before = snapshot(repo)
    proc = gp("merge", "j", code=None)
    assert proc.returncode == 1
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr and "docs-1 of track docs" in proc.stderr, proc.stderr
    after = snapshot(repo)
    assert after["refs"] == before["refs"] and after["runs"] == before["runs"]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_join_needs_every_pick(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "j", "-n", "1", "--track", "api", "--track", "ui")
    agent(gp, "j", "api-1", "a.num=1")
    agent(gp, "j", "ui-1", "b.num=20")  # fails its gate
    gp("check", "j", code=None)
    gp("pick", "j", "--track", "api")
    proc = gp("pick", "j", "--track", "ui", code=1)
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in proc.stderr
    before = snapshot(repo)
    proc = gp("merge", "j", code=1)
    assert "error[PARALLEL_JOIN_INCOMPLETE]" in proc.stderr and "ui" in proc.stderr
    assert snapshot(repo) == before


SCORER = textwrap.dedent("""
    import pathlib
    p = pathlib.Path("score.txt")
    print("scoring")
    print(p.read_text().strip() if p.exists() else "")
""")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_majority_vote_beats_higher_scored_singleton(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "scorer.py").write_text(SCORER)
    repo, gp = project(tmp_path, extra=f"selection: majority_vote\nscore:\n  threshold: 5\n  command: [{PY}, {tools / 'scorer.py'}]\n")
    gp("spawn", "t", "-n", "3")
    agent(gp, "t", "1", "x.num=1", "score.txt=7")
    agent(gp, "t", "2", "x.num=1", "score.txt=7")
    agent(gp, "t", "3", "y.num=2", "score.txt=9")
    gp("check", "t")
    picked = gp.json("pick", "t")["picks"][0]
    assert picked["winner"]["id"] in ("1", "2") and picked["selection_method"] == "majority_vote"
    assert picked["score"] == 7


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_critic_first_pass_prefers_score_and_threshold(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "scorer.py").write_text(SCORER)
    repo, gp = project(tmp_path, extra=f"score:\n  threshold: 8\n  command: [{PY}, {tools / 'scorer.py'}]\n")
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "x.num=1", "score.txt=7")
    agent(gp, "t", "2", "y.num=2", "score.txt=6")
    gp("check", "t")
    before = snapshot(repo)
    proc = gp("pick", "t", code=1)
    assert "error[PARALLEL_DEV_ANTI_SLOP_BELOW_THRESHOLD]" in proc.stderr and "7" in proc.stderr
    assert snapshot(repo) == before


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_no_candidate_writes_nothing_and_edited_pick_is_refused(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "x.num=11")
    agent(gp, "t", "2", "x.num=12")
    assert "FAIL sum" in gp("check", "t", code=1).stdout
    before = snapshot(repo)
    proc = gp("pick", "t", code=1)
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in proc.stderr
    assert snapshot(repo) == before
    assert not (repo / ".git" / "parallel" / "picks").exists() or not list((repo / ".git" / "parallel" / "picks").rglob("*.json"))


def test_pick_record_edited_by_hand(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "x.num=1")
    gp("check", "t")
    run_id = gp.json("pick", "t")["run_id"]
    path = repo / ".git" / "parallel" / "picks" / run_id / "main.json"
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["winner"]["id"] == "1"
    data["winner"]["id"] = "2"
    path.write_text(json.dumps(data))
    proc = gp("merge", "t", code=1)
    assert "PARALLEL_DEV_PICK_SCHEMA_INVALID" in proc.stderr


def test_stale_winner_is_not_merged(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    run = gp.json("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "x.num=1")
    gp("check", "t")
    gp("pick", "t")
    wt = Path(run["instances"][0]["worktree"])
    (wt / "late.txt").write_text("late\n")
    git(wt, "add", "late.txt")
    git(wt, "commit", "-q", "-m", "late change")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "PARALLEL_EVIDENCE_MISMATCH" in proc.stderr
    assert snapshot(repo) == before


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_kept_losers_need_cleanup_before_the_next_spawn(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, extra="keep_losers: true\n")
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "a.num=1")
    agent(gp, "t", "2", "a.num=2")
    gp("check", "t")
    gp("pick", "t")
    result = gp.json("merge", "t")
    assert result["cleanup"]["kept"]  # the loser's worktree stayed
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "1", code=1)
    assert "error[PARALLEL_RUN_EXISTS]" in proc.stderr and "git parallel cleanup t" in proc.stderr
    assert snapshot(repo) == before
    gp("cleanup", "t")
    gp("spawn", "t", "-n", "1")


def test_file_against_folder_is_refused_not_dropped(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    picked(gp, "d/f=inside")
    commit_on_base(repo, "d", "a file\n")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_DEV_MERGE_CONFLICT]" in proc.stderr and "folder" in proc.stderr
    assert snapshot(repo) == before


def test_untracked_files_in_the_way_refuse_the_landing(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    picked(gp, "d=now a file")
    (repo / "d").mkdir()
    (repo / "d" / "mine.txt").write_text("mine\n")
    before = snapshot(repo)
    proc = gp("merge", "t", code=1)
    assert "error[PARALLEL_BASE_DIRTY]" in proc.stderr and "d/mine.txt" in proc.stderr
    assert snapshot(repo) == before and (repo / "d" / "mine.txt").read_text() == "mine\n"


def test_separate_git_dir(tmp_path: Path) -> None:
    work, gitdir = tmp_path / "work", tmp_path / "gitdir"
    work.mkdir()
    git(work, "init", "-q", "-b", "main", "--separate-git-dir", str(gitdir))
    (work / "README.md").write_text("x\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "i")
    gp = GP(work)
    run = gp.json("spawn", "t", "-n", "1")
    assert Path(run["instances"][0]["worktree"]).parent.parent == tmp_path / "work.parallel"
    wt = Path(run["instances"][0]["worktree"])
    gp("run", "t", "--", PY, "-c", "open('n.txt', 'w').write('n')")
    gp("check", "t")
    gp("pick", "t")
    (work / "n.txt").write_text("dirty\n")  # untracked, in the landing's way
    proc = gp("merge", "t", code=1)
    assert "PARALLEL_BASE_DIRTY" in proc.stderr
    (work / "n.txt").unlink()
    gp("merge", "t")
    assert (work / "n.txt").read_text() == "n" and git(work, "status", "--porcelain") == ""
    assert not wt.exists()


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_merge_verifies_without_holding_the_project_lock(tmp_path: Path) -> None:
    # A verify gate that takes a while must not block other commands, which
    # give up on the project lock after GIT_PARALLEL_LOCK_TIMEOUT seconds.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "slow.py").write_text("import os, time\nif os.environ.get('GIT_PARALLEL_VERIFY'):\n    time.sleep(4)\n")
    repo, gp = project(tmp_path, extra=f"  - name: slow\n    run: [{PY}, {tools / 'slow.py'}]\n")
    picked(gp, "w.num=1")
    commit_on_base(repo, "base.txt", "moved on\n")  # so the merged tree is new and verify runs
    merging = subprocess.Popen(["git", "parallel", "merge", "t"], cwd=repo, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    import time
    time.sleep(1.5)
    assert merging.poll() is None  # still verifying
    other = gp("spawn", "other", "-n", "1", env={"GIT_PARALLEL_LOCK_TIMEOUT": "1"})
    assert "spawned run" in other.stdout
    out, err = merging.communicate(timeout=60)
    assert merging.returncode == 0, err
    assert "re-proved track main" in out


def test_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, "-c", "open(b'bad\\xffname.num', 'w').write('1')")
    result = gp.json("check", "t")
    assert result["instances"][0]["verdict"] == "pass"
    gp("pick", "t")
    gp("merge", "t")
