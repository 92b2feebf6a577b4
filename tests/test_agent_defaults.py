"""Defaults that fit real agents: ``claude -p`` and ``codex exec`` never
commit and leave scratch files (aider's chat history and tag cache,
``.claude/``, ``.codex/``, ``__pycache__/``).  The leftovers commit leaves
the scratch out (``leftovers_exclude``), and a winner whose history is only
that commit lands as one commit naming the task and the agent
(``merge.squash: auto``)."""

from __future__ import annotations

import pytest

import sys
import textwrap
from pathlib import Path

from conftest import GP, git, make_repo
import scenarios

PY = sys.executable

# Does the work (answer.txt), edits a tracked settings file, and leaves what
# real agents leave for themselves; commits nothing, unless told to.
AGENT = textwrap.dedent("""
    import pathlib, subprocess, sys
    pathlib.Path("answer.txt").write_text("42\\n")
    pathlib.Path(".claude/settings.json").write_text('{"model": "changed"}\\n')
    for name in (".aider.chat.history.md", ".aider.input.history", ".aider.tags.cache.v4/cache.db",
                 ".claude/settings.local.json", ".codex/session.jsonl", "pkg/__pycache__/m.cpython-311.pyc"):
        path = pathlib.Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("scratch\\n")
    if "--commit" in sys.argv:
        subprocess.run(["git", "add", "answer.txt"], check=True)
        subprocess.run(["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com",
                        "commit", "-q", "-m", "Answer the question"], check=True)
""")
GATE = "import pathlib, sys\nsys.exit(0 if pathlib.Path('answer.txt').read_text() == '42\\n' else 1)\n"
SCRATCH = [".aider.chat.history.md", ".aider.input.history", ".aider.tags.cache.v4/cache.db",
           ".claude/settings.local.json", ".codex/session.jsonl", "pkg/__pycache__/m.cpython-311.pyc"]


def setup(tmp_path: Path, extra: str = "") -> tuple[Path, GP]:
    files = {"README.md": "hello\n", ".claude/settings.json": "{}\n", "pkg/m.py": "x = 1\n"}
    return scenarios.project(tmp_path, GATE, name="answer", extra=extra, files=files, agent=AGENT, tools=tmp_path)


def land(gp: GP, tmp_path: Path, *agent_args: str, by_hand: bool = False) -> dict:
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", PY, str(tmp_path / "agent.py"), *agent_args)
    gp("check", "t")  # the scratch left in the worktree is not "uncommitted work"
    if by_hand:  # committed bytecode is a harness file: only a person picks it
        refused = gp.json("pick", "t", code=1)
        assert refused["code"] == "PARALLEL_PROTECTED_PATH_CHANGED" and "__pycache__" in refused["message"], refused
        gp("pick", "t", "--instance", "1", "--reason", "its leftovers carry bytecode")
    else:
        gp("pick", "t")
    return gp.json("merge", "t")


def tree(repo: Path, rev: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", rev).splitlines()


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_scratch_stays_out_and_a_leftovers_only_winner_lands_as_one_commit(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    before = git(repo, "rev-parse", "main")
    merged = land(gp, tmp_path)
    assert merged["merge"]["method"] == "squash"
    landed = git(repo, "rev-parse", "main")
    assert git(repo, "rev-list", f"{before}..main").split() == [landed]  # one commit
    assert git(repo, "rev-parse", "main^") == before
    message = git(repo, "log", "-1", "--format=%B", "main")
    subject = message.splitlines()[0]
    assert subject == "t (git-parallel winner 1)"  # the task, not the command
    assert f"Agent: {Path(PY).name} agent.py" in message  # no folder of this machine
    assert "leftovers of" not in git(repo, "log", "--format=%s", "main")
    files = tree(repo, "main")
    assert "answer.txt" in files and not set(SCRATCH) & set(files)
    # A tracked file is the attempt's change, whatever its folder (as with .gitignore).
    assert git(repo, "show", "main:.claude/settings.json") == '{"model": "changed"}'
    # The winner's branch had the leftovers commit, naming the command, and no scratch.
    archived = git(repo, "for-each-ref", "--format=%(refname)", "refs/parallel/archive/").split()
    [tip] = archived
    assert f"Parallel-Command: {PY} {tmp_path / 'agent.py'}" in git(repo, "log", "-1", "--format=%B", tip)
    assert not set(SCRATCH) & set(tree(repo, tip))
    # The worktree went with its scratch: nothing was refused as uncommitted work.
    assert merged.get("cleanup_error") is None and [d["id"] for d in merged["cleanup"]["removed"]] == ["1"]


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_an_agent_that_commits_lands_as_it_committed(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    before = git(repo, "rev-parse", "main")
    merged = land(gp, tmp_path, "--commit")
    assert merged["merge"]["method"] == "fast-forward"
    subjects = git(repo, "log", "--format=%s", f"{before}..main").splitlines()
    assert subjects == ["git-parallel: leftovers of t/1, attempt 0", "Answer the question"]
    assert not set(SCRATCH) & set(tree(repo, "main"))


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_squash_false_and_an_empty_exclude_list_keep_the_old_behaviour(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, "leftovers_exclude: []\nmerge:\n  squash: false\n")
    before = git(repo, "rev-parse", "main")
    merged = land(gp, tmp_path, by_hand=True)
    assert merged["merge"]["method"] == "fast-forward"
    assert git(repo, "log", "--format=%s", f"{before}..main") == "git-parallel: leftovers of t/1, attempt 0"
    assert set(SCRATCH) <= set(tree(repo, "main"))


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_custom_exclude_list_and_bad_values(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, "leftovers_exclude: ['.aider*', '!.aider.input.history']\n")
    land(gp, tmp_path, by_hand=True)
    files = set(tree(repo, "main"))
    assert ".aider.input.history" in files and ".aider.chat.history.md" not in files  # .gitignore semantics
    assert ".codex/session.jsonl" in files  # the default list was replaced, not extended

    for bad in ("leftovers_exclude: .aider*\n", "leftovers_exclude: ['# a comment']\n", "merge:\n  squash: sometimes\n"):
        other = make_repo(tmp_path / f"bad{len(bad)}", config=bad)
        refused = GP(other).json("spawn", "t", code=1)
        assert refused["code"] == "PARALLEL_CONFIG_INVALID", refused


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_work_done_by_hand_leaves_the_scratch_out_and_says_so(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    [inst] = gp.json("spawn", "t", "-n", "1")["instances"]
    wt = Path(inst["worktree"])
    (wt / "answer.txt").write_text("42\n")
    (wt / ".aider.chat.history.md").write_text("# a person's aider session\n")
    gp("done", "t", "1")
    gp("check", "t")
    gp("pick", "t")
    assert gp.json("merge", "t")["merge"]["method"] == "squash"
    assert git(repo, "log", "-1", "--format=%s", "main") == "t (git-parallel winner 1)"
    assert "Agent: work done by hand" in git(repo, "log", "-1", "--format=%B", "main")
    assert ".aider.chat.history.md" not in tree(repo, "main") and "answer.txt" in tree(repo, "main")
