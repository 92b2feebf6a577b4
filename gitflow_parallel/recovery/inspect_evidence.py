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
from gitflow_parallel.model import InstanceRecord, RunRecord, find_instance
from gitflow_parallel.recovery.context import RunContext
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
        if binding and loaded is None and adoptable is None:
            ctx.add(E.EVIDENCE_MISMATCH, ERROR,
                    f"the evidence pack of instance {inst['id']} ({binding.get('path')}) is gone or its bytes "
                    f"no longer match the sha256 in the record",
                    fix=(f"git parallel check {ctx.task} --instance {inst['id']}" if inst["status"] == "succeeded"
                         and not inst.get("removed") else "restore the pack from a backup"),
                    instance=inst["id"])
        elif adoptable is not None:
            bind_pack(ctx, inst, on_disk, *adoptable, rebind=bool(binding))
        elif on_disk.exists() and not binding and inst["status"] == "succeeded" and not inst.get("removed"):
            ctx.add(EVIDENCE_UNBOUND, WARNING,
                    f"instance {inst['id']} has an evidence pack ({on_disk}) that was never bound to the record "
                    "(the check was interrupted) and no longer matches the instance",
                    fix=f"git parallel check {ctx.task} --instance {inst['id']}", instance=inst["id"])


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
