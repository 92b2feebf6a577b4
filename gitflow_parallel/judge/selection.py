"""Selection: ranking a track's candidates and choosing its winner by the
configured rule (the pick record itself is ``commands/pick``'s and
``state/picks``').

Candidates are the instances whose latest evidence is complete, fresh and
passing and that name no blocking protected change; the five rules
(``critic_first_pass``, ``majority_vote``, ``cluster``, ``tournament``,
``differential``), how every tie breaks by the critic order, what
``decision`` and ``ranking`` record, and why a judged pick is decided
before the project lock and confirmed under it: docs/selection.md.  The
pick record's fields, a person's pick and ``unpick``: docs/formats.md and
docs/commands.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Callable, NotRequired, TypedDict, cast


from gitflow_parallel import evidence
from gitflow_parallel.judge import differential, tournament
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.model import InstanceRecord, PickRecord, RunRecord
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.picks import ARBITER, SCHEMA_VERSION, id_key
from gitflow_parallel.config_schema import FrozenConfig
from gitflow_parallel.shapes.records import Candidate, Differential, JudgeRun


class Loser(TypedDict):
    """An instance that did not win its track, and why (a reason code and words)."""
    id: str
    code: str | None
    reason: str


class Figures(TypedDict):
    """The figures a ranking decides by (``group_size``: of its group, where groups count)."""
    id: str
    proved: bool
    added_failed: NotRequired[bool]  # only when true: its own added tests fail on it
    score: int | None
    changed_lines: int
    group_size: NotRequired[int]


class Decision(TypedDict):
    """How the winner won: the rule, the stage that split it from the runner-up, both's figures."""
    rule: str
    stage: str
    winner: Figures
    runner_up: Figures | None
    fallback: NotRequired[dict[str, Any] | None]
    final_match: NotRequired[int]


class Match(TypedDict):
    """One match of a tournament's bracket (``b`` None: a bye)."""
    round: int
    a: str
    b: str | None
    winner: str
    decided_by: str
    judge: JudgeRun | None


# What a rule adds to the pick record (ranking, tree_groups, clusters, tournament, differential).
Extra = dict[str, object]
Ranked = tuple[Candidate, Decision, dict[str, str], Extra]


def _probe_signature(pack: Mapping[str, object]) -> list[dict[str, object]]:
    """What the probes of a pack saw, gate by gate: the key of its cluster."""
    out: list[dict[str, object]] = []
    gates = pack.get("gates", [])
    for g in gates if isinstance(gates, list) else []:
        if g.get("mode") != "probe":
            continue
        sig = g.get("signature")
        if g.get("skipped") or not isinstance(sig, dict):
            out.append({"gate": g.get("name"), "skipped": True, "code": g.get("code")})
            continue
        item: dict[str, object] = {"gate": g.get("name"), "exit_code": sig.get("exit_code"), "sha256": sig.get("sha256")}
        if sig.get("error"):
            item["error"] = sig["error"]
        out.append(item)
    return out


