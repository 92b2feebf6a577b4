"""The test harness: the files that decide how tests run, which an attempt
must not be able to change for its own judging.

A test runner reads more than the tests.  pytest loads ``conftest.py`` from
the rootdir and every folder down to the tests, takes options (``addopts``,
``-p plugin``) from the first of ``pytest.ini``, ``pyproject.toml``,
``tox.ini`` and ``setup.cfg`` it finds, and autoloads plugins that installed
packages declare under the ``pytest11`` entry point; any Python imports
``sitecustomize``/``usercustomize`` and runs ``.pth`` lines, and imports a
module from the folder first on ``sys.path`` before the standard library's
or site-packages' (:func:`shadows`); ``make test``
runs whatever the Makefile says; ``go test`` a package's ``TestMain`` in
place of its tests (:func:`defines_test_main`); cargo a target's
``runner`` from ``.cargo/config.toml``; ``npm test`` whatever ``scripts.test`` says,
and every script that one runs in turn, with the files they and the
runner's configuration name (:func:`reached_files`).
An attempt that edits one of those can make failing code pass.  So, unless
``protect_defaults: false``, these are protected on top of the config's own
rules (``git/scratch``): the judged tree has the base's version of each.

Two kinds of entry:

* **Harness files** (:data:`HARNESS_PATTERNS`): wholly the harness's, so the
  base's copy is judged and an attempt's own copy (added or changed) is left
  out.
* **Mixed files** (:data:`MIXED_FILES`: ``pyproject.toml``, ``setup.cfg``,
  ``package.json``, ``Cargo.toml``) also carry the product (its dependencies, its version),
  which an attempt may well need to change.  Only their harness *sections*
  are protected: a change elsewhere is judged as the attempt wrote it; a
  change to a harness section (or a file that no longer parses) makes the
  whole file a protected change, judged with the base's copy.

A third kind, **dependencies** (:data:`DEPENDENCY_PATTERNS` and the
dependency sections of the mixed files), is judged as the attempt wrote it
(the attempt may need the package it adds) but a person decides whether it
lands: an installed package can register a test-runner plugin.

Every change to a harness file or the dependencies, and every change to a
protected path other than a new test file or tests only appended to one
(``appended``), keeps an attempt out of an
automatic pick (``git/protected.blocks_pick``): landing it would change how
every later run is judged.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable, Collection, Iterable

if TYPE_CHECKING:
    from configparser import RawConfigParser

from gitflow_parallel.files import untrusted_json, untrusted_toml

# JavaScript test runners' configuration; its string literals name more
# files to protect (``reached_files``).  ``vite.config.*`` is left out: it
# builds the product too.
RUNNER_CONFIGS = ("**/jest.config.*", "**/vitest.config.*", "**/vitest.workspace.*", "**/.mocharc*",
                  "**/ava.config.*", "**/playwright.config.*", "**/karma.conf.*", "**/babel.config.*",
                  "**/.babelrc*")
PACKAGE_MANAGER_CONFIGS = ("**/.npmrc", "**/.yarnrc", "**/.yarnrc.yml", "**/bunfig.toml")
REGISTERING = ("**/*.dist-info/**", "**/*.egg-info/**", "**/node_modules/**", "**/.pnp.cjs", "**/.pnp.js",
               "**/.pnp.loader.mjs")
# Compiled Python: an unchecked hash-based pyc (PEP 552) in ``__pycache__``
# is imported without a look at the .py beside it (the diff a person reads),
# and a sourceless ``calc/_impl.pyc`` is imported as ``calc._impl``.
COMPILED = ("**/__pycache__/**", "**/*.pyc", "**/*.pyo")
# cargo: ``.cargo/config`` (a target's ``runner`` runs the test binaries),
# the toolchain, a build script (runs at build, can write the tests' code).
CARGO = ("**/.cargo/config", "**/.cargo/config.toml", "**/rust-toolchain", "**/rust-toolchain.toml", "**/build.rs")
# Wholly harness: globs in git/scratch's syntax (``**/`` spans folders).
HARNESS_PATTERNS = (
    "**/conftest.py", "**/pytest.ini", "**/.pytest.ini", "**/pytest.toml", "**/.pytest.toml",
    "**/tox.ini", "**/noxfile.py",
    "**/sitecustomize.py", "**/usercustomize.py", "**/*.pth",
    "**/Makefile", "**/GNUmakefile", "**/makefile", "**/justfile", "**/Justfile",
    *RUNNER_CONFIGS,
    # How the package manager runs a script: .npmrc's `script-shell` and
    # `node-options`, yarn's `yarnPath` (the yarn that runs), bun's test
    # `preload`: an .npmrc with `script-shell=/bin/true` passed any test.
    *PACKAGE_MANAGER_CONFIGS,
    # What registers itself wherever it lies: a ``*.dist-info`` or
    # ``*.egg-info`` folder in a ``sys.path`` entry (the checkout, under
    # ``python -m pytest``) declares ``pytest11`` plugins that pytest loads;
    # node resolves from a committed ``node_modules`` or Yarn's PnP files.
    *REGISTERING,
    *COMPILED,
    *CARGO,
)

# Modules a test runner imports before any test runs.  The folder first on
# ``sys.path`` (the checkout for ``python -m pytest``, a script's own folder
# for ``python tests/run.py``) is searched before site-packages and the
# standard library, so a module of one of these names there, or of a
# standard library module's, runs in its place: a root ``iniconfig.py`` that
# prints ``1 passed`` and calls ``os._exit(0)`` passes any test.
RUNNER_MODULES = frozenset({"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup",
                            "tomli", "colorama"})
# ``test`` is the standard library's own test suite, and the name many
# projects give their test folder (a package, with ``__init__.py``).
_NOT_SHADOWING = frozenset({"test"})
# What Python imports by a module's name from a folder: the module's file
# (source, compiled, an extension) or a package's ``__init__``; ``__main__``
# is what ``python -m NAME`` runs.  A folder that is no package (``types/``
# of TypeScript declarations, ``html/`` pages, ``code/`` scripts) imports
# nothing by its name and is left alone, as is every other file of a package.
_IMPORTED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                       r"(?:\.pyc?|(?:\.[^/]*)?\.(?:so|pyd)|/__(?:init|main)__(?:\.pyc?|(?:\.[^/]*)?\.(?:so|pyd)))")


def shadows(path: str, folders: Iterable[str] = ()) -> bool:
    """Does ``path`` take the place of a module the runner or the standard
    library provides, where the interpreter looks first: at the top of the
    tree, under ``src/``, or in one of ``folders`` (a gate's script folders,
    :func:`script_folders`)?"""
    for folder in ("", "src", *folders):
        prefix = f"{folder}/" if folder else ""
        if not path.startswith(prefix):
            continue
        found = _IMPORTED.fullmatch(path[len(prefix):])
        name = found.group("name") if found else None
        if name and name not in _NOT_SHADOWING and (name in RUNNER_MODULES or name in sys.stdlib_module_names):
            return True
    return False


# go test runs a package's ``TestMain`` in place of its tests: one that
# calls ``os.Exit(0)`` passes them all unrun.
_GO_TEST_MAIN = re.compile(rb"^func\s+TestMain\s*\(", re.M)


def defines_test_main(path: str, data: bytes | None) -> bool:
    """Is ``path`` a Go test file (``*_test.go``) whose content ``data``
    defines ``TestMain``?  Such a file is the harness's, however it is
    named: added, changed or deleted, it changes how the package's tests
    run."""
    return path.endswith("_test.go") and data is not None and _GO_TEST_MAIN.search(data) is not None


def script_folders(argvs: Iterable[Iterable[str]]) -> list[str]:
    """The folders of the Python scripts the commands ``argvs`` run
    (``python3 tests/run.py``: ``tests``): Python puts a script's folder
    first on ``sys.path``."""
    found: list[str] = []
    for argv in argvs:
        for word in (w for a in argv for w in str(a).split()):
            folder = posixpath.dirname(posixpath.normpath(word))
            if word.endswith(".py") and not word.startswith("/") and not folder.startswith("..") \
                    and folder and folder not in found:
                found.append(folder)
    return found


# Files that carry the product too: only these sections are the harness's.
MIXED_FILES = ("pyproject.toml", "setup.cfg", "package.json", "Cargo.toml")
_PYPROJECT_SECTIONS = (("tool", "pytest"), ("tool", "tox"), ("tool", "nox"), ("tool", "coverage"),
                       ("tool", "hatch", "envs"), ("tool", "pdm", "scripts"), ("tool", "poe"),
                       ("project", "entry-points", "pytest11"))
# Cargo.toml: which test targets are built and how (``autotests = false``
# builds none of tests/, ``harness = false`` runs a target's own main), the
# build script, the test profile.
_CARGO_SECTIONS = (("package", "autotests"), ("package", "autobenches"), ("package", "build"), ("test",), ("bench",),
                   ("lib", "harness"), ("lib", "test"), ("lib", "doctest"), ("profile", "test"), ("profile", "bench"))
_PACKAGE_JSON_KEYS = ("jest", "mocha", "ava", "c8", "nyc", "vitest", "babel")
_NPM_SCRIPTS = ("test", "pretest", "posttest")


# What an environment is built from: a change is judged as the attempt wrote
# it (it may need the package), but a person decides whether it lands, since
# an installed package can carry a test-runner plugin (``pytest11``) that
# judges every later run.
DEPENDENCY_PATTERNS = ("**/setup.py", "**/requirements*.txt", "**/requirements/*.txt", "**/constraints*.txt",
                       "**/uv.lock", "**/poetry.lock", "**/Pipfile", "**/Pipfile.lock", "**/pdm.lock", "**/package-lock.json",
                       "**/npm-shrinkwrap.json", "**/pnpm-lock.yaml", "**/yarn.lock")
_PYPROJECT_DEPENDENCIES = (("project", "dependencies"), ("project", "optional-dependencies"),
                           ("dependency-groups",), ("build-system", "requires"), ("tool", "poetry", "dependencies"),
                           ("tool", "poetry", "group"), ("tool", "uv"), ("tool", "pdm", "dev-dependencies"))
# A crate runs code of its own in the build (build script, proc macros)
# and in the test binary it is linked into.  ``[target.*]`` of a
# Cargo.toml holds only dependencies.
_CARGO_DEPENDENCIES = (("dependencies",), ("dev-dependencies",), ("build-dependencies",), ("target",), ("patch",),
                       ("replace",), ("workspace", "dependencies"))
_PACKAGE_JSON_DEPENDENCIES = ("dependencies", "devDependencies", "optionalDependencies", "peerDependencies",
                              "overrides", "resolutions")

_TOML_SECTIONS = {"pyproject.toml": _PYPROJECT_SECTIONS, "Cargo.toml": _CARGO_SECTIONS}
_TOML_DEPENDENCIES = {"pyproject.toml": _PYPROJECT_DEPENDENCIES, "Cargo.toml": _CARGO_DEPENDENCIES}


def dependency_sections(path: str, data: bytes | None) -> dict[str, object] | None:
    """The dependency part of a mixed file, comparable with ``==`` (like
    :func:`harness_sections`)."""
    if data is None:
        return None
    name, doc = _parse(path, data)
    if not isinstance(doc, dict):  # setup.cfg's parser
        parser = doc
        return {f"{s}.{k}": parser.get(s, k) for s in ("options", "options.extras_require")
                for k in (parser.options(s) if parser.has_section(s) else [])
                if s == "options.extras_require" or k in ("install_requires", "tests_require", "setup_requires")}
    if name in _TOML_DEPENDENCIES:
        return {".".join(keys): _dig(doc, keys) for keys in _TOML_DEPENDENCIES[name]}
    return {k: doc.get(k) for k in _PACKAGE_JSON_DEPENDENCIES}


def dependencies_changed(path: str, old: bytes | None, new: bytes | None) -> bool:
    """Did the attempt change what the mixed file ``path`` installs?"""
    try:
        return bool(dependency_sections(path, old) != dependency_sections(path, new))
    except (ValueError, UnicodeDecodeError):
        return old != new


def _parse(path: str, data: bytes) -> tuple[str, dict[str, object] | RawConfigParser]:
    """(file name, parsed content) of a mixed file: a mapping, or for
    setup.cfg its parser.  Raises ``ValueError`` when it does not parse."""
    text = data.decode("utf-8")
    name = path.rsplit("/", 1)[-1]
    # Imported here: most verbs never parse one, and both cost a start.
    if name in ("pyproject.toml", "Cargo.toml"):
        return name, untrusted_toml(text)
    if name == "setup.cfg":
        import configparser

        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            parser.read_string(text)
        except configparser.Error as exc:  # no ValueError: a header left open, a byte order mark
            raise ValueError(f"setup.cfg does not parse: {type(exc).__name__}") from None
        return name, parser
    if name == "package.json":
        doc = untrusted_json(text)
        if not isinstance(doc, dict):
            raise ValueError("package.json is not an object")
        return name, doc
    raise ValueError(f"{path} is not a mixed file")


def is_mixed(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in MIXED_FILES


def _dig(data: object, keys: tuple[str, ...]) -> object:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def harness_sections(path: str, data: bytes | None, scripts: Iterable[str] = ()) -> dict[str, object] | None:
    """The harness part of a mixed file's content, comparable with ``==``
    (None for an absent file).  A file that does not parse raises
    ``ValueError``: what its runner would make of it is unknown."""
    if data is None:
        return None
    name, doc = _parse(path, data)
    if not isinstance(doc, dict):  # setup.cfg's parser
        parser = doc
        out: dict[str, object] = {s: dict(parser.items(s)) for s in parser.sections()
                                  if s in ("tool:pytest", "pytest") or s.startswith(("tox:", "coverage:"))}
        if parser.has_option("options.entry_points", "pytest11"):
            out["options.entry_points.pytest11"] = parser.get("options.entry_points", "pytest11")
        return out
    if name in _TOML_SECTIONS:
        return {".".join(keys): _dig(doc, keys) for keys in _TOML_SECTIONS[name]}
    found = doc.get("scripts")
    run = found if isinstance(found, dict) else {}
    wanted = reached_scripts(run, [*_NPM_SCRIPTS, *scripts])
    return {"scripts": {k: run[k] for k in wanted}, **{k: doc.get(k) for k in _PACKAGE_JSON_KEYS}}


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


# -- what a gate reaches through package.json --------------------------------------------
# Separators of a script's commands: the chain a shell runs in turn (``&&``,
# ``||``, ``;``, a pipe, a background ``&``, a new line).
_CHAIN = re.compile(r"&&|\|\||[;&|\n]")
_SCRIPT_TOOLS = ("npm", "pnpm", "yarn", "bun")
_RUN_ALL = ("npm-run-all", "npm-run-all2", "run-s", "run-p")
_RUN_VERBS = ("run", "run-script", "rs", "urn")
_VALUE_OPTIONS = ("--filter", "-F", "-C", "--dir", "--prefix", "-w", "--workspace", "--cwd")
# npm's own verbs that run the script of the same name.
_NPM_LIFECYCLE = {"test": "test", "t": "test", "tst": "test", "start": "start", "stop": "stop", "restart": "restart"}
_RUNNER_KEYS = ("jest", "mocha", "ava", "vitest", "babel")
# A word of a configuration file that may name a file (quoted or not: JSON,
# YAML and JavaScript alike).
_WORD = re.compile(r"""[^\s"'`,;:()\[\]{}=]+""")


