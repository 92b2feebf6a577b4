"""``git parallel hooks install|uninstall|status``: the hook scripts in the
repository's hooks folder, rendered from ``hooks/`` (shipped as
``gitflow_parallel.hook_templates``), and the foreign hooks they replaced."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

# Kept small at import time: ``git parallel _hook`` runs on hot paths (every
# merge into a live base, every checkout of an instance branch).  The store
# (YAML, filelock), pygit2, and what only install needs are imported where
# they are used.
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write
from gitflow_parallel.state.live import read_live
from gitflow_parallel.git.plain import git_out
from gitflow_parallel.git.hooks import (
    HOOK_ID, HOOK_NAMES, LEFTHOOK_ASIDE, LEGACY_SUFFIX, common_hooks, gone, head_of_file, hooks_dir as _hooks_dir,
    installed_mark, is_ours, manager_of, present, runs_its_legacy, runs_ours, slot, state_of)
from gitflow_parallel.errors import HOOK_REFUSED


VERSION = 1

if TYPE_CHECKING:
    from gitflow_parallel.state.project import Project


@dataclass
class Step:
    """Where one of our hooks goes (``target``), what is in the way, and how."""
    name: str
    path: Path
    target: Path
    legacy: Path
    state: str
    swap: bool  # ours stood in front of pre-commit's: swapped back
    drop: bool  # a stale copy kept before is dropped


class HookInstalled(TypedDict):
    name: str
    path: str
    action: str
    legacy: str | None
    kept_foreign: bool
    dropped_stale_legacy: bool
    run_by: str | None


class HooksInstalled(TypedDict):
    """``hooks install``: where, with which Python, and what became of each hook."""
    hooks_dir: str
    layout: str
    python: str
    common_dir: str
    core_hooks_path: str | None
    hooks: list[HookInstalled]


class HookRemoved(TypedDict):
    name: str
    path: str
    action: str
    state_before: str
    restored_legacy: bool


class HooksRemoved(TypedDict):
    """``hooks uninstall``: what became of each hook."""
    hooks_dir: str
    hooks: list[HookRemoved]


class HookState(TypedDict):
    """One hook as ``hooks status`` finds it (the rest when it is ours)."""
    name: str
    path: str
    state: str
    legacy: str | None
    manager: str | None
    runs_ours: bool
    python: NotRequired[str]
    python_exists: NotRequired[bool]
    recorded_common_dir: NotRequired[str | None]
    layout: NotRequired[str | None]
    current: NotRequired[bool]


class HooksStatus(TypedDict):
    """``hooks status``: each hook, whether git runs ours, and what warns."""
    hooks_dir: str
    layout: str
    common_dir: str
    core_hooks_path: str | None
    installed: bool
    gone: str | None
    live_index: bool
    live_runs: list[str]
    hooks: list[HookState]


TEMPLATES = "gitflow_parallel.hook_templates"


def _worktree_top(project: Project) -> Path:
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None, "Project.open refuses repositories without a worktree"
    return Path(top)


def hooks_dir(project: Project) -> Path:
    """The folder git runs this worktree's hooks from, as git itself says."""
    return _hooks_dir(_worktree_top(project))


def _layout(folder: Path, common: Path) -> str:
    """``common`` when ``folder`` is ``<common>/hooks`` (the script can find the
    common dir from its own path), else ``shared``."""
    return "common" if os.path.realpath(folder) == os.path.realpath(common / "hooks") else "shared"


def _core_hooks_path(project: Project) -> str | None:
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


def _recorded(path: Path) -> dict[str, str]:
    """The values one of our scripts recorded (GP_PYTHON, GP_COMMON_DIR, GP_LAYOUT)."""
    import shlex

    out: dict[str, str] = {}
    head = head_of_file(path) or ""
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
# Beside a hook manager: our hook goes in front of the manager's script, which
# is kept as <name>.legacy and run first under its own name (see gp_legacy in
# common.sh.tmpl); pre-commit's is the exception, it runs <name>.legacy
# itself, so ours goes there (``hooks.slot``).  A manager that rewrites its
# script leaves the old copy as <name>.legacy: that copy is dropped, since
# the manager writes it again, where another hook there would be lost.


