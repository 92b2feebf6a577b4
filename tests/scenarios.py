"""Scenario builders the end-to-end tests share: a repository with one
gate and an agent beside it (``project``), and a run's record as ``status
--json`` shows it or as it is stored (``shown_record``, ``stored_record``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from conftest import AGENT, GP, git, make_repo

PY = sys.executable


def project(tmp_path: Path, gate: str, *, name: str = "tests", max_total: int | None = None,
            gate_args: tuple[str, ...] = (), extra: str = "", files: dict[str, str] | None = None,
            agent: str = AGENT, tools: Path | None = None) -> tuple[Path, GP]:
    """A repository (``tmp_path/repo``) whose one gate, ``name``, runs the
    python source ``gate`` with this interpreter (and ``gate_args``); the
    agent's source and the gate's are ``agent.py`` and ``gate.py`` in
    ``tools`` (``tmp_path/tools`` unless given).  ``extra`` is appended to
    the configuration."""
    tools = tools or tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "agent.py").write_text(agent)
    (tools / "gate.py").write_text(gate)
    run = ", ".join(str(a) for a in (PY, tools / "gate.py", *gate_args))
    limit = f"max_total: {max_total}\n" if max_total is not None else ""
    config = f"\n{limit}gates:\n  - name: {name}\n    run: [{run}]\n" + extra
    repo = make_repo(tmp_path / "repo", files=files, config=config)
    return repo, GP(repo)


def shown_record(gp: GP, task: str = "t") -> dict[str, Any]:
    """The run as ``status --json`` shows it."""
    run: dict[str, Any] = gp.json("status", task)["run"]
    return run


def common(repo: Path) -> Path:
    """The repository's common git directory."""
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def stored_record(repo: Path, task: str = "t") -> dict[str, Any]:
    """The run record as stored (read from disk: cheaper than ``status --json``)."""
    stored: dict[str, Any] = yaml.safe_load((common(repo) / "parallel" / "runs" / f"{task}.yaml").read_text())
    return stored
