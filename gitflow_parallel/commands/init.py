"""``git parallel init``: the commented configuration and the notes settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any


from gitflow_parallel import config as C
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write
from gitflow_parallel.state.project import Project


# -- init ----------------------------------------------------------------------
def init(project: Project, force: bool = False, display: bool = False, remote: str | None = None) -> dict[str, Any]:
    """Write a commented .gitparallel.yaml and set notes.rewriteRef (and, with
    ``display``, notes.displayRef: plain ``git log`` then prints every note);
    with ``remote``, add fetch refspecs for the notes and refs/parallel/."""
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None
    if remote is not None:
        from gitflow_parallel.git import share

        share.check_remote(project.repo, remote)  # before anything is written
    path = Path(top) / C.CONFIG_FILE
    wrote = False
    if not path.exists() or force:
        atomic_write(path, C.TEMPLATE)
        wrote = True
    notes_ref = C.DEFAULTS["notes_ref"]
    if path.exists():
        try:
            notes_ref = C.parse(path.read_bytes())["notes_ref"]
        except ParallelError:
            pass
    cfg = project.repo.main.config
    set_keys = {}
    for key in ("notes.rewriteRef", "notes.displayRef") if display else ("notes.rewriteRef",):
        values = list(cfg.get_multivar(key)) if key in cfg else []
        if notes_ref not in values:
            cfg.set_multivar(key, "^$", notes_ref)  # add without replacing others
        set_keys[key] = notes_ref
    refspecs = None
    if remote is not None:
        refspecs = share.configure_remote(project, remote, [notes_ref])
    return {"config": str(path), "wrote": wrote, "git_config": set_keys, "remote": remote, "refspecs": refspecs}
