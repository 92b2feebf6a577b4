"""Whether a changed test file only adds tests, and which.

An upstream fix adds its regression test to the test file that is already
there.  Such a change is judged like a new test file (docs/judging.md,
"Tests added to a test file"): the base's file in the gates, the
attempt's as added tests, and it does not keep the attempt out of an
automatic pick.  That holds only when the change cannot alter how any of
the base's tests runs, since the file lands with the winner and judges
every later run.  So it is read with ``ast``, and the attempt's module
must be the base's module with only these added:

* new test functions and ``Test*`` classes, and new ``test*`` methods in a
  base class whose header is unchanged;
* new imports (also names added to a base ``from x import …``).

Every statement of the base is there, in order, with the same syntax tree
(comments and layout do not count).  A new name is one the base's module
never uses (as a name, an argument, an attribute or a word of a string):
a later ``def test_add`` redefining a base test, a new fixture under the
name a base test asks for, a ``len`` that shadows the builtin are not
additions.  Nor are module-level statements (``calc.add = …``), the
xunit hooks (``setup_module``, ``setup_method`` in a base class),
``pytest_*`` hooks, an autouse or renamed fixture, or a decorator,
default or annotation that calls anything but ``pytest``'s own helpers
(they run when the module is imported, before any test).

Only Python files are read so: a line appended to a jest or mocha file
runs before any of its tests (``calc.add = …``, ``jest.mock`` hoisted to
the top), so no rule on lines can say it adds tests only.
"""

from __future__ import annotations

import ast
import contextvars
import re

