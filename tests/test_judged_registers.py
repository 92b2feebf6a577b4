"""Nothing in the attempt's tree registers itself with the runner or the
interpreter (issue 46, item 2).

``python -m pytest`` puts the checkout first on ``sys.path``, and
``python tests/run.py`` the script's folder: a committed
``*.dist-info/entry_points.txt`` there registers a pytest plugin, a root
``iniconfig.py`` replaces a module pytest imports, a ``tests/json.py`` the
standard library's ``json``.  Each is a harness file: judged as the base
has it (the attempt's added copy is absent), shown, and kept out of the
automatic pick.  Real git, real pytest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import make_repo
from gitflow_parallel.git.protected import is_harness
from gitflow_parallel.commands import check, pick
from test_judged_right import CALC, PYTEST_GATE, TESTS, WRONG, commit_in, packs, start, verdicts

PY = sys.executable
PLUGIN = textwrap.dedent("""
    import pytest

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(item):
        item.runtest = lambda: None
    """)
DIST_INFO = {"evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
             "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evilplugin\n",
             "evilplugin.py": PLUGIN}
FAKE_PASS = 'import os\nprint("2 passed in 0.01s")\nos._exit(0)\n'
REGISTERS: dict[str, dict[str, str]] = {
    "dist-info": DIST_INFO,
    "egg-info": {"evil.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
                 "evil.egg-info/entry_points.txt": "[pytest11]\nevil = evilplugin\n", "evilplugin.py": PLUGIN},
    "runner-module": {"iniconfig.py": FAKE_PASS},
}


def test_what_registers_itself_is_a_harness_file() -> None:
    for path in ("evil-1.0.dist-info/entry_points.txt", "src/x.egg-info/PKG-INFO", "node_modules/jest/index.js",
                 "web/node_modules/a/b.js", ".pnp.cjs", ".pnp.js", ".pnp.loader.mjs", "iniconfig.py",
                 "src/pluggy/__init__.py", "pytest/__main__.py", "json.py", "src/json/__init__.py",
                 "_pytest/__init__.py", "typing.py", "colorama.py", "iniconfig.cpython-312-x86_64-linux-gnu.so",
                 "json.pyc"):
        assert is_harness(path), path
    for path in ("calc/__init__.py", "src/calc/core.py", "tests/test_calc.py", "test/test_x.py",
                 "test/__init__.py", "types/index.d.ts", "html/index.html", "code/analysis.py", "site/index.md",
                 "docs/json.py", "src/calc/json.py", "tests/json.py", "json.txt", "setup.py",
                 "calendar/views.py", "platform/linux.py"):
        assert not is_harness(path), path
    # A gate's script folder is first on its sys.path: a module there shadows too.
    assert is_harness("tests/json.py", folders=["tests"])
    assert not is_harness("tests/helpers.py", folders=["tests"])


@pytest.mark.parametrize("name", list(REGISTERS))
def test_an_attempt_that_registers_itself_is_judged_without_it(tmp_path: Path, name: str) -> None:
    gate = PYTEST_GATE
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "tests/test_calc.py": TESTS}, config=gate)
    project, worktrees = start(repo, 2)
    cheat = {"calc.py": WRONG, **REGISTERS[name]}
    commit_in(worktrees["1"], cheat, f"cheat {name}")
    commit_in(worktrees["2"], {"calc.py": CALC.replace("a * b", "b * a")}, "honest")
    # The cheat is real: run as the gate runs, in the cheater's own worktree, wrong code passes.
    alone = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=worktrees["1"],
                           capture_output=True, text=True)
    assert alone.returncode == 0 and "passed" in alone.stdout, alone.stdout[-300:]

    result = check.check(project, "t")
    assert result["errors"] == [] and verdicts(result) == {"1": "fail", "2": "pass"}, result
    by_id = packs(project)
    registered = {p for p in REGISTERS[name] if p != "evilplugin.py"}
    detail = {c["path"]: c for c in by_id["1"]["protected_detail"]}
    assert registered <= set(detail), detail
    assert all(detail[p]["harness"] and detail[p]["change"] == "added" for p in registered)
    assert registered <= set(by_id["1"]["protected_blocking"])
    assert by_id["2"]["protected_detail"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "2"


def test_a_module_beside_a_script_gate_does_not_shadow_the_standard_library(tmp_path: Path) -> None:
    run = "import json\nfrom calc import add\nassert add(2, 3) == 5\nprint(json.dumps('ok'))\n"
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "tests/run.py": run},
                     config=f"gates:\n  - name: tests\n    run: [{PY}, tests/run.py]\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc.py": WRONG, "tests/json.py": FAKE_PASS})
    alone = subprocess.run([PY, "tests/run.py"], cwd=worktrees["1"], capture_output=True)
    assert alone.returncode == 0
    assert verdicts(check.check(project, "t")) == {"1": "fail"}
    pack = packs(project)["1"]
    assert [c["path"] for c in pack["protected_detail"]] == ["tests/json.py"]
    assert pack["protected_blocking"] == ["tests/json.py"]


def test_a_base_that_has_such_a_file_keeps_it(tmp_path: Path) -> None:
    """The base's own copy is judged, the attempt's edit of it is not."""
    base_ini = "def parse(text):\n    return text\n"
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "tests/test_calc.py": TESTS, "colorama.py": base_ini},
                     config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc.py": WRONG, "colorama.py": FAKE_PASS})
    assert verdicts(check.check(project, "t")) == {"1": "fail"}
    detail = packs(project)["1"]["protected_detail"]
    assert [(c["path"], c["change"], c["harness"]) for c in detail] == [("colorama.py", "modified", True)]


def test_an_honest_project_is_not_hurt(tmp_path: Path) -> None:
    """A src layout, a package with an ordinary name, a tests folder, a
    ``test`` folder, a ``types`` folder of TypeScript declarations: nothing is
    protected that the attempt may need to change."""
    files = {"src/calc/__init__.py": CALC, "src/calc/json.py": "X = 1\n", "tests/test_calc.py": TESTS,
             "test/__init__.py": "", "types/index.d.ts": "export {}\n",
             "pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n\n[tool.pytest.ini_options]\n'
                               'pythonpath = ["src"]\n'}
    repo = make_repo(tmp_path / "repo", files, config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC.replace("a * b", "b * a"),
                               "src/calc/json.py": "X = 2\n", "test/__init__.py": "# a package\n",
                               "types/index.d.ts": "export type A = 1\n", "src/calc/platform.py": "Y = 1\n"})
    assert verdicts(check.check(project, "t")) == {"1": "pass"}
    assert packs(project)["1"]["protected_detail"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "1"
