"""git through its own CLI, inheriting the environment as a hook's git must;
standard library only (the hooks' fast path imports no pygit2)."""

from __future__ import annotations

import os
import re
import subprocess




# -- where the hooks go ---------------------------------------------------------
def git_out(args: list[str], cwd: str | os.PathLike[str] | None = None, check: bool = True) -> str:
    """Run git (inheriting the environment, as a hook's git must) and return stdout."""
    proc = subprocess.run(["git", *args], cwd=None if cwd is None else str(cwd), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout if proc.returncode == 0 else ""


# -- patch-ids (the hooks' check on copies of a losing attempt) --------------------
# The diff a patch-id is taken over: no program the repository configures runs.
DIFF_FLAGS = ["-p", "--no-ext-diff", "--no-textconv", "--no-color"]


def _git_bytes(args: list[str], git_dir: str | os.PathLike[str] | None, stdin: bytes) -> bytes:
    where = ["--git-dir", str(git_dir)] if git_dir is not None else []
    proc = subprocess.run(["git", *where, *args], input=stdin, capture_output=True)
    return proc.stdout if proc.returncode == 0 else b""


def patch_ids(commits: list[str], git_dir: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """commit -> ``git patch-id --stable`` of its change against its first
    parent, for each commit that is no merge and changes something."""
    if not commits:
        return {}
    diff = _git_bytes(["diff-tree", *DIFF_FLAGS, "--stdin"], git_dir, ("\n".join(commits) + "\n").encode())
    out = _git_bytes(["patch-id", "--stable"], git_dir, diff).decode(errors="replace")
    return {parts[1]: parts[0] for parts in (line.split() for line in out.splitlines()) if len(parts) == 2}


def range_patch_id(base: str, head: str, git_dir: str | os.PathLike[str] | None = None) -> str | None:
    """The patch-id of the whole change from ``base`` to ``head`` (what a
    squash of ``head`` onto ``base`` commits)."""
    diff = _git_bytes(["diff", *DIFF_FLAGS, base, head, "--"], git_dir, b"")
    out = _git_bytes(["patch-id", "--stable"], git_dir, diff).decode(errors="replace").split()
    return out[0] if out else None


def merge_tree(ours: str, theirs: str) -> tuple[str, list[str]] | None:
    """The tree git's own merge of two commits gives (``git merge-tree
    --write-tree``: the merge ``git merge`` makes, with the repository's
    merge settings) and the paths it leaves conflicted; None where this git
    cannot say (before 2.38)."""
    proc = subprocess.run(["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", ours, theirs],
                          capture_output=True, stdin=subprocess.DEVNULL)
    fields = proc.stdout.decode(errors="surrogateescape").split("\0")
    if proc.returncode not in (0, 1) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", fields[0]):
        return None  # (an unknown option, or a commit it cannot read: exit 1 or 129, nothing on stdout)
    return fields[0], sorted({f for f in fields[1:] if f})


def commits_between(base: str, head: str, git_dir: str | os.PathLike[str] | None = None) -> list[str]:
    return _git_bytes(["rev-list", head, "--not", base, "--"], git_dir, b"").decode(errors="replace").split()


def archived_runs(git_dir: str | os.PathLike[str]) -> set[str]:
    """The run ids with refs under ``refs/parallel/archive/<run_id>/``."""
    out = _git_bytes(["for-each-ref", "--format=%(refname)", "refs/parallel/archive/"], git_dir, b"")
    return {parts[3] for parts in (line.split("/") for line in out.decode(errors="replace").splitlines())
            if len(parts) > 4}
