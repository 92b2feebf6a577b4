"""The re-proof of a landing before the base moves (``merge.verify``): the
enforced gates run again on the exact tree that will land, in a clean
checkout, so that evidence, however it was made, is never the only thing
that lets a tree land.  Every refusal here happens before anything moved."""

from __future__ import annotations

from typing import Any

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.model import RunRecord, Winner
from gitflow_parallel.state.project import Project


def verify_mode(cfg: dict[str, Any]) -> str:
    """``merge.verify`` of a record; records frozen before the three modes hold a bool."""
    mode = cfg.get("verify", "always")
    if isinstance(mode, bool):
        return "changed" if mode else "never"
    return str(mode)


def verify_landing(project: Project, record: RunRecord, commit: str, winners: list[Winner],
                   onto: str) -> list[dict[str, Any]]:
    """Re-prove the landing ``commit``: the enforced gates of each track on the exact
    tree that will land, judged with the protected paths of ``onto`` (the
    commit the base is at), in a clean checkout.  Evidence, however it was
    made, is then never the only thing that lets a tree land.  ``changed``
    skips the tracks whose winner's own tree is the landing tree; ``never``
    trusts the evidence."""
    from gitflow_parallel.judge import gates  # only a landing needs it: a merged run is said again without

    mode = verify_mode(record["config"]["merge"])
    if mode == "never":
        return []
    tree = project.repo.tree_of(commit)
    results = []
    for pick, inst in winners:
        if mode == "changed" and pick["winner"]["tree"] == tree:
            continue
        outcome = gates.verify_tree(project, record, pick["track"], commit, base=onto)
        results.append({
            "track": pick["track"], "passed": outcome["passed"], "commit": commit, "tree": tree,
            "judged_commit": outcome["judged_commit"], "protected_changes": outcome["protected_changes"],
            "refused": outcome["refused"], "checkout": "clean",
            "gates": [{k: g.get(k) for k in ("name", "mode", "passed", "exit_code", "duration_s", "log", "error")}
                      for g in outcome["gates"]]})
        if outcome["refused"]:
            raise ParallelError(
                outcome["refused"]["code"], f"cannot land track {pick['track']}: {outcome['refused']['message']}",
                hint="nothing moved; retry the instance without touching protected paths")
        if not outcome["passed"]:
            failed = [g["name"] for g in outcome["gates"] if not g.get("passed") and g.get("mode") == "enforced"]
            same = pick["winner"]["tree"] == tree
            raise ParallelError(
                E.EVIDENCE_MISMATCH if same else E.MERGE_CONFLICT,
                f"the tree {tree[:12]} that would land fails enforced gate(s) {', '.join(failed) or '?'} of track "
                f"{pick['track']} in a clean checkout"
                + (", although its evidence says it passed (the evidence is stale or was forged)" if same
                   else ", although the winner passed alone (a semantic conflict)"),
                hint="nothing moved; " + (f"check it again (`git parallel check {record['task']}`) and see the gate "
                                          "logs" if same else
                                          f"start a new attempt from the current base (`git parallel retry "
                                          f"{record['task']} {inst['id']} --onto-current`, then run, check, "
                                          "pick), or merge by hand"),
            )
    return results
