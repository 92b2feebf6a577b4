"""``git parallel init``: a configuration written from what the project is,
the notes settings, and ``init --check``: what a configuration protects.

init reads the worktree's files (``git ls-files --cached --others
--exclude-standard``) and recognises, in this order, pytest, ``npm``/``pnpm``/
``yarn test``, ``go test``, ``cargo test`` and ``make test``; the first is the
gate, the others are comments.  Its ``setup:`` builds the environment in the
judged checkout from the attempt's own files (a ``.venv``, ``node_modules``):
the ``python`` on PATH may import the main worktree's code through an
editable install, and judge that instead of the attempt.  Where the runner
takes a folder (``pytest tests``) the gate names the test folder, which
protects it (``git/scratch``); elsewhere the folders go to ``protect:``.

``--check`` explains a configuration: per gate what is protected and what
is not, and which fence keeps gates from reading the other checkouts.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import yaml

from gitflow_parallel import config as C
from gitflow_parallel import harness, pysetup
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write
from gitflow_parallel.git import scratch
from gitflow_parallel.state.project import Project

# Folders no project file of interest lives in (environments, builds, caches).
_SKIP = {".git", ".venv", "venv", "env", "node_modules", "target", "build", "dist", "__pycache__", ".tox", ".nox"}
_TEST_DIR_NAMES = ("tests", "test", "testing")
_NODE_TEST_DIRS = ("test", "tests", "__tests__", "spec")
_MAX_NAMED = 8  # more test folders than this go to protect: as globs, not onto the command line


@dataclass
class Runner:
    """One ecosystem init recognised, and the gate it would write."""

    ecosystem: str                 # python, node, go, cargo, make
    found_in: list[str]            # the files that told
    tool: str | None = None        # pytest, npm test, ...; None: no test runner found
    run: list[str] | None = None   # the gate's command
    setup: dict[str, Any] | None = None
    protect: list[str] = field(default_factory=list)   # globs beyond what the run names
    tests: list[str] = field(default_factory=list)     # test folders the run names
    notes: list[str] = field(default_factory=list)     # comment lines for the file


# -- what the project is ---------------------------------------------------------------
def project_files(project: Project, top: Path) -> list[str]:
    proc = project.repo.run_git(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=top,
                                check=False)
    paths = [p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
    return sorted({p for p in paths if not set(p.split("/")[:-1]) & _SKIP})


def _is_python_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _dirs_with_files(files: list[str]) -> set[str]:
    return {"/".join(p.split("/")[:k]) for p in files for k in range(1, p.count("/") + 1)}


def _pytest_config(top: Path, files: set[str], pyproject: dict[str, Any]) -> tuple[str | None, list[str]]:
    """Where pytest is configured, and its ``testpaths``."""
    section = pyproject.get("tool", {}).get("pytest", {}).get("ini_options")
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
        named = [d for d in _TEST_DIR_NAMES if d in dirs][:1]
    if not named:  # tests beside the code: the nearest folder named like tests holding each
        for path in tests:
            parts = path.split("/")[:-1]
            k = next((i for i, part in enumerate(parts) if part in _TEST_DIR_NAMES), None)
            if k is not None and "/".join(parts[:k + 1]) not in named:
                named.append("/".join(parts[:k + 1]))
        if len(named) > _MAX_NAMED:
            named = []
    covered = [t for t in tests if scratch.matches(t, named)]
    loose = [t for t in tests if t not in covered]
    globs = sorted({"**/test_*.py" if t.rsplit("/", 1)[-1].startswith("test_") else "**/*_test.py" for t in loose})
    return named, globs


def _python(top: Path, files: list[str]) -> Runner | None:
    fileset = set(files)
    pyproject = pysetup.read_toml(top, "pyproject.toml") if "pyproject.toml" in fileset else {}
    packaging = [f for f in pysetup.PACKAGING if f in fileset]
    where, testpaths = _pytest_config(top, fileset, pyproject)
    tests = [f for f in files if _is_python_test(f)]
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
    protect = [f"{d}/**" for d in _NODE_TEST_DIRS if d in dirs]
    for glob in ("**/__tests__/**", "**/*.test.*", "**/*.spec.*"):
        if any(scratch.matches(f, [glob]) and not scratch.matches(f, protect) for f in files):
            protect.append(glob)
    settings = [f for f in (".npmrc", ".yarnrc", "pnpm-workspace.yaml") if f in fileset]  # they change the install
    setup = {"run": install, "cache_key": ["package.json", *([lock] if lock else []), *settings],
             "keep": ["node_modules"], "path": ["node_modules/.bin"], "stores": [tool]}
    notes = [f"scripts.test is `{test}` (protected by default, as the test section of package.json)"]
    if tool == "yarn":
        notes.append("yarn 2 or newer: use `yarn install --immutable` in setup")
    return Runner("node", ["package.json", *([lock] if lock else [])], tool=f"{tool} test", run=[tool, "test"],
                  setup=setup, protect=protect, notes=notes)


def _go(top: Path, files: list[str]) -> Runner | None:
    if "go.mod" not in files:
        return None
    keys = [f for f in ("go.mod", "go.sum") if f in files]
    protect = (["**/*_test.go"] if any(f.endswith("_test.go") for f in files) else []) + \
        (["**/testdata/**"] if any("testdata" in f.split("/")[:-1] for f in files) else [])
    return Runner("go", ["go.mod"], tool="go test", run=["go", "test", "./..."], protect=protect,
                  setup={"run": ["go", "mod", "download"], "cache_key": keys, "stores": ["go"]})


def _cargo(top: Path, files: list[str]) -> Runner | None:
    if "Cargo.toml" not in files:
        return None
    keys = [f for f in ("Cargo.toml", "Cargo.lock") if f in files]
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
                  protect=[f"{d}/**" for d in _TEST_DIR_NAMES if d in dirs],
                  notes=[f"no setup: `make test` runs with the tools on PATH; if {makefile} installs the project, "
                         "build it in setup instead, from the judged checkout"])


def detect(project: Project, top: Path) -> list[Runner]:
    """What init recognises in ``top``, in order of preference."""
    files = project_files(project, top)
    found = [r for r in (f(top, files) for f in (_python, _node, _go, _cargo, _make)) if r is not None]
    return sorted(found, key=lambda r: r.run is None)  # stable: the order above among runners


# -- the file init writes --------------------------------------------------------------
def _scalar(word: str) -> str:
    """``word`` as YAML inside a flow list: plain where it reads back the same, else quoted."""
    if re.fullmatch(r"[^\s\"'#,\[\]{}&*!|>%@`]+", word):
        try:
            if yaml.safe_load(f"[{word}]") == [word]:
                return word
        except yaml.YAMLError:
            pass
    return json.dumps(word, ensure_ascii=False)


def _flow(words: list[str]) -> str:
    return "[" + ", ".join(_scalar(w) for w in words) + "]"


def _comment(text: str, prefix: str = "# ", hang: str = "") -> list[str]:
    return textwrap.wrap(text, 78, initial_indent=prefix, subsequent_indent=prefix + hang) or [prefix.rstrip()]


def _harness_summary() -> str:
    names = ", ".join(p.removeprefix("**/") for p in harness.HARNESS_PATTERNS)
    return f"at any depth: {names}; the test sections of {', '.join(harness.MIXED_FILES)}"


def _setup_block(setup: dict[str, Any]) -> list[str]:
    lines = ["setup:", f"  run: {_flow(setup['run'])}"]
    for key in ("cache_key", "keep", "path", "stores"):
        if setup.get(key):
            lines.append(f"  {key}: {_flow(setup[key])}")
    return lines


def _gate_block(name: str, run: list[str], prefix: str = "") -> list[str]:
    return [f"{prefix}  - name: {name}", f"{prefix}    run: {_flow(run)}"]


def render_config(runners: list[Runner]) -> str:
    """The ``.gitparallel.yaml`` init writes for what it found."""
    main = next((r for r in runners if r.run), None)
    notes = [line for r in runners for n in r.notes for line in _comment(f"note ({r.ecosystem}): {n}", hang="  ")]
    if main is None:
        seen = ", ".join(f"{r.ecosystem} ({', '.join(r.found_in)})" for r in runners) or "nothing"
        head = _comment("Written by `git parallel init`, which found no test runner here (it looks for pytest, "
                        f"npm/pnpm/yarn test, go test, cargo test and make test; it saw {seen}): write the "
                        "setup and the gates below yourself, naming the test folder in the gate's run.")
        return "\n".join(head + notes) + "\n\n" + C.TEMPLATE
    assert main.run is not None and main.tool is not None
    head = _comment(f"Written by `git parallel init`, which found {main.tool} ({', '.join(main.found_in)}). "
                    "Review it, then commit it: spawn reads this file from the base commit.")
    out = head + notes + ["", C.TEMPLATE_SETTINGS.rstrip("\n"), ""]
    if main.setup:
        out += _comment("The environment the gates run in, built in the judged checkout from the attempt's own "
                        "files: a gate using the python on PATH could import the main worktree's code through an "
                        "editable install and judge that instead.  It is kept while the cache_key files are "
                        "unchanged; stores are your package stores, which setup and gates read through a "
                        "throwaway layer of their own: what they write there is never kept.")
        out += _setup_block(main.setup) + [""]
    out += _comment("Protected: the judged checkout has the base commit's copy of each, and an attempt that "
                    "changes one is kept out of an automatic pick:")
    out += [f"#   {C.CONFIG_FILE}"] + [f"#   {t}/  (named by the gate's run)" for t in main.tests]
    out += [f"#   {p}  (protect: below)" for p in main.protect]
    out += _comment(f"harness files {_harness_summary()} (protect_defaults)", "#   ", "  ")
    out += _comment("Not protected: anything else the tests read (fixtures, data outside those folders): add "
                    "it to protect.")
    if main.protect:
        out.append(f"protect: {_flow(main.protect)}")
    out += ["", "gates:"] + _gate_block("tests", main.run)
    others = [r for r in runners if r.run and r is not main]
    if others:
        out += ["", "# Also found (add as gates, with what they need in setup, to judge with them too):"]
        for r in others:
            assert r.run is not None and r.tool is not None
            out += _gate_block(r.tool.replace(" ", "-"), r.run, "#")
    return "\n".join(out) + "\n"


def protected_summary(runner: Runner | None) -> list[str]:
    """What the written gate protects, as the file's comment lists it."""
    if runner is None:
        return [C.CONFIG_FILE, *harness.HARNESS_PATTERNS]
    return [C.CONFIG_FILE, *runner.tests, *runner.protect, *harness.HARNESS_PATTERNS]


