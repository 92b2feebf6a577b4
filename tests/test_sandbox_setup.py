"""A sandbox whose setup fails is no verdict on the attempt.

bwrap covers every path socket of the host it lists just before it
starts; a socket removed in between (another program's, gone) makes the
mount fail, and bwrap ends with status 1 before the gate runs.  That 1
was once read as the gate failing, and an honest attempt lost (CI saw it
with a second test run beside it).  The command is started again in a
sandbox made afresh; a sandbox that cannot be made is an error to run,
never a failing gate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

from conftest import GP, git, make_repo
from gitflow_parallel.proc import namespace
from hostile import needs_namespace

CONFIG = """\
max_total: 4
gates:
  - name: fixed
    run: [sh, -c, "grep -q 'a + b' *.py"]
"""


def _honest_check(tmp_path: Path) -> GP:
    repo = make_repo(tmp_path / "repo", files={"app.py": "def add(a, b):\n    return a - b\n"}, config=CONFIG)
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       "printf 'def add(a, b):\\n    return a + b\\n' > app.py && git commit -qam fixed")
    return gp


def _vanishing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """``host_sockets`` lists a socket that is gone by the time bwrap
    covers it, on its first ``times`` calls."""
    gone = str(tmp_path / "gone.sock")  # never made: removed before bwrap ran
    real = namespace.host_sockets
    calls = [0]
    lock = threading.Lock()

    def listed() -> list[str]:
        with lock:
            calls[0] += 1
            first = calls[0] <= times
        return [*real(), gone] if first else real()

    monkeypatch.setattr(namespace, "host_sockets", listed)
    return calls


@needs_namespace
def test_a_socket_gone_before_bwrap_covers_it_does_not_fail_the_gate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    gp = _honest_check(tmp_path)
    calls = _vanishing(tmp_path, monkeypatch, times=1)
    result = gp.json("check", "t", code=None)
    [inst] = result["instances"]
    assert inst["verdict"] == "pass", json.dumps(inst["gates"])[:600]
    assert calls[0] >= 2, "the gate's sandbox was made once only"
    log = Path(inst["gates"][0]["log"]).read_text()
    assert "bwrap" not in log, log  # the log is the run that counted


@needs_namespace
def test_a_sandbox_that_cannot_be_made_is_an_error_not_a_failing_gate(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    gp = _honest_check(tmp_path)
    _vanishing(tmp_path, monkeypatch, times=1000)
    result = gp.json("check", "t", code=None)
    [inst] = result["instances"]
    assert inst["verdict"] != "pass"
    [gate] = inst["gates"]
    assert gate["exit_code"] is None and "sandbox could not be set up" in gate["error"], gate
    assert "gone.sock" in gate["error"], gate  # bwrap's own words say which path




@needs_namespace
def test_a_gate_bwrap_cannot_execute_fails_once_as_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script whose interpreter is missing never runs either; that is
    the gate failing (as a shell would say), not a sandbox to make again."""
    config = "max_total: 4\ngates:\n  - name: script\n    run: [./check.sh]\n"
    repo = make_repo(tmp_path / "repo", files={"check.sh": "#!/nonexistent/sh\n"}, config=config)
    (repo / "check.sh").chmod(0o755)
    git(repo, "commit", "-qam", "executable")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo >> README && git add -A && git commit -qm work")
    calls = _vanishing(tmp_path, monkeypatch, times=0)
    [inst] = gp.json("check", "t", code=None)["instances"]
    [gate] = inst["gates"]
    assert inst["verdict"] == "fail" and gate["exit_code"] == 1 and gate["error"] is None, gate
    assert calls[0] == 1, "bwrap failing to execute the gate made it run again"
    assert "execvp" in Path(gate["log"]).read_text()


# ``run`` keeps its own process when the test's has children (conftest.GP):
# the socket that is gone is listed there through a ``sitecustomize``.
SITECUSTOMIZE = """\
import os

_marks = os.environ.get("GP_TEST_GONE_SOCKET")
if _marks:
    from gitflow_parallel.proc import namespace

    _real = namespace.host_sockets

    def _listed():
        which, folder = _marks.split(":", 1)  # the listings (1, 2, ...) that name it
        made = len(os.listdir(folder)) + 1
        open(os.path.join(folder, str(made)), "w").close()
        gone = made in {int(n) for n in which.split(",")}
        return [*_real(), os.path.join(folder, "gone.sock")] if gone else _real()

    namespace.host_sockets = _listed
"""


def _agent_with_gone_sockets(tmp_path: Path, which: str, script: str,
                             tmux: str | None = None) -> tuple[GP, Path]:
    repo = make_repo(tmp_path / "repo", files={"app.py": "def add(a, b):\n    return a - b\n"}, config=CONFIG)
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = {"PYTHONPATH": str(site), "GP_TEST_GONE_SOCKET": f"{which}:{marks}"}
    if tmux is not None:  # a private tmux server
        env.update({"TMUX_TMPDIR": tmux, "TMUX": "", "TMUX_PANE": ""})
    gp("run", "t", *(["--tmux"] if tmux else []), "--", "sh", "-c", script, code=None, env=env, timeout=90)
    return gp, marks


