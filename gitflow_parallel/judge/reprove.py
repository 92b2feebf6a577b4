"""The re-proof of a landing before the base moves (``merge.verify``): the
enforced gates run again on the exact tree that will land, in a clean
checkout, so that evidence of unknown making is never the only thing that
lets a tree land.  Every refusal here happens before anything moved.

``auto`` (the default) runs no gate twice on one tree: a track whose
landing tree is exactly its winner's tree lands on that winner's evidence
pack, when the pack is one this machine's ``check`` made in a pristine
sandboxed checkout by the run's frozen config, with the protected paths of
the commit it lands on (:func:`rests_on` names each condition).  A re-proof
would judge what that check judged: the landing tree with those protected
paths restored, which is the winner's tree itself when it changed none (a
restoring one is rested on only where the changes it restored are tests it
added).  Everything else is re-proved: a merged tree no
gate saw, evidence collected from a worker, evidence judged without the
namespace layer, or protected paths from another commit than the one the
landing goes onto.  ``always`` re-proves every landing, ``changed`` trusts
any fresh evidence of the landing tree, ``never`` trusts the evidence."""

from __future__ import annotations

from collections.abc import Mapping

from gitflow_parallel import errors as E
from gitflow_parallel import evidence
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.model import InstanceRecord, PickRecord, RunRecord, Winner
from gitflow_parallel.state.picks import is_forced
from gitflow_parallel.state.project import Project
from gitflow_parallel.config_schema import MergeConfig
from gitflow_parallel.shapes.pack import Judged
from gitflow_parallel.shapes.records import Reproof, RestsOn

# What a judged command's sandbox must have held for its verdict to stand
# for a second run: its own pid and mount namespaces (``/`` read-only) and
# the pristine checkout under a throwaway overlay, and its git seeing the
# history and the judged commit alone (git/judged_view), not only Landlock.
PRISTINE_LAYERS = ("pid", "mount", "overlay", "git-view")


def verify_mode(cfg: MergeConfig) -> str:
    """``merge.verify`` of a record; records frozen before the three modes hold a bool."""
    mode = cfg.get("verify", "always")
    if isinstance(mode, bool):
        return "changed" if mode else "never"
    return str(mode)


def rests_on(record: RunRecord, pick: PickRecord, inst: InstanceRecord, tree: str,
             onto: str, judged: Judged | None = None) -> tuple[RestsOn | None, str]:
    """The evidence a landing of ``tree`` onto ``onto`` can rest on without
    running its gates again, or None and why not.  The pack must be the
    one the pick was made from, fresh, passing, made here (not collected
    from a worker), by the run's frozen config, in a clean checkout under
    the namespace layer, with the protected paths of ``onto``, and be the
    evidence of ``tree`` itself, having judged what a re-proof would:
    ``tree``, or, given ``judged`` (``gates.what_is_judged`` of the landing
    onto ``onto``, worked out here from git, not read from the pack),
    ``tree`` with the protected paths it changed taken from ``onto``, when
    none of them keeps an attempt out of an automatic pick (a test it added
    under a protected folder, run in the added-tests stage; ``judged_tree``
    in the result says so)."""
    pack = evidence.load(inst)
    binding = inst.get("evidence")
    why = _distrust(record, pick, inst, pack, tree, onto) or _restored_differently(pack, tree, judged)
    if why is not None or pack is None:
        return None, why or "no evidence pack"
    rests: RestsOn = {
        "track": pick["track"], "instance": inst["id"], "attempt": inst["attempt"],
        "pack_sha256": binding["sha256"] if binding else None, "pack": binding["path"] if binding else None,
        "commit": pack["commit"], "tree": pack["tree"], "proof_issued_at": pack.get("proof_issued_at"),
        "fence": pack.get("fence"), "reproved": False}
    if pack.get("judged_tree") != pack["tree"]:
        rests["judged_tree"] = pack["judged_tree"]
    return rests, "fresh pristine evidence made here"


def _restored_differently(pack: Mapping[str, object] | None, tree: str, judged: Judged | None) -> str | None:
    """Why a pack whose gates judged ``tree`` with protected paths restored
    does not stand for a re-proof of it, or None (also when it restored none)."""
    if pack is None or pack.get("judged_tree") == tree:
        return None
    if judged is None:
        return "its gates judged the tree with protected paths restored"
    if judged["protected_blocking"]:
        return (f"it changed protected path(s) that keep an attempt out of an automatic pick "
                f"({', '.join(judged['protected_blocking'][:5])})")
    if judged["judged_tree"] != pack.get("judged_tree"):
        return "its gates judged another tree than a re-proof would"
    return None


