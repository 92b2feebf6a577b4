"""Judged right by default: the gates test the attempt's own code, with the
real harness, and what an attempt changed of the harness is shown and never
lands without a person.

Attempts are made by hand in their worktrees (a commit, as an agent would
leave it; ``check`` adopts it), and the verbs are called in-process; gates
run real pytest and real interpreters in real virtual environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, make_repo
from gitflow_parallel.commands import check, merge, pick, spawn
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git import scratch
from gitflow_parallel.state.project import Project

PY = sys.executable
SITE = Path(sysconfig.get_path("purelib")).relative_to(sys.prefix).as_posix()  # lib/pythonX.Y/site-packages

CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = ("from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
         "def test_mul():\n    assert mul(2, 3) == 6\n")


def commit_in(worktree: Path, files: dict[str, str | None], message: str = "attempt") -> str:
    """What an agent leaves: ``files`` written (None: deleted) and committed."""
    for name, text in files.items():
        path = worktree / name
        if text is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD")


def start(repo: Path, n: int) -> tuple[Project, dict[str, Path]]:
    project = Project.open(repo)
    run = spawn.spawn(project, "t", n)
    return project, {i["id"]: Path(i["worktree"]) for i in run["instances"]}


def verdicts(result: dict[str, Any]) -> dict[str, str]:
    return {i["id"]: i["verdict"] for i in result["instances"]}


def packs(project: Project) -> dict[str, dict[str, Any]]:
    record = project.store.load("t")
    return {i["id"]: json.loads(Path(i["evidence"]["path"]).read_text()) for i in record["instances"]
            if i.get("evidence")}


# -- the harness -------------------------------------------------------------------------
PYTEST_GATE = f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\nmax_total: 12\n"
WRONG = CALC.replace("return a + b", "return a - b")
CHEATS: dict[str, dict[str, str]] = {
    "conftest-exit": {"conftest.py": "import os\nos._exit(0)\n"},
    "conftest-hook": {"conftest.py": textwrap.dedent("""
        import pytest
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            report = outcome.get_result()
            report.outcome = "passed"
        """)},
    "pytest-ini": {"pytest.ini": "[pytest]\naddopts = --co\n"},
    "setup-cfg": {"setup.cfg": "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = --co\n"},
    "pyproject-addopts": {"pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n\n'
                                            '[tool.pytest.ini_options]\naddopts = "--co"\n'},
    "tox-plugin": {"tox.ini": "[pytest]\naddopts = -p cheat\n",
                   "cheat.py": "def pytest_collection_modifyitems(items):\n    items.clear()\n"},
    "nested-conftest": {"tests/conftest.py": "import os\nos._exit(0)\n"},
    "dot-pytest-ini": {".pytest.ini": "[pytest]\naddopts = --co\n"},
}


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_each_harness_cheat_fails_and_the_honest_attempt_lands(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS,
                                         "pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n'},
                     config=PYTEST_GATE)
    project, worktrees = start(repo, len(CHEATS) + 1)
    names = {str(k): name for k, name in enumerate(CHEATS, 1)}
    for inst_id, name in names.items():
        commit_in(worktrees[inst_id], {"calc/__init__.py": WRONG, **CHEATS[name]}, f"cheat {name}")
    honest = str(len(CHEATS) + 1)
    commit_in(worktrees[honest], {"calc/__init__.py": CALC.replace("a * b", "b * a")}, "honest")
    # Each cheat alone really makes wrong code pass when it is the harness (the
    # cheats are real): run pytest in the cheater's own worktree.
    for inst_id in names:
        alone = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                               cwd=worktrees[inst_id], capture_output=True)
        assert alone.returncode in (0, 5), (names[inst_id], alone.stdout[-300:])

    result = check.check(project, "t")
    assert result["errors"] == []
    got = verdicts(result)
    assert got[honest] == "pass"
    for inst_id, name in names.items():
        assert got[inst_id] == "fail", name
    by_id = packs(project)
    for inst_id, name in names.items():
        changed = {c["path"] for c in by_id[inst_id]["protected_detail"]}
        assert set(CHEATS[name]) - {"cheat.py"} <= changed, (name, changed)
        assert by_id[inst_id]["protected_blocking"], name
    assert by_id[honest]["protected_detail"] == []

    picked = pick.pick(project, "t")
    assert picked["picks"][0]["winner"]["id"] == honest
    landed = merge.merge(project, "t")
    assert git(repo, "show", f"{landed['merge']['landed']}:calc/__init__.py") == CALC.replace("a * b", "b * a").strip()


def test_makefile_gate_is_judged_with_the_bases_makefile(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS,
                                         "Makefile": f"test:\n\t{PY} -m pytest -q -p no:cacheprovider tests\n"},
                     config="gates:\n  - name: tests\n    run: [make, test]\n")
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"calc/__init__.py": WRONG, "Makefile": "test:\n\ttrue\n"})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC + "\n"})
    result = check.check(project, "t")
    assert result["errors"] == [] and verdicts(result) == {"1": "fail", "2": "pass"}, result
    detail = packs(project)["1"]["protected_detail"]
    assert detail == [{"path": "Makefile", "change": "modified", "lines_added": 1, "lines_deleted": 1,
                       "harness": True, "dependencies": False, "restored": True}]
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "2"


def test_a_product_change_to_pyproject_is_judged_as_written(tmp_path: Path) -> None:
    """pyproject.toml carries the product too: a change outside its harness
    sections is the attempt's own and may win."""
    base = '[project]\nname = "calc"\nversion = "1"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS,
                                         "pyproject.toml": base}, config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"pyproject.toml": base.replace('version = "1"', 'version = "2"')})
    result = check.check(project, "t")
    assert verdicts(result) == {"1": "pass"}
    assert packs(project)["1"]["protected_detail"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "1"


def test_a_new_dependency_is_judged_as_written_and_needs_a_person(tmp_path: Path) -> None:
    """An installed package can carry a pytest plugin: a changed dependency
    is judged with the attempt's pyproject (it may need the package) but
    never lands by an automatic pick."""
    base = '[project]\nname = "calc"\nversion = "1"\ndependencies = []\n'
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS,
                                         "pyproject.toml": base}, config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    tip = commit_in(worktrees["1"], {"pyproject.toml": base.replace("[]", '["pytest-cheat"]')})
    assert verdicts(check.check(project, "t")) == {"1": "pass"}
    pack = packs(project)["1"]
    assert pack["judged_commit"] == tip  # nothing restored
    assert pack["protected_detail"][0]["dependencies"] and pack["protected_blocking"] == ["pyproject.toml"]
    with pytest.raises(ParallelError) as refused:
        pick.pick(project, "t")
    assert refused.value.code == "PARALLEL_PROTECTED_PATH_CHANGED"


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_config_change_never_wins_automatically_and_lands_only_with_a_person(tmp_path: Path) -> None:
    config = PYTEST_GATE
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS}, config=config)
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {".gitparallel.yaml": "gates: []\n"})
    commit_in(worktrees["2"], {"tests/test_calc.py": None})  # deletes the protected tests
    result = check.check(project, "t")
    assert verdicts(result) == {"1": "pass", "2": "pass"}  # judged with the base's config and tests
    with pytest.raises(ParallelError) as refused:
        pick.pick(project, "t")
    assert refused.value.code == "PARALLEL_PROTECTED_PATH_CHANGED"
    assert ".gitparallel.yaml" in refused.value.message and "tests/test_calc.py" in refused.value.message
    assert not (repo / ".git" / "parallel" / "picks").exists() or not any((repo / ".git" / "parallel" / "picks").rglob("*.json"))

    gp = GP(repo)
    show = gp("show", "t", "2").stdout
    assert "tests/test_calc.py deleted +0 -9" in show and "blocks an automatic pick" in show
    status = gp.json("status", "t")["run"]
    assert status["instances"][0]["protected_changes"][0]["path"] == ".gitparallel.yaml"
    gp("pick", "t", "--instance", "1", "--reason", "the config change is intended")
    landed = gp("merge", "t")
    assert "landed protected change(s) of instance 1" in landed.stderr
    assert ".gitparallel.yaml modified +1 -" in landed.stderr
    main = git(repo, "rev-parse", "main")
    note = git(repo, "notes", "--ref=parallel", "show", main)
    assert '"protected_changes":[".gitparallel.yaml modified' in note


