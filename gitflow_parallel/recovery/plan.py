"""The order recover's repairs run in, and their application: git-side steps
by phase, then every record change in one store update, then the missing
notes in one notes commit, then the files that only described an unfinished
step; each step is logged to the run's audit file as it completes.
"""

from __future__ import annotations

from pathlib import Path

from gitflow_parallel.model import RunRecord
from gitflow_parallel.files import append_jsonl, utcnow
from gitflow_parallel.state.project import Project
from gitflow_parallel.recovery.scan import Repair, Scan, missing_notes


AUDIT_SCHEMA = 1
ORIGIN = "git-parallel recover"


def audit_path(project: Project, run_id: str) -> Path:
    return project.repo.parallel_dir / "audit" / f"{run_id}.jsonl"


def audit(project: Project, run_id: str, rid: str, record: RunRecord | None, task: str, action: str,
           **fields: object) -> None:
    append_jsonl(audit_path(project, run_id), {
        "schema_version": AUDIT_SCHEMA, "origin": ORIGIN, "recovery_id": rid, "run_id": run_id, "task": task,
        "run_revision": record["run_revision"] if record else fields.pop("run_revision", None),
        "action": action, "at": utcnow(), **fields,
    })


def in_order(repairs: list[Repair]) -> list[Repair]:
    """The order ``apply_repairs`` completes (and logs) the steps in: git-only steps
    by phase, then those that change the record, the notes, and last the
    files removed once the record no longer needs them."""
    def key(r: Repair) -> tuple[int, int]:
        if r.after is not None:
            return (3, 0)
        if r.step == "write_notes":
            return (2, 0)
        if r.record is not None:
            return (1, 0)
        return (0, r.phase)
    return sorted(repairs, key=key)


def apply_repairs(project: Project, record: RunRecord, rid: str, repairs: list[Repair]) -> list[dict[str, object]]:
    task, run_id = record["task"], record["run_id"]
    started = record  # every line of this recovery names the revision it started from
    done: list[dict[str, object]] = []

    def log(r: Repair, **extra: object) -> None:
        entry = {**r.as_json(), **extra}
        done.append(entry)
        audit(project, run_id, rid, started, task, "repaired", **entry)

    for r in sorted((r for r in repairs if r.git is not None), key=lambda r: r.phase):
        assert r.git is not None
        r.git()
        if r.record is None:
            log(r)
    recorded = [r for r in repairs if r.record is not None]
    if recorded:
        def mutate(rec: RunRecord) -> None:
            for r in recorded:
                assert r.record is not None
                r.record(rec)

        new, _ = project.store.update(task, mutate, expected_revision=record["run_revision"])
        for r in recorded:
            log(r, run_revision_after=new["run_revision"])
        record = new
    scan = Scan(project)
    missing = missing_notes(scan, record)
    if missing:
        oid = project.add_notes(record, [(n.commit, n.line) for n in missing], f"recover {rid}")
        note_step = next((r for r in repairs if r.step == "write_notes"), None) or Repair(
            "write_notes", f"write {len(missing)} note line(s) in one notes commit",
            "the repairs above changed what the records say")
        note_step.details = {"lines": [n.label for n in missing], "notes_commit": oid}
        log(note_step)
    for r in repairs:
        if r.after is not None:
            r.after()
            log(r)
    return done