def _distrust(record: RunRecord, pick: PickRecord, inst: InstanceRecord, pack: Mapping[str, object] | None,
              tree: str, onto: str) -> str | None:
    """The first reason not to rest a landing of ``tree`` on ``pack``, or None."""
    layers = pack.get("layers") if pack is not None else None
    commit = pack.get("commit") if pack is not None else None
    binding = inst.get("evidence")
    reasons = (
        (pack is None, "its evidence pack is missing or does not match its sha256"),
        (is_forced(pick), "a person picked it with --force"),
        (inst.get("origin") == "remote" or bool(inst.get("worker")), "its evidence was collected from a worker"),
        (record["config"].get("sandbox") == "off", "the run's config turns the sandbox off"),
        (pack is not None and pack.get("origin") != evidence.ORIGIN, "the pack was not made by git-parallel"),
        (pack is not None and (binding["sha256"] if binding else None) != pick["winner"].get("evidence_sha256"),
         "the pack is not the one the pick was made from"),
        (pack is not None and pack.get("config_sha256") != record["config_sha256"],
         "the pack was made under another configuration"),
        (pack is not None and not evidence.freshness(record, inst, commit if isinstance(commit, str) else None).passing,
         "the evidence is not fresh and passing"),
        (pack is not None and pack.get("commit") != pick["winner"]["commit"], "the pack proves another commit"),
        (pack is not None and pack.get("tree") != tree, "the landing tree is not the tree its gates judged"),
        (pack is not None and not isinstance(pack.get("judged_tree"), str), "the pack does not say what it judged"),
        (pack is not None and pack.get("checkout") != "clean", "it was not judged in a clean checkout"),
        (pack is not None and pack.get("fence") != "namespace",
         f"it was judged without the namespace layer (sandbox: {(pack or {}).get('fence')})"),
        (isinstance(layers, list) and not set(PRISTINE_LAYERS) <= set(layers),
         f"its sandbox lacked a layer of {', '.join(PRISTINE_LAYERS)}"),
        (pack is not None and pack.get("base_commit") != onto,
         "its protected paths came from another commit than the one it lands on"),
    )
    return next((why for bad, why in reasons if bad), None)


def verify_landing(project: Project, record: RunRecord, commit: str, winners: list[Winner],
                   onto: str) -> tuple[list[Reproof], list[RestsOn]]:
    """Re-prove the landing ``commit``: the enforced gates of each track on the exact
    tree that will land, judged with the protected paths of ``onto`` (the
    commit the base is at), in a clean checkout.  Evidence, however it was
    made, is then never the only thing that lets a tree land.  ``changed``
    skips the tracks whose winner's own tree is the landing tree; ``never``
    trusts the evidence; ``auto`` skips the tracks whose evidence
    :func:`rests_on` accepts.  Returns the re-proofs run (each with ``why``
    under ``auto``) and the evidence the other tracks rest on."""
    from gitflow_parallel.judge import gates  # only a landing needs it: a merged run is said again without

    mode = verify_mode(record["config"]["merge"])
    if mode == "never":
        return [], []
    tree = project.repo.tree_of(commit)
    results: list[Reproof] = []
    rested: list[RestsOn] = []
    for pick, inst in winners:
        if mode == "changed" and pick["winner"]["tree"] == tree:
            continue
        why = None
        if mode == "auto":
            judged = gates.what_is_judged(project.repo.pygit, record, commit, onto)
            proof, why = rests_on(record, pick, inst, tree, onto, judged)
            if proof is not None:
                rested.append(proof)
                continue
        outcome = gates.verify_tree(project, record, pick["track"], commit, base=onto)
        reproof: Reproof = {
            "track": pick["track"], "passed": outcome["passed"], "commit": commit, "tree": tree,
            "judged_commit": outcome["judged_commit"], "protected_changes": outcome["protected_changes"],
            "refused": outcome["refused"], "checkout": "clean",
            "gates": [{"name": g["name"], "mode": g["mode"], "passed": g["passed"], "exit_code": g["exit_code"],
                       "duration_s": g.get("duration_s"), "log": g.get("log"), "error": g["error"]}
                      for g in outcome["gates"]]}
        if why:
            reproof["why"] = why
        results.append(reproof)
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
    return results, rested
