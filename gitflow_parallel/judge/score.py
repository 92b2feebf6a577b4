"""Scores: the 0..10 figure a pick ranks by, from ``score.command`` (run
like a gate in the judged checkout: its last stdout line) or
``score.findings`` (a file in the checkout: the minimum
``anti_slop_score``).  See docs/judging.md for how commands run there."""

from __future__ import annotations

import os
import re
from pathlib import Path

from gitflow_parallel.files import sha256_bytes, untrusted_json
from gitflow_parallel.files import read_tail
from gitflow_parallel.judge.fingerprints import read_regular, sha256_path
from gitflow_parallel.judge.place import Place, execute, gate_env
from gitflow_parallel.config_schema import ScoreConfig

# A findings file larger than this is not read (it is not a findings file).
MAX_FINDINGS_BYTES = 64 << 20



# Within one line: a `\s` before the name ran across lines from every line
# start, time square in the lines (the attempt's code may write the file).
_MD_SCORE = re.compile(r"^[ \t>*_#-]*anti_slop_score[*_]*[ \t]*:[ \t]*[*_`]*([^\s*_`]*)", re.IGNORECASE | re.MULTILINE)
# A score is a few digits: Python makes no int of over 4,300 (ValueError),
# and the attempt's code may write the line.
_INT = re.compile(r"[+-]?[0-9]{1,64}")


def _score_value(text: str) -> int | None:
    if not _INT.fullmatch(text.strip()):
        return None
    value = int(text)
    return value if 0 <= value <= 10 else None


def score_from_findings(text: str, jsonl: bool) -> tuple[int | None, str | None]:
    """(score, error) from a findings file's text."""
    if jsonl:
        values = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = untrusted_json(line)
            except ValueError:
                return None, f"line {n} is not JSON"
            if not isinstance(item, dict) or "anti_slop_score" not in item:
                continue  # other findings may share the file
            value = item["anti_slop_score"]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
                return None, f"line {n}: anti_slop_score {value!r} is not an integer 0..10"
            values.append(value)
        if not values:
            return None, "no line has an anti_slop_score"
        return min(values), None
    found = _MD_SCORE.findall(text)
    if not found:
        return None, "no line 'anti_slop_score: N'"
    values = []
    for raw in found:
        value = _score_value(raw)
        if value is None:
            return None, f"anti_slop_score {raw!r} is not an integer 0..10"
        values.append(value)
    return min(values), None


def score(config: ScoreConfig, place: Place) -> tuple[int | None, dict[str, object] | None, str | None]:
    """(score, score_source, score_error) for the worktree of ``place``."""
    command, findings = config.get("command"), config.get("findings")
    if command:
        log, err_log = place.log("score"), place.log("score-stderr")
        code, error, _ = execute(list(command), place.worktree, gate_env({}, place.facts, place.path, home=place.home),
                                 float(config.get("timeout") or 300), log, err_log, layer=place.layer())
        source: dict[str, object] = {"kind": "command", "argv": list(command), "exit_code": code, "log": str(log),
                  "log_sha256": sha256_path(log), "stderr_log": str(err_log)}
        if error:
            return None, source, error
        if code != 0:
            return None, source, f"the score command exited {code}"
        try:
            tail = read_tail(log, 1 << 20)[0]  # its last line is the score
        except OSError:
            tail = b""
        lines = [l for l in tail.decode("utf-8", "replace").splitlines() if l.strip()]
        if not lines:
            return None, source, "the score command printed nothing"
        value = _score_value(lines[-1])
        if value is None:
            return None, source, f"its last line {lines[-1].strip()[:80]!r} is not an integer 0..10"
        return value, source, None
    if findings:
        found, error = _findings_file(findings, config.get("findings_from"), place)
        if error is not None:
            return None, {"kind": "findings", "path": findings, "format": "jsonl" if findings.endswith(".jsonl")
                          else "markdown", "sha256": None}, error
        path = found if found is not None else place.worktree / findings
        jsonl = findings.endswith(".jsonl")
        data = read_regular(path, limit=MAX_FINDINGS_BYTES) if found is not None else None
        source = {"kind": "findings", "path": findings, "format": "jsonl" if jsonl else "markdown",
                  "sha256": None if data is None else sha256_bytes(data)}
        if data is None:
            why = "is not a regular file" if os.path.lexists(path) else "does not exist"
            return None, source, f"the findings file {findings} {why} in the worktree"
        value, error = score_from_findings(data.decode("utf-8", "replace"), jsonl)
        return value, source, (f"{findings}: {error}" if error else None)
    return None, None, None


def _findings_file(findings: str, writer: str | None, place: Place) -> tuple[Path | None, str | None]:
    """Where the findings file is, as its writer left it (``writer``, a
    gate's name: its own layer alone), or as the commands left it: every
    gate runs the attempt's code, so a file that more than one of them
    wrote cannot say whose it is.  Under Landlock alone the commands share
    the checkout: the file is as the last one left it."""
    if not place.overlaid:
        return place.merged().find(findings), None
    written = place.written_by(findings)
    if writer is not None:
        mine = [path for owner, path in written if owner == writer]
        return (mine[-1], None) if mine else (None, f"the gate {writer} (score.findings_from) did not write "
                                                    f"{findings}")
    if len(written) > 1:
        names = ", ".join(sorted({owner or "score" for owner, _ in written}))
        return None, (f"the findings file {findings} was written by {len(written)} judged commands ({names}), and "
                      "each runs the attempt's code: name its writer with score.findings_from")
    return place.merged().find(findings), None
