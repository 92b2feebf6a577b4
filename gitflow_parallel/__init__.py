"""git-parallel: run several attempts at one task side by side in git worktrees.

Each module owns one noun: ``store`` the run records, ``worktrees`` the
branches and checkouts, ``notes`` the git notes, ``evidence`` the gates and
evidence packs, ``selection`` the pick, ``merge`` the landing, ``hooks`` the
git hooks, ``recovery`` the repair after a crash.  ``cli`` only parses and
renders.
"""

__version__ = "0.1.0"
