"""A judged command (a gate, setup, a probe, a distinguish run, the
merge's re-proof) runs the attempt's code; the git it sees is a view of its
own: the history the repository had before the task's attempts (every ref
but git-parallel's) and the judged commit, nothing else.  So the attempt's
code cannot run a sibling's, whatever route it takes to the objects: a
branch name, a scan of the store, the attempts' own stores."""

from __future__ import annotations

import json
import os
import subprocess
import time
import textwrap
from pathlib import Path

from conftest import git, make_repo
from hostile import needs_namespace
from test_hostile import APP_FIXED, PY, project

from gitflow_parallel.git import judged_view

# The attempt's app.py: wrong, and when a gate imports it, it looks for a
# right add() anywhere git can reach and runs that instead.
BORROWER = textwrap.dedent("""\
    import os, subprocess


    def add(a, b):
        return a - b


    def _blobs(env):
        listed = subprocess.run(['git', 'cat-file', '--batch-all-objects', '--batch-check'],
                                capture_output=True, text=True, env=env).stdout.split()
        return [listed[i] for i in range(0, len(listed) - 2, 3) if listed[i + 1] == 'blob']


    def _borrow():
        tried = [['git', 'show', 'parallel/t/2:app.py']]
        env = dict(os.environ)
        common = subprocess.run(['git', 'rev-parse', '--git-common-dir'], capture_output=True,
                                text=True).stdout.strip()
        stores = []
        for root, dirs, _ in os.walk(os.path.join(common, 'worktrees')):
            if os.path.basename(root) == 'objects':
                stores.append(root)
        env['GIT_ALTERNATE_OBJECT_DIRECTORIES'] = os.pathsep.join(stores)
        for oid in _blobs(env):
            tried.append(['git', 'cat-file', 'blob', oid])
        for argv in tried:
            text = subprocess.run(argv, capture_output=True, text=True, env=env).stdout
            if 'a + b' in text and 'def add' in text and '_borrow' not in text:
                return text
        return None


    _found = _borrow()
    if _found:
        exec(_found)
        print('BORROWED')
    """)

# A gate that asks its checkout's git what any test suite's git would ask.
GIT_GATE = textwrap.dedent(f"""\
    protect: [tests/**]
    gates:
      - name: tests
        run: ['{PY}', -m, pytest, -q, -p, no:cacheprovider, tests]
      - name: history
        run: [sh, -c, 'git status --porcelain && git log --oneline | grep -q "initial" && git describe --tags && git show HEAD:app.py >/dev/null']
    """)


@needs_namespace
def test_a_judged_command_cannot_run_a_siblings_code(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"printf '{APP_FIXED}' > app.py && git commit -qam right")
    (tmp_path / "borrower.py").write_text(BORROWER)
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"cp {tmp_path / 'borrower.py'} app.py && git commit -qam borrowed")
    checked = {i["id"]: i for i in gp.json("check", "t", code=None)["instances"]}
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", "the wrong attempt passed with its sibling's code"


@needs_namespace
def test_a_gates_git_sees_the_history_and_the_judged_commit(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, GIT_GATE)
    git(repo, "tag", "v1.0")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"printf '{APP_FIXED}' > app.py && git commit -qam fix")
    checked = gp.json("check", "t")["instances"][0]
    assert checked["verdict"] == "pass", json.dumps(checked["gates"])[:900]
    gp("pick", "t")
    gp("merge", "t")
    assert subprocess.run(["git", "fsck", "--no-progress"], cwd=repo, capture_output=True).returncode == 0


# -- the view itself -------------------------------------------------------------------

def _objects(view_objects: Path, repo: Path) -> set[str]:
    """Every object git finds in a view's store alone."""
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(view_objects), "GIT_ALTERNATE_OBJECT_DIRECTORIES": ""}
    out = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"], cwd=repo,
                         env=env, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def _reachable(repo: Path, *revs: str) -> set[str]:
    out = git(repo, "rev-list", "--objects", *revs)
    return {line.split()[0] for line in out.splitlines()}


