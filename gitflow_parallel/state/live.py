"""The live index, ``parallel/live``: the live base refs and instance branches,
one line each, that the hooks read on every ref update without loading a
record.  This module owns the format, its writing and its reading;
``Store.write_live_index`` decides which records it holds (under the project
lock).  Standard library only, so the hooks stay fast.

One line per live base ref and per instance branch, fields separated by
single spaces (no field can hold one: refs, task names, run ids, statuses
and oids never do)::

    base <base ref> <task> <run_id> <base commit>
    branch refs/heads/parallel/<task>/<id> <task> <run_id> <id> <track>
    lost <base ref> <task> <run_id> <patch-id> <id> <head> <commit>
    done <base ref> <task> <run_id> <status> [<landed commit> ...]

A ``lost`` line is the ``git patch-id --stable`` of a change of an attempt
that lost its track's pick: of each of its commits (``<commit>``) and of its
whole change from the base (``<commit>`` is its ``<head>``, what a squash
commits), but for patch-ids the winner's work has too.  The hooks refuse a
commit onto the base with that patch (a cherry-pick, a squash); they are
computed once per loser's head (``<head>`` names which; the next write
keeps them).

A ``done`` line says the run is finished (``<status>``: merged or aborted):
every attempt of it that did not land is a loser, refused until the run is
pruned.  Its lines stay while some of its instances keep their branches
(kept losers, a refused cleanup) or while its archive refs
(``refs/parallel/archive/<run_id>/…``) are there, which ``prune`` deletes;
the ``<landed commit>`` fields, none for an aborted run, are the landing and
each track's picked commit: what is in their history landed.  Every
instance of an aborted run is a loser, with its ``lost`` lines.  A finished
run with no branch left whose attempts made no commit that did not land has
no line.

The hooks' sh reads the first two fields of each line (lines starting with
``#`` match no kind); their Python reads the rest (``read_live``), so
deciding that a ref update brings in no instance commit needs neither YAML
nor pygit2.  No live run and no finished one unpruned is no file: the
hooks' cheapest "nothing to do"."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from gitflow_parallel.model import InstanceRecord, RunRecord

HEADER = ("# git-parallel live index v1: base REF TASK RUN_ID BASE_COMMIT | branch REF TASK RUN_ID INSTANCE TRACK"
          " | lost REF TASK RUN_ID PATCH_ID INSTANCE HEAD COMMIT | done REF TASK RUN_ID STATUS [LANDED ...]")
KINDS = ("base", "branch", "lost", "done")


# -- writing -----------------------------------------------------------------------
def run_lines(record: RunRecord, finished: bool, previous: list[str] | None = None,
              git_dir: Path | None = None, archived: Callable[[str], bool] = lambda run_id: False) -> list[str]:
    """The lines of one run: its base, each instance branch, and the patches
    of the attempts that lost a pick (with ``git_dir``; ``previous``: the
    run's lines in the index now, whose patch-ids are kept for an unmoved
    head).  A finished run lists only the instances not yet removed, and a
    ``done`` line; once every instance is removed, it has no line at all
    when no attempt of it that did not land made a commit, or when
    ``archived(run_id)`` says its archive refs are gone (pruned)."""
    insts = record["instances"]
    kept = [i for i in insts if not i.get("removed")] if finished else insts
    landed = _landed(record) if finished else []
    if finished and not kept:
        if not any(_loser_head(record, i, landed) for i in insts) or not archived(record["run_id"]):
            return []
    task, run_id = record["task"], record["run_id"]
    lines = [f"base {record['base']['ref']} {task} {run_id} {record['base']['commit']}"]
    lines += [f"branch refs/heads/{i['branch']} {task} {run_id} {i['id']} {i['track']}" for i in kept]
    if git_dir is not None:
        lines += _lost_lines(record, insts, previous or [], git_dir)
    if finished:
        lines.append(" ".join(["done", record["base"]["ref"], task, run_id, record["status"], *landed]))
    return lines


def _landed(record: RunRecord) -> list[str]:
    """What of a finished run landed: the landing and each track's picked
    commit (none for an aborted run)."""
    merge = record.get("merge")
    if record["status"] != "merged" or not merge:
        return []
    heads = {i["id"]: i.get("head") for i in record["instances"]}
    picked = [p.get("commit") or heads.get(p["winner"]) for p in (record.get("picks") or {}).values()]
    return sorted({merge["landed"], *(c for c in picked if c)})


def _loser_head(record: RunRecord, inst: InstanceRecord, landed: list[str]) -> bool:
    """Did this attempt, or an earlier one of the instance, make a commit that did not land?"""
    heads = {inst.get("head")} | {h.get("head") for h in inst.get("history") or []}
    return bool(heads - {None, record["base"]["commit"], *landed})


def _lost_lines(record: RunRecord, insts: list[InstanceRecord], previous: list[str],
                git_dir: Path) -> list[str]:
    """``lost`` lines for each loser of a picked track, and for every
    instance of an aborted run (see the module docstring)."""
    from gitflow_parallel.git import plain

    kept: dict[tuple[str, str], list[str]] = {}
    for line in previous:
        parts = line.split()
        if len(parts) == 8 and parts[0] == "lost":
            kept.setdefault((parts[5], parts[6]), []).append(line)
    base, prefix = record["base"]["commit"], f"lost {record['base']['ref']} {record['task']} {record['run_id']}"
    # An aborted run landed nothing: every track's attempts lost, a pick or not.
    picked = {t: b["winner"] for t, b in (record.get("picks") or {}).items()}
    winners: dict[str, str | None] = dict.fromkeys(record["tracks"]) if record["status"] == "aborted" else dict(picked)
    out: list[str] = []
    for track, winner_id in sorted(winners.items()):
        mine = [(i, head) for i in insts if i["track"] == track and (head := i.get("head")) and head != base]
        winner = next(((i, head) for i, head in mine if i["id"] == winner_id), None)
        theirs = set(_patches(plain, base, winner[1], git_dir)) if winner else set()
        for inst, head in mine:
            if winner is not None and inst is winner[0]:
                continue
            found = kept.get((inst["id"], head))
            if found is None:
                found = [f"{prefix} {pid} {inst['id']} {head} {commit}"
                         for pid, commit in _patches(plain, base, head, git_dir).items() if pid not in theirs]
            out += found
    return out


def _patches(plain: ModuleType, base: str, head: str, git_dir: Path) -> dict[str, str]:
    """patch-id -> commit for each commit base..head, and for the whole change (named by head)."""
    found = {pid: commit for commit, pid in plain.patch_ids(plain.commits_between(base, head, git_dir), git_dir).items()}
    whole = plain.range_patch_id(base, head, git_dir)
    if whole:
        found.setdefault(whole, head)
    return found


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def lines_by_task(text: str) -> dict[str, list[str]]:
    """The index's run lines grouped by task (to keep those not recomputed)."""
    return _grouped(text, 2)


