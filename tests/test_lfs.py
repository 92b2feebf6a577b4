"""Git LFS and other clean filters under the sandbox: an agent commits
LFS files as it would anywhere (its LFS objects land in a store of its
own, taken into the shared one only when their content hashes to their
name), and the runner's commit of what it left uncommitted runs the
configured filters inside the attempt's fence, never beside it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import GP, git, make_repo
from gitflow_parallel.files import remove_tree
from hostile import log_of, status
from test_sandbox import LAYERS, fenced

needs_lfs = pytest.mark.skipif(shutil.which("git-lfs") is None, reason="git-lfs is not installed")

DATA = "binary payload\n" * 100
OID = hashlib.sha256(DATA.encode()).hexdigest()


def lfs_project(tmp_path: Path, **files: str) -> tuple[Path, GP]:
    repo = make_repo(tmp_path / "repo", files={
        ".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n", "README.md": "hello\n", **files})
    git(repo, "lfs", "install", "--local")
    return repo, GP(repo)


def stored(repo: Path, oid: str) -> Path:
    return repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def pointer_of(repo: Path, rev: str) -> str:
    return git(repo, "cat-file", "-p", f"{rev}:data.bin")


@needs_lfs
@pytest.mark.parametrize("commits", [True, False], ids=["agent-commits", "left-uncommitted"])
def test_an_agent_s_lfs_file_is_committed_as_a_pointer_and_its_object_taken_in(tmp_path: Path,
                                                                               commits: bool) -> None:
    repo, gp = lfs_project(tmp_path)
    gp("spawn", "t", "-n", "1")
    script = "python3 -c \"open('data.bin','w').write('binary payload\\n' * 100)\""
    if commits:
        script += " && git add data.bin && git commit -qm 'add data'"
    gp("run", "t", "--", "sh", "-c", script)
    assert status(gp, "t")["1"]["status"] == "succeeded", log_of(gp, "t", "1")
    assert f"oid sha256:{OID}" in pointer_of(repo, "parallel/t/1")
    assert stored(repo, OID).read_text() == DATA
    # Plain git, in the attempt's worktree, sees its file as the content, not a pointer.
    wt = Path(status(gp, "t")["1"]["worktree"])
    assert git(wt, "status", "--porcelain") == ""
    assert git(wt, "lfs", "ls-files").endswith("data.bin")


FORGE_LFS = """
python3 - {oid} <<'EOF'
import os, subprocess, sys
oid = sys.argv[1]
common = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True).stdout.strip()
folder = os.path.join(common, "lfs", "objects", oid[:2], oid[2:4])
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, oid), "w").write("not what the name says\\n")
pointer = "version https://git-lfs.github.com/spec/v1\\noid sha256:%s\\nsize %d\\n" % (oid, {size})
open("data.bin", "w").write(pointer)
EOF
"""


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs it after
@needs_lfs
def test_a_forged_lfs_object_is_never_taken_in_and_fails_its_attempt(tmp_path: Path) -> None:
    repo, gp = lfs_project(tmp_path)
    gp("spawn", "t", "-n", "1")
    # The agent writes an object under the name of content it does not hold,
    # then commits a pointer naming it (as if it had stored the real data).
    gp("run", "t", "--", "sh", "-c", FORGE_LFS.format(oid=OID, size=len(DATA)), code=None)
    assert not stored(repo, OID).exists()
    inst = status(gp, "t")["1"]
    assert inst["status"] == "failed" and "PARALLEL_AGENT_TAMPERED" in inst["error"], inst


# A clean filter the project configures as a script of its own (as
# formatters and notebook strippers are): the attempt's code, once the
# attempt has changed the script.
HIJACK = """
cat > tools/clean.sh <<'EOF'
#!/bin/sh
echo hijacked > "{marker}"
cat
EOF
echo changed > notes.txt
"""


def filter_project(tmp_path: Path, config: str = "") -> tuple[Path, GP, Path]:
    """A project whose clean filter is a script of its own, spawned once;
    and where a hijacked filter would leave its mark, outside."""
    repo = make_repo(tmp_path / "repo", files={
        ".gitattributes": "*.txt filter=tidy\n", "tools/clean.sh": "#!/bin/sh\ncat\n", "notes.txt": "x\n",
        ".gitparallel.yaml": config})
    (repo / "tools" / "clean.sh").chmod(0o755)
    git(repo, "add", "tools/clean.sh")
    git(repo, "commit", "-q", "-m", "executable")
    git(repo, "config", "filter.tidy.clean", "./tools/clean.sh")
    gp = GP(repo)
    marker = tmp_path / "outside" / "marker"
    marker.parent.mkdir()
    gp("spawn", "t", "-n", "1")
    return repo, gp, marker


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs it after
@pytest.mark.parametrize("layer", LAYERS)
def test_the_leftovers_commit_runs_a_project_s_clean_filter_inside_the_attempt_s_fence(tmp_path: Path,
                                                                                       layer: str) -> None:
    repo, gp, marker = filter_project(tmp_path)
    gp("run", "t", "--", "sh", "-c", HIJACK.format(marker=marker), code=None, env=fenced(layer))
    assert not marker.exists(), "the attempt's filter ran outside its fence"
    # What it left is committed all the same, through the filter, which ran fenced.
    assert git(repo, "show", "parallel/t/1:notes.txt") == "changed"


# A gate that fails on a pointer: what it judges must be the file's content.
CONTENT_GATE = """
gates:
  - name: data
    run: [sh, -c, "for f in *.bin; do ! grep -q git-lfs.github.com $f || { echo pointer: $f; exit 1; }; done"]
