"""What a gate must prove by name, read from the test runner's own report.

A gate's exit status says little: code that calls ``os._exit(0)`` when the
test runner imports it ends the run early with status 0, and a runner that
collected nothing can exit 0 too.  So a gate may declare ``expect:``, as
SWE-bench does, with the test ids that must pass on the attempt:

* ``fail_to_pass``: the tests the task is about (they fail on the base);
* ``pass_to_pass``: the tests that passed before and must still pass.

The verdict then comes from the runner's report, a JUnit XML file the gate
writes to ``{report}`` (a path in a fresh folder outside the judged
checkout, substituted in the gate's ``run`` and ``env``, and given as
``GIT_PARALLEL_REPORT``): every listed id must be in it and have passed.
No report, a report that does not parse, or one without a test is a fail,
whatever the exit status.

``require_count: false`` lets a gate with hidden tests pass without a count
of tests run; by default such a gate must print a runner's summary line
(``3 passed``) or write a report, else it fails (this module owns the rule,
``judge/gates`` applies it).

Ids are matched the way runners spell them: pytest's node id
``tests/test_a.py::TestK::test_b`` matches the JUnit case ``classname=
"tests.test_a.TestK" name="test_b"``; any id also matches a case's
``classname.name`` or ``classname::name`` as written, or, when no case has
that full name, its ``name`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable, TypedDict

from gitflow_parallel.errors import ParallelError

if TYPE_CHECKING:
    from gitflow_parallel.config_schema import GateConfig
    from gitflow_parallel.shapes.pack import ExpectResult, ListOutcome

GATE_KEYS = ("expect", "require_count")  # optional: absent from a gate that does not set them
LISTS = ("fail_to_pass", "pass_to_pass")
FORMATS = ("junit",)
PLACEHOLDER = "{report}"
ENV = "GIT_PARALLEL_REPORT"
MAX_LISTED = 20  # ids named per list in a result

Fail = Callable[[str, str], ParallelError]


class ExpectSpec(TypedDict):
    """A gate's ``expect``, as :func:`validate_expect` leaves it in the frozen config."""
    report: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]


def validate_require_count(value: object, path: str, fail: Fail) -> bool:
    """A gate's ``require_count``: a bool."""
    if not isinstance(value, bool):
        raise fail(path, "must be true (a hidden gate must report how many tests ran) or false")
    return value


def validate_expect(value: object, path: str, fail: Fail) -> ExpectSpec:
    """A gate's ``expect``: a mapping with the lists of test ids."""
    if not isinstance(value, dict):
        raise fail(path, "must be a mapping with fail_to_pass and/or pass_to_pass (lists of test ids)")
    unknown = sorted(set(value) - {"report", *LISTS})
    if unknown:
        raise fail(f"{path}.{unknown[0]}", f"unknown key (known: report, {', '.join(LISTS)})")
    report = value.get("report", "junit")
    if report not in FORMATS:
        raise fail(f"{path}.report", f"must be one of {', '.join(FORMATS)}, got {value['report']!r}")
    lists: dict[str, list[str]] = {}
    for name in LISTS:
        ids = value.get(name) or []
        if not isinstance(ids, list) or not all(isinstance(i, str) and i.strip() for i in ids):
            raise fail(f"{path}.{name}", "must be a list of test ids (strings)")
        lists[name] = list(ids)
    if not lists["fail_to_pass"] and not lists["pass_to_pass"]:
        raise fail(path, "names no test: give fail_to_pass and/or pass_to_pass")
    return {"report": report, "fail_to_pass": lists["fail_to_pass"], "pass_to_pass": lists["pass_to_pass"]}


def read_gate_keys(raw: GateConfig, gate: GateConfig, here: str, fail: Fail) -> None:
    """Set the keys of this module on ``gate`` from its config ``raw``
    (only those given: a run spawned before they existed keeps its config)."""
    if "expect" in raw:
        gate["expect"] = validate_expect(raw["expect"], f"{here}.expect", fail)
    if "require_count" in raw:
        gate["require_count"] = validate_require_count(raw["require_count"], f"{here}.require_count", fail)
    if gate.get("expect") and gate["mode"] == "probe":
        raise fail(f"{here}.expect", "a probe's output is its signature; expect: goes on an enforced or observe gate")
    if gate.get("expect") and not written_to(gate):
        raise fail(f"{here}.expect", "the gate's run or env must pass {report} to the test runner, which writes "
                   "its JUnit XML report there (pytest: --junitxml={report})")


def written_to(gate: GateConfig) -> bool:
    """Does the gate's command or environment say where the report goes?"""
    return any(PLACEHOLDER in str(w) for w in [*gate["run"], *(gate.get("env") or {}).values()])


