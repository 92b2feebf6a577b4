#!/usr/bin/env python3
"""Selection benchmark: how often each rule picks a correct attempt.

Generates ``--tasks`` (default 50) small tasks with a known answer: a
function to write, from eight families (sum of multiples of k, words longer
than k, chunks of k, median, dedupe keeping order, leap years, fizz-buzz
with a and b, title case), each task with its own parameter and inputs.
Every task is its own real repository (sealed environment, this checkout's
code) holding a stub ``solution.py``, an enforced gate ``checks/visible.py``
(a few typical cases, as a task's own tests often are) and a probe
``checks/probe.py`` (``mode: probe``: prints the function's results on
sample inputs and edge cases; it knows no expected values).  The hidden
tests stay outside the repository.

Each task gets N=5 scripted candidates: one to three correct ones (written
differently), the rest subtly wrong in ways the visible gate misses (an
inclusive bound, a missing sort, a dropped tail, a rule left out; sometimes
two attempts make the same mistake, as agents do), and now and then one
that fails the visible gate outright.  Then, with real ``git parallel``
subprocesses: ``spawn -n 5``, ``run`` (the agent writes its candidate),
``check`` (real gates, real evidence packs) and ``pick`` under
``selection: tournament`` with a deterministic script judge (it prefers the
attempt whose enforced gates exited 0 more often, then the smaller diff, and says
``tie`` otherwise, which the pick breaks by its next rule).  The same
run's evidence is also judged in-process by the real selection code under
``critic_first_pass`` (no score source, so: fewest changed lines, then id),
``majority_vote`` and ``cluster``.  Which attempts are right is what an
``observe`` gate with ``hidden:`` (the hidden tests, laid over the judged
checkout for that gate only, never deciding a pick) recorded in each pack.

``--click PATH`` adds tasks from click's history (``selection_tasks_click.py``:
the commit's test changes hidden, its source change and wrong variants of it
as attempts, the parent's tests of the module as the gate), each checkout's
``setup:`` a ``.venv`` kept between checks.

Prints, per set and rule, best@N, eta (best@N / oracle pass@N), regret in
points and the false-accept rate (picked, passes the gates, fails the hidden
tests), over all tasks and over those where 2+ attempts pass the gates,
with a uniform random choice among passing attempts (exact expectation) for
scale (see docs/selection.md); and, as figures for scripts/bench.py,
``first_pass_accuracy``, ``cluster_accuracy``, ``tournament_accuracy`` and
``cluster_gain`` (cluster minus first_pass) of the generated set,
``oracle``, ``random_pick``, ``eta_*`` and ``false_accept_*``.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import selection_tasks_click  # noqa: E402
from benchenv import ROOT, discard, sh, workspace  # noqa: E402

sys.path.insert(0, str(ROOT))
from gitflow_parallel import evidence  # noqa: E402
from gitflow_parallel.judge import selection  # noqa: E402
from gitflow_parallel.state.project import Project  # noqa: E402

N = 5
VOCAB = ("a an the cat dog bird tree house river stone cloud light night green quick brown lazy over under "
         "between beyond window garden mountain summer winter yellow purple orange silver golden wonder "
         "planet rocket engine simple complex gentle").split()

# -- the task families ----------------------------------------------------------------------
# Each: the function's name, correct variants (the first is the reference),
# subtly wrong variants, one blatantly wrong variant, and input makers for the
# visible gate, the probe and the hidden tests.  Code is a format string of
# the task's parameters.

FAMILIES: list[dict[str, Any]] = [
    {
        "name": "sum_multiples",
        "params": lambda r: {"k": r.choice([3, 4, 5, 6, 7])},
        "correct": [
            "def sum_multiples(n):\n    return sum(i for i in range(n) if i % {k} == 0)\n",
            "def sum_multiples(n):\n    total = 0\n    for i in range(0, n, {k}):\n        total += i\n    return total\n",
            "def sum_multiples(n):\n    if n <= 0:\n        return 0\n    m = (n - 1) // {k}\n    return {k} * m * (m + 1) // 2\n",
        ],
        "wrong": [
            "def sum_multiples(n):\n    return sum(range(0, n + 1, {k}))\n",
            "def sum_multiples(n):\n    m = (n - 1) // {k}\n    return {k} * m * (m + 1) // 2\n",
            "def sum_multiples(n):\n    m = n // {k}\n    return {k} * m * (m + 1) // 2\n",
        ],
        "blatant": "def sum_multiples(n):\n    return sum(range(n))\n",
        "visible": lambda p, r: [p["k"] * r.randint(2, 9) + r.randint(1, p["k"] - 1) for _ in range(3)],
        "probe": lambda p, r: [0, p["k"], 2 * p["k"], 10 * p["k"], -1, -(2 * p["k"] + 3), 7 * p["k"] + 1],
        "hidden": lambda p, r: [4 * p["k"], 9 * p["k"], -(3 * p["k"] + 1), 0, 2 * p["k"] + 1, 100 * p["k"]],
    },
    {
        "name": "count_long",
        "params": lambda r: {"k": r.choice([3, 4, 5, 6]), "k1": None},
        "correct": [
            "def count_long(text):\n    return sum(1 for w in text.split() if len(w) > {k})\n",
            "def count_long(text):\n    count = 0\n    for word in text.split():\n        if len(word) > {k}:\n            count += 1\n    return count\n",
            "def count_long(text):\n    return len([w for w in text.split() if len(w) >= {k1}])\n",
        ],
        "wrong": [
            "def count_long(text):\n    return sum(1 for w in text.split() if len(w) >= {k})\n",
            "def count_long(text):\n    return sum(1 for w in text.split(' ') if len(w) > {k})\n",
            "def count_long(text):\n    return sum(1 for w in text.split() if len(w.strip('.,!?')) > {k})\n",
        ],
        "blatant": "def count_long(text):\n    return len(text.split())\n",
        "visible": lambda p, r: [" ".join(r.choice([w for w in VOCAB if len(w) != p["k"]]) for _ in range(r.randint(3, 8)))
                                 for _ in range(3)],
        "probe": lambda p, r: ["", "x" * p["k"], "x" * (p["k"] + 1), "one\ttwo\nthree  fourteen",
                               ("y" * p["k"]) + ", " + ("z" * p["k"]) + "!", " ".join(r.sample(VOCAB, 10))],
        "hidden": lambda p, r: ["w" * p["k"] + " " + "v" * (p["k"] + 2), "line one\nline " + "u" * (p["k"] + 1),
                                ("q" * p["k"]) + ".", " ".join(r.sample(VOCAB, 12)), "  spaced   out  words  "],
    },
    {
        "name": "chunks",
        "params": lambda r: {"k": r.choice([2, 3, 4])},
        "correct": [
            "def chunks(xs):\n    return [xs[i:i + {k}] for i in range(0, len(xs), {k})]\n",
            "def chunks(xs):\n    out = []\n    for i in range(0, len(xs), {k}):\n        out.append(xs[i:i + {k}])\n    return out\n",
            "def chunks(xs):\n    out, rest = [], list(xs)\n    while rest:\n        out.append(rest[:{k}])\n        rest = rest[{k}:]\n    return out\n",
        ],
        "wrong": [
            "def chunks(xs):\n    return [xs[i:i + {k}] for i in range(0, len(xs) - {k} + 1, {k})]\n",
            "def chunks(xs):\n    return [(xs[i:i + {k}] + [None] * {k})[:{k}] for i in range(0, len(xs), {k})]\n",
            "def chunks(xs):\n    if not xs:\n        return [[]]\n    return [xs[i:i + {k}] for i in range(0, len(xs), {k})]\n",
        ],
        "blatant": "def chunks(xs):\n    return [xs]\n",
        "visible": lambda p, r: [[r.randint(0, 9) for _ in range(p["k"] * r.randint(2, 4))] for _ in range(3)],
        "probe": lambda p, r: [[], [1], list(range(p["k"] + 1)), list(range(3 * p["k"] - 1)), list(range(2 * p["k"]))],
        "hidden": lambda p, r: [list(range(5 * p["k"] + 1)), [], [7] * (p["k"] - 1), list(range(4 * p["k"]))],
    },
    {
        "name": "median",
        "params": lambda r: {},
        "correct": [
            "def median(xs):\n    s = sorted(xs)\n    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n",
            "import statistics\n\n\ndef median(xs):\n    return statistics.median(xs)\n",
            "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    if n % 2 == 1:\n        return s[n // 2]\n    return (s[n // 2 - 1] + s[n // 2]) / 2\n",
        ],
        "wrong": [
            "def median(xs):\n    mid = len(xs) // 2\n    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2\n",
            "def median(xs):\n    s = sorted(xs)\n    return s[len(s) // 2]\n",
            "def median(xs):\n    s = sorted(xs)\n    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) // 2\n",
        ],
        "blatant": "def median(xs):\n    return sum(xs) / len(xs) + 1\n",
        "visible": lambda p, r: [sorted(r.sample(range(100), 2 * r.randint(1, 4) + 1)) for _ in range(3)],
        "probe": lambda p, r: [[3, 1, 2], [1, 2, 3, 4], [5, 1], r.sample(range(50), 6), [2, 2, 9, 9, 9, 1]],
        "hidden": lambda p, r: [r.sample(range(100), 7), [10, 1, 4, 3], [1, 2], [8, 3, 3, 1, 0, 9, 4, 4]],
    },
    {
        "name": "dedupe",
        "params": lambda r: {},
        "correct": [
            "def dedupe(xs):\n    return list(dict.fromkeys(xs))\n",
            "def dedupe(xs):\n    seen, out = set(), []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n",
            "def dedupe(xs):\n    return [x for i, x in enumerate(xs) if x not in xs[:i]]\n",
        ],
        "wrong": [
            "def dedupe(xs):\n    return sorted(set(xs))\n",
            "def dedupe(xs):\n    return list(set(xs))\n",
            "def dedupe(xs):\n    return [x for i, x in enumerate(xs) if i == 0 or xs[i - 1] != x]\n",
        ],
        "blatant": "def dedupe(xs):\n    return xs[1:]\n",
        "visible": lambda p, r: [sorted(r.choice(range(10)) for _ in range(r.randint(4, 8))) for _ in range(3)],
        "probe": lambda p, r: [[], [3, 1, 3, 2, 1], [5, 5, 4, 5], r.choices(range(6), k=10)],
        "hidden": lambda p, r: [[9, 2, 9, 1, 2], r.choices(range(8), k=12), [1, 2, 1, 2, 1], [4, 3, 2, 1]],
    },
    {
        "name": "is_leap",
        "params": lambda r: {"base": r.choice([1980, 1990, 2000, 2010])},
        "correct": [
            "import calendar\n\n\ndef is_leap(year):\n    return calendar.isleap(year)\n",
            "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n",
            "def is_leap(year):\n    if year % 400 == 0:\n        return True\n    if year % 100 == 0:\n        return False\n    return year % 4 == 0\n",
        ],
        "wrong": [
            "def is_leap(year):\n    return year % 4 == 0\n",
            "def is_leap(year):\n    return year % 4 == 0 and year % 100 != 0\n",
            "def is_leap(year):\n    return (year % 4 == 0 and year % 100 != 0) or year % 100 == 0\n",
        ],
        "blatant": "def is_leap(year):\n    return year % 2 == 0\n",
        "visible": lambda p, r: [p["base"] + d for d in r.sample([1, 3, 4, 5, 7, 8, 11, 12, 16, 17], 4) if (p["base"] + d) % 100],
        "probe": lambda p, r: [1900, 2000, 2100, 2400, p["base"] + 4, p["base"] + 6],
        "hidden": lambda p, r: [1800, 1600, 2200, 2004, 2023, p["base"] + 8],
    },
    {
        "name": "fizz",
        "params": lambda r: dict(zip("ab", r.choice([(3, 5), (2, 7), (3, 7), (4, 5), (5, 7)]))),
        "correct": [
            "def fizz(n):\n    if n % {a} == 0 and n % {b} == 0:\n        return 'FizzBuzz'\n    if n % {a} == 0:\n        return 'Fizz'\n    if n % {b} == 0:\n        return 'Buzz'\n    return str(n)\n",
            "def fizz(n):\n    s = ('Fizz' if n % {a} == 0 else '') + ('Buzz' if n % {b} == 0 else '')\n    return s or str(n)\n",
            "def fizz(n):\n    if n % ({a} * {b}) == 0:\n        return 'FizzBuzz'\n    if n % {a} == 0:\n        return 'Fizz'\n    return 'Buzz' if n % {b} == 0 else str(n)\n",
        ],
        "wrong": [
            "def fizz(n):\n    if n % {a} == 0:\n        return 'Fizz'\n    if n % {b} == 0:\n        return 'Buzz'\n    return str(n)\n",
            "def fizz(n):\n    if n % ({a} + {b}) == 0:\n        return 'FizzBuzz'\n    if n % {a} == 0:\n        return 'Fizz'\n    return 'Buzz' if n % {b} == 0 else str(n)\n",
            "def fizz(n):\n    if n % {a} == 0 and n % {b} == 0:\n        return 'FizzBuzz'\n    if n % {a} == 0:\n        return 'Fizz'\n    if n % {b} == 0 and n > {b}:\n        return 'Buzz'\n    return str(n)\n",
        ],
        "blatant": "def fizz(n):\n    return str(n)\n",
        "visible": lambda p, r: [p["a"] * 2 if (p["a"] * 2) % p["b"] else p["a"], p["b"] * 2 if (p["b"] * 2) % p["a"] else p["b"] * 3, 1],
        "probe": lambda p, r: list(range(1, p["a"] * p["b"] + 1)),
        "hidden": lambda p, r: [p["a"] * p["b"] * 2, p["b"], p["a"] + p["b"], p["a"] * p["b"] + 1, 0],
    },
    {
        "name": "title",
        "params": lambda r: {},
        "correct": [
            "def title(s):\n    return ' '.join(w[:1].upper() + w[1:].lower() for w in s.split(' '))\n",
            "def title(s):\n    return ' '.join(w.capitalize() for w in s.split(' '))\n",
            "def title(s):\n    words = []\n    for w in s.split(' '):\n        words.append(w[:1].upper() + w[1:].lower())\n    return ' '.join(words)\n",
        ],
        "wrong": [
            "def title(s):\n    return s.title()\n",
            "def title(s):\n    return ' '.join(w.capitalize() for w in s.split())\n",
            "import string\n\n\ndef title(s):\n    return string.capwords(s)\n",
        ],
        "blatant": "def title(s):\n    return s.upper()\n",
        "visible": lambda p, r: [" ".join(r.sample(VOCAB, r.randint(2, 5))) for _ in range(3)],
        "probe": lambda p, r: ["don't stop", "the 3rd  time", "  lead", "MiXeD cAsE", " ".join(r.sample(VOCAB, 4))],
        "hidden": lambda p, r: ["it's a dog's life", "two  spaces", "x-ray vision", "ok 2nd try ", "plain words"],
    },
]

STUB = "def {name}(*args):\n    raise NotImplementedError\n"

VISIBLE = """\
import json, sys
sys.path.insert(0, ".")
from solution import {name} as f
CASES = json.loads({cases!r})
bad = [(args, want) for args, want in CASES if repr(f(args)) != want]
print("visible cases:", len(CASES), "failed:", bad)
sys.exit(1 if bad else 0)
"""

# The probe knows no answers: it prints behaviour, one line per input.
PROBE = """\
import json, sys
sys.path.insert(0, ".")
from solution import {name} as f
for args in json.loads({inputs!r}):
    try:
        print(repr(f(args)))
    except Exception as exc:
        print("raised", type(exc).__name__)
