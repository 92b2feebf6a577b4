"""Findings about evidence packs: one bound to the record whose bytes are
gone or changed, and one ``check`` wrote for exactly this attempt whose
binding was lost (bound again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from gitflow_parallel import errors as E
from gitflow_parallel import evidence, model
from gitflow_parallel.errors import EVIDENCE_UNBOUND, ParallelError
from gitflow_parallel.files import atomic_write
from gitflow_parallel.model import InstanceRecord, RunRecord, find_instance
from gitflow_parallel.recovery.context import RunContext
from gitflow_parallel.state import share
from gitflow_parallel.recovery.scan import ERROR, WARNING, Repair


def evidence_packs(ctx: RunContext) -> None:
    """Each instance's pack: bound and intact, bound and gone or changed, or written and never bound."""
    rec = ctx.record
    for inst in rec["instances"]:
        binding = inst.get("evidence")
        on_disk = evidence.pack_path(ctx.repo.parallel_dir, rec["run_id"], inst["id"], inst["attempt"])
        loaded = evidence.load(inst) if binding else None
        if binding and loaded is not None:
            continue
        adoptable = adoptable_pack(ctx, inst, on_disk)
        # Only to where packs live: a path the record names elsewhere is not ours to write.
        ours = binding is not None and Path(binding["path"]).resolve().is_relative_to(ctx.repo.parallel_dir.resolve())
        kept = share.kept_pack(ctx.project, rec, inst) if ours and adoptable is None else None
        if binding and kept is not None:
            restore_pack(ctx, inst, *kept)
        elif binding and loaded is None and adoptable is None:
            ctx.add(E.EVIDENCE_MISMATCH, ERROR,
                    f"the evidence pack of instance {inst['id']} ({binding.get('path')}) is gone or its bytes "
                    f"no longer match the sha256 in the record",
                    fix=_lost_pack_fix(ctx.task, inst), instance=inst["id"])
        elif adoptable is not None:
            bind_pack(ctx, inst, on_disk, *adoptable, rebind=bool(binding))
        elif on_disk.exists() and not binding and inst["status"] == "succeeded" and not inst.get("removed"):
            ctx.add(EVIDENCE_UNBOUND, WARNING,
                    f"instance {inst['id']} has an evidence pack ({on_disk}) that was never bound to the record "
                    "(the check was interrupted) and no longer matches the instance",
                    fix=f"git parallel check {ctx.task} --instance {inst['id']}", instance=inst["id"])


def _lost_pack_fix(task: str, inst: InstanceRecord) -> str:
    """A command that makes progress past a pack no copy is left of: judge
    the attempt again, or start it again; a removed attempt's pack is history."""
    if inst.get("removed"):
        return f"nothing to run: instance {inst['id']} was removed, its pack only described it (git parallel status {task})"
    if inst["status"] == "succeeded":
        return f"git parallel check {task} --instance {inst['id']}"
    return f"git parallel retry {task} {inst['id']}"


def restore_pack(ctx: RunContext, inst: InstanceRecord, commit: str, data: bytes) -> None:
    """The finding whose repair writes the bound pack's bytes back from
    its copy on the evidence ref (the sha256 the record holds proves them)."""
    binding = inst["evidence"]
    assert binding is not None
    path = Path(binding["path"])
    ref = share.evidence_ref(ctx.run_id, inst["id"], inst["attempt"])

    def write() -> None:
        atomic_write(path, data)

    ctx.add(E.EVIDENCE_MISMATCH, ERROR,
            f"the evidence pack of instance {inst['id']} ({path}) is gone or its bytes no longer match the sha256 "
            f"in the record; {ref} keeps a copy with that sha256",
            instance=inst["id"],
            repair=Repair("restore_evidence", f"restore {path.name} of instance {inst['id']} from {ref} ({commit[:12]})",
                          "its sha256 is the one the record binds: the same bytes `check` wrote",
                          git=write, details={"instance": inst["id"], "path": str(path), "ref": ref,
                                              "commit": commit, "sha256": binding["sha256"]}))


def adoptable_pack(ctx: RunContext, inst: InstanceRecord, path: Path) -> tuple[dict[str, Any], bytes] | None:
    """A pack `check` wrote for exactly this attempt, revision and tip,
    whose binding was lost: the record write that should have followed it."""
    if inst["status"] != "succeeded" or inst.get("removed") or not path.is_file():
        return None
    try:
        data = path.read_bytes()
        pack = json.loads(data)
    except (OSError, ValueError):
        return None
    st = ctx.states.get(inst["id"])
    ok = (isinstance(pack, dict) and pack.get("origin") == evidence.ORIGIN
          and pack.get("run_id") == ctx.run_id and pack.get("instance") == inst["id"]
          and pack.get("attempt") == inst["attempt"] and pack.get("config_sha256") == ctx.record["config_sha256"]
          and pack.get("instance_revision") == inst["instance_revision"]
          and st is not None and st.tip is not None and pack.get("commit") == st.tip
          and pack.get("verdict") in ("pass", "fail"))
    return (pack, data) if ok else None


def bind_pack(ctx: RunContext, inst: InstanceRecord, path: Path, pack: dict[str, Any], data: bytes, rebind: bool) -> None:
    """The finding whose repair binds ``pack`` (the bytes ``data`` at ``path``) to ``inst``."""
    sha = hashlib.sha256(data).hexdigest()
    inst_id, revision = inst["id"], inst["instance_revision"]

    def record(rec: RunRecord) -> None:
        i = find_instance(rec, inst_id)
        if i["instance_revision"] != revision:
            raise ParallelError(E.RUN_REVISION_CONFLICT, f"instance {inst_id} changed during recovery",
                                hint=f"run `git parallel recover {ctx.task}` again")
        model.bind_evidence(i, {"path": str(path), "sha256": sha}, pack)
        model.bump(i)

    if not ctx.noted(pack["commit"], {"kind": "evidence", "instance": inst_id, "evidence_sha256": sha}):
        ctx.will_note.append(f"evidence of {inst_id} on {pack['commit'][:12]}, once bound")
    message = (f"the evidence pack of instance {inst_id} for {pack['commit'][:12]} was written but "
               + ("the record still binds the pack it replaced" if rebind else "never bound to the record")
               + " (the check was interrupted)")
    ctx.add(EVIDENCE_UNBOUND, ERROR, message, instance=inst_id,
            repair=Repair("bind_evidence", f"bind {path.name} ({pack['verdict']}) to instance {inst_id}",
                          "it was made by `git parallel check` for this exact attempt, revision and tip",
                          record=record, details={"instance": inst_id, "path": str(path), "sha256": sha,
                                                  "verdict": pack["verdict"]}))
