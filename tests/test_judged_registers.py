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
from gitflow_parallel import harness
from gitflow_parallel.errors import ParallelError
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
                 "json.pyc", "calc/__pycache__/__init__.cpython-312.pyc", "calc/_impl.pyc", "calc/old.pyo",
                 ".cargo/config.toml", "crates/a/.cargo/config", "rust-toolchain", "rust-toolchain.toml", "build.rs",
                 "crates/a/build.rs"):
        assert is_harness(path), path
    for path in ("calc/__init__.py", "src/calc/core.py", "tests/test_calc.py", "test/test_x.py",
                 "test/__init__.py", "types/index.d.ts", "html/index.html", "code/analysis.py", "site/index.md",
                 "docs/json.py", "src/calc/json.py", "tests/json.py", "json.txt", "setup.py",
                 "calendar/views.py", "platform/linux.py", "Cargo.toml", "src/pycache.py", "cargo/config.toml",
                 "src/build_rs.rs", "calc/_impl.py"):
        assert not is_harness(path), path
    # A gate's script folder is first on its sys.path: a module there shadows too.
    assert is_harness("tests/json.py", folders=["tests"])
    assert not is_harness("tests/helpers.py", folders=["tests"])


CARGO = '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'


@pytest.mark.parametrize("change, is_harness_change, is_dependency", [
    (CARGO.replace('edition = "2021"\n', 'edition = "2021"\nautotests = false\n'), True, False),
    (CARGO.replace('edition = "2021"\n', 'edition = "2021"\nbuild = "gen.rs"\n'), True, False),
    (CARGO + '\n[lib]\nharness = false\n', True, False),
    (CARGO + '\n[[test]]\nname = "calc"\nharness = false\n', True, False),
    (CARGO + '\n[profile.test]\nopt-level = 3\n', True, False),
    (CARGO.replace('version = "0.1.0"', 'version = "0.2.0"'), False, False),
    (CARGO + '\n[lib]\nname = "calc"\n', False, False),
    (CARGO + 'serde = "1"\n', False, True),
    (CARGO + '\n[target.\'cfg(unix)\'.dependencies]\nlibc = "0.2"\n', False, True),
    ("[package\n", True, False),
])
def test_cargo_toml_is_a_mixed_file(change: str, is_harness_change: bool, is_dependency: bool) -> None:
    """Cargo.toml's test targets, build script and test profile are the
    harness's; its dependencies need a person; the rest is the attempt's."""
    old, new = CARGO.encode(), change.encode()
    assert harness.is_mixed("crates/calc/Cargo.toml")
    assert harness.harness_changed("Cargo.toml", old, new) is is_harness_change
    assert harness.dependencies_changed("Cargo.toml", old, new) is (is_dependency or change == "[package\n")


def test_a_go_test_main_is_the_harness() -> None:
    main = b'package calc\n\nimport (\n\t"os"\n\t"testing"\n)\n\nfunc TestMain(m *testing.M) { os.Exit(0) }\n'
    assert harness.defines_test_main("zz_main_test.go", main)
    assert not harness.defines_test_main("main.go", main)  # not a test file: go test never calls it
    assert not harness.defines_test_main("calc_test.go", b"package calc\n\nfunc TestMainPath(t *testing.T) {}\n")
    assert not harness.defines_test_main("calc_test.go", b"// func TestMain(m *testing.M) is not needed\n")
    assert not harness.defines_test_main("calc_test.go", None)


def test_setup_py_is_a_dependency_file(tmp_path: Path) -> None:
    """setup.py says what is installed: judged as written, landed by a person."""
    setup = 'from setuptools import setup\n\nsetup(name="calc", install_requires=[])\n'
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC, "tests/test_calc.py": TESTS, "setup.py": setup},
                     config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    tip = commit_in(worktrees["1"], {"setup.py": setup.replace("[]", '["pytest-cheat"]')})
    assert verdicts(check.check(project, "t")) == {"1": "pass"}
    pack = packs(project)["1"]
    assert pack["judged_commit"] == tip  # nothing restored
    assert [(c["path"], c["dependencies"], c["harness"]) for c in pack["protected_detail"]] == [("setup.py", True, False)]
    assert pack["protected_blocking"] == ["setup.py"]
    with pytest.raises(ParallelError) as refused:
        pick.pick(project, "t")
    assert refused.value.code == "PARALLEL_PROTECTED_PATH_CHANGED"


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