"""

# The hidden tests: laid over the judged checkout for the `hidden` gate only
# (gates[].hidden, mode observe: recorded, never deciding a pick).
HIDDEN = """\
import json, sys
sys.path.insert(0, ".")
from solution import {name} as f
CASES = json.loads({cases!r})
try:
    bad = [args for args, want in CASES if repr(f(args)) != want]
except Exception as exc:
    bad = [repr(exc)]
print(len(CASES) - len(bad), "passed,", len(bad), "failed")  # the count a hidden gate must report
sys.exit(1 if bad else 0)
"""

AGENT = """\
import json, os, pathlib, sys
plan = json.loads(pathlib.Path(sys.argv[1]).read_text())
for path, text in plan[os.environ["GIT_PARALLEL_INSTANCE"]].items():
    pathlib.Path(path).write_text(text)
"""

# A deterministic script judge: fewer enforced gates that exited non-zero,
# then the smaller diff; an exact tie is said as such (the pick breaks it).
# It reads only enforced gates: the hidden gate is the benchmark's truth.
JUDGE = """\
import json, os, pathlib
def figures(side):
    d = pathlib.Path(os.environ["GIT_PARALLEL_JUDGE_" + side])
    pack = json.loads((d / "evidence.json").read_text())
    nonzero = sum(1 for g in pack["gates"] if g.get("mode") == "enforced"
                  and (g.get("exit_code") not in (0, None) or g.get("error")))
    return nonzero, len((d / "diff").read_bytes())
