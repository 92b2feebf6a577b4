"""Red team, round two: new routes out of the sandbox (issue 35's model),
written as the attempt's agent and as the attempt's own code.  Each test
asserts the promise; an attack that works makes it fail.  The cheap
attacks the sandbox held are kept too, so that it goes on holding."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import log_of, needs_namespace, status
from test_hostile import CONFIG, HONEST, act, project
from test_sandbox import LAYERS, fenced

# sh: the agent's admin folder and the real common dir (not its view).
ADMIN = 'A=$(git rev-parse --absolute-git-dir) && R=$(cd "$A/../.." && pwd) && '
COMMIT = HONEST + " && git commit -qam fix && "


@needs_namespace
def test_a_fifo_an_agent_leaves_in_its_admin_folder_hangs_no_later_command(tmp_path: Path) -> None:
    # git-parallel reads HEAD, ORIG_HEAD and logs/HEAD of every admin
    # folder (the fence of every later command lists the instances'
    # worktrees), some of it under the project lock: a FIFO there blocked
    # `run` forever, and every later command on the lock.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent = COMMIT + ADMIN + "for f in ORIG_HEAD logs/HEAD HEAD; do rm -f $A/$f; mkfifo $A/$f; done"
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, code=None, own_process=True, timeout=60)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, own_process=True, timeout=60)
    checked = {i["id"]: i for i in gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"]}
    assert checked["2"]["verdict"] == "pass"
    assert status(gp, "t")["1"]["status"] == "failed"  # it broke its own worktree: named, never trusted


@pytest.mark.parametrize("layer", LAYERS)
def test_a_link_an_agent_plants_in_the_reflogs_is_never_written_through(tmp_path: Path, layer: str) -> None:
    # The task's reflog folder was the agents' to write: a link there made
    # the runner's own ref update append to any file of the user's.
    repo, gp = project(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    gp("spawn", "t", "-n", "2")
    agent = COMMIT + ADMIN + (
        f"for L in $(git rev-parse --git-common-dir)/logs/refs/heads/parallel/t $R/logs/refs/heads/parallel/t; do "
        f"for n in 1 2; do rm -f $L/$n; ln -s {victim} $L/$n; done; done; "
        f"rm -f $A/logs/HEAD; ln -s {victim} $A/logs/HEAD; echo leftover > left.txt")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, code=None, env=fenced(layer))
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, env=fenced(layer))
    assert victim.read_text() == "mine\n", "the runner wrote through the agent's link"


@needs_namespace
def test_a_fifo_in_place_of_the_test_report_hangs_no_check(tmp_path: Path) -> None:
    # The gate may write its report's folder: a FIFO named as the report
    # blocked the judge's read of it forever.
    config = textwrap.dedent("""\
        gates:
          - name: tests
            run: [sh, -c, 'rm -f "$0"; mkfifo "$0"', '{report}']
            expect:
              fail_to_pass: [tests/test_app.py::test_add]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    checked = gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"][0]
    assert checked["verdict"] == "fail"


@needs_namespace
def test_fifos_the_agent_leaves_in_its_worktree_hang_no_leftovers_commit(tmp_path: Path) -> None:
    # git reads .gitattributes, .gitignore and .mailmap from the worktree it
    # commits; the agent's FIFOs there must not block the runner.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = HONEST + " && mkfifo .gitattributes .gitignore tests/.gitignore .mailmap"
    gp("run", "t", "--", "sh", "-c", agent, code=None, own_process=True, timeout=60)
    assert status(gp, "t")["1"]["status"] in ("succeeded", "failed")


@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_cannot_read_a_running_siblings_private_tmpdir(tmp_path: Path, layer: str) -> None:
    # /tmp is read-only in the sandbox, not hidden, and each command's
    # TMPDIR was a folder of /tmp: a sibling's scratch work was readable.
    meet = tmp_path / "meet"  # a sandbox_write folder both may write: only to meet
    repo, gp = project(tmp_path, CONFIG + f"sandbox_write: ['{meet}']\n")
    gp("spawn", "t", "-n", "2")
    wait = "i=0; while [ ! -e {f} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e {f} ] && echo met-the-other; "
    one = f"echo SECRET-OF-ONE > $TMPDIR/notes.txt; touch {meet}/ready; " + wait.replace("{f}", f"{meet}/done")
    two = (wait.replace("{f}", f"{meet}/ready") +
           "cat /tmp/git-parallel-*/notes.txt /tmp/git-parallel-*/*/notes.txt $(dirname $TMPDIR)/*/notes.txt; "
           f"touch {meet}/done")
    agent = f'case "$GIT_PARALLEL_INSTANCE" in 1) {one};; *) {two};; esac 2>/dev/null; true'
    gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
    said = log_of(gp, "t", "2")
    assert "met-the-other" in said, "the two agents did not run side by side: " + said  # the attack was made
    assert "SECRET-OF-ONE" not in said, "an agent read its sibling's TMPDIR"