# -- init ----------------------------------------------------------------------
def init(project: Project, force: bool = False, display: bool = False, remote: str | None = None) -> dict[str, Any]:
    """Write a ``.gitparallel.yaml`` for the project's test runner (the
    commented template when none is found) and set notes.rewriteRef (and,
    with ``display``, notes.displayRef: plain ``git log`` then prints every
    note); with ``remote``, add fetch refspecs for the notes and refs/parallel/."""
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None
    if remote is not None:
        from gitflow_parallel.git import share

        share.check_remote(project.repo, remote)  # before anything is written
    path = Path(top) / C.CONFIG_FILE
    runners = detect(project, Path(top))
    main = next((r for r in runners if r.run), None)
    wrote = False
    if not path.exists() or force:
        text = render_config(runners)
        C.parse(text)  # what init writes validates, or nothing is written
        atomic_write(path, text)
        wrote = True
    notes_ref = C.DEFAULTS["notes_ref"]
    if path.exists():
        try:
            notes_ref = C.parse(path.read_bytes())["notes_ref"]
        except ParallelError:
            pass
    cfg = project.repo.main.config
    set_keys = {}
    for key in ("notes.rewriteRef", "notes.displayRef") if display else ("notes.rewriteRef",):
        values = list(cfg.get_multivar(key)) if key in cfg else []
        if notes_ref not in values:
            cfg.set_multivar(key, "^$", notes_ref)  # add without replacing others
        set_keys[key] = notes_ref
    refspecs = None
    if remote is not None:
        refspecs = share.configure_remote(project, remote, [notes_ref])
    return {"config": str(path), "wrote": wrote, "git_config": set_keys, "remote": remote, "refspecs": refspecs,
            "detected": [asdict(r) for r in runners], "gate": main.run if main else None,
            "setup": main.setup if main else None, "protected": protected_summary(main)}