a, b = figures("A"), figures("B")
print("A", a, "B", b)
print("A" if a < b else "B" if b < a else "tie")
"""

RULES = ("critic_first_pass", "majority_vote", "cluster", "tournament", "differential")
SHORT = {"critic_first_pass": "first_pass", "majority_vote": "majority", "cluster": "cluster",
         "tournament": "tournament", "differential": "differential"}
# `selection: differential`'s commands: the example generator, no model.
DISTINGUISH = ROOT / "examples" / "distinguish_functions.py"


def _code(template: str, params: dict[str, Any]) -> str:
    return template.format(**params)


def _reference(family: dict[str, Any], params: dict[str, Any]) -> Any:
    scope: dict[str, Any] = {}
    exec(_code(family["correct"][0], params), scope)  # the benchmark's own reference code
    return scope[family["name"]]


def generate(index: int, seed: int) -> dict[str, Any]:
    """One task: files of its repository, hidden cases, and the candidates' plan."""
    r = random.Random(seed * 1000 + index)
    family = FAMILIES[index % len(FAMILIES)]
    params = family["params"](r)
    if "k1" in params:
        params["k1"] = params["k"] + 1
    ref = _reference(family, params)
    cases = lambda inputs: [[x, repr(ref(x))] for x in inputs]  # noqa: E731
    visible, probe, hidden = family["visible"](params, r), family["probe"](params, r), family["hidden"](params, r)
    n_correct = r.choice([1, 2, 2, 3])
    codes = r.sample(family["correct"], n_correct) + r.choices(family["wrong"], k=N - n_correct)
    if r.random() < 0.3:
        codes[-1] = family["blatant"]
    r.shuffle(codes)
    name = family["name"]
    return {
        "index": index, "family": name, "params": params,
        "files": {
            "solution.py": STUB.format(name=name),
            "checks/visible.py": VISIBLE.format(name=name, cases=json.dumps(cases(visible))),
            "checks/probe.py": PROBE.format(name=name, inputs=json.dumps(probe)),
        },
        "hidden": {"checks/hidden.py": HIDDEN.format(name=name, cases=json.dumps(cases(hidden)))},
        "plan": {str(i + 1): {"solution.py": _code(c, params)} for i, c in enumerate(codes)},
    }


