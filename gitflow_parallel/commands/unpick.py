"""``git parallel unpick``: retire a track's pick record (moved to
``picks/<run_id>/retired/``, listed under ``retired_picks``) so it can be
picked again; refused once the run merged."""

from __future__ import annotations

from typing import Any, TypedDict


from gitflow_parallel import model, provenance
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.picks import refuse_closed, retire_picks



class Unpicked(TypedDict):
    """``unpick``: the picks retired (each as the run record keeps it) and the run's status now."""
    run_id: str
    task: str
    retired: list[dict[str, Any]]
    status: str
    notes_error: str | None

def unpick(project: Project, task: str, track: str | None = None) -> Unpicked:
    """Retire the pick of ``track`` (or of every picked track) before it lands."""

    check_name(task, "task")
    store = project.store
    with store.lock():
        record = store.load(task)
        refuse_closed(record, "unpick")
        if track is not None and track not in record["tracks"]:
            raise ParallelError(E.TRACK_MISMATCH, f"run {record['run_id']} has no track {track!r} "
                                f"(tracks: {', '.join(record['tracks'])})", hint="pass one of its tracks to --track")
        bound = record.get("picks") or {}
        tracks = [track] if track else [t for t in record["tracks"] if t in bound]
        if not tracks or any(t not in bound for t in tracks):
            raise ParallelError(E.NOT_PICKED, f"track {track or 'of ' + repr(task)} has no pick to retire",
                                hint=f"`git parallel status {task}` shows the picks")
        retired = retire_picks(project, record, tracks)
        record, _ = store.update(task, lambda rec: model.retire_picks(rec, retired))
    entries = [(r["commit"], provenance.unpick_note(record, r)) for r in retired if r["commit"]]
    warning = project.mirror_notes(record, entries, "unpick") if entries else None
    return {"run_id": record["run_id"], "task": task, "retired": retired, "status": record["status"],
            "notes_error": warning}
