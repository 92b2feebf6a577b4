"""Git hooks that hold merges made with plain git to the same rule as
``git parallel merge``: only a track's picked winner, with fresh passing
evidence for the exact commit, may land.

libgit2 runs no hooks, so ``git parallel merge`` applies its gates itself;
these hooks are for merges that people and other tools make with git.  This
module is what the scripts start, ``git parallel _hook``, when their sh fast
path cannot decide; ``commands/hooks_install`` writes the scripts.

What each hook enforces, the fast path and the live index, installation
beside other hooks: docs/hooks.md.  The rule an update is judged by
(``_judge``), what is read, exit statuses, checkout events and the limits
git sets: docs/hooks.md, "How a hook decides".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

# Kept small at import time: ``git parallel _hook`` runs on hot paths (every
# merge into a live base, every checkout of an instance branch).  The store
# (YAML, filelock), pygit2, and what only install needs are imported where
# they are used.
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.state.live import LiveRun, read_live
from gitflow_parallel.git.plain import git_out
from gitflow_parallel.errors import HOOK_INTERNAL, HOOK_REFUSED
from gitflow_parallel.shapes.records import InstanceRecord, RunRecord

if TYPE_CHECKING:
    from gitflow_parallel.state.vouch import Copy
    from gitflow_parallel.state.project import Project

ZERO_OID = frozenset({"0" * 40, "0" * 64})
# The commit an update lands (None: not made yet, a merge's index), its
# tree, its parents and the branch it moves (None: not a branch, or not
# known); asked only once a winner is approved.
Made = Callable[[], "tuple[str | None, str, list[str], str | None]"]


# -- what an update brings in ----------------------------------------------------------
@dataclass
class Owner:
    """A ref holding instance commits: an instance branch or an archived attempt."""

    run: LiveRun
    instance: str
    ref: str
    tip: str


@dataclass
class Verdict:
    allowed: bool
    code: str | None = None
    message: str = ""
    hint: str | None = None


def _rev_list(heads: list[str], exclude: list[str]) -> list[str]:
    if not heads:
        return []
    # --ignore-missing: a landed commit a finished run names may be gone (a
    # rewritten base, gc); leaving it out only keeps more commits at stake.
    return git_out(["rev-list", "--ignore-missing", *heads, "--not", *exclude, "--"]).split()


def _base_commit(run: LiveRun, common_dir: Path) -> str:
    if run.base_commit:
        return run.base_commit
    # An index written before it carried the base commit: read the record.
    from gitflow_parallel.state.store import Store

    return str(Store(common_dir / "parallel").load(run.task)["base"]["commit"])


def _outside(run: LiveRun, common_dir: Path) -> list[str]:
    """What no instance commit of ``run`` is in the history of: its base
    commit, and for a merged run what landed."""
    return [_base_commit(run, common_dir), *run.landed]


def _owners(runs: list[LiveRun]) -> list[Owner]:
    patterns = []
    for run in runs:
        patterns += [f"refs/heads/parallel/{run.task}", f"refs/parallel/archive/{run.run_id}"]
    out = git_out(["for-each-ref", "--format=%(objectname) %(refname)", *patterns]) if patterns else ""
    owners = []
    for line in out.splitlines():
        oid, _, ref = line.partition(" ")
        for run in runs:
            if ref in run.branches:
                owners.append(Owner(run, run.branches[ref], ref, oid))
            elif ref.startswith(f"refs/parallel/archive/{run.run_id}/"):
                parts = ref.split("/")
                if len(parts) == 6:  # refs/parallel/archive/<run_id>/<instance>/<attempt>
                    owners.append(Owner(run, parts[4], ref, oid))
    return owners


def _hint(code: str | None, task: str, inst_id: str, fallback: str | None = None) -> str:
    if code == E.SELECTION_NO_PASS:
        return (f"only a track's picked winner may land: `git parallel status {task}` shows the pick; "
                f"`git parallel check {task}` and `git parallel pick {task}` make one, and "
                f"`git parallel merge {task}` lands it")
    if code == E.EVIDENCE_MISMATCH:
        return (f"the evidence does not prove this exact commit: merge the picked commit itself, let "
                f"`git parallel merge {task}` land it, or prove the new tip with "
                f"`git parallel check {task} --instance {inst_id}`")
    if code == E.EVIDENCE_MISSING:
        return (f"`git parallel check {task} --instance {inst_id}` writes its evidence; then "
                f"`git parallel pick {task}` and `git parallel merge {task}`")
    return fallback or f"`git parallel validate {task}` reports what is inconsistent"


def _judge(common_dir: Path, runs: list[LiveRun], owners: list[Owner], heads: list[str], old: list[str],
           candidates_of: Callable[[], list[str]], doing: str, made: Made) -> Verdict:
    """Apply the rule of docs/hooks.md to an update bringing in
    ``rev-list heads --not old``.  ``candidates_of`` gives the commits that
    may be approved (asked only when an instance commit is at stake);
    ``made`` the tree and parents of the commit that lands;
    ``doing`` names the update in messages."""
    live = [run for run in runs if not run.finished]
    by_run: dict[str, set[str]] = {}
    for run in live:
        tips = sorted({o.tip for o in owners if o.run is run})
        commits = set(_rev_list(tips, _outside(run, common_dir))) if tips else set()
        if commits:
            by_run[run.run_id] = commits
    # A finished run has no winner left to approve: whatever of it did not
    # land lost.  Its runs' commits are found together, by one walk.
    done = _landed_not(common_dir, [run for run in runs if run.finished], owners)
    brought = _rev_list(heads, old) if by_run or done or any(run.lost for run in runs) else []
    if any(run.lost for run in runs):
        from gitflow_parallel.state import vouch  # only where a loser's patch may be at stake

        copy = vouch.loser_copy(runs, brought, set().union(done, *by_run.values()))
        if copy is not None:
            return _copy_refusal(doing, copy)
    brought_set = set(brought)
    if done & brought_set:
        return _finished_refusal(common_dir, runs, owners, done & brought_set, brought, heads, doing)
    if not by_run:
        return Verdict(True)
    involved = [run for run in live if by_run.get(run.run_id, set()) & brought_set]
    if not involved:
        return Verdict(True)

    # An instance commit is at stake: now read records, picks and evidence.
    from gitflow_parallel.state.project import Project

    project = Project.open(common_dir)
    candidates = candidates_of()
    approved, records = _approved_winners(project, involved, candidates)
    at_stake = set().union(*(by_run[r] for r in records)) if records else set()
    if approved:
        remaining = [c for c in _rev_list(heads, old + [a for a, _, _ in approved]) if c in at_stake]
    else:
        remaining = [c for c in brought if c in at_stake]
    if not remaining:
        if approved:
            return _vouch(project, doing, approved, made())
        return Verdict(True)

    return _explain(project, common_dir, owners, records, by_run, remaining, brought_set, candidates, doing)


def _approved_winners(project: Project, involved: list[LiveRun], candidates: list[str]
                      ) -> tuple[list[tuple[str, RunRecord, InstanceRecord]], dict[str, RunRecord]]:
    """The picked winners among ``candidates`` whose evidence holds, and the
    records of the runs involved (by run id)."""
    from gitflow_parallel.state import picks
    from gitflow_parallel.model import find_instance

    approved: list[tuple[str, RunRecord, InstanceRecord]] = []
    records: dict[str, RunRecord] = {}
    for run in involved:
        record = project.store.load(run.task)
        if record["run_id"] != run.run_id:
            continue  # the index lagged behind a run that was just replaced
        # A finished run is listed while it keeps losers: they are judged
        # against its picks as before the merge (a loser still lost).
        records[run.run_id] = record
        for track in record["tracks"]:
            pick = picks.load_pick(project, record, track)
            if pick is None or pick["winner"]["commit"] not in candidates:
                continue
            inst = find_instance(record, pick["winner"]["id"])
            ok, _, _ = picks.winner_check(project, record, inst, pick["winner"]["commit"])
            if ok:
                approved.append((pick["winner"]["commit"], record, inst))
    return approved, records


def _explain(project: Project, common_dir: Path, owners: list[Owner], records: dict[str, RunRecord],
             by_run: dict[str, set[str]], remaining: list[str], brought_set: set[str], candidates: list[str],
             doing: str) -> Verdict:
    """Refused.  Explain with the instance the newest blocked commit belongs
    to, preferring one whose tip is being merged, then a branch over an
    archived attempt; winner_check says why it may not land (a loser, no
    pick yet, stale evidence, another commit than the picked one)."""
    from gitflow_parallel.state import picks
    from gitflow_parallel.model import find_instance

    first = remaining[0]
    culprit = None
    order = sorted((o for o in owners if o.run.run_id in records),
                   key=lambda o: (o.tip not in candidates, o.ref.startswith("refs/parallel/"), o.instance))
    for owner in order:
        if owner.tip == first or first in _rev_list([owner.tip], [_base_commit(owner.run, common_dir)]):
            culprit = owner
            break
    if culprit is None:
        # Cannot happen (every commit at stake came from an owner's range),
        # but if it did, what cannot be explained still does not land.
        record = records[next(r for r in records if first in by_run[r])]
        return Verdict(False, E.SELECTION_NO_PASS,
                       f"{doing} would bring in {first[:12]}, a commit of run {record['run_id']} of task "
                       f"{record['task']!r} that is not a picked winner's", _hint(E.SELECTION_NO_PASS, record["task"], ""))
    record = records[culprit.run.run_id]
    inst = find_instance(record, culprit.instance)
    mine = set(_rev_list([culprit.tip], [_base_commit(culprit.run, common_dir)]))
    commit = next(c for c in remaining if c in mine) if culprit.tip not in brought_set else culprit.tip
    ok, code, message = picks.winner_check(project, record, inst, commit)
    if ok:  # the winner's own commit, but brought in by something else than itself
        code, message = E.SELECTION_NO_PASS, "only the picked commit itself, or a merge of it, may land"
    return _refusal(doing, record, inst, code, message)


def _landed_not(common_dir: Path, finished: list[LiveRun], owners: list[Owner]) -> set[str]:
    """The instance commits of the ``finished`` runs that did not land: one
    walk from all their tips, leaving out every one's base and landing (a
    run's loser is in no other run's landing)."""
    ids = {run.run_id for run in finished}
    tips = sorted({o.tip for o in owners if o.run.run_id in ids})
    if not tips:
        return set()
    return set(_rev_list(tips, sorted({c for run in finished for c in _outside(run, common_dir)})))


def _finished_refusal(common_dir: Path, runs: list[LiveRun], owners: list[Owner], blocked: set[str],
                      brought: list[str], heads: list[str], doing: str) -> Verdict:
    """Refused: ``brought`` holds commits of a merged or aborted run that did
    not land (``blocked``).  Named by the instance the newest of them
    belongs to, preferring one whose tip is being brought in, then a kept
    branch."""
    first = next(c for c in brought if c in blocked)
    mine = sorted((o for o in owners if o.run.finished),
                  key=lambda o: (o.tip not in heads, o.ref.startswith("refs/parallel/"), o.instance))
    culprit = next((o for o in mine if o.tip == first or first in _rev_list([o.tip], _outside(o.run, common_dir))),
                   None)
    run = culprit.run if culprit else next(r for r in runs if r.finished)
    who = (f"instance {culprit.instance} of task {run.task!r} ({_short(culprit.ref)})" if culprit
           else f"task {run.task!r}")
    cleanup = (f"`git parallel cleanup {run.task}` removes its kept branches and "
               if culprit is not None and culprit.ref.startswith("refs/heads/") else "")
    return Verdict(False, E.SELECTION_NO_PASS,
                   f"{doing} would bring in {first[:12]}, a commit of {who}, {_finished_why(run)}; a finished "
                   "run's losing attempts stay refused until the run is pruned",
                   cleanup + _prune_hint(run.task))


def _finished_why(run: LiveRun) -> str:
    if run.finished == "merged":
        return f"which lost the pick when run {run.run_id} was merged"
    return f"of run {run.run_id}, which was {run.finished}: none of its attempts landed"


def _prune_hint(task: str) -> str:
    return ("`git parallel prune --older-than 0` removes the refs of every finished run (plain "
            "`git parallel prune`, of those finished over 30 days ago), and then git merges its commits like any "
            f"other; to land this work through git-parallel, start a new run (`git parallel spawn {task}`)")


def _short(ref: str) -> str:
    return ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref


def _vouch(project: Project, doing: str, approved: list[tuple[str, RunRecord, InstanceRecord]],
           landing: tuple[str | None, str, list[str], str | None]) -> Verdict:
    """The winner's evidence holds; the commit that lands must carry what a
    merge of it gives (``state/vouch``), else it lands other files, and,
    onto the run's base, the very tree the check judged (``_untested``)."""
    from gitflow_parallel.state import vouch

    names = ", ".join(f"instance {i['id']} of {r['task']} ({c[:12]})" for c, r, i in approved)
    said = f"git-parallel: {doing}: the picked winner {names} has fresh, passing evidence"
    commit, tree, parents, ref = landing
    if commit in {c for c, _, _ in approved}:  # the winner's commit itself
        return Verdict(True, message=said)
    checked = vouch.check_tree(project.repo.pygit, tree, parents)
    _, record, inst = approved[0]
    if checked.unmergeable:
        return _refusal(doing, record, inst, E.SELECTION_NO_PASS,
                        "the clean merge of its parents conflicts, so the tree it lands cannot be checked "
                        "against the winner's; merge the winners one at a time")
    if checked.differs:
        shown = ", ".join(checked.differs[:10]) + (" …" if len(checked.differs) > 10 else "")
        return _refusal(doing, record, inst, E.SELECTION_NO_PASS,
                        f"the tree it lands differs from {checked.compared_with} "
                        f"({', '.join(p[:12] for p in parents)}) at {shown}; only the picked commit, or a merge "
                        "of it that changes nothing else, may land")
    said += f"; the tree is {checked.compared_with}"
    if checked.conflicted:
        said += (f" but for {len(checked.conflicted)} conflicted path(s) resolved by hand, which were not checked: "
                 + ", ".join(checked.conflicted[:10]))
    refused, warning = _untested(project, doing, approved, tree, ref)
    return refused or Verdict(True, message=said + (f"\n{warning}" if warning else ""))