def test_the_view_holds_the_history_and_the_judged_commit_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    common = repo / ".git"
    git(repo, "switch", "-q", "-c", "parallel/t/1")
    (repo / "a.txt").write_text("one\n")
    git(repo, "commit", "-qam", "one")
    one = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "switch", "-q", "-c", "parallel/t/2", "main")
    (repo / "a.txt").write_text("two\n")
    git(repo, "commit", "-qam", "two")
    two = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "switch", "-q", "main")
    git(repo, "tag", "-a", "-m", "release", "v1")
    view = judged_view.make(common, tmp_path / "state", one)
    assert view is not None
    assert _objects(view.objects, repo) == _reachable(repo, "--all", "--not", two) | _reachable(repo, "refs/tags/v1")
    assert two not in _objects(view.objects, repo)
    refs = (view.refs / "heads" / "main").read_text().strip() if (view.refs / "heads" / "main").exists() else ""
    assert refs == git(repo, "rev-parse", "main").strip()
    assert not (view.refs / "heads" / "parallel").exists()
    view.remove()
    assert not view.folder.exists()

    # main moves: the next view starts from the packs of the last, and adds
    # what main added.
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-qm", "b")
    again = judged_view.make(common, tmp_path / "state", one)
    assert again is not None
    assert _objects(again.objects, repo) == _reachable(repo, "main", "refs/tags/v1", one)
    assert len(list((again.objects / "pack").glob("*.pack"))) == 3  # the first history, what main added, the judged
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "state" / judged_view.FOLDER).iterdir()) == [
        "history", "history", "view"]


def test_a_repository_of_thousands_of_tags_gets_them_in_one_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    for n in range(50):
        git(repo, "tag", f"v{n}")
    git(repo, "update-ref", "refs/remotes/origin/main", "main")
    git(repo, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    git(repo, "pack-refs", "--all")
    view = judged_view.make(repo / ".git", tmp_path / "state", None)
    assert view is not None
    assert len(view.packed_refs.read_text().splitlines()) == 52  # main, origin/main and the tags
    assert [p.name for p in view.refs.rglob("*") if p.is_file()] == ["HEAD"]
    assert (view.refs / "remotes" / "origin" / "HEAD").read_text() == "ref: refs/remotes/origin/main\n"


def test_what_a_killed_check_left_goes_with_the_next_judging(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    root = tmp_path / "state" / judged_view.FOLDER
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"view-{dead.pid}-abc", f"building-{dead.pid}-abc", f"view-{os.getpid()}-mine"):
        (root / name / "objects").mkdir(parents=True)
    view = judged_view.make(repo / ".git", tmp_path / "state", None)
    assert view is not None
    left = sorted(p.name for p in root.iterdir())
    assert f"view-{os.getpid()}-mine" in left and not any(str(dead.pid) in n for n in left)


def test_a_view_of_a_process_in_another_pid_namespace_is_kept(tmp_path: Path) -> None:
    """A check in a container sharing the repository names its folders by
    a pid this process cannot look up: once that looked dead, and its view
    went from under its gates.  Its folders stay until they are a day old;
    a dead one of this namespace goes, in either naming."""
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    root = tmp_path / "state" / judged_view.FOLDER
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = judged_view._PID_NAMESPACE
    names = {"foreign": f"view-{dead.pid}-n1{here}-abc", "foreign-building": f"building-{dead.pid}-n1{here}-abc",
             "foreign-old": f"view-{dead.pid}-n1{here}-old", "dead-here": f"view-{dead.pid}-n{here}-abc"}
    for name in names.values():
        (root / name / "objects").mkdir(parents=True)
    day = time.time() - judged_view.FOREIGN_KEPT_S - 60
    os.utime(root / names["foreign-old"], (day, day))
    assert judged_view.make(repo / ".git", tmp_path / "state", None) is not None
    left = {p.name for p in root.iterdir()}
    assert {names["foreign"], names["foreign-building"]} <= left
    assert names["foreign-old"] not in left and names["dead-here"] not in left
    assert any(n.startswith(f"view-{os.getpid()}-n{here}-") for n in left)  # its own, named the same way


def test_agents_of_one_tip_share_one_view_until_the_process_ends(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    common = repo / ".git"
    git(repo, "branch", "parallel/t/1")
    git(repo, "branch", "parallel/t/2")
    first, second = judged_view.for_agent(common, "parallel/t/1"), judged_view.for_agent(common, "parallel/t/2")
    assert first is not None and second is not None and first.folder == second.folder
    first.remove()  # a fence's close: the view stays for the others
    assert second.objects.is_dir()
    git(repo, "switch", "-q", "parallel/t/2")
    (repo / "a.txt").write_text("two\n")
    git(repo, "commit", "-qam", "two")
    moved = judged_view.for_agent(common, "parallel/t/2")
    assert moved is not None and moved.folder != first.folder
    assert git(repo, "rev-parse", "HEAD").strip() in _objects(moved.objects, repo)
    judged_view._remove_agent_views()  # what the process does at its end
    assert not first.folder.exists() and not moved.folder.exists()
