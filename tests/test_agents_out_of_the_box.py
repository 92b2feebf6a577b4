"""Issue 47, what real agents need out of the box: an attempt that changed
nothing ends as ``no_change`` (shown everywhere, never picked); what an
agent writes only for itself (aider's ``.gitignore`` lines) never lands,
and a landed commit's subject names the task, not the command."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from conftest import git
import scenarios

PY = sys.executable

# Does the work only in the instances named in its argv ("--work 1 2"); the others change nothing.
AGENT = textwrap.dedent("""
    import os, pathlib, sys
    if os.environ["GIT_PARALLEL_INSTANCE"] in sys.argv[1:]:
        pathlib.Path("answer.txt").write_text("42\\n")
""")
GATE = "import sys\nsys.exit(0)\n"  # the base passes too: doing nothing must still not win


def test_an_attempt_that_changed_nothing_is_no_change_and_never_picked(tmp_path: Path) -> None:
    repo, gp = scenarios.project(tmp_path, GATE, agent=AGENT)
    gp("spawn", "t", "-n", "2")
    ran = gp("run", "t", "--", PY, str(tmp_path / "tools" / "agent.py"), "2")
    assert "no change" in ran.stdout  # the run's summary says so
    summary = {r["id"]: r for r in gp.json("status", "t")["run"]["instances"]}
    assert summary["1"]["status"] == "succeeded" and summary["1"]["outcome"] == "no_change"
    assert "outcome" not in summary["2"]
    assert "succeeded (no change" in gp("status", "t").stdout
    gp("check", "t")
    shown = gp.json("show", "t", "1")
    assert shown["instance"]["outcome"] == "no_change"
    assert "changed nothing" in shown["outcome"]["why"]
    picked = gp.json("pick", "t")
    [p] = picked["picks"]
    assert p["winner"]["id"] == "2"
    assert any(l["id"] == "1" and "changed nothing" in l["reason"] for l in p["losers"])
    written = gp("report", "t").stdout.split("wrote ", 1)[1].split(" (")[0].strip()
    assert 'data-role="no-change"' in Path(written).read_text()


def test_a_run_where_nothing_changed_picks_nothing(tmp_path: Path) -> None:
    repo, gp = scenarios.project(tmp_path, GATE, agent=AGENT)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "tools" / "agent.py"))
    gp("check", "t")
    refused = gp("pick", "t", code=1)
    assert "PARALLEL_DEV_SELECTION_NO_PASS" in refused.stderr and "changed nothing" in refused.stderr
    refused = gp("pick", "t", "--instance", "1", code=1)
    assert "changed nothing" in refused.stderr


# aider: edits, and appends its own lines to .gitignore (making it if there is none).
AIDER = textwrap.dedent("""
    import pathlib, sys
    pathlib.Path("answer.txt").write_text("42\\n")
    ignore = pathlib.Path(".gitignore")
    old = ignore.read_text() if ignore.exists() else ""
    ignore.write_text(old + ".aider*\\n" + "".join(l + "\\n" for l in sys.argv[1:]))
    cache = pathlib.Path(".aider.tags.cache.v4")
    cache.mkdir()
    (cache / "cache.db").write_text("tags\\n")
    pathlib.Path(".aider.chat.history.md").write_text("# aider chat\\n")
""")
ANSWERED = "import pathlib, sys\nsys.exit(0 if pathlib.Path('answer.txt').read_text() == '42\\n' else 1)\n"


@pytest.mark.parametrize("had_ignore", [True, False])
def test_aiders_gitignore_lines_never_land(tmp_path: Path, had_ignore: bool) -> None:
    files = {"README.md": "hello\n", **({".gitignore": "build/\n"} if had_ignore else {})}
    repo, gp = scenarios.project(tmp_path, ANSWERED, agent=AIDER, files=files)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "tools" / "agent.py"))
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    landed = git(repo, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert "answer.txt" in landed and not any(f.startswith(".aider") for f in landed)
    if had_ignore:
        assert git(repo, "show", "main:.gitignore") == "build/"
    else:
        assert ".gitignore" not in landed
    # The one landed commit names the task, not the command.
    subject = git(repo, "log", "-1", "--format=%s", "main")
    assert subject == "t (git-parallel winner 1)", subject
    assert "agent.py" not in subject


def test_a_gitignore_change_of_the_tasks_own_is_kept(tmp_path: Path) -> None:
    repo, gp = scenarios.project(tmp_path, ANSWERED, agent=AIDER, files={"README.md": "hi\n", ".gitignore": "build/\n"})
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "tools" / "agent.py"), "dist/")
    head = scenarios.stored_record(repo)["instances"][0]["head"]
    assert git(repo, "show", f"{head}:.gitignore") == "build/\n.aider*\ndist/".strip()
