"""Shared pieces of the benchmarks: a sealed environment and a timer.

Benchmarks print ratios against plain git measured side by side in one run,
because absolute times on shared machines mean little."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def sealed_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({
        "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
        "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
        "PYTHONPATH": str(ROOT) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
    })
    shim = home / "bin"
    shim.mkdir(parents=True, exist_ok=True)
    script = shim / "git-parallel"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -m gitflow_parallel \"$@\"\n")
    script.chmod(0o755)
    env["PATH"] = f"{shim}{os.pathsep}{env.get('PATH', '')}"
    return env


def workspace(prefix: str) -> tuple[Path, dict[str, str]]:
    base = Path(tempfile.mkdtemp(prefix=prefix))
    home = base / "home"
    home.mkdir()
    return base, sealed_env(home)


def sh(args: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(args, cwd=str(cwd), env=env, capture_output=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def median(values: list[float]) -> float:
    return statistics.median(values)