def track_candidates(project: Project, record: RunRecord, track: str) -> tuple[list[Candidate], list[Loser]]:
    """(candidates, losers) of one track: who has complete, fresh, passing evidence."""
    candidates: list[Candidate] = []
    losers: list[Loser] = []
    base = record["base"]["commit"]
    for inst in record["instances"]:
        if inst["track"] != track:
            continue
        tip = project.tip(inst)
        if inst["status"] != "succeeded":
            losers.append(_unfinished(inst))
            continue
        fresh = evidence.freshness(record, inst, tip)
        if fresh.state != "fresh":
            losers.append({"id": inst["id"], "code": fresh.code, "reason": f"evidence {fresh.state}: {fresh.reason}"})
            continue
        pack = fresh.pack or {}
        if not pack.get("complete"):
            losers.append({"id": inst["id"], "code": E.EVIDENCE_MISSING, "reason": "evidence incomplete"})
            continue
        if pack.get("verdict") != "pass":
            losers.append(_failed(inst, pack))
            continue
        held = _held(inst, pack)
        if held is not None:
            losers.append(held)
            continue
        bound = inst["evidence"]
        assert bound is not None  # fresh evidence is bound
        candidates.append({"id": inst["id"], "attempt": inst["attempt"], "commit": pack["commit"], "tree": pack["tree"],
                           "evidence_sha256": bound["sha256"], "evidence_path": bound["path"],
                           "score": pack.get("score"), "score_source": pack.get("score_source"),
                           "score_error": pack.get("score_error"), "proof_issued_at": pack["proof_issued_at"],
                           # From the objects, never the worktree: the agent owns its worktree.
                           "changed_lines": project.repo.changed_lines(base, pack["commit"]),
                           "proved": bool((pack.get("added_tests") or {}).get("proved")),
                           "added_failed": (pack.get("added_tests") or {}).get("passed") is False,
                           "probes": _probe_signature(pack), "worktree": inst["worktree"], "agent": inst.get("agent")})
    return candidates, losers


def _held(inst: InstanceRecord, pack: Mapping[str, Any]) -> Loser | None:
    """A passing attempt only a person may pick: one that changed protected
    paths (``protected_blocking``) or whose code reaches the harness
    (``reaches_harness``)."""
    blocking = pack.get("protected_blocking") or []
    if blocking:
        return {"id": inst["id"], "code": E.PROTECTED_PATH_CHANGED,
                "reason": "changed protected path(s) " + _shown(blocking) + "; only a person's "
                          "`pick --instance` can choose it"}
    reaching = pack.get("reaches_harness") or []
    if reaching:
        return {"id": inst["id"], "code": E.REACHES_HARNESS,
                "reason": "its code reaches the test harness ("
                          + _shown([f"{f['path']}:{f['line']} {f['rule']}" for f in reaching]) + "); "
                          "only a person's `pick --instance` can choose it"}
    return None


def _unfinished(inst: InstanceRecord) -> Loser:
    """A loser that did not finish well; one that tampered says so, with its code."""
    tampered = inst.get("tampered") or []
    if tampered:
        return {"id": inst["id"], "code": E.AGENT_TAMPERED,
                "reason": f"status {inst['status']}: it changed what no attempt may change "
                          f"({_shown(tampered)}; restored)"}
    return {"id": inst["id"], "code": E.SELECTION_NO_PASS, "reason": f"status {inst['status']}"}


def _failed(inst: InstanceRecord, pack: Mapping[str, Any]) -> Loser:
    """A loser that failed its gates; one whose code tampered while they ran says so, with its code."""
    failed = [g["name"] + (f" (hidden tests: {g['hidden'].get('summary') or 'no test counts'})" if g.get("hidden") else "")
              for g in pack.get("gates", []) if g.get("mode") == "enforced" and not g.get("passed")]
    reason = "failed enforced gates: " + (", ".join(failed) or "(verdict fail)") + _protected_too(pack)
    tampered = evidence.tampered_while_judged(pack)
    if tampered:
        return {"id": inst["id"], "code": E.AGENT_TAMPERED,
                "reason": f"{tampered}; {reason}"}
    return {"id": inst["id"], "code": E.SELECTION_NO_PASS, "reason": reason}


def _protected_too(pack: Mapping[str, object]) -> str:
    """A failing attempt's protected changes, which its reason would otherwise hide."""
    changed = pack.get("protected_changes") or []
    return f"; it also changed protected path(s) {_shown(changed)}" if isinstance(changed, list) and changed else ""


def _shown(paths: list[str], limit: int = 5) -> str:
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def candidate_basis(candidates: list[Candidate]) -> list[tuple[str, int, str, str]]:
    """What a decision was made from: the same basis gives the same pick."""
    return sorted((c["id"], c["attempt"], c["commit"], c["evidence_sha256"]) for c in candidates)


