"""The code's own rules, checked as tests: ``ruff check`` with the rule set
``pyproject.toml`` gives it (pyflakes, pycodestyle, bugbear, a complexity
ceiling of 15), and no module importing another module's ``_private`` names
(a seam is a public name, or the two belong in one module)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gitflow_parallel"


def _ruff() -> list[str] | None:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    return [found] if found else None


@pytest.mark.skipif(_ruff() is None, reason="ruff is not installed (pip install -e '.[test]' brings it)")
def test_ruff_finds_nothing() -> None:
    proc = subprocess.run([*_ruff(), "check", "--output-format", "concise", "--no-cache", str(ROOT)],  # type: ignore[misc]
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def private_imports(source: str, module: str) -> list[str]:
    """``from gitflow_parallel.X import _name`` of another module than ``module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gitflow_parallel") \
                and node.module != module:
            found += [f"{node.module}.{a.name} (line {node.lineno})" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_the_private_import_check_sees_one() -> None:
    source = "from gitflow_parallel.config import _argv\nfrom gitflow_parallel.config import load\n"
    assert private_imports(source, "gitflow_parallel.mix") == ["gitflow_parallel.config._argv (line 1)"]
    assert private_imports(source, "gitflow_parallel.config") == []


def test_no_module_imports_another_modules_private_names() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found += [f"{path.relative_to(ROOT)}: {name}" for name in private_imports(path.read_text(), module)]
    assert found == [], "\n".join(found)
