"""Every line git-parallel writes into a note and every commit message of
its own (the leftovers an attempt left uncommitted): the provenance that
travels with the commits.

One function per kind of line, called by the verb that makes the record it
mirrors *and* by ``recover`` when it writes a line that verb never got to:
the two must be the same bytes, so there is only one place that builds them.

A JSON line is compact and key-sorted, with ``v``, ``kind`` and ``run_id``
(see :func:`line`); the one line for people on a landed commit does not
start with ``{`` so that readers of the JSON lines skip it.  ``notes.py``
stores the lines; it does not build them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from gitflow_parallel.files import canonical_json
from gitflow_parallel.shapes.records import Differential
from gitflow_parallel.model import HUMAN, Comment, InstanceRecord, MergeRecord, PickRecord, RunRecord

NOTE_VERSION = 1


def line(kind: str, run_id: str, **fields: object) -> str:
    """One note line: compact, key-sorted JSON."""
    return canonical_json({"v": NOTE_VERSION, "kind": kind, "run_id": run_id, **fields})


# -- note lines ------------------------------------------------------------------------
def instance_note(record: RunRecord, inst: InstanceRecord, commit: str) -> str:
    """The note line that mirrors an instance's record on its tip."""
    return line(
        "instance", record["run_id"], task=record["task"], instance=inst["id"], track=inst["track"],
        attempt=inst["attempt"], status=inst["status"], branch=inst["branch"], commit=commit,
        base=record["base"]["commit"], **({"agent": inst["agent"]} if inst.get("agent") else {}),
    )


def evidence_note(record: RunRecord, inst_id: str, pack: Mapping[str, object], sha256: str) -> str:
    """The line on a checked commit, from the evidence pack bound to the record."""
    return line("evidence", record["run_id"], task=record["task"], instance=inst_id,
                attempt=pack.get("attempt"), commit=pack.get("commit"), tree=pack.get("tree"),
                verdict=pack.get("verdict"), score=pack.get("score"), evidence_sha256=sha256,
                proof_issued_at=pack.get("proof_issued_at"))


def pick_note(pick: PickRecord) -> str:
    """The line on a winner commit (and on the commit that landed it)."""
    w = pick["winner"]
    human = ({"picked_by": pick["picked_by"], "reason": pick.get("reason"), "forced": pick["forced"]}
             if pick["selection_method"] == HUMAN else {})
    return line("pick", pick["run_id"], task=pick["task"], track=pick["track"], winner=w["id"],
                attempt=w["attempt"], commit=w["commit"], tree=w["tree"], evidence_sha256=w["evidence_sha256"],
                score=pick["score"], selection_method=pick["selection_method"],
                merge_policy=pick["merge_policy"], created_at=pick["created_at"], **human,
                **({"agent": w["agent"]} if w.get("agent") else {}),
                **({"protected_changes": protected_summary(pick["protected_changes"])}
                   if pick.get("protected_changes") else {}),
                **({"differential": differential_summary(pick["differential"])} if pick.get("differential") else {}))


def differential_summary(ran: Differential) -> dict[str, object]:
    """What a differential pick ran on, short enough for a note line: the
    stored inputs (path and sha256), each candidate's output sha256, and the
    fallback's code if the inputs could not be had."""
    inputs, fallback = ran.get("inputs"), ran["fallback"]
    return {"status": ran["status"], "fallback": fallback.get("code") if fallback else None,
            "inputs": inputs["path"] if inputs else None, "inputs_sha256": inputs["sha256"] if inputs else None,
            "outputs": {i: o["sha256"] for i, o in (ran.get("outputs") or {}).items()}}


def comment_note(record: RunRecord, inst: InstanceRecord, comment: Comment, commit: str) -> str:
    """The line on the commented attempt's commit (``git parallel comment``)."""
    return line("comment", record["run_id"], task=record["task"], instance=inst["id"], attempt=comment["attempt"],
                commit=commit, text=comment["text"], file=comment["file"], line=comment["line"], by=comment["by"],
                at=comment["at"])


def protected_summary(changes: Sequence[Mapping[str, object]]) -> list[str]:
    """One short line per protected change: ``tests/test_a.py deleted -120``."""
    return [f"{c['path']} {c['change']} +{c['lines_added']} -{c['lines_deleted']}" for c in changes]


def unpick_note(record: RunRecord, retired: Mapping[str, object]) -> str:
    """The line on a retired winner commit: ``unpick`` took its pick back."""
    return line("unpick", record["run_id"], task=record["task"], track=retired["track"], winner=retired["winner"],
                retired=retired["path"], retired_by=retired["retired_by"], retired_at=retired["retired_at"])


