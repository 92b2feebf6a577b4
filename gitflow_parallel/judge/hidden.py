"""Hidden tests: tests the agents never see, laid over the judged checkout
for one gate.

A gate with ``hidden: /path/to/folder`` names a folder outside the
repository whose files mirror the repository's layout
(``tests/test_hidden.py`` there lands at ``tests/test_hidden.py`` in the
checkout), the way a benchmark applies its held-out test patch after the
attempt's changes.  Just before that gate runs, each file is written into
the clean checkout (replacing the attempt's file of the same path); right
after, every path is put back as the judged commit has it.  So the files
are in the checkout only while that gate runs, and never in an agent's
worktree, a commit, a ref or a note.

What the gate printed would show them (a failing assertion quotes its
line), so its output is not kept: the result holds the exit code and the
counts of a test runner's summary (``1 failed, 3 passed``, read by
``failures.tally`` for every runner it knows), and
``log`` is null, so neither the pack, its copy on
``refs/parallel/evidence/``, the report nor retry feedback can carry it.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gitflow_parallel import errors as E
from gitflow_parallel import failures
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import beneath, read_tail, remove_tree, unlink_beneath, write_beneath
from gitflow_parallel.proc.sandbox import private_tmp, tmp_root

# The end of a hidden gate's output read for its summary: mocha and node's
# spec reporter print their counts before each failure's details.
_SUMMARY_TAIL = 1 << 20


def folder_of(value: str, repository: list[Path]) -> Path:
    """The hidden folder a gate names, refused if it is missing or inside
    the repository (whose files every agent can read)."""
    root = Path(os.path.expanduser(value)).resolve()
    if not root.is_dir():
        raise ParallelError(E.CONFIG_INVALID, f"the hidden tests folder {value} is not a folder on this machine",
                            hint="create it, or fix the gate's hidden: in .gitparallel.yaml on the base branch")
    for top in repository:
        top = top.resolve()
        if root == top or top in root.parents:
            raise ParallelError(E.CONFIG_INVALID, f"the hidden tests folder {root} is inside the repository ({top}), "
                                "where every agent can read it",
                                hint="keep hidden tests in a folder outside the repository")
    return root


def _files(root: Path) -> list[str]:
    """Regular files under ``root``, relative (no symlink followed)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
        for name in sorted(names):
            full = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                out.append(os.path.relpath(full, root))
    return out


def listing(root: Path) -> list[str]:
    """The files a hidden folder lays over the checkout."""
    return _files(root)


def safe_target(checkout: Path, rel: str) -> Path:
    """``checkout/rel``, refused when a folder on the way is a symlink (an
    attempt's committed link must not carry what we write elsewhere)."""
    path = checkout
    for part in Path(rel).parts[:-1]:
        path = path / part
        if path.is_symlink():
            raise ParallelError(E.EVIDENCE_MISMATCH, f"{path.relative_to(checkout)} is a symlink in the judged "
                                "commit; no test file is written through it",
                                hint="the attempt must not turn a test folder into a symlink")
    return checkout / rel


@contextmanager
def overlaid(root: Path, checkout: Path, canary: Path | None = None) -> Iterator[list[str]]:
    """The hidden files (and the ``canary`` folder's) written over
    ``checkout`` for the ``with`` body, the hidden ones listed; afterwards
    every path holds what it held before (or is gone)."""
    saved: dict[str, tuple[bytes, int] | None] = {}
    made: list[Path] = []
    sources = [(root, rel) for rel in _files(root)] + ([(canary, rel) for rel in _files(canary)] if canary else [])
    try:
        for source, rel in sources:
            target = safe_target(checkout, rel)
            saved[rel] = ((target.read_bytes(), target.stat().st_mode) if target.is_file() and not target.is_symlink()
                          else None)
            for parent in reversed(target.relative_to(checkout).parents[:-1]):
                if not (checkout / parent).exists():
                    (checkout / parent).mkdir()
                    made.append(checkout / parent)
            unlink_beneath(checkout, rel)
            write_beneath(checkout, rel, (source / rel).read_bytes())
        yield sorted(rel for source, rel in sources if source == root)
    finally:
        # The gate ran the attempt's code in the checkout itself: a folder
        # on the way may now be a link to one of the user's.  What cannot be
        # put back without following one is left: the checkout is made
        # afresh before anyone judges in it again (``scratch``).
        for rel, data in saved.items():
            try:
                unlink_beneath(checkout, rel)
                if data is not None:
                    write_beneath(checkout, rel, data[0], stat.S_IMODE(data[1]))
            except OSError:
                continue
        _forget(checkout, [rel for _, rel in sources])
        for folder in reversed(made):
            try:
                with beneath(checkout, str(folder.relative_to(checkout))) as (fd, name):
                    os.rmdir(name, dir_fd=fd)
            except OSError:
                pass


