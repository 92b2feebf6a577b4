"""Hostile attempts against the kept environments: setup's environment is
built from the base commit only, kept read-only, and an attempt that
changes its build gets one of its own that goes with its judging."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import make_repo
from gitflow_parallel.judge import check
from hostile import needs_namespace
from test_judged_right import CALC, CHECK_SCRIPT, PY, SITE, WRONG, commit_in, packs, start, verdicts

# The project's build writes the editable install; an attempt may change it.
BUILD = f'echo "$PWD/src" > .venv/{SITE}/__editable__.calc.pth\n'
PLANT = BUILD + f'printf "import os\\nos._exit(0)\\n" > .venv/{SITE}/sitecustomize.py\n'
CONFIG = textwrap.dedent(f"""
    setup:
      run: [sh, -c, '{PY} -m venv --without-pip .venv && sh build.sh']
      cache_key: [build.sh]
      keep: [.venv]
      path: [.venv/bin]
    gates:
      - name: tests
        run: [python, tests/check.py]
""")


@needs_namespace
def test_a_build_that_plants_code_never_judges_another_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT,
                                         "build.sh": BUILD}, config=CONFIG)
    project, worktrees = start(repo, 3)
    commit_in(worktrees["1"], {"build.sh": PLANT, "src/calc/__init__.py": WRONG})  # its build plants, its code is wrong
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})  # honest, and wrong
    commit_in(worktrees["3"], {"src/calc/__init__.py": CALC + "\n# tidy\n"})
    for inst in ("1", "2", "3"):
        check.check(project, "t", instances=[inst], jobs=1)
    by_id = packs(project)
    assert by_id["2"]["verdict"] == "fail" and by_id["3"]["verdict"] == "pass"
    # The first built its own environment from its own build; the others share one built from the base.
    assert by_id["1"]["setup"]["built_from"] == "attempt" and not by_id["1"]["setup"]["cached"]
    assert by_id["2"]["setup"]["built_from"] == "base"
    assert by_id["3"]["setup"]["cached"] and by_id["3"]["setup"]["built_from"] == "base"
    kept = list((repo / ".git" / "parallel" / "envs").glob(f"*/layer/.venv/{SITE}/sitecustomize.py"))
    assert kept == []
    # Nothing of the attempt's own environment is left once its judging is done.
    assert not any(p.name.startswith("env-") for p in (repo / ".git" / "parallel" / "layers").iterdir())


@needs_namespace
def test_a_gate_writing_into_the_kept_environment_changes_nothing_kept(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT,
                                         "build.sh": BUILD}, config=CONFIG)
    project, worktrees = start(repo, 2)
    planting = CALC + textwrap.dedent(f"""
        import pathlib as _p
        try:
            _p.Path(".venv/{SITE}/sitecustomize.py").write_text("import os\\nos._exit(0)\\n")
        except OSError:
            pass
        """)
    commit_in(worktrees["1"], {"src/calc/__init__.py": planting})
    commit_in(worktrees["2"], {"src/calc/__init__.py": WRONG})
    assert verdicts(check.check(project, "t", instances=["1"])) == {"1": "pass"}
    assert verdicts(check.check(project, "t", instances=["2"])) == {"2": "fail"}
    assert packs(project)["2"]["setup"]["cached"] is True  # the kept layer, untouched


@pytest.mark.slow  # the default tier keeps near 150 s; CI runs this after it
@needs_namespace
def test_each_checkout_of_the_pool_judges_with_an_environment_built_at_its_path(tmp_path: Path) -> None:
    # Two instances checked side by side take two checkouts; an editable
    # install names the path it was built at, so the one built at
    # scratch+2 must never serve scratch+1 (found on pypa/packaging).
    from test_judged_right import SETUP

    gate = "gates:\n  - name: tests\n    run: [sh, -c, 'sleep 2; exec python tests/check.py']\n"
    repo = make_repo(tmp_path / "repo", {"src/calc/__init__.py": CALC, "tests/check.py": CHECK_SCRIPT,
                                         "pyproject.toml": '[project]\nname = "calc"\nversion = "1"\n'},
                     config=SETUP + gate)
    project, worktrees = start(repo, 2)
    commit_in(worktrees["1"], {"src/calc/__init__.py": CALC + "\n# one\n"})
    commit_in(worktrees["2"], {"src/calc/__init__.py": CALC + "\n# two\n"})
    assert verdicts(check.check(project, "t", jobs=2)) == {"1": "pass", "2": "pass"}
    for inst in ("1", "2", "1"):
        assert verdicts(check.check(project, "t", instances=[inst], jobs=1)) == {inst: "pass"}
