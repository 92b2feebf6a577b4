"""The environment of every process git-parallel starts: the one scrub.

Two kinds of child, two rules:

- **Commands** (agents, gates, scores, judges) are untrusted and describe an
  instance only through what we give them: every inherited ``GIT_PARALLEL_*``
  variable is dropped (an outer run's ``GIT_PARALLEL_INSTANCE``, a stray
  ``GIT_PARALLEL_FEEDBACK``, our fault injection or hook token would
  misdescribe the instance or pass for us), and so is every variable that
  points git at another repository, so their git discovers the checkout
  they run in.  The caller then adds the facts it means to give.
- **Our own git** on attempt data (``for_host_git``) keeps only the ``GIT_*``
  variables that say who we are and how to reach a remote (identity,
  config files, ssh/http settings, tracing): an inherited ``GIT_DIR`` would
  aim it elsewhere, and ``GIT_CONFIG_PARAMETERS``/``GIT_CONFIG_COUNT``,
  ``GIT_EXTERNAL_DIFF``, ``GIT_EXEC_PATH`` or a pager would make it run
  programs no one vetted.  The hooks' token (``GIT_PARALLEL_INTERNAL``) is
  never among them: our git runs no hooks (``core.hooksPath=/dev/null``), so
  it needs no pass, and a filter or fsmonitor it starts must not get one.
- The demo's git (``for_git``) loses only the location variables.
"""

from __future__ import annotations

import os
from typing import Mapping

GIT_LOCATION_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_NAMESPACE")
OURS = "GIT_PARALLEL_"
INTERNAL_ENV = "GIT_PARALLEL_INTERNAL"
# The GIT_* variables our own git keeps (a prefix ending in "_" keeps a family).
HOST_GIT_KEEP = ("GIT_AUTHOR_", "GIT_COMMITTER_", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                 "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_ASKPASS", "GIT_TERMINAL_PROMPT", "GIT_HTTP_",
                 "GIT_SSL_", "GIT_CURL_VERBOSE", "GIT_TRACE", "GIT_ALLOW_PROTOCOL", "GIT_PROTOCOL_FROM_USER")


def for_git(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ours) without the git location variables."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k not in GIT_LOCATION_ENV}


def for_host_git(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ours) fit for a git command of ours on attempt
    data: of the ``GIT_*`` variables only those in ``HOST_GIT_KEEP`` (and our
    own settings, without the hooks' token)."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items()
            if not k.startswith("GIT_") or (k.startswith(OURS) and k != INTERNAL_ENV)
            or any(k == p or (p.endswith("_") and k.startswith(p)) or k.startswith(p + "_") for p in HOST_GIT_KEEP)}


def for_command(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ours) fit for an agent or a gate: no git location
    variable and no ``GIT_PARALLEL_*`` one."""
    return {k: v for k, v in for_git(environ).items() if not k.startswith(OURS)}


def move_pythonpath(env: dict[str, str], main: str | os.PathLike[str], here: str | os.PathLike[str]) -> None:
    """In ``env``, each ``PYTHONPATH`` entry inside the main worktree
    ``main`` (``<repo>/src``, as users of a src layout export it) names the
    same place in ``here``, the checkout or worktree a command runs in: its
    Python would import the main worktree's code, not the one before it."""
    if "PYTHONPATH" not in env:
        return
    top = os.path.realpath(main)

    def moved(entry: str) -> str:
        real = os.path.realpath(entry) if os.path.isabs(entry) else None
        if real is None or (real != top and not real.startswith(top.rstrip("/") + "/")):
            return entry
        return os.fspath(here) if real == top else os.path.join(here, os.path.relpath(real, top))

    env["PYTHONPATH"] = os.pathsep.join(moved(entry) for entry in env["PYTHONPATH"].split(os.pathsep))
