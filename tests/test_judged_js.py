"""A JavaScript project judged as its users run it: jest, from the npm
registry, finds its tests in a judged checkout (outside any `.git` folder,
which jest's haste map skips) and tells a right attempt from a wrong one."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import GP, git, make_repo

CALC = "exports.add = (a, b) => a + b;\n"
TEST = "const { add } = require('../calc');\ntest('adds', () => { expect(add(2, 3)).toBe(5); });\n"


@pytest.mark.slow  # npm install from the registry
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_jest_finds_its_tests_in_a_judged_checkout(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    got = subprocess.run(["npm", "install", "-q", "--no-audit", "--no-fund", "jest@30"], cwd=tools, capture_output=True)
    if got.returncode != 0:
        pytest.skip(f"the npm registry is not reachable: {got.stderr.decode()[-300:]}")
    jest = tools / "node_modules" / ".bin" / "jest"
    package = {"name": "calc", "version": "1.0.0", "scripts": {"test": "jest"}}
    repo = make_repo(tmp_path / "repo", {"calc.js": CALC, "__tests__/calc.test.js": TEST,
                                         "package.json": json.dumps(package) + "\n"},
                     config=f"gates:\n  - name: jest\n    run: ['{jest}', --ci]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", "echo '// tidy' >> calc.js")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", "echo 'exports.add = (a, b) => a - b;' > calc.js")
    checked = {i["id"]: i for i in gp.json("check", "t", code=None)["instances"]}
    assert checked["1"]["verdict"] == "pass" and checked["2"]["verdict"] == "fail"
    said = Path(checked["1"]["gates"][0]["log"]).read_text()
    assert "1 passed" in said and "No tests found" not in said, said
    assert "/.git/" not in said
    gp("pick", "t")
    gp("merge", "t")
    assert "// tidy" in git(repo, "show", "main:calc.js")


def _listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.lstat().st_size for p in sorted(folder.rglob("*"))}


@pytest.mark.slow  # pnpm install from the registry, into a store of the test's own
@pytest.mark.skipif(shutil.which("pnpm") is None, reason="pnpm is not installed")
def test_pnpm_installs_offline_from_the_users_store_without_writing_it(tmp_path: Path) -> None:
    from hostile import needs_namespace

    if needs_namespace.args[0]:
        pytest.skip(needs_namespace.kwargs["reason"])
    store = tmp_path / "pnpm-store"
    package = {"name": "calc", "version": "1.0.0", "scripts": {"test": "node test.js"},
               "dependencies": {"is-number": "7.0.0"}}
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "package.json").write_text(json.dumps(package) + "\n")
    got = subprocess.run(["pnpm", "install", "--store-dir", str(store)], cwd=seed, capture_output=True)
    if got.returncode != 0:
        pytest.skip(f"the npm registry is not reachable: {got.stderr.decode()[-300:]}")
    before = _listing(store)
    files = {"package.json": json.dumps(package) + "\n", "pnpm-lock.yaml": (seed / "pnpm-lock.yaml").read_text(),
             ".npmrc": f"store-dir={store}\n", "calc.js": CALC,
             "test.js": "const n = require('is-number'); const { add } = require('./calc');\n"
                        "if (!n(add(2, 3)) || add(2, 3) !== 5) process.exit(1);\n"}
    # --offline: every package must come from the store, which the sandbox shows read-only.
    config = (f"sandbox_network: off\nsetup:\n  run: [pnpm, install, --frozen-lockfile, --offline]\n"
              f"  cache_key: [package.json, pnpm-lock.yaml, .npmrc]\n  keep: [node_modules]\n"
              f"  stores: ['{store}']\ngates:\n  - name: tests\n    run: [pnpm, test]\n")
    repo = make_repo(tmp_path / "repo", files, config=config)
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", "echo '// tidy' >> calc.js")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", "echo 'exports.add = (a, b) => a - b;' > calc.js")
    first = {i["id"]: i for i in gp.json("check", "t", "--jobs", "1", code=None)["instances"]}
    assert first["1"]["verdict"] == "pass" and first["2"]["verdict"] == "fail", first
    pack = next((repo / ".git" / "parallel" / "evidence").glob("*/1.0.json"))
    built = json.loads(pack.read_text())["setup"]
    assert built["cached"] is False and built["stores"] == [str(store)]
    assert "downloaded 0" in Path(built["log"]).read_text()
    assert gp.json("check", "t", "--instance", "1", "--again")["instances"][0]["verdict"] == "pass"
    assert json.loads(pack.read_text())["setup"]["cached"] is True
    assert _listing(store) == before  # no project registered, nothing added, nothing rewritten


@pytest.mark.slow  # npm install from the registry, into a cache of the test's own
@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_ci_installs_offline_from_the_users_cache_without_writing_it(tmp_path: Path) -> None:
    from hostile import needs_namespace

    if needs_namespace.args[0]:
        pytest.skip(needs_namespace.kwargs["reason"])
    cache = tmp_path / "npm-cache"
    package = {"name": "calc", "version": "1.0.0", "scripts": {"test": "node test.js"},
               "dependencies": {"is-number": "7.0.0"}}
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "package.json").write_text(json.dumps(package) + "\n")
    got = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--cache", str(cache)], cwd=seed,
                         capture_output=True)
    if got.returncode != 0:
        pytest.skip(f"the npm registry is not reachable: {got.stderr.decode()[-300:]}")
    before = _listing(cache)
    files = {"package.json": json.dumps(package) + "\n", "package-lock.json": (seed / "package-lock.json").read_text(),
             ".npmrc": f"cache={cache}\n", "calc.js": CALC,
             "test.js": "const n = require('is-number'); const { add } = require('./calc');\n"
                        "if (!n(add(2, 3)) || add(2, 3) !== 5) process.exit(1);\n"}
    config = (f"sandbox_network: off\nsetup:\n  run: [npm, ci, --offline, --no-audit, --no-fund]\n"
              f"  cache_key: [package.json, package-lock.json, .npmrc]\n  keep: [node_modules]\n"
              f"  stores: ['{cache}']\ngates:\n  - name: tests\n    run: [npm, test]\n")
    repo = make_repo(tmp_path / "repo", files, config=config)
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", "echo '// tidy' >> calc.js")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", "echo 'exports.add = (a, b) => a - b;' > calc.js")
    first = {i["id"]: i for i in gp.json("check", "t", "--jobs", "1", code=None)["instances"]}
    assert first["1"]["verdict"] == "pass" and first["2"]["verdict"] == "fail", first
    assert _listing(cache) == before  # npm's index entries and logs went to the throwaway layer
