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
attempt whose gates exited 0 more often, then the smaller diff, and says
``tie`` otherwise, which the pick breaks by its next rule).  The same
run's evidence is also judged in-process by the real selection code under
``critic_first_pass`` (no score source, so: fewest changed lines, then id)
and ``cluster``.  Each winner's commit is read from the object database and
run against the hidden tests; so is every candidate, for the baselines.

Prints ``selection_accuracy: first_pass=…, cluster=…, tournament=…`` and, as
figures for scripts/bench.py, ``first_pass_accuracy``, ``cluster_accuracy``,
``tournament_accuracy`` and ``cluster_gain`` (cluster minus first_pass),
plus what bounds them: ``oracle`` (a correct candidate existed) and
``random_pick`` (the share of correct candidates among those passing the
visible gate).
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pygit2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import ROOT, sh, workspace  # noqa: E402

sys.path.insert(0, str(ROOT))
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

# Run outside the repositories: paths of solution files in, JSON verdicts out.
HIDDEN = """\
import importlib.util, json, sys
cases = json.loads(open(sys.argv[1]).read())
out = {}
for path in sys.argv[2:]:
    spec = importlib.util.spec_from_file_location("candidate", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        f = getattr(mod, cases["name"])
        out[path] = all(repr(f(args)) == want for args, want in cases["cases"])
    except Exception:
        out[path] = False
print(json.dumps(out))
"""

AGENT = """\
import json, os, pathlib, sys
plan = json.loads(pathlib.Path(sys.argv[1]).read_text())
pathlib.Path("solution.py").write_text(plan[os.environ["GIT_PARALLEL_INSTANCE"]])
"""

