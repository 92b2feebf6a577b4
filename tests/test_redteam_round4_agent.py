"""Red team, round four, as the agent: new routes by which a command run
under ``git parallel run`` acts outside its attempt, through what it leaves
in its admin folder and its view for git-parallel's own later verbs (merge,
cleanup, retry), and through the processes it can reach, grouped by place.
Each test asserts the promise; an attack that works makes it fail (one the
fix needs a design choice for is a strict xfail, its route explained)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import git
from gitflow_parallel.proc import leftovers
from hostile import log_of, needs_namespace, status
from test_hostile import HONEST, act, project
from test_sandbox import LAYERS, fenced

# Each attack runs a whole flow: the slow tier, which CI runs after the default one
# (kept under 150 s).
pytestmark = pytest.mark.slow

# -- the admin folder: what cleanup and merge read there after the agent ------

# sh, run by the agent: a git dir in its admin folder's `modules/`, where git
# keeps an initialised submodule's repository (and git-parallel keeps its
# commits at cleanup), whose config includes the standard input of whatever
# git reads it.
FAKE_SUBMODULE = ("A=$(git rev-parse --absolute-git-dir) && M=$A/modules/x && git init -q --bare $M && "
                  "git push -q $M HEAD:refs/heads/master && git --git-dir=$M symbolic-ref HEAD refs/heads/master && "
                  "printf '[include]\\n\\tpath = /dev/stdin\\n' >> $M/config")


@pytest.mark.slow  # a run, then abort in a process of its own
@needs_namespace
def test_a_submodule_git_dir_the_agent_makes_hangs_no_abort(tmp_path: Path) -> None:
    # Removing an attempt's worktree (abort, cleanup, merge's cleanup after
    # the base moved) keeps the commits of every submodule git dir in its
    # admin folder, by running `git fetch` from it, unfenced: git read that
    # repository's config, which the agent wrote (an include of /dev/stdin,
    # the pipe its own fetch writes to only once it has the refs: both
    # waited for ever, and so did abort).
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST + " && git commit -qam fix && " + FAKE_SUBMODULE)
    fix = git(repo, "rev-parse", "parallel/t/1")
    gp("abort", "t", own_process=True, timeout=60)
    kept = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/parallel/archive/").splitlines()
    assert any(line.endswith(f".modules/x/HEAD {fix}") for line in kept), kept  # its commits are kept all the same


def test_a_huge_sparse_reflog_in_the_admin_folder_is_not_read_whole_by_abort(tmp_path: Path) -> None:
    # Before an attempt's admin folder goes (abort, cleanup, merge's
    # cleanup), the commits its HEAD's reflog names are kept: the reflog was
    # read whole, 8 GiB of zeros of it (the test's process was killed for
    # memory).  The run's end removes such a file (the next test); this one
    # grows after it, as a daemon of the agent's does under Landlock alone,
    # which outlives its step until the next sweep.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", f"{HONEST} && git commit -qam fix")
    log = repo / ".git" / "worktrees" / "parallel+t+1" / "logs" / "HEAD"
    said = log.read_bytes()
    with open(log, "r+b") as handle:
        handle.truncate(8 << 30)
        handle.seek(8 << 30)
        handle.write(said)
    proc, rss = run_capped(repo, "abort", "t")
    assert proc.returncode == 0 and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])


# Python, run by the agent: its admin folder's HEAD still names its branch,
# then grows to a sparse 8 GiB (git and libgit2 read HEAD whole).
BIG_HEAD = textwrap.dedent("""\
    import os, subprocess
    admin = subprocess.check_output(["git", "rev-parse", "--absolute-git-dir"], text=True).strip()
    os.truncate(os.path.join(admin, "HEAD"), 8 << 30)
    """)


@pytest.mark.slow  # four capped processes
@needs_namespace
def test_a_huge_sparse_head_the_agent_leaves_is_read_whole_by_no_verb(tmp_path: Path) -> None:
    # The admin folder's HEAD is the agent's to write: grown to a sparse
    # 8 GiB after its first line, the runner's leftovers commit (libgit2),
    # then check, validate and abort each read it whole.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    (tmp_path / "big.py").write_text(BIG_HEAD)
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    for verb in (["run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam fix && python3 {tmp_path / 'big.py'}"],
                 ["check", "t"], ["validate"], ["abort", "t"]):
        proc, rss = run_capped(repo, *verb)
        assert proc.returncode in (0, 1) and rss < MAX_RSS_MB, (verb[0], proc.returncode, rss, proc.stderr[-600:])
        if verb[0] == "run":
            said = status(gp, "t")["1"]["error"]
            assert proc.returncode == 1 and "HEAD: 8,589,934,592 bytes" in said, said


# -- processes: the user's tmux server -------------------------------------------

# Under Landlock alone a path socket is reached whatever the fence (Landlock
# mediates no connect(2) to one): the server of `run --tmux`, or the user's
# own, runs what any client asks, outside the fence.
TMUX_LAYERS = [LAYERS[0], pytest.param("landlock", marks=[*LAYERS[1].marks, pytest.mark.xfail(
    strict=True, reason="Landlock alone mediates no connect(2) to a path socket: the agent reaches the socket of "
                        "any tmux server of the user's (run --tmux's too) and has it run a command unfenced; the fix "
                        "needs a layer Landlock lacks (a rule on connecting to path sockets, or a seccomp filter on "
                        "AF_UNIX sockets, which would refuse an honest test's own socket too)")])]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("layer", TMUX_LAYERS)
def test_an_agent_has_no_tmux_server_of_the_users_run_anything(tmp_path: Path, layer: str) -> None:
    # The user works in tmux (or ran `git parallel run --tmux` earlier): the
    # agent asks that server to run a command, which the server starts
    # itself, outside the sandbox, as the user.
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))  # a private server, as the user's would be
    server = {**os.environ, "TMUX_TMPDIR": str(sock), "TMUX": ""}
    escaped = tmp_path / "escaped"
    subprocess.run(["tmux", "new-session", "-d", "-s", "users", "sleep 600"], env=server, check=True)
    try:
        repo, gp = project(tmp_path)
        gp("spawn", "t", "-n", "1")
        agent = (f"tmux -S {sock}/tmux-{os.getuid()}/default run-shell 'touch {escaped}'; "
                 f"echo \"run-shell: $?\"; {HONEST}")
        gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
        said = log_of(gp, "t", "1")
        assert "run-shell: " in said, said
    finally:
        subprocess.run(["tmux", "kill-server"], env=server, capture_output=True)
        shutil.rmtree(sock, ignore_errors=True)
    assert not escaped.exists(), "the user's tmux server ran the agent's command: " + said


# -- refs: what the runner takes in of the attempt's own ---------------------------

# sh, run by the agent: 300 branches of its own (`<id>+<n>`), written
# straight into its view's packed-refs (a 64 MB one holds a million).
MANY_REFS = ("V=$(git rev-parse --path-format=absolute --git-common-dir) && H=$(git rev-parse HEAD) && "
             "B=$(git symbolic-ref HEAD) && seq 1 300 | sed \"s|.*|$H $B+&|\" >> $V/packed-refs")


@needs_namespace
def test_an_agent_cannot_have_the_runner_take_in_refs_without_end(tmp_path: Path) -> None:
    # The runner takes each of the attempt's own refs in by a `git
    # update-ref` of its own: a million branches written in the view's
    # packed-refs (one file) kept `run` busy for hours, and each went on to
    # be archived at cleanup.
    from gitflow_parallel.git import shadow

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam fix && {MANY_REFS}", code=1)
    made = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/parallel/t/").splitlines()
    assert len(made) <= shadow.MAX_OWN_REFS + 1, len(made)
    assert "refs/heads/parallel/t/1" in made  # its own branch first
    said = status(gp, "t")["1"]["error"]
    assert "over the 100 " in said, said


# -- objects: what the runner takes in from an attempt's own store -------------

# Python, run by the agent: a pack index in its own store that says it holds
# 150 million objects (4.2 GB, sparse: no disk used), beside a pack header.
BIG_PACK_INDEX = textwrap.dedent("""\
    import os, struct, subprocess
    store = subprocess.check_output(["git", "rev-parse", "--git-path", "objects"], text=True).strip()
    n, name = 150_000_000, os.path.join(store, "pack", "pack-" + os.urandom(20).hex())
    with open(name + ".idx", "wb") as idx:
        idx.write(b"\\377tOc" + struct.pack(">I", 2) + b"".join(struct.pack(">I", n if i == 255 else 0) for i in range(256)))
        idx.truncate(8 + 4 * 256 + n * 28 + 40)
    with open(name + ".pack", "wb") as pack:
        pack.write(b"PACK" + struct.pack(">II", 2, n) + bytes(20))
    """)


@needs_namespace
def test_a_pack_index_of_millions_of_objects_in_the_attempts_store_is_not_listed_by_the_runner(tmp_path: Path) -> None:
    # The runner lists every object of the attempt's own store to take it in:
    # a sparse pack index of 150 million ids had libgit2 map 4.2 GB (under a
    # 3 GB cap, run ended in an internal error), and listing them would
    # hold them all.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    (tmp_path / "big.py").write_text(BIG_PACK_INDEX)
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    proc, rss = run_capped(repo, "run", "t", "--", "sh", "-c",
                           f"{HONEST} && git commit -qam fix && python3 {tmp_path / 'big.py'}")
    assert proc.returncode == 1 and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])
    said = status(gp, "t")["1"]["error"]
    assert "pack" in said, said




# -- the view: what git-parallel's own git reads of it before it closes ---------

# sh, run by the agent as its last step: its view's config (a copy of its
# own, which its git writes) includes a FIFO it leaves in its admin folder.
FIFO_INCLUDE = ("A=$(git rev-parse --absolute-git-dir) && mkfifo $A/wait && "
                "git config include.path $A/wait")


@needs_namespace
@pytest.mark.skipif(hasattr(leftovers, "stage"), reason=(
    "this branch stages an attempt's leftovers in its agent's fence, before it closes, where the worktree still looks "
    "through the agent's view (its config the agent's): the hang holds here; main stages them once the fence has "
    "closed and the view is checked (9ba3827), where this test holds"))
def test_a_config_the_agent_leaves_in_its_view_hangs_no_run(tmp_path: Path) -> None:
    # The runner lists the agent's scratch files (leftovers_exclude) with a
    # `git ls-files` of its own, unfenced, while the worktree still looks
    # through the agent's view: that git read the view's config, which
    # included a FIFO of the admin folder (removed only when the fence
    # closes, after), and waited on it for ever.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    proc = gp("run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam fix && {FIFO_INCLUDE}",
              code=None, own_process=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    assert git(repo, "rev-parse", "parallel/t/1") != git(repo, "rev-parse", "main")  # its commit was taken in

# -- the worktree: what retry writes there after the agent -----------------------


@needs_namespace
@pytest.mark.parametrize("commit,force", [("", ["--force"]), (" && git add -A && git commit -qm link", [])],
                         ids=["left", "committed"])
def test_retry_writes_nothing_through_a_link_the_agent_left_for_a_tracked_folder(tmp_path: Path, commit: str,
                                                                                force: list[str]) -> None:
    # `retry --force` keeps what the attempt left, then resets its worktree
    # to the base: the agent had turned the tracked folder `tests` into a
    # link to a folder of the user's, and the reset must not write the
    # base's tests there, nor remove what is there.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine\n")
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && rm -rf tests && ln -s {victim} tests" + commit, code=None)
    gp("retry", "t", "1", *force, code=None)
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"], sorted(p.name for p in victim.iterdir())
    assert (victim / "notes.txt").read_text() == "mine\n"


# -- processes: what the runner reads of the agent's under --tmux --------------------

# Python, run by the agent: its process name (what /proc/<pid>/stat shows)
# made bytes that are no UTF-8, then it stays a while for the runner to look.
ODD_NAME = textwrap.dedent("""\
    import ctypes, time
    ctypes.CDLL(None).prctl(15, b"\\xff\\xfe) S 1", 0, 0, 0)
    time.sleep(2)
    """)


@pytest.mark.slow  # a tmux run whose agent stays 2 s
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_process_name_the_agent_chooses_crashes_no_tmux_run(tmp_path: Path) -> None:
    # Under --tmux the runner looks at the agent's processes (/proc/<pid>/stat)
    # to tell whether it waits for input: a name that is no UTF-8 ended run
    # in an internal error (UnicodeDecodeError) while its attempts ran.
    (tmp_path / "odd.py").write_text(ODD_NAME)
    sock = Path(tempfile.mkdtemp(prefix="gpt-", dir="/tmp"))  # a private tmux server
    env = {"TMUX_TMPDIR": str(sock), "TMUX": "", "TMUX_PANE": ""}
    try:
        repo, gp = project(tmp_path)
        gp("spawn", "t", "-n", "1")
        proc = gp("run", "t", "--tmux", "--", "sh", "-c", f"python3 {tmp_path / 'odd.py'} && {HONEST}",
                  code=None, env=env, timeout=60)
    finally:
        subprocess.run(["tmux", "kill-server"], env={**os.environ, **env}, capture_output=True)
        shutil.rmtree(sock, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-600:]
