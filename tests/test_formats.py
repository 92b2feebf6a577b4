"""Golden test of every format git-parallel writes to disk and to git.

One real run goes through the CLI (spawn 2, run a scripted agent in each,
check with a gate that passes one and fails the other and a score, pick,
merge, hooks install), and each format is captured: the run record, the live
index, the spawned marker, an evidence pack, the pick record, every note
line on ``refs/notes/parallel``, the trees of the evidence and run refs, the
archive ref names, the hook scripts' header, and ``status --json``.

What legitimately varies from run to run (run ids, oids, sha256s, times,
paths under the test's tmp folder, numbers such as durations and pids, the
version) is replaced by a placeholder naming its shape, and the replacement
asserts that shape (``<oid>`` only for 40 hex digits).  Keys, nesting, list
lengths, enums and note line kinds stay exact, so an added, removed or
renamed field fails here before it reaches a user's repository.

After an intended change of a format, regenerate the golden files with
``GIT_PARALLEL_UPDATE_GOLDEN=1 python -m pytest tests/test_formats.py`` and
review the diff of ``tests/golden/`` like code.
"""

from __future__ import annotations

import pytest

import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from conftest import GP, git, make_repo

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("GIT_PARALLEL_UPDATE_GOLDEN") == "1"
PY = sys.executable

AGENT = textwrap.dedent("""
    import pathlib, sys
    pathlib.Path("answer.txt").write_text(sys.argv[1] + "\\n")
""")
GATE = textwrap.dedent("""
    import pathlib, sys
    text = pathlib.Path("answer.txt").read_text() if pathlib.Path("answer.txt").exists() else ""
    print("answer", text.strip())
    sys.exit(0 if text.strip() == "42" else 1)
""")
SCORE = textwrap.dedent("""
    import pathlib
    print(len(pathlib.Path("answer.txt").read_text()) if pathlib.Path("answer.txt").exists() else 0)
""")

# Patterns for strings, most specific first.  Each names the shape it replaces.
PATTERNS = [
    (re.compile(r"PR-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<run_id>"),
    (re.compile(r"\b[0-9a-f]{64}\b"), "<sha256>"),
    (re.compile(r"\b[0-9a-f]{40}\b"), "<oid>"),
    (re.compile(r"(?<=-)[0-9a-f]{12}\b"), "<oid12>"),  # an abbreviated oid in a file name
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"git-parallel \d+\.\d+\.\d+"), "git-parallel <version>"),
    (re.compile(r"\b\d+\.\d+s\b"), "<seconds>"),
]


VOLATILE_INT = re.compile(r"pid|bytes|size|_ms$|duration|elapsed")