def test_added_tests_are_shown_and_do_not_block(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS}, config=PYTEST_GATE)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"tests/test_more.py": "from calc import add\n\n\ndef test_zero():\n"
                                                     "    assert add(0, 0) == 0\n"})
    result = check.check(project, "t")
    assert verdicts(result) == {"1": "pass"}
    pack = packs(project)["1"]
    assert pack["protected_detail"] == [{"path": "tests/test_more.py", "change": "added", "lines_added": 5,
                                         "lines_deleted": 0, "harness": False, "dependencies": False,
                                         "restored": True}]
    assert pack["protected_blocking"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "1"


def test_protect_defaults_false_turns_the_list_off(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS},
                     config=PYTEST_GATE + "protect_defaults: false\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": WRONG, "conftest.py": "import os\nos._exit(0)\n"})
    assert verdicts(check.check(project, "t")) == {"1": "pass"}  # what the list is there to stop


# -- the attempt's own environment -----------------------------------------------------------
def _venv(path: Path) -> Path:
    subprocess.run([PY, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


def _editable(venv: Path, src: Path) -> None:
    """What ``pip install -e`` leaves in a venv: a .pth naming the sources."""
    (venv / SITE / "__editable__.calc.pth").write_text(f"{src}\n")


CHECK_SCRIPT = textwrap.dedent("""
    import sys
    from calc import add, mul
    failed = [n for n, ok in (("add", add(2, 3) == 5), ("mul", mul(2, 3) == 6)) if not ok]
    print("failed:", failed or "none", "from", add.__code__.co_filename)
    sys.exit(1 if failed else 0)
""")
# The setup a project with an editable install needs: its own venv, with the
# checkout's sources installed the way pip -e does.
SETUP = textwrap.dedent(f"""
    setup:
      run: [sh, -c, '{PY} -m venv --without-pip .venv && echo "$PWD/src" > .venv/{SITE}/__editable__.calc.pth']
      cache_key: [pyproject.toml]
      keep: [.venv]
      path: [.venv/bin]
""")
GATE = "gates:\n  - name: tests\n    run: [python, tests/check.py]\n"


def editable_project(tmp_path: Path, config: str) -> tuple[Path, dict[str, str]]:
    """A src-layout project with the usual editable install in an activated venv."""
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT,
                                         "pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n'},
                     config=config)
    venv = _venv(tmp_path / "venv")
    _editable(venv, repo / "src")
    env = {"PATH": f"{venv}/bin{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    return repo, env


def test_without_setup_an_editable_install_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, env = editable_project(tmp_path, GATE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"src/calc/__init__.py": WRONG})
    result = check.check(project, "t")
    assert result["instances"] == []
    (error,) = result["errors"]
    assert error["code"] == "PARALLEL_GATE_OUTSIDE_CHECKOUT"
    assert str(repo / "src" / "calc") in error["message"] and "setup" in error["hint"]
    assert project.store.load("t")["instances"][0]["verdict"] is None  # no verdict from the main worktree's code


def test_with_setup_the_verdicts_are_about_each_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, env = editable_project(tmp_path, SETUP + GATE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    project, worktrees = start(repo, 3)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC.replace("a * b", "b * a")})  # right
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})  # wrong
    commit_in(worktrees["3"], {"src/calc/__init__.py": CALC.replace("return a * b", "return a ** b")})  # breaks mul
    result = check.check(project, "t", jobs=1)
    assert result["errors"] == []
    assert verdicts(result) == {"1": "pass", "2": "fail", "3": "fail"}
    by_id = packs(project)
    logs = {i: Path(by_id[i]["gates"][0]["log"]).read_text() for i in by_id}
    assert "/.judged/scratch+" in logs["1"] and str(repo / "src") not in logs["1"]
    assert "failed: ['add']" in logs["2"] and "failed: ['mul']" in logs["3"]
    setups = [by_id[i]["setup"] for i in ("1", "2", "3")]
    assert all(s["passed"] for s in setups)
    assert [s["cached"] for s in setups] == [False, True, True]  # one checkout, one build, reused
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "1"