def merge_note(record: RunRecord, m: MergeRecord) -> str:
    """The line on the landed commit, from the run's merge record (made by
    ``merge``, or by ``recover`` for a landing it found)."""
    return line("merge", record["run_id"], task=record["task"], landed=m["landed"], previous=m["previous"],
                base_ref=m["base_ref"], method=m["method"], policy=m["policy"], merged_at=m["merged_at"],
                reproved=[{"track": v["track"], "passed": v["passed"], "gates": [g["name"] for g in v["gates"]]}
                          for v in m.get("verified") or []],
                winner_lines_dropped=sum(s.get("winner_lines_dropped", 0) for s in m["steps"]),
                # The tracks that landed on their evidence, not re-proved (``merge.verify: auto``).
                **({"rests_on": [{k: r.get(k) for k in ("track", "reproved", "pack_sha256", "commit", "tree",
                                                         "judged_tree") if k in r}
                                 for r in m["rests_on"]]} if m.get("rests_on") else {}))


def landing_line(record: RunRecord, winners: list[tuple[PickRecord, Mapping[str, object] | None]]) -> str:
    """The one line for people on a landed commit, beside the JSON lines:
    ``git-parallel: fix-login won by 2 of 3 (tests pass, score 8), run PR-…``.

    ``winners`` holds (pick record, evidence pack or None) per track.  It does
    not start with ``{``, so readers of the JSON lines skip it, and it sorts
    before them, so ``git log --notes`` shows it first."""
    parts = []
    for pick, pack in winners:
        track = pick["track"]
        size = sum(1 for i in record["instances"] if i["track"] == track)
        gates = (pack or {}).get("gates") or []
        passed = [g["name"] for g in gates if isinstance(g, dict) and g.get("mode") == "enforced" and g.get("passed")] \
            if isinstance(gates, list) else []
        gates = f"{', '.join(passed)} pass" if passed else "no enforced gate"
        score = "n/a" if pick.get("score") is None else pick["score"]
        where = "" if record["tracks"] == ["main"] else f" in {track}"
        parts.append(f"{pick['winner']['id']} of {size}{where} ({gates}, score {score})")
    return f"git-parallel: {record['task']} won by {'; '.join(parts)}, run {record['run_id']}"


# -- commit messages ---------------------------------------------------------------------
LEFTOVERS_SUBJECT = "git-parallel: leftovers of "
COMMAND_CHARS = 120  # of an agent command in a commit message


def command_text(argv: list[str]) -> str:
    """An agent command on one line, quoted as a shell would read it; one
    longer than ``COMMAND_CHARS`` (a prompt can be pages long) has its
    absolute paths cut to their last part first (``command_label``), so
    that the program and script names survive a machine's long folders,
    and is then cut at ``COMMAND_CHARS``."""
    text = " ".join(shlex.join(argv).split())
    if len(text) <= COMMAND_CHARS:
        return text
    text = command_label(text)
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "\u2026"


# An absolute path as a word of a command (quoted words with spaces stay).
_ABSOLUTE = re.compile(r"(?<![^\s'\"=])/(?:[^\s/'\"]+/)*([^\s/'\"]+)")


def command_label(text: str) -> str:
    """A command as ``command_text`` wrote it, each absolute path cut to its
    last part (``/opt/venv/bin/python /home/me/tools/agent.py`` reads
    ``python agent.py``): the machine's folders say nothing on the base
    branch's history, and may say more than their owner wants."""
    return _ABSOLUTE.sub(lambda m: m.group(1), text)


def leftovers_message(task: str, run_id: str, inst_id: str, attempt: int, why: str,
                      recovery_id: str | None = None, command: list[str] | None = None) -> str:
    """The message of the commit of what an attempt left uncommitted (by
    ``run`` after its command, which it names, by ``done`` for work done by
    hand, or by ``recover`` for an agent found dead, which adds its recovery
    id)."""
    trailers = (f"Parallel-Run: {run_id}\nParallel-Task: {task}\n"
                f"Parallel-Instance: {inst_id}\nParallel-Attempt: {attempt}\n")
    if command:
        trailers += f"Parallel-Command: {command_text(command)}\n"
    if recovery_id is not None:
        trailers += f"Parallel-Recovery: {recovery_id}\n"
    return f"{LEFTOVERS_SUBJECT}{task}/{inst_id}, attempt {attempt}\n\n{why}\n\n{trailers}"


def leftovers_of(message: str) -> dict[str, str] | None:
    """The trailers of a leftovers commit (``Parallel-Run``,
    ``Parallel-Instance``, ``Parallel-Command``, …), or None when the
    message is not one."""
    subject, _, rest = message.partition("\n")
    if not subject.startswith(LEFTOVERS_SUBJECT):
        return None
    return dict(line.split(": ", 1) for line in rest.splitlines() if line.startswith("Parallel-") and ": " in line)


def stray_leftovers_message(task: str, run_id: str, inst_id: str, attempt: int) -> str:
    """The message of the leftovers kept under an archive ref because the
    attempt's branch was gone when its command ended."""
    return (f"git-parallel: leftovers of {task}/{inst_id}, attempt {attempt} "
            f"(its branch was gone)\n\nParallel-Run: {run_id}\n")


def kept_at_retry_message(task: str, inst_id: str, attempt: int) -> str:
    """The message of the uncommitted work ``retry --force`` keeps on the archive ref."""
    return f"git-parallel: uncommitted work of {task}/{inst_id} attempt {attempt}, kept at retry"
