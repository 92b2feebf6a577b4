"""``git parallel hooks install|uninstall|status``: the hook scripts in the
repository's hooks folder, rendered from ``hooks/`` (shipped as
``gitflow_parallel.hook_templates``), and the foreign hooks they replaced."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# Kept small at import time: ``git parallel _hook`` runs on hot paths (every
# merge into a live base, every checkout of an instance branch).  The store
# (YAML, filelock), pygit2, and what only install needs are imported where
# they are used.
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write
from gitflow_parallel.state.live import read_live
from gitflow_parallel.git.plain import git_out
from gitflow_parallel.errors import HOOK_REFUSED


HOOK_NAMES = ("pre-merge-commit", "reference-transaction", "post-checkout")


VERSION = 1


# Identifies scripts we wrote, whatever their version (pre-commit's model).
HOOK_ID = "6f1d0c52-5b7e-4bb5-9a43-1f6a2e7c9d30"


LEGACY_SUFFIX = ".legacy"


TEMPLATES = "gitflow_parallel.hook_templates"


def _worktree_top(project: Any) -> Path:
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None, "Project.open refuses repositories without a worktree"
    return Path(top)


def hooks_dir(project: Any) -> Path:
    """The folder git runs this worktree's hooks from, as git itself says."""
    top = _worktree_top(project)
    out = git_out(["rev-parse", "--path-format=absolute", "--git-path", "hooks"], cwd=top).strip()
    return Path(out)


def _layout(folder: Path, common: Path) -> str:
    """``common`` when ``folder`` is ``<common>/hooks`` (the script can find the
    common dir from its own path), else ``shared``."""
    return "common" if os.path.realpath(folder) == os.path.realpath(common / "hooks") else "shared"


def _core_hooks_path(project: Any) -> str | None:
    out = git_out(["config", "--get", "core.hooksPath"], cwd=_worktree_top(project), check=False).strip()
    return out or None


# -- the scripts -----------------------------------------------------------------
def _template(name: str) -> str:
    """A template from the source checkout this package was imported from
    (its top-level hooks/, beside pyproject.toml), else from the installed
    package.  The checkout comes first: with the package on PYTHONPATH while
    an editable install of another checkout is in the environment,
    ``gitflow_parallel.hook_templates`` names that other checkout's hooks/."""
    import importlib.resources

    top = Path(__file__).resolve().parents[2]  # commands/ -> gitflow_parallel/ -> the checkout
    source = top / "hooks" / name
    if (top / "pyproject.toml").is_file() and source.is_file():
        return source.read_text(encoding="utf-8")
    return importlib.resources.files(TEMPLATES).joinpath(name).read_text(encoding="utf-8")