def _untested(project: Project, doing: str, approved: list[tuple[str, RunRecord, InstanceRecord]], tree: str,
              ref: str | None) -> tuple[Verdict | None, str | None]:
    """Refused (or, under ``merge.verify: never``, let through with a
    warning, the second item) when the update moves a run's base to a tree that is not the
    tree its winner's check judged: a base that moved since the check, a
    ``merge=union`` file, a join of several tracks.  ``git parallel merge``
    re-proves such a tree before the base moves; a plain merge cannot.
    Neither when the tree is the judged one, or the branch is no run's base."""
    from gitflow_parallel.judge.reprove import verify_mode

    for commit, record, inst in approved:
        judged = project.repo.tree_of(commit)
        if ref != record["base"]["ref"] or judged == tree:
            continue
        why = (f"the tree it lands ({tree[:12]}) is not the tree its check judged ({judged[:12]}, the winner's): "
               f"{_short(record['base']['ref'])} moved since the check, or the merge joins more than the winner, "
               "so it lands changes no gate ran with")
        if verify_mode(record["config"]["merge"]) == "never":
            return None, (f"git-parallel: warning: {doing}: {why}; no check judged it, and the run's "
                          "merge.verify: never lets it through (`git parallel merge` would not re-prove it either)")
        return Verdict(False, E.EVIDENCE_MISMATCH,
                       f"{doing} would bring in commits of instance {inst['id']} of task {record['task']!r} "
                       f"({inst['branch']}, run {record['run_id']}): {why}",
                       f"`git parallel merge {record['task']}` lands it: it re-proves the merged tree with the "
                       "enforced gates before the base moves"), None
    return None, None


