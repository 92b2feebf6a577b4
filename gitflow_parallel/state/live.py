"""The live index, ``parallel/live``: the live base refs and instance branches,
one line each, that the hooks read on every ref update without loading a
record.  This module owns the format, its writing and its reading;
``Store.write_live_index`` decides which records it holds (under the project
lock).  Standard library only, so the hooks stay fast.

One line per live base ref and per instance branch (a finished run keeps its
lines while some of its worktrees are kept), fields separated by single
spaces (no field can hold one: refs, task names, run ids and oids never do)::

    base <base ref> <task> <run_id> <base commit>
    branch refs/heads/parallel/<task>/<id> <task> <run_id> <id> <track>
    lost <base ref> <task> <run_id> <patch-id> <id> <head> <commit>

A ``lost`` line is the ``git patch-id --stable`` of a change of an attempt
that lost its track's pick: of each of its commits (``<commit>``) and of its
whole change from the base (``<commit>`` is its ``<head>``, what a squash
commits), but for patch-ids the winner's work has too.  The hooks refuse a
commit onto the base with that patch (a cherry-pick, a squash); they are
computed once per loser's head (``<head>`` names which; the next write
keeps them).

The hooks' sh reads the first two fields of each line (lines starting with
``#`` match neither kind); their Python reads the rest (``read_live``), so
deciding that a ref update brings in no instance commit needs neither YAML
nor pygit2.  No live run at all is no file: the hooks' cheapest "nothing to
do"."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from gitflow_parallel.model import InstanceRecord, RunRecord

HEADER = ("# git-parallel live index v1: base REF TASK RUN_ID BASE_COMMIT | branch REF TASK RUN_ID INSTANCE TRACK"
          " | lost REF TASK RUN_ID PATCH_ID INSTANCE HEAD COMMIT")
KINDS = ("base", "branch", "lost")


# -- writing -----------------------------------------------------------------------
def run_lines(record: RunRecord, finished: bool, previous: list[str] | None = None,
              git_dir: Path | None = None) -> list[str]:
    """The lines of one run: its base, each instance branch, and the patches
    of the attempts that lost a pick (with ``git_dir``; ``previous``: the
    run's lines in the index now, whose patch-ids are kept for an unmoved
    head).  A finished run keeps only the instances not yet removed (kept
    losers stay guarded until cleanup: a plain ``git merge`` of one must not
    land what lost its pick), and no line at all once every one is removed."""
    insts = record["instances"]
    if finished:
        insts = [i for i in insts if not i.get("removed")]
        if not insts:
            return []
    task, run_id = record["task"], record["run_id"]
    lines = [f"base {record['base']['ref']} {task} {run_id} {record['base']['commit']}"]
    lines += [f"branch refs/heads/{i['branch']} {task} {run_id} {i['id']} {i['track']}" for i in insts]
    if git_dir is not None:
        lines += _lost_lines(record, insts, previous or [], git_dir)
    return lines


def _lost_lines(record: RunRecord, insts: list[InstanceRecord], previous: list[str],
                git_dir: Path) -> list[str]:
    """``lost`` lines for each loser of a picked track (see the module docstring)."""
    from gitflow_parallel.git import plain

    kept: dict[tuple[str, str], list[str]] = {}
    for line in previous:
        parts = line.split()
        if len(parts) == 8 and parts[0] == "lost":
            kept.setdefault((parts[5], parts[6]), []).append(line)
    base, prefix = record["base"]["commit"], f"lost {record['base']['ref']} {record['task']} {record['run_id']}"
    out: list[str] = []
    for track, bound in sorted((record.get("picks") or {}).items()):
        mine = [(i, head) for i in insts if i["track"] == track and (head := i.get("head")) and head != base]
        winner = next(((i, head) for i, head in mine if i["id"] == bound.get("winner")), None)
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
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in KINDS:
            out.setdefault(parts[2], []).append(line)
    return out


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


# -- reading -----------------------------------------------------------------------



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
    return runs