# -- ranking ----------------------------------------------------------------------------
CRITIC_ORDER = ("added tests that prove the fix first, then highest score, then fewest changed lines against the base, "
                "then id")
# What each rule ranks by, in words (the report prints it with the pick).
RULE_TEXT = {
    "critic_first_pass": CRITIC_ORDER,
    "majority_vote": f"the largest group of identical trees; ties by {CRITIC_ORDER}",
    "cluster": f"the largest group whose probes saw the same behaviour; ties by {CRITIC_ORDER}",
    "tournament": f"a judge's bracket among the largest behaviour groups; unanswered matches by {CRITIC_ORDER}",
    "differential": "the largest group that behaved alike on inputs made to tell the attempts apart "
                    f"(distinguish); ties by {CRITIC_ORDER}",
}


def _critic_key(c: Candidate) -> tuple[bool, bool, bool, int, int, tuple[object, ...]]:
    """Added tests that prove the fix (they fail on the base, pass on the
    attempt: ``judge/proof``) first, and added tests that fail on the
    attempt itself last (under ``added_tests: observe`` it still passes);
    then highest score (a null score after every number), then fewest
    changed lines against the base, then id: never the time a check
    happened to end.  Proof comes first because an attempt's own regression
    test adds changed lines and no score sees it."""
    score = c["score"]
    return (not c.get("proved", False), c.get("added_failed", False), score is None, -(score or 0),
            c["changed_lines"], id_key(c["id"]))


def _figures(c: Candidate, group: list[Candidate] | None = None) -> Figures:
    out: Figures = {"id": c["id"], "proved": c.get("proved", False), "score": c["score"],
                    "changed_lines": c["changed_lines"]}
    if c.get("added_failed"):
        out["added_failed"] = True
    if group is not None:
        out["group_size"] = len(group)
    return out


def _stage(a: Candidate, b: Candidate) -> str:
    """The first figure of the critic order that puts ``a`` ahead of ``b``."""
    if a.get("proved", False) != b.get("proved", False):
        return "proved"
    if a.get("added_failed", False) != b.get("added_failed", False):
        return "added_failed"
    if a["score"] != b["score"]:
        return "score"
    if a["changed_lines"] != b["changed_lines"]:
        return "changed_lines"
    return "id"


def _score_text(c: Candidate) -> str:
    return "unavailable" if c["score"] is None else str(c["score"])


def _why_below(c: Candidate, w: Candidate) -> str:
    stage = _stage(w, c)
    if stage == "proved":
        return "the winner's added tests prove its fix (they fail on the base and pass on it); it has none that do"
    if stage == "added_failed":
        return "its own added tests fail on it; the winner's do not"
    if stage == "score":
        return f"score {_score_text(c)} vs {_score_text(w)}"
    if stage == "changed_lines":
        return f"score {_score_text(c)} for both, {c['changed_lines']} changed lines vs {w['changed_lines']}"
    return f"score {_score_text(c)} and {c['changed_lines']} changed lines for both; {w['id']} comes first by id"


def _groups(ranked: list[Candidate], key: Callable[[Candidate], str]) -> list[list[Candidate]]:
    """Candidates grouped by ``key(c)``, each group in critic order; the largest
    group first, groups of one size in the critic order of their best member."""
    groups: dict[str, list[Candidate]] = {}
    for c in ranked:
        groups.setdefault(key(c), []).append(c)
    return sorted(groups.values(), key=lambda g: (-len(g), _critic_key(g[0])))


def _critic_decision(ranked: list[Candidate]) -> Decision:
    winner = ranked[0]
    if len(ranked) == 1:
        return {"rule": "critic_first_pass", "stage": "only_candidate", "winner": _figures(winner), "runner_up": None}
    return {"rule": "critic_first_pass", "stage": _stage(winner, ranked[1]), "winner": _figures(winner),
            "runner_up": _figures(ranked[1])}


