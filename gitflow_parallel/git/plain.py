"""git through its own CLI, inheriting the environment as a hook's git must;
standard library only (the hooks' fast path imports no pygit2)."""

from __future__ import annotations

import os
import subprocess




# -- where the hooks go ---------------------------------------------------------
def git_out(args: list[str], cwd: str | os.PathLike[str] | None = None, check: bool = True) -> str:
    """Run git (inheriting the environment, as a hook's git must) and return stdout."""
    proc = subprocess.run(["git", *args], cwd=None if cwd is None else str(cwd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout if proc.returncode == 0 else ""