CONFIG = """\
max_total: {n}
selection: tournament
judge:
  command: [{py}, {judge}]
  timeout: 60
gates:
  - name: visible
    run: [{py}, checks/visible.py]
  - name: behaviour
    run: [{py}, checks/probe.py]
    mode: probe
  - name: hidden
    run: [{py}, checks/hidden.py]
    mode: observe
    hidden: {hidden}
"""

CLICK_CONFIG = """\
max_total: {n}
selection: tournament
judge:
  command: [{py}, {judge}]
  timeout: 60
setup:
  run: [{venv_py}, {maker}, venv]
  cache_key: [pyproject.toml]
  keep: [.venv]
  path: [.venv/bin]
gates:
  - name: visible
    run: [.venv/bin/python, -m, pytest, -q, -p, no:cacheprovider, --tb=no, {visible}]
    timeout: 900
  - name: hidden
    run: [.venv/bin/python, -m, pytest, -q, -p, no:cacheprovider, --tb=no, {hidden_run}]
    timeout: 900
    mode: observe
    hidden: {hidden}
"""


def _prepare(folder: Path, task: dict[str, Any], plan: dict[str, dict[str, str]]) -> None:
    """The task's folder beside its repository: judge, agent, plan, hidden tests."""
    (folder / "judge.py").write_text(JUDGE)
    (folder / "agent.py").write_text(AGENT)
    (folder / "plan.json").write_text(json.dumps(plan))
    for rel, text in task["hidden"].items():
        (folder / "hidden" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "hidden" / rel).write_text(text)


