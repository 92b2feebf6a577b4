"""``git parallel diff``: each attempt's change against the base (``--stat`` a
side-by-side table), or with two ids the diff between those attempts."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.shapes.records import Base
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.view import RunView, attempt_of, changes_between, open_view


class Diffed(TypedDict):
    """``diff``'s result.  ``mode`` "base": each attempt's change against the
    base (its files, lines added and removed, its patch unless ``stat``)
    and a table of the files any of them changed; "between": the change
    from the first attempt to the second (``files``, ``added``,
    ``removed``, ``patch``)."""

    task: str
    run_id: str
    base: Base
    stat: bool
    shared: bool
    mode: str
    attempts: list[dict[str, Any]]
    files: list[Any]
    added: NotRequired[int]
    removed: NotRequired[int]
    patch: NotRequired[str]


def diff(project: Project, task: str, ids: list[str] | None = None, stat: bool = False) -> Diffed:
    """Each attempt's change against the base; with two ids, between them."""
    view = open_view(project, task)
    record = view.record
    insts = [view.instance(i) for i in ids] if ids else list(record["instances"])
    base = record["base"]["commit"]
    if ids and len(ids) == 2:
        a, b = (attempt_of(view, i) for i in insts)
        _need_commits(view, [a, b])
        changed = changes_between(view.repo, a["commit"], b["commit"], not stat)
        between: Diffed = {"task": task, "run_id": record["run_id"], "base": record["base"], "stat": stat,
                           "shared": view.shared, "mode": "between", "attempts": [a, b], "files": changed["files"],
                           "added": changed["added"], "removed": changed["removed"]}
        if "patch" in changed:
            between["patch"] = changed["patch"]
        return between
    attempts = []
    for inst in insts:
        row = attempt_of(view, inst)
        if row["commit"] is None:
            row.update(files=[], added=0, removed=0, missing=True)
        else:
            row.update(changes_between(view.repo, base, row["commit"], not stat), missing=False)
        attempts.append(row)
    return {"task": task, "run_id": record["run_id"], "base": record["base"], "stat": stat, "shared": view.shared,
            "mode": "base", "attempts": attempts, "files": _file_table(attempts)}


def _need_commits(view: RunView, attempts: list[dict[str, Any]]) -> None:
    for a in attempts:
        if a["commit"] is None:
            raise ParallelError(
                E.BRANCH_NOT_FOUND, f"the commit of instance {a['id']} is not in this repository",
                hint="`git parallel fetch` brings the archive and evidence refs of a teammate's run")


def _file_table(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per file changed by any attempt: what each did to it."""
    paths = sorted({f["path"] for a in attempts for f in a["files"]})
    rows = []
    for path in paths:
        cells = {}
        for a in attempts:
            hit = next((f for f in a["files"] if f["path"] == path), None)
            cells[a["id"]] = hit and {k: hit[k] for k in ("status", "added", "removed", "binary")}
        rows.append({"path": path, "attempts": cells})
    return rows