def _copy_refusal(doing: str, copy: Copy) -> Verdict:
    run = copy.run
    if run.finished:
        return Verdict(False, E.SELECTION_NO_PASS,
                       f"{doing} would bring in {copy.commit[:12]}, whose patch-id ({copy.patch_id[:12]}) is that of "
                       f"{copy.original[:12]} of instance {copy.instance} of task {run.task!r}, "
                       f"{_finished_why(run)}: a cherry-pick or squash of a losing attempt; a finished run's "
                       "losing attempts stay refused until the run is pruned",
                       f"{_prune_hint(run.task)}; after a refused cherry-pick, `git cherry-pick --abort`")
    return Verdict(False, E.SELECTION_NO_PASS,
                   f"{doing} would bring in {copy.commit[:12]}, whose patch-id ({copy.patch_id[:12]}) is that of "
                   f"{copy.original[:12]} of instance {copy.instance} of task {run.task!r} (run "
                   f"{run.run_id}), which lost its pick: a cherry-pick or squash of a losing attempt",
                   f"a losing attempt lands only by a person's `git parallel pick {run.task} --instance "
                   f"{copy.instance}` then `git parallel merge {run.task}`; after a refused cherry-pick, "
                   "`git cherry-pick --abort`")


def _refusal(doing: str, record: RunRecord, inst: InstanceRecord, code: str | None, message: str) -> Verdict:
    code = code or E.SELECTION_NO_PASS
    return Verdict(False, code,
                   f"{doing} would bring in commits of instance {inst['id']} of task {record['task']!r} "
                   f"({inst['branch']}, run {record['run_id']}): {message}",
                   _hint(code, record["task"], inst["id"]))


