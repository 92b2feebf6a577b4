"""The run record's TypedDicts hold: mypy --strict passes on the whole
package, and a field write model.py does not declare, or of
the wrong type, is an error mypy reports."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def mypy(cache: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    """``python -m mypy`` with the project's configuration (its file list
    unless ``files``), from the checkout's root, with a cache of its own."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
         *map(str, files)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # 8 s of mypy: the default tier keeps under 150 s; CI runs it after
def test_the_whole_package_passes_mypy_strict(tmp_path: Path) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True and config["files"] == ["gitflow_parallel"]
    assert "follow_imports" not in config  # every module's own errors are reported
    result = mypy(tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    # Only the shim is left out: it runs in the project's own Python, and
    # tests/test_verdict.py runs it there.
    assert config.get("exclude", []) == ["gitflow_parallel/judge/shim/"]
    shim = ROOT / "gitflow_parallel" / "judge" / "shim"
    modules = len([p for p in (ROOT / "gitflow_parallel").rglob("*.py") if shim not in p.parents])
    assert f"no issues found in {modules} source files" in result.stdout


# Fields written outside the first TypedDicts (publish, merge --pr, merge --push) are declared now.
GOOD = '''
from gitflow_parallel.model import InstanceRecord, RunRecord


def change(inst: InstanceRecord) -> None:
    inst["attempt"] = 2
    inst["tampered"] = ["tests/test_a.py"]


def publish(rec: RunRecord) -> None:
    rec["remote"] = {"name": "origin", "agent": None, "timeout": None, "published_at": "2026-01-01T00:00:00Z"}
    rec["pr"] = {"remote": "origin", "base": "main", "requested_at": "2026-01-01T00:00:00Z", "proposals": []}
    if rec["merge"] is not None:
        rec["merge"]["pushed"] = {"remote": "origin", "landed": "0" * 40, "pushed_at": "2026-01-01T00:00:00Z",
                                  "attempts": 1}
'''

WRONG = '''
from gitflow_parallel.model import InstanceRecord, MergeRecord, RunRecord


def change(inst: InstanceRecord) -> None:
    inst["attempt"] = "2"
    inst["winner"] = "a-1"


def land(merge: MergeRecord) -> None:
    merge["landed_at"] = "2026-01-01T00:00:00Z"


def build(inst: InstanceRecord) -> RunRecord:
    inst["status"] = "exploded"
    return {"schema_version": 1, "task": "t", "base": {"ref": "refs/heads/main", "commit": "0" * 40},
            "run_revision": 1, "status": "pending", "created_at": "", "updated_at": "", "tracks": ["main"],
            "config": {}, "config_sha256": "", "instances": [inst]}
'''


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_a_wrong_field_write_fails_mypy(tmp_path: Path) -> None:
    module = tmp_path / "writes.py"
    module.write_text(GOOD)
    good = mypy(tmp_path / "cache", module)
    assert good.returncode == 0, good.stdout + good.stderr
    module.write_text(WRONG)
    wrong = mypy(tmp_path / "cache", module)
    print(wrong.stdout)  # shown with -s / on failure: what mypy says
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert 'writes.py:6: error: Value of "attempt" has incompatible type "str"; expected "int"' in wrong.stdout
    assert 'writes.py:7: error: TypedDict "InstanceRecord" has no key "winner"' in wrong.stdout
    assert 'writes.py:11: error: TypedDict "MergeRecord" has no key "landed_at"' in wrong.stdout
    # Statuses are Literals, and a record without one of its Required keys is no record.
    assert 'writes.py:15: error: Value of "status" has incompatible type "Literal[\'exploded\']"' in wrong.stdout
    assert 'writes.py:16: error: Missing key "run_id" for TypedDict "RunRecord"' in wrong.stdout
    assert "Found 5 errors in 1 file" in wrong.stdout
