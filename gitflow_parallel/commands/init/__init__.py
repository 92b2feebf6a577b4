"""``git parallel init``: a configuration written from what the project is,
the notes settings, and ``init --check``: what a configuration protects.

init reads the worktree's files (``git ls-files --cached --others
--exclude-standard``) and recognises, in this order, pytest, ``npm``/``pnpm``/
``yarn test``, ``go test``, ``cargo test`` and ``make test``; the first is the
gate, the others are comments.  Its ``setup:`` builds the environment in the
judged checkout from the attempt's own files (a ``.venv``, ``node_modules``):
the ``python`` on PATH may import the main worktree's code through an
editable install, and judge that instead of the attempt.  Where the runner
takes a folder (``pytest tests``) the gate names the test folder, which
protects it (``git/scratch``); elsewhere the folders go to ``protect:``.

``--check`` explains a configuration: per gate what is protected and what
is not, and which fence keeps gates from reading the other checkouts.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TypedDict

from gitflow_parallel import config as C
from gitflow_parallel.commands.init.detect import Runner as Runner
from gitflow_parallel.commands.init.detect import detect as detect
from gitflow_parallel.commands.init.detect import project_files as project_files
from gitflow_parallel.commands.init.explain import check as check
from gitflow_parallel.commands.init.explain import fence as fence
from gitflow_parallel.commands.init.explain import landlock_abi as landlock_abi
from gitflow_parallel.commands.init.render import protected_summary as protected_summary
from gitflow_parallel.commands.init.render import render_config as render_config
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, new_file_mode
from gitflow_parallel.pysetup import SetupSpec
from gitflow_parallel.state.project import Project


class InitResult(TypedDict):
    """``init``: the file written (or kept), the git settings made, what was found."""
    config: str
    wrote: bool
    git_config: dict[str, str]
    remote: str | None
    refspecs: dict[str, list[str]] | None
    detected: list[dict[str, object]]
    gate: list[str] | None
    setup: SetupSpec | None
    protected: list[str]


# -- init ----------------------------------------------------------------------
def init(project: Project, force: bool = False, display: bool = False, remote: str | None = None) -> InitResult:
    """Write a ``.gitparallel.yaml`` for the project's test runner (the
    commented template when none is found) and set notes.rewriteRef (and,
    with ``display``, notes.displayRef: plain ``git log`` then prints every
    note); with ``remote``, add fetch refspecs for the notes and refs/parallel/."""
    top = project.repo.workdir or project.repo.main_workdir
    assert top is not None
    if remote is not None:
        from gitflow_parallel.state import share

        share.check_remote(project.repo, remote)  # before anything is written
    path = Path(top) / C.CONFIG_FILE
    runners = detect(project, Path(top))
    main = next((r for r in runners if r.run), None)
    wrote = False
    if not path.exists() or force:
        text = render_config(runners)
        C.parse(text)  # what init writes validates, or nothing is written
        atomic_write(path, text, mode=new_file_mode())  # a file of the work tree: the umask decides, as for git
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
    return {"config": str(path), "wrote": wrote, "git_config": set_keys, "remote": remote, "refspecs": refspecs,
            "detected": [asdict(r) for r in runners], "gate": main.run if main else None,
            "setup": main.setup if main else None, "protected": protected_summary(main)}
