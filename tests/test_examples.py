"""The recipes in examples/ run commands that exist: every `git parallel …`
they run (or show in a comment) parses against the real CLI, options and
values included."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Iterator

import click
import pytest
import yaml

from conftest import ROOT

from gitflow_parallel.cli import main_group

EXAMPLES = ROOT / "examples"
_SEPARATORS = {"&&", "||", ";", "|", "&"}


def _with_values(text: str) -> str:
    """Placeholders a runner fills in become sample values."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "1", text)  # GitHub Actions expressions
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "1", text)  # shell variables


def parallel_commands(text: str) -> Iterator[list[str]]:
    """Every `git parallel …` command line in a piece of shell text,
    including inside quoted arguments (ssh "…", sh -c "…")."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if "git parallel" not in line:
            continue
        try:
            words = shlex.split(_with_values(line))
        except ValueError:
            continue
        command: list[str] = []
        for word in words + [";"]:
            if word not in _SEPARATORS:
                command.append(word)
                if "git parallel" in word and word != "git parallel":
                    yield from parallel_commands(word)  # a quoted command line
                continue
            if command[:2] == ["git", "parallel"]:
                yield command[2:]
            command = []


def shell_texts(path: Path) -> list[str]:
    """The shell a file runs (and shows in comments)."""
    text = path.read_text()
    comments = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    if path.suffix == ".sh":
        return [text]
    doc = yaml.safe_load(text)
    found: list[str] = list(comments)

    def walk(node: Any, key: str | None = None) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, list):
            if key in ("command", "args") and all(isinstance(x, str) for x in node):
                found.append(" ".join(node) if key == "command" and node[:2] != ["sh", "-c"] else "\n".join(node))
            else:
                for x in node:
                    walk(x, key)
        elif isinstance(node, str) and key in ("run", "command", "args"):
            found.append(node)

    walk(doc)
    return found


def check_command(args: list[str]) -> str:
    """Parse ``args`` as git parallel would; returns the command name."""
    assert args, "a bare `git parallel`"
    name = args[0]
    cmd = main_group.get_command(click.Context(main_group), name)
    assert cmd is not None, f"no command `git parallel {name}`"
    if isinstance(cmd, click.Group):
        return check_command_group(cmd, args)
    with cmd.make_context(name, list(args[1:]), resilient_parsing=False):
        pass
    return name


def check_command_group(group: click.Group, args: list[str]) -> str:
    sub = group.get_command(click.Context(group), args[1])
    assert sub is not None, f"no command `git parallel {args[0]} {args[1]}`"
    with sub.make_context(args[1], list(args[2:])):
        pass
    return f"{args[0]} {args[1]}"


@pytest.mark.parametrize("name", ["github-actions-workers.yml", "kubernetes-indexed-job.yaml", "ssh-workers.sh"])
def test_each_recipe_runs_commands_the_cli_has(name: str) -> None:
    path = EXAMPLES / name
    commands = [c for text in shell_texts(path) for c in parallel_commands(text)]
    names = [check_command(c) for c in commands]
    assert "worker" in names, f"{name} starts no worker"
    for c in commands:
        if c[0] == "worker":
            assert "--remote" in c


def test_the_recipes_use_their_engines_as_documented() -> None:
    gha = yaml.safe_load((EXAMPLES / "github-actions-workers.yml").read_text())
    job = gha["jobs"]["worker"]
    assert len(job["strategy"]["matrix"]["worker"]) >= 2
    worker_step = next(s["run"] for s in job["steps"] if "git parallel worker" in s.get("run", ""))
    assert "--once" in worker_step
    k8s = yaml.safe_load((EXAMPLES / "kubernetes-indexed-job.yaml").read_text())
    assert k8s["kind"] == "Job" and k8s["spec"]["completionMode"] == "Indexed"
    assert k8s["spec"]["completions"] >= 1 and k8s["spec"]["parallelism"] >= 1
    args = "\n".join(k8s["spec"]["template"]["spec"]["containers"][0]["args"])
    assert '--index "$JOB_COMPLETION_INDEX"' in args
    assert "ssh " in (EXAMPLES / "ssh-workers.sh").read_text()


def test_the_parser_finds_commands_inside_quoted_arguments() -> None:
    found = list(parallel_commands('ssh h "cd x && git parallel worker --remote origin --wait" &'))
    assert found == [["worker", "--remote", "origin", "--wait"]]
    with pytest.raises(click.NoSuchOption):
        check_command(["worker", "--remote", "origin", "--no-such-option"])
    with pytest.raises(click.BadParameter):
        check_command(["worker", "--index", "minus-one"])
