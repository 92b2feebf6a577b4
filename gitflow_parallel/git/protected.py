"""The protected paths of a judged checkout.

What is judged is not quite the commit: it is the commit's tree with every *protected* path as the base commit has it (a file the
attempt added under a protected pattern is left out).  So an attempt is
always tested against the real tests and the real gate scripts.  Protected
are ``.gitparallel.yaml``, every path a gate's or the score command's
argv names that exists in the base tree (a word of an argument, so
``sh -c "./test.sh && pytest tests"`` protects ``test.sh`` and ``tests``),
and the config's ``protect`` globs (``*`` within a path component, ``**``
across them; a pattern that names a folder protects what is under it).
When that changes anything, the judged tree is written as a commit of its
own (parent: the judged commit, fixed identity and date, so the same inputs
give the same oid) and that commit is checked out.
"""

from __future__ import annotations

import os
import posixpath
import re
from functools import lru_cache
from typing import Any, Iterable, Iterator, Mapping

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import appended, harness
from gitflow_parallel.config import CONFIG_FILE
from gitflow_parallel.errors import ParallelError

# Who "wrote" a judged tree: fixed, so one tree gives one commit oid.
JUDGE_SIGNATURE = ("git-parallel judge", "git-parallel@localhost")


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``*`` and ``?`` stay within one path component, ``**`` spans any.
    ``./``, ``//`` and a trailing ``/`` are read as the config reads them
    (``config_schema.protect_glob``), for records frozen before it did."""
    pattern = "/".join(p for p in pattern.split("/") if p not in ("", "."))
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        out.append("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c))
        i += 1
    return re.compile("".join(out))


def matches(path: str, patterns: Iterable[str], folders: bool = True) -> bool:
    """Does ``path`` (or, with ``folders``, one of its folders) match one of ``patterns``?"""
    parts = path.split("/")
    prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)] if folders else [path]
    return any(_glob_regex(p).fullmatch(prefix) for p in patterns for prefix in prefixes)


def _named_paths(argv: Iterable[str], tree: pygit2.Tree) -> list[str]:
    """The words of ``argv`` that name a path of ``tree``."""
    found = []
    for arg in argv:
        for word in str(arg).split():
            rel = os.path.normpath(word).lstrip("/") if not word.startswith("/") else ""
            if not rel or rel == "." or rel.startswith(".."):
                continue
            try:
                tree[rel]
            except (KeyError, ValueError):
                continue
            found.append(rel)
    return found


def protected_patterns(config: Mapping[str, Any], base_tree: pygit2.Tree) -> list[str]:
    """Every pattern protected for a run with ``config`` on ``base_tree``:
    the config file, the paths the gates' and score's commands name, the
    ``protect`` globs and, unless ``protect_defaults: false``, the harness
    files (``harness.HARNESS_PATTERNS``) and the score's findings file."""
    named = [CONFIG_FILE]
    for gate in config.get("gates") or []:
        named += _named_paths(gate["run"], base_tree)
    named += _named_paths((config.get("score") or {}).get("command") or [], base_tree)
    named += _reached_files(config, base_tree)
    literal = [re.sub(r"([*?])", r"[\1]", p) for p in named]  # a file named "a*b" is literal
    defaults = list(harness.HARNESS_PATTERNS) if config.get("protect_defaults", True) else []
    findings = findings_file(config)
    defaults += [re.sub(r"([*?])", r"[\1]", findings)] if findings else []
    defaults += kept_environment(config)
    return sorted(set(literal) | set(config.get("protect") or []) | set(defaults))


def unmatched(globs: Iterable[str], tree: pygit2.Tree) -> list[str]:
    """The ``protect`` globs that match no file of ``tree``: most likely
    misspelt, they protect nothing the attempts start from (one walk of the
    tree, ended once every glob matched)."""
    left = list(dict.fromkeys(globs))
    if not left:
        return []
    for path, _ in _blobs(tree):
        left = [g for g in left if not matches(path, [g])]
        if not left:
            break
    return left