def _commands(text: str) -> list[list[str]]:
    """The words of each command a shell line chains."""
    out = []
    for part in _CHAIN.split(text):
        try:
            words = shlex.split(part)
        except ValueError:  # an unbalanced quote: still read its words
            words = part.split()
        if words:
            out.append(words)
    return out


def _called(words: list[str], defined: Collection[str] | None) -> list[str]:
    """Script names one command runs: ``npm run X``, ``npm test``,
    ``pnpm X``/``yarn X`` (their shorthand for a defined script), ``bun run
    X``, ``run-s a b``/``run-p``/``npm-run-all`` (with ``*`` patterns).
    ``defined`` None (a gate's own command, before any package.json is
    read) takes any bare word as a script."""
    for i, word in enumerate(words):
        tool = word.rsplit("/", 1)[-1]
        args = _bare(words[i + 1:])
        if tool in _RUN_ALL:
            return _run_all(args, defined)
        if tool not in _SCRIPT_TOOLS or not args:
            continue
        if args[0] in _RUN_VERBS:
            return args[1:2]
        if tool == "npm" and args[0] in _NPM_LIFECYCLE:
            return [_NPM_LIFECYCLE[args[0]]]
        if tool in ("pnpm", "yarn") and (defined is None or args[0] in defined):
            return args[:1]
        return []
    return []


