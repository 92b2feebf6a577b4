"""What a JavaScript gate reaches is protected: every package.json script
its command runs (through npm, pnpm, yarn, bun or npm-run-all, in ``&&``
and ``;`` chains, with ``pre``/``post`` scripts), the files those scripts
name, and the files the test runner's configuration names.

The check test runs the real ``npm test`` and node's own test runner in a
real repository; the rest reads real git trees through ``git/scratch``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pygit2
import pytest

from conftest import make_repo
from gitflow_parallel import harness
from gitflow_parallel.commands import check, pick, spawn
from gitflow_parallel.git import protected
from gitflow_parallel.state.project import Project
from test_judged_right import commit_in, packs, verdicts

SCRIPTS = {
    "test": "npm run test:add && npm run test:mul",
    "test:add": "node --test spec/add.test.js",
    "test:mul": "node --require ./spec/setup.js --test spec/mul.test.js",
}
CALC = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b;\n"
ADD_TEST = ("const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { add } = require('../calc');\ntest('add', () => assert.strictEqual(add(2, 3), 5));\n")
MUL_TEST = ADD_TEST.replace("add", "mul").replace("5)", "6)")
WRONG = CALC.replace("a * b", "a + b")


def test_reached_scripts_follow_every_way_a_script_runs_another() -> None:
    scripts = {
        "test": "pnpm run test:nodejs && pnpm run test:edge", "test:nodejs": "jest --env node",
        "test:edge": "jest --env edge-runtime; yarn lint", "lint": "eslint .", "pretest:edge": "node x.js",
        "posttest": "echo done", "build": "tsc", "ci": "run-s 'check:*' && run-p check:**",
        "check:a": "a", "check:b": "b", "check:a:deep": "c", "bun": "bun run build", "other": "echo",
    }
    assert harness.reached_scripts(scripts, ["test"]) == [
        "test", "posttest", "test:nodejs", "test:edge", "pretest:edge", "lint"]
    assert set(harness.reached_scripts(scripts, ["ci"])) == {"ci", "check:a", "check:b", "check:a:deep"}
    assert harness.reached_scripts(scripts, ["bun"]) == ["bun", "build"]
    # The gates' own commands: any runner, inside sh -c, past options and their values.
    assert harness.npm_scripts([["sh", "-c", "npm test && pnpm test:edge; bun run x"],
                                ["yarn", "--silent", "lint"], ["pnpm", "--filter", "pkg", "t2"], ["bun", "test"],
                                ["npx", "run-s", "a", "b:*"]]) == ["test", "test:edge", "x", "lint", "t2", "a"]


@pytest.mark.slow  # the default tier keeps near 150 s; CI runs this after it
def test_a_rewritten_reached_script_or_setup_file_is_judged_with_the_base(tmp_path: Path) -> None:
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed")
    package = {"name": "calc", "version": "1.0.0", "scripts": SCRIPTS}
    repo = make_repo(tmp_path / "repo", {
        "package.json": json.dumps(package, indent=2), "calc.js": CALC, "spec/add.test.js": ADD_TEST,
        "spec/mul.test.js": MUL_TEST, "spec/setup.js": "// loaded before the mul tests\n",
    }, config="gates:\n  - name: tests\n    run: [npm, test]\n")
    project = Project.open(repo)
    worktrees = {i["id"]: Path(i["worktree"]) for i in spawn.spawn(project, "t", 3)["instances"]}
    cheat = {**package, "scripts": {**SCRIPTS, "test:mul": "echo skipped"}}
    commit_in(worktrees["1"], {"calc.js": WRONG, "package.json": json.dumps(cheat, indent=2)})
    commit_in(worktrees["2"], {"calc.js": WRONG, "spec/setup.js": "process.exit(0);\n"})
    commit_in(worktrees["3"], {"calc.js": CALC.replace("a * b", "b * a")})
    # (The gate's own words name no file: `test` is no folder here, so only
    # what the scripts reach protects spec/setup.js.)
    assert verdicts(check.check(project, "t")) == {"1": "fail", "2": "fail", "3": "pass"}
    by_id = packs(project)
    assert [c["path"] for c in by_id["1"]["protected_detail"]] == ["package.json"]
    assert by_id["1"]["protected_detail"][0]["harness"]
    assert [c["path"] for c in by_id["2"]["protected_detail"]] == ["spec/setup.js"]
    assert by_id["3"]["protected_detail"] == []
    assert pick.pick(project, "t")["picks"][0]["winner"]["id"] == "3"


def _tree(tmp_path: Path, files: dict[str, str], gate: str) -> tuple[pygit2.Tree, dict]:
    repo = make_repo(tmp_path / "repo", files)
    config = {"gates": [{"name": "tests", "run": gate.split()}]}
    return pygit2.Repository(str(repo)).revparse_single("HEAD").peel(pygit2.Tree), config


def test_runner_configs_protect_the_setup_files_and_tsconfig_they_use(tmp_path: Path) -> None:
    jest = ("module.exports = {\n  preset: 'ts-jest',\n  setupFilesAfterEach: ['<rootDir>/jest/setup.ts'],\n"
            "  globalSetup: './jest/global.ts',\n};\n")
    tree, config = _tree(tmp_path, {
        "package.json": json.dumps({"scripts": {"test": "pnpm test:unit", "test:unit": "jest -c jest.config.js"}}),
        "jest.config.js": jest, "jest/setup.ts": "", "jest/global.ts": "", "jest/other.ts": "",
        "tsconfig.json": "{}", "web/.mocharc.yml": "require: ./hooks.js\nspec: ['*.spec.js']\n",
        "web/hooks.js": "", "src/index.ts": "",
    }, "pnpm test")
    patterns = protected.protected_patterns(config, tree)
    for path in ("jest.config.js", "jest/setup.ts", "jest/global.ts", "tsconfig.json", "web/.mocharc.yml",
                 "web/hooks.js"):
        assert protected.matches(path, patterns), path
    for path in ("jest/other.ts", "src/index.ts"):
        assert not protected.matches(path, patterns), path
    # Without ts-jest the tsconfig is the product's own.
    assert not protected.matches("tsconfig.json", protected.protected_patterns(
        config, _tree(tmp_path / "b", {"jest.config.js": "module.exports = {};\n", "tsconfig.json": "{}"},
                      "npx jest")[0]))
    # protect_defaults: false leaves the runner's configuration to the config's own rules.
    assert not protected.matches("jest/setup.ts", protected.protected_patterns({**config, "protect_defaults": False},
                                                                           tree))
