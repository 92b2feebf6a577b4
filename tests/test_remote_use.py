"""A coordinator and workers used as a team would: the refs both sides
write stay publishable, a killed worker's clone heals itself, and a remote
failure reads as one on the coordinator.  Real git: a bare remote and
clones, workers as real processes."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import git
from test_remote import GOOD_AGENT, claim_chain, finish, remote_refs, setup_remote, spawn_published, start_worker


@pytest.mark.slow
def test_push_after_collect_pick_and_merge_push_is_not_refused(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    assert finish(start_worker(w, tmp_path, "w1", "--once", "--lease", "30"))["exit"] == 0
    gp("collect", "fx")
    ref = f"refs/parallel/evidence/{run_id}/1/0"
    # The coordinator keeps the worker's evidence commit, not a copy of it.
    assert git(coord, "rev-parse", ref) == remote_refs(origin, ref)[ref]
    gp("pick", "fx")
    out = gp.json("merge", "fx", "--push", "origin")
    assert ref not in out["push"]["kept_remote"]
    pushed = gp.json("push", "origin")
    assert pushed["remote"] == "origin"
    assert gp.json("push", "origin")["pushed"] == []  # nothing new: up to date, not refused
    # A clone that made its own copy of the worker's pack (what `collect`
    # used to leave: one pack, another commit) pushes past it.
    pack = git(coord, "rev-parse", f"{ref}:pack.json")
    tree = git(coord, "mktree", input=f"100644 blob {pack}\tpack.json\n")
    copy = git(coord, "commit-tree", tree, "-p", out["merge"]["landed"], input="a copy\n")
    git(coord, "update-ref", ref, copy)
    assert gp.json("push", "origin")["pushed"] == []
    fetched = gp.json("fetch", "origin")  # and `fetch` takes the remote's commit of it
    assert ref in fetched["updated"] and git(coord, "rev-parse", ref) == remote_refs(origin, ref)[ref]
    # Diverged for real (an archived tip rewritten here): refused, named,
    # nothing pushed, and the hint's first way out works.
    archived = f"refs/parallel/archive/{run_id}/1/0"
    assert archived in remote_refs(origin, archived)
    other = git(coord, "commit-tree", git(coord, "rev-parse", f"{archived}^{{tree}}"), input="rewritten\n")
    git(coord, "update-ref", archived, other)
    before = remote_refs(origin, "refs/")
    err = gp.json("push", "origin", code=1)
    assert err["code"] == "PARALLEL_REMOTE_DIVERGED" and archived in err["message"]
    assert remote_refs(origin, "refs/") == before
    assert err["hint"].startswith(f"keep origin's copy: `git update-ref {archived} ")
    git(coord, *err["hint"].split("`")[1].split()[1:])
    assert gp.json("push", "origin")["pushed"] == []
