"""What `pip install .` ships is the whole package.

The tests import the checkout (conftest puts it on PYTHONPATH), so a
subpackage missing from pyproject's list passes every other test and breaks
only the installed command: stop 21's CI failed on exactly that
(`No module named 'gitflow_parallel.cli'`)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gitflow_parallel"


def _listed_packages() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["tool"]["setuptools"]["packages"])


def test_every_subpackage_is_listed_in_pyproject() -> None:
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert on_disk - _listed_packages() == set()


@pytest.mark.slow
def test_the_wheel_holds_every_module_and_hook_template(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("git_parallel-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    wanted |= {
        "gitflow_parallel/hook_templates/" + path.name
        for path in (ROOT / "hooks").iterdir()
        if path.suffix in {".sh", ".tmpl"}
    }
    assert wanted - shipped == set()
    # pyproject's `readme = "README.md"` is the wheel's long description.
    (metadata,) = [name for name in shipped if name.endswith(".dist-info/METADATA")]
    description = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Content-Type: text/markdown" in description and "## Two commands" in description
