"""Spawn, status, notes, abort and cleanup against real git."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GP, git, make_repo, snapshot


def test_spawn_three_instances(repo: Path, gp: GP) -> None:
    gp("spawn", "demo-task", "-n", "3")
    branches = git(repo, "branch", "--list", "parallel/*", "--format=%(refname:short)").splitlines()
    assert branches == ["parallel/demo-task/1", "parallel/demo-task/2", "parallel/demo-task/3"]
    worktrees = [l for l in git(repo, "worktree", "list", "--porcelain").splitlines() if l.startswith("worktree ")]
    assert len(worktrees) == 4
    data = gp.json("status", "demo-task")
    run = data["run"]
    assert data["ok"] is True and [i["id"] for i in run["instances"]] == ["1", "2", "3"]
    for inst in run["instances"]:
        wt = Path(inst["worktree"])
        assert (wt / "README.md").read_text() == "hello\n"
        assert repo.resolve() not in wt.resolve().parents  # outside the main worktree
        assert ".git" not in wt.parts
    # Every tip is still the base commit, which gets no instance lines: the
    # base is the team's branch (the record has them; notes follow the tips).
    assert git(repo, "notes", "--ref=parallel", "show", "main", check=False) == ""


def test_tracks_name_instances(repo: Path, gp: GP) -> None:
    run = gp.json("spawn", "fan", "-n", "2", "--track", "api", "--track", "ui")
    assert [i["id"] for i in run["instances"]] == ["api-1", "api-2", "ui-1", "ui-2"]
    assert run["tracks"] == ["api", "ui"]


@pytest.mark.parametrize("name", ["../x", "a..b", "x.lock", "", "a" * 200, "a b", "-rf", "a/b", "x."])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_invalid_task_names_change_nothing(repo: Path, gp: GP, name: str) -> None:
    before = snapshot(repo)
    proc = gp("spawn", name, code=None)
    assert proc.returncode in (1, 2)
    if proc.returncode == 1:
        assert "error[PARALLEL_INVALID_NAME]" in proc.stderr and "hint:" in proc.stderr
    assert snapshot(repo) == before


@pytest.mark.parametrize("n", ["0", "-1", "1000", "x"])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_bad_instance_counts(repo: Path, gp: GP, n: str) -> None:
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", n, code=2)
    assert "Usage" in proc.stderr or "Error" in proc.stderr
    assert snapshot(repo) == before


def test_unknown_base(repo: Path, gp: GP) -> None:
    before = snapshot(repo)
    proc = gp("spawn", "t", "--base", "nope", code=1)
    assert "error[PARALLEL_BASE_NOT_FOUND]" in proc.stderr
    assert snapshot(repo) == before


def test_outside_repo_and_bare(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    proc = GP(outside)("status", code=1)
    assert "error[PARALLEL_NOT_A_REPO]" in proc.stderr
    bare = tmp_path / "bare.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    proc = GP(bare)("spawn", "t", code=1)
    assert "error[PARALLEL_NOT_A_REPO]" in proc.stderr
    assert "bare" in proc.stderr


@pytest.mark.parametrize("config, needle", [
    ("instances: [\n", "line"),
    ("bogus_key: 1\n", "bogus_key"),
    ("merge:\n  policy: sideways\n", "merge.policy (line 2)"),
    ("instances: many\n", "instances"),
    ("gates:\n  - name: t\n    run: ['true']\n    mode: sometimes\n", "gates[0].mode"),
    ("gates:\n  - name: t\n    run: [true]\n", "quote it"),
])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_bad_config_refused(tmp_path: Path, config: str, needle: str) -> None:
    repo = make_repo(tmp_path / "r", config=config)
    gp = GP(repo)
    before = snapshot(repo)
    proc = gp("spawn", "t", code=1)
    assert "error[PARALLEL_CONFIG_INVALID]" in proc.stderr
    assert needle in proc.stderr
    assert snapshot(repo) == before


def test_config_read_from_base_commit_not_worktree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="instances: 2\n")
    (repo / ".gitparallel.yaml").write_text("instances: 5\n")  # uncommitted
    run = GP(repo).json("spawn", "t")
    assert len(run["instances"]) == 2
    assert run["config"]["instances"] == 2 and len(run["config_sha256"]) == 64


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_record_broken_by_hand(repo: Path, gp: GP) -> None:
    gp.json("spawn", "t", "-n", "1")
    path = repo / ".git" / "parallel" / "runs" / "t.yaml"
    text = path.read_text()
    path.write_text(text.replace("status: pending", "status: exploded", 1))
    proc = gp("status", "t", code=1)
    assert "error[PARALLEL_RECORD_INVALID]" in proc.stderr and "exploded" in proc.stderr
    path.write_text("{{{ not yaml")
    proc = gp("status", "t", code=1)
    assert "error[PARALLEL_RECORD_INVALID]" in proc.stderr and "Traceback" not in proc.stderr
    path.write_text(text.replace("run_revision: 1", "run_revision: banana"))
    proc = gp("status", "t", code=1)
    assert "run_revision" in proc.stderr


def test_record_read_exactly_as_safe_load(repo: Path, gp: GP) -> None:
    """Records are parsed through libyaml when present; a file that only
    libyaml would accept (a tab PyYAML refuses) is still refused, at PyYAML's line."""
    import yaml

    from gitflow_parallel.state.store import parse_yaml

    gp.json("spawn", "t", "-n", "2")
    path = repo / ".git" / "parallel" / "runs" / "t.yaml"
    text = path.read_text()
    assert parse_yaml(text) == yaml.safe_load(text)
    odd = {"s": "tab\there, nul \x00, bell \x07, NEL \x85, LS \u2028, BOM \ufeff, é ✓ 😀 " * 3, "n": [None, True, 1.5]}
    dumped = yaml.safe_dump(odd, sort_keys=True, default_flow_style=False, allow_unicode=True)
    assert parse_yaml(dumped) == yaml.safe_load(dumped) == odd
    for broken in ("a:\tb\n", "a: [1,\t2]\n", "a: 1\nb:\t\n  c: 2\n", "a: \x07\n", "{{{ not yaml", "a: 1\n\tb: 2\n"):
        with pytest.raises(yaml.YAMLError) as ours:
            parse_yaml(broken)
        with pytest.raises(yaml.YAMLError) as theirs:
            yaml.safe_load(broken)
        assert str(ours.value) == str(theirs.value)
    path.write_text(text.replace("\nstatus: pending", "\nstatus:\tpending", 1))
    lineno = text[: text.index("\nstatus: pending")].count("\n") + 2
    proc = gp("status", "t", code=1)
    assert "error[PARALLEL_RECORD_INVALID]" in proc.stderr and f"not valid YAML at line {lineno}" in proc.stderr


