"""Hostile processes: nothing an agent or a gate starts outlives it, and
nothing in the sandbox can signal the runner, its watchdog or the user's
processes."""

from __future__ import annotations

import pytest

import subprocess
import textwrap
from pathlib import Path

from hostile import needs_namespace, processes_with, status, token
from test_hostile import HONEST, PY, act, project


@needs_namespace
def test_a_daemon_an_agent_starts_is_gone_with_it(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    word = token()
    daemon = f"setsid {PY} -c 'import time; time.sleep(120)' {word} > /dev/null 2>&1 < /dev/null &"
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", daemon + " " + HONEST)
    assert processes_with(word) == []


@needs_namespace
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_an_agent_that_kills_everything_it_sees_kills_only_itself(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(120)", token()])
    try:
        gp("spawn", "t", "-n", "2")
        gp("run", "t", "--instance", "1", "--", "sh", "-c", "kill -KILL -1; sleep 1", code=None)
        assert bystander.poll() is None  # the user's process lives on
        act(gp, "t", "2", HONEST)  # and so did the runner, which goes on as before
        assert status(gp, "t")["2"]["status"] == "succeeded"
        assert status(gp, "t")["1"]["status"] in ("failed", "succeeded")
    finally:
        bystander.kill()
        bystander.wait()


@needs_namespace
def test_a_daemon_a_gate_starts_is_gone_with_it(tmp_path: Path) -> None:
    word = token()
    config = textwrap.dedent(f"""\
        gates:
          - name: tests
            run: [sh, -c, "setsid {PY} -c 'import time; time.sleep(120)' {word} >/dev/null 2>&1 </dev/null & exit 0"]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    gp("check", "t")
    assert processes_with(word) == []


def _zombie_children() -> set[str]:
    """Our exited, unreaped children: "pid (name)"."""
    import os

    found = set()
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.add(text[:text.rfind(")") + 1])
    return found


@needs_namespace
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_no_sandbox_leaves_a_zombie_behind(tmp_path: Path) -> None:
    # bwrap hands its namespace's init to the subreaper (us, in-process):
    # each must be collected, or a long check leaves hundreds.
    repo, gp = project(tmp_path)
    before = _zombie_children()  # what earlier tests in this process left
    gp("spawn", "t", "-n", "2")
    for inst in ("1", "2"):
        act(gp, "t", inst, HONEST)
    gp("check", "t", code=None)
    assert [z for z in _zombie_children() - before if "(bwrap)" in z] == []