def render(hook: str, python: str, common_dir: str, layout: str) -> str:
    """The script for ``hook``: the common part with the hook's body inlined,
    so the installed file depends on nothing in the package at run time."""
    import shlex

    if hook not in HOOK_NAMES:
        raise ValueError(f"not a git-parallel hook: {hook}")
    values = {
        "@VERSION@": str(VERSION), "@HOOK_ID@": HOOK_ID, "@HOOK@": hook, "@PYTHON@": shlex.quote(python),
        "@COMMON_DIR@": shlex.quote(common_dir), "@LAYOUT@": layout, "@REFUSED@": str(HOOK_REFUSED),
    }
    text = _template("common.sh.tmpl").replace("@BODY@", _template(f"{hook}.sh").rstrip("\n"))
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _head_of_file(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(4096).decode("utf-8", errors="replace")
    except OSError:
        return None


def is_our_hook(path: Path) -> bool:
    head = _head_of_file(path)
    return head is not None and any(
        line.startswith("# git-parallel hook v") and HOOK_ID in line for line in head.splitlines()[:5])


def _present(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def state_of(path: Path) -> str:
    if not _present(path):
        return "absent"
    return "ours" if is_our_hook(path) else "foreign"


def _recorded(path: Path) -> dict[str, str]:
    """The values one of our scripts recorded (GP_PYTHON, GP_COMMON_DIR, GP_LAYOUT)."""
    import shlex

    out: dict[str, str] = {}
    head = _head_of_file(path) or ""
    for line in head.splitlines():
        for key in ("GP_PYTHON", "GP_COMMON_DIR", "GP_LAYOUT"):
            if line.startswith(key + "="):
                try:
                    parts = shlex.split(line[len(key) + 1:])
                except ValueError:
                    parts = []
                out[key] = parts[0] if parts else ""
    return out


# -- install / uninstall / status ----------------------------------------------------
def install(project: Any) -> dict[str, Any]:
    """Install (or refresh) the three hooks; foreign ones are kept as ``.legacy``."""
    folder = hooks_dir(project)
    common = Path(project.repo.common_dir).resolve()
    layout = _layout(folder, common)
    python = os.path.abspath(sys.executable)
    plan = []
    for name in HOOK_NAMES:
        path, legacy = folder / name, folder / f"{name}{LEGACY_SUFFIX}"
        if path.is_dir() and not path.is_symlink():
            raise ParallelError(
                E.CONFIG_INVALID, f"{path} is a folder, where git expects the {name} hook",
                hint="move it away, then run `git parallel hooks install` again")
        state = state_of(path)
        if state == "foreign" and _present(legacy):
            # Moving the hook onto the .legacy would lose one of the two.
            raise ParallelError(
                E.CONFIG_INVALID,
                f"{path} is a hook of someone else and {legacy.name} exists beside it; installing would have to "
                "replace one of them; nothing was changed",
                hint=f"merge the two by hand into {legacy} (which git-parallel runs first) and remove {path}, "
                     "then run `git parallel hooks install` again")
        plan.append((name, path, legacy, state))
    folder.mkdir(parents=True, exist_ok=True)
    results = []
    for name, path, legacy, state in plan:
        text = render(name, python, str(common), layout)
        if state == "ours" and _head_of_file(path) is not None and path.read_text(encoding="utf-8") == text \
                and os.access(path, os.X_OK):
            action = "unchanged"
        else:
            if state == "foreign":
                os.replace(path, legacy)
            # git must never see a half-written hook, nor one without its x bit.
            atomic_write(path, text, mode=0o755)
            action = {"absent": "installed", "ours": "updated", "foreign": "installed"}[state]
        results.append({"name": name, "path": str(path), "action": action,
                        "legacy": str(legacy) if _present(legacy) else None,
                        "kept_foreign": state == "foreign"})
    return {"hooks_dir": str(folder), "layout": layout, "python": python, "common_dir": str(common),
            "core_hooks_path": _core_hooks_path(project), "hooks": results}


def uninstall(project: Any) -> dict[str, Any]:
    """Remove our scripts and put each ``.legacy`` hook back; foreign hooks stay."""
    folder = hooks_dir(project)
    results = []
    for name in HOOK_NAMES:
        path, legacy = folder / name, folder / f"{name}{LEGACY_SUFFIX}"
        state = state_of(path)
        restored = False
        if state == "ours":
            path.unlink()
        if state in ("ours", "absent") and _present(legacy):
            os.replace(legacy, path)
            restored = True
        if state == "foreign":
            action = "left alone (not ours)"
        elif state == "ours":
            action = "removed" + (f"; restored the hook kept as {legacy.name}" if restored else "")
        else:
            action = f"restored the hook kept as {legacy.name}" if restored else "absent"
        results.append({"name": name, "path": str(path), "action": action, "state_before": state,
                        "restored_legacy": restored})
    return {"hooks_dir": str(folder), "hooks": results}


def status(project: Any) -> dict[str, Any]:
    """Per hook: ours, foreign or absent, where, and what ours recorded."""
    folder = hooks_dir(project)
    common = Path(project.repo.common_dir).resolve()
    hooks = []
    for name in HOOK_NAMES:
        path, legacy = folder / name, folder / f"{name}{LEGACY_SUFFIX}"
        state = state_of(path)
        entry: dict[str, Any] = {"name": name, "path": str(path), "state": state,
                                 "legacy": str(legacy) if _present(legacy) else None}
        if state == "ours":
            rec = _recorded(path)
            python = rec.get("GP_PYTHON", "")
            entry.update(python=python, python_exists=bool(python) and os.access(python, os.X_OK),
                         recorded_common_dir=rec.get("GP_COMMON_DIR"), layout=rec.get("GP_LAYOUT"),
                         current=path.read_text(encoding="utf-8") == render(
                             name, python or sys.executable, rec.get("GP_COMMON_DIR") or str(common),
                             rec.get("GP_LAYOUT") or _layout(folder, common)))
        hooks.append(entry)
    live = read_live(common / "parallel")
    return {"hooks_dir": str(folder), "layout": _layout(folder, common), "common_dir": str(common),
            "core_hooks_path": _core_hooks_path(project), "installed": all(h["state"] == "ours" for h in hooks),
            "live_index": (common / "parallel" / "live").is_file(),
            "live_runs": sorted(r.task for r in live.values()), "hooks": hooks}
