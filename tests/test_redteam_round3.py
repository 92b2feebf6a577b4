"""Red team, round three: new routes out of the sandbox (issue 35's model),
written as the attempt's agent and as the attempt's own code, grouped by
place.  Each test asserts the promise; an attack that works makes it fail
(one the fix needs a design choice for is a strict xfail, its route
explained)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from hostile import log_of, needs_namespace
from test_hostile import HONEST, act, project

# -- processes: what a sandboxed command may do to the mounts it is given ------

# sh: undo the fence as a process with capabilities could (bwrap started by
# root keeps every capability in the sandbox unless told to drop them):
# uncover the hidden folders, make `/` writable, write outside.
UNDO_MOUNTS = ("grep CapEff /proc/self/status; "
               "for m in $(awk '{print $5}' /proc/self/mountinfo | sort -r); do umount -l $m 2>/dev/null; done; "
               "mount -o remount,rw / 2>/dev/null; ")


@needs_namespace
def test_a_gate_holds_no_capability_to_undo_its_mounts(tmp_path: Path) -> None:
    # As root (a container, a CI runner), bwrap makes no user namespace and
    # keeps every capability: the attempt's code unmounted the covers over
    # the hidden tests and remounted `/` read-write.
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    mark = tmp_path / "written-by-the-gate"
    (tmp_path / "spy.sh").write_text(UNDO_MOUNTS + f"cat {hidden}/tests/test_secret.py; echo out > {mark}; true\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: spy
            run: [sh, {tmp_path / 'spy.sh'}]
          - name: hidden
            run: [sh, -c, 'grep -q SECRET tests/test_secret.py && echo "1 passed"']
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    checked = gp.json("check", "t", code=None)["instances"][0]
    said = Path(next(g for g in checked["gates"] if g["name"] == "spy")["log"]).read_text()
    assert "SECRET_ANSWER" not in said, "a gate uncovered the hidden tests"
    assert not mark.exists(), "a gate wrote outside its layer"
    assert "CapEff:\t0000000000000000" in said, said


@needs_namespace
def test_an_agent_holds_no_capability_to_undo_its_mounts(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    mark = tmp_path / "written-by-the-agent"
    gp("spawn", "t", "-n", "1")
    agent = (HONEST + " && git commit -qam fix && grep CapEff /proc/self/status; "
             f"mount -o remount,rw / 2>/dev/null; echo out > {mark}; true")
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    said = log_of(gp, "t", "1")
    assert not mark.exists(), "an agent wrote outside its worktree"
    assert "CapEff:\t0000000000000000" in said, said