def run_task(repo: Path, n: int, env: dict[str, str]) -> dict[str, Any] | None:
    """A real run: spawn, run (the agent writes its attempt), check, pick
    (tournament); the pick, or None when no attempt passed the gates."""
    folder = repo.parent
    sh(["git", "parallel", "spawn", "t", "-n", str(n)], repo, env)
    sh(["git", "parallel", "run", "t", "--", sys.executable, str(folder / "agent.py"), str(folder / "plan.json")],
       repo, env)
    sh(["git", "parallel", "check", "t"], repo, env, check=False)  # exit 1 when an attempt fails its gate
    picked = sh(["git", "parallel", "pick", "t", "--json"], repo, env, check=False)
    return json.loads(picked.stdout)["picks"][0] if picked.returncode == 0 else None


def build_generated(task: dict[str, Any], base: Path, env: dict[str, str]) -> Path:
    folder = base / f"task-{task['index']:02d}"
    repo = folder / "repo"
    (repo / "checks").mkdir(parents=True)
    for path, text in task["files"].items():
        (repo / path).write_text(text)
    _prepare(folder, task, task["plan"])
    (repo / ".gitparallel.yaml").write_text(CONFIG.format(n=N, py=sys.executable, judge=folder / "judge.py",
                                                          hidden=folder / "hidden"))
    sh(["git", "init", "-q", "-b", "main"], repo, env)
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", f"task {task['family']}"], repo, env)
    return repo


