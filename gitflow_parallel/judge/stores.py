"""The user's package stores, read by setup and gates, never written by them.

A judged checkout's ``setup`` installs the project's dependencies, and the
user almost always has them already: in pnpm's content-addressed store,
npm's and yarn's caches, pip's and uv's, Go's module and build caches,
cargo's registry.  In the sandbox ``/`` is read-only, so a tool that must
write its store even to read it (pnpm registers each project there, npm
writes index entries and logs, Go trims its build cache) fails, or goes to
the network for what is on the disk.  Letting judged code write the user's
store is no answer: an attempt's install scripts, or its tests, could plant
a package every later install of yours would trust.

``setup.stores`` names them (``pnpm``, ``npm``, ``yarn``, ``pip``, ``uv``,
``go``, ``cargo``, or folders).  Under the namespace layer each is seen by
setup and gates through an overlay of its own, at its usual path: the
user's folder is the read-only lower layer and the upper layer is a
throwaway one (bwrap's ``--tmp-overlay``, in memory), gone when the
command ends.  The tool finds its store where it always does, writable,
reuses every package in it, and whatever it writes (a project
registration, a package it had to download) is never seen by the user nor
by the next command.  Under Landlock alone there is no overlay: the store
stays read-only, as the rest of ``/``.

Where each name lives follows the tools' own defaults and the variables
that move them (``PNPM_HOME``, ``npm_config_cache``, ``PIP_CACHE_DIR``,
``UV_CACHE_DIR``, ``GOMODCACHE``, ``GOCACHE``, ``CARGO_HOME``,
``XDG_CACHE_HOME``, ...), read from git-parallel's own environment, the one
the commands inherit.  A folder that does not exist is skipped: there is
nothing to read.  A store that is, holds or lies in the repository's git
dir, the main worktree, the judged checkouts, an instance's worktree, a
gate's hidden tests or the tmux sockets is refused: bwrap reads an
overlay's lower folder as the host has it, so its overlay would show what
the sandbox hides, or cover what the judge must see as it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.proc.sandbox import overlapping
from gitflow_parallel.config_schema import SetupConfig

if TYPE_CHECKING:
    from gitflow_parallel.proc.sandbox import GatePlan


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _home(*parts: str) -> Path:
    return Path(os.path.expanduser("~"), *parts)


def _xdg(variable: str, *default: str) -> Path:
    value = _env(variable)
    return Path(value) if value else _home(*default)


def _cache(*parts: str) -> Path:
    return _xdg("XDG_CACHE_HOME", ".cache").joinpath(*parts)


def _pnpm() -> list[Path]:
    given = _env("npm_config_store_dir") or _env("NPM_CONFIG_STORE_DIR")
    if given:
        return [Path(given)]
    home = _env("PNPM_HOME")
    return [Path(home) / "store" if home else _xdg("XDG_DATA_HOME", ".local", "share") / "pnpm" / "store"]


def _npm() -> list[Path]:
    given = _env("npm_config_cache") or _env("NPM_CONFIG_CACHE")
    return [Path(given) if given else _home(".npm")]


def _yarn() -> list[Path]:
    given = _env("YARN_CACHE_FOLDER")
    return [Path(given) if given else _cache("yarn")]


def _pip() -> list[Path]:
    given = _env("PIP_CACHE_DIR")
    return [Path(given) if given else _cache("pip")]


def _uv() -> list[Path]:
    given = _env("UV_CACHE_DIR")
    return [Path(given) if given else _cache("uv")]


def _go() -> list[Path]:
    gopath = (_env("GOPATH") or str(_home("go"))).split(os.pathsep)[0]
    mods = _env("GOMODCACHE") or os.path.join(gopath, "pkg", "mod")
    build = _env("GOCACHE")
    return [Path(mods), Path(build) if build and build != "off" else _cache("go-build")]


def _cargo() -> list[Path]:
    home = Path(_env("CARGO_HOME") or _home(".cargo"))
    return [home / "registry", home / "git"]


KNOWN: dict[str, Callable[[], list[Path]]] = {
    "pnpm": _pnpm, "npm": _npm, "yarn": _yarn, "pip": _pip, "uv": _uv, "go": _go, "cargo": _cargo,
}


def folders(entry: str) -> list[Path]:
    """The folders one ``stores`` entry names (a known tool's, or a path
    absolute or under ``~``), resolved, whether or not they exist."""
    found = KNOWN[entry]() if entry in KNOWN else [Path(os.path.expanduser(entry))]
    return [Path(os.path.realpath(os.path.expanduser(str(p)))) for p in found]


def resolve(entries: list[str], guarded: list[tuple[str, Path]]) -> list[Path]:
    """The existing folders ``entries`` name, outer ones first, each once;
    refused (``PARALLEL_CONFIG_INVALID``) when one is ``/``, or is, holds or
    lies in a ``guarded`` place (``(what, path)``)."""
    out: list[Path] = []
    for entry in entries:
        for path in folders(entry):
            if not path.is_absolute() or path == Path("/"):
                raise ParallelError(E.CONFIG_INVALID, f"setup.stores: {entry!r} names {path}, which is not a store",
                                    hint="name a tool (pnpm, npm, yarn, pip, uv, go, cargo) or a store's folder")
            clash = overlapping(path, guarded)
            if clash is not None:
                what, place = clash
                raise ParallelError(
                    E.CONFIG_INVALID,
                    f"setup.stores: {entry!r} ({path}) {'holds' if path in place.parents else 'is in'} {what} "
                    f"({place}): its layer would show judged commands what the sandbox hides from them, or "
                    "cover what they must see",
                    hint="name the store's own folder in setup.stores, outside the repository, its worktrees, "
                         "the judged checkouts and the hidden tests")
            if path.is_dir() and path not in out:
                out.append(path)
    return sorted(out, key=lambda p: len(p.parts))


def for_plan(setup: SetupConfig, plan: GatePlan) -> list[Path]:
    """The stores the commands of ``plan`` (a judged checkout's) read
    through their own layers: ``setup.stores``, resolved here and now."""
    from gitflow_parallel.git.scratch import judged_root

    # bwrap reads an overlay's lower folder as the host has it: a store over
    # what the sandbox hides would show it again.
    tmux = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
    guarded = [("the repository's git dir", plan.common),
               ("the judged checkouts", judged_root(plan.common, plan.main_workdir)),
               *([("the main worktree", plan.main_workdir)] if plan.main_workdir is not None else []),
               *(("an instance's worktree", w) for w in plan.reads.instance_worktrees(plan.common)),
               *(("a gate's hidden tests", Path(os.path.expanduser(g["hidden"])))
                 for g in plan.config.get("gates") or [] if g.get("hidden")),
               ("the tmux servers' sockets", tmux)]
    return resolve(list(setup.get("stores") or []), guarded)


def unseen(config: Mapping[str, Any]) -> list[Path]:
    """The folders no judged command sees: the ``sandbox_write`` ones there
    are, where agents' tools keep their sessions (a sibling's code with
    them), but one that is, holds or lies in a store of ``setup.stores``
    (read by every judged command; under the namespace layer through a
    throwaway layer)."""
    setup = config.get("setup") or {}
    stores = [("a store", p) for entry in (setup.get("stores") or []) for p in folders(str(entry))]
    out = []
    for entry in config.get("sandbox_write") or []:
        path = Path(os.path.realpath(os.path.expanduser(str(entry))))
        if path.is_absolute() and path.is_dir() and overlapping(path, stores) is None:
            out.append(path)
    return out


def refuse_agents_writing(config: Mapping[str, Any]) -> None:
    """Refuse (``PARALLEL_SANDBOX_WRITE_REFUSED``) a ``sandbox_write``
    folder that is, holds or lies in a store of ``setup.stores``: setup
    builds the kept environment every attempt is judged with from what it
    reads there, and the tools do not check it again (a cached wheel built
    from an sdist, an extracted module or crate, a package's files in
    pnpm's store), so an agent could plant what judges it and its siblings."""
    setup = config.get("setup") or {}
    stores = [(f"the store {entry!r} of setup.stores", p) for entry in (setup.get("stores") or [])
              for p in folders(str(entry))]
    for entry in config.get("sandbox_write") or []:
        path = Path(os.path.realpath(os.path.expanduser(str(entry))))
        clash = overlapping(path, stores) if path.is_absolute() else None
        if clash is not None:
            what, place = clash
            raise ParallelError(
                E.SANDBOX_WRITE_REFUSED,
                f"sandbox_write: {entry!r} ({path}) {'holds' if path in place.parents else 'is'}"
                f"{' in' if place in path.parents else ''} {what} ({place}): an agent could plant there what "
                "the environment every attempt is judged with is built from",
                hint="give the agents' tool a cache of its own (its own folder in sandbox_write, named to the tool "
                     "by its variable: PIP_CACHE_DIR, npm_config_store_dir, ...), or take the folder out of "
                     "setup.stores")
