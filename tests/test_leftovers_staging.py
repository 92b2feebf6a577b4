"""What an agent leaves uncommitted is staged by git in a fence like its
own once its fence has closed (``leftovers.fenced_stager``), and only when
libgit2 (which runs no filter) sees anything to commit: an agent that
committed its work costs one sandbox start, not two.  Each such staging
says so in an ``engine_staged`` event naming the layers that held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import git
from hostile import status
from test_hostile import project
from test_sandbox import LAYERS, fenced

# Tracked and untracked changes, scratch of the default list, and a file
# .gitignore keeps out.
LEAVES = ("echo changed > app.py && mkdir -p src/__pycache__ .claude && echo new > src/new.py && "
          "echo cache > src/__pycache__/m.pyc && echo chat > .claude/chat && "
          "echo 'ignored.log' >> .gitignore && echo log > ignored.log")


def runner_events(gp: object, name: str) -> list[dict[str, object]]:
    """The runner's own events of instance 1 named ``name``."""
    events = Path(status(gp, "t")["1"]["events"])  # type: ignore[arg-type]
    own = events.with_name(events.name.removesuffix(".jsonl") + ".engine.jsonl")
    return [e for e in map(json.loads, own.read_text().splitlines()) if e["event"] == name]


@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_that_committed_its_work_starts_no_second_sandbox(tmp_path: Path, layer: str) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo changed > app.py && git commit -qam work", env=fenced(layer))
    assert runner_events(gp, "engine_dispatched"), "no runner events to look at"
    assert runner_events(gp, "engine_staged") == [], "a sandbox was started to stage a clean worktree"
    assert git(repo, "log", "-1", "--format=%s", "parallel/t/1") == "work"


@pytest.mark.parametrize("layer", LAYERS)
def test_what_an_agent_left_is_staged_in_a_fence_scratch_left_out(tmp_path: Path, layer: str) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", LEAVES, env=fenced(layer))
    [staged] = runner_events(gp, "engine_staged")
    assert staged["sandbox"] == layer and staged["layers"], staged
    files = set(git(repo, "ls-tree", "-r", "-z", "--name-only", "parallel/t/1").split("\0"))
    assert {"src/new.py", ".gitignore"} <= files, files
    assert not {"src/__pycache__/m.pyc", ".claude/chat", "ignored.log"} & files, files
    assert "changed" in git(repo, "show", "parallel/t/1:app.py")
