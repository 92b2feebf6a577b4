"""What the project is, for ``init``: its files and the test runners they name
(pytest, npm/pnpm/yarn, go, cargo, make), each a ``Runner`` with its gate,
setup and protected paths."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path


from gitflow_parallel import pysetup
from gitflow_parallel.git import protected
from gitflow_parallel.git.hooks import HOOK_NAMES
from gitflow_parallel.state.project import Project

# Folders no project file of interest lives in (environments, builds, caches).
_SKIP = {".git", ".venv", "venv", "env", "node_modules", "target", "build", "dist", "__pycache__", ".tox", ".nox"}
TEST_DIR_NAMES = ("tests", "test", "testing")
NODE_TEST_DIRS = ("test", "tests", "__tests__", "spec")
_MAX_NAMED = 8  # more test folders than this go to protect: as globs, not onto the command line


@dataclass
class Runner:
    """One ecosystem init recognised, and the gate it would write."""

    ecosystem: str                 # python, node, go, cargo, make
    found_in: list[str]            # the files that told
    tool: str | None = None        # pytest, npm test, ...; None: no test runner found
    run: list[str] | None = None   # the gate's command
    setup: pysetup.SetupSpec | None = None
    protect: list[str] = field(default_factory=list)   # globs beyond what the run names
    tests: list[str] = field(default_factory=list)     # test folders the run names
    notes: list[str] = field(default_factory=list)     # comment lines for the file


# -- what the project is ---------------------------------------------------------------
def project_files(project: Project, top: Path) -> list[str]:
    proc = project.repo.run_git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=top,
                                check=False)
    paths = [p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    return sorted({p for p in paths if not set(p.split("/")[:-1]) & _SKIP})


def is_python_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _dirs_with_files(files: list[str]) -> set[str]:
    return {"/".join(p.split("/")[:k]) for p in files for k in range(1, p.count("/") + 1)}


def _pytest_config(top: Path, files: set[str], pyproject: dict[str, object]) -> tuple[str | None, list[str]]:
    """Where pytest is configured, and its ``testpaths``."""
    tool = pyproject.get("tool", {})
    pytest = tool.get("pytest", {}) if isinstance(tool, dict) else {}
    section = pytest.get("ini_options") if isinstance(pytest, dict) else None
    if isinstance(section, dict):
        paths = section.get("testpaths") or []
        return "pyproject.toml", [paths] if isinstance(paths, str) else [str(p) for p in paths]
    for rel, name in (("pytest.ini", "pytest"), ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        if rel in files:
            parser = pysetup.read_ini(top, rel)
            if parser.has_section(name) or (rel == "pytest.ini" and parser.has_section("tool:pytest")):
                sect = name if parser.has_section(name) else "tool:pytest"
                return rel, parser.get(sect, "testpaths", fallback="").split()
    return None, []


def _test_folders(tests: list[str], configured: list[str], dirs: set[str]) -> tuple[list[str], list[str]]:
    """The folders the gate names and the globs left for ``protect:``."""
    named = [p.strip("/") for p in configured if p.strip("/") in dirs]
    if not named:
        named = [d for d in TEST_DIR_NAMES if d in dirs][:1]
    if not named:  # tests beside the code: the nearest folder named like tests holding each
        for path in tests:
            parts = path.split("/")[:-1]
            k = next((i for i, part in enumerate(parts) if part in TEST_DIR_NAMES), None)
            if k is not None and "/".join(parts[:k + 1]) not in named:
                named.append("/".join(parts[:k + 1]))
        if len(named) > _MAX_NAMED:
            named = []
    covered = [t for t in tests if protected.matches(t, named)]
    loose = [t for t in tests if t not in covered]
    globs = sorted({"**/test_*.py" if t.rsplit("/", 1)[-1].startswith("test_") else "**/*_test.py" for t in loose})
    return named, globs


def _python(top: Path, files: list[str]) -> Runner | None:
    fileset = set(files)
    pyproject = pysetup.read_toml(top, "pyproject.toml") if "pyproject.toml" in fileset else {}
    packaging = [f for f in pysetup.PACKAGING if f in fileset]
    where, testpaths = _pytest_config(top, fileset, pyproject)
    tests = [f for f in files if is_python_test(f)]
    if not tests and not (where and packaging):
        return Runner("python", packaging) if packaging else None
    named, globs = _test_folders(tests, testpaths, _dirs_with_files(files))
    runner = Runner("python", packaging + ([where] if where and where not in packaging else []) +
                    [f"{d}/" for d in named], tool="pytest", tests=named, protect=globs)
    runner.run = [".venv/bin/python", "-m", "pytest", "-q", *named]
    if "uv.lock" in fileset and "pyproject.toml" in fileset and shutil.which("uv") is None:
        runner.notes.append("uv.lock is here but uv is not on PATH: setup installs with pip instead")
    elif "uv.lock" in fileset and "pyproject.toml" in fileset:
        runner.setup = pysetup.uv_setup(top, pyproject)
        runner.notes.append("setup runs uv sync from uv.lock (uv must be on PATH)" if runner.setup else
                            "uv.lock does not lock pytest: setup installs with pip instead")
    runner.setup = runner.setup or pysetup.pip_setup(top, fileset, pyproject, runner.notes)
    runner.setup["stores"] = ["uv" if "uv" in " ".join(runner.setup["run"]).split() else "pip"]
    if "tox.ini" in fileset or "noxfile.py" in fileset:
        tool = "tox" if "tox.ini" in fileset else "nox"
        runner.notes.append(f"{tool} is configured: `run: [{tool}]` would test through it (slower: it builds its "
                            f"own environments, in .{tool}: add that to setup.keep); the gate runs pytest directly")
    if "poetry.lock" in fileset:
        runner.notes.append("poetry.lock is not used: setup installs with pip from pyproject.toml")
    if isinstance(pyproject.get("dependency-groups"), dict) and not pysetup.test_group(pyproject):
        runner.notes.append(f"no dependency group is named {' or '.join(pysetup.TEST_EXTRAS)}: "
                            "add `--group NAME` to setup")
    if not named:
        runner.notes.append("no test folder to name: the protect globs below cover the test files")
    return runner


def _node(top: Path, files: list[str]) -> Runner | None:
    if "package.json" not in files:
        return None
    try:
        doc = json.loads(pysetup.read_text(top, "package.json") or "")
    except json.JSONDecodeError:
        return Runner("node", ["package.json"], notes=["package.json does not parse"])
    scripts = doc.get("scripts") if isinstance(doc, dict) else None
    test = scripts.get("test") if isinstance(scripts, dict) else None
    if not isinstance(test, str) or "no test specified" in test:
        return Runner("node", ["package.json"], notes=["package.json has no test script"])
    fileset = set(files)
    locks = {"pnpm-lock.yaml": "pnpm", "yarn.lock": "yarn", "package-lock.json": "npm", "npm-shrinkwrap.json": "npm"}
    manager = str(doc.get("packageManager") or "").split("@")[0]
    lock = next((f for f in locks if f in fileset and manager in ("", locks[f])), None)
    tool = manager if manager in ("npm", "pnpm", "yarn") else locks.get(lock or "", "npm")
    # --prefer-offline: what the user's store holds (read through setup.stores) is not asked for again
    install = {"pnpm": ["pnpm", "install", "--frozen-lockfile"], "yarn": ["yarn", "install", "--frozen-lockfile"],
               "npm": ["npm", "ci"] if lock else ["npm", "install"]}[tool] + ["--prefer-offline"]
    dirs = _dirs_with_files(files)
    protect = [f"{d}/**" for d in NODE_TEST_DIRS if d in dirs]
    for glob in ("**/__tests__/**", "**/*.test.*", "**/*.spec.*"):
        if any(protected.matches(f, [glob]) and not protected.matches(f, protect) for f in files):
            protect.append(glob)
    settings = [f for f in (".npmrc", ".yarnrc", "pnpm-workspace.yaml") if f in fileset]  # they change the install
    setup: pysetup.SetupSpec = {"run": install, "cache_key": ["package.json", *([lock] if lock else []), *settings],
             "keep": ["node_modules"], "path": ["node_modules/.bin"], "stores": [tool]}
    notes = [f"scripts.test is `{test}` (protected by default, as the test section of package.json)"]
    if tool == "yarn":
        notes.append("yarn 2 or newer: use `yarn install --immutable` in setup")
    notes += _simple_git_hooks(doc)
    return Runner("node", ["package.json", *([lock] if lock else [])], tool=f"{tool} test", run=[tool, "test"],
                  setup=setup, protect=protect, notes=notes)


def _simple_git_hooks(doc: dict[str, object]) -> list[str]:
    """simple-git-hooks, configured in package.json, deletes at each install
    every hook its config does not name: git-parallel's too, unless kept."""
    config = doc.get("simple-git-hooks")
    if not isinstance(config, dict):
        return []
    keep = config.get("preserveUnused")
    if keep is True or (isinstance(keep, list) and set(HOOK_NAMES) <= set(keep)):
        return []
    names = ", ".join(f'"{n}"' for n in HOOK_NAMES)
    return [f'simple-git-hooks deletes hooks its config does not name at every install: add "preserveUnused": '
            f'[{names}] to it before `git parallel hooks install`']


