"""The commented ``.gitparallel.yaml`` ``init`` writes from the runners found."""

from __future__ import annotations

import json
import re
import textwrap

import yaml

from gitflow_parallel import config as C
from gitflow_parallel import harness
from gitflow_parallel.commands.init.detect import Runner
from gitflow_parallel.pysetup import SetupSpec
from gitflow_parallel.template import TEMPLATE, TEMPLATE_SETTINGS


# -- the file init writes --------------------------------------------------------------
def _scalar(word: str) -> str:
    """``word`` as YAML inside a flow list: plain where it reads back the same, else quoted."""
    if re.fullmatch(r"[^\s\"'#,\[\]{}&*!|>%@`]+", word):
        try:
            if yaml.safe_load(f"[{word}]") == [word]:
                return word
        except yaml.YAMLError:
            pass
    return json.dumps(word, ensure_ascii=False)


def _flow(words: list[str]) -> str:
    return "[" + ", ".join(_scalar(w) for w in words) + "]"


def _comment(text: str, prefix: str = "# ", hang: str = "") -> list[str]:
    """``text`` as comment lines, never broken inside a name (``pnpm-lock.yaml``)."""
    return textwrap.wrap(text, 78, initial_indent=prefix, subsequent_indent=prefix + hang,
                         break_on_hyphens=False, break_long_words=False) or [prefix.rstrip()]


def _harness_summary() -> str:
    names = ", ".join(p.removeprefix("**/") for p in harness.HARNESS_PATTERNS)
    return f"at any depth: {names}; the test sections of {', '.join(harness.MIXED_FILES)}"


def _setup_block(setup: SetupSpec) -> list[str]:
    lines = ["setup:", f"  run: {_flow(setup['run'])}"]
    for key, value in (("cache_key", setup["cache_key"]), ("keep", setup.get("keep")), ("path", setup.get("path")),
                       ("stores", setup.get("stores"))):
        if value:
            lines.append(f"  {key}: {_flow(value)}")
    return lines


def _gate_block(name: str, run: list[str], prefix: str = "") -> list[str]:
    return [f"{prefix}  - name: {name}", f"{prefix}    run: {_flow(run)}"]


def render_config(runners: list[Runner]) -> str:
    """The ``.gitparallel.yaml`` init writes for what it found."""
    main = next((r for r in runners if r.run), None)
    notes = [line for r in runners for n in r.notes for line in _comment(f"note ({r.ecosystem}): {n}", hang="  ")]
    if main is None:
        seen = ", ".join(f"{r.ecosystem} ({', '.join(r.found_in)})" for r in runners) or "nothing"
        head = _comment("Written by `git parallel init`, which found no test runner here (it looks for pytest, "
                        f"npm/pnpm/yarn test, go test, cargo test and make test; it saw {seen}): write the "
                        "setup and the gates below yourself, naming the test folder in the gate's run.")
        return "\n".join(head + notes) + "\n\n" + TEMPLATE
    assert main.run is not None and main.tool is not None
    head = _comment(f"Written by `git parallel init`, which found {main.tool} ({', '.join(main.found_in)}). "
                    "Review it, then commit it: spawn reads this file from the base commit.")
    out = head + notes + ["", TEMPLATE_SETTINGS.rstrip("\n"), ""]
    if main.setup:
        out += _comment("The environment the gates run in, built in the judged checkout from the attempt's own "
                        "files: a gate using the python on PATH could import the main worktree's code through an "
                        "editable install and judge that instead.  It is kept while the cache_key files are "
                        "unchanged; stores are your package stores, which setup and gates read through a "
                        "throwaway layer of their own: what they write there is never kept.")
        out += _setup_block(main.setup) + [""]
    out += _comment("Protected: the judged checkout has the base commit's copy of each, and an attempt that "
                    "changes one is kept out of an automatic pick:")
    out += [f"#   {C.CONFIG_FILE}"] + [f"#   {t}/  (named by the gate's run)" for t in main.tests]
    out += [f"#   {p}  (protect: below)" for p in main.protect]
    out += _comment(f"harness files {_harness_summary()} (protect_defaults)", "#   ", "  ")
    out += _comment("Not protected: anything else the tests read (fixtures, data outside those folders): add "
                    "it to protect.")
    if main.protect:
        out.append(f"protect: {_flow(main.protect)}")
    out += ["", "gates:"] + _gate_block("tests", main.run)
    others = [r for r in runners if r.run and r is not main]
    if others:
        out += ["", "# Also found (add as gates, with what they need in setup, to judge with them too):"]
        for r in others:
            assert r.run is not None and r.tool is not None
            out += _gate_block(r.tool.replace(" ", "-"), r.run, "#")
    return "\n".join(out) + "\n"


def protected_summary(runner: Runner | None) -> list[str]:
    """What the written gate protects, as the file's comment lists it."""
    if runner is None:
        return [C.CONFIG_FILE, *harness.HARNESS_PATTERNS]
    return [C.CONFIG_FILE, *runner.tests, *runner.protect, *harness.HARNESS_PATTERNS]
