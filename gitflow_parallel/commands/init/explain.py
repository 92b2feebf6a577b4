"""``init --check``: per gate what a configuration protects and what it does
not, and which layers keep gates from what they must not see."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import pygit2

from gitflow_parallel import config as C
from gitflow_parallel import failures, pysetup
from gitflow_parallel.config_schema import STORE_NAMES
from gitflow_parallel.git import protected
from gitflow_parallel.state.project import Project
from gitflow_parallel.commands.init.detect import NODE_TEST_DIRS, TEST_DIR_NAMES, is_python_test
from gitflow_parallel.config_schema import FrozenConfig, GateConfig, SetupConfig


# -- init --check ------------------------------------------------------------------
_PROBE = ("import json, site, sys; "
          "print(json.dumps([sys.path, site.getsitepackages() + [site.getusersitepackages()]]))")


class Fence(TypedDict):
    """Which fence holds gates here, and why (its Landlock ABI, if any)."""
    landlock_abi: int | None
    holds: str
    why: str


class ExplainedGate(TypedDict):
    """What one gate runs and protects, and what ``init --check`` warns of."""
    name: str
    run: list[str]
    mode: str
    setup: bool
    names: list[str]
    hidden: str | None
    warnings: list[str]


class InitCheck(TypedDict):
    """``init --check``: the worktree's configuration explained."""
    config: str
    exists: bool
    committed: bool
    setup: SetupConfig | None
    protect_defaults: bool
    protected: list[str]
    added_tests: str
    gates: list[ExplainedGate]
    tests: int
    unprotected_tests: list[str]
    warnings: list[str]
    fence: Fence


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


def fence() -> Fence:
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
    return (is_python_test(path) or name.endswith("_test.go") or bool(re.search(r"\.(test|spec)\.[^.]+$", name))
            or any(p in TEST_DIR_NAMES + NODE_TEST_DIRS for p in parts))


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


def _environment(gate: GateConfig, tree: pygit2.Tree, roots: list[Path]) -> list[str]:
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


def _explain_gate(cfg: FrozenConfig, gate: GateConfig, tree: pygit2.Tree, tests: list[str],
                  roots: list[Path]) -> ExplainedGate:
    named = [p for p in protected.protected_patterns({"gates": [gate], "protect_defaults": False}, tree)
             if p != C.CONFIG_FILE]
    warnings = []
    loose = [t for t in tests if not protected.matches(t, list(cfg["protect"] or []))]  # protect keeps the rest
    if gate["mode"] == "enforced" and not any(protected.matches(t, named) for t in tests) and (loose or not tests):
        warnings.append("its run names no test folder: it protects no test by itself (deleting a test file would "
                        "not be noticed unless protect covers it)")
    if gate["mode"] != "enforced":
        warnings.append(f"mode {gate['mode']}: it never blocks a pick")
    with_setup = bool(cfg["setup"]) and gate["setup"]
    if not with_setup:
        warnings += _environment(gate, tree, roots)
    if gate["hidden"] and not Path(os.path.expanduser(gate["hidden"])).is_dir():
        warnings.append(f"hidden: {gate['hidden']} is not a folder here")
    warnings += _uncounted(gate)
    return {"name": gate["name"], "run": gate["run"], "mode": gate["mode"], "setup": with_setup,
            "names": named, "hidden": gate["hidden"], "warnings": warnings}


def _uncounted(gate: GateConfig) -> list[str]:
    """A gate whose tests git-parallel cannot count: its run starts no
    runner whose printed summary ``failures.tally`` reads, and no report
    (``expect:``) says what ran."""
    if "expect" in gate or failures.runner_of(gate["run"]) is not None:
        return []
    hidden = ("; as it is, this hidden gate fails, having no count" if gate["hidden"] and gate.get("require_count", True)
              else "")
    return [f"git-parallel cannot count this gate's tests from its output: `{shlex.join(gate['run'])}` starts no "
            f"test runner it reads ({', '.join(failures.RUNNERS)}); name the runner in run (npx jest, not npm test), "
            "or set expect: on the gate with the runner writing a JUnit report to {report}" + hidden]


def _unread_stores(cfg: FrozenConfig) -> list[str]:
    """The package tools setup or a gate runs whose store ``setup.stores``
    does not name: in the sandbox that store is read-only, and pnpm (which
    registers each project there) and go (which writes its build cache to
    read it) fail; the others download again what you have."""
    setup = cfg["setup"]
    words = {Path(w).name for argv in [setup["run"] if setup else [], *(g["run"] for g in cfg["gates"] if g["setup"])]
             for arg in argv for w in arg.replace("&&", " ").replace(";", " ").split()}
    stores = (setup.get("stores") if setup else None) or []
    return [f"setup and gates run {tool} without reading your {tool} store: add `stores: [{tool}]` to setup "
            "(read through a throwaway layer, never written)" if setup else
            f"a gate runs {tool} with no setup, so without your {tool} store: add a setup with `stores: [{tool}]`"
            for tool in STORE_NAMES if tool in words and tool not in stores]


def _sandbox_refused(cfg: FrozenConfig) -> list[str]:
    """``sandbox: required`` where a layer is missing: every spawn is refused."""
    if cfg["sandbox"] != "required":
        return []
    from gitflow_parallel.proc import sandbox

    why = sandbox.missing()
    if why is None or sandbox.settings(cfg)[0] != "required":
        return []
    return [f"sandbox: required, but {why}: every spawn (and run, and check) is refused "
            f"(PARALLEL_SANDBOX_UNAVAILABLE); fix: {sandbox.fix_for(why)}, or set sandbox: auto"]


def check(project: Project) -> InitCheck:
    """Explain the worktree's ``.gitparallel.yaml``: what each gate protects,
    what it does not, and which fence will hold."""
    top = Path(project.repo.workdir or project.repo.main_workdir or ".")
    path = top / C.CONFIG_FILE
    data = path.read_bytes() if path.is_file() else None
    cfg = C.parse(data)
    repo = project.repo.pygit
    tree = _head_tree(repo)
    committed = repo.odb.read(tree[C.CONFIG_FILE].id)[1] if C.CONFIG_FILE in tree else None
    patterns = protected.protected_patterns(cfg, tree)
    tests = [p for p in _tree_paths(tree) if _is_test(p)]
    roots = sorted({r for r in (project.repo.main_workdir, top) if r is not None})
    gates = [_explain_gate(cfg, g, tree, tests, roots) for g in cfg["gates"]]
    unprotected = [t for t in tests if not protected.matches(t, patterns)]
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
    warnings += protected.unmatched_warnings(cfg, tree)
    warnings += _sandbox_refused(cfg)
    return {"config": str(path), "exists": data is not None, "committed": data is not None and data == committed,
            "setup": setup, "protect_defaults": cfg["protect_defaults"], "protected": patterns,
            "added_tests": cfg["added_tests"], "gates": gates, "tests": len(tests),
            "unprotected_tests": unprotected, "warnings": warnings, "fence": fence()}