# -- init --check ------------------------------------------------------------------
_PROBE = ("import json, site, sys; "
          "print(json.dumps([sys.path, site.getsitepackages() + [site.getusersitepackages()]]))")


def landlock_abi() -> tuple[int | None, str]:
    """The kernel's Landlock ABI version, asked with
    ``landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)``
    (None when unavailable, and why)."""
    if sys.platform != "linux":
        return None, f"Landlock is Linux's ({sys.platform} has none)"
    if platform.machine() not in ("x86_64", "aarch64", "arm64"):
        return None, f"the syscall number is not known here on {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi >= 0:
        return int(abi), f"Landlock ABI {abi}"
    err = ctypes.get_errno()
    why = {errno.ENOSYS: "this kernel has no Landlock (Linux 5.13 or newer, built with it)",
           errno.EOPNOTSUPP: "Landlock is built in but not enabled (the lsm= boot parameter)"}
    return None, why.get(err, f"the kernel refused the Landlock query ({os.strerror(err)})")


def fence() -> dict[str, Any]:
    from gitflow_parallel.proc import namespace

    abi, why = landlock_abi()
    missing = namespace.unavailable()
    if missing is None:
        return {"landlock_abi": abi or None, "holds": "namespace",
                "why": "bubblewrap runs here: every agent, gate, setup, score and probe gets namespaces of its own "
                       "(read-only /, its own PIDs, gates without network), judged checkouts are overlaid, and "
                       "gates cannot see the main worktree or the agents' worktrees, so an environment pointing "
                       "there fails loudly"}
    if abi:
        return {"landlock_abi": abi, "holds": "landlock",
                "why": f"no namespace layer ({missing}); {why}: gates, setup, score and judge commands cannot read "
                       "the main worktree or the "
                       "agents' worktrees, so an environment pointing there fails loudly"}
    return {"landlock_abi": None, "holds": "outside-checkout check",
            "why": f"no Landlock ({why}): before the gates, the environment's import paths are checked instead, "
                   "and a path outside the judged checkout is refused (PARALLEL_GATE_OUTSIDE_CHECKOUT)"}