def _forget(checkout: Path, rels: list[str]) -> None:
    """Remove what a test run wrote of the hidden files into the checkout
    itself (under Landlock alone, where they were copied in): each one's
    bytecode (``__pycache__/<name>.*.pyc``: its names and constants, pytest's
    rewritten asserts with them) and pytest's cache (``.pytest_cache``, whose
    ``nodeids`` and ``lastfailed`` name every test run) in each folder from
    the checkout's top down to theirs, where pytest puts its rootdir.  The
    cache goes whole: it is only ever a cache, and the gate could have made
    it a link, so it is removed without following one.  Under the namespace
    layer all of it is in the gate's throwaway layer instead."""
    tops = {"."}
    for rel in rels:
        parent = os.path.dirname(rel)
        while parent:
            tops.add(parent)
            parent = os.path.dirname(parent)
        stem, ext = os.path.splitext(os.path.basename(rel))
        if ext == ".py":
            _remove_bytecode(checkout, os.path.join(os.path.dirname(rel), "__pycache__"), stem + ".")
    for top in sorted(tops):
        try:
            with beneath(checkout, os.path.join(top, ".pytest_cache")) as (fd, name):
                remove_tree(name, ignore_errors=True, dir_fd=fd)
        except OSError:
            continue


def _remove_bytecode(checkout: Path, cache: str, prefix: str) -> None:
    try:
        with beneath(checkout, cache) as (parent, name):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return  # none, or not a folder of the checkout's
    try:
        for entry in os.listdir(fd):
            if entry.startswith(prefix) and entry.endswith(".pyc"):
                try:
                    os.unlink(entry, dir_fd=fd)
                except OSError:
                    continue
    finally:
        os.close(fd)
    try:  # an empty one goes too, as if never made
        with beneath(checkout, cache) as (fd, name):
            os.rmdir(name, dir_fd=fd)
    except OSError:
        pass


# The canary's name is drawn from these: plain words, as a test's are.
_WORDS = ("parse", "value", "empty", "order", "limit", "round", "merge", "split", "quote", "cache", "token",
          "range", "input", "state", "index", "field", "match", "scope", "batch", "retry", "clock", "unit")


@contextmanager
def canary_layer(root: Path) -> Iterator[tuple[str | None, Path | None]]:
    """A folder holding one test that must fail, laid beside the hidden
    pytest tests (the folder of the first ``test_*.py``), under a name drawn
    at random for this run: (its function name, the folder), or (None,
    None) for hidden tests that are not pytest's.  A run that reports it
    passed, or never ran it, was forged (``judge/outcome``)."""
    tests = [rel for rel in _files(root) if _pytest_file(rel)]
    if not tests:
        yield None, None
        return
    taken = set(_files(root))
    while True:
        words = [secrets.choice(_WORDS) for _ in range(3)]
        name, module = f"test_{'_'.join(words[:2])}_{words[2]}", f"test_{words[0]}_{words[2]}.py"
        rel = os.path.join(os.path.dirname(tests[0]), module)
        if rel not in taken:
            break
    folder = private_tmp("git-parallel-canary-")
    try:
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"def {name}():\n    assert 0 == 1\n")
        yield name, folder
    finally:
        remove_tree(folder, ignore_errors=True)


def _pytest_file(rel: str) -> bool:
    name = os.path.basename(rel)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def scratch_log() -> Path:
    """Where a hidden gate's output goes while it runs (outside every repository)."""
    # In the folder no sandboxed command sees: the output may quote the tests.
    fd, name = tempfile.mkstemp(prefix="git-parallel-hidden-", suffix=".log", dir=tmp_root())
    os.close(fd)
    return Path(name)


def summary(log: Path) -> str | None:
    """The one line of a hidden gate's output that is kept: a test runner's
    counts, else nothing (any other line may quote a hidden test)."""
    try:  # the gate could have grown it to gigabytes (a sparse ftruncate)
        text = read_tail(log, _SUMMARY_TAIL)[0].decode("utf-8", "replace")
    except OSError:
        return None
    # Built from counts alone, each of six digits at most: the attempt's
    # code prints what is read, and it goes back to the next attempt (retry
    # feedback), so it must not be a long number spelling the tests out.
    counted = failures.tally(text)
    return counted.line if counted else None