def _describe(oid: str, owners: list[Owner], name: str | None = None) -> str:
    """An oid named by the instance branch it is the tip of, where it is
    one, else by ``name`` (what ``git merge`` was given)."""
    for owner in owners:
        if owner.tip == oid and owner.ref.startswith("refs/heads/"):
            return f"{owner.ref[len('refs/heads/'):]} ({oid[:12]})"
    return f"{name} ({oid[:12]})" if name and name != oid else oid[:12]


# -- the three hooks -----------------------------------------------------------------
def merge_heads(environ: dict[str, str] | None = None) -> list[str]:
    """The commits ``git merge`` is merging, as pre-merge-commit can see them.

    git writes MERGE_HEAD only when it stops short of committing, so while
    pre-merge-commit runs there is none; but ``git merge`` exports
    ``GITHEAD_<oid>=<name>`` for every head it merges (for the strategies'
    labels), octopus included.  MERGE_HEAD, every line of it, is the
    fallback for a git that does write it first."""
    env = os.environ if environ is None else environ
    heads = sorted(key[len("GITHEAD_"):] for key in env
                   if key.startswith("GITHEAD_") and len(key) - len("GITHEAD_") in (40, 64))
    if heads:
        return heads
    path = Path(git_out(["rev-parse", "--git-path", "MERGE_HEAD"]).strip())
    try:
        return [line.split()[0] for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        one = git_out(["rev-parse", "-q", "--verify", "MERGE_HEAD^{commit}"], check=False).strip()
        return [one] if one else []


def check_merge(common_dir: Path) -> Verdict:
    """pre-merge-commit: judge the merge heads against HEAD."""
    runs = list(read_live(common_dir / "parallel").values())
    if not runs:
        return Verdict(True)
    heads = merge_heads()
    if not heads:
        return Verdict(True)
    head = git_out(["rev-parse", "-q", "--verify", "HEAD^{commit}"], check=False).strip()
    owners = _owners(runs)
    doing = "merging " + ", ".join(_describe(h, owners, os.environ.get(f"GITHEAD_{h}")) for h in heads)

    def made() -> tuple[str | None, str, list[str], str | None]:
        # The tree git is about to commit: the index, as the merge left it.
        branch = git_out(["symbolic-ref", "-q", "HEAD"], check=False).strip() or None
        return None, git_out(["write-tree"]).strip(), ([head] if head else []) + heads, branch

    verdict = _judge(common_dir, runs, owners, heads, [head] if head else [], lambda: heads, doing, made)
    if not verdict.allowed:
        # git leaves the merge in progress (MERGE_HEAD, staged changes).
        verdict.hint = f"{verdict.hint}; `git merge --abort` puts the worktree back as it was"
    return verdict


def check_ref_updates(common_dir: Path, lines: list[str]) -> Verdict:
    """reference-transaction (prepared): judge each update of a live base ref."""
    runs = list(read_live(common_dir / "parallel").values())
    notes = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        old, new, ref = parts
        mine = [r for r in runs if r.base_ref == ref]
        if not mine or new in ZERO_OID or old == new:
            continue  # not a live base, a deletion, or no move
        if old in ZERO_OID:
            # git passes no old value for a forced update: the ref's value now
            # (still the old one while the transaction is only prepared).
            old = git_out(["rev-parse", "-q", "--verify", f"{ref}^{{commit}}"], check=False).strip() or old
        exclude = [] if old in ZERO_OID else [old]
        short = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref
        owners = _owners(mine)
        doing = f"moving {short} to {_describe(new, owners)}"

        def new_and_parents(new: str = new) -> list[str]:
            return git_out(["rev-list", "--parents", "-n", "1", new]).split() or [new]

        def made(new: str = new, ref: str = ref) -> tuple[str | None, str, list[str], str | None]:
            return new, git_out(["rev-parse", f"{new}^{{tree}}"]).strip(), new_and_parents(new)[1:], ref

        verdict = _judge(common_dir, mine, owners, [new], exclude, new_and_parents, doing, made)
        if not verdict.allowed:
            verdict.message += f"; the update was aborted and {short} stays at {old[:12]}"
            if _checked_out_here(ref):
                # git merge --ff-only and git reset move the files and the
                # index before the ref, and do not undo that when the ref
                # update is refused.
                verdict.hint = (f"{verdict.hint}; git may already have put the refused commit's files in this "
                                "worktree and index: `git reset --merge` puts them back to HEAD, keeping unstaged "
                                "changes")
            return verdict
        if verdict.message:
            notes.append(verdict.message)
    return Verdict(True, message="\n".join(notes))


def _checked_out_here(ref: str) -> bool:
    """Is ``ref`` the branch of the worktree the hook runs in?  receive-pack
    (``git push .``) runs hooks inside the git dir with ``GIT_DIR=.``, where
    git takes the git dir itself for a worktree; no files were touched there."""
    git_dir = git_out(["rev-parse", "--absolute-git-dir"], check=False).strip()
    if not git_dir or os.path.realpath(git_dir) == os.path.realpath(os.getcwd()):
        return False
    return git_out(["symbolic-ref", "-q", "HEAD"], check=False).strip() == ref


def _read_record(parallel_dir: Path, run: LiveRun) -> RunRecord:
    """The run record, validated as the store validates it, but parsed with
    libyaml where there is one: the report runs on every checkout of an
    instance branch, and the pure-Python parser is most of its cost."""
    import yaml

    from gitflow_parallel.files import load_yaml
    from gitflow_parallel.state.store import read_record_text, validate_record

    path = parallel_dir / "runs" / f"{run.task}.yaml"
    try:
        data = load_yaml(read_record_text(path), getattr(yaml, "CSafeLoader", yaml.SafeLoader))[0]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ParallelError(E.RECORD_INVALID, f"run record {path} cannot be read ({type(exc).__name__})",
                            hint=f"`git parallel validate {run.task}`") from None
    record = validate_record(data, path)
    if record["run_id"] != run.run_id:
        raise ParallelError(E.RECORD_INVALID, f"run record {path} is of run {record['run_id']}, not {run.run_id}",
                            hint=f"`git parallel validate {run.task}`")
    return record


def report_checkout(common_dir: Path, branch: str, args: list[str]) -> str | None:
    """post-checkout: one line about the instance now checked out, and an event."""
    from gitflow_parallel import evidence
    from gitflow_parallel.files import append_jsonl, utcnow

    previous, new = (list(args) + ["", ""])[:2]
    parallel_dir = common_dir / "parallel"
    hit = next(((run, run.branches[branch]) for run in read_live(parallel_dir).values() if branch in run.branches),
               None)
    if hit is None:
        return None
    run, inst_id = hit
    event: dict[str, Any] = {"event": "checkout", "at": utcnow(), "task": run.task, "run_id": run.run_id,
                             "instance": inst_id, "branch": branch, "commit": new, "previous": previous,
                             "worktree": os.getcwd(), "error": None}
    try:
        record = _read_record(parallel_dir, run)
        inst = next((i for i in record["instances"] if i.get("id") == inst_id), None)
        if inst is None:
            raise ParallelError(E.BRANCH_NOT_FOUND, f"run {run.run_id} has no instance {inst_id!r}",
                                hint=f"`git parallel validate {run.task}`")
        fresh = evidence.freshness(record, inst, new or None)
        detail = ((fresh.pack or {}).get("verdict") or "no verdict") if fresh.fresh else fresh.reason
        binding = (record.get("picks") or {}).get(inst["track"])
        winner = binding["winner"] if binding else None
        picked = "" if winner is None else (", picked winner" if winner == inst_id else f", lost the pick to {winner}")
        moved = "" if inst["head"] in (None, new) else f", tip moved since the record ({str(inst['head'])[:12]})"
        line = (f"git-parallel: task {run.task}, instance {inst_id} (track {inst['track']}, attempt {inst['attempt']}): "
                f"{inst['status']}, evidence {fresh.state} ({detail}){picked}{moved}")
        event.update(track=inst["track"], attempt=inst["attempt"], status=inst["status"], evidence=fresh.state,
                     evidence_reason=fresh.reason, recorded_head=inst["head"], picked_winner=winner)
    except (ParallelError, KeyError, TypeError, AttributeError) as exc:
        # A report must not fail the checkout; it says what it could not read.
        code = exc.code if isinstance(exc, ParallelError) else E.RECORD_INVALID
        why = exc.message if isinstance(exc, ParallelError) else f"the record lacks or misshapes {exc}"
        event.update(error=f"{code}: {why}")
        line = f"git-parallel: task {run.task}, instance {inst_id}: cannot verify it: error[{code}]: {why}"
    try:
        append_jsonl(parallel_dir / "events" / run.run_id / "checkouts.jsonl", event)
    except OSError as exc:
        line += f" (event not recorded: {exc})"
    return line


def _log_internal(common_dir: Path, name: str) -> Path | None:
    import traceback

    from gitflow_parallel.files import utcnow

    try:
        folder = common_dir / "parallel" / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"hook-{name}-{utcnow().replace(':', '')}-{os.getpid()}.log"
        path.write_text(traceback.format_exc(), encoding="utf-8")
        return path
    except OSError:
        return None


def run(name: str, args: list[str], common_dir: str | os.PathLike[str], branch: str | None = None,
        stdin: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """The slow path of a hook script: 0 go on, HOOK_REFUSED refuse."""
    err = err or sys.stderr
    common = Path(os.path.abspath(common_dir))
    try:
        if name == "post-checkout":
            line = report_checkout(common, branch or "", args) if branch else None
            if line:
                print(line, file=err)
            return 0
        if name == "pre-merge-commit":
            verdict = check_merge(common)
        elif name == "reference-transaction":
            if args[:1] != ["prepared"]:
                return 0
            verdict = check_ref_updates(common, (stdin or sys.stdin).read().splitlines())
        else:
            print(f"git-parallel: warning: unknown hook {name!r}; letting git go on", file=err)
            return 0
    except ParallelError as exc:
        # An instance commit is at stake and its run cannot be verified.
        print(f"error[{exc.code}]: {exc.message}", file=err)
        print(f"hint: {exc.hint or 'run `git parallel validate`'}", file=err)
        return HOOK_REFUSED
    except Exception as exc:  # never brick: the script warns and lets git go on
        log = _log_internal(common, name)
        where = f"; the traceback is in {log}" if log else ""
        print(f"git-parallel: internal error in the {name} hook: {type(exc).__name__}: {exc}{where}", file=err)
        return HOOK_INTERNAL
    if not verdict.allowed:
        print(f"error[{verdict.code}]: {verdict.message}", file=err)
        if verdict.hint:
            print(f"hint: {verdict.hint}", file=err)
        return HOOK_REFUSED
    if verdict.message:
        print(verdict.message, file=err)
    return 0


def parse_argv(argv: list[str]) -> tuple[str, str, str | None, list[str]] | None:
    """(name, common dir, branch, args) from the arguments the hook scripts
    pass: ``NAME --common DIR [--branch REF] -- ARGS``; None for anything
    else (the CLI's ``_hook`` then parses it and says what is wrong)."""
    if not argv or argv[0].startswith("-"):
        return None
    options: dict[str, str | None] = {"--common": None, "--branch": None}
    name, rest = argv[0], argv[1:]
    while rest and rest[0] != "--":
        key, eq, value = rest[0].partition("=")
        if key not in options:
            return None
        if not eq:
            if len(rest) < 2:
                return None
            value, rest = rest[1], rest[1:]
        options[key], rest = value, rest[1:]
    if not rest or options["--common"] is None:
        return None
    return name, options["--common"], options["--branch"], rest[1:]
