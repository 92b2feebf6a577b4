"""Failing tests by name from each common runner's output.

The parsers read output captured from real runs (``tests/fixtures/failures``,
each file's first line says how it was made); node's test runner, pytest
and cargo also run live here, and jest, vitest and mocha run live in the
slow tier, installed from the npm registry."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gitflow_parallel import failures

FIXTURES = Path(__file__).parent / "fixtures" / "failures"
JS_NAMES = ["calc › multiplies wrong", "calc › nested group › fails deep", "top level fails"]
EXPECTED = {
    "jest.log": (JS_NAMES, "Tests:       3 failed, 1 passed, 4 total"),
    "vitest.log": ([f"t/calc.vitest.test.mjs > {n.replace(' › ', ' > ')}" for n in JS_NAMES],
                   "Tests  3 failed | 1 passed (4)"),
    "mocha.log": (["top level fails", "calc multiplies wrong", "calc nested group fails deep"], "3 failing"),
    "node-tap.log": (["fails top", "fails inside"], "# fail 2"),
    "node-spec.log": (["fails top", "fails inside"], "ℹ fail 2"),
    "go.log": (["TestMultipliesWrong", "TestTable/bad"], "FAIL\texample.com/calc\t0.006s"),
    "go-verbose.log": (["TestMultipliesWrong", "TestTable/bad"], "FAIL\texample.com/calc\t0.013s"),
    "cargo.log": (["tests::nested::fails_deep", "tests::multiplies_wrong"],
                  "test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.57s"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_runners_captured_output_names_its_failing_tests(name: str) -> None:
    text = (FIXTURES / name).read_text()
    assert text.startswith("# captured on ")  # how it was made, said in the file
    names, summary = EXPECTED[name]
    assert failures.failing_tests(text) == names
    assert failures.summary_line(text).strip() == summary


def test_a_passing_run_names_nothing() -> None:
    for text in ("3 passed in 0.1s\n", "test result: ok. 3 passed; 0 failed\n", "ok  \texample.com/calc\t0.01s\n",
                 "Tests:       4 passed, 4 total\n", "  4 passing (5ms)\n"):
        assert failures.failing_tests(text) == [], text


def _live(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                          env={**os.environ, **(env or {})})
    return done.stdout.decode("utf-8", "replace")


def test_pytest_live(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2\n")
    text = _live([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE"], tmp_path)
    assert failures.failing_tests(text) == ["test_a.py::test_bad"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_test_runner_live(tmp_path: Path) -> None:
    (tmp_path / "a.test.js").write_text((FIXTURES / "node.test.js.txt").read_text())
    for argv in (["node", "--test", "a.test.js"], ["node", "--test", "--test-reporter=spec", "a.test.js"]):
        assert failures.failing_tests(_live(argv, tmp_path)) == ["fails top", "fails inside"], argv


@pytest.mark.slow  # cargo compiles a crate
@pytest.mark.skipif(shutil.which("cargo") is None, reason="cargo is not installed")
def test_cargo_test_live(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n')
    (tmp_path / "src" / "lib.rs").write_text((FIXTURES / "lib.rs.txt").read_text())
    # rustup's toolchains are found from the real home, which the suite seals away.
    cargo_home = Path(shutil.which("cargo") or "").resolve().parent.parent
    homes = {"CARGO_HOME": str(cargo_home), "RUSTUP_HOME": str(cargo_home.parent / ".rustup")}
    text = _live(["cargo", "test", "--offline", "-q"], tmp_path, homes if (cargo_home.parent / ".rustup").is_dir()
                 else None)
    assert sorted(failures.failing_tests(text)) == ["tests::multiplies_wrong", "tests::nested::fails_deep"], text


@pytest.mark.slow  # go builds a test binary
@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_go_test_live(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module example.com/calc\n\ngo 1.19\n")
    (tmp_path / "calc.go").write_text("package calc\n\nfunc Add(a, b int) int { return a + b }\n")
    (tmp_path / "calc_test.go").write_text((FIXTURES / "calc_test.go.txt").read_text())
    text = _live(["go", "test", "./..."], tmp_path, {"GOPROXY": "off", "GOFLAGS": "-mod=mod"})
    assert failures.failing_tests(text) == ["TestMultipliesWrong", "TestTable/bad"], text


@pytest.mark.slow  # npm install from the registry
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_jest_vitest_mocha_live(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(json.dumps({"name": "capture", "version": "1.0.0", "private": True}))
    got = subprocess.run(["npm", "install", "-q", "--no-audit", "--no-fund", "jest@30", "vitest@4", "mocha@12"],
                         cwd=tmp_path, capture_output=True, timeout=600)
    if got.returncode != 0:
        pytest.skip(f"the npm registry is not reachable: {got.stderr.decode()[-300:]}")
    (tmp_path / "t").mkdir()
    tests = (FIXTURES / "calc.test.js.txt").read_text()
    (tmp_path / "t" / "calc.test.js").write_text(tests)
    (tmp_path / "t" / "calc.vitest.test.mjs").write_text(textwrap.dedent("""\
        import { describe, it } from "vitest";
        import assert from "node:assert";
    """) + tests.split("\n", 1)[1])
    bin_ = tmp_path / "node_modules" / ".bin"
    assert failures.failing_tests(_live([str(bin_ / "jest"), "--testMatch", "**/t/calc.test.js"], tmp_path)) == \
        EXPECTED["jest.log"][0]
    assert failures.failing_tests(_live([str(bin_ / "vitest"), "run", "t/calc.vitest.test.mjs"], tmp_path)) == \
        EXPECTED["vitest.log"][0]
    assert failures.failing_tests(_live([str(bin_ / "mocha"), "t/calc.test.js"], tmp_path)) == EXPECTED["mocha.log"][0]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_show_and_the_report_name_a_node_gates_failing_tests(tmp_path: Path) -> None:
    """A failing node --test gate: show and the report name its failing
    tests, not the counts its log ends with."""
    from conftest import GP, make_repo

    repo = make_repo(tmp_path / "repo", {"spec/a.test.js": (FIXTURES / "node.test.js.txt").read_text()},
                     config="gates:\n  - name: tests\n    run: [node, --test, spec/a.test.js]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo change > notes.txt")
    assert "FAIL tests" in gp("check", "t", code=1).stdout
    shown = gp("show", "t", "1").stdout
    assert "failed: fails top" in shown and "failed: fails inside" in shown
    assert gp.json("show", "t", "1")["gates"][0]["failing"] == ["fails top", "fails inside"]
    page = tmp_path / "r.html"
    gp("report", "t", "--html", str(page))
    html = page.read_text()
    assert "FAILED fails top" in html and "FAILED fails inside" in html and "# fail 2" in html