def test_a_gate_that_plants_code_in_the_kept_environment_voids_the_cache(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The gates of one attempt run in the checkout whose environment the next
    attempt reuses: what they plant there must not judge the next one."""
    repo, env = editable_project(tmp_path, SETUP + GATE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    project, worktrees = start(repo, 2)
    # Attempt 1's own code plants a sitecustomize when it is imported (in the gate's process).
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC + textwrap.dedent(f"""
        import pathlib as _p
        _p.Path(".venv/{SITE}/sitecustomize.py").write_text("import os\\nos._exit(0)\\n")
        """)})
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})
    first = check.check(project, "t", instances=["1"])
    assert verdicts(first) == {"1": "pass"}
    second = check.check(project, "t", instances=["2"])
    assert verdicts(second) == {"2": "fail"}  # the planted sitecustomize did not judge it
    pack = packs(project)["2"]
    # In the namespace layer the gates never wrote the kept environment (it
    # is a read-only layer under theirs), so it is reused; under Landlock
    # alone the change voids the cache.
    assert pack["setup"]["passed"] and pack["setup"]["cached"] is (pack["fence"] == "namespace")


@pytest.mark.slow  # builds the environment three times
def test_taking_turns_in_one_checkout_the_planted_code_still_judges_nobody(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Within one check, quick gates take turns in one scratch checkout
    (git/scratch): whichever attempt goes second must not be judged by what
    the first one's code planted in the kept environment."""
    repo, env = editable_project(tmp_path, SETUP + GATE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC + textwrap.dedent(f"""
        import pathlib as _p
        _p.Path(".venv/{SITE}/sitecustomize.py").write_text("import os\\nos._exit(0)\\n")
        """)})
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})
    assert verdicts(check.check(project, "t", instances=["1"])) == {"1": "pass"}  # the pool has one checkout
    scratch_root = scratch.scratch_root(project.repo)
    (scratch_root / ".make-seconds").write_text("30\n")  # making another would take long: take turns
    both = check.check(project, "t", again=True, jobs=2)
    assert verdicts(both) == {"1": "pass", "2": "fail"}
    assert sorted(p.name for p in scratch_root.glob("scratch+*") if p.suffix not in (".lock", ".json")) == ["scratch+1"]