def _group_decision(method: str, groups: list[list[Candidate]], size_stage: str) -> Decision:
    """How the top group and its best member won: by size, else by the critic order."""
    top = groups[0]
    winner = top[0]
    if len(groups) > 1:
        rival_group = groups[1]
        runner_up = rival_group[0]
        stage = size_stage if len(top) > len(rival_group) else _stage(winner, runner_up)
    elif len(top) > 1:
        rival_group, runner_up = top, top[1]
        stage = _stage(winner, runner_up)
    else:
        return {"rule": method, "stage": "only_candidate", "winner": _figures(winner, top), "runner_up": None}
    return {"rule": method, "stage": stage, "winner": _figures(winner, top),
            "runner_up": _figures(runner_up, rival_group)}


def _group_reasons(groups: list[list[Candidate]], what: str) -> dict[str, str]:
    top = groups[0]
    winner = top[0]
    reasons = {}
    for group in groups:
        for c in group:
            if c is winner:
                continue
            if group is top:
                reasons[c["id"]] = f"same {what} as the winner {winner['id']}, ranked below it: {_why_below(c, winner)}"
            elif len(group) < len(top):
                reasons[c["id"]] = f"its {what} is shared by {len(group)}, the winner's by {len(top)}"
            else:
                reasons[c["id"]] = (f"its {what} is shared by {len(group)}, as many as the winner's; ranked below "
                                    f"{winner['id']}: {_why_below(group[0], winner)}")
    return reasons


def _clusters_record(groups: list[list[Candidate]]) -> list[dict[str, object]]:
    return [{"signature": g[0]["probes"], "members": sorted((c["id"] for c in g), key=id_key), "size": len(g)}
            for g in groups]


def _cluster_key(c: Candidate) -> str:
    return json.dumps(c["probes"], sort_keys=True)


def _tie_winner(a: Candidate, b: Candidate) -> Candidate:
    return a if _critic_key(a) < _critic_key(b) else b


def _bracket(project: Project, record: RunRecord, track: str,
             entrants: list[Candidate]) -> tuple[Candidate, Match | None, list[Match]]:
    """A single-elimination bracket in id order (an odd one out gets a bye);
    returns (winner, its last match or None, every match)."""
    alive = sorted(entrants, key=lambda c: id_key(c["id"]))
    matches: list[Match] = []
    round_no = 0
    while len(alive) > 1:
        round_no += 1
        nxt = []
        for i in range(0, len(alive) - 1, 2):
            a, b = alive[i], alive[i + 1]
            ran = tournament.match(project, record, track, round_no, a, b)
            if ran["answer"] is not None:
                won, decided_by = (a if ran["answer"] == "A" else b), "judge"
            else:  # no answer is a tie, broken by the next rule
                won = _tie_winner(a, b)
                decided_by = f"tie-break: {_stage(won, b if won is a else a)}"
            matches.append({"round": round_no, "a": a["id"], "b": b["id"], "winner": won["id"],
                            "decided_by": decided_by, "judge": ran})
            nxt.append(won)
        if len(alive) % 2:
            matches.append({"round": round_no, "a": alive[-1]["id"], "b": None, "winner": alive[-1]["id"],
                            "decided_by": "bye", "judge": None})
            nxt.append(alive[-1])
        alive = nxt
    final = next((m for m in reversed(matches) if m["b"] is not None), None)
    return alive[0], final, matches


