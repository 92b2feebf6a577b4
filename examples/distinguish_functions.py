#!/usr/bin/env python3
"""Distinguishing inputs for Python functions, without a model: a generator
and a runner for ``selection: differential``.

    distinguish:
      command: [python3, tools/distinguish_functions.py, generate]
      run: [python3, tools/distinguish_functions.py, run]

``generate`` (run by git-parallel in a clean checkout of the base commit)
reads every attempt's changed ``.py`` files from
``$GIT_PARALLEL_DISTINGUISH_ATTEMPTS/<id>/files/`` and compares each
top-level function and method with the base's version (code only:
docstrings, comments and layout do not count).  For every function some
attempt changed or added, it guesses each parameter's kind from the
annotation, the default, or how the function bodies use it (``p.split()``
is a string, ``range(p)`` and ``p % 4`` an integer, ``len(p)`` and
``for x in p`` a sequence), and draws arguments of that kind with a seeded
random generator, seeded also with the constants the functions' code holds
(a function that tests ``year % 400`` gets multiples of 400, and numbers
next to them).  Methods are called on an instance made from the class's
``__init__`` the same way; a changed ``__init__`` is judged by the
attributes it leaves.  The cases go to ``$GIT_PARALLEL_DISTINGUISH_OUT/cases.json``.

``run`` (run by git-parallel in a clean checkout of each attempt) imports
each function from the checkout (``src/`` and the top folder first on the
path), calls it on every case (one second at most each; a function that times
out twice is skipped from then on) and prints one
line per case: the result's ``repr`` (memory addresses blanked), anything
the call printed, and the arguments afterwards if the call changed them.
An exception prints ``raised`` alone: two right answers often fail
differently on inputs outside their domain, and that must not set them
apart.  Output is made deterministic (``PYTHONHASHSEED=0``).

Limits: arguments are plain values (numbers, strings, lists, dicts,
``None``); a function that needs objects of the project's own (a click
``Context``) mostly raises for every attempt alike, which tells nothing.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import io
import json
import os
import random
import re
import signal
import sys
from pathlib import Path
from typing import Any

CASES_PER_FUNCTION = 48
STR_METHODS = {"split", "rsplit", "strip", "lstrip", "rstrip", "lower", "upper", "title", "capitalize", "startswith",
               "endswith", "replace", "find", "rfind", "encode", "isdigit", "isalpha", "isspace", "splitlines",
               "partition", "rpartition", "casefold", "expandtabs", "zfill", "center", "ljust", "rjust", "format"}
INT_OPS = (ast.Mod, ast.FloorDiv, ast.Sub, ast.Pow, ast.RShift, ast.LShift, ast.BitAnd, ast.BitOr)
SEQ_CALLS = {"len", "sorted", "set", "list", "tuple", "enumerate", "reversed", "sum", "max", "min", "any", "all",
             "fromkeys", "Counter", "frozenset", "zip", "iter"}
WORDS = ("a an the cat dog tree house river stone light night green quick brown over under window garden "
         "summer winter yellow planet rocket engine simple gentle it's don't x-ray co-op 3rd 42 MiXeD UPPER").split()


# -- reading the functions ------------------------------------------------------------------
def _code(node: ast.AST) -> str:
    """The code of a function without its docstring (nor comments, layout)."""
    node = ast.parse(ast.unparse(node)).body[0]
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(node)


def functions(text: str) -> dict[str, ast.FunctionDef]:
    """Top-level functions and methods of top-level classes, by qualname."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, ast.FunctionDef] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    out[f"{node.name}.{item.name}"] = item
    return out


