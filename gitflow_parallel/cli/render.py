"""How results read as text: one function per verb's result (``--json``
prints the result itself, so nothing here decides anything)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from gitflow_parallel import errors as E
from gitflow_parallel.cli.verb import echo
from gitflow_parallel.evidence import layers_line, tampered_while_judged
from gitflow_parallel.provenance import protected_summary

if TYPE_CHECKING:
    from gitflow_parallel.commands.merge import PrResult
    from gitflow_parallel.commands.recover import Recovered
    from gitflow_parallel.commands.validate import Validated
    from gitflow_parallel.commands.worker import Worked
    from gitflow_parallel.commands.hooks_install import HookInstalled, HookRemoved, HooksInstalled, HooksRemoved, HooksStatus
    from gitflow_parallel.state.remote_landing import PushResult
    from gitflow_parallel.judge.pace import GateProgress
    from gitflow_parallel.flows import Rounds
    from gitflow_parallel.shapes.records import Differential
    from gitflow_parallel.shapes.pack import GateResult, ReachFinding
    from gitflow_parallel.shapes.results import CheckResult, PublishResult, StatusDetail, StatusListResult

FAILING_SHOWN = 20  # failing tests named per gate by `show`


def render_published(p: PublishResult) -> None:
    echo(f"published run {p['run_id']} to {p['remote']}: manifest {p['ref']} at {p['manifest'][:12]}, "
         f"{len(p['branches'])} branch(es) pushed")
    if p["agent"]:
        echo(f"  agent: {' '.join(p['agent'])}")
    for inst_id in p["kept_remote"]:
        echo(f"  {inst_id}: the remote's branch holds a worker's work; left as it is")


# -- status -------------------------------------------------------------------------
def short(v: object, n: int = 12) -> str:
    return "-" if v is None else str(v)[:n]


def render_runs(r: StatusListResult) -> None:
    if not r["runs"] and not r["problems"]:
        echo("no runs (start one with `git parallel spawn TASK`)")
    for run in r["runs"]:
        noun = "instance" if run["instances"] == 1 else "instances"
        echo(f"{run['task']:<24} {run['status']:<10} {run['instances']:>3} {noun:<9}  "
             f"{run['base']:<24} {run['run_id']}" + ("  (fetched)" if run.get("fetched") else ""))
    for p in r["problems"]:
        echo(f"error[{p['code']}]: {p['message']}")


def render_status(r: StatusDetail) -> None:
    run = r["run"]
    echo(f"task {run['task']}  run {run['run_id']}  status {run['status']}  revision {run['run_revision']}")
    if r.get("shared"):
        echo(f"(fetched: read from {r['shared']}; its worktrees and branches are on another machine)")
    tip = r.get("base_tip")
    now = ("now gone" if tip is None else "still there" if tip == run["base"]["commit"] else f"now at {tip[:12]}")
    echo(f"base {run['base']['ref']}: spawned at {run['base']['commit'][:12]}, {now}")
    m = run.get("merge")
    if m:
        echo(f"landed {m['method']} at {m['landed'][:12]} on {m['merged_at']}")
    header: tuple[str, ...] = ("ID", "TRACK", "STATUS", "ATT", "HEAD", "VERDICT", "SCORE", "EVIDENCE", "BRANCH",
                               "WORKTREE")
    mixed = any(row.get("agent") for row in r["rows"])  # the AGENT column only when agents were named
    header = header[:2] + ("AGENT",) + header[2:] if mixed else header
    rows = [header]
    for row in r["rows"]:
        status = row["status"] + (f" ({', '.join(row['flags'])})" if row["flags"] else "")
        cells = (row["id"], row["track"], status, str(row["attempt"]), short(row["tip"] or row["head"]),
                 row["verdict"] or "-", "-" if row["score"] is None else str(row["score"]),
                 row["evidence_state"], row["branch"], "(removed)" if row.get("removed") else row["worktree"])
        rows.append(cells[:2] + (row.get("agent") or "-",) + cells[2:] if mixed else cells)
    widths = [max(len(x[i]) for x in rows) for i in range(len(header))]
    for x in rows:
        echo("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())


# -- pick / merge ------------------------------------------------------------------------
def figures_text(f: Mapping[str, object]) -> str:
    score = "unavailable" if f["score"] is None else f["score"]
    size = f", group of {f['group_size']}" if "group_size" in f else ""
    proved = "added tests prove the fix, " if f.get("proved") else ""
    return f"{f['id']} ({proved}score {score}, {f['changed_lines']} changed lines{size})"


def render_push(p: PushResult | None) -> None:
    if not p:
        return
    base = p["base_ref"][len("refs/heads/"):]
    for again in p["relanded"]:
        echo(f"  {p['remote']} had moved to {again['remote_tip'][:12]}: landed again onto it "
             f"(was {again['landed'][:12]})")
    if p["up_to_date"]:
        echo(f"{p['remote']} is up to date: {base} there has {p['landed'][:12]}")
        return
    where = f"{base} at {p['landed'][:12]}" if p["moved_base"] else f"{base} untouched (it has {p['landed'][:12]})"
    echo(f"pushed to {p['remote']}: {where}, {len(p['refs'])} ref(s) in one atomic push"
         + (f" after {p['attempts']} attempts" if p["attempts"] > 1 else ""))
    for name in p["kept_remote"]:
        echo(f"  kept {p['remote']}'s (ahead of yours): {name}")


def render_pr(r: PrResult) -> None:
    echo(f"pushed to {r['remote']}: {len(r['push']['refs'])} ref(s) in one atomic push")
    if not r["push"]["base_on_remote"]:
        echo(f"warning: {r['remote']} has no {r['base']} branch to propose against", err=True)
    for p in r["proposals"]:
        if p["ran"]:
            echo(f"{p['tool']}: requested {p['branch']} -> {r['base']}" + (f": {p['url']}" if p["url"] else ""))
        else:
            echo(f"no {p['tool']} on PATH; to request {p['branch']} -> {r['base']}, run:")
            echo(f"  {p['command']}")
        echo(f"body: {p['body_file']}")
    echo("the base did not move; the run stays picked (`git parallel merge` lands it)")


# -- review: diff / show / logs / report ------------------------------------------------
def table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    for x in rows:
        echo("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())


def cell(change: Mapping[str, object] | None) -> str:
    if change is None:
        return "."
    if change["binary"]:
        return f"{change['status']} bin"
    return f"{change['status']} +{change['added']} -{change['removed']}"


def render_diff(r: Mapping[str, Any]) -> None:
    if r["mode"] == "between":
        a, b = r["attempts"]
        echo(f"{r['task']}: {a['id']} ({short(a['commit'])}) -> {b['id']} ({short(b['commit'])})")
        if r["stat"]:
            table([("FILE", "CHANGE")] + [(f["path"], cell(f)) for f in r["files"]]
                   + [("total", f"+{r['added']} -{r['removed']}")])
        else:
            echo(r["patch"], nl=False)
        return
    echo(f"{r['task']}: each attempt against the base {r['base']['ref']} at {r['base']['commit'][:12]}")
    if r["stat"]:
        header = ("FILE",) + tuple(a["id"] for a in r["attempts"])
        rows = [header] + [(f["path"],) + tuple(cell(f["attempts"][a["id"]]) for a in r["attempts"])
                           for f in r["files"]]
        rows.append(("files",) + tuple(str(len(a["files"])) for a in r["attempts"]))
        rows.append(("lines",) + tuple("(no commit)" if a["missing"] else f"+{a['added']} -{a['removed']}"
                                       for a in r["attempts"]))
        table(rows)
        return
    for a in r["attempts"]:
        echo(f"=== {a['id']} (attempt {a['attempt']}, {a['status']}) at {short(a['commit'])}: "
             f"{len(a['files'])} file(s), +{a['added']} -{a['removed']}")
        if a["missing"]:
            echo("(its commit is not in this repository)")
        else:
            echo(a["patch"], nl=False)


def render_show(r: Mapping[str, Any]) -> None:
    i = r["instance"]
    echo(f"{r['task']} instance {i['id']} (track {i['track']}, attempt {i['attempt']}"
         + (f", agent {i['agent']}" if i.get("agent") else "") + f"): {i['status']}"
         + (f", {i['error']}" if i["error"] else ""))
    echo(f"run {r['run_id']} ({r['run_status']})" + ("  [fetched]" if r["shared"] else ""))
    echo(f"commit {short(r['commit'], 40)}  branch {i['branch']}")
    layers = layers_line(r["sandbox"]) if r.get("sandbox") else None
    if layers:
        echo(layers)
    render_tampering(i, r["gates"])
    ev = r["evidence"]
    p = r["pack"]
    if p is None:
        echo(f"evidence: {ev['state']} ({ev['reason']})")
    else:
        score = "unavailable" if p["score"] is None else str(p["score"])
        echo(f"evidence: {ev['state']}, verdict {p['verdict']}{'' if p['complete'] else ' (incomplete)'}, "
             f"score {score}, proof {p['proof_issued_at']}")
        if p["score_error"]:
            echo(f"  score unavailable: {p['score_error']}")
        if p.get("protected_detail"):
            echo("  protected paths it changed (judged with the base's version):")
            render_protected(p["protected_detail"], "    ")
        render_reaches(p.get("reaches_harness") or [], "  ")
        render_added(p.get("added_tests"), "  ")
    for g in r["gates"]:
        mark = "skip" if g["skipped"] else ("pass" if g["passed"] else "FAIL")
        what = g["error"] if g["skipped"] or g["exit_code"] is None else f"exit {g['exit_code']} in {g['duration_s']:.2f}s"
        echo(f"  {mark:<4} {g['name']:<16} {g['mode']:<8} {what}{hidden_counts(g)}")
        if _said_past_exit(g):
            echo(f"       {g['error']}")
        for name in (g.get("failing") or [])[:FAILING_SHOWN]:
            echo(f"       failed: {name}")
        if len(g.get("failing") or []) > FAILING_SHOWN:
            echo(f"       … and {len(g['failing']) - FAILING_SHOWN} more failing (`git parallel logs`)")
        for line in g["tail"]:
            echo(f"       | {line}")
    agent = r.get("agent") or {}
    if i["status"] in ("failed", "aborted") and agent.get("tail"):
        echo(f"  agent log ({agent['log_source']}), last lines:")
        for line in agent["tail"]:
            echo(f"       | {line}")
    code = r["outcome"].get("code")
    echo(f"outcome: {r['outcome']['why']}" + (f" [{code}]" if code else ""))
    render_differential(r.get("differential"), "  ", only=i["id"])
    if r["landed"]:
        echo(f"landed at {r['landed'][:12]}")
    for c in r.get("comments") or []:
        where = f"{c['file']}" + (f":{c['line']}" if c["line"] else "") + ": " if c["file"] else ""
        echo(f"comment on attempt {c['attempt']} by {c['by']}: {where}{c['text']}")
    for h in r["history"]:
        echo(f"earlier attempt {h['attempt']}: {h['status']}" + (f" ({h['error']})" if h.get("error") else "")
             + f", verdict {h['verdict'] or '-'}" + (f", kept at {h['archive_ref']}" if h.get("archive_ref") else ""))


def render_tampering(inst: dict[str, Any], gates: list[dict[str, Any]]) -> None:
    """What the attempt changed that no attempt may: while its agent ran,
    and while its code ran under a gate (both restored)."""
    if inst.get("tampered"):
        echo(f"tampered: it changed {', '.join(inst['tampered'])}, which no attempt may change "
             f"(restored) [{E.AGENT_TAMPERED}]")
    during = tampered_while_judged({"gates": gates})
    if during:
        echo(f"tampered: {during} [{E.AGENT_TAMPERED}]")


def _said_past_exit(gate: GateResult) -> bool:
    """Did a gate that exited fail for a reason its exit status does not
    show (its test report, a hidden gate's missing count)?"""
    return bool(not gate["passed"] and not gate["skipped"] and gate.get("error") and gate["exit_code"] is not None)


def render_differential(ran: Differential | None, indent: str, only: str | None = None) -> None:
    """What a differential pick ran: the generator, the stored inputs, and
    each candidate's behaviour on them (``only``: one candidate's)."""
    if not ran:
        return
    if ran["status"] == "not_run":
        echo(f"{indent}distinguish: not run ({ran.get('reason')})")
        return
    fallback = ran.get("fallback")
    if fallback:
        echo(f"{indent}distinguish fell back to {fallback['rule']}: error[{fallback['code']}]: {fallback['error']}")
    inputs = ran.get("inputs")
    if inputs:
        echo(f"{indent}distinguishing inputs: {len(inputs['files'])} file(s) in {inputs['path']} "
             f"(sha256 {inputs['sha256'][:16]})")
    for i, o in (ran.get("outputs") or {}).items():
        if only is None or i == only:
            said = f"exit {o['exit_code']}, stdout sha256 {o['sha256'][:16]}" if o["sha256"] else f"no output: {o['error']}"
            echo(f"{indent}  {i}: {said}; {o['log']}")


def render_added(added: Mapping[str, Any] | None, indent: str) -> None:
    """How the tests an attempt added did on it and on the base (``judge/proof``)."""
    if not added:
        return
    said = "pass" if added["passed"] else "FAIL"
    echo(f"{indent}added tests ({added['mode']}): {said} on it" + (f"; {added['proof']}" if added.get("proof") else ""))


def render_protected(changes: list[dict[str, Any]], indent: str, limit: int = 20) -> None:
    """Each protected change, and whether it keeps the attempt out of an automatic pick."""
    from gitflow_parallel.git.protected import blocks_pick  # only where there are changes to show: it is heavy

    for change, line in list(zip(changes, protected_summary(changes)))[:limit]:
        echo(f"{indent}{line}" + ("  (blocks an automatic pick)" if blocks_pick(change) else
                                  "  (a new test: run as added tests)" if change["change"] == "added" else
                                  f"  (tests only added: {', '.join(change['appended'][:5])}; run as added tests)"))
    if len(changes) > limit:
        echo(f"{indent}… and {len(changes) - limit} more")


def render_reaches(findings: list[ReachFinding], indent: str, limit: int = 20) -> None:
    """The lines of its product code that reach the test harness (``reach``)."""
    if not findings:
        return
    from gitflow_parallel.reach import summary  # only where there are findings to show

    echo(f"{indent}its code reaches the test harness (blocks an automatic pick, {E.REACHES_HARNESS}):")
    for line in summary(findings[:limit]):
        echo(f"{indent}  {line}")
    if len(findings) > limit:
        echo(f"{indent}  … and {len(findings) - limit} more")


def hidden_counts(g: GateResult) -> str:
    """A hidden-tests gate's counts: the one part of its output that is kept."""
    hidden = g.get("hidden")
    if not hidden or g.get("skipped"):
        return ""
    return f"; hidden tests: {hidden.get('summary') or 'no test counts in its output'} (output not kept)"


# -- check --------------------------------------------------------------------------
def render_check(r: CheckResult) -> None:
    echo(f"check of {r['task']}  run {r['run_id']}")
    for inst in r["instances"]:
        state = inst["verdict"] + ("" if inst["complete"] else " (incomplete: not every gate ran)")
        score = "-" if inst["score"] is None else str(inst["score"])
        echo(f"  {inst['id']:<10} {state:<6} score {score:<3} commit {inst['commit'][:12]}  "
             f"evidence {inst['evidence']['path']}")
        if inst["score_error"]:
            echo(f"    score unavailable: {inst['score_error']}")
        refused = inst["refused"]
        if refused:
            echo(f"    [{refused['code']}] {refused['message']}; no gate ran")
        elif inst.get("protected_changes"):
            echo("    judged with the base's version of the protected path(s) it changed:")
            render_protected(inst.get("protected_detail") or [], "      ")
        render_reaches(inst.get("reaches_harness") or [], "    ")
        render_added(inst.get("added_tests"), "    ")
        if not inst.get("refused") and not any(g["mode"] == "enforced" for g in inst["gates"]):
            echo("    no enforced gate applies to this track: the verdict proves only which commit was seen")
        for g in inst["gates"]:
            mark = "skip" if g["skipped"] else ("pass" if g["passed"] else "FAIL")
            what = (str(g["error"]) if g["skipped"] or g["exit_code"] is None
                    else f"exit {g['exit_code']} in {g['duration_s']:.2f}s")
            code = f"[{g['code']}] " if g["code"] else ""
            if g.get("signature") and not g["skipped"]:
                # A probe neither passes nor fails: it says how the attempt behaves.
                mark = "seen"
                sig = g["signature"]
                what += f", {sig['over']} sha256 {(sig['sha256'] or 'none')[:12]}"
            echo(f"    {mark:<4} {g['name']:<16} {g['mode']:<8} {code}{what}{hidden_counts(g)}")
            if _said_past_exit(g):
                echo(f"         {g['error']}")
            if g["log"] and not g["passed"] and g["mode"] != "probe":
                echo(f"         log: {g['log']}")
    skipped = r.get("skipped") or []
    for fresh in skipped:
        refusal = fresh["refused"]
        hidden = fresh.get("hidden") or {}
        failing = [f"{n} (hidden tests: {hidden[n]})" if n in hidden else n for n in fresh["failing"] or []]
        why = (f"; [{refusal['code']}]" if refusal
               else f"; failed {', '.join(failing)}" if failing else "")
        echo(f"  {fresh['id']:<10} {fresh['verdict']:<6} skipped: its evidence is fresh (commit "
             f"{fresh['commit'][:12]}{why}; {fresh['evidence']['path']})")
    if skipped:
        echo(f"skipped {len(skipped)} instance(s) whose branch did not move since their check; "
             f"`git parallel check {r['task']} --again` checks them again")
    for err in r["errors"]:
        echo(f"error[{err['code']}]: instance {err['id']}: {err['message']}", err=True)
        if err["hint"]:
            echo(f"hint: {err['hint']}", err=True)


# -- run ----------------------------------------------------------------------------
class ProgressLine:
    """A live progress line, on a terminal only: one line redrawn in place
    with a carriage return; cleared before the summary is printed."""

    def __init__(self) -> None:
        self.shown = ""

    def show(self, text: str) -> None:
        if text != self.shown:
            echo("\r" + text + "\x1b[K", nl=False, err=True)
            self.shown = text

    def clear(self) -> None:
        if self.shown:
            echo("\r\x1b[K", nl=False, err=True)
            self.shown = ""


class RunProgress(ProgressLine):
    """``run``'s progress line: the attempts running, done, failed and queued."""

    def __call__(self, s: Mapping[str, Any]) -> None:
        text = (f"{s['task']}: {s['running']} running, {s['succeeded']} done, {s['failed']} failed, "
                f"{s['queued']} queued, {s['elapsed_s']:.1f}s")
        if s["stopping"]:
            text += f" (stopping on {s['stopping']})"
        elif s["waiting_for_slot"]:
            text += f" (waiting for a free slot; max_total {s['max_total']})"
        self.show(text)


class RunWaitNotice:
    """Off a terminal: no progress line, but say once that the run is
    waiting for slots other runs hold, so a silent pause has a reason."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, s: Mapping[str, Any]) -> None:
        if s["waiting_for_slot"] and not self.said:
            echo(f"git parallel run: waiting for a free slot (max_total {s['max_total']} instances "
                 "run at once in this repository)", err=True)
            self.said = True


def _gate_outcome(s: GateProgress) -> str:
    if s["exit_code"] is None:
        return f"FAIL ({s['error']})" if s["error"] else "FAIL"
    word = "pass" if s["passed"] else f"FAIL (exit {s['exit_code']})"
    return f"{word} in {s['duration_s']:.2f}s"


class CheckLines:
    """Off a terminal (a log, CI): one line per finished gate, so a long
    check is never silent and its log says what ended when."""

    def __call__(self, s: GateProgress) -> None:
        if s["event"] == "finished":
            echo(f"check {s['task']}: instance {s['instance']} gate {s['gate']} {_gate_outcome(s)}"
                 f" [{s['finished']} finished, {len(s['running'])} running, {s['elapsed_s']:.1f}s]",
                 err=True)


@contextmanager
def check_progress(as_json: bool) -> Iterator[CheckProgress | CheckLines]:
    """The progress line on a terminal (cleared at the end), else the lines."""
    live = sys.stderr.isatty() and not as_json
    progress = CheckProgress() if live else CheckLines()
    try:
        yield progress
    finally:
        if isinstance(progress, CheckProgress):
            progress.clear()


class CheckProgress(ProgressLine):
    """On a terminal: one line redrawn in place, with the gates running now
    and those waiting for a core; cleared before the summary."""

    def __call__(self, s: GateProgress) -> None:
        running = ", ".join(s["running"]) or "nothing"
        text = f"check {s['task']}: {s['finished']} gates finished, running {running}"
        if s["waiting"]:
            text += f"; {s['waiting']} waiting for a core ({s['cores']} in use at most)"
        self.show(f"{text}, {s['elapsed_s']:.1f}s")


def render_run(r: Mapping[str, Any]) -> None:
    c = r["counts"]
    head = f"run {r['run_id']} of {r['task']}: {c['succeeded']} succeeded, {c['failed']} failed"
    if c["aborted"]:
        head += f", {c['aborted']} aborted"
    echo(f"{head} ({r['elapsed_s']:.1f}s)")
    for p in r.get("profiles") or []:
        given = ", ".join(f"{k}={v}" for k, v in p["env"].items())
        echo(f"agent profile {p['name']}: may write {', '.join(p['writes'])}" + (f"; {given}" if given else ""))
    header = ("ID", "STATUS", "EXIT", "TIME", "HEAD", "LOG")
    rows = [header]
    for row in r["instances"]:
        status = row["status"] + (" (no change)" if row.get("outcome") == "no_change" else "")
        rows.append((row["id"] + (f" ({row['agent']})" if row.get("agent") else ""), status,
                     short(row["exit_code"]),
                     "-" if row["duration_s"] is None else f"{row['duration_s']:.1f}s", short(row["head"]),
                     row["log"] or "-"))
    widths = [max(len(x[i]) for x in rows) for i in range(len(header))]
    for x in rows:
        echo("  ".join(col.ljust(w) for col, w in zip(x, widths)).rstrip())
    for row in r["instances"]:
        if row["error"]:
            echo(f"  {row['id']}: {row['error']}")
    if r["interrupted"]:
        echo(f"stopped on {r['interrupted']}: running commands were stopped and marked aborted")
    if r["notes_error"]:
        echo(f"warning: the notes were not written ({r['notes_error']}); "
             f"`git parallel recover {r['task']}` writes missing notes", err=True)
    bad = [row["id"] for row in r["instances"] if row["status"] in ("failed", "aborted")]
    if bad:
        echo(f"next: read the logs; `git parallel retry {r['task']} ID` starts a new attempt "
             f"(failed or aborted: {', '.join(bad)})")
    elif all(row["status"] == "succeeded" for row in r["instances"]):
        idle = [row["id"] for row in r["instances"] if row.get("outcome") == "no_change"]
        if idle:
            echo(f"no change: {', '.join(idle)} exited 0 having changed nothing, so can never win; read the logs "
                 f"(`git parallel logs {r['task']} ID`), then retry")
        echo(f"next: git parallel check {r['task']}")


def render_rounds(r: Rounds) -> None:
    for step in r["rounds"]:
        run = step["run"]
        c = run["counts"]
        checked = step["check"]
        verdicts = {i["id"]: i["verdict"] for i in checked["instances"]} if checked else {}
        cells = [f"{row['id']}:{row['status']}" + (f"/{verdicts[row['id']]}" if row["id"] in verdicts else "")
                 for row in run["instances"]]
        echo(f"round {step['round']}: {c['succeeded']} succeeded, {c['failed']} failed  ({', '.join(cells)})")
        for err in checked["errors"] if checked else []:
            echo(f"  check of {err['id']}: error[{err['code']}]: {err['message']}")
        if step["retried"]:
            echo(f"  retried with feedback: {', '.join(step['retried'])}")
    if r["ok"]:
        echo(f"passed after {len(r['rounds'])} round(s): {', '.join(r['passed'])}")
        echo(f"next: git parallel pick {r['task']}")
    else:
        left = sorted(set(r["tracks"]) - set(r["tracks_passed"]))
        echo(f"no passing attempt for track(s) {', '.join(left)} after {len(r['rounds'])} round(s)")
        echo(f"next: read the feedback and logs (`git parallel status {r['task']}`); retry by hand or spawn anew")


def render_worker(r: Worked) -> None:
    rows = r["instances"]
    echo(f"worker {r['worker']} on {r['remote']}: {r['delivered']} of {len(rows)} instance(s) delivered "
         f"({r['stopped']})")
    for row in rows:
        what = ("delivered" if row.get("delivered") else "lost its claim" if row.get("lost")
                else "released" if row.get("released") else "not delivered")
        extra = f", verdict {row['verdict']}" if row.get("verdict") else ""
        took = f"; took over from {row['takeover']['worker']}" if row.get("takeover") else ""
        echo(f"  {row['task']}/{row['id']} attempt {row['attempt']}: {row.get('status')}{extra}, {what}{took}")
        if row.get("error"):
            echo(f"    {row['error']}")


def _hooks_dir(r: HooksInstalled | HooksRemoved | HooksStatus) -> None:
    core = r.get("core_hooks_path")
    echo(f"hooks dir: {r['hooks_dir']}" + (f" (core.hooksPath {core})" if core else ""))


def _hook_done(h: HookInstalled | HookRemoved) -> None:
    extra = (f"; the existing hook runs first as {Path(str(h.get('legacy'))).name}"
             if h.get("kept_foreign") else "")
    extra += "; dropped its stale copy kept before" if h.get("dropped_stale_legacy") else ""
    extra += f"; {h.get('run_by')} runs it first" if h.get("run_by") else ""
    echo(f"  {h['name']:<22} {h['action']}{extra}")


def render_hooks_done(r: HooksInstalled | HooksRemoved) -> None:
    """``hooks install`` and ``uninstall``: what became of each hook."""
    _hooks_dir(r)
    for h in r["hooks"]:
        _hook_done(h)


def render_hooks(r: HooksStatus) -> None:
    """``hooks status``: each hook, and whether git runs ours."""
    _hooks_dir(r)
    for h in r["hooks"]:
        where = "" if h["state"] == "absent" else f" at {h['path']}"
        where += f" ({h['manager']}'s)" if h.get("manager") else ""
        extra = f"; chained: {Path(h['legacy']).name}" if h["legacy"] else ""
        extra += "; runs ours first" if h["state"] == "foreign" and h.get("runs_ours") else ""
        if h["state"] == "ours" and not h.get("python_exists"):
            extra += f"; warning: its Python {h.get('python')} is gone (git-parallel on PATH is used, if any)"
        elif h["state"] == "ours" and not h.get("current"):
            extra += "; outdated (`git parallel hooks install` rewrites it)"
        echo(f"  {h['name']:<22} {h['state']}{where}{extra}")
    if r["gone"]:
        echo(f"warning: {r['gone']}", err=True)
    runs = ", ".join(r["live_runs"]) or "none"
    echo(f"live runs: {runs}")


# -- recover / validate -------------------------------------------------------------------
def finding_line(f: Mapping[str, object]) -> str:
    where = f"{f['task']}" + (f"/{f['instance']}" if f.get("instance") else "") if f.get("task") else "repository"
    return f"{f['severity']}[{f['code']}] {where}: {f['message']}"


def render_validate(r: Validated) -> None:
    for f in r["findings"]:
        echo(finding_line(f))
        if f["repair"]:
            echo(f"  recover will: {f['repair']}")
        echo(f"  fix: {f['fix']}")
    runs = len(r["runs"])
    if not r["findings"]:
        echo(f"validate: {runs} run(s) checked, records agree with git")
    else:
        echo(f"validate: {runs} run(s) checked, {r['errors']} error(s), {r['warnings']} warning(s)")


def render_recover(r: Recovered) -> None:
    head = f"recovery {r['recovery_id']} of run {r['run_id']} ({r['task']}) at revision {r['run_revision']}"
    if r["noop"]:
        echo(f"{head}: nothing to repair, the records agree with git")
    elif r["dry_run"]:
        echo(f"{head}: plan (dry run, nothing changed)")
        for step in r["plan"]:
            echo(f"  would {step['what']}")
            echo(f"    because {step['why']}")
    else:
        echo(f"{head}: repaired, now revision {r['run_revision_after']} ({r['status']})")
        for step in r["repaired"]:
            echo(f"  {step['what']}")
    for f in r["left"]:
        echo(f"left: {finding_line(f)}")
        echo(f"  fix: {f['fix']}")
    if not r["dry_run"]:
        echo(f"audit: {r['audit']}")
    for command in r["next"]:
        echo(f"next: {command}")
