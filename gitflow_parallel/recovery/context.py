"""What every check of one run shares (``RunContext``): the record, the
worktrees as found, the findings so far and the note lines repairs will
make due.  The checks themselves are plain functions taking it, one module
per concern (``inspect_spawn``, ``inspect_instances``, ``inspect_evidence``,
``inspect_landing``), called in order by ``inspection.inspect_run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import pygit2

from gitflow_parallel.git.repo import Repo
from gitflow_parallel.model import FINISHED_RUN, InstanceRecord, RunRecord
from gitflow_parallel.recovery.gitwork import only_files_of
from gitflow_parallel.recovery.scan import Finding, Repair, Scan, WorktreeState, recovery_id
from gitflow_parallel.state.project import Project


@dataclass
class RunContext:
    """The state shared by the checks of one run; ``rid`` names the recovery they would belong to."""

    scan: Scan
    record: RunRecord
    project: Project = field(init=False)
    repo: Repo = field(init=False)
    task: str = field(init=False)
    run_id: str = field(init=False)
    rid: str = field(init=False)
    live: bool = field(init=False)
    states: dict[str, WorktreeState] = field(init=False)
    findings: list[Finding] = field(init=False, default_factory=list)
    rolling_back: bool = field(init=False, default=False)  # a rolled-back spawn leaves no tips to note
    # Note lines that repairs will make due (a dead instance's tip once it
    # is finished, a pick or pack once bound, a landing once recorded), so
    # that the plan shows the notes step the apply will take.
    will_note: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        record, scan = self.record, self.scan
        self.project = scan.project
        self.repo = scan.repo
        self.task = record["task"]
        self.run_id = record["run_id"]
        self.rid = recovery_id(self.run_id, record["run_revision"])
        self.live = record["status"] not in FINISHED_RUN
        self.states = {i["id"]: scan.worktree(self.task, i) for i in record["instances"] if not i.get("removed")}

    def add(self, code: str, severity: str, message: str, fix: str | None = None, instance: str | None = None,
            repair: Repair | None = None, refusal: str | None = None) -> None:
        if fix is None:
            fix = f"git parallel recover {self.task}" if repair else f"git parallel status {self.task}"
        self.findings.append(Finding(code, severity, message, fix, self.task, self.run_id, instance, repair, refusal))

    def noted(self, commit: str, key: Mapping[str, object]) -> bool:
        """Is there a line of this run on ``commit`` sharing every field of ``key``?"""
        have = self.scan.notes_on(self.record["config"]["notes_ref"], commit)
        return any(h.get("run_id") == self.run_id and all(h.get(k) == v for k, v in key.items()) for h in have)

    def describe_missing(self, inst: InstanceRecord) -> str:
        st = self.states[inst["id"]]
        parts = []
        if st.tip is None:
            parts.append(f"branch {inst['branch']}")
        if not st.path_exists:
            parts.append(f"worktree folder {st.path}")
        elif not st.linked:
            parts.append(f"worktree link ({st.path}/.git <-> {st.admin})")
        elif not st.index_ok:
            parts.append(f"worktree index ({st.admin}/index: the checkout did not finish)")
        if st.path_exists and st.linked and not st.head_ok:
            parts.append(f"worktree HEAD on {inst['branch']}")
        return ", ".join(parts) or "worktree"


def partial_refusal(st: WorktreeState, tree: pygit2.Tree | None) -> str | None:
    """Why the half-made folder ``st.path`` cannot be removed, or None."""
    path: Path = st.path
    if not st.path_exists:
        return None
    if path.is_symlink() or not path.is_dir():
        return f"{path} is not a folder git-parallel made"
    foreign = only_files_of(path, tree)
    if foreign:
        shown = ", ".join(foreign[:5]) + (" …" if len(foreign) > 5 else "")
        return f"{path} holds files that are not in the commit ({shown}); removing it could lose work"
    return None
