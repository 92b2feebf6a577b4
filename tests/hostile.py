"""What the hostile tests of each place share (``test_hostile_*``): the
namespace layer they need, and ways to look for what an attacker left."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from conftest import GP
from gitflow_parallel.proc import namespace

needs_namespace = pytest.mark.skipif(namespace.unavailable() is not None,
                                     reason=f"no namespace layer here: {namespace.unavailable()}")


def token() -> str:
    """A word no process but the attacker's has in its command line."""
    return f"gp-attacker-{uuid.uuid4().hex}"


def processes_with(word: str) -> list[int]:
    """The pids of the machine whose command line holds ``word``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if word.encode() in handle.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


def status(gp: GP, task: str) -> dict[str, dict]:
    return {i["id"]: i for i in gp.json("status", task)["run"]["instances"]}


def pack_of(gp: GP, task: str, inst: str) -> dict:
    return json.loads(Path(status(gp, task)[inst]["evidence"]["path"]).read_text())


def log_of(gp: GP, task: str, inst: str) -> str:
    return Path(status(gp, task)[inst]["log"]).read_text()
