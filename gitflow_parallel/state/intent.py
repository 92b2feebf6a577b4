"""The merge intent: the file a landing writes before it moves the base, so
that ``recover`` can finish or undo a landing cut short.  This module is its
one owner: its path, its shape, writing, reading, listing and removing it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from gitflow_parallel import schema
from gitflow_parallel.files import atomic_write, canonical_json
from gitflow_parallel.model import LandingStep, RunRecord
from gitflow_parallel.state.project import Project

SUFFIX = ".intent.json"


class Intent(TypedDict):
    """The base ref about to move from ``previous`` to ``landing``, and what
    recover needs to record that landing if the merge dies after the move
    (recover needs only the two oids; the rest it takes when there)."""
    previous: str
    landing: str
    base_ref: NotRequired[str]
    worktree: NotRequired[str | None]
    steps: NotRequired[list[LandingStep]]
    resolved_files: NotRequired[list[dict[str, Any]]]
    written_at: NotRequired[str]


def _folder(project: Project) -> Path:
    return project.repo.parallel_dir / "merges"


def intent_path(project: Project, record: RunRecord) -> Path:
    """``parallel/merges/<run_id>.intent.json``: written just before the base
    ref moves and removed once the record says merged (or the merge is
    refused), so a crash in between tells recover the old and new oid."""
    return _folder(project) / f"{record['run_id']}{SUFFIX}"


def write_intent(project: Project, record: RunRecord, intent: Intent) -> None:
    atomic_write(intent_path(project, record), canonical_json(intent))


def read_intent(path: Path) -> Intent:
    """The intent at ``path``; ``ValueError`` (or ``OSError``) when it cannot
    be read or does not name the two oids."""
    intent: Intent = schema.check(Intent, json.loads(path.read_text(encoding="utf-8")))  # a ShapeError is a ValueError
    return intent


def listed_intents(project: Project) -> list[tuple[str, Path]]:
    """(run id, path) of every intent file there is, by run id."""
    folder = _folder(project)
    if not folder.is_dir():
        return []
    return [(path.name[: -len(SUFFIX)], path) for path in sorted(folder.glob(f"*{SUFFIX}"))]


def clear_intent(project: Project, record: RunRecord) -> None:
    try:
        intent_path(project, record).unlink()
    except FileNotFoundError:
        pass
