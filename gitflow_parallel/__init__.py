"""git-parallel: run several attempts at one task side by side in git worktrees.

ARCHITECTURE.md is the map of the package (its layers, which module owns
what, who writes each file and ref); ``tests/test_layout.py`` holds it.
"""

__version__ = "0.1.0"
