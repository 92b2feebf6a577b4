"""The merge intent: the file a landing writes before it moves the base, so
that ``recover`` can finish or undo a landing cut short."""

from __future__ import annotations

from pathlib import Path


from gitflow_parallel.model import RunRecord
from gitflow_parallel.state.project import Project



# -- the intent file ---------------------------------------------------------------------
def intent_path(project: Project, record: RunRecord) -> Path:
    """``parallel/merges/<run_id>.intent.json``: written just before the base
    ref moves and removed once the record says merged (or the merge is
    refused), so a crash in between tells recover the old and new oid."""
    return project.repo.parallel_dir / "merges" / f"{record['run_id']}.intent.json"


def clear_intent(project: Project, record: RunRecord) -> None:
    try:
        intent_path(project, record).unlink()
    except FileNotFoundError:
        pass
