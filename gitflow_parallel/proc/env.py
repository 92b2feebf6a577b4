"""The environment of every process git-parallel starts: the one scrub.

Two kinds of child, two rules:

- **Commands** (agents, gates, scores, judges) are untrusted and describe an
  instance only through what we give them: every inherited ``GIT_PARALLEL_*``
  variable is dropped (an outer run's ``GIT_PARALLEL_INSTANCE``, a stray
  ``GIT_PARALLEL_FEEDBACK``, our fault injection or hook token would
  misdescribe the instance or pass for us), and so is every variable that
  points git at another repository, so their git discovers the checkout
  they run in.  The caller then adds the facts it means to give.
- **Our own git** (and the demo's) keeps ``GIT_PARALLEL_*`` (our settings
  reach the hooks it fires) and loses only the location variables: an
  inherited ``GIT_DIR`` from ``git --git-dir=… parallel`` would aim it
  elsewhere, since it names its repository by cwd or ``--git-dir``.
"""

from __future__ import annotations

import os
from typing import Mapping

GIT_LOCATION_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_PREFIX", "GIT_NAMESPACE")
OURS = "GIT_PARALLEL_"


def for_git(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ours) without the git location variables."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k not in GIT_LOCATION_ENV}


def for_command(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ours) fit for an agent or a gate: no git location
    variable and no ``GIT_PARALLEL_*`` one."""
    return {k: v for k, v in for_git(environ).items() if not k.startswith(OURS)}