def _tree(text: str) -> ast.AST:
    try:
        return ast.parse(text)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def module_name(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def changed_functions(attempts: Path, base: Path) -> dict[tuple[str, str], list[ast.FunctionDef]]:
    """{(path, qualname): every version of it (base first)} for the functions
    some attempt changed or added."""
    versions: dict[tuple[str, str], list[ast.FunctionDef]] = {}
    changed: set[tuple[str, str]] = set()
    for folder in sorted(p for p in attempts.iterdir() if p.is_dir()):
        for file in sorted((folder / "files").rglob("*.py")):
            rel = file.relative_to(folder / "files").as_posix()
            old = functions((base / rel).read_text(errors="replace")) if (base / rel).is_file() else {}
            for name, node in functions(file.read_text(errors="replace")).items():
                key = (rel, name)
                if key not in versions and name in old:
                    versions[key] = [old[name]]
                versions.setdefault(key, []).append(node)
                if name not in old or _code(old[name]) != _code(node):
                    changed.add(key)
    return {k: versions[k] for k in sorted(changed)}


# -- guessing kinds and drawing values --------------------------------------------------------
def _kinds_of_annotation(text: str) -> set[str]:
    """Every kind an annotation names (a union names several)."""
    found = set()
    for word, kind in (("str", "str"), ("bool", "bool"), ("int", "int"), ("float", "float"), ("dict", "dict"),
                       ("Mapping", "dict"), ("list", "list"), ("List", "list"), ("Sequence", "list"),
                       ("Iterable", "list"), ("tuple", "list"), ("None", "none"), ("Optional", "none")):
        if re.search(rf"\b{word}\b", text):
            found.add(kind)
    return found


def _usage(fn: ast.FunctionDef, name: str) -> set[str]:
    """What the body does with parameter ``name``: the kinds it suggests."""
    seen: set[str] = set()
    is_p = lambda n: isinstance(n, ast.Name) and n.id == name  # noqa: E731
    for node in ast.walk(fn):
        if isinstance(node, ast.Attribute) and is_p(node.value) and node.attr in STR_METHODS:
            seen.add("str")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, INT_OPS) and (is_p(node.left) or is_p(node.right)):
            other = node.right if is_p(node.left) else node.left
            if not (isinstance(other, ast.Constant) and isinstance(other.value, str)):
                seen.add("int")
        elif isinstance(node, ast.Compare) and any(is_p(x) for x in [node.left, *node.comparators]) and any(
                isinstance(x, ast.Constant) and type(x.value) is int for x in [node.left, *node.comparators]):
            seen.add("int")
        elif isinstance(node, ast.Call) and any(is_p(a) for a in node.args):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee == "range":
                seen.add("int")
            elif callee in SEQ_CALLS:
                seen.add("list")
        elif isinstance(node, (ast.For, ast.comprehension)) and is_p(node.iter):
            seen.add("list")
        elif isinstance(node, ast.Subscript) and is_p(node.value):
            seen.add("list")
    return seen


def kind_of(versions: list[ast.FunctionDef], index: int) -> tuple[list[str], bool]:
    """(the likeliest kinds, has a default) of positional parameter
    ``index``, over every version (several when they tie: a union)."""
    votes: dict[str, int] = {}
    default = False
    for fn in versions:
        args = fn.args.posonlyargs + fn.args.args
        if index >= len(args):
            continue
        arg = args[index]
        n_defaults = len(fn.args.defaults)
        if index >= len(args) - n_defaults:
            default = True
            value = fn.args.defaults[index - (len(args) - n_defaults)]
            if isinstance(value, ast.Constant) and value.value is not None:
                kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value.value))
                if kind:
                    votes[kind] = votes.get(kind, 0) + 3
        if arg.annotation is not None:
            for kind in _kinds_of_annotation(ast.unparse(arg.annotation)):
                votes[kind] = votes.get(kind, 0) + 3
        found = _usage(fn, arg.arg)
        # A string is also sliced and measured: its own methods decide.
        for kind in ({"str"} if "str" in found else found):
            votes[kind] = votes.get(kind, 0) + 1
    top = max(votes.values(), default=0)
    return sorted(k for k, v in votes.items() if v == top), default