def rank(project: Project, record: RunRecord, track: str, method: str,
          candidates: list[Candidate]) -> Ranked:
    """(winner, decision, loser reasons by id, extra pick-record fields) under ``method``."""
    ranked = sorted(candidates, key=_critic_key)
    extra: Extra = {"ranking": [_figures(c) for c in ranked]}
    if method == "critic_first_pass":
        winner = ranked[0]
        decision = _critic_decision(ranked)
        reasons = {c["id"]: f"ranked below {winner['id']}: {_why_below(c, winner)}" for c in ranked[1:]}
        return winner, decision, reasons, extra
    if method == "majority_vote":
        groups = _groups(ranked, lambda c: c["tree"])
        extra["tree_groups"] = [{"tree": g[0]["tree"], "members": sorted((c["id"] for c in g), key=id_key),
                                 "size": len(g)} for g in groups]
        return groups[0][0], _group_decision(method, groups, "tree_group_size"), _group_reasons(groups, "tree"), extra
    if method == "differential":
        return _rank_differential(project, record, track, ranked, extra)
    groups = _groups(ranked, _cluster_key)
    extra["clusters"] = _clusters_record(groups)
    if method == "cluster":
        return groups[0][0], _group_decision(method, groups, "cluster_size"), _group_reasons(groups, "behaviour"), extra
    return _rank_tournament(project, record, track, groups, ranked, extra)


def _rank_differential(project: Project, record: RunRecord, track: str, ranked: list[Candidate],
                       extra: Extra) -> Ranked:
    """The largest group of candidates whose ``distinguish.run`` behaved
    alike on the generated inputs (``judge/differential``); with one
    candidate nothing runs, and when the inputs cannot be had, the
    ``cluster`` rule decides and the record says why."""
    if len(ranked) < 2:
        ran: Differential = {"status": "not_run", "fallback": None,
                                          "reason": "one candidate: nothing to tell apart"}
        behaviour = None
    else:
        ran, behaviour = differential.distinguish(project, record, track, sorted(ranked, key=lambda c: id_key(c["id"])))
    extra["differential"] = ran
    if behaviour is None:
        groups = _groups(ranked, _cluster_key)
        extra["clusters"] = _clusters_record(groups)
        what = "probe behaviour"
    else:
        groups = _groups(ranked, lambda c: json.dumps(behaviour[c["id"]], sort_keys=True))
        extra["clusters"] = [{"signature": behaviour[g[0]["id"]], "members": sorted((c["id"] for c in g), key=id_key),
                              "size": len(g)} for g in groups]
        what = "behaviour on the distinguishing inputs"
    decision = _group_decision("differential", groups, "cluster_size")
    if ran["fallback"]:
        decision["fallback"] = ran["fallback"]
    return groups[0][0], decision, _group_reasons(groups, what), extra


def _rank_tournament(project: Project, record: RunRecord, track: str, groups: list[list[Candidate]],
                     ranked: list[Candidate], extra: Extra) -> Ranked:
    # Clusters tied for the largest size all enter: the cluster stage could
    # not tell them apart on behaviour, so the judge may.
    entrants = [c for g in groups if len(g) == len(groups[0]) for c in g]
    winner, final, matches = _bracket(project, record, track, entrants)
    extra["tournament"] = {"entrants": sorted((c["id"] for c in entrants), key=id_key),
                           "judge": list(record["config"]["judge"]["command"] or []), "matches": matches}
    reasons = {}
    for m in matches:
        if m["b"] is None:
            continue
        loser = m["b"] if m["winner"] == m["a"] else m["a"]
        ran = m["judge"]
        assert ran is not None  # a match that was played (not a bye) has the judge's run
        how = ("the judge chose it" if m["decided_by"] == "judge"
               else f"the judge gave no answer ({ran['error']}); {m['decided_by']}")
        reasons[loser] = f"lost to {m['winner']} in round {m['round']}: {how}"
    size_of = {c["id"]: len(g) for g in groups for c in g}
    for c in ranked:
        if c["id"] not in reasons and c is not winner:
            reasons[c["id"]] = (f"not in the bracket: its behaviour is shared by {size_of[c['id']]}, "
                                f"the largest cluster's by {len(groups[0])}")
    if final is None:  # one entrant: the cluster stage decided
        return winner, _group_decision("tournament", groups, "cluster_size"), reasons, extra
    rival_id = final["b"] if final["winner"] == final["a"] else final["a"]
    rival = next(c for c in entrants if c["id"] == rival_id)
    stage = "judge" if final["decided_by"] == "judge" else final["decided_by"].split(": ", 1)[1]
    decision: Decision = {"rule": "tournament", "stage": stage, "winner": _figures(winner, groups[0]),
                "runner_up": _figures(rival, groups[0]), "final_match": matches.index(final)}
    return winner, decision, reasons, extra


