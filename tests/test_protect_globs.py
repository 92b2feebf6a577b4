"""``protect:`` globs mean what they say: ``./tests/**``, ``tests//**``,
``./tests`` and ``tests/`` protect what ``tests/**`` and ``tests``
protect, ``..`` and a glob naming the whole repository are refused with
the reason, and a glob that matches nothing in the base tree is a warning
at ``init --check`` and at ``spawn``.  The attack each spelling must stop:
a wrong attempt that empties the test file its gate discovers."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, make_repo
from gitflow_parallel import config as C
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git import protected

PY = sys.executable

# A runner that discovers its tests, as `python -m pytest` does: every
# test_*.py under tests/, every test_ function in it; no test found is a pass.
GATE = textwrap.dedent("""
    import importlib.util, pathlib, sys
    sys.path.insert(0, ".")
    failed = 0
    for path in sorted(pathlib.Path("tests").rglob("test_*.py")):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in dir(module):
            if name.startswith("test_"):
                try:
                    getattr(module, name)()
                except AssertionError:
                    failed += 1
    sys.exit(1 if failed else 0)
""")
AGENT = textwrap.dedent("""
    import pathlib
    pathlib.Path("calc.py").write_text("def add(a, b):\\n    return a - b\\n")
    pathlib.Path("tests/test_calc.py").write_text("")
""")
SPELLINGS = ["./tests/**", "tests//**", "./tests", "tests/", ".//tests/./**"]


def _project(tmp_path: Path, protect: str) -> tuple[Path, GP]:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "gate.py").write_text(GATE)
    (tools / "agent.py").write_text(AGENT)
    config = f"protect: ['{protect}']\ngates:\n  - name: tests\n    run: [{PY}, {tools / 'gate.py'}]\n"
    repo = make_repo(tmp_path / "repo", config=config, files={
        "calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"})
    return repo, GP(repo)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_each_spelling_reads_as_the_plain_glob(spelling: str) -> None:
    cfg = C.parse(f"protect: ['{spelling}']\n")
    assert cfg["protect"] in (["tests/**"], ["tests"])
    assert protected.matches("tests/test_calc.py", cfg["protect"])
    # A record frozen before the spellings were read so still protects.
    assert protected.matches("tests/test_calc.py", [spelling])
    assert not protected.matches("calc.py", [spelling])


@pytest.mark.parametrize("glob, why", [
    ("../tests/**", ".."), ("tests/../src/**", ".."), (".", "whole repository"), ("./", "whole repository"),
    ("/tests/**", "relative to the top")])
def test_unsound_spellings_are_refused_with_the_reason(glob: str, why: str) -> None:
    with pytest.raises(ParallelError) as exc:
        C.parse(f"protect: ['{glob}']\n")
    assert "protect" in exc.value.message and why in exc.value.message


@pytest.mark.slow  # a spawn, a run and a check per spelling: about 2 s each
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_wrong_attempt_emptying_its_tests_fails_under_each_spelling(tmp_path: Path, spelling: str) -> None:
    repo, gp = _project(tmp_path, spelling)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "tools" / "agent.py"))
    gp("check", "t", code=1)  # judged with the base's tests/test_calc.py: add(2, 2) == 0 fails
    assert gp.json("status", "t")["run"]["instances"][0]["verdict"] == "fail"
    gp("pick", "t", code=1)


def test_a_glob_matching_nothing_is_a_warning_at_init_check_and_spawn(tmp_path: Path) -> None:
    repo, gp = _project(tmp_path, "test/**")  # the folder is tests/
    out = gp.json("init", "--check")
    assert any("test/**" in w and "matches nothing" in w for w in out["warnings"]), out["warnings"]
    spawned = gp.json("spawn", "t", "-n", "1")  # spawn still proceeds
    assert any("test/**" in w and "matches nothing" in w for w in spawned["warnings"]), spawned.get("warnings")
    assert spawned["instances"][0]["status"] == "pending"


def test_globs_that_match_say_nothing(tmp_path: Path) -> None:
    repo, gp = _project(tmp_path, "./tests")
    assert not any("matches nothing" in w for w in gp.json("init", "--check")["warnings"])
    assert not any("matches nothing" in w for w in gp.json("spawn", "t", "-n", "1").get("warnings", []))
