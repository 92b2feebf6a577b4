"""The test harness: the files that decide how tests run, which an attempt
must not be able to change for its own judging.

A test runner reads more than the tests.  pytest loads ``conftest.py`` from
the rootdir and every folder down to the tests, takes options (``addopts``,
``-p plugin``) from the first of ``pytest.ini``, ``pyproject.toml``,
``tox.ini`` and ``setup.cfg`` it finds, and autoloads plugins that installed
packages declare under the ``pytest11`` entry point; any Python imports
``sitecustomize``/``usercustomize`` and runs ``.pth`` lines; ``make test``
runs whatever the Makefile says; ``npm test`` whatever ``scripts.test`` says.
An attempt that edits one of those can make failing code pass.  So, unless
``protect_defaults: false``, these are protected on top of the config's own
rules (``git/scratch``): the judged tree has the base's version of each.

Two kinds of entry:

* **Harness files** (:data:`HARNESS_PATTERNS`): wholly the harness's, so the
  base's copy is judged and an attempt's own copy (added or changed) is left
  out.
* **Mixed files** (:data:`MIXED_FILES`: ``pyproject.toml``, ``setup.cfg``,
  ``package.json``) also carry the product (its dependencies, its version),
  which an attempt may well need to change.  Only their harness *sections*
  are protected: a change elsewhere is judged as the attempt wrote it; a
  change to a harness section (or a file that no longer parses) makes the
  whole file a protected change, judged with the base's copy.

A third kind, **dependencies** (:data:`DEPENDENCY_PATTERNS` and the
dependency sections of the mixed files), is judged as the attempt wrote it
(the attempt may need the package it adds) but a person decides whether it
lands: an installed package can register a test-runner plugin.

Every change to a harness file or the dependencies, and every change to a
protected path other than a new test file, keeps an attempt out of an
automatic pick (``git/scratch.blocks_pick``): landing it would change how
every later run is judged.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

# Wholly harness: globs in git/scratch's syntax (``**/`` spans folders).
HARNESS_PATTERNS = (
    "**/conftest.py", "**/pytest.ini", "**/.pytest.ini", "**/pytest.toml", "**/.pytest.toml",
    "**/tox.ini", "**/noxfile.py",
    "**/sitecustomize.py", "**/usercustomize.py", "**/*.pth",
    "**/Makefile", "**/GNUmakefile", "**/makefile", "**/justfile", "**/Justfile",
    "**/jest.config.*", "**/vitest.config.*", "**/.mocharc*", "**/karma.conf.*",
)

# Files that carry the product too: only these sections are the harness's.
MIXED_FILES = ("pyproject.toml", "setup.cfg", "package.json")
_PYPROJECT_SECTIONS = (("tool", "pytest"), ("tool", "tox"), ("tool", "nox"), ("tool", "coverage"),
                       ("tool", "hatch", "envs"), ("tool", "pdm", "scripts"), ("tool", "poe"),
                       ("project", "entry-points", "pytest11"))
_PACKAGE_JSON_KEYS = ("jest", "mocha", "ava", "c8", "nyc", "vitest")
_NPM_SCRIPTS = ("test", "pretest", "posttest")


# What an environment is built from: a change is judged as the attempt wrote
# it (it may need the package), but a person decides whether it lands, since
# an installed package can carry a test-runner plugin (``pytest11``) that
# judges every later run.
DEPENDENCY_PATTERNS = ("**/requirements*.txt", "**/requirements/*.txt", "**/constraints*.txt", "**/uv.lock",
                       "**/poetry.lock", "**/Pipfile", "**/Pipfile.lock", "**/pdm.lock", "**/package-lock.json",
                       "**/npm-shrinkwrap.json", "**/pnpm-lock.yaml", "**/yarn.lock")
_PYPROJECT_DEPENDENCIES = (("project", "dependencies"), ("project", "optional-dependencies"),
                           ("dependency-groups",), ("build-system", "requires"), ("tool", "poetry", "dependencies"),
                           ("tool", "poetry", "group"), ("tool", "uv"), ("tool", "pdm", "dev-dependencies"))
_PACKAGE_JSON_DEPENDENCIES = ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies",
                              "overrides", "resolutions")


def dependency_sections(path: str, data: bytes | None) -> Any:
    """The dependency part of a mixed file, comparable with ``==`` (like
    :func:`harness_sections`)."""
    if data is None:
        return None
    name, doc = _parse(path, data)
    if name == "pyproject.toml":
        return {".".join(keys): _dig(doc, keys) for keys in _PYPROJECT_DEPENDENCIES}
    if name == "setup.cfg":
        parser = doc
        return {f"{s}.{k}": parser.get(s, k) for s in ("options", "options.extras_require")
                for k in (parser.options(s) if parser.has_section(s) else [])
                if s == "options.extras_require" or k in ("install_requires", "tests_require", "setup_requires")}
    return {k: doc.get(k) for k in _PACKAGE_JSON_DEPENDENCIES}


def dependencies_changed(path: str, old: bytes | None, new: bytes | None) -> bool:
    """Did the attempt change what the mixed file ``path`` installs?"""
    try:
        return bool(dependency_sections(path, old) != dependency_sections(path, new))
    except (ValueError, UnicodeDecodeError):
        return old != new


def _parse(path: str, data: bytes) -> tuple[str, Any]:
    """(file name, parsed content) of a mixed file: a mapping, or for
    setup.cfg its parser.  Raises ``ValueError`` when it does not parse."""
    text = data.decode("utf-8")
    name = path.rsplit("/", 1)[-1]
    # Imported here: most verbs never parse one, and both cost a start.
    if name == "pyproject.toml":
        import tomllib

        return name, tomllib.loads(text)
    if name == "setup.cfg":
        import configparser

        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        parser.read_string(text)
        return name, parser
    if name == "package.json":
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("package.json is not an object")
        return name, doc
    raise ValueError(f"{path} is not a mixed file")


def is_mixed(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in MIXED_FILES


def _dig(data: Any, keys: tuple[str, ...]) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def harness_sections(path: str, data: bytes | None, scripts: Iterable[str] = ()) -> Any:
    """The harness part of a mixed file's content, comparable with ``==``
    (None for an absent file).  A file that does not parse raises
    ``ValueError``: what its runner would make of it is unknown."""
    if data is None:
        return None
    name, doc = _parse(path, data)
    if name == "pyproject.toml":
        return {".".join(keys): _dig(doc, keys) for keys in _PYPROJECT_SECTIONS}
    if name == "setup.cfg":
        parser = doc
        out: dict[str, Any] = {s: dict(parser.items(s)) for s in parser.sections()
                               if s in ("tool:pytest", "pytest") or s.startswith(("tox:", "coverage:"))}
        if parser.has_option("options.entry_points", "pytest11"):
            out["options.entry_points.pytest11"] = parser.get("options.entry_points", "pytest11")
        return out
    wanted = set(_NPM_SCRIPTS) | set(scripts)
    found = doc.get("scripts")
    run = found if isinstance(found, dict) else {}
    return {"scripts": {k: v for k, v in run.items() if k in wanted}, **{k: doc.get(k) for k in _PACKAGE_JSON_KEYS}}


def harness_changed(path: str, old: bytes | None, new: bytes | None, scripts: Iterable[str] = ()) -> bool:
    """Did the attempt change the harness sections of the mixed file ``path``?"""
    try:
        before = harness_sections(path, old, scripts)
    except (ValueError, UnicodeDecodeError):
        return old != new  # the base's own copy does not parse: any change counts
    try:
        after = harness_sections(path, new, scripts)
    except (ValueError, UnicodeDecodeError):
        return True
    return bool(before != after)


def npm_scripts(argvs: Iterable[Iterable[str]]) -> list[str]:
    """Script names a gate runs through npm/pnpm/yarn (``npm run lint``)."""
    found = []
    for argv in argvs:
        words = [w for a in argv for w in str(a).split()]
        for i, word in enumerate(words[:-1]):
            if word in ("run", "run-script") and i and words[i - 1].rsplit("/", 1)[-1] in ("npm", "pnpm", "yarn"):
                found.append(words[i + 1])
    return found