def refuse_below_threshold(cfg: FrozenConfig, winner: Candidate, track: str) -> None:
    threshold = cfg["score"]["threshold"]
    if winner["score_source"] is None and not cfg["score"]["command"] and not cfg["score"]["findings"]:
        return
    if winner["score"] is None:
        raise ParallelError(
            E.ANTI_SLOP_BELOW_THRESHOLD,
            f"the best candidate {winner['id']} of track {track} has no score: "
            f"{winner.get('score_error') or 'the score source yielded nothing'}",
            hint="fix the score command or findings file, commit, and `git parallel check` again",
        )
    if winner["score"] < threshold:
        raise ParallelError(
            E.ANTI_SLOP_BELOW_THRESHOLD,
            f"the best candidate {winner['id']} of track {track} scores {winner['score']}, below threshold {threshold}",
            hint="improve the attempts (retry) or lower score.threshold in .gitparallel.yaml for new runs",
        )


def decide(project: Project, record: RunRecord, track: str) -> tuple[PickRecord, list[tuple[str, int, str, str]]]:
    """The pick record of one track (not written) and the basis it was made from."""
    cfg = record["config"]
    method = cfg["selection"]
    candidates, losers = track_candidates(project, record, track)
    if not candidates:
        why = "; ".join(f"{l['id']}: {l['reason']}" for l in losers) or "it has no instances"
        held = [(l["id"], l["code"]) for l in losers if l["code"] in (E.PROTECTED_PATH_CHANGED, E.REACHES_HARNESS)]
        protected = [i for i, _ in held]
        if held:
            raise ParallelError(
                held[0][1],
                f"no instance of track {track} of {record['task']!r} can be picked automatically ({why})",
                hint=f"read what each changed with `git parallel show {record['task']} {protected[0]}`; to land it "
                     f"anyway, `git parallel pick {record['task']} --instance {protected[0]} --reason WHY`")
        raise ParallelError(
            E.SELECTION_NO_PASS,
            f"no instance of track {track} of {record['task']!r} has fresh, complete, passing evidence ({why})",
            hint=f"run `git parallel check {record['task']}` after the agents finish, or retry failed instances",
        )
    winner, decision, reasons, extra = rank(project, record, track, method, candidates)
    refuse_below_threshold(cfg, winner, track)
    losers += [{"id": i, "code": E.SELECTION_NO_PASS, "reason": r} for i, r in reasons.items()]
    losers.sort(key=lambda l: id_key(l["id"]))
    # ``extra``: what the rule adds (ranking, tree_groups, clusters, tournament).
    pick = cast(PickRecord, {
        "schema_version": SCHEMA_VERSION, "run_id": record["run_id"], "task": record["task"], "track": track,
        "winner": {**{k: winner[k] for k in ("id", "attempt", "commit", "tree", "evidence_sha256")},
                   **({"agent": winner["agent"]} if winner.get("agent") else {})},
        "verdict": "pass", "score": winner["score"], "proof_issued_at": winner["proof_issued_at"],
        "selection_method": method, "decision": decision, **extra, "arbiter": ARBITER,
        "merge_policy": cfg["merge"]["policy"], "losers": losers, "created_at": utcnow(),
    })
    return pick, candidate_basis(candidates)


def choose(project: Project, record: RunRecord, track: str) -> PickRecord:
    """Compute (without writing) the pick record of one track by its rule."""
    return decide(project, record, track)[0]
