"""``git parallel check``: judge every succeeded (or named) instance and
record its evidence.

The engine is ``judge/check`` (clean checkouts, gates and scores, the pack,
its binding and notes), because ``worker`` and ``run --until-pass`` judge
through it too; this module is the verb's contract: the result and when it
counts as passed (exit 0), and which instances it leaves alone because their
evidence is fresh."""

from __future__ import annotations


from gitflow_parallel import evidence
from gitflow_parallel.git import hooks
from gitflow_parallel.judge import check as engine
from gitflow_parallel.judge import pace
from gitflow_parallel.proc import sandbox
from gitflow_parallel.state.project import Project
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord
from gitflow_parallel.shapes.results import CheckResult, SkippedInstance


def check(project: Project, task: str, instances: list[str] | None = None, gates: list[str] | None = None,
          jobs: int | None = None, again: bool = False,
          progress: pace.Report | None = None) -> CheckResult:
    """Judge the instances; refusals before anything runs raise, what goes
    wrong for one instance afterwards is reported under ``errors``.

    Without ``instances``, ``gates`` or ``again``, an instance whose evidence
    is fresh and complete (its branch has not moved since it was judged, under
    the same configuration) is not judged again: it is listed under
    ``skipped``, and its verdict still counts for the exit status."""
    skipped: list[SkippedInstance] = []

    def fresh(record: RunRecord, inst: InstanceRecord) -> bool:
        state = evidence.freshness(record, inst, project.tip(inst))
        binding = inst["evidence"]
        if not state.fresh or state.pack is None or not state.pack.get("complete") or binding is None:
            return False  # (fresh evidence is bound: binding is None only when it is not)
        pack = state.pack
        skipped.append({"id": inst["id"], "track": inst["track"], "attempt": inst["attempt"],
                        "commit": pack["commit"], "verdict": pack["verdict"], "score": pack.get("score"),
                        "evidence": binding, "refused": pack.get("refused"),
                        "failing": [g["name"] for g in pack.get("gates") or []
                                    if g.get("mode") == "enforced" and not g.get("passed")],
                        # a hidden-tests gate's counts: all of its output that is kept
                        "hidden": {g["name"]: (g["hidden"].get("summary") or "no test counts in its output")
                                   for g in pack.get("gates") or [] if g.get("hidden") and not g.get("skipped")}})
        return True

    every = not (instances or gates or again)
    result = engine.check(project, task, instances=instances, gates=gates, jobs=jobs, skip=fresh if every else None,
                          progress=progress)
    # Said loudly: a hook manager's reinstall took away the gate on plain git;
    # and where the gates ran without the namespace layer.
    said = sandbox.fallback_warning(project.store.load(task)["config"])
    return {**result, "skipped": skipped, "warnings": hooks.gone_warnings(project.repo) + ([said] if said else [])}


def check_ok(result: CheckResult) -> bool:
    """What the exit status says: no instance failed its verdict or its check
    (the skipped ones by the verdict of their fresh evidence)."""
    return not result["errors"] and all(i["verdict"] == "pass"
                                        for i in result["instances"] + result.get("skipped", []))
