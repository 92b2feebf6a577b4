"""The documentation cannot drift from the code: the README stays short and
keeps the commands CI runs, and the reference pages in docs/ name every
command and option, every config key, reason code and crash point there is (and
nothing that is gone); every link between the pages resolves."""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterator

import click

from conftest import ROOT

from gitflow_parallel import config, config_schema, expect, faults
from gitflow_parallel.cli import main_group
from gitflow_parallel.errors import ALL_CODES
from test_examples import _SEPARATORS as SEPARATORS, check_command, parallel_commands

DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_BYTES = 15_000


def page(name: str) -> str:
    return (DOCS / name).read_text()


def commands(group: click.Group, ctx: click.Context, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    """Every command a user can type, subcommands of groups included."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        yield f"{prefix}{name}", cmd
        if isinstance(cmd, click.Group):
            yield from commands(cmd, click.Context(cmd, info_name=name, parent=ctx), f"{prefix}{name} ")


def table_keys(text: str, after: str) -> list[str]:
    """The first cells (`key`) of the table that starts with, or follows, the line starting with ``after``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    keys: list[str] = []
    in_table = False
    for line in lines[start:]:
        if line.startswith("|"):
            in_table = True
            cell = line.split("|")[1].strip()
            if cell.startswith("`") and cell.endswith("`"):
                keys.append(cell.strip("`"))
        elif in_table:
            break
    return keys


def test_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes: move reference to docs/"


def test_readme_keeps_the_commands_ci_runs() -> None:
    # .ci/run runs the README's commands (its two, then the slow tier): a line
    # after each `# README:` comment.
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ran = [ci[i + 1] for i, line in enumerate(ci) if line.startswith("# README:")]
    assert len(ran) == 3
    readme = README.read_text().splitlines()
    for command in ran:
        assert f"    {command}" in readme, f"README lost the command .ci/run runs: {command}"


def test_every_command_and_option_is_in_the_command_reference() -> None:
    text = page("commands.md")
    rows = [line for line in text.splitlines() if line.startswith("| `git parallel ")]
    ctx = click.Context(main_group, info_name="git parallel")
    known = set()
    for name, cmd in commands(main_group, ctx):
        top, _, sub = name.partition(" ")
        known.add(top)
        mine = " ".join(row for row in rows if re.match(rf"\| `git parallel {re.escape(top)}[ `]", row))
        assert mine, f"docs/commands.md has no row for `git parallel {name}`"
        if sub:
            assert re.search(rf"(?<![\w-]){re.escape(sub)}(?![\w-])", mine), f"`{name}` missing in docs/commands.md"
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            for flag in param.opts:
                if flag in ("--json", "-h", "--help"):
                    continue  # every command's, said once above the table
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", mine), \
                    f"`git parallel {name} {flag}` missing in docs/commands.md"
    documented = {row.split()[3].rstrip("`") for row in rows}
    assert documented <= known, f"docs/commands.md documents commands that are gone: {documented - known}"


def test_every_config_key_is_in_the_configuration_reference() -> None:
    text = page("configuration.md")
    top = table_keys(text, "| key | default | meaning |")
    expected: list[str] = []
    for key, default in {**config.DEFAULTS, **config.OPTIONAL}.items():
        if isinstance(default, dict):
            expected += [f"{key}.{sub}" for sub in default]
        else:
            expected.append(key)
    # A section's keys kept only when given (score.findings_from).
    expected += [f"score.{sub}" for sub in config_schema.optional_keys(config_schema.ScoreConfig)]
    # `agents` is validated outside DEFAULTS: its keys are what validation yields.
    agents: dict[str, Any] = config.validate({"agents": {"commands": {"a": "true"}}})["agents"]
    expected += [f"agents.{sub}" for sub in agents]
    missing = [key for key in expected if key not in top]
    assert not missing, f"add to docs/configuration.md's table: {missing}"
    gone = [key for key in top if key not in expected and key.partition(".")[0] not in expected]
    assert not gone, f"docs/configuration.md documents keys that are gone: {gone}"

    gate = table_keys(text, "Each gate:")
    assert sorted(gate) == sorted(["name", "run", *config.GATE_OPTIONAL, *config.GATE_DEFAULTS, *expect.GATE_KEYS]), \
        "docs/configuration.md's gate table"
    setup = table_keys(text, "`setup:` as a mapping")
    assert sorted(setup) == sorted(config.SETUP_DEFAULTS), "docs/configuration.md's setup table"


def test_every_reason_code_is_in_the_reason_code_page() -> None:
    # Moved from test_cli.py (test_readme_documents_every_reason_code) when
    # the reference left the README.
    text = page("reason-codes.md")
    rows = [line.split("|")[1] for line in text.splitlines() if line.startswith("| `PARALLEL_")]
    documented = set(re.findall(r"`(PARALLEL_[A-Z_]+)`", " ".join(rows)))
    missing = [code for code in ALL_CODES if code not in documented]
    assert not missing, f"add to docs/reason-codes.md: {missing}"
    gone = documented - set(ALL_CODES)
    assert not gone, f"docs/reason-codes.md lists codes that are gone: {gone}"


def test_every_crash_point_is_in_the_recovery_table() -> None:
    points = table_keys(page("recovery.md"), "| crash point |")
    assert points == list(faults.POINTS), "docs/recovery.md's crash points"


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_pages_resolve() -> None:
    pages = [README, ROOT / "ARCHITECTURE.md", *sorted(DOCS.glob("*.md"))]
    anchors = {p.resolve(): {_slug(h) for h in re.findall(r"^#+ (.+)$", p.read_text(), re.M)} for p in pages}
    broken = []
    for source in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", source.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            path, _, anchor = target.partition("#")
            file = (source.parent / path).resolve() if path else source.resolve()
            if not file.exists() or (anchor and anchor not in anchors.get(file, set())):
                broken.append(f"{source.relative_to(ROOT)}: {target}")
    assert not broken, broken
    assert {p.name for p in DOCS.glob("*.md")} <= set(re.findall(r"\(docs/([\w-]+\.md)\)", README.read_text())), \
        "the README's table names every page of docs/"


def code_lines(text: str) -> Iterator[str]:
    """The shell lines of a page's code blocks (indented, or fenced as
    sh/shell/bash/none), continuation lines joined, comments dropped."""
    fence: str | None = None
    pending = ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else (line[3:].strip() or "sh")
            continue
        if fence is not None and fence not in ("sh", "shell", "bash"):
            continue
        if fence is None and not line.startswith("    "):
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        if pending:
            yield " ".join(shlex.quote(w) if w not in SEPARATORS else w
                           for w in shlex.split(pending, comments=True))
        pending = ""


def test_every_command_shown_parses_against_the_cli() -> None:
    # As test_examples does for examples/: each `git parallel …` a page shows
    # in a code block is one the CLI takes, options and values included.
    shown = 0
    for source in [README, *sorted(DOCS.glob("*.md"))]:
        for line in code_lines(source.read_text()):
            for args in parallel_commands(line):
                try:
                    check_command(args)
                except (AssertionError, click.ClickException) as exc:
                    raise AssertionError(f"{source.relative_to(ROOT)}: git parallel {shlex.join(args)}: {exc}")
                shown += 1
    assert shown >= 40
