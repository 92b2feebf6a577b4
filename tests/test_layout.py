"""The layout holds: imports point down the layers ARCHITECTURE.md names,
no command imports another command, only the CLI imports commands, and no
module or class grows past the sizes a reader can take in.

Read from the source with ``ast`` (every import, including those inside
functions), so nothing is imported and the test takes milliseconds."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gitflow_parallel"

# Lowest first.  A module may import its own layer's modules and any lower layer's.
LAYERS: dict[str, set[str]] = {
    "record": {"errors", "names", "files", "faults", "schema", "shapes", "config_schema", "model", "provenance", "config", "evidence", "harness", "reach", "template", "mix", "expect", "pysetup", "failures", "appended",
               "notify", "environ", "argv", "profiles", "__init__"},
    "git": {"git"},
    "state": {"state"},
    "proc": {"proc"},
    "judge": {"judge"},
    "recovery": {"recovery"},
    "commands": {"commands", "agents"},
    "flows": {"flows"},
    "cli": {"cli", "manpage", "__main__"},
}
# Imports that point up a layer (none left).
KNOWN_UPWARD: set[tuple[str, str]] = set()
# Sizes past which a module or class is named in a warning (a seam may be
# due); the rules that fail are ruff's (tests/test_lint.py).
MAX_MODULE_LINES, MAX_CLASS_LINES = 600, 250


def top_name(path: Path) -> str:
    """The layer key of a module: its first part under the package."""
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def imports_of(path: Path) -> set[str]:
    """Top-level names of gitflow_parallel modules that ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gitflow_parallel":
            parts = node.module.split(".")
            if len(parts) > 1:
                found.add(parts[1])
            else:  # from gitflow_parallel import x, y
                found.update(a.name for a in node.names if a.name != "__version__")
                if any(a.name == "__version__" for a in node.names):
                    found.add("__init__")
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("gitflow_parallel.") and "." in a.name)
    return found


def layer_of(name: str) -> int:
    for k, members in enumerate(LAYERS.values()):
        if name in members:
            return k
    raise AssertionError(f"module {name} has no layer: add it to LAYERS and to ARCHITECTURE.md")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def edges() -> set[tuple[str, str]]:
    out = set()
    for path in modules():
        here = top_name(path)
        out.update((here, there) for there in imports_of(path) if there != here)
    return out


def upward(found: set[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in found if layer_of(b) > layer_of(a)}


def test_every_module_has_a_layer() -> None:
    for path in modules():
        layer_of(top_name(path))


def test_imports_point_down() -> None:
    assert upward(edges()) - KNOWN_UPWARD == set()
    assert KNOWN_UPWARD <= upward(edges()), "a known upward import is gone: take it off KNOWN_UPWARD"


def command_imports(path: Path) -> set[str]:
    """The ``commands`` modules that ``path`` imports (``from gitflow_parallel.commands import x``
    or ``from gitflow_parallel.commands.x import ...``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.split(".")
            if parts[:2] == ["gitflow_parallel", "commands"]:
                found.update([parts[2]] if len(parts) > 2 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names
                         if a.name.startswith("gitflow_parallel.commands."))
    return found


def test_no_command_imports_another_and_only_flows_and_the_cli_import_commands() -> None:
    for path in modules():
        here = top_name(path)
        if here == "commands":
            # A command made of several modules (commands/init/) imports its own parts.
            own = path.relative_to(PACKAGE / "commands").parts[0].removesuffix(".py")
            assert command_imports(path) - {own} == set(), f"{path.name} imports a command: move what it shares below"
        elif path.name == "__main__.py":
            # The entry point: the installed hooks' slow path goes straight
            # to the hook command, without loading the CLI.
            assert command_imports(path) <= {"hook_impl"}, "__main__ imports a command other than hook_impl"
        elif here not in ("cli", "flows"):
            assert command_imports(path) == set(), f"{path.relative_to(PACKAGE)} imports a command"


def test_an_added_command_import_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "merge.py"
    bad.write_text("def f():\n    from gitflow_parallel.commands import cleanup\n"
                   "from gitflow_parallel.commands.spawn import spawn\n")
    assert command_imports(bad) == {"cleanup", "spawn"}


def test_an_added_upward_import_is_caught(tmp_path: Path) -> None:
    # The check itself can fail: the record layer importing a command is found.
    bad = tmp_path / "model.py"
    bad.write_text("def f():\n    from gitflow_parallel.commands import merge\n")
    assert imports_of(bad) == {"commands"}
    assert upward({("model", name) for name in imports_of(bad)}) == {("model", "commands")}


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_sizes(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    if lines > MAX_MODULE_LINES:
        warnings.warn(f"{name} has {lines} lines (over {MAX_MODULE_LINES}: a seam may be due)", stacklevel=1)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_CLASS_LINES:
                warnings.warn(f"class {node.name} in {name} has {size} lines (over {MAX_CLASS_LINES})", stacklevel=1)
