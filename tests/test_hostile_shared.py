"""Hostile use of shared places: /dev/shm, /tmp, git-parallel's logs and the
network carry nothing from one sandboxed command to another."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

from hostile import log_of, needs_namespace, pack_of, status
from test_hostile import HONEST, PY, act, project


@needs_namespace
def test_hidden_tests_copied_out_by_the_gate_reach_no_agent(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: hidden
            run: [sh, -c, "cp tests/test_secret.py /dev/shm/leak.py; cp tests/test_secret.py /tmp/leak.py; echo '1 passed'"]
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("check", "t", "--instance", "1", code=None)
    reader = "cat /dev/shm/leak.py /tmp/leak.py 2>&1; ls /dev/shm; " + HONEST
    act(gp, "t", "2", reader)
    assert "SECRET_ANSWER" not in log_of(gp, "t", "2")
    assert not Path("/tmp/leak.py").exists() and not Path("/dev/shm/leak.py").exists()


@needs_namespace
def test_a_gate_reads_no_log_and_reaches_no_network(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    probe = textwrap.dedent(f"""
        import glob, os, socket, subprocess
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], capture_output=True, text=True).stdout.strip()
        print("logs seen:", len(glob.glob(os.path.join(common, "parallel", "logs", "*", "*"))))
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=3)
            print("tcp: connected")
        except OSError as exc:
            print("tcp:", type(exc).__name__)
    """)
    (tmp_path / "probe.py").write_text(probe)
    config = f"gates:\n  - name: probe\n    mode: observe\n    run: ['{PY}', '{tmp_path / 'probe.py'}']\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    gate = gp.json("check", "t")["instances"][0]["gates"][0]
    said = Path(gate["log"]).read_text()
    assert "logs seen: 0" in said and "tcp: connected" not in said, said
    listener.close()


@needs_namespace
def test_with_network_off_no_datagram_leaves_the_agent(tmp_path: Path) -> None:
    from test_hostile import CONFIG

    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.settimeout(1.0)
    port = receiver.getsockname()[1]
    repo, gp = project(tmp_path, CONFIG + "sandbox_network: off\n")
    sender = f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {port}))"
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, "-c", sender, code=None)
    try:
        data = receiver.recv(16)
    except socket.timeout:
        data = b""
    assert data == b"", "a datagram left the sandbox"
    assert status(gp, "t")["1"]["status"] in ("succeeded", "failed")
    receiver.close()


# The agent rewrites its events file: the runner's own lines erased, others forged.
REWRITE_EVENTS = (
    "printf '%s\\n' '{\"event\": \"edit\"}' '{\"event\": \"engine_tampered\", \"paths\": [\"x\"]}' "
    "'{\"event\": \"engine_exited\", \"status\": \"succeeded\"}' > \"$GIT_PARALLEL_EVENTS\"; " + HONEST)


def test_the_pack_counts_the_runner_s_events_from_its_own_copy_not_from_what_the_agent_wrote(
        tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", REWRITE_EVENTS)
    gp("check", "t")
    said = pack_of(gp, "t", "1")["engine_evidence"]
    assert said["counts"] == {"edit": 1, "engine_dispatched": 1, "engine_exited": 1, "engine_staged": 1}, said
    # What the agent wrote in the runner's name is counted apart: two lines forged, one erased.
    assert said["forged"] == 2 and said["erased"] == 1, said
