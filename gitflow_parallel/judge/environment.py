"""The judged checkout's own environment: ``setup``, built from the attempt,
and the check that gates import the checkout's code, not someone else's.

A gate that runs the project's tests with whatever ``python`` is on the
``PATH`` usually tests the wrong code: with the common editable install
(``pip install -e .``) that interpreter imports the *main worktree's*
sources, whichever folder it runs in.  ``setup`` is the remedy: a command run
in the clean checkout before its gates (``python -m venv .venv &&
.venv/bin/pip install -e .``, ``npm ci``, ``uv sync``), whose ``path`` folders
then come first on the gates' ``PATH``, so the gates import and run what
the checkout holds.

Building an environment takes a while, so it is reused.  The scratch
checkout a check borrows is switched between commits in place
(``git/scratch``), and the clean that resets it spares the ``keep`` paths.
What was built is reused when both hold:

* its **key** is unchanged: the setup command and the content of the
  ``cache_key`` files *in the judged tree* (read from git objects), so an
  attempt that changes its dependencies gets them installed;
* its **manifest** is unchanged: every file under ``keep`` with its size,
  mode and change time (``ctime``, which no unprivileged process can set
  back), hashed after setup and again before each reuse.  The gates of one
  attempt run in that checkout and can write there; anything they change
  in the kept environment (a planted ``sitecustomize.py``, an edited
  package) changes the manifest, and the next check builds afresh rather
  than trusting it.

The stamp that records key and manifest lives beside the checkout, not in
it (``<repo>.parallel/.judged/scratch+<k>.setup.json``).  The pack says
what happened (``setup``: the command, key, whether the cache held, exit
code, seconds, log).  A setup that fails fails every gate of the check: the
gates could only have judged some other environment.

What a gate imports.  Before the gates run, the Python each gate starts (its
``argv[0]``, or the interpreter its ``#!`` line or ``sh -c`` names) is asked,
in the gate's own environment and folder, where it would import each
package the checkout provides (folders with ``__init__.py`` at the top or
under ``src/``, and modules under ``src/``).  One that would come from
anywhere else - the main worktree through an editable install, a copy
installed in site-packages - means the gates would judge other code than
the commit: the check is refused with ``PARALLEL_GATE_OUTSIDE_CHECKOUT``,
naming the package, the path and the ``setup:`` that fixes it.  Folders
that hold tests or tooling (``tests``, ``docs``, ...) are not asked about.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import stat
from pathlib import Path
from typing import Callable, cast

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, beneath, canonical_json, remove_tree, sha256_bytes, tree_entries, untrusted_json
from gitflow_parallel.git import protected
from gitflow_parallel.config_schema import FrozenConfig, GateConfig, SetupConfig
from gitflow_parallel.shapes.pack import SetupEntry

# How setup runs: (argv, timeout) in the checkout, or (argv, timeout, lower
# layers, upper layer) under the namespace layer; (exit code, error, seconds, log).
Run = Callable[[list[str], float], tuple[int | None, str | None, float, Path]]
RunLayered = Callable[[list[str], float, list[Path] | None, tuple[Path, Path]], tuple[int | None, str | None, float, Path]]


def stamp_path(checkout: Path) -> Path:
    return checkout.parent / f"{checkout.name}.setup.json"


def cache_key(repo: pygit2.Repository, tree: str, setup: SetupConfig) -> str:
    """The command, what it keeps and provides, and the content of the
    ``cache_key`` files of ``tree`` (from git objects: the attempt's own)."""
    root = cast(pygit2.Object, repo.get(tree)).peel(pygit2.Tree)
    files: dict[str, str] = {}
    globs = [p for p in setup["cache_key"] if any(c in p for c in "*?[")]
    for path in setup["cache_key"]:
        if path in globs:
            continue
        try:
            files[path] = str(root[path].id)  # a plain path: looked up, not searched for
        except KeyError:
            pass
    if globs:
        index = pygit2.Index()
        index.read_tree(root)
        files.update({e.path: str(e.id) for e in index if protected.matches(e.path, globs, folders=False)})
    data = {"run": setup["run"], "keep": setup["keep"], "path": setup["path"], "files": dict(sorted(files.items()))}
    return sha256_bytes(canonical_json(data).encode())


def manifest(checkout: Path, keep: list[str]) -> str:
    """sha256 over every entry under the ``keep`` paths: path, type, mode,
    size and ctime (no symlink followed)."""
    digest = hashlib.sha256()
    for rel in sorted(keep):
        top = checkout / rel
        for entry in _walk(top):
            try:
                st = os.lstat(entry)
            except OSError:
                continue
            name = os.path.relpath(entry, checkout)
            digest.update(f"{name}\0{st.st_mode:o}\0{st.st_size}\0{st.st_ctime_ns}\n".encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def _walk(top: Path) -> list[str]:
    if not os.path.lexists(top):
        return []
    out = [str(top)]
    if stat.S_ISDIR(os.lstat(top).st_mode):  # no recursion: a gate may leave a tree deeper than Python's limit
        out += sorted(entry.path for entry, _ in tree_entries(top))
    return out


def _read_stamp(checkout: Path) -> dict[str, object]:
    try:
        data = json.loads(stamp_path(checkout).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _drop(checkout: Path, keep: list[str]) -> None:
    """Remove what an earlier setup kept (and the stamp that vouched for it),
    never through a link: setup ran the attempt's build in the checkout
    (Landlock alone), which made the folder holding a ``keep`` path a link to
    a folder of the user's.  What cannot be reached so stays, unvouched for."""
    stamp_path(checkout).unlink(missing_ok=True)
    for rel in keep:
        try:
            with beneath(checkout, rel) as (fd, name):
                if stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
                    remove_tree(name, ignore_errors=True, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
        except OSError:
            continue


def needed(cfg: FrozenConfig, gates: list[GateConfig]) -> SetupConfig | None:
    """The setup to run before ``gates`` (None: no setup, or no gate wants it)."""
    setup = cfg.get("setup")
    if not setup or not any(g.get("setup", True) for g in gates):
        return None
    return setup.copy()


def prepare(repo: pygit2.Repository, setup: SetupConfig, tree: str, checkout: Path,
            run: Run) -> SetupEntry:
    """Build (or reuse) the environment of ``checkout``, which holds ``tree``.

    ``run(argv, timeout)`` runs the command in the checkout the way gates
    run and returns (exit code or None, error or None, seconds, log path).
    Returns the pack's ``setup`` entry; ``passed`` false when it failed."""
    key = cache_key(repo, tree, setup)
    stamp = _read_stamp(checkout)
    entry = _entry(setup, key)
    if setup["keep"] and stamp.get("key") == key and stamp.get("manifest") == manifest(checkout, setup["keep"]):
        entry.update({"cached": True, "passed": True})
        return entry
    _drop(checkout, setup["keep"])
    code, error, seconds, log = run(list(setup["run"]), float(setup["timeout"]))
    entry.update({"exit_code": code, "duration_s": round(seconds, 3), "log": str(log)})
    if error is not None or code != 0:
        _drop(checkout, setup["keep"])  # half built is not built
        entry.update({"code": E.EXECUTE_FAILED, "error": error or f"setup exited {code}"})
        return entry
    if setup["keep"]:
        atomic_write(stamp_path(checkout), json.dumps({"key": key, "manifest": manifest(checkout, setup["keep"])}))
    entry["passed"] = True
    return entry


def _entry(setup: SetupConfig, key: str) -> SetupEntry:
    """The ``setup`` entry of a pack before anything ran."""
    return {"argv": list(setup["run"]), "key": key, "keep": list(setup["keep"]), "path": list(setup["path"]),
            "cached": False, "exit_code": None, "duration_s": None, "log": None, "passed": False, "code": None,
            "error": None}


# -- the kept environment as a layer (the namespace layer) ---------------------------
ENVS = "envs"
READY = "ready.json"


def envs_dir(parallel_dir: Path) -> Path:
    return parallel_dir / ENVS


def _dependency_tree(repo: pygit2.Repository, base: str, tree: str, setup: SetupConfig) -> str | None:
    """The tree a kept environment may be built from for ``tree``: the
    base commit's, when the attempt changed none of the ``cache_key`` files
    (so its dependencies are the base's); None when it changed them."""
    base_tree = str(cast(pygit2.Object, repo.get(base)).peel(pygit2.Tree).id)
    return base_tree if cache_key(repo, base_tree, setup) == cache_key(repo, tree, setup) else None


def prepare_layer(repo: pygit2.Repository, setup: SetupConfig, tree: str, base: str, parallel_dir: Path,
                  checkout: Path, run: RunLayered) -> tuple[SetupEntry, Path | None, Callable[[], None]]:
    """The environment of a judged ``tree`` as an overlay layer (namespace
    layer): (the pack's ``setup`` entry, the layer or None when setup
    failed, what to call when the judging is done).

    Kept and reused across attempts only when built from trusted inputs:
    the *base* commit's files, laid out at the checkout's path (so an
    editable install points where every attempt's code will be), for an
    attempt that changed no ``cache_key`` file; pruned to the ``keep``
    paths; never written again (gates see it read-only, under their own
    upper layer).  An attempt that changed its dependency files gets a
    throwaway one, built from its own tree and removed after its judging.

    ``run(argv, timeout, lower, upper)`` runs setup in the checkout's
    place with ``lower`` as the layers under ``upper``.  A layer is kept
    per checkout of the pool (``checkout``): what setup writes names the
    path it was built at (an editable install's ``.pth``), and another
    checkout's path is not there."""
    key = cache_key(repo, tree, setup)
    entry = _entry(setup, key)
    trusted = _dependency_tree(repo, base, tree, setup) if setup["keep"] else None
    final = envs_dir(parallel_dir) / f"{key[:32]}-{sha256_bytes(str(checkout).encode())[:12]}"
    if trusted is not None and (final / READY).is_file():
        entry.update({"cached": True, "passed": True, "built_from": "base"})
        return entry, final / "layer", lambda: None
    from gitflow_parallel.judge import layers

    space = layers.make_space(parallel_dir, prefix="env-")
    lower: list[Path] | None = None
    if trusted is not None:
        source = space.folder / "source"
        _write_tree(repo, trusted, source)
        lower = [source]
    code, error, seconds, log = run(list(setup["run"]), float(setup["timeout"]), lower, space.pair)
    entry.update({"exit_code": code, "duration_s": round(seconds, 3), "log": str(log),
                  "built_from": "base" if trusted is not None else "attempt"})
    if error is not None or code != 0:
        layers.remove(space.folder)
        entry.update({"code": E.EXECUTE_FAILED, "error": error or f"setup exited {code}"})
        return entry, None, lambda: None
    layers.prune(space.upper, list(setup["keep"]))
    if trusted is None:
        entry["passed"] = True
        return entry, space.upper, lambda: layers.remove(space.folder)
    layers.remove(space.folder / "source")
    layers.remove(space.work)
    atomic_write(space.folder / READY, json.dumps({"key": key, "tree": trusted}))
    space.upper.rename(space.folder / "layer")
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(space.folder, final)
    except OSError:  # another check built it meanwhile: theirs is as good
        layers.remove(space.folder)
        if not (final / READY).is_file():
            entry.update({"code": E.EXECUTE_FAILED, "error": f"the kept environment {final} is not complete"})
            return entry, None, lambda: None
    entry["passed"] = True
    return entry, final / "layer", lambda: None


def _write_tree(repo: pygit2.Repository, tree: str, folder: Path) -> None:
    """The files of ``tree`` written into the new ``folder`` by libgit2 (no filter runs)."""
    folder.mkdir()
    pygit2.option(pygit2.enums.Option.ENABLE_STRICT_HASH_VERIFICATION, 1)
    target = cast(pygit2.Object, repo.get(tree)).peel(pygit2.Tree)
    strategy = pygit2.enums.CheckoutStrategy
    repo.checkout_tree(target, strategy=strategy.FORCE | strategy.DONT_UPDATE_INDEX,  # type: ignore[no-untyped-call]
                       directory=str(folder))


def path_entries(setup: SetupConfig | None, checkout: Path) -> list[str]:
    """The folders the gates find first on their ``PATH``."""
    return [str(checkout / p) for p in (setup.get("path") if setup else None) or []]


# -- what the gates import ------------------------------------------------------------
# Folders that hold tests or tooling, not the product: never asked about.
_NOT_PRODUCT = {"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks", "scripts",
                "tools", "build", "dist", "site-packages"}
_PYTHON = re.compile(r"python[0-9.]*$")
_FIND = """
import importlib.util, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec is not None:
        out[name] = [p for p in (list(spec.submodule_search_locations or []) or [spec.origin]) if p]
print(json.dumps(out))
"""


def provided_packages(repo: pygit2.Repository, tree: str) -> list[str]:
    """Top-level import names the judged tree provides (from git objects)."""
    root = cast(pygit2.Object, repo.get(tree)).peel(pygit2.Tree)
    names: set[str] = set()
    for folder in (root, _subtree(repo, root, "src")):
        if folder is None:
            continue
        for entry in folder:
            name = entry.name
            if name is None:  # a tree entry always has one
                continue
            if entry.type_str == "tree" and name.isidentifier() and name not in _NOT_PRODUCT:
                sub = cast(pygit2.Tree, repo.get(entry.id))
                if any(e.name == "__init__.py" for e in sub):
                    names.add(name)
            elif folder is not root and name.endswith(".py") and name[:-3].isidentifier():
                names.add(name[:-3])
    return sorted(names)


def _subtree(repo: pygit2.Repository, tree: pygit2.Tree, name: str) -> pygit2.Tree | None:
    try:
        entry = tree[name]
    except KeyError:
        return None
    return cast(pygit2.Tree, repo.get(entry.id)) if entry.type_str == "tree" else None


def interpreter(argv: list[str], cwd: Path, env: dict[str, str]) -> str | None:
    """The Python a gate's command starts, if it is one we can tell."""
    first = argv[0]
    if Path(first).name in ("sh", "bash", "dash") and len(argv) >= 3 and argv[1] == "-c":
        try:
            words = shlex.split(argv[2])
        except ValueError:
            return None
        return interpreter(words, cwd, env) if words else None
    path = str(cwd / first) if "/" in first and not first.startswith("/") else first
    found = path if "/" in path else shutil.which(path, path=env.get("PATH", ""))
    if not found:
        return None
    if _PYTHON.match(Path(found).name):
        return found
    try:  # the attempt's file, or its link to a FIFO of the host: never waited on
        fd = os.open(found, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb", closefd=True) as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            line = handle.readline(256).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not line.startswith("#!"):
        return None
    words = line[2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = words[1:]
    if words and _PYTHON.match(Path(words[0]).name):
        return words[0] if "/" in words[0] else shutil.which(words[0], path=env.get("PATH", ""))
    return None


def check_imports(python: str, packages: list[str], cwd: Path, ask: Callable[[list[str]], bytes]) -> None:
    """Refuse when ``python`` would import a package of the checkout from
    anywhere else (see the module doc).  ``ask(argv)`` runs the question
    where and as the gates run (sandboxed: it runs the attempt's code) and
    returns its output."""
    if not packages:
        return
    try:
        lines = [l for l in ask([python, "-c", _FIND, *packages]).splitlines() if l.strip()]
        found = untrusted_json(lines[-1] if lines else b"{}")
    except (OSError, ValueError):
        return  # it cannot even start: the gate will fail loudly on its own
    top = os.path.realpath(cwd)
    for name, places in sorted(found.items()) if isinstance(found, dict) else []:
        # The attempt's code may have answered (a committed json.py): only
        # a list of absolute paths is an answer.
        outside = [p for p in places if isinstance(p, str) and p.startswith("/") and "\0" not in p
                   and os.path.commonpath([top, os.path.realpath(p)]) != top] if isinstance(places, list) else []
        if outside:
            raise ParallelError(
                E.GATE_OUTSIDE_CHECKOUT,
                f"the gates' {python} would import {name!r} from {outside[0]}, not from the checkout being judged; "
                "every verdict would be about that code",
                hint="give .gitparallel.yaml a setup that builds the checkout's own environment, e.g. "
                     "setup: {run: [sh, -c, 'python3 -m venv .venv && .venv/bin/pip install -q -e . pytest'], "
                     "cache_key: [pyproject.toml], keep: [.venv], path: [.venv/bin]} "
                     "(`git parallel init` writes one)",
                package=name, path=outside[0])