def _bare(words: list[str]) -> list[str]:
    """The words that are not options nor the value of one that takes a
    value (``--filter pkg``, ``-C dir``)."""
    out, skip = [], False
    for word in words:
        if not skip and not word.startswith("-"):
            out.append(word)
        skip = word in _VALUE_OPTIONS
    return out


def _run_all(patterns: list[str], defined: Collection[str] | None) -> list[str]:
    """npm-run-all's arguments: names, or globs whose ``*`` stays within one
    ``:`` part and ``**`` spans them."""
    if defined is None:
        return [p for p in patterns if "*" not in p]
    out = []
    for pattern in patterns:
        rx = re.escape(pattern).replace(r"\*\*", ".+").replace(r"\*", "[^:]+")
        out += [name for name in defined if re.fullmatch(rx, name)]
    return out


def npm_scripts(argvs: Iterable[Iterable[str]]) -> list[str]:
    """Script names the gates' commands run through npm, pnpm, yarn, bun or
    npm-run-all (``npm run lint``, ``pnpm test``)."""
    found: list[str] = []
    for argv in argvs:
        for words in _commands(" ".join(str(a) for a in argv)):
            found += [n for n in _called(words, None) if n not in found]
    return found


def reached_scripts(scripts: Mapping[str, object], roots: Iterable[str]) -> list[str]:
    """Every script of ``scripts`` (package.json's) that running ``roots``
    runs: each one's ``pre``/``post`` script and every script its commands
    run in turn, to any depth."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop(0)
        script = scripts.get(name)
        if name in seen or not isinstance(script, str):
            continue
        seen.append(name)
        todo += [f"pre{name}", f"post{name}"]
        for words in _commands(script):
            todo += _called(words, scripts)
    return seen


def _package_scripts(data: bytes | None) -> dict[str, object]:
    try:
        doc = untrusted_json((data or b"{}").decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return {}
    found = doc.get("scripts") if isinstance(doc, dict) else None
    return found if isinstance(found, dict) else {}


def _named(words: Iterable[str], folder: str, files: Collection[str]) -> list[str]:
    """The words that name a file of ``files``, read from ``folder``."""
    out = []
    for word in words:
        word = word.split("=", 1)[-1].replace("<rootDir>/", "")
        path = posixpath.normpath(posixpath.join(folder, word)) if not word.startswith("/") else ""
        if path in files:
            out.append(path)
    return out


def reached_files(files: Collection[str], read: Callable[[str], bytes | None], roots: Iterable[str],
                  configs: bool = True) -> list[str]:
    """Files of the tree ``files`` that the gates reach past their own
    command line: those named by every package.json script the ``roots``
    reach, and (``configs``) the files a test runner's configuration names
    (setup files, the tsconfig ts-jest reads, a babel config)."""
    roots = list(roots)
    out: list[str] = []
    for path in sorted(files):
        folder = posixpath.dirname(path)
        if path.rsplit("/", 1)[-1] == "package.json":
            data = read(path)
            scripts = _package_scripts(data)
            for name in reached_scripts(scripts, roots):
                out += _named((w for c in _commands(str(scripts[name])) for w in c), folder, files)  # (a str: reached)
            if configs:
                out += _config_files(_runner_sections(data), folder, files)
        elif configs and matches_config(path):
            out += _config_files((read(path) or b"").decode("utf-8", "replace"), folder, files)
    return sorted(set(out))


# One pattern for every runner config's file name: a tree may hold many
# thousand paths, each asked once per check.
_CONFIG_NAME = re.compile("|".join(fnmatch.translate(p.rsplit("/", 1)[-1]) for p in RUNNER_CONFIGS))


def matches_config(path: str) -> bool:
    """Is ``path`` a JavaScript test runner's configuration file?"""
    return _CONFIG_NAME.match(path.rsplit("/", 1)[-1]) is not None


def _runner_sections(data: bytes | None) -> str:
    """The runner sections of a package.json, as text to search."""
    try:
        doc = untrusted_json((data or b"{}").decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return ""
    return json.dumps({k: doc.get(k) for k in _RUNNER_KEYS}) if isinstance(doc, dict) else ""


def _config_files(text: str, folder: str, files: Collection[str]) -> list[str]:
    """The files a runner configuration names, and
    the tsconfig next to it when it uses ts-jest (which reads that one
    unless told another, and a literal names the other)."""
    out = _named(_WORD.findall(text), folder, files)
    tsconfig = posixpath.join(folder, "tsconfig.json").lstrip("/")
    if "ts-jest" in text and tsconfig in files:
        out.append(tsconfig)
    return out