def test_a_failing_setup_fails_every_gate(tmp_path: Path) -> None:
    config = "setup: [sh, -c, 'exit 3']\n" + GATE
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT}, config=config)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC + "\n"})
    result = check.check(project, "t")
    assert verdicts(result) == {"1": "fail"}
    pack = packs(project)["1"]
    assert pack["setup"]["exit_code"] == 3 and pack["setup"]["error"] == "setup exited 3"
    assert pack["gates"][0]["error"].startswith("not run: setup failed") and pack["complete"]


def test_gates_never_use_git_parallels_own_virtualenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitflow_parallel.judge import place

    own = os.path.join(sys.prefix, "bin")
    monkeypatch.setenv("PATH", f"{own}{os.pathsep}/usr/bin")
    env = place.gate_env({}, {}, ["/x/.venv/bin"])
    if sys.prefix != sys.base_prefix:
        assert own not in env["PATH"].split(os.pathsep)
    assert env["PATH"].split(os.pathsep)[0] == "/x/.venv/bin"


# -- tests the attempt adds ------------------------------------------------------------------
ADDED_FAILING = "from calc import mul\n\n\ndef test_mul_zero():\n    assert mul(5, 0) == 5\n"


@pytest.mark.parametrize("mode, verdict", [("observe", "pass"), ("enforced", "fail")])
def test_an_added_test_runs_as_a_second_stage(tmp_path: Path, mode: str, verdict: str) -> None:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS},
                     config=PYTEST_GATE + f"added_tests: {mode}\n")
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"tests/test_new.py": ADDED_FAILING})
    assert verdicts(check.check(project, "t")) == {"1": verdict}
    pack = packs(project)["1"]
    stage = pack["added_tests"]
    assert stage["mode"] == mode and stage["paths"] == ["tests/test_new.py"] and stage["passed"] is False
    assert [g["passed"] for g in pack["gates"]] == [True]  # the base's tests alone pass
    log = Path(stage["gates"][0]["log"]).read_text()
    assert "1 failed, 2 passed" in log and "test_mul_zero" in log
    assert stage["gates"][0]["log"].endswith(".0.added.gate-tests.log")
    scratch_dir = Path(log.split("rootdir: ", 1)[1].split()[0]) if "rootdir: " in log else None
    assert scratch_dir is None or not (scratch_dir / "tests" / "test_new.py").exists()  # taken out again
    from gitflow_parallel.commands import report

    page = Path(report.report(project, "t")["path"]).read_text()
    assert "tests/test_new.py" in page