@needs_namespace
def test_an_agent_whose_sandbox_was_not_set_up_starts_again(tmp_path: Path) -> None:
    gp, marks = _agent_with_gone_sockets(
        tmp_path, "1", "printf 'def add(a, b):\\n    return a + b\\n' > app.py && git commit -qam fixed")
    assert len(list(marks.iterdir())) >= 2, "the agent's sandbox was made once only"
    [inst] = gp.json("status", "t")["run"]["instances"]
    assert inst["status"] == "succeeded", inst
    assert "starts in a sandbox made afresh" in Path(inst["log"]).read_text()
    assert gp.json("check", "t", code=None)["instances"][0]["verdict"] == "pass"


@needs_namespace
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
@pytest.mark.slow  # a tmux server and two windows: about 2 s
def test_under_tmux_an_agent_whose_sandbox_was_not_set_up_starts_again(tmp_path: Path) -> None:
    """The pane asks bwrap for its status as a headless runner does, and
    says in its status file that the agent never ran: a new window, in a
    sandbox made afresh.  Once a pane's bwrap failing that way failed the
    agent."""
    sock = tempfile.mkdtemp(prefix="gpt-", dir="/tmp")
    try:
        gp, marks = _agent_with_gone_sockets(
            tmp_path, "1", "printf 'def add(a, b):\\n    return a + b\\n' > app.py && git commit -qam fixed",
            tmux=sock)
    finally:
        subprocess.run(["tmux", "kill-server"], env={**os.environ, "TMUX_TMPDIR": sock}, capture_output=True)
        shutil.rmtree(sock, ignore_errors=True)
    assert len(list(marks.iterdir())) >= 2, "the agent's sandbox was made once only"
    [inst] = gp.json("status", "t")["run"]["instances"]
    assert inst["status"] == "succeeded", (inst, Path(inst["log"]).read_text())
    assert "starts in a sandbox made afresh" in Path(inst["log"]).read_text()
    assert gp.json("check", "t", code=None)["instances"][0]["verdict"] == "pass"


@needs_namespace
def test_an_agent_whose_sandbox_cannot_be_made_fails_saying_so(tmp_path: Path) -> None:
    gp, _ = _agent_with_gone_sockets(tmp_path, ",".join(map(str, range(1, 40))), "touch ran")
    [inst] = gp.json("status", "t")["run"]["instances"]
    assert inst["status"] == "failed", inst
    assert "sandbox could not be set up" in inst["error"] and "git parallel retry t 1" in inst["error"], inst
    assert not (Path(inst["worktree"]) / "ran").exists()


@needs_namespace
def test_the_fenced_staging_of_what_an_agent_left_is_made_again(tmp_path: Path) -> None:
    """The agent's own sandbox is the first listing; the ``git add`` of
    what it left uncommitted, in a fence like its own, the second."""
    gp, marks = _agent_with_gone_sockets(tmp_path, "2", "printf 'def add(a, b):\\n    return a + b\\n' > app.py")
    [inst] = gp.json("status", "t")["run"]["instances"]
    assert inst["status"] == "succeeded", inst
    assert len(list(marks.iterdir())) >= 3, "the staging's sandbox was made once only"
    assert gp.json("check", "t", code=None)["instances"][0]["verdict"] == "pass"


@needs_namespace
def test_sockets_made_and_removed_in_a_loop_cost_more_sandboxes_not_the_agent(tmp_path: Path) -> None:
    """A program that makes and removes sockets in a loop (a test server,
    or an agent of another run) fails many listings in a row: while each
    failure is the cover of a socket gone by then, more sandboxes are made
    (``namespace.SANDBOXES_SOCKETS_GONE``), where three are for any other
    cause."""
    gp, marks = _agent_with_gone_sockets(
        tmp_path, ",".join(map(str, range(1, 11))), "printf 'def add(a, b):\\n    return a + b\\n' > app.py")
    [inst] = gp.json("status", "t")["run"]["instances"]
    assert inst["status"] == "succeeded", inst
    assert len(list(marks.iterdir())) >= 11


def test_only_a_cover_of_a_path_that_is_gone_earns_more_sandboxes(tmp_path: Path) -> None:
    here = tmp_path / "here.sock"
    here.write_text("")
    gone = tmp_path / "gone.sock"
    assert namespace.sandboxes_allowed(f"bwrap: Can't create file at {gone}: Read-only file system") \
        == namespace.SANDBOXES_SOCKETS_GONE
    assert namespace.sandboxes_allowed(f"bwrap: Can't bind mount /oldroot/dev/null on /newroot{gone}: Unable to "
                                       "remount destination") == namespace.SANDBOXES_SOCKETS_GONE
    assert namespace.sandboxes_allowed(f"bwrap: Can't create file at {here}: Read-only file system") \
        == namespace.SANDBOXES
    assert namespace.sandboxes_allowed("bwrap: Can't mkdir /x: Permission denied") == namespace.SANDBOXES
