"""Feedback for the next attempt: why the previous one did not make it.

``retry`` writes one text file per new attempt,
``<common>/parallel/feedback/<run_id>/<id>.<attempt>.md``, and records its
path as the instance's ``feedback``.  ``run`` gives it to the agent as
``GIT_PARALLEL_FEEDBACK`` (the path) and ``{feedback}`` (the text, so that an
argument list without a shell can carry it: ``claude -p "Fix what failed:
{feedback}"``).  It says what the previous attempt was (status, exit, error,
commit, verdict), names every enforced gate that did not pass with its exit
code and the last ``TAIL_LINES`` lines of its log, the tail of the agent's
own log when the agent itself failed, and the pick's reason when the attempt
lost a pick.  Everything in it comes from the records and logs git-parallel
wrote itself; it is built here, once, for every verb that retries.

Logs hold whatever the agent and the gates printed.  The feedback is plain
text: terminal escape sequences and control characters other than tab and
newline are dropped (a NUL byte cannot be in an argument at all), and
``{feedback}`` is cut to its last ``ARGUMENT_MAX`` bytes, whole lines, with
a first line saying so (Linux refuses an argument over 128 KiB); the file
keeps the whole text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from gitflow_parallel import evidence
from gitflow_parallel.files import atomic_write, read_tail
from gitflow_parallel.model import InstanceRecord, PickRecord, RunRecord

TAIL_LINES = 200  # of each failing gate's log
AGENT_TAIL_LINES = 50  # of the agent's log, when the agent failed
ARGUMENT_MAX = 64 * 1024  # bytes of {feedback}: half of Linux's MAX_ARG_STRLEN, room for the rest of the argument
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def plain(text: str) -> str:
    """``text`` without terminal escape sequences and control characters
    (tab and newline stay)."""
    return _CONTROL.sub("", _ESCAPE.sub("", text))


def feedback_path(parallel_dir: Path, run_id: str, inst_id: str, attempt: int) -> Path:
    return parallel_dir / "feedback" / run_id / f"{inst_id}.{attempt}.md"


def tail(path: str | None, lines: int) -> list[str]:
    if not path:
        return []
    try:
        data = read_tail(path)[0]  # an agent's or a gate's log: read from its end, capped
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def _block(title: str, lines: list[str]) -> list[str]:
    return [title, "```", *lines, "```", ""]


def _lost(record: RunRecord, inst: InstanceRecord, picks: list[PickRecord]) -> list[str]:
    """The reason of the latest pick (current or retired) this attempt lost."""
    for pick in reversed(picks):
        if pick.get("track") != inst["track"] or pick["winner"]["id"] == inst["id"]:
            continue
        for loser in pick.get("losers") or []:
            if loser.get("id") == inst["id"]:
                by = pick.get("picked_by") or pick.get("selection_method")
                why = f" because: {pick['reason']}" if pick.get("reason") else ""
                return ["## Lost the pick", f"instance {pick['winner']['id']} won (chosen by {by}){why}",
                        f"the pick says about this attempt: {loser.get('reason')}", ""]
    return []


def _moved(tip: str | None, moved: Mapping[str, object] | None) -> list[str]:
    """A retry onto the base as it is now (``won``: the track whose pick it
    won, ``conflicts``: the files, ``ref`` and ``commit``: the base now):
    why, and where the old work is."""
    if not moved:
        return []
    won = f"It won the pick of track {moved['won']}, but " if moved.get("won") else ""
    conflicts = moved.get("conflicts")
    lands = (f"it conflicts with the base in: {', '.join(str(c) for c in conflicts)}"
             if conflicts and isinstance(conflicts, list) else "it has to be proved again on it")
    return ["## The base moved", f"{won}{moved['ref']} moved to {moved['commit']} since this attempt started, and "
            f"{lands}. The next attempt starts on {moved['ref']} as it is now; the previous attempt's commit "
            f"{tip} is archived (`git show {tip}` shows its work, to carry over).", ""]


def text(record: RunRecord, inst: InstanceRecord, tip: str | None, picks: list[PickRecord],
         moved: Mapping[str, object] | None = None) -> str:
    """The feedback on ``inst``'s current attempt, for the attempt after it
    (``moved``: it is retried onto the base's current tip, see ``_moved``)."""
    task, attempt = record["task"], inst["attempt"]
    out = [f"# git-parallel feedback: {task}, instance {inst['id']}, attempt {attempt + 1}", "",
           f"The previous attempt ({attempt}) did not make it. What git-parallel recorded about it:", "",
           f"- status: {inst['status']}" + (f" (exit {inst['exit_code']})" if inst.get("exit_code") is not None else ""),
           f"- commit: {tip or inst.get('head') or 'none'}",
           f"- verdict: {inst.get('verdict') or 'not checked'}"]
    if inst.get("error"):
        out.append(f"- error: {inst['error']}")
    pack = evidence.load(inst)
    failing = [g for g in (pack or {}).get("gates", []) if g.get("mode") == "enforced" and not g.get("passed")]
    if failing:
        out.append("- failing gates: " + ", ".join(g["name"] for g in failing))
    out.append("")
    for g in failing:
        what = ("skipped: " + (g.get("error") or "") if g.get("skipped")
                else f"exit {g['exit_code']}" if g.get("exit_code") is not None else (g.get("error") or "did not run"))
        if g.get("error") and g.get("exit_code") is not None:
            what += f"; {g['error']}"  # failed past its exit status: its test report, or no count of tests
        if g.get("hidden"):
            # Its output could quote the hidden tests: only their counts.
            out += [f"## Gate {g['name']}: {what}", "",
                    f"It runs tests you cannot see; their result: {g['hidden'].get('summary') or 'no summary'}.", ""]
            continue
        lines = tail(g.get("log"), TAIL_LINES)
        out += _block(f"## Gate {g['name']}: {what}\n\nThe last {len(lines)} lines of its log ({g.get('log')}):",
                      lines) if lines else [f"## Gate {g['name']}: {what}", ""]
    if inst["status"] == "failed":
        lines = tail(inst.get("log"), AGENT_TAIL_LINES)
        if lines:
            out += _block(f"## The agent's own output (last {len(lines)} lines of {inst.get('log')})", lines)
    out += _moved(tip, moved)
    out += _lost(record, inst, picks)
    from gitflow_parallel.state.comments import feedback_lines

    out += feedback_lines(inst)  # a person's review comments (`git parallel comment`)
    return "\n".join(out).rstrip("\n") + "\n"


def write(parallel_dir: Path, record: RunRecord, inst: InstanceRecord, tip: str | None,
          picks: list[PickRecord], moved: Mapping[str, object] | None = None) -> str:
    """Write the feedback for the attempt after ``inst``'s current one; returns its path."""
    path = feedback_path(parallel_dir, record["run_id"], inst["id"], inst["attempt"] + 1)
    atomic_write(path, plain(text(record, inst, tip, picks, moved)))
    return str(path)


def read(inst: InstanceRecord) -> str:
    """The text of the instance's feedback, or "" when it has none."""
    path = inst.get("feedback")
    if not path:
        return ""
    try:
        return plain(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ""


def argument(inst: InstanceRecord) -> str:
    """What ``{feedback}`` becomes: the text, or its last ``ARGUMENT_MAX``
    bytes (whole lines) after a line saying it was cut."""
    whole = read(inst)
    data = whole.encode("utf-8")
    if len(data) <= ARGUMENT_MAX:
        return whole
    notice = (f"[git-parallel: feedback cut to its last lines ({len(data)} bytes in all); the whole text is in "
              f"the file $GIT_PARALLEL_FEEDBACK names]\n")
    kept = data[len(data) - (ARGUMENT_MAX - len(notice.encode("utf-8"))):]
    newline = kept.find(b"\n")
    if 0 <= newline < len(kept) - 1:
        kept = kept[newline + 1:]  # whole lines
    return notice + kept.decode("utf-8", "ignore")