# -- hidden tests ---------------------------------------------------------------------------
HIDDEN_TEST = ("from calc import mul\n\n\ndef test_hidden_secret_square():\n"
               "    assert mul(7, 7) == 49  # SECRET-HIDDEN-MARKER\n")


def test_hidden_tests_decide_and_never_leak(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text(HIDDEN_TEST)
    config = (f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\n"
              f"  - name: hidden\n    run: [{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]\n"
              f"    hidden: {hidden}\n")
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": TESTS}, config=config)
    project, worktrees = start(repo, 2)
    # 1 passes the visible tests only: mul is right for 2*3 and wrong for 7*7.
    commit_in(worktrees["1"], {"calc/__init__.py": CALC.replace("return a * b", "return 6 if (a, b) == (2, 3) else 0")})
    commit_in(worktrees["2"], {"calc/__init__.py": CALC.replace("a * b", "b * a")})
    result = check.check(project, "t")
    assert result["errors"] == [] and verdicts(result) == {"1": "fail", "2": "pass"}, result
    by_id = packs(project)
    gate = by_id["1"]["gates"][1]
    assert gate["name"] == "hidden" and not gate["passed"] and gate["log"] is None
    assert gate["hidden"] == {"files": 1, "summary": "1 failed, 2 passed"}
    assert by_id["2"]["gates"][1]["hidden"] == {"files": 1, "summary": "3 passed"}
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "2"

    # Nothing of the hidden file anywhere the agents (or anyone) can read.
    gp = GP(repo)
    gp("retry", "t", "1")
    feedback = Path(project.store.load("t")["instances"][0]["feedback"]).read_text()
    assert "1 failed, 2 passed" in feedback and "tests you cannot see" in feedback
    merge.merge(project, "t")
    for where in [repo, tmp_path / "repo.parallel"]:
        for path in where.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert b"SECRET-HIDDEN-MARKER" not in data and b"test_hidden_secret_square" not in data, path
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                             capture_output=True).stdout
    assert b"SECRET-HIDDEN-MARKER" not in objects
    assert "SECRET" not in git(repo, "log", "--all", "-p", "--notes=parallel")


def test_hidden_folder_inside_the_repository_is_refused(tmp_path: Path) -> None:
    repo_dir = tmp_path / "repo"
    config = (f"gates:\n  - name: hidden\n    run: [{PY}, -c, 'pass']\n    hidden: {repo_dir / 'secret'}\n")
    repo = make_repo(repo_dir, {"calc/__init__.py": CALC, "secret/t.py": "x\n"}, config=config)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC + "\n"})
    result = check.check(project, "t")
    assert result["errors"][0]["code"] == "PARALLEL_CONFIG_INVALID"
    assert "inside the repository" in result["errors"][0]["message"]


def test_setup_worktrees_prepares_each_agent_worktree_at_spawn(tmp_path: Path) -> None:
    config = ("setup:\n  run: [sh, -c, 'mkdir -p .venv && echo \"$GIT_PARALLEL_INSTANCE\" > .venv/built']\n"
              "  worktrees: true\n" + GATE)
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT,
                                         ".gitignore": ".venv/\n"}, config=config)
    _, worktrees = start(repo, 2)
    assert {i: (w / ".venv" / "built").read_text().strip() for i, w in worktrees.items()} == {"1": "1", "2": "2"}
    assert git(worktrees["1"], "status", "--porcelain") == ""  # ignored: never a leftover