# A deterministic script judge: fewer gates that exited non-zero, then the
# smaller diff; an exact tie is said as such (the pick breaks it).
JUDGE = """\
import json, os, pathlib
from gitflow_parallel.judge import selection
def figures(side):
    d = pathlib.Path(os.environ["GIT_PARALLEL_JUDGE_" + side])
    pack = json.loads((d / "evidence.json").read_text())
    nonzero = sum(1 for g in pack["gates"] if g.get("exit_code") not in (0, None) or g.get("error"))
    return nonzero, len((d / "diff").read_bytes())
a, b = figures("A"), figures("B")
print("A", a, "B", b)
print("A" if a < b else "B" if b < a else "tie")
"""


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
        "hidden": {"name": name, "cases": cases(hidden)},
        "plan": {str(i + 1): _code(c, params) for i, c in enumerate(codes)},
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
"""


def build_and_run(task: dict[str, Any], base: Path, env: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """A real repository, a real run: spawn, run, check, pick (tournament)."""
    folder = base / f"task-{task['index']:02d}"
    repo = folder / "repo"
    (repo / "checks").mkdir(parents=True)
    for path, text in task["files"].items():
        (repo / path).write_text(text)
    (folder / "judge.py").write_text(JUDGE)
    (folder / "agent.py").write_text(AGENT)
    (folder / "plan.json").write_text(json.dumps(task["plan"]))
    (repo / ".gitparallel.yaml").write_text(CONFIG.format(n=N, py=sys.executable, judge=folder / "judge.py"))
    sh(["git", "init", "-q", "-b", "main"], repo, env)
    sh(["git", "add", "-A"], repo, env)
    sh(["git", "commit", "-q", "-m", f"task {task['family']}"], repo, env)
    sh(["git", "parallel", "spawn", "t", "-n", str(N)], repo, env)
    sh(["git", "parallel", "run", "t", "--", sys.executable, str(folder / "agent.py"), str(folder / "plan.json")],
       repo, env)
    sh(["git", "parallel", "check", "t"], repo, env, check=False)  # exit 1 when an attempt fails its gate
    picked = sh(["git", "parallel", "pick", "t", "--json"], repo, env)
    return repo, json.loads(picked.stdout)["picks"][0]


def hidden_verdicts(task: dict[str, Any], project: Project, record: dict[str, Any], folder: Path,
                    env: dict[str, str]) -> dict[str, bool]:
    """Run the hidden tests on every instance's committed solution.py (read
    from the object database, not from a worktree)."""
    paths = {}
    for inst in record["instances"]:
        commit = project.tip(inst)
        blob = project.repo.pygit.get(commit).peel(pygit2.Commit).tree["solution.py"]
        path = folder / "judged" / inst["id"] / "solution.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(project.repo.pygit.get(blob.id).data)
        paths[inst["id"]] = str(path)
    (folder / "hidden.json").write_text(json.dumps(task["hidden"]))
    (folder / "hidden.py").write_text(HIDDEN)
    proc = sh([sys.executable, str(folder / "hidden.py"), str(folder / "hidden.json"), *paths.values()], folder, env)
    verdict = json.loads(proc.stdout)
    return {i: verdict[p] for i, p in paths.items()}


def judge_task(task: dict[str, Any], base: Path, env: dict[str, str]) -> dict[str, Any]:
    repo, tournament = build_and_run(task, base, env)
    project = Project.open(repo)
    record = project.store.load("t")
    winners = {"tournament": tournament["winner"]["id"]}
    for method in ("critic_first_pass", "cluster"):
        rec = copy.deepcopy(record)
        rec["config"]["selection"] = method  # the same evidence, another rule
        winners[method] = selection.choose(project, rec, "main")["winner"]["id"]
    correct = hidden_verdicts(task, project, record, repo.parent, env)
    passing_visible = [c["id"] for c in tournament["ranking"]]
    clusters = tournament["clusters"]
    return {"index": task["index"], "family": task["family"], "winners": winners, "correct": correct,
            "candidates": passing_visible, "clusters": [c["members"] for c in clusters],
            "matches": len([m for m in tournament["tournament"]["matches"] if m["b"] is not None]),
            "judge_ties": len([m for m in tournament["tournament"]["matches"] if m["decided_by"].startswith("tie")])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=50, help="number of generated tasks (default 50)")
    ap.add_argument("--seed", type=int, default=17, help="generator seed (default 17)")
    ap.add_argument("--jobs", type=int, default=2, help="tasks built and judged at once (default 2)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per task")
    args = ap.parse_args()
    base, env = workspace("gp-bench-selection-")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    started = time.perf_counter()
    try:
        tasks = [generate(i, args.seed) for i in range(args.tasks)]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda t: judge_task(t, base, env), tasks))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rules = {"first_pass": "critic_first_pass", "cluster": "cluster", "tournament": "tournament"}
    acc = {short: sum(r["correct"][r["winners"][rule]] for r in results) / len(results) for short, rule in rules.items()}
    oracle = sum(any(r["correct"][c] for c in r["candidates"]) for r in results) / len(results)
    random_pick = sum(sum(r["correct"][c] for c in r["candidates"]) / len(r["candidates"]) for r in results) / len(results)
    subtle = sum(1 for r in results for c in r["candidates"] if not r["correct"][c])
    if args.verbose:
        for r in results:
            marks = " ".join(f"{s}={r['winners'][rule]}{'+' if r['correct'][r['winners'][rule]] else '-'}"
                             for s, rule in rules.items())
            right = ",".join(c for c in r["candidates"] if r["correct"][c])
            print(f"task {r['index']:02d} {r['family']:<14} correct {right:<7} clusters {r['clusters']}  {marks}")
    print(f"tasks: {len(results)}; candidates passing the visible gate: {sum(len(r['candidates']) for r in results)}, "
          f"of which subtly wrong (fail the hidden tests): {subtle}")
    print(f"tournament matches: {sum(r['matches'] for r in results)}, "
          f"unanswered (ties broken by the next rule): {sum(r['judge_ties'] for r in results)}")
    print(f"selection_accuracy: first_pass={acc['first_pass']:.2f}, cluster={acc['cluster']:.2f}, "
          f"tournament={acc['tournament']:.2f}")
    print(f"first_pass_accuracy: {acc['first_pass']:.2f}")
    print(f"cluster_accuracy: {acc['cluster']:.2f}")
    print(f"tournament_accuracy: {acc['tournament']:.2f}")
    print(f"cluster_gain: {acc['cluster'] - acc['first_pass']:.2f}")
    print(f"oracle: {oracle:.2f}")
    print(f"random_pick: {random_pick:.2f}")
    print(f"elapsed_s: {time.perf_counter() - started:.1f}")
    met = acc["cluster"] > acc["first_pass"]
    print(f"target: cluster beats first_pass ({'met' if met else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
