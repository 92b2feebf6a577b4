"""A changed Python test file that only adds tests (``appended``): what
counts as adding, and the ways a change could reach the base's tests
while looking like an addition."""

from __future__ import annotations

import pytest

from gitflow_parallel.appended import added_tests

BASE = '''import pytest
from calc import add, mul


@pytest.fixture
def two():
    return 2


def test_add(two):
    assert add(two, 3) == 5


class TestMul:
    def test_mul(self):
        assert mul(2, 3) == 6
'''


def grown(extra: str, base: str = BASE) -> list[str] | None:
    return added_tests(base.encode(), (base + extra).encode())


@pytest.mark.parametrize("extra, names", [
    ("\n\ndef test_sub():\n    assert add(2, -3) == -1\n", ["test_sub"]),
    ("\n\n@pytest.mark.parametrize('a, b', [(1, 2), pytest.param(3, 4, marks=pytest.mark.xfail)])\n"
     "def test_many(a, b):\n    assert add(a, b) == a + b\n", ["test_many"]),
    ("\n\nclass TestMore:\n    '''More.'''\n    def setup_method(self):\n        self.x = 1\n\n"
     "    def test_x(self):\n        assert self.x\n", ["TestMore::test_x"]),
    ("\n\nimport math\n\n\ndef _helper():\n    return math.pi\n\n\ndef test_pi():\n    assert _helper()\n",
     ["test_pi"]),
])
def test_appended_tests_are_named(extra: str, names: list[str]) -> None:
    assert grown(extra) == names


def test_a_method_added_to_a_base_class_and_a_name_to_its_import() -> None:
    new = BASE.replace("from calc import add, mul", "from calc import add, mul, sub").replace(
        "        assert mul(2, 3) == 6\n", "        assert mul(2, 3) == 6\n\n    def test_sub(self):\n"
        "        assert sub(3, 2) == 1\n")
    assert added_tests(BASE.encode(), new.encode()) == ["TestMul::test_sub"]


def test_comments_and_layout_do_not_count() -> None:
    new = BASE.replace("def test_add(two):", "def test_add(two):  # the sum") + "\n\ndef test_z():\n    pass\n"
    assert added_tests(BASE.encode(), new.encode()) == ["test_z"]


@pytest.mark.parametrize("extra", [
    "\n\ndef test_add():\n    assert True\n",                                  # a base test redefined
    "\n\n@pytest.fixture\ndef two():\n    return 3\n",                       # a fixture the base asks for
    "\n\ndef add(a, b):\n    return 5\n",                                     # a name the base's tests call
    "\n\nimport calc\ncalc.add = lambda a, b: a + b\n",                       # a module-level statement
    "\n\ndef setup_module(module):\n    pass\n",                              # xunit hooks reach every test
    "\n\ndef pytest_generate_tests(metafunc):\n    pass\n",
    "\n\n@pytest.fixture(autouse=True)\ndef _patch(monkeypatch):\n    pass\n",
    "\n\n@pytest.fixture(name='two')\ndef other():\n    return 3\n",
    "\n\n@pytest.mark.parametrize('x', [__import__('calc').__dict__.update(add=max)])\ndef test_x(x):\n    pass\n",
    "\n\ndef test_x(a=print('import time')):\n    pass\n",
    "\n\n@pytest.mark.parametrize('x', [pytest.skip('all', allow_module_level=True)])\ndef test_x(x):\n    pass\n",
    "\n\nclass TestNew:\n    helper = print('import time')\n",
    "\n\nclass TestNew(metaclass=type):\n    def test_a(self):\n        pass\n",
    "\n\nfrom calc import *\n",
    "\n\nif True:\n    def test_y():\n        pass\n",
    "\n\nfrom calc import sub as add\n",                                       # rebinding a base name
    "\n",                                                                     # adds no test
])
def test_what_is_not_only_adding(extra: str) -> None:
    assert grown(extra) is None


def test_a_base_test_changed_or_gone_is_not_adding() -> None:
    assert added_tests(BASE.encode(), (BASE.replace("== 5", "== 6") + "\n\ndef test_z():\n    pass\n").encode()) is None
    assert added_tests(BASE.encode(), BASE.replace("class TestMul:\n    def test_mul(self):\n"
                                                   "        assert mul(2, 3) == 6\n", "").encode()) is None
    # A helper method added to a base class could override one its tests call.
    new = BASE.replace("        assert mul(2, 3) == 6\n", "        assert mul(2, 3) == 6\n\n    def setup_method(self):\n"
                       "        pass\n")
    assert added_tests(BASE.encode(), new.encode()) is None


def test_builtins_the_base_uses_stay_its_own() -> None:
    base = BASE + "\n\ndef test_len():\n    assert len([1]) == 1\n"
    assert grown("\n\ndef len(x):\n    return 1\n", base) is None


def test_what_does_not_parse_is_not_adding() -> None:
    assert added_tests(BASE.encode(), (BASE + "\ndef test_(:\n").encode()) is None
    assert added_tests(b"\xff\xfe", BASE.encode()) is None


def test_a_coding_line_is_read_as_python_reads_it() -> None:
    # In UTF-7, "+AAo-" is a line break: Python runs the "comment" as code.
    new = "# coding: utf-7\n" + BASE + "\n\n# +AAo-import calc+AAo-calc.add = max\ndef test_z():\n    pass\n"
    assert added_tests(BASE.encode(), new.encode()) is None
    assert added_tests(BASE.encode(), ("# coding: utf-7\n" + BASE + "\n\ndef test_z():\n    pass\n").encode()) == [
        "test_z"]


def test_past_the_size_limit_nothing_is_read() -> None:
    assert grown("\n\ndef test_z():\n    pass\n" + "#" * (4 << 20)) is None
