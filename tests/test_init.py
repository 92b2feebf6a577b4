"""``git parallel init`` writes a gate from what the project is, and
``init --check`` explains a configuration.

Real repositories, the real CLI: each ecosystem's file must validate and
protect every test file of its project; on a generated pytest project the
gate init writes keeps an attempt that deletes a failing test from winning."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pygit2
import pytest
import yaml

from conftest import GP, git, make_repo, snapshot
from gitflow_parallel import config as C
from gitflow_parallel.commands.init import landlock_abi
from gitflow_parallel.git import protected

PY = sys.executable

PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["setuptools>=64"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "pkg"
    version = "0.1"

    [project.optional-dependencies]
    test = ["pytest"]
""")
APP_BUGGY = "def add(a, b):\n    return a - b\n"
APP_FIXED = "def add(a, b):\n    return a + b\n"
TEST_ADD = "from pkg import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TEST_OTHER = "def test_truth():\n    assert True\n"



def pytest_project(path: Path, app: str = APP_BUGGY, pyproject: str = PYPROJECT) -> Path:
    return make_repo(path, files={
        "pyproject.toml": pyproject, "src/pkg/__init__.py": app, "tests/test_add.py": TEST_ADD,
        "tests/test_other.py": TEST_OTHER, ".gitignore": ".venv/\n",
    })


def written(repo: Path) -> tuple[str, dict]:
    text = (repo / ".gitparallel.yaml").read_text()
    return text, C.parse(text)  # what init writes must validate


def commit_config(repo: Path, cfg: dict | None = None) -> None:
    if cfg is not None:
        (repo / ".gitparallel.yaml").write_text(yaml.safe_dump(cfg))
    git(repo, "add", ".gitparallel.yaml")
    git(repo, "commit", "-q", "-m", "git-parallel config")


def act(gp: GP, inst: str, script: str) -> None:
    gp("run", "t", "--instance", inst, "--", "sh", "-c", script)


def unprotected_tests(repo: Path, cfg: dict, tests: list[str]) -> list[str]:
    tree = pygit2.Repository(str(repo)).head.peel(pygit2.Commit).tree
    patterns = protected.protected_patterns(cfg, tree)
    return [t for t in tests if not protected.matches(t, patterns)]