def constants(versions: list[ast.AST]) -> tuple[list[int], list[str]]:
    """The integers and short strings written in ``versions`` (a fuzzer's
    dictionary: a value the code compares with is worth trying)."""
    ints, strs = set(), set()
    for fn in versions:
        for node in ast.walk(fn):
            if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 10 ** 6:
                ints.add(node.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 40:
                strs.add(node.value)
    return sorted(ints), sorted(strs)


def draw(kinds: list[str], r: random.Random, ints: list[int], strs: list[str]) -> Any:
    kind = r.choice(kinds or ["int", "str", "list", "none"])
    if kind == "int":
        c = r.choice(ints or [3])
        return r.choice([c, c - 1, c + 1, -c, 2 * c, c * r.choice(ints or [2]), r.choice([0, 1, -1, 2]),
                         r.randint(-50, 150), r.randint(1000, 3000), c * r.randint(2, 25)])
    if kind == "str":
        words = [r.choice(WORDS + strs) if strs and r.random() < 0.3 else r.choice(WORDS)
                 for _ in range(r.randint(0, 6))]
        seps = [r.choice([" ", " ", " ", "  ", "\t", "\n", ", "]) for _ in words]
        text = "".join(w + s for w, s in zip(words, seps))
        return r.choice([text, text.strip(), text + r.choice(["!", ".", "?", ""]), "", r.choice(strs or [""])])
    if kind == "list":
        return [r.randint(-3, 9) for _ in range(r.randint(0, 9))]
    if kind == "bool":
        return r.random() < 0.5
    if kind == "float":
        return r.choice([0.0, 1.5, -2.25, 10.0, 0.1])
    if kind == "dict":
        return r.choice([{}, {"a": 1}, {"b": [1, 2], "a": None}])
    return None


def arguments(versions: list[ast.FunctionDef], r: random.Random, skip_self: bool,
              file_strs: list[str] = ()) -> list[Any]:  # type: ignore[assignment]
    ints, strs = constants(versions)
    strs = sorted(set(strs) | set(file_strs))
    count = max(len(fn.args.posonlyargs + fn.args.args) for fn in versions)
    out = []
    for i in range(1 if skip_self else 0, count):
        kinds, default = kind_of(versions, i)
        if default and r.random() < 0.4:
            break  # the rest keep their defaults
        out.append(draw(kinds, r, ints, strs))
    return out


def generate() -> int:
    attempts = Path(os.environ["GIT_PARALLEL_DISTINGUISH_ATTEMPTS"])
    out = Path(os.environ["GIT_PARALLEL_DISTINGUISH_OUT"])
    found = changed_functions(attempts, Path.cwd())
    cases = []
    for (path, qualname), versions in found.items():
        name = qualname.rsplit(".", 1)[-1]
        if not path.endswith(".py") or (name.startswith("__") and name != "__init__"):
            continue
        r = random.Random(hashlib.sha256(f"{path}:{qualname}".encode()).hexdigest())
        is_method = "." in qualname and bool(versions[-1].args.args) and versions[-1].args.args[0].arg in ("self", "cls")
        init = None
        if is_method:
            inits = functions((Path.cwd() / path).read_text(errors="replace")) if (Path.cwd() / path).is_file() else {}
            init = inits.get(qualname.rsplit(".", 1)[0] + ".__init__")
        # Strings the changed files hold anywhere (names a table maps, say).
        texts = [(Path.cwd() / path).read_text(errors="replace")] if (Path.cwd() / path).is_file() else []
        texts += [f.read_text(errors="replace") for f in sorted(attempts.glob(f"*/files/{path}"))]
        file_strs = constants([_tree(t) for t in texts])[1]
        for _ in range(CASES_PER_FUNCTION):
            args = arguments(versions, r, is_method, file_strs)
            init_args = (arguments([init], r, True, file_strs) if init is not None else []) if is_method and name != "__init__" else None
            cases.append({"path": path, "module": module_name(path), "qualname": qualname,
                          "args": [repr(a) for a in args], "init_args": [repr(a) for a in init_args or []],
                          "method": is_method})
    (out / "cases.json").write_text(json.dumps(cases, indent=0))
    print(f"{len(cases)} cases for {len(found)} changed function(s): {', '.join(q for _, q in found)}")
    return 0


# -- running them ---------------------------------------------------------------------------------
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:
        text = "<repr raised>"
    return _ADDRESS.sub(" at 0x?", text)[:500]


class _Timeout(BaseException):
    """Not an ``Exception``: code under test that catches those must not swallow it."""


def _alarm(*_: Any) -> None:
    raise _Timeout()


def call(case: dict[str, Any]) -> str:
    module = importlib.import_module(case["module"])
    owner, _, name = case["qualname"].rpartition(".")
    args = [ast.literal_eval(a) for a in case["args"]]
    before = _shown(args)
    target: Any = getattr(module, owner) if owner else module
    if case["method"] and name == "__init__":
        fn, shown = target, lambda obj: _shown(sorted(vars(obj).items()) if hasattr(obj, "__dict__") else obj)
    elif case["method"]:
        fn, shown = getattr(target(*[ast.literal_eval(a) for a in case["init_args"]]), name), _shown
    else:
        fn, shown = getattr(target, name), _shown
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        result = shown(fn(*args))
    after = _shown(args)
    return f"-> {result}" + (f" | printed {_shown(printed.getvalue())}" if printed.getvalue() else "") \
        + (f" | args now {after}" if after != before else "")


def run() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # set and dict reprs must not vary between attempts
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    sys.path[:0] = [str(Path.cwd() / "src"), str(Path.cwd())]
    # A function under test may start a pager, an editor or a browser: make
    # each one a program that returns at once.
    os.environ.update({"PAGER": "cat", "EDITOR": "true", "VISUAL": "true", "BROWSER": "true", "TERM": "dumb"})
    cases = json.loads((Path(os.environ["GIT_PARALLEL_DISTINGUISH_INPUTS"]) / "cases.json").read_text())
    signal.signal(signal.SIGALRM, _alarm)
    hung: dict[str, int] = {}
    for i, case in enumerate(cases):
        if hung.get(case["qualname"], 0) >= 2:  # a function that waits (for a key, a pager) waits for all
            print(f"{i} {case['qualname']} skipped: timed out twice", flush=True)
            continue
        signal.setitimer(signal.ITIMER_REAL, 1.0)
        try:
            line = call(case)
        except _Timeout:
            line = "timed out"
            hung[case["qualname"]] = hung.get(case["qualname"], 0) + 1
        except BaseException:  # noqa: BLE001 - any failure is one behaviour: "raised"
            line = "raised"
            signal.setitimer(signal.ITIMER_REAL, 0)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        print(f"{i} {case['qualname']}({', '.join(case['args'])}) {line}", flush=True)
    return 0


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb not in ("generate", "run"):
        sys.exit("usage: distinguish_functions.py generate|run (see the docstring)")
    sys.exit(generate() if verb == "generate" else run())
