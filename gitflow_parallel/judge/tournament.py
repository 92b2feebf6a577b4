"""The tournament's judge: one match between two candidates.

The judge is any program (an LLM CLI, a script) named by ``judge.command``
in the frozen configuration.  For a match it gets two folders,
``GIT_PARALLEL_JUDGE_A`` and ``GIT_PARALLEL_JUDGE_B``, each holding one
candidate as plain files:

* ``instance``, ``commit``: its id and the commit judged;
* ``worktree``: the path of its worktree (the judge may read it; nothing
  here reads it, since an agent can change a worktree at any time);
* ``diff``: the patch from the base commit to that commit, made from git
  objects;
* ``evidence.json``: its evidence pack, byte for byte.

The judge runs like a gate (``place.execute``: its own process group, stdin
closed, ``judge.timeout``, its whole group killed past it), in the main
worktree (so ``[python, tools/judge.py]`` finds the repository's script, as
a git alias would), with ``GIT_PARALLEL_TASK``, ``_RUN_ID``, ``_BASE`` and
``_TRACK`` besides.  The two folders are in a scratch folder, removed after
the match.  It answers on its **last non-empty
stdout line**: ``A`` or ``B``.  Anything else - a non-zero exit, a crash, a
hang past its timeout, a last line that is neither - is no answer, and the
caller breaks the tie by its next rule; the pick never waits on or fails for
a judge.  Its stdout and stderr are kept in
``<common>/parallel/logs/<run_id>/judge-<track>-<round>.<a>-<b>.log`` (and
``…-stderr.log``), and the match record says what it answered.

Who wins a match is the caller's business (``judge/selection``): the judge only
ever sees candidates that passed every enforced gate.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from gitflow_parallel.files import read_tail, remove_tree, sha256_file
from gitflow_parallel.git import judged_view
from gitflow_parallel.judge import stores
from gitflow_parallel.model import RunRecord
from gitflow_parallel.shapes.records import Candidate, JudgeRun
from gitflow_parallel.judge.place import execute, gate_env
from gitflow_parallel.proc import sandbox
from gitflow_parallel.state.project import Project

ANSWERS = ("A", "B")
# How much of the judge's stdout the pick record keeps (the log keeps all).
OUTPUT_TAIL = 2000


def _write_side(folder: Path, project: Project, base: str, cand: Candidate) -> None:
    folder.mkdir()
    (folder / "instance").write_text(cand["id"] + "\n", encoding="utf-8")
    (folder / "commit").write_text(cand["commit"] + "\n", encoding="utf-8")
    (folder / "worktree").write_text(str(cand["worktree"]) + "\n", encoding="utf-8", errors="surrogateescape")
    (folder / "diff").write_bytes(project.repo.diff_bytes(base, cand["commit"]))
    shutil.copyfile(cand["evidence_path"], folder / "evidence.json")


def answer_of(stdout: bytes) -> str | None:
    """``A`` or ``B`` from the last non-empty line, else None."""
    lines = [l.strip() for l in stdout.decode("utf-8", "replace").splitlines() if l.strip()]
    return lines[-1] if lines and lines[-1] in ANSWERS else None


def match(project: Project, record: RunRecord, track: str, round_no: int,
          a: Candidate, b: Candidate) -> JudgeRun:
    """Run the judge on ``a`` against ``b``.  Returns what it did:
    {answer ("A", "B" or None), exit_code, error, duration_s, log,
    log_sha256, stderr_log, output (the tail of its stdout)}."""
    cfg = record["config"]["judge"]
    logs = project.repo.parallel_dir / "logs" / record["run_id"]
    name = f"judge-{track}-{round_no}.{a['id']}-{b['id']}"
    log, err_log = logs / f"{name}.log", logs / f"{name}-stderr.log"
    scratch = Path(tempfile.mkdtemp(prefix="git-parallel-judge-", dir=sandbox.tmp_root()))  # out of every sandbox's sight
    plan: sandbox.GatePlan | None = None
    try:
        base = record["base"]["commit"]
        _write_side(scratch / "A", project, base, a)
        _write_side(scratch / "B", project, base, b)
        env = gate_env({}, {"TASK": record["task"], "RUN_ID": record["run_id"], "BASE": base, "TRACK": track,
                            "JUDGE_A": str(scratch / "A"), "JUDGE_B": str(scratch / "B")})
        cwd = project.repo.main_workdir or scratch
        # Fenced like a gate: it writes only its two sides' folder (and a
        # TMPDIR), and reads no instance's worktree - what it judges is
        # laid out for it from the objects.
        plan = sandbox.GatePlan(project.repo.common_dir, None, scratch, record["config"], sandbox.siblings(record),
                                unseen=stores.unseen(record["config"]))
        if plan.overlaid:  # its git sees the history alone (git/judged_view): the sides are laid out above
            plan.git_view = judged_view.make(project.repo.common_dir, project.repo.parallel_dir, None)
        command = cfg["command"]
        assert command is not None  # config.validate refuses selection: tournament without one
        code, error, seconds = execute(list(command), cwd, env, float(cfg["timeout"]), log, err_log, plan)
    finally:
        remove_tree(scratch, ignore_errors=True)
        if plan is not None and plan.git_view is not None:
            plan.git_view.remove()
    try:  # the judge runs the attempts' code: its output is read from its end, capped
        stdout = read_tail(log)[0]
    except OSError:
        stdout = b""
    answer = answer_of(stdout) if error is None and code == 0 else None
    if error is None and code != 0:
        error = f"the judge exited {code}"
    elif error is None and answer is None:
        last = [l for l in stdout.decode("utf-8", "replace").splitlines() if l.strip()]
        error = (f"its last line {last[-1].strip()[:80]!r} is neither A nor B" if last
                 else "the judge printed nothing")
    return {"answer": answer, "exit_code": code, "error": error, "duration_s": round(seconds, 3),
            "log": str(log), "log_sha256": sha256_file(log) if log.is_file() else None, "stderr_log": str(err_log),
            "output": stdout.decode("utf-8", "replace")[-OUTPUT_TAIL:]}