def test_second_spawn_of_live_task(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "1")
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "1", code=1)
    assert "error[PARALLEL_RUN_EXISTS]" in proc.stderr
    assert snapshot(repo) == before


def test_concurrent_spawns_one_wins(repo: Path) -> None:
    procs = [subprocess.Popen(["git", "parallel", "spawn", "race", "-n", "2"], cwd=repo,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 1, 1, 1]
    assert all("PARALLEL_RUN_EXISTS" in err for code, err in results if code == 1)
    assert len(git(repo, "branch", "--list", "parallel/race/*").splitlines()) == 2


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_cap_exhausted(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="max_total: 4\n")
    gp = GP(repo)
    gp("spawn", "a", "-n", "3")
    before = snapshot(repo)
    proc = gp("spawn", "b", "-n", "2", code=1)
    assert "error[PARALLEL_DEV_RESOURCE_CAP_EXHAUSTED]" in proc.stderr
    assert snapshot(repo) == before
    gp("spawn", "b", "-n", "1")


def test_spawn_failing_on_third_worktree_leaves_nothing(repo: Path, gp: GP, tmp_path: Path) -> None:
    blocker = repo.parent / "repo.parallel" / "t" / "3"
    blocker.mkdir(parents=True)
    (blocker / "precious.txt").write_text("mine")
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "4", code=1)
    assert "error[PARALLEL_DEV_WORKTREE_CREATE_FAILED]" in proc.stderr and "instance 3" in proc.stderr
    assert snapshot(repo) == before
    assert (blocker / "precious.txt").read_text() == "mine"
    assert sorted(p.name for p in blocker.parent.iterdir()) == ["3"]


@pytest.mark.parametrize("obstacle", ["file-for-folder", "dangling-symlink", "branch"])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_spawn_obstacles_roll_back(repo: Path, gp: GP, obstacle: str) -> None:
    root = repo.parent / "repo.parallel"
    root.mkdir()
    if obstacle == "file-for-folder":
        (root / "t").write_text("a file, not a folder")
    elif obstacle == "dangling-symlink":
        (root / "t").mkdir()
        (root / "t" / "3").symlink_to(root / "nowhere")
    else:
        git(repo, "branch", "parallel/t/3")
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "3", code=1)
    assert "error[PARALLEL_DEV_WORKTREE_CREATE_FAILED]" in proc.stderr
    assert snapshot(repo) == before
    if obstacle == "file-for-folder":
        assert (root / "t").read_text() == "a file, not a folder"
    if obstacle == "dangling-symlink":
        assert (root / "t" / "3").is_symlink()