def build_click(task: dict[str, Any], index: int, source: Path, venv_py: Path, base: Path,
                env: dict[str, str]) -> Path:
    """The click clone at the commit's parent, with the task's config committed."""
    folder = base / f"click-{index:02d}"
    repo = folder / "repo"
    folder.mkdir(parents=True)
    sh(["git", "clone", "-q", "--shared", "--no-checkout", str(source), str(repo)], folder, env)
    sh(["git", "checkout", "-q", "-B", "main", task["parent"]], repo, env)
    sh(["git", "remote", "remove", "origin"], repo, env)
    plan = {str(i + 1): a["files"] for i, a in enumerate(task["attempts"])}
    _prepare(folder, task, plan)
    (repo / ".gitparallel.yaml").write_text(CLICK_CONFIG.format(
        n=len(plan), py=sys.executable, judge=folder / "judge.py", venv_py=venv_py,
        maker=Path(__file__).resolve().parent / "selection_tasks_click.py", visible=", ".join(task["visible"]),
        hidden_run=", ".join(task["hidden_run"]), hidden=folder / "hidden"))
    sh(["git", "add", ".gitparallel.yaml"], repo, env)
    sh(["git", "commit", "-q", "-m", "selection task"], repo, env)
    return repo


def judge_repo(repo: Path, n: int, env: dict[str, str], python: str = sys.executable) -> dict[str, Any]:
    """Winners of every rule on one run's evidence, and what the hidden gate
    said of every attempt (True: right)."""
    tournament = run_task(repo, n, env)
    project = Project.open(repo)
    record = project.store.load("t")
    correct = {}
    for inst in record["instances"]:
        pack = evidence.load(inst) or {}
        correct[inst["id"]] = any(g["name"] == "hidden" and g.get("passed") for g in pack.get("gates", []))
    if tournament is None:  # nothing passed the gates: no rule picks
        return {"winners": {rule: None for rule in RULES}, "correct": correct, "candidates": [], "clusters": [],
                "dclusters": [], "distinguish": None, "matches": 0, "judge_ties": 0}
    winners = {"tournament": tournament["winner"]["id"]}
    differential: dict[str, Any] = {}
    for method in RULES:
        if method == "tournament":
            continue
        rec = copy.deepcopy(record)
        rec["config"]["selection"] = method  # the same evidence, another rule
        if method == "differential":
            rec["config"]["distinguish"] = {"command": [python, str(DISTINGUISH), "generate"],
                                            "run": [python, str(DISTINGUISH), "run"], "timeout": 300}
        chosen = selection.choose(project, rec, "main")
        winners[method] = chosen["winner"]["id"]
        if method == "differential":
            differential = chosen
    matches = (tournament.get("tournament") or {}).get("matches", [])
    ran = differential.get("differential") or {}
    return {"winners": winners, "correct": correct, "candidates": [c["id"] for c in tournament["ranking"]],
            "clusters": [c["members"] for c in tournament.get("clusters") or []],
            "dclusters": [c["members"] for c in differential.get("clusters") or []],
            "distinguish": (ran.get("fallback") or {}).get("code") or ran.get("status"),
            "matches": len([m for m in matches if m["b"] is not None]),
            "judge_ties": len([m for m in matches if m["decided_by"].startswith("tie")])}