def unmatched_warnings(config: Mapping[str, Any], tree: pygit2.Tree) -> list[str]:
    """One warning per ``protect`` glob of ``config`` that matches nothing in ``tree``."""
    return [f"protect: {g!r} matches nothing in the base tree, so it protects no file the attempts start "
            "from; check its spelling (a folder is named from the top of the repository: tests or tests/**)"
            for g in unmatched(config.get("protect") or [], tree)]


def kept_environment(config: Mapping[str, Any]) -> list[str]:
    """The setup's ``keep`` paths, as patterns (each holds what is under it),
    when they are protected (``protect_defaults``).  The kept environment is
    laid there over the checkout, its folders merged with the checkout's: a
    ``.venv/bin/sh`` the attempt committed (the environment has none) came
    first on the gates' ``PATH`` and ran as their shell."""
    if not config.get("protect_defaults", True):
        return []
    keep = (config.get("setup") or {}).get("keep") or []
    paths = {posixpath.normpath(str(k)).strip("/") for k in keep}
    return sorted(re.sub(r"([*?])", r"[\1]", p) for p in paths if p not in ("", ".", "..") and not p.startswith("../"))


def findings_file(config: Mapping[str, Any]) -> str | None:
    """The ``score.findings`` file as a path of the tree (``./out//f.jsonl``
    is ``out/f.jsonl``), when it is protected (``protect_defaults``).  It is a
    gate's output: an attempt's own copy would score itself, and once landed
    would be the base's copy every later attempt is judged with."""
    findings: str | None = (config.get("score") or {}).get("findings")
    if not findings or not config.get("protect_defaults", True):
        return None
    return posixpath.normpath(findings)


def _reached_files(config: Mapping[str, Any], tree: pygit2.Tree) -> list[str]:
    """What the gates reach through package.json scripts and the runner
    configuration (``harness.reached_files``)."""
    files = {path for path, _ in _blobs(tree)}
    roots = harness.npm_scripts(g["run"] for g in config.get("gates") or [])
    return harness.reached_files(files, lambda p: _tree_blob(tree, p), roots, config.get("protect_defaults", True))


def _tree_blob(tree: pygit2.Tree, path: str) -> bytes | None:
    found = tree[path]
    return found.data if isinstance(found, pygit2.Blob) else None


def _blobs(tree: pygit2.Tree, prefix: str = "") -> Iterator[tuple[str, pygit2.Oid]]:
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            yield from _blobs(entry, f"{prefix}{entry.name}/")
        elif entry.type_str == "blob":
            yield f"{prefix}{entry.name}", entry.id


def _line_counts(patch: pygit2.Patch | None) -> tuple[int, int]:
    if patch is None or patch.delta.is_binary:
        return 0, 0
    _, added, deleted = patch.line_stats
    return added, deleted


