"""git-parallel: run several attempts at one task side by side in git worktrees.

Each module owns one noun: ``config`` the configuration, ``store`` the run
records, ``worktrees`` the branches and checkouts, ``notes`` the git notes,
``runner`` and ``slots`` the agent processes, ``gates`` the checks and
scores, ``evidence`` the evidence packs, ``selection`` the pick, ``merge``
the landing, ``hooks`` the git hooks, ``recovery`` the repair after a crash,
``lifecycle`` the remaining verbs.  ``gitrepo`` is the thin layer over
pygit2; ``errors`` holds the one error type and its reason codes; ``cli``
only parses and renders.
"""

__version__ = "0.1.0"