def _head_tree(repo: pygit2.Repository) -> pygit2.Tree:
    if repo.head_is_unborn:
        return repo[repo.TreeBuilder().write()].peel(pygit2.Tree)
    return repo.head.peel(pygit2.Commit).tree


def _tree_paths(tree: pygit2.Tree) -> list[str]:
    index = pygit2.Index()
    index.read_tree(tree)
    return [entry.path for entry in index]


def _is_test(path: str) -> bool:
    """A file of a test suite, as the runners init knows find them."""
    name, parts = path.rsplit("/", 1)[-1], path.split("/")[:-1]
    return (_is_python_test(path) or name.endswith("_test.go") or bool(re.search(r"\.(test|spec)\.[^.]+$", name))
            or any(p in _TEST_DIR_NAMES + _NODE_TEST_DIRS for p in parts))


def _python_of(exe: str) -> str | None:
    """The Python interpreter a gate's command starts, if it starts one."""
    found = shutil.which(exe)
    if found is None:
        return None
    if re.fullmatch(r"python[0-9.]*", Path(found).name):
        return found
    try:
        with open(found, "rb") as fh:
            line = fh.readline(256).decode("utf-8", "replace")
    except OSError:
        return None
    words = line[2:].split() if line.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = [shutil.which(words[1]) or words[1]]
    return words[0] if words and "python" in Path(words[0]).name else None