# -- the figures ------------------------------------------------------------------------------
def figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    """best@N, eta, regret and false accepts per rule, oracle, and a uniform
    random choice among the attempts that pass the gates (exact expectation)."""
    n = len(results)
    if not n:
        return {"tasks": 0}
    oracle = Fraction(sum(any(r["correct"][c] for c in r["candidates"]) for r in results), n)
    picked = [r for r in results if r["candidates"]]
    out: dict[str, Any] = {"tasks": n, "oracle": oracle, "rules": {}}
    for rule in RULES:
        right = sum(1 for r in picked if r["correct"][r["winners"][rule]])
        out["rules"][rule] = {"best": Fraction(right, n), "false_accept": Fraction(len(picked) - right, len(picked))
                              if picked else Fraction(0)}
    expected = sum((Fraction(sum(r["correct"][c] for c in r["candidates"]), len(r["candidates"])) for r in picked),
                   Fraction(0))
    out["rules"]["random"] = {"best": expected / n,
                              "false_accept": 1 - expected / len(picked) if picked else Fraction(0)}
    for fig in out["rules"].values():
        fig["eta"] = fig["best"] / oracle if oracle else None
        fig["regret"] = (oracle - fig["best"]) * 100
    return out


def table(name: str, results: list[dict[str, Any]]) -> list[str]:
    contested = [r for r in results if len(r["candidates"]) >= 2]
    every, two = figures(results), figures(contested)
    lines = [f"set {name}: {len(results)} tasks, {len(contested)} with 2+ attempts passing the gates; "
             f"oracle pass@N {float(every['oracle']):.2f} (all), "
             f"{float(two['oracle']) if two['tasks'] else 0:.2f} (2+)",
             f"  {'rule':<18} {'best@N':>6} {'eta':>5} {'regret':>6} {'f.acc':>5}   |  2+ passing: "
             f"{'best@N':>6} {'eta':>5} {'regret':>6} {'f.acc':>5}"]

    def cells(fig: dict[str, Any] | None) -> str:
        if not fig:
            return f"{'-':>6} {'-':>5} {'-':>6} {'-':>5}"
        eta = f"{float(fig['eta']):.2f}" if fig["eta"] is not None else "-"
        return f"{float(fig['best']):>6.2f} {eta:>5} {float(fig['regret']):>6.1f} {float(fig['false_accept']):>5.2f}"

    for rule in (*RULES, "random"):
        label = rule if rule != "random" else "random (expected)"
        lines.append(f"  {label:<18} {cells(every['rules'][rule])}   |  {'':12}"
                     f"{cells(two['rules'][rule] if two['tasks'] else None)}")
    return lines


def per_task_line(label: str, r: dict[str, Any]) -> str:
    marks = " ".join(f"{SHORT[rule]}={r['winners'][rule]}{'+' if r['correct'].get(r['winners'][rule]) else '-'}"
                     for rule in RULES)
    right = ",".join(c for c in r["candidates"] if r["correct"][c])
    return f"{label:<28} passing {','.join(r['candidates']) or '-':<10} right {right or '-':<7} " \
           f"clusters {r['clusters']} differential {r['dclusters']} ({r['distinguish']})  {marks}"


def click_venv(where: Path) -> Path:
    """One virtual environment with pytest for every click checkout, built once."""
    python = where / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "pytest"], check=True)
    return python