def lines_by_run(text: str) -> dict[str, list[str]]:
    """The index's run lines grouped by run id."""
    return _grouped(text, 3)


def _grouped(text: str, field: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[0] in KINDS:
            out.setdefault(parts[field], []).append(line)
    return out


def is_finished(lines: list[str]) -> bool:
    """Do a run's lines say it is finished (a ``done`` line)?"""
    return any(line.startswith("done ") for line in lines)


def archived_runs(git_dir: Path) -> set[str]:
    """The run ids that still have archive refs (``prune`` deletes them)."""
    from gitflow_parallel.git import plain

    return plain.archived_runs(git_dir)


def write(path: Path, lines: list[str], previous_text: str | None) -> None:
    """Write the index (atomically), or remove it when no run is live; left
    alone when the text would not change, so most record writes cost no
    second fsync."""
    from gitflow_parallel.files import atomic_write

    if not lines:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    text = "\n".join([HEADER, *lines]) + "\n"
    if previous_text == text:
        return
    atomic_write(path, text)


# -- the live index ------------------------------------------------------------------
@dataclass
class LiveRun:
    """One live run as ``parallel/live`` lists it (see ``Store.write_live_index``)."""

    run_id: str
    task: str
    base_ref: str
    base_commit: str | None
    branches: dict[str, str] = field(default_factory=dict)  # full ref -> instance id
    lost: dict[str, tuple[str, str]] = field(default_factory=dict)  # patch-id -> (instance id, commit)
    finished: str | None = None  # "merged" or "aborted": a ``done`` line (every attempt that did not land lost)
    landed: list[str] = field(default_factory=list)  # of a merged run: what landed (its history is no loser's)


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
        elif len(parts) == 8 and parts[0] == "lost":
            run = runs.setdefault(parts[3], LiveRun(parts[3], parts[2], parts[1], None))
            run.lost.setdefault(parts[4], (parts[5], parts[7]))
        elif len(parts) >= 5 and parts[0] == "done":
            run = runs.setdefault(parts[3], LiveRun(parts[3], parts[2], parts[1], None))
            run.finished, run.landed = parts[4], parts[5:]
    return runs
