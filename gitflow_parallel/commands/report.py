"""``git parallel report``: one self-contained HTML page of a run.

The page needs no network and loads nothing: its CSS is inline, the charts
are inline SVG, the diffs are highlighted by pygments into ``<span>``s styled
by the same inline sheet, and there is no script.  One column per attempt
(verdict, score, gates with results and durations, each gate's log digest:
a pass's last line, a fail's last line and every failing test it names;
why it won or lost; the earlier attempts a retry replaced), a chart of gate
durations and one of lines changed per attempt, the pick and the rule that
made it (or the person), each loser with its own evidence, the landing,
then each attempt's diff against the base.  It reads the run through ``view.RunView``, so a
run fetched from a teammate renders the same as one made here.

Elements carry ``data-*`` attributes (``data-attempt``, ``data-winner``,
``data-gate``, ``data-result``, ``data-earlier-attempt``, ``data-method``,
``data-losers``, ``data-standing``) so that tools (and the tests, through a
headless browser's rendered DOM) can find them without parsing prose.
"""

from __future__ import annotations

import html
from pathlib import Path
from collections.abc import Mapping
from typing import Any, TypedDict

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from gitflow_parallel import __version__, evidence, failures
from gitflow_parallel import errors as E
from gitflow_parallel.files import atomic_write, new_file_mode, utcnow
from gitflow_parallel.judge.selection import RULE_TEXT
from gitflow_parallel.evidence import Freshness
from gitflow_parallel.model import HUMAN, HistoryEntry, InstanceRecord, PickRecord, RunRecord
from gitflow_parallel.provenance import protected_summary
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.view import RunView, changes_between, open_view, outcome