class Normalizer:
    """Replaces what varies between runs by named placeholders."""

    def __init__(self, tmp: Path) -> None:
        self.roots = sorted({str(tmp), os.path.realpath(tmp)}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for root in self.roots:
            value = value.replace(root, "<tmp>")
        value = value.replace(PY, "<python>")
        for pattern, placeholder in PATTERNS:
            value = pattern.sub(placeholder, value)
        return value

    def __call__(self, value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {self.text(str(k)): self(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            # Counts, revisions, attempts and versions are exact in this one
            # scripted run; process ids and sizes of logs are not.
            return "<int>" if VOLATILE_INT.search(key) else value
        if isinstance(value, float):
            return "<float>"  # durations, times in seconds
        if isinstance(value, str):
            return self.text(value)
        raise AssertionError(f"unexpected type {type(value).__name__} in a format: {value!r}")


def check_golden(name: str, value: Any) -> None:
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path.name}: run with GIT_PARALLEL_UPDATE_GOLDEN=1 and review it"
    assert json.loads(path.read_text()) == value, (
        f"the {name} format changed; if that is intended, regenerate with GIT_PARALLEL_UPDATE_GOLDEN=1 "
        f"and review the diff.\n--- now:\n{text}")


def note_lines(repo: Path, ref: str = "refs/notes/parallel") -> list[str]:
    lines: list[str] = []
    for row in git(repo, "notes", f"--ref={ref}", "list").splitlines():
        _, commit = row.split()
        lines += git(repo, "notes", f"--ref={ref}", "show", commit).splitlines()
    return lines


def tree_listing(repo: Path, ref: str) -> list[str]:
    return sorted(git(repo, "ls-tree", "-r", "--name-only", ref).splitlines())


def capture(tmp: Path) -> dict[str, Any]:
    """One merged run and every format captured along the way."""
    tools = tmp / "tools"
    tools.mkdir()
    for name, text in (("agent.py", AGENT), ("gate.py", GATE), ("score.py", SCORE)):
        (tools / name).write_text(text)
    config = textwrap.dedent(f"""
        gates:
          - name: answer
            run: [{PY}, {tools / 'gate.py'}]
        score:
          command: [{PY}, {tools / 'score.py'}]
          threshold: 1
    """)
    repo = make_repo(tmp / "repo", config=config)
    gp = GP(repo)
    gp("hooks", "install")
    gp("spawn", "t", "-n", "2")
    common = Path(git(repo, "rev-parse", "--git-common-dir"))
    common = common if common.is_absolute() else repo / common
    parallel = common / "parallel"
    captured: dict[str, Any] = {"tmp": tmp, "repo": repo, "parallel": parallel}
    captured["live"] = (parallel / "live").read_text()
    captured["spawned"] = sorted(p.name for p in (parallel / "spawned").iterdir())
    captured["spawned_text"] = [p.read_text() for p in sorted((parallel / "spawned").iterdir())]
    gp("run", "t", "--instance", "1", "--", PY, str(tools / "agent.py"), "42")
    gp("run", "t", "--instance", "2", "--", PY, str(tools / "agent.py"), "41")
    assert "FAIL answer" in gp("check", "t", code=1).stdout
    captured["record_checked"] = yaml.safe_load((parallel / "runs" / "t.yaml").read_text())
    run_id = captured["record_checked"]["run_id"]
    captured["packs"] = {p.name: json.loads(p.read_text())
                         for p in sorted((parallel / "evidence" / run_id).glob("*.json"))}
    gp("pick", "t")
    captured["picks"] = {p.name: json.loads(p.read_text()) for p in sorted((parallel / "picks" / run_id).glob("*.json"))}
    captured["merge"] = gp.json("merge", "t")
    captured["record_merged"] = yaml.safe_load((parallel / "runs" / "t.yaml").read_text())
    captured["live_merged"] = (parallel / "live").read_text()  # the loser stays guarded until prune
    captured["status"] = gp.json("status", "t")
    captured["notes"] = note_lines(repo)
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/parallel/").splitlines()
    captured["refs"] = sorted(refs)
    captured["evidence_trees"] = {r: tree_listing(repo, r) for r in refs if r.startswith("refs/parallel/evidence/")}
    captured["run_trees"] = {r: tree_listing(repo, r) for r in refs if r.startswith("refs/parallel/runs/")}
    hook = Path(git(repo, "rev-parse", "--git-path", "hooks/reference-transaction"))
    hook = hook if hook.is_absolute() else repo / hook
    captured["hook_head"] = hook.read_text().splitlines()[:3]
    return captured


@pytest.mark.unfenced("a pack names the layers that held, which differ from machine to machine")
def test_every_format_matches_its_golden_file(tmp_path: Path) -> None:
    run = capture(tmp_path)
    norm = Normalizer(tmp_path)
    assert len(run["packs"]) == 2  # one per instance's attempt
    records, human = [], []
    for line in run["notes"]:
        if line.startswith("{"):
            records.append(norm(json.loads(line)))
        else:
            human.append(norm.text(line))
    records.sort(key=lambda r: json.dumps(r, sort_keys=True))
    formats = {
        "record_checked": norm(run["record_checked"]),
        "record_merged": norm(run["record_merged"]),
        "live_index": norm(run["live"].splitlines()),
        "live_index_merged": norm(run["live_merged"].splitlines()),
        "spawned": norm({"names": run["spawned"], "texts": run["spawned_text"]}),
        "evidence_packs": norm(run["packs"]),
        "pick": norm(run["picks"]),
        "merge_json": norm(run["merge"]),
        "status_json": norm(run["status"]),
        "notes": {"records": records, "human": sorted(human)},
        "refs": norm({"refs": run["refs"], "evidence_trees": run["evidence_trees"], "run_trees": run["run_trees"]}),
        "hook_head": norm(run["hook_head"]),
    }
    changed = []
    for name, value in formats.items():
        try:
            check_golden(name, value)
        except AssertionError as exc:
            changed.append(str(exc))
    assert not changed, "\n\n".join(changed)


def test_the_normalizer_keeps_shapes_apart() -> None:
    # A placeholder stands for exactly one shape: a 40-hex oid is not a sha256,
    # a run id is not an oid, and keys and enums are left as they are.
    norm = Normalizer(Path("/nowhere"))
    assert norm.text("a" * 40) == "<oid>" and norm.text("a" * 64) == "<sha256>"
    assert norm.text("a" * 39) == "a" * 39 and norm.text("verify-main-0123456789ab.log") == "verify-main-<oid12>.log"
    assert norm({"status": "merged", "n": 3, "pid": 4711, "ok": True, "took": 0.25}) == {
        "status": "merged", "n": 3, "pid": "<int>", "ok": True, "took": "<float>"}
    assert norm.text("PR-0123abcd-0000-4000-8000-00000000abcd") == "<run_id>"
