"""Pull requests for ``merge --pr``: the host tool (gh or glab) for a remote,
the title and the evidence-summary body, the command that opens it."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any


from gitflow_parallel.state import share
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.model import InstanceRecord, PickRecord, RunRecord


# -- --pr: propose the winner instead of landing it -------------------------------------------
def pr_tool(repo: Repo, remote: str) -> tuple[str, str | None]:
    """``gh`` or ``glab`` (by the remote's host, then by what is on PATH), and its path if found."""
    url = repo.run_git(["remote", "get-url", remote], check=False).stdout.decode(errors="replace")
    order = ["glab", "gh"] if "gitlab" in url.lower() else ["gh", "glab"]
    for name in order:
        found = shutil.which(name)
        if found:
            return name, found
    return order[0], None


def pr_title(record: RunRecord, pick: PickRecord, inst: InstanceRecord) -> str:
    where = "" if record["tracks"] == ["main"] else f" (track {pick['track']})"
    return f"git-parallel: {record['task']}{where}, winner {inst['id']} of run {record['run_id']}"


def pr_body(record: RunRecord, pick: PickRecord, inst: InstanceRecord, pack: dict[str, Any] | None,
            remote: str) -> str:
    """The evidence summary a reviewer reads: the run, the winner and why,
    each gate's verdict and duration, the score, where the evidence is."""
    w, run_id = pick["winner"], record["run_id"]
    size = sum(1 for i in record["instances"] if i["track"] == pick["track"])
    why = pick["selection_method"] + (f" ({pick['reason']})" if pick.get("reason") else "")
    score = "unavailable" if pick.get("score") is None else str(pick["score"])
    ref = share.evidence_ref(run_id, w["id"], w["attempt"])
    lines = [f"## git-parallel: {record['task']}", "",
             f"- Run: `{run_id}`",
             f"- Track: `{pick['track']}`, {size} attempt(s)",
             f"- Winner: instance `{w['id']}` (`{inst['branch']}` at `{w['commit']}`, attempt {w['attempt']})",
             f"- Why: {why}",
             f"- Score: {score}",
             f"- Verdict: {(pack or {}).get('verdict') or 'unknown'}",
             "", "| gate | mode | verdict | duration |", "|---|---|---|---|"]
    for g in (pack or {}).get("gates") or []:
        took = "" if g.get("duration_s") is None else f"{float(g['duration_s']):.2f}s"
        lines.append(f"| {g.get('name')} | {g.get('mode')} | {'pass' if g.get('passed') else 'fail'} | {took} |")
    lines += ["", "Evidence (pushed with this branch):", "",
              f"- `{ref}` (the pack and the gate logs)",
              f"- `{share.run_ref(run_id)}` (the run record and the pick)",
              f"- `{record['config']['notes_ref']}` (`git notes --ref={record['config']['notes_ref'][len('refs/notes/'):]}"
              f" show {w['commit'][:12]}`)",
              "", f"Read them with `git parallel fetch {remote}` and `git parallel show {record['task']}`.", ""]
    return "\n".join(lines)


def pr_command(tool: str, base: str, branch: str, title: str, body_file: Path) -> tuple[list[str], str]:
    """(argv to run, the command as a person would type it)."""
    if tool == "glab":
        argv = ["glab", "mr", "create", "--target-branch", base, "--source-branch", branch, "--title", title,
                "--description", body_file.read_text(), "--yes"]
        shown = shlex.join(argv[:-3]) + f' --description "$(cat {shlex.quote(str(body_file))})" --yes'
        return argv, shown
    argv = ["gh", "pr", "create", "--base", base, "--head", branch, "--title", title, "--body-file", str(body_file)]
    return argv, shlex.join(argv)


def run_tool(argv: list[str], repo: Repo) -> dict[str, Any]:
    """Run ``gh``/``glab`` (an argument list, no shell) where the repository is."""
    cwd = repo.main_workdir or Path.cwd()
    try:
        proc = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"}
    urls = [w for w in proc.stdout.split() if w.startswith(("https://", "http://"))]
    return {"url": urls[-1] if urls else None, "output": proc.stdout.strip()}
