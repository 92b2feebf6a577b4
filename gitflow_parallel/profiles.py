"""Agent profiles: what the coding-agent CLIs people run need to work inside
the attempt's fence, known from the command's name (``argv[0]``'s
basename), so that ``run`` grants it without a hand-written
``sandbox_write``: each CLI's own state folder, and the variables it
needs.  The user's ``sandbox_write`` still adds to it (``proc/child``
joins the two); ``run`` says which profile applied in its output and in
each attempt's ``engine_dispatched`` event.  docs/agents.md says which
versions these were read from.

- ``claude`` (Claude Code) keeps its settings, sessions and shell state in
  ``~/.claude/`` and rewrites ``~/.claude.json`` by a rename, which needs
  its folder (the home folder, never granted).  Both move to
  ``$CLAUDE_CONFIG_DIR`` when it is set (its ``.claude.json`` then lives
  in that folder): the profile points it at a private folder per run,
  seeded from the user's files, which ``run`` removes when it ends.  A
  ``CLAUDE_CONFIG_DIR`` the user set is theirs: granted as it is.
- ``codex`` (Codex CLI): ``$CODEX_HOME``, else ``~/.codex``.
- ``aider``: ``~/.aider/`` (caches, analytics); and
  ``LITELLM_LOCAL_MODEL_COST_MAP=True``, or litellm spends its start
  fetching a price list.
- ``gemini`` (Gemini CLI): ``~/.gemini``.
- ``opencode``: its folders under the XDG data, config, cache and state
  homes (``~/.local/share/opencode``, ``~/.config/opencode``, …).

A variable the user already set is never overridden."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

# What of the user's Claude Code folder a private one starts with: the
# settings, the credentials (Linux keeps them in this file), the user's
# memory and own commands; not the sessions and history.
CLAUDE_SEEDS = ("settings.json", ".credentials.json", "CLAUDE.md", "agents", "commands", "skills")


@dataclass
class Profile:
    """One agent CLI's needs: folders it writes, variables it is given, and
    files copied into a private folder before it starts (``prepare``)."""
    name: str
    writes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    seeds: list[tuple[Path, Path]] = field(default_factory=list)  # (the user's file, its private copy)

    def prepare(self) -> None:
        """Make the private folders and copy in the user's files, once
        (a copy already there is the run's own, possibly rewritten)."""
        for folder in self.writes:
            Path(folder).mkdir(parents=True, exist_ok=True, mode=0o700)
        for source, copy in self.seeds:
            if os.path.lexists(copy) or not os.path.lexists(source):
                continue
            copy.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if source.is_dir() and not source.is_symlink():
                shutil.copytree(source, copy, symlinks=True)
            else:
                shutil.copy2(source, copy, follow_symlinks=False)

    def record(self) -> dict[str, object]:
        """As ``engine_dispatched`` and the run's summary say it."""
        return {"name": self.name, "writes": list(self.writes), "env": dict(self.env)}


def private_root(env: Mapping[str, str], run_id: str) -> Path:
    """The folder of a runner's private copies of agents' state: under the
    user's cache folder, outside every repository's git dir and worktree
    (``sandbox_write`` may not reach those), one per ``run`` process (two
    ``run``s of one task's instances may overlap; each removes its own)."""
    cache = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(cache) / "git-parallel" / "agents" / f"{run_id}.{os.getpid()}"


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _claude(env: Mapping[str, str], run_id: str) -> Profile:
    own = env.get("CLAUDE_CONFIG_DIR")
    if own:
        return Profile("claude", writes=[own])
    home = _home(env)
    folder = private_root(env, run_id) / "claude"
    seeds = [(home / ".claude.json", folder / ".claude.json"), *((home / ".claude" / n, folder / n) for n in CLAUDE_SEEDS)]
    return Profile("claude", writes=[str(folder)], env={"CLAUDE_CONFIG_DIR": str(folder)}, seeds=seeds)


def _codex(env: Mapping[str, str], run_id: str) -> Profile:
    return Profile("codex", writes=[env.get("CODEX_HOME") or str(_home(env) / ".codex")])


def _aider(env: Mapping[str, str], run_id: str) -> Profile:
    given = {} if "LITELLM_LOCAL_MODEL_COST_MAP" in env else {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return Profile("aider", writes=[str(_home(env) / ".aider")], env=given)


def _gemini(env: Mapping[str, str], run_id: str) -> Profile:
    return Profile("gemini", writes=[str(_home(env) / ".gemini")])


def _opencode(env: Mapping[str, str], run_id: str) -> Profile:
    home = _home(env)
    bases = [env.get("XDG_DATA_HOME") or str(home / ".local" / "share"), env.get("XDG_CONFIG_HOME") or str(home / ".config"),
             env.get("XDG_CACHE_HOME") or str(home / ".cache"), env.get("XDG_STATE_HOME") or str(home / ".local" / "state")]
    return Profile("opencode", writes=[str(Path(b) / "opencode") for b in bases])


PROFILES: dict[str, Callable[[Mapping[str, str], str], Profile]] = {
    "claude": _claude, "codex": _codex, "aider": _aider, "gemini": _gemini, "opencode": _opencode,
}


def recognise(argv: list[str], env: Mapping[str, str] | None = None, run_id: str = "run") -> Profile | None:
    """The profile of the CLI ``argv`` runs (by its program's name), or None
    for any other command.  ``env``: the environment it is started from."""
    if not argv:
        return None
    make = PROFILES.get(os.path.basename(argv[0]))
    return make(os.environ if env is None else env, run_id) if make is not None else None


def clean(run_id: str, env: Mapping[str, str] | None = None) -> None:
    """Remove the run's private copies (``private_root``), once its agents have ended."""
    shutil.rmtree(private_root(os.environ if env is None else env, run_id), ignore_errors=True)