def _droppable(old: Path, new: Path) -> bool:
    """May ``old`` (a ``.legacy``) give way to ``new``?  Only when nothing is
    lost: it is ours (we write it again), a byte copy of ``new``, or a script
    the same hook manager generated."""
    if is_ours(old):
        return True
    try:
        if old.read_bytes() == new.read_bytes():
            return True
    except OSError:
        return False
    manager = manager_of(old)
    return manager is not None and manager == manager_of(new)


def _plan(folder: Path, name: str) -> Step:
    """Where our ``name`` hook goes and what is in the way; refuses (before
    anything changes) where installing would lose a hook."""
    path = folder / name
    if path.is_dir() and not path.is_symlink():
        raise ParallelError(
            E.CONFIG_INVALID, f"{path} is a folder, where git expects the {name} hook",
            hint="move it away, then run `git parallel hooks install` again")
    # Ours in front of pre-commit's (an install before this was known): swap.
    swap = is_ours(path) and runs_its_legacy(folder / f"{name}{LEGACY_SUFFIX}")
    target = folder / f"{name}{LEGACY_SUFFIX}" if swap else slot(folder, name)
    legacy = target.with_name(target.name + LEGACY_SUFFIX)
    state = "absent" if swap else state_of(target)
    drop = state == "foreign" and present(legacy)
    if drop and not _droppable(legacy, target):
        # Moving the hook onto the .legacy would lose one of the two.
        raise ParallelError(
            E.CONFIG_INVALID,
            f"{target} is a hook of someone else and {legacy.name} exists beside it; installing would have to "
            "replace one of them; nothing was changed",
            hint=f"merge the two by hand into {legacy} (which git-parallel runs first) and remove {target}, "
                 "then run `git parallel hooks install` again")
    return Step(name, path, target, legacy, state, swap, drop)


def _apply(folder: Path, step: Step, text: str) -> HookInstalled:
    target, legacy, state = step.target, step.legacy, step.state
    if step.swap:
        os.replace(target, step.path)  # pre-commit's script back in front
    if state == "ours" and head_of_file(target) is not None and target.read_text(encoding="utf-8") == text \
            and os.access(target, os.X_OK):
        action = "unchanged"
    else:
        if state == "foreign":
            os.replace(target, legacy)
        # git must never see a half-written hook, nor one without its x bit.
        atomic_write(target, text, mode=0o755)
        action = {"absent": "installed", "ours": "updated", "foreign": "installed"}[state]
    aside = folder / f"{step.name}{LEFTHOOK_ASIDE}"
    if is_ours(aside):
        aside.unlink()  # lefthook's copy of ours: it never runs it, and its next install would stop on it
    return {"name": step.name, "path": str(target), "action": action,
            "legacy": str(legacy) if present(legacy) else None, "kept_foreign": state == "foreign",
            "dropped_stale_legacy": step.drop,
            "run_by": manager_of(step.path) if target != step.path else None}


def install(project: Project) -> HooksInstalled:
    """Install (or refresh) the three hooks; foreign ones are kept as ``.legacy``."""
    folder = hooks_dir(project)
    common = Path(project.repo.common_dir).resolve()
    layout = _layout(folder, common)
    python = os.path.abspath(sys.executable)
    plan = [_plan(folder, name) for name in HOOK_NAMES]
    folder.mkdir(parents=True, exist_ok=True)
    results = [_apply(folder, step, render(step.name, python, str(common), layout)) for step in plan]
    _retire_unread(folder, common)
    mark = installed_mark(common)
    mark.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(mark, f"{folder}\n")
    return {"hooks_dir": str(folder), "layout": layout, "python": python, "common_dir": str(common),
            "core_hooks_path": _core_hooks_path(project), "hooks": results}


