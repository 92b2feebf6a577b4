"""A full disk: `run` records the instance failed, `recover` refuses with
PARALLEL_NO_SPACE and finishes once space is freed, and an internal error
whose log cannot be written prints its traceback.

The disk is a real 8 MiB tmpfs, mounted in a user and mount namespace of
its own (``unshare -Urm``), so nothing outside the test sees it and it goes
away with the namespace; where the machine does not allow that, the test
is skipped and says why."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_repo

CONFIG = """\
gates:
  - name: tests
    run: [sh, -c, "exit 0"]
"""
# Fills the disk with what git cannot compress, keeping a little room for
# the record (the free space a nearly full disk has), then exits 0.
FILLER = ("head -c 300000 /dev/urandom > reserve; head -c 20000000 /dev/urandom > big 2>/dev/null; "
          "rm reserve; exit 0")


def _namespaces_allowed(tmp: Path) -> str | None:
    """None when ``unshare -Urm`` may mount a tmpfs here; else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    probe = tmp / "probe"
    probe.mkdir()
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
                          capture_output=True, text=True)
    return None if proc.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {proc.stderr.strip()}"


def _steps(disk: Path, seed: Path, out: Path, steps: list[tuple[str, str]]) -> None:
    """Run shell ``steps`` (name, command) in a namespace with a tmpfs on
    ``disk`` holding a copy of ``seed``; each step's stdout, stderr and exit
    status are kept under ``out`` (outside the tmpfs, which goes with the namespace)."""
    lines = ["set -u", f"mount -t tmpfs -o size=8m tmpfs {disk} || exit 99", f"cp -a {seed} {disk}/repo",
             f"cd {disk}/repo"]
    for name, command in steps:
        lines.append(f"( {command} ) > {out}/{name}.out 2> {out}/{name}.err; echo $? > {out}/{name}.rc")
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", "\n".join(lines)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr


def _result(out: Path, name: str) -> tuple[int, str, str]:
    return (int((out / f"{name}.rc").read_text()), (out / f"{name}.out").read_text(),
            (out / f"{name}.err").read_text())


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_full_disk_is_recorded_refused_by_name_and_recovered(tmp_path: Path) -> None:
    why = _namespaces_allowed(tmp_path)
    if why:
        pytest.skip(why)
    seed = make_repo(tmp_path / "seed", {"README.md": "hello\n"}, config=CONFIG)
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    out.mkdir()
    crash = "from gitflow_parallel.cli import run_verb; run_verb(False, lambda: 1 / 0)"
    _steps(disk, seed, out, [
        ("spawn", "git parallel spawn fx -n 1 && git parallel spawn crashed -n 1"),
        ("run", f"git parallel run fx --json -- sh -c '{FILLER}'"),
        ("crash", "GIT_PARALLEL_FAULT=run.after_running git parallel run crashed -- sh -c 'echo work > work.txt'"),
        ("fill", f"head -c 20000000 /dev/urandom > {disk}/filler; df -k {disk} | tail -1"),
        ("recover_full", "git parallel recover crashed --json"),
        ("internal", f"{sys.executable} -c '{crash}'; echo exit $?; ls .git/parallel/logs"),
        ("free", f"rm {disk}/filler"),
        ("recover", "git parallel recover crashed --json"),
        ("status", "git parallel status crashed --json"),
    ])
    rc, stdout, stderr = _result(out, "run")
    assert rc == 1, stderr  # an instance failed; not an internal error (3)
    inst = json.loads(stdout)["instances"][0]
    assert inst["status"] == "failed"
    assert inst["error"] == "exited 0 but could not commit leftovers: no space left on device"
    assert _result(out, "fill")[1].split()[3] == "0"  # nothing left
    rc, stdout, _ = _result(out, "recover_full")
    refused = json.loads(stdout)
    assert rc == 1 and refused["code"] == "PARALLEL_NO_SPACE" and "ENOSPC" in refused["message"]
    assert refused["hint"].startswith("free space on the disk") and "git parallel recover crashed" in refused["hint"]
    # An internal error on the full disk: its traceback is printed, and no empty log is left.
    rc, stdout, stderr = _result(out, "internal")
    assert stdout.startswith("exit 3\n") and "internal error: ZeroDivisionError" in stderr
    assert "Traceback" in stderr and "ZeroDivisionError: division by zero" in stderr
    assert "internal-error" not in stdout
    rc, stdout, stderr = _result(out, "recover")
    assert rc == 0, stderr + stdout
    assert [s["step"] for s in json.loads(stdout)["repaired"]][0].startswith("instance_")
    assert json.loads(_result(out, "status")[1])["run"]["instances"][0]["status"] == "failed"


def test_an_internal_error_whose_log_cannot_be_written_prints_its_traceback(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".git" / "parallel").mkdir()
    (repo / ".git" / "parallel" / "logs").write_text("a file where the logs folder goes\n")
    code = "from gitflow_parallel.cli import run_verb; run_verb(False, lambda: 1 / 0)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 3
    assert "the traceback could not be kept" in proc.stderr and "ZeroDivisionError: division by zero" in proc.stderr
    assert "the traceback is in" not in proc.stderr