def _imports_from(python: str, roots: list[Path], env: dict[str, str]) -> list[str]:
    """Where ``python`` would import code from inside ``roots`` (the main
    worktree and this one): ``sys.path`` entries, and ``.pth`` files or
    editable finders naming them."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], cwd="/", capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})
        paths, sites = json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return []
    found = [f"sys.path has {p}" for p in paths if p and any(Path(p).is_relative_to(r) for r in roots)]
    for site in sites:
        folder = Path(site)
        for hook in (sorted(folder.glob("*.pth")) + sorted(folder.glob("__editable__*.py"))) if folder.is_dir() else []:
            text = pysetup.read_text(hook.parent, hook.name) or ""
            found += [f"{hook} points at {r}" for r in roots if str(r) in text]
    return sorted(set(found))


def _environment(gate: dict[str, Any], tree: pygit2.Tree, roots: list[Path]) -> list[str]:
    """What a gate that runs without setup would really test."""
    out = ["it runs without setup, with the tools on PATH: the environment is not built from the attempt"]
    exe = gate["run"][0]
    if "/" in exe and not exe.startswith("/"):
        rel = os.path.normpath(exe)
        if rel not in _tree_paths(tree):
            return out + [f"{exe} is not in the judged checkout (it has only the commit's files): build it in setup"]
        return out
    python = _python_of(exe)
    for hit in _imports_from(python, roots, gate["env"]) if python else []:
        out.append(f"{python}: {hit}: the gate would import that worktree's code, not the attempt's; "
                   "build the environment in setup")
    return out


def _explain_gate(cfg: dict[str, Any], gate: dict[str, Any], tree: pygit2.Tree, tests: list[str],
                  roots: list[Path]) -> dict[str, Any]:
    named = [p for p in scratch.protected_patterns({"gates": [gate], "protect_defaults": False}, tree)
             if p != C.CONFIG_FILE]
    warnings = []
    loose = [t for t in tests if not scratch.matches(t, list(cfg["protect"] or []))]  # protect keeps the rest
    if gate["mode"] == "enforced" and not any(scratch.matches(t, named) for t in tests) and (loose or not tests):
        warnings.append("its run names no test folder: it protects no test by itself (deleting a test file would "
                        "not be noticed unless protect covers it)")
    if gate["mode"] != "enforced":
        warnings.append(f"mode {gate['mode']}: it never blocks a pick")
    with_setup = bool(cfg["setup"]) and gate["setup"]
    if not with_setup:
        warnings += _environment(gate, tree, roots)
    if gate["hidden"] and not Path(os.path.expanduser(gate["hidden"])).is_dir():
        warnings.append(f"hidden: {gate['hidden']} is not a folder here")
    return {"name": gate["name"], "run": gate["run"], "mode": gate["mode"], "setup": with_setup,
            "names": named, "hidden": gate["hidden"], "warnings": warnings}


def _unread_stores(cfg: dict[str, Any]) -> list[str]:
    """The package tools setup or a gate runs whose store ``setup.stores``
    does not name: in the sandbox that store is read-only, and pnpm (which
    registers each project there) and go (which writes its build cache to
    read it) fail; the others download again what you have."""
    setup = cfg["setup"] or {}
    words = {Path(w).name for argv in [setup.get("run") or [], *(g["run"] for g in cfg["gates"] if g["setup"])]
             for arg in argv for w in arg.replace("&&", " ").replace(";", " ").split()}
    return [f"setup and gates run {tool} without reading your {tool} store: add `stores: [{tool}]` to setup "
            "(read through a throwaway layer, never written)" if setup else
            f"a gate runs {tool} with no setup, so without your {tool} store: add a setup with `stores: [{tool}]`"
            for tool in C.STORE_NAMES if tool in words and tool not in (setup.get("stores") or [])]


def check(project: Project) -> dict[str, Any]:
    """Explain the worktree's ``.gitparallel.yaml``: what each gate protects,
    what it does not, and which fence will hold."""
    top = Path(project.repo.workdir or project.repo.main_workdir or ".")
    path = top / C.CONFIG_FILE
    data = path.read_bytes() if path.is_file() else None
    cfg = C.parse(data)
    repo = project.repo.pygit
    tree = _head_tree(repo)
    committed = repo.odb.read(tree[C.CONFIG_FILE].id)[1] if C.CONFIG_FILE in tree else None
    patterns = scratch.protected_patterns(cfg, tree)
    tests = [p for p in _tree_paths(tree) if _is_test(p)]
    roots = sorted({r for r in (project.repo.main_workdir, top) if r is not None})
    gates = [_explain_gate(cfg, g, tree, tests, roots) for g in cfg["gates"]]
    unprotected = [t for t in tests if not scratch.matches(t, patterns)]
    warnings = []
    if data is None:
        warnings.append(f"no {C.CONFIG_FILE} here: spawn would judge with no gate; `git parallel init` writes one")
    elif data != committed:
        warnings.append(f"{C.CONFIG_FILE} differs from HEAD's: spawn reads the committed one; commit it")
    if not cfg["gates"]:
        warnings.append("no gates: every attempt passes with nothing run")
    if not cfg["protect_defaults"]:
        warnings.append("protect_defaults: false: the harness files (conftest.py, pytest.ini, tox.ini, Makefile, "
                        "...) are not protected: an attempt can change how its own tests run")
    if unprotected:
        warnings.append(f"{len(unprotected)} test file(s) are not protected (e.g. {', '.join(unprotected[:3])}): "
                        "deleting or editing one would not be noticed; name their folder in a gate's run or "
                        "add it to protect")
    setup = cfg["setup"]
    if setup and setup["worktrees"]:
        warnings += [f"setup keeps {k}, which git does not ignore: an agent's leftovers commit would add it; "
                     "add it to .gitignore" for k in setup["keep"] if not repo.path_is_ignored(k)]
    warnings += _unread_stores(cfg)
    return {"config": str(path), "exists": data is not None, "committed": data is not None and data == committed,
            "setup": setup, "protect_defaults": cfg["protect_defaults"], "protected": patterns,
            "added_tests": cfg["added_tests"], "gates": gates, "tests": len(tests),
            "unprotected_tests": unprotected, "warnings": warnings, "fence": fence()}
