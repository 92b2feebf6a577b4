#!/usr/bin/env python3
"""Selection tasks from the real history of pallets/click, reproducible from a seed.

From a local clone of click (``--repo``; ``git clone
https://github.com/pallets/click``), walks the non-merge commits behind
``--rev`` and keeps those whose diff modifies Python files under
``src/click/`` (2 to 80 changed lines, no file added or removed) and adds
or modifies test files under ``tests/``.  For each, in a seeded order:

* the **base** is the parent commit;
* the **visible gate** runs the parent's tests that touch the changed
  module: the test files the commit modifies (as the parent has them) and
  ``tests/test_<module>.py`` where it exists;
* the **hidden tests** are the commit's own test changes (the new versions
  of every file under ``tests/`` it changed), run on their own;
* the **attempts** are the commit's source change (correct) and plausible
  wrong variants of it: a hunk dropped, one file reverted, a comparison or
  boolean flipped, an integer off by one; never one whose code (without
  comments, docstrings, layout) is the change's own.  A variant may still
  turn out right (the hidden tests decide, not this script).

A commit becomes a task only if, checked here with pytest, its source
change passes the visible gate and the hidden tests and the parent fails
the hidden tests (else the hidden tests would not tell anything).  Prints
the tasks as JSON (``--out`` to write a file); ``scripts/bench_selection.py
--click`` runs them.

``venv`` (``selection_tasks_click.py venv``, run by the python of a virtual
environment that has pytest) makes ``.venv`` in the current folder: the
checkout's ``src`` on its path ahead of that environment's packages, and
click's distribution metadata, which is what an editable install writes;
it is the judged checkout's ``setup:`` in the benchmark.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import io
import json
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tokenize
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # imported where used: `venv` runs under the checkout's interpreter
    import pygit2

PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no"]
MAX_CHANGED = 80


# -- the judged checkout's environment --------------------------------------------------------
def make_venv(checkout: Path) -> None:
    """``checkout/.venv``: its ``src`` first, then this interpreter's packages
    (pytest), and ``click-<version>.dist-info`` (tests read the version)."""
    venv = checkout / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c",
                                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "_click_src.pth").write_text(f"{checkout.resolve() / 'src'}\n{sysconfig.get_paths()['purelib']}\n")
    version = _version(checkout)
    meta = site / f"click-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: click\nVersion: {version}\n")


def _version(checkout: Path) -> str:
    for path in (checkout / "pyproject.toml", checkout / "src" / "click" / "__init__.py"):
        found = re.search(r'^\s*(?:__)?version(?:__)?\s*=\s*"([^"]+)"', path.read_text(), re.M) if path.exists() else None
        if found:
            return found.group(1).replace(".dev", ".dev0") if found.group(1).endswith(".dev") else found.group(1)
    return "0"


# -- commits -----------------------------------------------------------------------------------
def _blob(repo: pygit2.Repository, tree: pygit2.Tree, path: str) -> str | None:
    import pygit2
    try:
        return repo[tree[path].id].peel(pygit2.Blob).data.decode()
    except (KeyError, UnicodeDecodeError):
        return None


def eligible(repo: pygit2.Repository, rev: str, scan: int) -> list[dict[str, Any]]:
    """Commits (newest first, at most ``scan`` looked at) whose diff fits."""
    import pygit2
    out = []
    walker = repo.walk(repo.revparse_single(rev).peel(pygit2.Commit).id, pygit2.enums.SortMode.TOPOLOGICAL)
    for n, commit in enumerate(walker):
        if n >= scan:
            break
        if len(commit.parents) != 1:
            continue
        parent = commit.parents[0]
        diff = parent.tree.diff_to_tree(commit.tree)
        src, tests, changed, ok = [], [], 0, True
        for patch in diff:
            if patch is None:
                continue
            d = patch.delta
            path = d.new_file.path
            if path.startswith("src/click/") and path.endswith(".py"):
                ok &= d.status == pygit2.enums.DeltaStatus.MODIFIED
                src.append(path)
                changed += patch.line_stats[1] + patch.line_stats[2]
            elif path.startswith("tests/") and not path.startswith("tests/typing/") and d.status in (
                    pygit2.enums.DeltaStatus.MODIFIED, pygit2.enums.DeltaStatus.ADDED):
                tests.append((path, d.status == pygit2.enums.DeltaStatus.MODIFIED))
        runnable = [p for p, _ in tests if Path(p).name.startswith("test_") and p.endswith(".py")]
        if not ok or not src or not runnable or not 2 <= changed <= MAX_CHANGED:
            continue
        visible = sorted({p for p, modified in tests if modified and p in runnable}
                         | {t for t in (f"tests/test_{Path(s).stem.lstrip('_')}.py" for s in src)
                            if _has(parent.tree, t)})
        if not visible:
            continue
        out.append({"commit": str(commit.id), "parent": str(parent.id), "subject": commit.message.splitlines()[0],
                    "src": sorted(src), "visible": visible, "hidden_run": sorted(runnable),
                    "hidden": {p: _blob(repo, commit.tree, p) for p, _ in tests}})
    return out


def _has(tree: pygit2.Tree, path: str) -> bool:
    try:
        tree[path]
    except KeyError:
        return False
    return True


# -- wrong variants ----------------------------------------------------------------------------
FLIPS = {"==": "!=", "!=": "==", "<": "<=", "<=": "<", ">": ">=", ">=": ">", "and": "or", "or": "and",
         "True": "False", "False": "True", "is": "is not", "in": "not in"}


def _added_rows(old: str, new: str) -> set[int]:
    """1-based rows of ``new`` that the change wrote."""
    rows: set[int] = set()
    sm = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            rows.update(range(j1 + 1, j2 + 1))
    return rows


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    try:
        return list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []


def _replace(text: str, tok: tokenize.TokenInfo, new: str) -> str:
    lines = text.splitlines(keepends=True)
    row, col = tok.start
    line = lines[row - 1]
    lines[row - 1] = line[:col] + new + line[tok.end[1]:]
    return "".join(lines)


def _token_mutants(old: str, new: str, pick: Callable[[tokenize.TokenInfo], str | None]) -> list[str]:
    rows = _added_rows(old, new)
    out = []
    toks = _tokens(new)
    for i, tok in enumerate(toks):
        if tok.start[0] not in rows or tok.start[0] != tok.end[0]:
            continue
        # "is not" and "not in" are two tokens: leave them alone.
        nxt = toks[i + 1].string if i + 1 < len(toks) else ""
        prev = toks[i - 1].string if i else ""
        if tok.string in ("is", "in") and ("not" in (nxt, prev)):
            continue
        repl = pick(tok)
        if repl is not None:
            out.append(_replace(new, tok, repl))
    return out


def _flip(tok: tokenize.TokenInfo) -> str | None:
    if tok.type in (tokenize.OP, tokenize.NAME) and tok.string in FLIPS:
        return FLIPS[tok.string]
    return None


def _off_by_one(tok: tokenize.TokenInfo) -> str | None:
    if tok.type == tokenize.NUMBER and tok.string.isdigit():
        n = int(tok.string)
        return str(n + 1) if n == 0 else str(n - 1)
    return None


def _hunk_drops(old: str, new: str) -> list[str]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes()
    changes = [k for k, op in enumerate(ops) if op[0] != "equal"]
    out: list[str] = []
    if len(changes) < 2:
        return out
    for drop in changes:
        out.append("".join("".join(a[i1:i2]) if tag == "equal" or k == drop else "".join(b[j1:j2])
                           for k, (tag, i1, i2, j1, j2) in enumerate(ops)))
    return out


def _code_of(text: str) -> str:
    """The code of a module without its docstrings, comments and layout."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree)


