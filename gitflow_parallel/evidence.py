"""Evidence packs: what a check proved, bound to one exact commit and tree.

A pack is a JSON file under ``<common dir>/parallel/evidence/<run_id>/``,
one per instance and attempt, written atomically; its sha256 is kept in the
run record.  A pack counts only while it is *fresh*: its bytes still match
that sha256, it names the instance's current attempt, the run's frozen
config, and the commit the instance branch points at now.  Anything else is
stale (``PARALLEL_EVIDENCE_MISMATCH``) or missing (``PARALLEL_EVIDENCE_MISSING``)
wherever it is read: status, pick, merge, the hooks and validate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

from gitflow_parallel import errors as E
from gitflow_parallel.files import atomic_write, sha256_bytes, sha256_file
from gitflow_parallel.model import EvidenceBinding, InstanceRecord, RunRecord, binding_of
from gitflow_parallel.shapes.pack import EvidencePack
from gitflow_parallel.shapes.results import Held

SCHEMA_VERSION = 1
ORIGIN = "git-parallel"


def pack_path(parallel_dir: Path, run_id: str, inst_id: str, attempt: int) -> Path:
    return parallel_dir / "evidence" / run_id / f"{inst_id}.{attempt}.json"


def dumps(pack: Mapping[str, object]) -> bytes:
    # ASCII with escapes: a file name that is not UTF-8 (a surrogate escape)
    # must still be representable.
    return (json.dumps(pack, sort_keys=True, indent=2) + "\n").encode("utf-8")


def write(parallel_dir: Path, pack: EvidencePack) -> EvidenceBinding:
    """Write a pack; returns the binding kept in the record ({path, sha256})."""
    path = pack_path(parallel_dir, pack["run_id"], pack["instance"], pack["attempt"])
    data = dumps(pack)
    atomic_write(path, data)
    return {"path": str(path), "sha256": sha256_bytes(data)}


@dataclass
class Freshness:
    state: str  # "fresh", "stale", "missing" or "none" (never checked)
    pack: dict[str, Any] | None
    code: str | None
    reason: str

    @property
    def fresh(self) -> bool:
        return self.state == "fresh"

    @property
    def passing(self) -> bool:
        return self.fresh and self.pack is not None and self.pack.get("verdict") == "pass" and bool(self.pack.get("complete"))


def load(inst: InstanceRecord) -> dict[str, Any] | None:
    """The instance's pack, or None if absent or not matching its sha256."""
    binding = inst.get("evidence")
    if not binding:
        return None
    path = Path(binding.get("path", ""))
    try:
        if sha256_file(path) != binding.get("sha256"):
            return None
        pack = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return pack if isinstance(pack, dict) else None


def tampered_while_judged(pack: Mapping[str, Any] | None) -> str | None:
    """What the attempt's code changed, while a gate (or the setup before
    it) ran, that no command may change (restored, its gate failed with
    ``PARALLEL_AGENT_TAMPERED``), in words; None when it changed nothing."""
    said: dict[str, list[str]] = {}
    for g in (pack or {}).get("gates") or []:
        if g.get("code") == E.AGENT_TAMPERED:
            what = str(g.get("error") or "").removeprefix(f"{E.AGENT_TAMPERED}: ")
            said.setdefault(what, []).append(str(g["name"]))
    return "; ".join(f"while gate {', '.join(names)} ran: {what}" for what, names in said.items()) or None


def freshness(record: RunRecord, inst: InstanceRecord, tip: str | None,
              loader: Callable[[InstanceRecord], dict[str, Any] | None] = load) -> Freshness:
    """Judge the instance's evidence against ``tip``, its branch's commit now.

    ``loader`` finds the pack (a clone that fetched the run reads it from its
    evidence ref; it must check the bytes against the sha256 as ``load`` does)."""
    if not inst.get("evidence"):
        return Freshness("none", None, E.EVIDENCE_MISSING, "never checked")
    pack = loader(inst)
    if pack is None:
        return Freshness("missing", None, E.EVIDENCE_MISSING,
                         "the evidence pack is gone or its bytes no longer match the sha256 in the record")
    checks = (
        (pack.get("run_id") == record["run_id"], "it belongs to another run"),
        (pack.get("instance") == inst["id"], "it belongs to another instance"),
        (pack.get("attempt") == inst["attempt"], f"it is for attempt {pack.get('attempt')}, the instance is on {inst['attempt']}"),
        (pack.get("config_sha256") == record["config_sha256"], "it was made under another configuration"),
        (pack.get("instance_revision") == binding_of(inst).get("instance_revision", pack.get("instance_revision")),
         "it was made at another instance revision"),
        (tip is not None and pack.get("commit") == tip,
         f"it proves {str(pack.get('commit'))[:12]}, the branch is at {str(tip)[:12]}"),
    )
    for ok, why in checks:
        if not ok:
            return Freshness("stale", pack, E.EVIDENCE_MISMATCH, why)
    return Freshness("fresh", pack, None, "bound to the branch tip")


# -- the sandbox layers that held (``status``, ``show``) ------------------------------------
# The most of the runner's events file read for its dispatch line (written first).
_EVENTS_HEAD = 1 << 20


def engine_copy(events: Path) -> Path:
    """The runner's own copy of its events about an attempt, beside the
    attempt's events file (``<id>.<attempt>.engine.jsonl``): the agent
    writes that file, never this one, so what it says of the fence is the
    runner's word."""
    return events.with_name(events.name.removesuffix(".jsonl") + ".engine.jsonl")


def layers_held(inst: InstanceRecord, pack: Mapping[str, object] | None) -> Held:
    """What ``status`` and ``show`` say of the sandbox of an attempt."""
    gates = pack.get("layers") if pack is not None else None
    return {"agent": _agent_layers(inst),
            "gates": [str(x) for x in gates] if isinstance(gates, list) else None}


def _agent_layers(inst: InstanceRecord) -> list[str] | None:
    events = inst.get("events")
    if not events:
        return None
    try:
        with open(engine_copy(Path(events)), "rb") as handle:
            head = handle.read(_EVENTS_HEAD)
    except OSError:
        return None
    for line in head.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == "engine_dispatched" \
                and event.get("attempt") == inst["attempt"] and isinstance(event.get("layers"), list):
            return [str(x) for x in event["layers"]]
    return None


def layers_line(held: Held) -> str | None:
    """``layers: agent …; gates …`` as ``show`` and the report say it, or
    None when the attempt neither ran nor was judged here."""
    said = [f"{who} {' '.join(layers) or 'none'}" for who, layers in (("agent", held["agent"]), ("gates", held["gates"]))
            if layers is not None]
    return "layers: " + "; ".join(said) if said else None
