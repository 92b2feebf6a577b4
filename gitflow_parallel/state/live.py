"""The live index, ``parallel/live``: the live base refs and instance branches,
one line each, that the hooks read on every ref update without loading a
record.  Written by ``state/store`` (``Store.write_live_index``, under the
project lock) and read here; standard library only, so the hooks stay fast."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path



# -- the live index ------------------------------------------------------------------
@dataclass
class LiveRun:
    """One live run as ``parallel/live`` lists it (see ``Store.write_live_index``)."""

    run_id: str
    task: str
    base_ref: str
    base_commit: str | None
    branches: dict[str, str] = field(default_factory=dict)  # full ref -> instance id


def read_live(parallel_dir: Path) -> dict[str, LiveRun]:
    """The live runs by run id; empty when there is no index."""
    try:
        text = (parallel_dir / "live").read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    runs: dict[str, LiveRun] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0] == "base":
            run = runs.setdefault(parts[3], LiveRun(parts[3], parts[2], parts[1], None))
            run.base_ref, run.task = parts[1], parts[2]
            run.base_commit = parts[4] if len(parts) > 4 else None
        elif len(parts) >= 5 and parts[0] == "branch":
            run = runs.setdefault(parts[3], LiveRun(parts[3], parts[2], "", None))
            run.branches[parts[1]] = parts[4]
    return runs