def _uninstall_one(folder: Path, name: str) -> HookRemoved:
    """Remove ours at ``name`` or, beside pre-commit, at ``name.legacy``, and
    put back what it replaced there."""
    path = folder / name
    state = state_of(path)
    restored = removed = False
    for target in (path, folder / f"{name}{LEGACY_SUFFIX}"):
        if is_ours(target):
            target.unlink()
            removed = True
            legacy = target.with_name(target.name + LEGACY_SUFFIX)
            if present(legacy):
                os.replace(legacy, target)
                restored = True
            break
    if state == "absent" and not removed and present(folder / f"{name}{LEGACY_SUFFIX}"):
        os.replace(folder / f"{name}{LEGACY_SUFFIX}", path)
        restored = True
    aside = folder / f"{name}{LEFTHOOK_ASIDE}"
    if is_ours(aside):
        aside.unlink()
    if state == "foreign" and not removed:
        action = "left alone (not ours)"
    elif removed:
        action = "removed" + ("; restored the hook it had replaced" if restored else "")
    else:
        action = f"restored the hook kept as {name}{LEGACY_SUFFIX}" if restored else "absent"
    return {"name": name, "path": str(path), "action": action, "state_before": state,
            "restored_legacy": restored}


def _retire_unread(folder: Path, common: Path) -> None:
    """Ours left in ``<common dir>/hooks`` while git reads ``folder`` (a hook
    manager set core.hooksPath) run nowhere: removed, what they had replaced
    put back."""
    if os.path.realpath(folder) != os.path.realpath(common_hooks(common)):
        for name in HOOK_NAMES:
            if is_ours(common_hooks(common) / name):
                _uninstall_one(common_hooks(common), name)


def uninstall(project: Project) -> HooksRemoved:
    """Remove our scripts and put each ``.legacy`` hook back; foreign hooks
    stay.  Ours left in ``<common dir>/hooks`` while git reads another
    folder (a hook manager set core.hooksPath) go too."""
    folder = hooks_dir(project)
    common = Path(project.repo.common_dir).resolve()
    results = [_uninstall_one(folder, name) for name in HOOK_NAMES]
    _retire_unread(folder, common)
    installed_mark(common).unlink(missing_ok=True)
    return {"hooks_dir": str(folder), "hooks": results}


def _status_one(folder: Path, common: Path, name: str) -> HookState:
    path, legacy = folder / name, folder / f"{name}{LEGACY_SUFFIX}"
    state = state_of(path)
    entry: HookState = {"name": name, "path": str(path), "state": state,
                             "legacy": str(legacy) if present(legacy) else None,
                             "manager": manager_of(path), "runs_ours": runs_ours(folder, name)}
    ours = slot(folder, name)
    if is_ours(ours):
        rec = _recorded(ours)
        python = rec.get("GP_PYTHON", "")
        entry.update({"python": python, "python_exists": bool(python) and os.access(python, os.X_OK),
                      "recorded_common_dir": rec.get("GP_COMMON_DIR"), "layout": rec.get("GP_LAYOUT"),
                      "current": ours.read_text(encoding="utf-8") == render(
                          name, python or sys.executable, rec.get("GP_COMMON_DIR") or str(common),
                          rec.get("GP_LAYOUT") or _layout(folder, common))})
    return entry


def status(project: Project) -> HooksStatus:
    """Per hook: ours, foreign or absent, where, whether git runs ours (also
    through pre-commit), and what ours recorded; ``gone`` says loudly when
    a hook manager replaced ours."""
    folder = hooks_dir(project)
    common = Path(project.repo.common_dir).resolve()
    hooks = [_status_one(folder, common, name) for name in HOOK_NAMES]
    live = read_live(common / "parallel")
    return {"hooks_dir": str(folder), "layout": _layout(folder, common), "common_dir": str(common),
            "core_hooks_path": _core_hooks_path(project), "installed": all(h["runs_ours"] for h in hooks),
            "gone": gone(_worktree_top(project), common),
            "live_index": (common / "parallel" / "live").is_file(),
            "live_runs": sorted(r.task for r in live.values() if not r.finished), "hooks": hooks}
