"""The setup ``init`` writes for a Python project: a ``.venv`` in the judged
checkout with the project installed editable (its own copy, so the gates
import the attempt's code), its test extra or dependency group (PEP 735),
pytest and the dev requirement files, by pip, or by uv from ``uv.lock``,
or by uv for a dependency group where uv is installed (the pip a venv
starts with reads ``--group`` only from 25.1 on); and the reading of the
project files that decides it."""

from __future__ import annotations

import configparser
import re
import shutil
import tomllib
from pathlib import Path
from typing import NotRequired, TypedDict

from gitflow_parallel.config import CONFIG_FILE

PACKAGING: tuple[str, ...] = ("pyproject.toml", "setup.cfg", "setup.py")
TEST_EXTRAS = ("test", "tests", "testing", "dev")
DEV_REQUIREMENTS = ("requirements-dev.txt", "requirements_dev.txt", "dev-requirements.txt",
                    "requirements-test.txt", "requirements_test.txt", "test-requirements.txt",
                    "requirements/dev.txt", "requirements/test.txt", "requirements/tests.txt")



class SetupSpec(TypedDict):
    """The ``setup:`` init writes (``config_schema.SetupConfig`` once validated)."""
    run: list[str]
    cache_key: list[str]
    keep: NotRequired[list[str]]
    path: NotRequired[list[str]]
    stores: NotRequired[list[str]]

def read_text(top: Path, rel: str) -> str | None:
    try:
        return (top / rel).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def read_toml(top: Path, rel: str) -> dict[str, object]:
    try:
        return tomllib.loads(read_text(top, rel) or "")
    except tomllib.TOMLDecodeError:
        return {}


def read_ini(top: Path, rel: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(read_text(top, rel) or "")
    except configparser.Error:
        pass
    return parser


def declared_extras(top: Path, files: set[str], pyproject: dict[str, object]) -> dict[str, list[str]] | None:
    """The optional dependencies the project declares; None when they cannot be read here."""
    proj = pyproject.get("project")
    if isinstance(proj, dict):
        if "optional-dependencies" in (proj.get("dynamic") or []):
            return None
        found = proj.get("optional-dependencies") or {}
        return {k: [str(r) for r in v] for k, v in found.items() if isinstance(v, list)}
    if "setup.cfg" in files and read_ini(top, "setup.cfg").has_section("options.extras_require"):
        sect = read_ini(top, "setup.cfg")["options.extras_require"]
        return {k: [r.strip() for r in v.splitlines() if r.strip()] for k, v in sect.items()}
    return None if "setup.py" in files else {}


def installable(top: Path, files: set[str], pyproject: dict[str, object]) -> bool:
    if "setup.py" in files or any(k in pyproject for k in ("project", "build-system")):
        return True
    tool = pyproject.get("tool", {})
    return isinstance(tool, dict) and "poetry" in tool or read_ini(top, "setup.cfg").has_section("metadata")


def requirement_name(req: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    return match.group(1).lower().replace("_", "-") if match else ""


def pip_setup(top: Path, files: set[str], pyproject: dict[str, object], notes: list[str]) -> SetupSpec:
    """A ``.venv`` built by pip from the checkout: the project installed
    editable (its own copy, so the gate imports the attempt's code) with
    its test extra or dependency group (PEP 735), pytest, and the dev
    requirement files."""
    args, keys = [], [f for f in PACKAGING if f in files]
    need_pytest = True
    if installable(top, files, pyproject):
        extras = declared_extras(top, files, pyproject)
        if extras is None:
            args.append("-e '.[test]'")
            notes.append("the extras are not read from setup.py: pip installs a 'test' extra if there is one "
                         "(and warns if not)")
        else:
            extra = next((e for e in TEST_EXTRAS if e in extras), None)
            args.append(f"-e '.[{extra}]'" if extra else "-e .")
            need_pytest = not extra or not any(requirement_name(r) == "pytest" for r in extras[extra])
    elif "requirements.txt" in files:
        args.append("-r requirements.txt")
        keys.append("requirements.txt")
    for req in (f for f in DEV_REQUIREMENTS if f in files):
        args.append(f"-r {req}")
        keys.append(req)
    group = test_group(pyproject)
    if group:
        args.append(f"--group {group}")
        need_pytest = need_pytest and "pytest" not in group_names(pyproject, group)
    if need_pytest:
        args.append("pytest")
    run = ["sh", "-c", installer(" ".join(args), group)]
    return {"run": run, "cache_key": keys or [CONFIG_FILE], "keep": [".venv"], "path": [".venv/bin"]}


def test_group(pyproject: dict[str, object]) -> str | None:
    groups = pyproject.get("dependency-groups")
    return next((g for g in TEST_EXTRAS if isinstance(groups, dict) and g in groups), None)


def group_names(pyproject: dict[str, object], group: str) -> list[str]:
    """The requirement names of a dependency group ``test_group`` found."""
    groups = pyproject["dependency-groups"]
    assert isinstance(groups, dict)  # (test_group found the group in it)
    return [requirement_name(r) for r in groups[group] if isinstance(r, str)]


def installer(args: str, group: str | None) -> str:
    """The venv and its install: pip reads ``--group`` from 25.1 on, and a
    venv starts with the pip its Python bundles, so a dependency group is
    installed by uv where it is on PATH, else by pip upgraded first."""
    if group and shutil.which("uv"):
        return f"uv venv -q .venv && uv pip install -q --python .venv/bin/python {args}"
    upgrade = ".venv/bin/python -m pip install -q --upgrade 'pip>=25.1' && " if group else ""
    return f"python3 -m venv .venv && {upgrade}.venv/bin/python -m pip install -q {args}"


def uv_setup(top: Path, pyproject: dict[str, object]) -> SetupSpec | None:
    """``uv sync`` from the lock, when the lock holds pytest."""
    if 'name = "pytest"' not in (read_text(top, "uv.lock") or ""):
        return None
    extras = declared_extras(top, {"pyproject.toml"}, pyproject) or {}
    extra = next((e for e in TEST_EXTRAS if e in extras), None)
    group = test_group(pyproject)  # uv sync installs the dev group unasked
    run = ["uv", "sync", "--frozen", *(["--extra", extra] if extra else []),
           *(["--group", group] if group and group != "dev" else [])]
    return {"run": run, "cache_key": ["pyproject.toml", "uv.lock"], "keep": [".venv"], "path": [".venv/bin"]}