"""


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs it after
@needs_lfs
@pytest.mark.parametrize("layer", LAYERS)
def test_gates_judge_lfs_files_by_their_content_not_their_pointers(tmp_path: Path, layer: str) -> None:
    repo, gp = lfs_project(tmp_path, **{".gitparallel.yaml": CONTENT_GATE})
    (repo / "base.bin").write_text("base data\n" * 50)
    git(repo, "add", "base.bin")
    git(repo, "commit", "-q", "-m", "base data in LFS")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "python3 -c \"open('data.bin','w').write('binary payload\\n' * 100)\"",
       env=fenced(layer))
    checked = gp.json("check", "t", code=None, env=fenced(layer))["instances"][0]
    assert checked["verdict"] == "pass", checked
    # Again in another task: the pool's checkout is reused, and its files checked against the commit.
    gp("spawn", "u", "-n", "1")
    gp("run", "u", "--", "sh", "-c", "echo more >> README.md", env=fenced(layer))
    checked = gp.json("check", "u", code=None, env=fenced(layer))["instances"][0]
    assert checked["verdict"] == "pass", checked


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs it after
@pytest.mark.parametrize("verbs", [[("retry", "t", "1", "--force")], [("abort", "t", "--force")]],
                         ids=["retry", "abort"])
def test_work_kept_from_a_dirty_attempt_is_staged_inside_a_fence(tmp_path: Path,
                                                               verbs: list[tuple[str, ...]]) -> None:
    """Outside a run (the attempt's leftovers not committed by it): what
    ``retry --force`` and ``cleanup --force`` keep of a dirty worktree is
    staged by git run in a fence like the agent's, filters and all."""
    repo, gp, marker = filter_project(tmp_path, "commit_leftovers: false\n")
    gp("run", "t", "--", "sh", "-c", HIJACK.format(marker=marker))
    for verb in verbs:
        gp(*verb)
    assert not marker.exists(), "the attempt's filter ran outside a fence"
    kept = git(repo, "for-each-ref", "--format=%(refname)", "refs/parallel/archive/").splitlines()
    assert any(git(repo, "show", f"{ref}:notes.txt", check=False) == "changed" for ref in kept), kept


@needs_lfs
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs it after
def test_a_deep_tree_in_an_attempt_s_lfs_store_is_never_walked(tmp_path: Path) -> None:
    repo, gp = lfs_project(tmp_path)
    gp("spawn", "t", "-n", "1")
    deep = ('mkdir -p "$(git rev-parse --git-common-dir)/lfs/objects/ab" && cd "$(git rev-parse --git-common-dir)'
            '/lfs/objects/ab" && python3 -c "import os\nfor _ in range(1500): os.mkdir(\'cd\'); os.chdir(\'cd\')"')
    try:
        gp("run", "t", "--", "sh", "-c", deep)
        assert status(gp, "t")["1"]["status"] == "succeeded", log_of(gp, "t", "1")
    finally:  # pytest's own cleanup of old temporary folders recurses once per level
        remove_tree(repo / ".git" / "worktrees", ignore_errors=True)


@pytest.mark.slow  # a bare remote, two clones and a worker process
def test_a_worker_tidying_a_dirty_attempt_stages_it_inside_a_fence(tmp_path: Path) -> None:
    """A worker removes each attempt's worktree once delivered; what it left
    uncommitted (``commit_leftovers: false``) is archived, staged by git in
    a fence like the agent's: the project's clean filter is a script the
    attempt rewrote."""
    from test_remote import CONFIG, TEST_SH, finish, start_worker

    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = make_repo(tmp_path / "seed", {"test.sh": TEST_SH, "out.txt": "bad\n", ".gitattributes": "*.txt filter=tidy\n",
                                         "tools/clean.sh": "#!/bin/sh\ncat\n", "notes.txt": "x\n"},
                     config=CONFIG + "commit_leftovers: false\n")
    (seed / "tools" / "clean.sh").chmod(0o755)
    git(seed, "add", "tools/clean.sh")
    git(seed, "commit", "-q", "-m", "executable")
    git(seed, "push", "-q", str(origin), "main")
    coord, worker = tmp_path / "coord", tmp_path / "w1"
    for clone in (coord, worker):
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        git(clone, "config", "filter.tidy.clean", "./tools/clean.sh")
    marker = tmp_path / "outside" / "marker"
    marker.parent.mkdir()
    gp = GP(coord)
    gp("spawn", "t", "-n", "1", "--remote", "origin")
    gp("run", "t", "--remote", "origin", "--", "sh", "-c", HIJACK.format(marker=marker))
    done = finish(start_worker(worker, tmp_path, "w1", "--once", "--lease", "30"))
    assert done["exit"] == 0, done
    assert [t["id"] for t in done.get("tidied", [])] in ([], ["1"]), done
    assert not (tmp_path / "w1.parallel" / "t" / "1").exists(), "the worker kept the worktree"
    assert not marker.exists(), "the attempt's filter ran outside a fence"
    kept = git(worker, "for-each-ref", "--format=%(refname)", "refs/parallel/archive/").splitlines()
    assert any(git(worker, "show", f"{ref}:notes.txt", check=False) == "changed" for ref in kept), kept


def test_work_finished_by_hand_is_staged_inside_a_fence(tmp_path: Path) -> None:
    """``done`` commits what a pending worktree holds, which an earlier
    attempt may have written (``retry --keep``): staged in a fence too."""
    repo, gp, marker = filter_project(tmp_path)
    worktree = Path(status(gp, "t")["1"]["worktree"])
    subprocess.run(["sh", "-c", HIJACK.format(marker=marker)], cwd=worktree, check=True)
    gp("done", "t", "1")
    assert not marker.exists(), "the worktree's filter ran outside a fence"
    assert git(repo, "show", "parallel/t/1:notes.txt") == "changed"
