"""git-parallel: run several attempts at one task side by side in git worktrees.

Lowest first: the record (``errors``, ``names``, ``files``, ``model`` the run
record and every change to it, ``provenance`` every note line, ``config``,
``evidence``); ``git/`` the gateway to git, ``state/`` what is kept under
``parallel/``, ``proc/`` every process started and stopped; ``judge/`` gates,
checks and the pick rules; ``recovery/`` the repair after a crash;
``commands/`` one module per verb, none importing another; ``cli/`` parsing
and rendering.  ARCHITECTURE.md draws it; ``tests/test_layout.py`` holds it.
"""

__version__ = "0.1.0"