def _go(top: Path, files: list[str]) -> Runner | None:
    if "go.mod" not in files:
        return None
    keys: list[str] = [f for f in ("go.mod", "go.sum") if f in files]
    protect = (["**/*_test.go"] if any(f.endswith("_test.go") for f in files) else []) + \
        (["**/testdata/**"] if any("testdata" in f.split("/")[:-1] for f in files) else [])
    return Runner("go", ["go.mod"], tool="go test", run=["go", "test", "./..."], protect=protect,
                  setup={"run": ["go", "mod", "download"], "cache_key": keys, "stores": ["go"]})


def _cargo(top: Path, files: list[str]) -> Runner | None:
    if "Cargo.toml" not in files:
        return None
    keys: list[str] = [f for f in ("Cargo.toml", "Cargo.lock") if f in files]
    manifests = {f.rsplit("/", 1)[0] if "/" in f else "" for f in files if f.rsplit("/", 1)[-1] == "Cargo.toml"}
    protect = sorted(f"{m}/tests/**".lstrip("/") for m in manifests
                     if any(f.startswith(f"{m}/tests/".lstrip("/")) for f in files))
    return Runner("cargo", ["Cargo.toml"], tool="cargo test", run=["cargo", "test"], protect=protect,
                  setup={"run": ["cargo", "fetch"], "cache_key": keys, "stores": ["cargo"]},
                  notes=["#[cfg(test)] modules inside src/ are part of the code: they cannot be protected apart from it"])


def _make(top: Path, files: list[str]) -> Runner | None:
    makefile = next((f for f in ("GNUmakefile", "makefile", "Makefile") if f in files), None)
    if makefile is None or not re.search(r"^test\s*:(?!=)", pysetup.read_text(top, makefile) or "", re.M):
        return None
    dirs = _dirs_with_files(files)
    return Runner("make", [makefile], tool="make test", run=["make", "test"],
                  protect=[f"{d}/**" for d in TEST_DIR_NAMES if d in dirs],
                  notes=[f"no setup: `make test` runs with the tools on PATH; if {makefile} installs the project, "
                         "build it in setup instead, from the judged checkout"])


def detect(project: Project, top: Path) -> list[Runner]:
    """What init recognises in ``top``, in order of preference."""
    files = project_files(project, top)
    found = [r for r in (f(top, files) for f in (_python, _node, _go, _cargo, _make)) if r is not None]
    return sorted(found, key=lambda r: r.run is None)  # stable: the order above among runners