# -- the gate init writes holds ---------------------------------------------------------
def deleter_loses(repo: Path, gp: GP) -> None:
    gp("spawn", "t", "-n", "2")
    act(gp, "1", f"printf '{APP_FIXED}' > src/pkg/__init__.py")
    act(gp, "2", "git rm -q tests/test_add.py")  # the bug stays; the test that shows it goes
    run = gp.json("status", "t")["run"]
    deleter = Path(next(i["worktree"] for i in run["instances"] if i["id"] == "2"))
    in_worktree = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=deleter,
                                 env={**os.environ, "PYTHONPATH": "src"}, capture_output=True)
    assert in_worktree.returncode == 0  # the trick works where the agent left it
    result = gp.json("check", "t", code=1)
    verdicts = {i["id"]: i["verdict"] for i in result["instances"]}
    assert verdicts == {"1": "pass", "2": "fail"}
    packs = {i["id"]: json.loads(Path(i["evidence"]["path"]).read_text()) for i in result["instances"]}
    assert packs["2"]["protected_changes"] == ["tests/test_add.py"]
    assert gp.json("pick", "t")["picks"][0]["winner"]["id"] == "1"
    gp("merge", "t")
    assert git(repo, "show", "main:tests/test_add.py") == TEST_ADD.strip()
    assert git(repo, "show", "main:src/pkg/__init__.py") == APP_FIXED.strip()


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_the_gate_init_writes_for_a_pytest_project_keeps_a_test_deleter_from_winning(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    gp = GP(repo)
    out = gp.json("init")
    assert out["wrote"] and out["gate"] == [".venv/bin/python", "-m", "pytest", "-q", "tests"]
    assert [d["tool"] for d in out["detected"]] == ["pytest"]
    _, cfg = written(repo)
    assert cfg["setup"]["keep"] == [".venv"] and cfg["setup"]["path"] == [".venv/bin"]
    # This branch's judge does not run setup yet: the same gate with the
    # suite's interpreter and the code taken from the judged checkout's src/.
    raw = yaml.safe_load((repo / ".gitparallel.yaml").read_text())
    del raw["setup"]
    raw["gates"][0]["run"][0] = PY
    raw["gates"][0]["env"] = {"PYTHONPATH": "src"}
    commit_config(repo, raw)
    deleter_loses(repo, gp)


@pytest.mark.slow  # pip builds a venv per scratch checkout, from the package index
def test_the_file_init_writes_judges_as_written(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    gp = GP(repo)
    gp("init")
    commit_config(repo)
    deleter_loses(repo, gp)


@pytest.mark.slow  # pip, from the package index
@pytest.mark.skipif(shutil.which("python3") is None, reason="setup runs python3 from PATH")
def test_the_setup_init_writes_builds_an_environment_the_gate_runs_in(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo", app=APP_FIXED)
    GP(repo)("init")
    _, cfg = written(repo)
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(repo), str(checkout))  # the committed files only, as a judged checkout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    setup = subprocess.run(cfg["setup"]["run"], cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, setup.stderr
    gate = subprocess.run(cfg["gates"][0]["run"], cwd=checkout, env=env, capture_output=True, text=True)
    assert gate.returncode == 0 and "2 passed" in gate.stdout, gate.stdout + gate.stderr
    # The venv imports the checkout's own code, not the repository it was cloned from.
    where = subprocess.run([".venv/bin/python", "-c", "import pkg; print(pkg.__file__)"], cwd=checkout, env=env,
                           capture_output=True, text=True)
    assert where.stdout.strip() == str(checkout / "src" / "pkg" / "__init__.py")


# -- each ecosystem ------------------------------------------------------------------
NO_EXTRAS = '[project]\nname = "pkg"\nversion = "0.1"\n'
CASES = {
    "pytest-extra": ({"pyproject.toml": PYPROJECT, "src/pkg/__init__.py": "", "tests/test_a.py": TEST_OTHER},
                     [".venv/bin/python", "-m", "pytest", "-q", "tests"], "pip install -q -e '.[test]'"),
    "pytest-no-extra": ({"pyproject.toml": NO_EXTRAS, "pkg/__init__.py": "", "test/test_a.py": TEST_OTHER},
                        [".venv/bin/python", "-m", "pytest", "-q", "test"], "pip install -q -e . pytest"),
    "setup.py": ({"setup.py": "from setuptools import setup\nsetup(name='pkg')\n", "pkg/__init__.py": "",
                  "tests/test_a.py": TEST_OTHER, "requirements-dev.txt": "pytest-cov\n"},
                 [".venv/bin/python", "-m", "pytest", "-q", "tests"],
                 "pip install -q -e '.[test]' -r requirements-dev.txt pytest"),
    "testpaths": ({"pyproject.toml": NO_EXTRAS + '\n[tool.pytest.ini_options]\ntestpaths = ["checks"]\n',
                   "checks/test_a.py": TEST_OTHER, "tests/data.txt": "x\n"},
                  [".venv/bin/python", "-m", "pytest", "-q", "checks"], "-e . pytest"),
    "tests-in-package": ({"setup.cfg": "[metadata]\nname = pkg\n[options.extras_require]\ntesting =\n  pytest\n",
                          "pkg/__init__.py": "", "pkg/tests/test_a.py": TEST_OTHER, "pkg/core_test.py": TEST_OTHER},
                         [".venv/bin/python", "-m", "pytest", "-q", "pkg/tests"], "-e '.[testing]'"),
    "uv": ({"pyproject.toml": PYPROJECT, "uv.lock": 'version = 1\n[[package]]\nname = "pytest"\n',
            "tests/test_a.py": TEST_OTHER},
           [".venv/bin/python", "-m", "pytest", "-q", "tests"], "uv sync --frozen --extra test"),
    "npm": ({"package.json": json.dumps({"scripts": {"test": "node --test test/"}}), "package-lock.json": "{}",
             "test/a.test.js": "", "src/b.spec.js": "", "index.js": ""}, ["npm", "test"], "npm ci --prefer-offline"),
    "pnpm": ({"package.json": json.dumps({"scripts": {"test": "vitest run"}}), "pnpm-lock.yaml": "",
              "tests/a.js": ""}, ["pnpm", "test"], "pnpm install --frozen-lockfile --prefer-offline"),
    "go": ({"go.mod": "module example.com/m\n", "a.go": "package m\n", "a_test.go": "package m\n",
            "sub/testdata/x.txt": "x\n"}, ["go", "test", "./..."], "go mod download"),
    "cargo": ({"Cargo.toml": "[package]\nname = \"m\"\n", "src/lib.rs": "", "tests/it.rs": ""},
              ["cargo", "test"], "cargo fetch"),
    "make": ({"Makefile": "all:\n\ttrue\n\ntest:\n\t./run-tests\n", "run-tests": "#!/bin/sh\n",
              "tests/a.sh": ""}, ["make", "test"], None),
}
TEST_FILES = {"tests/test_a.py", "test/test_a.py", "checks/test_a.py", "pkg/tests/test_a.py", "pkg/core_test.py",
              "test/a.test.js", "src/b.spec.js", "tests/a.js", "a_test.go", "sub/testdata/x.txt", "tests/it.rs",
              "tests/a.sh"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_init_writes_a_valid_gate_that_protects_every_test_file(tmp_path: Path, case: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    files, run, setup = CASES[case]
    if case == "uv":  # init writes a uv setup only where uv is on PATH
        tools = tmp_path / "tools"
        tools.mkdir()
        (tools / "uv").write_text("#!/bin/sh\nexit 0\n")
        (tools / "uv").chmod(0o755)
        monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    repo = make_repo(tmp_path / "repo", files=files)
    out = GP(repo).json("init")
    text, cfg = written(repo)
    assert out["gate"] == run and cfg["gates"][0]["run"] == run
    assert cfg["gates"][0]["name"] == "tests" and cfg["gates"][0]["mode"] == "enforced"
    if setup is None:
        assert cfg["setup"] is None
    else:
        assert " ".join(cfg["setup"]["run"]).endswith(setup)
        assert all((repo / key).is_file() for key in cfg["setup"]["cache_key"])
    assert "# Protected:" in text and "conftest.py" in text
    commit_config(repo)
    tests = sorted(TEST_FILES & set(files))
    assert tests and unprotected_tests(repo, cfg, tests) == []
    # A file that is neither a test nor the harness stays the attempt's to change.
    product = next(f for f in files if f not in TEST_FILES and not f.endswith(("Makefile", ".toml", ".json")))
    assert unprotected_tests(repo, cfg, [product]) == [product]


def test_init_notes_tox_and_writes_what_else_it_found_as_comments(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={
        "pyproject.toml": PYPROJECT, "tests/test_a.py": TEST_OTHER, "tox.ini": "[tox]\nenvlist = py\n",
        "package.json": json.dumps({"scripts": {"test": "jest"}}), "Makefile": "test:\n\ttox\n",
    })
    out = GP(repo).json("init")
    assert [d["tool"] for d in out["detected"]] == ["pytest", "npm test", "make test"]
    text, cfg = written(repo)
    assert [g["name"] for g in cfg["gates"]] == ["tests"]
    assert "tox is configured" in text
    assert "#  - name: npm-test\n#    run: [npm, test]" in text and "#    run: [make, test]" in text


@pytest.mark.parametrize("keep", [None, ["pre-commit"], True])
def test_init_notes_that_simple_git_hooks_would_delete_ours(tmp_path: Path, keep: object) -> None:
    """simple-git-hooks deletes, at every install, the hooks its config does
    not name: init says what to add before `hooks install` (none when it
    keeps them all)."""
    sgh: dict[str, object] = {"pre-commit": "npx lint-staged"}
    if keep is not None:
        sgh["preserveUnused"] = keep
    repo = make_repo(tmp_path / "repo", files={
        "package.json": json.dumps({"scripts": {"test": "vitest run"}, "simple-git-hooks": sgh}),
        "package-lock.json": "{}", "test/a.test.js": ""})
    GP(repo).json("init")
    text, _ = written(repo)
    if keep is True:
        assert "simple-git-hooks" not in text
    else:
        note = " ".join(line.removeprefix("#").strip() for line in text.splitlines()[:12])
        assert ('note (node): simple-git-hooks deletes hooks its config does not name at every install: add '
                '"preserveUnused": ["pre-merge-commit", "reference-transaction", "post-checkout"] to it') in note, note


def test_init_without_a_test_runner_writes_the_commented_template(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"README.md": "hi\n", "package.json": "{}"})
    out = GP(repo).json("init")
    text, cfg = written(repo)
    assert out["gate"] is None and cfg == C.parse(None)
    assert text.endswith(C.TEMPLATE) and "found no test runner" in text and "package.json has no test script" in text


def test_init_keeps_an_existing_file_and_force_rewrites_it(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    (repo / ".gitparallel.yaml").write_text("instances: 2\n")
    gp = GP(repo)
    assert gp.json("init")["wrote"] is False
    assert (repo / ".gitparallel.yaml").read_text() == "instances: 2\n"
    assert "kept existing" in gp("init").stdout
    assert gp.json("init", "--force")["wrote"] is True
    assert written(repo)[1]["gates"][0]["run"][-1] == "tests"


# -- init --check ----------------------------------------------------------------------
def test_check_explains_a_gate_that_names_the_test_folder(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    gp = GP(repo)
    gp("init")
    out = gp.json("init", "--check")
    assert out["exists"] and not out["committed"]
    assert any("differs from HEAD" in w for w in out["warnings"])
    commit_config(repo)
    before = snapshot(repo), git(repo, "config", "--list", "--local")
    out = gp.json("init", "--check")
    assert (snapshot(repo), git(repo, "config", "--list", "--local")) == before  # --check writes nothing
    [gate] = out["gates"]
    assert gate["names"] == ["tests"] and gate["setup"] is True and gate["warnings"] == []
    assert out["warnings"] == [] and out["unprotected_tests"] == [] and out["tests"] == 2
    assert "tests" in out["protected"] and "**/conftest.py" in out["protected"]
    abi, _ = landlock_abi()
    assert out["fence"]["landlock_abi"] == abi
    from gitflow_parallel.proc import namespace

    assert out["fence"]["holds"] == ("namespace" if namespace.unavailable() is None
                                     else "landlock" if abi else "outside-checkout check")
    text = gp("init", "--check").stdout
    assert "gate tests (enforced, after setup): .venv/bin/python -m pytest -q tests" in text
    assert "its run protects: tests" in text and "fence: " in text and "warning" not in text


def test_check_says_what_a_gate_without_a_test_folder_leaves_open(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    commit_config(repo, {"protect_defaults": False, "gates": [{"name": "tests", "run": ["python", "-m", "pytest"]}]})
    out = GP(repo).json("init", "--check")
    [gate] = out["gates"]
    assert gate["names"] == [] and gate["setup"] is False
    assert any("deleting a test file would not be noticed" in w for w in gate["warnings"])
    assert any("without setup" in w for w in gate["warnings"])
    assert out["unprotected_tests"] == ["tests/test_add.py", "tests/test_other.py"]
    assert any("protect_defaults: false" in w for w in out["warnings"])
    assert "**/conftest.py" not in out["protected"]
    text = GP(repo)("init", "--check").stdout  # exit 0: it explains, it does not refuse
    assert "deleting a test file would not be noticed" in text and "2 test file(s) are not protected" in text


def test_check_warns_of_a_gate_whose_tests_cannot_be_counted(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    commit_config(repo, {"gates": [
        {"name": "npm", "run": ["npm", "test"]},
        {"name": "jest", "run": ["npx", "jest"]},
        {"name": "script", "run": ["sh", "-c", "pytest -q tests --junitxml={report}"],
         "expect": {"pass_to_pass": ["tests/test_add.py::test_add"]}},  # the report counts
        {"name": "hidden", "run": ["make", "test"], "hidden": str(hidden)},
    ]})
    gates = {g["name"]: [w for w in g["warnings"] if "cannot count" in w]
             for g in GP(repo).json("init", "--check")["gates"]}
    assert gates["jest"] == gates["script"] == []
    [npm] = gates["npm"]
    assert npm.startswith("git-parallel cannot count this gate's tests from its output: `npm test` starts no test "
                          "runner it reads (pytest, unittest, jest")
    assert "npx jest, not npm test" in npm and "expect:" in npm and "JUnit report to {report}" in npm
    assert gates["hidden"][0].endswith("; as it is, this hidden gate fails, having no count")
    text = GP(repo)("init", "--check").stdout
    assert "  warning: git-parallel cannot count this gate's tests from its output: `make test`" in text


def test_check_finds_an_editable_install_that_points_at_the_main_worktree(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "__editable__.pkg-0.1.pth").write_text(f"{repo / 'src'}\n")  # what `pip install -e .` leaves
    commit_config(repo, {"gates": [{"name": "tests", "run": [str(venv / "bin" / "python"), "-m", "pytest", "tests"]}]})
    [gate] = GP(repo).json("init", "--check")["gates"]
    hits = [w for w in gate["warnings"] if "__editable__.pkg-0.1.pth" in w]
    assert hits and str(repo) in hits[0] and "not the attempt's" in hits[0]


def test_check_without_a_file_and_with_a_broken_one(tmp_path: Path) -> None:
    repo = pytest_project(tmp_path / "repo")
    gp = GP(repo)
    out = gp.json("init", "--check")
    assert not out["exists"] and out["gates"] == []
    assert any("no .gitparallel.yaml" in w for w in out["warnings"])
    assert not (repo / ".gitparallel.yaml").exists()
    (repo / ".gitparallel.yaml").write_text("gates: 3\n")
    proc = gp("init", "--check", code=1)
    assert "error[PARALLEL_CONFIG_INVALID]" in proc.stderr
    proc = gp("init", "--check", "--force", code=2)
    assert "--check writes nothing" in proc.stderr


def test_a_uv_lock_without_uv_on_path_gets_a_pip_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found on click: uv.lock in the tree, no uv on the machine."""
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not (Path(p) / "uv").exists()))
    files, _, _ = CASES["uv"]
    repo = make_repo(tmp_path / "repo", files=files)
    GP(repo).json("init")
    text, cfg = written(repo)
    assert "pip install" in " ".join(cfg["setup"]["run"]) and "uv is not on PATH" in text


# -- dependency groups (PEP 735) ---------------------------------------------------------
GROUPS = PYPROJECT.replace('[project.optional-dependencies]\ntest = ["pytest"]\n',
                           '[dependency-groups]\ntest = ["pytest", "tomli-w"]\n')
# A test that needs what only the group installs.
TEST_GROUP = "import tomli_w\n\nfrom pkg import add\n\n\ndef test_add():\n    assert tomli_w.dumps({'n': add(2, 3)}) == 'n = 5\\n'\n"


def _path_without_uv() -> str:
    return os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "uv").exists())


def group_project(path: Path) -> Path:
    return make_repo(path, files={
        "pyproject.toml": GROUPS, "src/pkg/__init__.py": APP_FIXED, "tests/test_add.py": TEST_GROUP,
        ".gitignore": ".venv/\n"})


def test_init_installs_the_test_dependency_group_with_an_upgraded_pip_without_uv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_without_uv())
    repo = group_project(tmp_path / "repo")
    GP(repo)("init")
    text, cfg = written(repo)
    line = cfg["setup"]["run"][-1]
    assert line.startswith("python3 -m venv .venv && .venv/bin/python -m pip install -q --upgrade 'pip>=25.1' && ")
    assert line.endswith(".venv/bin/python -m pip install -q -e . --group test")  # pytest is in the group
    assert "dependency-groups" not in text  # no note left asking for a hand-made --group


def _run_setup(repo: Path, tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    """What init wrote, run for real in a checkout of the committed files; returns the gate's run."""
    _, cfg = written(repo)
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(repo), str(checkout))
    env = {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}, "PATH": path}
    setup = subprocess.run(cfg["setup"]["run"], cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    return subprocess.run(cfg["gates"][0]["run"], cwd=checkout, env=env, capture_output=True, text=True)


@pytest.mark.slow  # pip, from the package index
@pytest.mark.skipif(shutil.which("python3") is None, reason="setup runs python3 from PATH")
def test_the_group_setup_pip_builds_runs_the_groups_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _path_without_uv())
    repo = group_project(tmp_path / "repo")
    GP(repo)("init")
    gate = _run_setup(repo, tmp_path, _path_without_uv())
    assert gate.returncode == 0 and "1 passed" in gate.stdout, gate.stdout + gate.stderr


@pytest.mark.slow  # uv from the package index, then the group through it
def test_with_uv_on_path_init_installs_the_group_through_uv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tmp_path / "tools"
    subprocess.run([PY, "-m", "venv", str(tools)], check=True)
    got = subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "-q", "uv"], capture_output=True,
                         text=True)
    if got.returncode != 0:
        pytest.skip(f"uv could not be installed from the package index: {got.stderr[-300:]}")
    uv_only = tmp_path / "uv-bin"
    uv_only.mkdir()
    (uv_only / "uv").symlink_to(tools / "bin" / "uv")  # uv alone: not the tools venv's python on PATH
    path = f"{uv_only}{os.pathsep}{_path_without_uv()}"
    monkeypatch.setenv("PATH", path)
    repo = group_project(tmp_path / "repo")
    GP(repo)("init")
    _, cfg = written(repo)
    assert cfg["setup"]["run"][-1] == "uv venv -q .venv && uv pip install -q --python .venv/bin/python -e . --group test"
    gate = _run_setup(repo, tmp_path, path)
    assert gate.returncode == 0 and "1 passed" in gate.stdout, gate.stdout + gate.stderr