def click_tasks(args: argparse.Namespace, venv_py: Path) -> dict[str, Any]:
    if args.click_tasks:
        return json.loads(args.click_tasks.read_text())
    return selection_tasks_click.generate(args.click, args.click_rev, args.seed, args.click_count, 4, str(venv_py),
                                          600, log=lambda s: print(f"click: {s}", file=sys.stderr))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=50, help="number of generated tasks (default 50; 0: none)")
    ap.add_argument("--seed", type=int, default=17, help="generator seed (default 17), both sets")
    ap.add_argument("--jobs", type=int, default=2, help="generated tasks built and judged at once (default 2)")
    ap.add_argument("--click", type=Path, help="a clone of pallets/click: also run tasks from its history")
    ap.add_argument("--click-rev", default="HEAD", help="newest click commit looked at (default HEAD)")
    ap.add_argument("--click-count", type=int, default=12, help="click tasks (default 12)")
    ap.add_argument("--click-tasks", type=Path, help="click tasks written by selection_tasks_click.py --out")
    ap.add_argument("--click-venv", type=Path, default=Path.home() / ".cache" / "git-parallel-bench" / "click-venv",
                    help="the virtual environment with pytest for click's checkouts (built once)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per task")
    args = ap.parse_args()
    base, env = workspace("gp-bench-selection-")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    started = time.perf_counter()
    generated: list[dict[str, Any]] = []
    click: list[dict[str, Any]] = []
    try:
        tasks = [generate(i, args.seed) for i in range(args.tasks)]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            generated = list(pool.map(lambda t: {**judge_repo(build_generated(t, base, env), N, env),
                                                 "label": f"task {t['index']:02d} {t['family']}"}, tasks))
        if args.click or args.click_tasks:
            venv_py = click_venv(args.click_venv)
            found = click_tasks(args, venv_py)
            source = args.click or Path(found["source"])
            for i, t in enumerate(found["tasks"][:args.click_count]):
                # The checkout's own .venv (setup) imports the checkout's click.
                r = judge_repo(build_click(t, i, source, venv_py, base, env), len(t["attempts"]), env, ".venv/bin/python")
                kinds = {str(k + 1): a["kind"] for k, a in enumerate(t["attempts"])}
                click.append({**r, "label": f"click {t['commit'][:8]}", "kinds": kinds})
    finally:
        discard(base)
    if args.verbose:
        for r in generated + click:
            print(per_task_line(r["label"], r) + (f"  {r['kinds']}" if "kinds" in r else ""))
    for name, results in (("generated", generated), ("click", click)):
        if results:
            print("\n".join(table(name, results)))
    if generated:
        subtle = sum(1 for r in generated for c in r["candidates"] if not r["correct"][c])
        print(f"generated: candidates passing the visible gate: {sum(len(r['candidates']) for r in generated)}, "
              f"of which subtly wrong (fail the hidden tests): {subtle}; tournament matches: "
              f"{sum(r['matches'] for r in generated)}, unanswered (ties broken by the next rule): "
              f"{sum(r['judge_ties'] for r in generated)}")
        fig = figures(generated)
        acc = {SHORT[rule]: float(fig["rules"][rule]["best"]) for rule in RULES}
        print(f"selection_accuracy: first_pass={acc['first_pass']:.2f}, cluster={acc['cluster']:.2f}, "
              f"tournament={acc['tournament']:.2f}")
        for short in ("first_pass", "cluster", "tournament"):
            print(f"{short}_accuracy: {acc[short]:.2f}")
        print(f"cluster_gain: {acc['cluster'] - acc['first_pass']:.2f}")
        print(f"oracle: {float(fig['oracle']):.2f}")
        print(f"random_pick: {float(fig['rules']['random']['best']):.2f}")
    for name, results in (("generated", generated), ("click", click)):
        fig = figures(results)
        for rule in ("cluster", "tournament", "differential") if results else ():
            eta = fig["rules"][rule]["eta"]
            print(f"{'click_' if name == 'click' else ''}eta_{SHORT[rule]}: {float(eta) if eta is not None else 0:.2f}")
            print(f"{'click_' if name == 'click' else ''}false_accept_{SHORT[rule]}: "
                  f"{float(fig['rules'][rule]['false_accept']):.2f}")
    print(f"elapsed_s: {time.perf_counter() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