def _blob_data(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> bytes | None:
    try:
        entry = tree[path]
    except KeyError:
        return None
    return repo.odb.read(entry.id)[1] if entry.type_str == "blob" else None


def changed_protected(repo: pygit2.Repository, base_tree: pygit2.Tree, tree: pygit2.Tree,
                      patterns: list[str], config: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The protected paths whose entry differs between the two trees, each
    with how (``added``, ``deleted``, ``modified``), its line counts and
    whether it is the harness's (``harness``); a Python test file the
    attempt only added tests to names them (``appended``).  A mixed file
    (``harness.MIXED_FILES``) counts only when its harness sections differ."""
    config = config or {}
    mixed = config.get("protect_defaults", True)
    findings = findings_file(config)
    kept = kept_environment(config)
    scripts = harness.npm_scripts(g["run"] for g in config.get("gates") or [])
    folders = harness.script_folders(g["run"] for g in config.get("gates") or [])
    out: dict[str, dict[str, Any]] = {}
    diff = base_tree.diff_to_tree(tree)
    for i, delta in enumerate(diff.deltas):
        for path in {delta.old_file.path, delta.new_file.path}:
            if path in out:
                continue
            is_mixed = mixed and harness.is_mixed(path)
            restored, dependencies = True, False
            # No pattern can name every such module, nor every Go test file with a TestMain.
            shadow = mixed and (harness.shadows(path, folders) or _test_main(repo, (base_tree, tree), path))
            if shadow or matches(path, patterns):
                harness_file = is_mixed or shadow or is_harness(path) or matches(path, kept)
            elif is_mixed and harness.harness_changed(path, _blob_data(repo, base_tree, path),
                                                      _blob_data(repo, tree, path), scripts):
                harness_file = True
            elif mixed and (matches(path, harness.DEPENDENCY_PATTERNS, folders=False) or is_mixed and
                            harness.dependencies_changed(path, _blob_data(repo, base_tree, path),
                                                         _blob_data(repo, tree, path))):
                harness_file, restored, dependencies = False, False, True
            else:
                continue
            added, deleted = _line_counts(diff[i])  # a patch only for what is shown
            status = delta.status
            change = ("added" if status == pygit2.enums.DeltaStatus.ADDED
                      else "deleted" if status == pygit2.enums.DeltaStatus.DELETED else "modified")
            out[path] = {"path": path, "change": change, "lines_added": added, "lines_deleted": deleted,
                         "harness": harness_file or path in (CONFIG_FILE, findings), "dependencies": dependencies,
                         "restored": restored}
            if change == "modified" and restored and not out[path]["harness"] and appended.python_file(path):
                _mark_appended(out[path], repo, base_tree, tree)
    return [out[p] for p in sorted(out)]


def _test_main(repo: pygit2.Repository, trees: tuple[pygit2.Tree, pygit2.Tree], path: str) -> bool:
    """Does either side's ``path`` define a Go ``TestMain`` (``harness.defines_test_main``)?"""
    return path.endswith("_test.go") and any(harness.defines_test_main(path, _blob_data(repo, t, path)) for t in trees)


# Past this a file is data or a bundle (minified, vendored), not code an
# agent wrote line by line: its lines are not read.
_READ_AT_MOST = 1 << 20


def added_lines(repo: pygit2.Repository, base: str, commit: str,
                patterns: list[str]) -> dict[str, list[tuple[int, str]]]:
    """The lines ``commit`` added since ``base`` to each path outside the
    protected ``patterns`` (those are judged as the base has them, or are
    tests), as (line number, text); binary files and files of a MiB or
    more are left out."""
    diff = repo[base].peel(pygit2.Tree).diff_to_tree(repo[commit].peel(pygit2.Tree))
    out: dict[str, list[tuple[int, str]]] = {}
    for i, delta in enumerate(diff.deltas):
        path = delta.new_file.path
        if delta.status == pygit2.enums.DeltaStatus.DELETED or delta.new_file.size >= _READ_AT_MOST \
                or matches(path, patterns) or harness.shadows(path):
            continue
        patch = diff[i]  # a patch only for what is read
        if patch is None or patch.delta.is_binary:
            continue
        lines = [(line.new_lineno, line.raw_content.decode("utf-8", "replace").rstrip("\r\n"))
                 for hunk in patch.hunks for line in hunk.lines if line.origin == "+"]
        if lines:
            out[path] = lines
    return out


def file_at(repo: pygit2.Repository, commit: str, path: str) -> bytes | None:
    """The content of ``path`` in ``commit`` (None: no such file)."""
    return _blob_data(repo, repo[commit].peel(pygit2.Tree), path)


def is_harness(path: str, folders: Iterable[str] = ()) -> bool:
    """Is ``path`` wholly the harness's (``harness.HARNESS_PATTERNS``), or a
    module that takes the place of one the runner or the standard library
    provides (``harness.shadows``; ``folders``: the gates' script folders)?"""
    return matches(path, harness.HARNESS_PATTERNS, folders=False) or harness.shadows(path, folders)


def _mark_appended(change: dict[str, Any], repo: pygit2.Repository, base_tree: pygit2.Tree,
                   tree: pygit2.Tree) -> None:
    """A test file the attempt only added tests to (``appended``) names
    them: ``appended``, the tests, as ``Class::name``."""
    old, new = (_blob_data(repo, t, change["path"]) for t in (base_tree, tree))
    names = appended.added_tests(old, new) if old is not None and new is not None else None
    if names:
        change["appended"] = names


def blocks_pick(change: dict[str, Any]) -> bool:
    """Does this protected change keep its attempt out of an automatic pick?
    Every change does but a new test file, or tests appended to one
    (``appended``): a changed config or harness, a deleted or rewritten
    test, would land and change how later runs judge."""
    if change["harness"] or change.get("dependencies", False):
        return True
    return not (change["change"] == "added" or change["change"] == "modified" and change.get("appended"))


def added_tests(changes: list[dict[str, Any]]) -> list[str]:
    """The new files under protected paths that are not the harness's, and
    the test files the attempt only added tests to: run as a second stage
    (``judge/check``), as the attempt has them."""
    return [c["path"] for c in changes if not blocks_pick(c)]


def test_ids(changes: list[dict[str, Any]]) -> list[str]:
    """The added tests as a runner names them: ``path::name`` for tests
    appended to a file, the path alone for a new file (all its tests)."""
    out = []
    for c in changes:
        if not blocks_pick(c):
            out += [f"{c['path']}::{name}" for name in c["appended"]] if c.get("appended") else [c["path"]]
    return out


def judged_commit(repo: pygit2.Repository, commit: str, base: str, patterns: list[str],
                  config: Mapping[str, Any] | None = None) -> tuple[str, str, list[dict[str, Any]]]:
    """What is checked out to judge ``commit``: (commit oid, tree oid, the
    protected changes the attempt made, as :func:`changed_protected`).  The
    commit is ``commit`` itself when it changed no protected path."""
    target = repo[commit].peel(pygit2.Commit)
    base_tree = repo[base].peel(pygit2.Tree)
    details = changed_protected(repo, base_tree, target.tree, patterns, config)
    changed = [c["path"] for c in details if c["restored"]]
    if not changed:
        return commit, str(target.tree_id), details
    index = pygit2.Index()
    index.read_tree(target.tree)
    for path in changed:
        try:
            index.remove(path)
        except (KeyError, OSError, pygit2.GitError):
            pass
        try:
            entry = base_tree[path]
        except KeyError:
            continue  # added by the attempt: left out
        if entry.type_str == "blob" or entry.filemode == pygit2.GIT_FILEMODE_COMMIT:
            index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
    try:
        tree = index.write_tree(repo)
    except pygit2.GitError as exc:
        raise ParallelError(
            E.PROTECTED_PATH_CHANGED,
            f"{commit[:12]} turns a protected path into a folder or a file where the base has the other "
            f"({', '.join(changed[:5])}): {exc}",
            hint="leave protected paths as the base has them, or set protect_mode: refuse") from None
    name, email = JUDGE_SIGNATURE
    sig = pygit2.Signature(name, email, 0, 0)
    message = f"git-parallel: {commit} judged with protected paths from {base}\n"
    oid = repo.create_commit(None, sig, sig, message, tree, [target.id])
    return str(oid), str(tree), details


def base_with_tests(repo: pygit2.Repository, commit: str, base: str, paths: list[str]) -> tuple[str, str]:
    """The base commit's tree with ``paths`` (the attempt's added tests) as
    ``commit`` has them, written as a commit (parent: the base; fixed
    identity and date): what the added tests are run on to see them fail
    without the fix.  Returns (commit oid, tree oid)."""
    target = repo[commit].peel(pygit2.Commit)
    base_commit = repo[base].peel(pygit2.Commit)
    index = pygit2.Index()
    index.read_tree(base_commit.tree)
    for path in paths:
        entry = target.tree[path]
        index.add(pygit2.IndexEntry(path, entry.id, entry.filemode))
    tree = index.write_tree(repo)
    name, email = JUDGE_SIGNATURE
    sig = pygit2.Signature(name, email, 0, 0)
    message = f"git-parallel: {base} with the tests {commit} added\n"
    return str(repo.create_commit(None, sig, sig, message, tree, [base_commit.id])), str(tree)
