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
