"""Red team, round six: the sandbox setup retry (a command bwrap never ran
is started again, ``judge/place.execute``, ``engine._start_again``), the
namespaced command's end without a /proc sweep, and what a judged command
reads beside the judged git view.

Each test runs one route as the agent or as the attempt's committed code
and asserts the promise, so a working attack fails the test."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import needs_namespace, processes_with, token
from test_hostile import HONEST, project
from test_redteam_round5 import _checked

pytestmark = pytest.mark.slow


def _wrong_attempt(tmp_path: Path, gp, code: str) -> None:  # type: ignore[no-untyped-def]
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && cat app.py && git commit -qam right")
    (tmp_path / "attempt.py").write_text(code)
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"cp {tmp_path / 'attempt.py'} app.py && git commit -qam wrong")


# -- 1. a failing gate dressed as a sandbox that was never set up ----------------------

GROUP_KILLER = textwrap.dedent("""\
    import os, signal


    def add(a, b):
        return a - b


    # Kill the whole process group: bwrap's monitor outside the PID
    # namespace is in it, and dies before writing its "exit-code" status.
    os.kill(0, signal.SIG{sig})
    """)


@needs_namespace
@pytest.mark.parametrize("sig", ["KILL", "TERM", "HUP"])
def test_a_gate_that_kills_its_bwrap_is_judged_fail_not_never_ran(tmp_path: Path, sig: str) -> None:
    """The attempt's code kills its own process group, bwrap's monitor
    with it (a kill(0) reaches it across the PID namespace: same group),
    so bwrap's status has no ``"exit-code"``: were that read as "the
    sandbox was never set up", the gate would be tried again and end as an
    error (not judged), or get up to three chances.  bwrap dies of the
    signal (not exit 1), so it is the command's own failure."""
    repo, gp = project(tmp_path)
    _wrong_attempt(tmp_path, gp, GROUP_KILLER.format(sig=sig))
    checked = _checked(gp)
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    one = checked["1"]
    assert one["verdict"] == "fail", json.dumps(one)[:900]
    assert not any("never ran" in (g.get("error") or "") for g in one["gates"]), json.dumps(one["gates"])[:900]


@needs_namespace
def test_an_agent_that_kills_its_bwrap_is_not_started_again(tmp_path: Path) -> None:
    """The agent kills its process group (bwrap's monitor with it) once it
    has changed its worktree: it ran, so it is not started again in place
    (a second run on top of the first's work), and it ends failed."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo ran >> runs.txt; kill -KILL 0", code=None)
    inst = gp.json("status", "t")["run"]["instances"][0]
    log = Path(inst["log"]).read_text()
    assert "never ran" not in log, log[-800:]
    assert inst["status"] != "succeeded", json.dumps(inst)[:600]
