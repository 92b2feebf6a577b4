"""Where a runner's claim on an instance is, and whether one holds it.

The claim is a ``flock`` that ``proc/slots`` takes for the runner; this
module only names it and asks the kernel about it, so that what reads
records (``status``, ``recover``) can tell a live runner it cannot see
(a runner in another PID namespace: a container sharing the repository)
from a dead one."""

from __future__ import annotations

from pathlib import Path

from gitflow_parallel.files import flock_held


def claim_path(parallel_dir: Path, task: str, inst_id: str) -> Path:
    return parallel_dir / "locks" / f"run-{task}-{inst_id}.lock"


def claim_held(parallel_dir: Path, task: str, inst_id: str) -> bool:
    """Does some process hold the claim on the instance (``files.flock_held``)?"""
    return flock_held(claim_path(parallel_dir, task, inst_id))
