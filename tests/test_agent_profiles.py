"""Issue 47, agent profiles: ``run`` knows the agent CLIs people run
(Claude Code, Codex CLI, aider, Gemini CLI, opencode) by their command's
name and grants each its own state folder (and the variables it needs)
without a hand-written ``sandbox_write``, saying so in its output and
events; the user's ``sandbox_write`` still adds to it."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import git
import scenarios

PY = sys.executable
GATE = "import sys\nsys.exit(0)\n"


def events(repo: Path, kind: str) -> list[dict]:
    found = []
    for path in sorted((scenarios.common(repo) / "parallel" / "events").rglob("*.jsonl")):
        found += [e for e in map(json.loads, path.read_text().splitlines()) if e.get("event") == kind]
    return found


# -- agent profiles ----------------------------------------------------------------------------
def test_profiles_are_recognised_from_the_commands_name(tmp_path: Path) -> None:
    from gitflow_parallel import profiles

    home = Path(os.environ["HOME"])
    assert profiles.recognise(["/usr/local/bin/claude", "-p", "x"]).name == "claude"
    assert profiles.recognise(["codex", "exec", "x"]).name == "codex"
    assert profiles.recognise(["aider", "--yes"]).name == "aider"
    assert profiles.recognise(["gemini", "-p", "x"]).name == "gemini"
    assert profiles.recognise(["opencode", "run", "x"]).name == "opencode"
    assert profiles.recognise([PY, "agent.py"]) is None
    assert profiles.recognise([]) is None
    codex = profiles.recognise(["codex", "exec"], env={})
    assert codex is not None and str(home / ".codex") in codex.writes
    codex = profiles.recognise(["codex", "exec"], env={"CODEX_HOME": str(tmp_path / "ch")})
    assert codex is not None and codex.writes == [str(tmp_path / "ch")]
    aider = profiles.recognise(["aider"], env={})
    assert aider is not None and aider.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert str(home / ".aider") in aider.writes
    kept = profiles.recognise(["aider"], env={"LITELLM_LOCAL_MODEL_COST_MAP": "False"})
    assert kept is not None and "LITELLM_LOCAL_MODEL_COST_MAP" not in kept.env  # the user's own value stands
    gemini = profiles.recognise(["gemini"], env={})
    assert gemini is not None and gemini.writes == [str(home / ".gemini")]
    opencode = profiles.recognise(["opencode"], env={})
    assert opencode is not None
    assert {str(home / ".local/share/opencode"), str(home / ".config/opencode")} <= set(opencode.writes)


def test_claude_gets_a_private_config_folder_per_run(tmp_path: Path) -> None:
    from gitflow_parallel import profiles

    home = Path(os.environ["HOME"])
    (home / ".claude").mkdir(parents=True, exist_ok=True)
    (home / ".claude.json").write_text('{"hasCompletedOnboarding": true}\n')
    (home / ".claude" / "settings.json").write_text('{"theme": "dark"}\n')
    claude = profiles.recognise(["claude", "-p", "x"], env={}, run_id="r1")
    assert claude is not None
    [folder] = claude.writes
    assert claude.env["CLAUDE_CONFIG_DIR"] == folder
    claude.prepare()
    assert (Path(folder) / ".claude.json").read_text() == '{"hasCompletedOnboarding": true}\n'
    assert (Path(folder) / "settings.json").read_text() == '{"theme": "dark"}\n'
    # The user's own CLAUDE_CONFIG_DIR is theirs: granted as it is, not copied.
    own = profiles.recognise(["claude"], env={"CLAUDE_CONFIG_DIR": str(tmp_path / "mine")}, run_id="r1")
    assert own is not None and own.writes == [str(tmp_path / "mine")] and "CLAUDE_CONFIG_DIR" not in own.env


# A stand-in for the real CLI (named like it, so its profile applies): it
# writes its state where the real one does and fails like it on EROFS.
FAKE = textwrap.dedent("""\
    #!{py}
    import os, pathlib, sys
    name = sys.argv[1].removeprefix("--as=") if sys.argv[1].startswith("--as=") else pathlib.Path(sys.argv[0]).name
    home = pathlib.Path(os.environ["HOME"])
    state = {{"claude": lambda: pathlib.Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "session-env",
             "codex": lambda: pathlib.Path(os.environ.get("CODEX_HOME") or home / ".codex") / "sessions",
             "aider": lambda: home / ".aider" / "caches",
             "gemini": lambda: home / ".gemini" / "tmp"}}[name]()
    state.mkdir(parents=True, exist_ok=True)
    (state / "x").write_text("state\\n")
    pathlib.Path("answer.txt").write_text(name + " " + os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP", "-") + "\\n")
""")


@pytest.mark.parametrize("name", ["claude", "codex", "aider"])
def test_run_grants_the_agents_own_state_folder(tmp_path: Path, name: str) -> None:
    repo, gp = scenarios.project(tmp_path, GATE, extra="sandbox_write: [~/.cache/mine]\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / name
    fake.write_text(FAKE.format(py=PY))
    fake.chmod(0o755)
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", str(fake), "go")
    assert f"agent profile {name}" in ran.stdout
    record = scenarios.stored_record(repo)
    assert record["instances"][0]["status"] == "succeeded", record["instances"][0]["error"]
    head = record["instances"][0]["head"]
    expected = f"{name} {'True' if name == 'aider' else '-'}"
    assert git(repo, "show", f"{head}:answer.txt") == expected
    dispatched = events(repo, "engine_dispatched")[-1]  # (one more where bwrap's setup was tried again)
    assert dispatched["profile"]["name"] == name
    granted = dispatched.get("sandbox_write") or []
    assert any(p.endswith("/.cache/mine") for p in granted)  # the user's own still adds to it
    assert set(dispatched["profile"]["writes"]) <= set(granted) or not granted


def test_without_a_profile_the_same_agent_cannot_write_its_state(tmp_path: Path) -> None:
    """The control: the stand-in under another name gets no profile, and
    the fence refuses its write to ~/.codex (where a sandbox is in force)."""
    repo, gp = scenarios.project(tmp_path, GATE)
    fake = tmp_path / "agent-cli"
    fake.write_text(FAKE.format(py=PY))
    fake.chmod(0o755)
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", str(fake), "--as=codex", code=None)
    assert "agent profile" not in ran.stdout
    dispatched = events(repo, "engine_dispatched")[-1]
    if dispatched.get("sandbox") in (None, "none"):
        pytest.skip("no sandbox on this machine")
    assert "profile" not in dispatched
    assert scenarios.stored_record(repo)["instances"][0]["status"] == "failed"
