"""The run record store and the notes writer under real concurrency:
separate processes racing on one repository."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import GP, git

TRANSITION = textwrap.dedent("""
    import json, sys
    from gitflow_parallel import model
    from gitflow_parallel.state.project import Project
    from gitflow_parallel.errors import ParallelError
    task, inst, expected = sys.argv[1], sys.argv[2], sys.argv[3]
    project = Project.open(".")
    start = lambda record, i: model.move(record, i, "running", pid=1)  # what run does, under the lock
    try:
        rev = None
        if expected == "read":
            rec = project.store.load(task)
            rev = [i for i in rec["instances"] if i["id"] == inst][0]["instance_revision"]
        record, _ = project.store.update_instance(task, inst, start, expected_instance_revision=rev)
        print(json.dumps({"ok": True, "revision": record["run_revision"]}))
    except ParallelError as exc:
        print(json.dumps({"ok": False, "code": exc.code}))
""")

NOTE_WRITER = textwrap.dedent("""
    import sys
    from gitflow_parallel.state.project import Project
    from gitflow_parallel import provenance
    from gitflow_parallel.git import notes
    project = Project.open(".")
    oid, k = sys.argv[1], sys.argv[2]
    notes.add(project.repo.pygit, "refs/notes/parallel",
              [(oid, provenance.line("test", "PR-x", writer=int(k), part=p)) for p in range(3)], f"writer {k}")
""")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_sixteen_processes_transitioning(repo: Path, gp: GP, tmp_path: Path) -> None:
    (repo / ".gitparallel.yaml").write_text("max_total: 16\n")
    git(repo, "add", ".gitparallel.yaml")
    git(repo, "commit", "-q", "-m", "cap")
    gp("spawn", "t", "-n", "8")
    script = tmp_path / "transition.py"
    script.write_text(TRANSITION)
    # 8 instances, two processes each: one valid transition per instance can
    # succeed; its twin must wait for the lock and then be refused.
    procs = []
    for inst in range(1, 9):
        for mode in ("read", "blind"):
            procs.append(subprocess.Popen([sys.executable, str(script), "t", str(inst), mode], cwd=repo,
                                          stdout=subprocess.PIPE, text=True))
    results = [json.loads(p.communicate()[0]) for p in procs]
    ok = [r for r in results if r["ok"]]
    refused = [r for r in results if not r["ok"]]
    assert len(ok) == 8
    assert {r["code"] for r in refused} <= {"PARALLEL_RUN_REVISION_CONFLICT", "PARALLEL_BRANCH_TERMINAL"}
    assert len(refused) == 8
    run = gp.json("status", "t")["run"]
    assert run["run_revision"] == 1 + len(ok)
    assert sorted(r["revision"] for r in ok) == list(range(2, 10))
    assert all(i["status"] == "running" for i in run["instances"])


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_eight_note_writers_at_once(repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "notes.py"
    script.write_text(NOTE_WRITER)
    head = git(repo, "rev-parse", "HEAD")
    procs = [subprocess.Popen([sys.executable, str(script), head, str(k)], cwd=repo) for k in range(8)]
    assert all(p.wait() == 0 for p in procs)
    lines = [json.loads(l) for l in git(repo, "notes", "--ref=parallel", "show", head).splitlines()]
    assert sorted((l["writer"], l["part"]) for l in lines) == [(k, p) for k in range(8) for p in range(3)]
    # One notes commit per writer: each command's notes landed together.
    assert len(git(repo, "rev-list", "refs/notes/parallel").splitlines()) == 8
    fsck = subprocess.run(["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True, text=True)
    assert fsck.returncode == 0


def test_notes_merge_with_cat_sort_uniq(repo: Path, tmp_path: Path) -> None:
    # Notes written on two clones merge line-wise with git's own strategy.
    script = tmp_path / "notes.py"
    script.write_text(NOTE_WRITER)
    head = git(repo, "rev-parse", "HEAD")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    subprocess.run([sys.executable, str(script), head, "1"], cwd=repo, check=True)
    subprocess.run([sys.executable, str(script), head, "2"], cwd=clone, check=True)
    git(clone, "fetch", "-q", str(repo), "refs/notes/parallel:refs/notes/theirs")
    git(clone, "notes", "--ref=parallel", "merge", "-s", "cat_sort_uniq", "refs/notes/theirs")
    lines = git(clone, "notes", "--ref=parallel", "show", head).splitlines()
    assert len(lines) == 6 and lines == sorted(lines)


def test_live_index_tracks_live_runs(repo: Path, gp: GP) -> None:
    live = repo / ".git" / "parallel" / "live"
    assert not live.exists()
    gp("spawn", "t", "-n", "2")
    text = live.read_text()
    assert "refs/heads/main" in text and "refs/heads/parallel/t/1" in text and "refs/heads/parallel/t/2" in text
    gp("abort", "t")
    assert not live.exists()


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_exclusive_ref_creation_has_one_winner(repo: Path) -> None:
    # libgit2's references.create(force=False) checks before it locks, so two
    # creators can both "win"; create_ref_exclusive must never let that happen.
    script = textwrap.dedent("""
        import sys, time
        from gitflow_parallel.git.repo import create_ref_exclusive
        start, oid = float(sys.argv[1]), sys.argv[2]
        while time.time() < start:
            pass
        print(int(create_ref_exclusive(".git", "refs/parallel/test/race", oid, "race")))
    """)
    head = git(repo, "rev-parse", "HEAD")
    for _ in range(5):
        git(repo, "update-ref", "-d", "refs/parallel/test/race")
        import time
        start = str(time.time() + 0.5)
        procs = [subprocess.Popen([sys.executable, "-c", script, start, head], cwd=repo, stdout=subprocess.PIPE,
                                  text=True) for _ in range(6)]
        wins = sum(int(p.communicate()[0].strip()) for p in procs)
        assert wins == 1


def test_a_record_read_back_after_its_own_write_is_the_record_on_disk(repo: Path, gp: GP) -> None:
    """The store keeps what it last wrote and skips parsing it when the file
    still holds those bytes: what it returns must be what a fresh parse
    gives, key order included, and any other writer's text must win."""
    from gitflow_parallel import model
    from gitflow_parallel.state.project import Project
    from gitflow_parallel.state.store import Store

    gp("spawn", "t", "-n", "3")
    project = Project.open(str(repo))
    record, _ = project.store.update_instance("t", "2", lambda rec, i: model.move(rec, i, "running", pid=1))
    path = project.store.path("t")
    kept = project.store.load("t")
    fresh = Store(project.store.root).load("t")
    assert kept == fresh == record
    assert json.dumps(kept) == json.dumps(fresh)  # same key order, same types
    kept["instances"][0]["status"] = "changed by the caller"
    assert project.store.load("t") == fresh  # a copy each time: callers cannot change what is kept
    # Another writer, in place (same inode), within the same clock tick.
    text = path.read_text()
    path.write_text(text.replace("run_revision: ", "run_revision: 9", 1))
    assert project.store.load("t")["run_revision"] == int(f"9{record['run_revision']}")