# Past this a test file is not read: it blocks as any change does.
MAX_BYTES = 4 << 20
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names pytest or unittest call around other tests: setup_module,
# teardown_function, setUpModule, setup_method, pytest_generate_tests, …
_SPECIAL = re.compile(r"(?i)^(?:setup|teardown|pytest_)|^__.*__$")
# What a decorator, a default or an annotation may hold: no call but
# ``_harmless_call``'s (pytest.param, pytest.mark.xfail), no lambda,
# no walrus, no comprehension.
_QUIET = (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Name, ast.Attribute, ast.Subscript,
          ast.Slice, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.keyword, ast.Starred, ast.Call,
          ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def python_file(path: str) -> bool:
    return path.endswith(".py")


def added_tests(base: bytes, new: bytes) -> list[str] | None:
    """The tests (``name``, ``Class::name``) the ``new`` text of a Python
    test file adds to its ``base`` text, or None when it does anything but
    add tests (or adds none, or either does not parse)."""
    if max(len(base), len(new)) > MAX_BYTES:
        return None
    try:
        # Parsed from the bytes, as Python imports them: a ``# coding: utf-7``
        # line turns what UTF-8 reads as a comment into code.
        old_module, new_module = ast.parse(base), ast.parse(new)
        taken = _used_names(old_module)
        added: list[str] = []
        _CLASSES.set({c.name: c for c in old_module.body if isinstance(c, ast.ClassDef)})
        if not _only_added(old_module.body, new_module.body, taken, added, None):
            return None
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return None
    return added or None


def _used_names(module: ast.Module) -> set[str]:
    """Every name the base's module uses or could look up by name."""
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.update(_WORD.findall(node.name))
            found.update([node.asname] if node.asname else [])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            found.update(node.names)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.update(_WORD.findall(node.value))  # usefixtures("db"), parametrize("a,b"), getattr(m, "x")
    return found


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _only_added(old: list[ast.stmt], new: list[ast.stmt], taken: set[str], added: list[str],
                in_class: str | None) -> bool:
    """Is ``new`` the statements ``old`` in order, with additions only?"""
    i = 0
    for stmt in new:
        if i < len(old) and (_same(stmt, old[i]) or _grown_import(old[i], stmt, taken)
                             or in_class is None and _grown_class(old[i], stmt, taken, added)):
            i += 1
        elif not _addition(stmt, taken, added, in_class):
            return False
    return i == len(old)


def _grown_class(old: ast.stmt, new: ast.stmt, taken: set[str], added: list[str]) -> bool:
    """A base class with the same header and new test methods."""
    if not (isinstance(old, ast.ClassDef) and isinstance(new, ast.ClassDef) and old.name == new.name):
        return False
    header = [ast.dump(ast.Tuple(elts=[*c.bases, *c.decorator_list], ctx=ast.Load())) + ast.dump(ast.Tuple(
        elts=[k.value for k in c.keywords], ctx=ast.Load())) + str([k.arg for k in c.keywords]) for c in (old, new)]
    # A test method is reached through its class alone: its name is new if
    # no class it can meet uses it (the class, the module's classes it
    # inherits from, those inheriting from it): another class's method of
    # that name is that class's own.
    classes = _CLASSES.get() or {}
    related = _related(old, classes)
    scoped = set().union(*(_used_names(ast.Module(body=[c], type_ignores=[])) for c in related))
    scoped |= {n for n in taken if n not in _method_names(classes)}
    if header[0] != header[1]:
        return False
    own = set(scoped)
    if not _only_added(old.body, new.body, own, added, new.name):
        return False
    taken.update(own - scoped)
    return True


# The classes of the base module being read (``added_tests``), by name.
_CLASSES: contextvars.ContextVar[dict[str, ast.ClassDef] | None] = contextvars.ContextVar("classes", default=None)


def _related(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """``cls``, the module's classes it inherits from and those that inherit
    from it, transitively (bases named by a bare name)."""
    def bases(c: ast.ClassDef) -> set[str]:
        return {b.id for b in c.bases if isinstance(b, ast.Name)}

    found = {cls.name}
    while True:
        more = {n for c in found if c in classes for n in bases(classes[c]) if n in classes}
        more |= {name for name, c in classes.items() if bases(c) & found}
        if more <= found:
            return [classes[n] if n in classes else cls for n in sorted(found)]
        found |= more


def _method_names(classes: dict[str, ast.ClassDef]) -> set[str]:
    """Names defined only as methods of the module's classes."""
    return {f.name for c in classes.values() for f in c.body if isinstance(f, _DEFS)}


def _grown_import(old: ast.stmt, new: ast.stmt, taken: set[str]) -> bool:
    """``from calc import add`` become ``from calc import add, sub``: the
    base's names kept, each new one new to the module."""
    if type(old) is not type(new) or not isinstance(old, (ast.Import, ast.ImportFrom)):
        return False
    assert isinstance(new, (ast.Import, ast.ImportFrom))
    if isinstance(old, ast.ImportFrom) and isinstance(new, ast.ImportFrom) and (old.module, old.level) != (new.module, new.level):
        return False
    kept = [(a.name, a.asname) for a in old.names]
    grown = [(a.name, a.asname) for a in new.names]
    extra = [a for a in new.names if (a.name, a.asname) not in kept]
    return all(k in grown for k in kept) and bool(extra) and _new_imports(extra, new, taken)


def _new_imports(aliases: list[ast.alias], stmt: ast.Import | ast.ImportFrom, taken: set[str]) -> bool:
    if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
        return False
    names = [a.asname or a.name.split(".")[0] for a in aliases]
    if any(a.name == "*" for a in aliases) or any(n in taken or _SPECIAL.match(n) for n in names):
        return False
    taken.update(names)
    return True


def _addition(stmt: ast.stmt, taken: set[str], added: list[str], in_class: str | None) -> bool:
    """A statement that adds a test (or an import) and touches nothing the base's tests use."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return in_class is None and _new_imports(stmt.names, stmt, taken)
    if isinstance(stmt, _DEFS):
        if stmt.name in taken or _SPECIAL.match(stmt.name) or not _quiet_header(stmt):
            return False
        if in_class is not None and not stmt.name.startswith("test"):
            return False  # a helper of a base class could override one its tests call
        taken.add(stmt.name)
        if stmt.name.startswith("test"):
            added.append(f"{in_class}::{stmt.name}" if in_class else stmt.name)
        return True
    if isinstance(stmt, ast.ClassDef) and in_class is None:
        return _new_class(stmt, taken, added)
    return False


def _new_class(stmt: ast.ClassDef, taken: set[str], added: list[str]) -> bool:
    """A new class of tests: methods only (any name: they reach its own tests only)."""
    if stmt.name in taken or _SPECIAL.match(stmt.name) or stmt.keywords:
        return False  # a metaclass runs code when the class is made
    if not all(_quiet(e) for e in stmt.bases) or not all(_marks_only(d) for d in stmt.decorator_list):
        return False
    for i, member in enumerate(stmt.body):
        docstring = i == 0 and isinstance(member, ast.Expr) and isinstance(member.value, ast.Constant)
        if docstring or isinstance(member, ast.Pass):
            continue
        if not isinstance(member, _DEFS) or not _quiet_header(member):
            return False
        if member.name.startswith("test"):
            added.append(f"{stmt.name}::{member.name}")
    taken.add(stmt.name)
    return True


def _quiet_header(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """What runs when the ``def`` runs (its decorators, defaults, annotations) calls nothing of its own."""
    args = fn.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *([args.vararg] if args.vararg else []),
             *([args.kwarg] if args.kwarg else [])]
    values = [*args.defaults, *[d for d in args.kw_defaults if d is not None],
              *[a.annotation for a in every if a.annotation is not None], *([fn.returns] if fn.returns else [])]
    return all(_quiet(v) for v in values) and all(_marks_only(d) for d in fn.decorator_list)


def _pytest_chain(node: ast.expr) -> list[str] | None:
    """``pytest.mark.parametrize`` as ``["pytest", "mark", "parametrize"]``, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    return ["pytest", *parts] if isinstance(node, ast.Name) and node.id == "pytest" else None


def _harmless_call(func: ast.expr) -> bool:
    """``pytest.param``, ``pytest.approx``, ``pytest.mark.*``: not
    ``pytest.skip`` or ``pytest.exit``, which at import would end the
    base's tests too."""
    chain = _pytest_chain(func)
    return chain is not None and (chain in (["pytest", "param"], ["pytest", "approx"])
                                  or chain[:2] == ["pytest", "mark"] and len(chain) == 3)


def _quiet(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if not isinstance(node, _QUIET):
            return False
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return False
        if isinstance(node, ast.Call) and not _harmless_call(node.func):
            return False
    return True


def _marks_only(decorator: ast.expr) -> bool:
    """``pytest.mark.*`` (called or not), or a ``pytest.fixture`` that is
    neither autouse nor renamed (either would reach the base's tests)."""
    call = decorator if isinstance(decorator, ast.Call) else None
    chain = _pytest_chain(call.func if call else decorator)
    if chain is None or not (chain[:2] == ["pytest", "mark"] and len(chain) == 3 or chain == ["pytest", "fixture"]):
        return False
    if call is None:
        return True
    if chain == ["pytest", "fixture"] and any(k.arg in (None, "autouse", "name") for k in call.keywords):
        return False
    return all(_quiet(a) for a in [*call.args, *(k.value for k in call.keywords)])