def test_a_failing_worktree_setup_is_a_warning(tmp_path: Path) -> None:
    config = "setup:\n  run: [sh, -c, 'exit 4']\n  worktrees: true\n" + GATE
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC}, config=config)
    result = spawn.spawn(Project.open(repo), "t", 1)
    assert any("setup in the worktree of instance 1 failed (exit 4)" in w for w in result["warnings"])


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_merge_timeout_does_not_count_the_reproofs_gates(tmp_path: Path) -> None:
    """Found on click: a re-proof longer than merge.timeout threw the merge away."""
    config = (f"gates:\n  - name: slow\n    run: [{PY}, -c, 'import time; time.sleep(2.0)']\n"
              "merge:\n  timeout: 1\n  verify: always\n")  # (a fast-forward: auto would rest on the check)
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC}, config=config)
    project, worktrees = start(repo, 1)
    commit_in(worktrees["1"], {"calc/__init__.py": CALC + "\n"})
    check.check(project, "t")
    pick.pick(project, "t")
    landed = merge.merge(project, "t")
    assert landed["merge"]["verified"][0]["passed"] and git(repo, "rev-parse", "main") == landed["merge"]["landed"]


# -- the user's PYTHONPATH ----------------------------------------------------------------------
SRC_GATE = ("gates:\n  - name: tests\n    run: [python, -c, \"import sys; sys.path.append('src'); import calc; "
            "assert calc.add(2, 3) == 5, calc.__file__\"]\n")


def test_a_pythonpath_naming_the_main_worktree_judges_each_attempt(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A src-layout project's user often exports PYTHONPATH=<repo>/src.
    The gates (whose checkout's code comes after it on sys.path, as an
    editable install's does: here a path appended) would have imported the
    main worktree's code: every check was refused
    (``PARALLEL_GATE_OUTSIDE_CHECKOUT``).  An entry inside the main worktree
    now names the same place in the judged checkout."""
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC}, config=SRC_GATE)
    monkeypatch.setenv("PYTHONPATH", f"{repo / 'src'}{os.pathsep}/opt/elsewhere")
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC.replace("a + b", "a - b")})  # wrong
    commit_in(worktrees["2"], {"src/calc/__init__.py": CALC + "\n"})  # right
    result = check.check(project, "t")
    assert result["errors"] == [] and verdicts(result) == {"1": "fail", "2": "pass"}, result


def test_with_setup_a_pythonpath_naming_the_main_worktree_judges_each_attempt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With setup too (an editable install in the kept venv, after
    PYTHONPATH on sys.path): the gates' Python would have imported the main
    worktree's code, so every check was refused
    (``PARALLEL_GATE_OUTSIDE_CHECKOUT``); now each attempt is judged."""
    repo, env = editable_project(tmp_path, SETUP + GATE)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PYTHONPATH", str(repo / "src"))
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC.replace("a * b", "b * a")})  # right
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})  # wrong
    result = check.check(project, "t", jobs=1)
    assert result["errors"] == [] and verdicts(result) == {"1": "pass", "2": "fail"}, result
    logs = {i: Path(p["gates"][0]["log"]).read_text() for i, p in packs(project).items()}
    assert "failed: ['add']" in logs["2"] and str(repo / "src") not in logs["2"], logs["2"]


def test_pythonpath_entries_in_the_main_worktree_name_the_checkout(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gitflow_parallel.judge import place

    main, here = tmp_path / "repo", tmp_path / "checkout"
    (main / "src").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(main / "src"), str(main), "/opt/lib", "rel", ""]))
    env = place.gate_env({}, {}, (), home=(main, here))
    assert env["PYTHONPATH"].split(os.pathsep) == [str(here / "src"), str(here), "/opt/lib", "rel", ""]
    monkeypatch.delenv("PYTHONPATH")
    assert "PYTHONPATH" not in place.gate_env({}, {}, (), home=(main, here))


def test_an_agents_pythonpath_in_the_main_worktree_names_its_own_worktree(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own tests imported the main worktree's code: an agent fixing
    src/calc saw them fail on the base whatever it wrote."""
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC}, config=SRC_GATE)
    monkeypatch.setenv("PYTHONPATH", f"{repo / 'src'}{os.pathsep}/opt/elsewhere")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, "-c", "import os, calc; open('seen.txt', 'w').write(os.environ['PYTHONPATH'] + "
                                   "'|' + calc.__file__)")
    worktree = Path(gp.json("status", "t")["run"]["instances"][0]["worktree"])
    seen = git(repo, "show", "parallel/t/1:seen.txt")
    assert seen == f"{worktree / 'src'}{os.pathsep}/opt/elsewhere|{worktree / 'src' / 'calc' / '__init__.py'}", seen
