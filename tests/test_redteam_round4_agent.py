"""Red team, round four, as the agent: new routes by which a command run
under ``git parallel run`` acts outside its attempt, through what it leaves
in its admin folder and its view for git-parallel's own later verbs (merge,
cleanup, retry), and through the processes it can reach, grouped by place.
Each test asserts the promise; an attack that works makes it fail (one the
fix needs a design choice for is a strict xfail, its route explained)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from conftest import git
from hostile import needs_namespace, status
from test_hostile import HONEST, act, project

# -- the admin folder: what cleanup and merge read there after the agent ------

# sh, run by the agent: a git dir in its admin folder's `modules/`, where git
# keeps an initialised submodule's repository (and git-parallel keeps its
# commits at cleanup), whose config includes the standard input of whatever
# git reads it.
FAKE_SUBMODULE = ("A=$(git rev-parse --absolute-git-dir) && M=$A/modules/x && git init -q --bare $M && "
                  "git push -q $M HEAD:refs/heads/master && git --git-dir=$M symbolic-ref HEAD refs/heads/master && "
                  "printf '[include]\\n\\tpath = /dev/stdin\\n' >> $M/config")


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