def test_spawn_failing_in_every_checkout_process_leaves_nothing(repo: Path, gp: GP) -> None:
    # A base whose tree holds `.GIT/config`: git and libgit2 refuse to check
    # that out, so each of the three checkout processes fails on its own.
    blob = git(repo, "hash-object", "-w", "--stdin", input="evil\n")
    sub = git(repo, "mktree", input=f"100644 blob {blob}\tconfig\n")
    tree = git(repo, "mktree", input=git(repo, "ls-tree", "HEAD") + f"\n040000 tree {sub}\t.GIT\n")
    git(repo, "branch", "bad", git(repo, "commit-tree", "-p", "HEAD", "-m", "bad", tree))
    before = snapshot(repo)
    proc = gp("spawn", "t", "-n", "3", "--base", "bad", code=1)
    assert "error[PARALLEL_DEV_WORKTREE_CREATE_FAILED]" in proc.stderr and "invalid path" in proc.stderr
    assert snapshot(repo) == before
    assert not (repo.parent / "repo.parallel" / "t").exists()
    gp("spawn", "t", "-n", "3")


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_cleanup_keeps_all_work(repo: Path, gp: GP) -> None:
    run = gp.json("spawn", "t", "-n", "2")
    wt = Path(run["instances"][0]["worktree"])
    (wt / "committed.txt").write_text("c\n")
    git(wt, "add", "committed.txt")
    git(wt, "commit", "-q", "-m", "agent commit")
    (wt / "README.md").write_text("changed\n")
    (wt / "untracked.txt").write_text("u\n")
    before = snapshot(repo)
    proc = gp("abort", "t", code=1)
    assert "PARALLEL_DEV_WORKTREE_CLEANUP_FAILED" in proc.stderr and "untracked.txt" in proc.stderr
    assert snapshot(repo) == before
    gp("abort", "t", "--force")
    archive = f"refs/parallel/archive/{run['run_id']}/1/0"
    files = git(repo, "ls-tree", "-r", "--name-only", archive).splitlines()
    assert {"committed.txt", "untracked.txt", "README.md"} <= set(files)
    assert git(repo, "show", f"{archive}:README.md") == "changed"
    assert git(repo, "show", f"{archive}:untracked.txt") == "u"
    assert "agent commit" in git(repo, "log", "--format=%s", archive)
    assert git(repo, "branch", "--list", "parallel/*") == ""
    assert not wt.exists()
    assert not (repo / ".git" / "worktrees").exists() or not list((repo / ".git" / "worktrees").iterdir())
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_cleanup_refuses_live_run(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "1")
    proc = gp("cleanup", "t", code=1)
    assert "abort" in proc.stderr


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_spawn_again_after_abort(repo: Path, gp: GP) -> None:
    first = gp.json("spawn", "t", "-n", "1")
    gp("abort", "t")
    second = gp.json("spawn", "t", "-n", "1")
    assert second["run_id"] != first["run_id"]
    done = repo / ".git" / "parallel" / "runs" / "done" / f"{first['run_id']}.yaml"
    assert done.exists()