def mutants(files: dict[str, tuple[str, str]], r: random.Random) -> list[dict[str, Any]]:
    """Every wrong variant of a source change, as {kind, files} (files: the
    attempt's text of each changed source file)."""
    correct = {p: new for p, (_, new) in files.items()}
    found: list[dict[str, Any]] = []

    def add(kind: str, path: str, text: str) -> None:
        try:
            if _code_of(text) == _code_of(files[path][1]):
                return  # the same code: a comment, docstring or layout hunk
        except SyntaxError:
            return
        found.append({"kind": kind, "files": {**correct, path: text}})

    if len(files) > 1:
        for path, (old, _) in files.items():
            add("revert_file", path, old)
    for path, (old, new) in sorted(files.items()):
        for text in _hunk_drops(old, new):
            add("drop_hunk", path, text)
        for text in _token_mutants(old, new, _flip):
            add("flip", path, text)
        for text in _token_mutants(old, new, _off_by_one):
            add("off_by_one", path, text)
    return found


def choose_wrong(pool: list[dict[str, Any]], k: int, r: random.Random) -> list[dict[str, Any]]:
    """``k`` variants, as many kinds as there are, drawn with ``r``."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for m in pool:
        by_kind.setdefault(m["kind"], []).append(m)
    chosen: list[dict[str, Any]] = []
    kinds = sorted(by_kind)
    r.shuffle(kinds)
    while len(chosen) < k and any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind] and len(chosen) < k:
                chosen.append(by_kind[kind].pop(r.randrange(len(by_kind[kind]))))
    return chosen


# -- checking a candidate task -----------------------------------------------------------------
def _export(repo_path: Path, commit: str, into: Path) -> None:
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo_path), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def _pytest(checkout: Path, files: list[str]) -> bool:
    proc = subprocess.run([str(checkout / ".venv" / "bin" / "python"), *PYTEST, *files], cwd=checkout,
                          capture_output=True, timeout=600)
    return proc.returncode == 0


def validate(repo_path: Path, cand: dict[str, Any], correct: dict[str, str], python: str, work: Path) -> str | None:
    """None when the task is sound, else why not."""
    checkout = work / cand["commit"][:12]
    _export(repo_path, cand["parent"], checkout)
    try:
        subprocess.run([python, __file__, "venv"], cwd=checkout, check=True, capture_output=True)
        saved = {p: (checkout / p).read_text() if (checkout / p).exists() else None for p in cand["hidden"]}

        def hidden_on() -> None:
            for p, text in cand["hidden"].items():
                (checkout / p).parent.mkdir(parents=True, exist_ok=True)
                (checkout / p).write_text(text)

        def hidden_off() -> None:
            for p, text in saved.items():
                if text is None:
                    (checkout / p).unlink()
                else:
                    (checkout / p).write_text(text)

        hidden_on()
        base_passes = _pytest(checkout, cand["hidden_run"])
        hidden_off()
        if base_passes:
            return "the parent passes the hidden tests"
        for p, text in correct.items():
            (checkout / p).write_text(text)
        if not _pytest(checkout, cand["visible"]):
            return "the change fails the parent's tests"
        hidden_on()
        if not _pytest(checkout, cand["hidden_run"]):
            return "the change fails its own tests"
        return None
    finally:
        shutil.rmtree(checkout, ignore_errors=True)


def generate(repo_path: Path, rev: str, seed: int, tasks: int, attempts: int, python: str, scan: int,
             log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    import pygit2
    repo = pygit2.Repository(str(repo_path))
    tip = str(repo.revparse_single(rev).peel(pygit2.Commit).id)
    pool = eligible(repo, tip, scan)
    r = random.Random(seed)
    r.shuffle(pool)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gp-click-tasks-") as tmp:
        for cand in pool:
            if len(out) >= tasks:
                break
            commit, parent = repo[cand["commit"]], repo[cand["parent"]]
            files = {p: (_blob(repo, parent.tree, p) or "", _blob(repo, commit.tree, p) or "") for p in cand["src"]}
            tr = random.Random(f"{seed}:{cand['commit']}")
            wrong = choose_wrong(mutants(files, tr), attempts - 1, tr)
            if len(wrong) < attempts - 1:
                log(f"skip {cand['commit'][:10]}: {len(wrong)} wrong variants")
                continue
            correct = {p: new for p, (_, new) in files.items()}
            why = validate(repo_path, cand, correct, python, Path(tmp))
            if why:
                log(f"skip {cand['commit'][:10]}: {why}")
                continue
            plan = [{"kind": "correct", "files": correct}, *wrong]
            tr.shuffle(plan)
            out.append({**cand, "attempts": plan})
            log(f"task {cand['commit'][:10]} {cand['subject'][:60]}: {', '.join(a['kind'] for a in plan)}")
    return {"source": str(repo_path), "rev": tip, "seed": seed, "eligible": len(pool), "tasks": out}


def main() -> int:
    if sys.argv[1:2] == ["venv"]:
        make_venv(Path.cwd())
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="`selection_tasks_click.py venv` makes .venv in the current folder (see above)")
    ap.add_argument("--repo", type=Path, required=True, help="a local clone of pallets/click")
    ap.add_argument("--rev", default="HEAD", help="the newest commit looked at (default HEAD)")
    ap.add_argument("--seed", type=int, default=17, help="order of the commits and the variants (default 17)")
    ap.add_argument("--tasks", type=int, default=12, help="tasks wanted (default 12)")
    ap.add_argument("--attempts", type=int, default=4, help="attempts per task, one correct (default 4)")
    ap.add_argument("--scan", type=int, default=600, help="commits looked at, newest first (default 600)")
    ap.add_argument("--python", default=sys.executable, help="an interpreter with pytest, for the checks")
    ap.add_argument("--out", type=Path, help="write the tasks here (default: stdout)")
    args = ap.parse_args()
    found = generate(args.repo, args.rev, args.seed, args.tasks, args.attempts, args.python, args.scan,
                     log=lambda s: print(s, file=sys.stderr))
    text = json.dumps(found, indent=1)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