def substitute(gate: GateConfig, report: str) -> tuple[list[str], dict[str, str]]:
    """The gate's argv and env with ``{report}`` replaced by ``report``."""
    argv = [str(w).replace(PLACEHOLDER, report) for w in gate["run"]]
    env = {k: str(v).replace(PLACEHOLDER, report) for k, v in (gate.get("env") or {}).items()}
    return argv, {**env, ENV: report}


# -- the report --------------------------------------------------------------------------
# A report's tags past which it is not parsed: a million passing tests write
# one each, a failing one four; each element parsed costs about 100 bytes.
MAX_TAGS = 1_000_000


def parse_junit(data: bytes) -> dict[str, str]:
    """Each test case of a JUnit XML report, by ``classname.name``:
    ``passed``, ``failed`` (a failure or error) or ``skipped``.  Raises
    ``ValueError`` when it is not such a report, or holds more than
    ``MAX_TAGS`` tags: the attempt's code writes it, and ElementTree keeps
    every element (16 million empty ones, 64 MB of text, took 1.6 GB)."""
    if data.count(b"<") > MAX_TAGS:  # counted in C: at least as many as its elements
        raise ValueError(f"it holds more than {MAX_TAGS:,} tags")
    # The reasons given quote nothing of the report: a hidden gate's verdict
    # goes back to the next attempt, and the attempt's code wrote the report
    # (it named its root element after the hidden tests).
    # (Imported here: the config's reader, which spawn and every verb load, never parses a report.)
    import xml.etree.ElementTree as ET
    from xml.parsers.expat import errors as expat_errors

    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise ValueError(f"not XML ({expat_errors.messages.get(exc.code, 'not well-formed')})") from None
    except (LookupError, ValueError):  # an encoding no codec has, or one expat cannot read
        raise ValueError("not XML (its encoding cannot be read)") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError("its root element is not <testsuites> or <testsuite>")
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        name, cls = case.get("name") or "", case.get("classname") or ""
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        key = f"{cls}.{name}" if cls else name
        # A case reported twice (a rerun) counts by its worst outcome.
        out[key] = "failed" if "failed" in (out.get(key), outcome) else outcome
    return out


def _dotted(test_id: str) -> str:
    """pytest's ``a/b.py::K::t`` as JUnit's ``a.b.K.t``."""
    head, sep, rest = test_id.partition("::")
    if sep and head.endswith(".py"):
        return head[:-3].replace("/", ".") + "." + rest.replace("::", ".")
    return test_id.replace("::", ".")


def outcome_of(test_id: str, cases: dict[str, str]) -> str:
    """``passed``, ``failed``, ``skipped`` or ``missing``: what the report
    says of ``test_id``."""
    for key in (test_id, _dotted(test_id)):
        if key in cases:
            return cases[key]
    by_name = [o for k, o in cases.items() if k.rsplit(".", 1)[-1] == test_id or k == test_id]
    if not by_name:
        return "missing"
    return "failed" if "failed" in by_name else by_name[0]


def judge(spec: ExpectSpec, data: bytes | None) -> ExpectResult:
    """The verdict of ``expect`` on a report (None: none was written):
    ``passed``, the number of tests it ran and failed, ``error`` and, per
    list, the ids that did not pass with what became of each."""
    if data is None:
        return {"passed": False, "tests": None, "failed": None,
                "error": "the gate wrote no test report: the runner did not finish, or {report} is not passed to it"}
    try:
        cases = parse_junit(data)
    except ValueError as exc:
        return {"passed": False, "tests": None, "failed": None, "error": f"the test report is unreadable: {exc}"}
    lists: dict[str, ListOutcome] = {}
    ok = bool(cases)
    for name, ids in (("fail_to_pass", spec["fail_to_pass"]), ("pass_to_pass", spec["pass_to_pass"])):
        wrong = {i: o for i in ids if (o := outcome_of(i, cases)) != "passed"}
        lists[name] = {"expected": len(ids), "not_passed": dict(list(wrong.items())[:MAX_LISTED])}
        ok = ok and not wrong
    error = None
    if not cases:
        error = "the test report holds no test"
    elif not ok:
        error = "; ".join(f"{n}: {len(lists[n]['not_passed'])} of {lists[n]['expected']} did not pass"
                          for n in LISTS if lists[n]["not_passed"])
    return {"passed": ok, "tests": len(cases), "failed": sum(o == "failed" for o in cases.values()), "error": error,
            "fail_to_pass": lists["fail_to_pass"], "pass_to_pass": lists["pass_to_pass"]}


def count_line(judged: Mapping[str, object]) -> str | None:
    """A hidden gate's summary from its report: ``N tests, M failed``."""
    return None if judged.get("tests") is None else f"{judged['tests']} tests, {judged['failed']} failed"