def test_json_refusal_shape(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    proc = GP(outside)("status", "--json", code=1)
    data = json.loads(proc.stdout)
    assert data["ok"] is False and data["code"] == "PARALLEL_NOT_A_REPO" and data["hint"]


def test_init_sets_notes_config(repo: Path, gp: GP) -> None:
    gp("init")
    assert (repo / ".gitparallel.yaml").exists()
    assert git(repo, "config", "notes.rewriteRef") == "refs/notes/parallel"
    # Plain `git log` stays quiet unless asked (--display).
    assert git(repo, "config", "notes.displayRef", check=False) == ""
    gp("init")  # idempotent
    assert git(repo, "config", "--get-all", "notes.rewriteRef").splitlines() == ["refs/notes/parallel"]
    gp("init", "--display")
    assert git(repo, "config", "--get-all", "notes.displayRef").splitlines() == ["refs/notes/parallel"]


def test_module_entry_point(repo: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gitflow_parallel", "--help"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 0 and "spawn" in proc.stdout


def test_retry_keeps_uncommitted_work(repo: Path, gp: GP) -> None:
    run = gp.json("spawn", "t", "-n", "1")
    wt = Path(run["instances"][0]["worktree"])
    gp("abort", "t", "1")
    (wt / "notes.txt").write_text("half-done work\n")
    before = snapshot(repo)
    proc = gp("retry", "t", "1", code=1)
    assert "PARALLEL_DEV_WORKTREE_CLEANUP_FAILED" in proc.stderr and "notes.txt" in proc.stderr
    assert snapshot(repo) == before and (wt / "notes.txt").exists()
    record = gp.json("retry", "t", "1", "--force")
    inst = record["instances"][0]
    assert inst["attempt"] == 1 and inst["status"] == "pending"
    assert not (wt / "notes.txt").exists()
    archive = inst["history"][0]["archive_ref"]
    assert git(repo, "show", f"{archive}:notes.txt") == "half-done work"



def test_run_exists_is_said_before_the_cap(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", config="max_total: 2\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    proc = gp("spawn", "t", "-n", "1", code=1)
    assert "error[PARALLEL_RUN_EXISTS]" in proc.stderr


def test_abort_of_a_terminal_instance_is_refused(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "1")
    gp("abort", "t", "1")
    before = snapshot(repo)
    proc = gp("abort", "t", "1", code=1)
    assert "error[PARALLEL_BRANCH_TERMINAL]" in proc.stderr and "retry" in proc.stderr
    assert snapshot(repo) == before


def test_default_base_is_the_current_worktrees_branch(repo: Path, gp: GP, tmp_path: Path) -> None:
    linked = tmp_path / "feature-wt"
    git(repo, "worktree", "add", "-q", "-b", "feature", str(linked))
    run = GP(linked).json("spawn", "t", "-n", "1")
    assert run["base"]["ref"] == "refs/heads/feature"


def test_cleanup_leaves_a_foreign_folder_and_nested_repos_alone(repo: Path, gp: GP) -> None:
    run = gp.json("spawn", "t", "-n", "2")
    wt1, wt2 = (Path(i["worktree"]) for i in run["instances"])
    # 1: the worktree was removed by hand and someone put their own folder there.
    git(repo, "worktree", "remove", str(wt1))
    wt1.mkdir()
    (wt1 / "precious.txt").write_text("mine\n")
    before = snapshot(repo)
    proc = gp("abort", "t", "--force", code=1)
    assert "PARALLEL_DEV_WORKTREE_CLEANUP_FAILED" in proc.stderr and "not the worktree" in proc.stderr
    assert snapshot(repo) == before and (wt1 / "precious.txt").exists()
    (wt1 / "precious.txt").unlink()
    wt1.rmdir()
    # 2: a nested repository cannot be archived in ours.
    nested = wt2 / "nested"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "n").write_text("n\n")
    git(nested, "add", "n")
    git(nested, "commit", "-q", "-m", "n")
    proc = gp("abort", "t", "--force", code=1)
    assert "nested git repositories" in proc.stderr and (nested / "n").exists()


def test_retry_with_a_stale_revision_changes_nothing(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "1")
    gp("abort", "t", "1")
    before = snapshot(repo)
    proc = gp("retry", "t", "1", "--revision", "1", code=1)
    assert "PARALLEL_RUN_REVISION_CONFLICT" in proc.stderr
    assert snapshot(repo) == before


def test_frozen_config_edited_by_hand(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "1")
    path = repo / ".git" / "parallel" / "runs" / "t.yaml"
    path.write_text(path.read_text().replace("rework_max: 2", "rework_max: 99"))
    proc = gp("status", "t", code=1)
    assert "PARALLEL_RECORD_INVALID" in proc.stderr and "config_sha256" in proc.stderr


@pytest.mark.parametrize("config, needle", [
    ('notes_ref: "refs/notes/x.lock"\n', "notes_ref"),
    ("merge:\n  timeout: .nan\n", "merge.timeout"),
    ('gates:\n  - name: g\n    run: x\n    env: {"A=B": "1"}\n', "gates[0].env"),
])
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_more_bad_config(tmp_path: Path, config: str, needle: str) -> None:
    repo = make_repo(tmp_path / "r", config=config)
    before = snapshot(repo)
    proc = GP(repo)("spawn", "t", code=1)
    assert "error[PARALLEL_CONFIG_INVALID]" in proc.stderr and needle in proc.stderr
    assert snapshot(repo) == before


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_retry_after_the_worktree_folder_was_deleted(repo: Path, gp: GP) -> None:
    import shutil

    run = gp.json("spawn", "t", "-n", "1")
    gp("abort", "t", "1")
    shutil.rmtree(run["instances"][0]["worktree"])
    record = gp.json("retry", "t", "1")
    inst = record["instances"][0]
    assert inst["attempt"] == 1 and (Path(inst["worktree"]) / "README.md").exists()


def test_admin_names_do_not_collide_across_tasks(repo: Path, gp: GP) -> None:
    gp("spawn", "a", "-n", "1", "--track", "b")
    gp("spawn", "a-b", "-n", "1")