MAX_PATCH_CHARS = 200_000  # per attempt: a page a browser still opens quickly
LOG_LINES = 12
MAX_FAILURES = 50  # failing test names listed per gate
BAR_WIDTH = 360

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.meta{color:#59636e}.grid{display:flex;gap:14px;align-items:stretch;flex-wrap:wrap}
.attempt{flex:1 1 240px;border:1px solid #d0d7de;border-radius:8px;padding:12px;min-width:240px}
.attempt.winner{border:2px solid #1a7f37;background:#f0fff4}
.badge{display:inline-block;border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600;margin-left:6px}
.badge.win{background:#1a7f37;color:#fff}.badge.pass{background:#dafbe1;color:#116329}
.badge.fail{background:#ffebe9;color:#a40e26}.badge.none{background:#eaeef2;color:#59636e}
ul.gates{list-style:none;padding:0;margin:8px 0}ul.gates li{margin:4px 0}
.res-pass{color:#1a7f37;font-weight:600}.res-fail{color:#cf222e;font-weight:600}.res-skip{color:#59636e;font-weight:600}
pre.log{background:#f6f8fa;border-radius:6px;padding:6px;margin:4px 0;white-space:pre-wrap;overflow-wrap:anywhere}
pre.log{max-height:360px;overflow:auto}
.earlier{margin-top:8px;font-size:13px;border-top:1px dashed #d0d7de;padding-top:6px}
.why{margin-top:8px;font-size:13px}.alarm{margin:8px 0;padding:6px;border-radius:6px;background:#fff8c5;font-size:13px}
.alarm ul{margin:4px 0;padding-left:18px}table{border-collapse:collapse}
td,th{padding:3px 10px;border-bottom:1px solid #eaeef2;text-align:left}
.chart text{font-size:12px;fill:#1f2328}.highlight{border:1px solid #d0d7de;border-radius:6px;overflow:auto}
.highlight pre{margin:0;padding:8px}
"""


class Earlier(HistoryEntry):
    """An attempt a retry replaced, with its pack and gates."""
    pack: Mapping[str, Any] | None
    gates: list[dict[str, Any]]  # a pack's gates (as read), each with its ``digest``


class Attempt(TypedDict):
    """What the page shows of one instance (``changes`` and ``outcome``: ``state/view``'s)."""
    inst: InstanceRecord
    tip: str | None
    pack: Mapping[str, Any] | None
    fresh: Freshness
    changes: Mapping[str, Any]
    gates: list[dict[str, Any]]
    outcome: Mapping[str, Any]
    earlier: list[Earlier]


class Report(TypedDict):
    """``report``: where the page went, and each attempt's verdict."""
    task: str
    run_id: str
    path: str
    bytes: int
    attempts: list[dict[str, object]]
    shared: bool


def _e(value: object) -> str:
    return html.escape("-" if value is None else str(value))


def digest(data: bytes | None, passed: bool) -> list[str]:
    """The lines of a gate's log worth a card: a pass shows the test
    runner's summary (not its progress dots); a fail shows that line and
    every failing test the log names (``failures``: pytest, unittest, go,
    cargo, jest, vitest, mocha, node), else its last lines."""
    text = (data or b"").decode("utf-8", "replace")
    summary = failures.summary_line(text)
    if summary is None:
        return []
    if passed:
        return [summary]
    names = failures.failing_tests(text)
    if not names:
        return [line for line in failures.clean(text) if line][-LOG_LINES:]
    more = len(names) - MAX_FAILURES
    return ([summary] + [f"FAILED {n}" for n in names[:MAX_FAILURES]]
            + ([f"... and {more} more (`git parallel logs` shows the whole log)"] if more > 0 else []))


def _gates(view: RunView, inst: InstanceRecord, pack: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    rows = []
    for g in (pack or {}).get("gates") or []:
        data = view.log(inst, g.get("log"))[0] if g.get("log") else None
        rows.append({**g, "digest": digest(data, bool(g.get("passed")))})
    return rows


def _earlier(view: RunView, inst: InstanceRecord) -> list[Earlier]:
    """The attempts a retry replaced, oldest first, with their gates."""
    out: list[Earlier] = []
    for h in inst.get("history") or []:
        # The view finds an attempt's pack and logs by its id, attempt and evidence binding.
        past = inst.copy()
        past.update({"attempt": h.get("attempt", inst["attempt"]), "evidence": h.get("evidence")})
        pack = view.pack(past)
        out.append({**h, "pack": pack, "gates": _gates(view, past, pack)})
    return out


def _attempt_data(view: RunView, inst: InstanceRecord) -> Attempt:
    base = view.record["base"]["commit"]
    tip = view.tip(inst)
    pack = view.pack(inst)
    changes = changes_between(view.repo, base, tip, True) if tip else {"files": [], "added": 0, "removed": 0, "patch": ""}
    fate = outcome(view, inst)
    return {"inst": inst, "tip": tip, "pack": pack, "fresh": view.freshness(inst), "changes": changes,
            "gates": _gates(view, inst, pack), "outcome": fate, "earlier": _earlier(view, inst)}


def _gate_item(g: dict[str, Any]) -> str:
    result = "skip" if g["skipped"] else ("pass" if g["passed"] else "fail")
    took = "" if g["duration_s"] is None else f" in {g['duration_s']:.2f}s"
    detail = _e(g["error"]) if g["error"] else f"exit {_e(g['exit_code'])}{took}"
    hidden = g.get("hidden")
    if hidden and not g["skipped"]:  # its counts are all of its output that is kept
        counts = hidden.get("summary") or "no test counts in its output"
        detail += f'; hidden tests: <b data-role="hidden-counts">{_e(counts)}</b> (output not kept)'
    log = f'<pre class="log">{_e(chr(10).join(g["digest"]))}</pre>' if g["digest"] else ""
    return (f'<li class="gate" data-gate="{_e(g["name"])}" data-result="{result}">'
            f'<span class="res-{result}">{result.upper()}</span> <b>{_e(g["name"])}</b> '
            f'<span class="meta">{_e(g["mode"])}, {detail}</span>{log}</li>')


def _earlier_item(h: Earlier) -> str:
    verdict = (h["pack"] or {}).get("verdict") or h.get("verdict") or "none"
    what = f"{_e(h['status'])}" + (f" ({_e(h['error'])})" if h.get("error") else "")
    kept = f'; kept at <span class="mono">{_e(h["archive_ref"])}</span>' if h.get("archive_ref") else ""
    gates = "".join(_gate_item(g) for g in h["gates"])
    return (f'<div class="earlier" data-earlier-attempt="{_e(h["attempt"])}" data-verdict="{_e(verdict)}">'
            f'earlier attempt {_e(h["attempt"])}: {what}, verdict <b>{_e(verdict)}</b>, score {_e(h.get("score"))}, '
            f'commit <span class="mono">{_e((h.get("head") or "")[:12] or None)}</span>{kept}'
            + (f'<ul class="gates">{gates}</ul>' if gates else "") + "</div>")


def _why(fate: Mapping[str, object]) -> str:
    """Why it won or lost; a person's reason is printed once, with the pick."""
    pick = fate.get("pick")
    if isinstance(pick, dict) and pick["selection_method"] == HUMAN and not fate["won"]:
        return f"lost track {pick['track']} to {pick['winner']['id']}: not chosen by {pick.get('picked_by')} (see Pick)"
    return str(fate["why"])


def _alarms(inst: InstanceRecord, pack: Mapping[str, object] | None) -> str:
    """What a reviewer must see first: what the attempt changed that no
    attempt may (restored, and the reason it failed), and the protected
    paths it changed (judged with the base's version)."""
    out = ""
    if inst.get("tampered"):
        out += (f'<div class="alarm" data-role="tampered"><b>{_e(E.AGENT_TAMPERED)}</b>: it changed what no attempt '
                f'may change (restored): <span class="mono">{_e(", ".join(inst.get("tampered") or []))}</span></div>')
    during = evidence.tampered_while_judged(pack)
    if during:  # its code, run by a gate, did it
        out += f'<div class="alarm" data-role="tampered"><b>{_e(E.AGENT_TAMPERED)}</b>: {_e(during)}</div>'
    detail = (pack or {}).get("protected_detail") or []
    if isinstance(detail, list) and detail:
        rows = "".join(f"<li>{_e(line)}</li>" for line in protected_summary(detail))
        out += (f'<div class="alarm" data-role="protected">protected path(s) it changed, judged with the base\'s '
                f'version{"; they keep it out of an automatic pick" if (pack or {}).get("protected_blocking") else ""}'
                f':<ul class="mono">{rows}</ul></div>')
    return out


def _code(fate: Mapping[str, object]) -> str:
    """A loser's own reason code; the generic one adds nothing to the why."""
    code = fate.get("code")
    return f" [{code}]" if code and code != E.SELECTION_NO_PASS else ""


def _layers(inst: InstanceRecord, pack: Mapping[str, Any] | None) -> str:
    said = evidence.layers_line(evidence.layers_held(inst, pack))
    return f'<div class="meta" data-role="layers">{_e(said)}</div>' if said else ""


def _column(a: Attempt) -> str:
    inst, pack, fate = a["inst"], a["pack"], a["outcome"]
    won = bool(fate.get("won"))
    verdict = (pack or {}).get("verdict") or "none"
    score = "unavailable" if not pack or pack.get("score") is None else pack["score"]
    badges = f'<span class="badge {verdict if verdict in ("pass", "fail") else "none"}">{_e(verdict)}</span>'
    if won:
        badges += '<span class="badge win" data-role="winner-mark">winner</span>'
    gates = "".join(_gate_item(g) for g in a["gates"]) or '<li class="meta">no gates ran (not checked)</li>'
    return (f'<section class="attempt{" winner" if won else ""}" data-attempt="{_e(inst["id"])}" '
            f'data-winner="{"true" if won else "false"}" data-verdict="{_e(verdict)}">'
            f'<h3>instance {_e(inst["id"])}{badges}</h3>'
            f'<div class="meta">track {_e(inst["track"])}, attempt {_e(inst["attempt"])}, {_e(inst["status"])}'
            + (' <b data-role="no-change">(no change)</b>' if inst.get("outcome") == "no_change" else "") + '; '
            + (f'agent <b data-role="agent">{_e(inst["agent"])}</b>; ' if inst.get("agent") else "") +
            f'commit <span class="mono">{_e((a["tip"] or "")[:12] or None)}</span></div>'
            f'<div>score <b data-role="score">{_e(score)}</b>; evidence {_e(a["fresh"].state)}; '
            f'{len(a["changes"]["files"])} file(s), <span class="res-pass">+{a["changes"]["added"]}</span> '
            f'<span class="res-fail">-{a["changes"]["removed"]}</span></div>'
            f'{_layers(inst, pack)}{_alarms(inst, pack)}<ul class="gates">{gates}</ul>'
            f'<div class="why" data-role="why">{_e(_why(fate))}{_e(_code(fate))}</div>'
            f'{"".join(_earlier_item(h) for h in a["earlier"])}</section>')


def _bars(title: str, rows: list[tuple[str, list[tuple[str, float, str]]]], unit: str) -> str:
    """A horizontal bar chart: per attempt, one bar per series."""
    peak = max([v for _, series in rows for _, v, _ in series] + [0]) or 1.0
    line, y, parts = 18, 24, []
    for label, series in rows:
        parts.append(f'<text x="0" y="{y + 12}">{_e(label)}</text>')
        if not series:  # the row still takes its line, or the next label is drawn over this one
            parts.append(f'<text x="150" y="{y + 12}" class="meta">none</text>')
        for k, (name, value, colour) in enumerate(series):
            width = max(1.0, BAR_WIDTH * value / peak) if value else 0
            top = y + k * line
            parts.append(f'<rect x="150" y="{top}" width="{width:.1f}" height="14" fill="{colour}">'
                         f'<title>{_e(name)}: {value:g}{unit}</title></rect>'
                         f'<text x="{156 + width:.1f}" y="{top + 12}">{_e(name)} {value:g}{unit}</text>')
        y += line * max(1, len(series)) + 8
    return (f'<figure><figcaption><b>{_e(title)}</b></figcaption>'
            f'<svg class="chart" role="img" aria-label="{_e(title)}" width="{150 + BAR_WIDTH + 170}" height="{y}">'
            f'{"".join(parts)}</svg></figure>')


def _charts(attempts: list[Attempt]) -> str:
    palette = ["#0969da", "#8250df", "#bf3989", "#9a6700", "#1a7f37", "#cf222e"]
    names = sorted({g["name"] for a in attempts for g in a["gates"]})
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    durations = [(f"instance {a['inst']['id']}", [(g["name"], g["duration_s"] or 0.0, colours[g["name"]])
                                                  for g in a["gates"]]) for a in attempts]
    lines = [(f"instance {a['inst']['id']}", [("added", a["changes"]["added"], "#1a7f37"),
                                              ("removed", a["changes"]["removed"], "#cf222e")]) for a in attempts]
    return _bars("Gate durations", durations, "s") + _bars("Lines changed against the base", lines, "")


def _figures(f: Mapping[str, object] | None) -> str:
    if not f:
        return ""
    score = "unavailable" if f.get("score") is None else f["score"]
    proved = "added tests prove the fix, " if f.get("proved") else ""
    return f"{_e(f['id'])} ({proved}score {_e(score)}, {_e(f.get('changed_lines'))} changed lines)"


def _rule(pick: PickRecord) -> str:
    """How this pick was made, in words: the rule it ran, or the person."""
    method = pick["selection_method"]
    if method == HUMAN:
        text = f"chosen by <b>{_e(pick.get('picked_by'))}</b>" + (f": &ldquo;{_e(pick['reason'])}&rdquo;"
                                                              if pick.get("reason") else " (no reason given)")
        if pick.get("forced"):
            text += f"; forced, waiving: {_e('; '.join(pick.get('waived') or []))}"
        return text
    text = f"by <b>{_e(method)}</b> ({_e(RULE_TEXT.get(method, 'its rule'))})"
    d = pick.get("decision")
    if d:
        against = f" over {_figures(d['runner_up'])}" if d.get("runner_up") else ""
        text += f"; decided by {_e(d['stage'])}: {_figures(d['winner'])}{against}"
    ran = pick.get("differential")
    fallback, inputs = (ran.get("fallback"), ran.get("inputs")) if ran else (None, None)
    if fallback:
        text += f"; distinguish fell back to {_e(fallback['rule'])} ({_e(fallback['code'])}: {_e(fallback['error'])})"
    elif ran and inputs:
        text += (f"; distinguishing inputs <span class=\"mono\">{_e(inputs['path'])}</span> "
                 f"(sha256 {_e(inputs['sha256'][:16])}), outputs: "
                 + ", ".join(f"{_e(i)} {_e((o['sha256'] or o['error'] or '')[:16])}"
                             for i, o in (ran.get("outputs") or {}).items()))
    return text


def _standing(a: Attempt | None) -> str:
    """A loser's own evidence, so a loser that passed never reads as failed."""
    if a is None:
        return "unknown"
    fresh = a["fresh"]
    if fresh.passing:
        return "passed"
    if fresh.state == "fresh":
        return "failed" if (fresh.pack or {}).get("complete") else "incomplete"
    return {"none": "not checked", "missing": "evidence missing"}.get(fresh.state, f"evidence {fresh.state}")


def _losers(pick: PickRecord, by_id: dict[str, Attempt]) -> str:
    """One row per distinct (standing, why): a person's pick names its reason
    once, above, not once per loser."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for lost in pick["losers"]:
        standing = _standing(by_id.get(lost["id"]))
        why = "not chosen" if pick["selection_method"] == HUMAN else lost["reason"]
        # One that passed and was ranked below has no code of its own; one kept out (protected paths) has.
        code = "" if standing == "passed" and lost.get("code") == E.SELECTION_NO_PASS else lost.get("code") or ""
        rows.setdefault((standing, code, why), []).append(lost["id"])
    body = "".join(f'<tr data-losers="{_e(" ".join(ids))}" data-standing="{_e(standing)}"><td>{_e(", ".join(ids))}</td>'
                   f'<td>{_e(standing)}</td><td>{_e(code) or "-"}</td><td>{_e(why)}</td></tr>'
                   for (standing, code, why), ids in rows.items())
    return ("<table><tr><th>lost</th><th>its evidence</th><th>code</th><th>why</th></tr>" + body + "</table>"
            if body else "")


def _pick_section(view: RunView, attempts: list[Attempt]) -> str:
    by_id = {a["inst"]["id"]: a for a in attempts}
    out = []
    for track in view.record["tracks"]:
        pick = view.pick(track)
        if pick is None:
            out.append(f'<p data-track="{_e(track)}">track <b>{_e(track)}</b>: not picked yet</p>')
            continue
        w = pick["winner"]
        out.append(f'<p data-track="{_e(track)}" data-pick-winner="{_e(w["id"])}" '
                   f'data-method="{_e(pick["selection_method"])}">track <b>{_e(track)}</b>: '
                   f'winner <b>{_e(w["id"])}</b> (attempt {_e(w["attempt"])}, commit '
                   f'<span class="mono">{_e(w["commit"][:12])}</span>), score {_e(pick["score"])}, '
                   f'<span data-role="rule">{_rule(pick)}</span>; merge policy {_e(pick["merge_policy"])}, '
                   f'picked {_e(pick["created_at"])}</p>' + _losers(pick, by_id))
    return "".join(out)


def _landing(record: RunRecord) -> str:
    m = record.get("merge")
    if record["status"] != "merged" or not m:
        return f'<p data-role="landing">not landed (run {_e(record["status"])})</p>'
    return (f'<p data-role="landing" data-landed="{_e(m["landed"])}">{_e(m["method"])} on {_e(m["base_ref"])}: '
            f'<span class="mono">{_e((m["previous"] or "")[:12] or None)}</span> &rarr; <span class="mono">{_e(m["landed"][:12])}</span>'
            f' at {_e(m["merged_at"])} (policy {_e(m["policy"])}, landed on merge try {_e(m["attempts"])}); '
            f'<code>git notes --ref=parallel show {_e(m["landed"][:12])}</code></p>')


def _diffs(attempts: list[Attempt]) -> str:
    formatter = HtmlFormatter(cssclass="highlight")
    out = []
    for a in attempts:
        patch = a["changes"].get("patch") or ""
        cut = len(patch) > MAX_PATCH_CHARS
        body = (highlight(patch[:MAX_PATCH_CHARS], DiffLexer(), formatter) if patch
                else '<p class="meta">no change against the base</p>')
        note = f'<p class="meta">(cut at {MAX_PATCH_CHARS} characters; `git parallel diff` shows all)</p>' if cut else ""
        out.append(f'<details class="diff" data-attempt="{_e(a["inst"]["id"])}" open><summary>instance '
                   f'{_e(a["inst"]["id"])}: {len(a["changes"]["files"])} file(s), +{a["changes"]["added"]} '
                   f'-{a["changes"]["removed"]}</summary>{_comments(a["inst"])}{body}{note}</details>')
    return "".join(out)


def _comments(inst: InstanceRecord) -> str:
    """The review comments (`git parallel comment`) above the attempt's diff."""
    items = "".join(f'<li data-comment-attempt="{_e(c["attempt"])}" data-file="{_e(c["file"])}" data-line='
                    f'"{_e(c["line"])}"><b>{_e(c["file"] or "attempt")}{":" + _e(c["line"]) if c["line"] else ""}'
                    f'</b> (attempt {_e(c["attempt"])}, {_e(c["by"])}): {_e(c["text"])}</li>'
                    for c in inst.get("comments") or [])
    return f'<ul class="comments" data-role="comments">{items}</ul>' if items else ""


def render(view: RunView, attempts: list[Attempt]) -> str:
    record = view.record
    # types-Pygments leaves HtmlFormatter.get_style_defs unannotated (its base, Formatter's, returns str).
    styles = CSS + HtmlFormatter(cssclass="highlight").get_style_defs(".highlight")  # type: ignore[no-untyped-call]
    source = "fetched (read from git refs)" if view.shared else "this clone's record"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>git-parallel report: {_e(record['task'])}</title><style>{styles}</style></head><body>"
        f'<h1 data-task="{_e(record["task"])}">{_e(record["task"])}</h1>'
        f'<div class="meta">run <span class="mono" data-run-id="{_e(record["run_id"])}">{_e(record["run_id"])}</span>'
        f' &middot; {_e(record["status"])} &middot; base {_e(record["base"]["ref"])} at '
        f'<span class="mono">{_e(record["base"]["commit"][:12])}</span> &middot; {len(attempts)} attempt(s) &middot; '
        f'{source} &middot; made {_e(utcnow())} by git-parallel {_e(__version__)}</div>'
        f'<h2>Attempts</h2><div class="grid">{"".join(_column(a) for a in attempts)}</div>'
        f"<h2>Charts</h2>{_charts(attempts)}"
        f"<h2>Pick</h2>{_pick_section(view, attempts)}"
        f"<h2>Landing</h2>{_landing(record)}"
        f"<h2>Diffs against the base</h2>{_diffs(attempts)}"
        "</body></html>\n")


def default_path(project: Project, record: RunRecord) -> Path:
    return project.repo.parallel_dir / "reports" / f"{record['task']}-{record['run_id']}.html"


def report(project: Project, task: str, html_file: str | None = None) -> Report:
    """Write the run's page to ``html_file`` (default
    ``<common>/parallel/reports/<task>-<run_id>.html``); returns where."""
    view = open_view(project, task)
    attempts = [_attempt_data(view, inst) for inst in view.record["instances"]]
    page = render(view, attempts)
    path = Path(html_file) if html_file else default_path(project, view.record)
    atomic_write(path, page, mode=new_file_mode())  # the user's file: the umask decides, as for git's
    return {"task": task, "run_id": view.record["run_id"], "path": str(path.resolve()), "bytes": len(page.encode()),
            "attempts": [{"id": a["inst"]["id"], "winner": bool(a["outcome"].get("won")),
                          "verdict": (a["pack"] or {}).get("verdict"),
                          "sandbox": evidence.layers_held(a["inst"], a["pack"])} for a in attempts],
            "shared": view.shared}
