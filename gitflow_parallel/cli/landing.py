"""The verbs that judge the attempts and land the winner: check, pick,
unpick, merge."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from gitflow_parallel.provenance import protected_summary
from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb
from gitflow_parallel.cli.render import check_progress, figures_text, render_check, render_differential, render_pr, render_push

if TYPE_CHECKING:
    from gitflow_parallel.commands.merge import MergeResult
    from gitflow_parallel.shapes.records import PickRecord
    from gitflow_parallel.shapes.results import CheckResult, PickResult


# -- check --------------------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.option("--instance", "instances", multiple=True, help="Check only this instance (repeatable). Default: every succeeded one.")
@click.option("--gate", "gates", multiple=True,
              help="Run only this gate (repeatable). Gates it requires count as not passed unless also named; "
                   "the evidence is then incomplete and not a pick candidate.")
@click.option("--jobs", type=click.IntRange(1, 1024), default=None,
              help="Gate threads at once, at most (default: the cores this process may use; a gate with "
                   "`threads: K` counts K); quick gates take turns in one clean checkout.")
@click.option("--again", is_flag=True,
              help="Check again the instances whose evidence is still fresh (skipped by default).")
@json_option
def check(task: str, instances: tuple[str, ...], gates: tuple[str, ...], jobs: int | None, again: bool,
          as_json: bool) -> None:
    """Run the gates of the run's frozen configuration on each succeeded
    instance's commit, in a clean scratch checkout of it (never the agent's
    worktree; protected paths as the base has them, its setup built first),
    write an evidence pack per instance bound to that commit and tree, and
    set verdict and score.
    An instance whose evidence is still fresh (its branch did not move since)
    is skipped unless named with --instance, or with --again.  Exits 1 when
    any checked or skipped instance's verdict is fail.  While it runs: a
    progress line on a terminal, else a line per finished gate (stderr)."""
    from gitflow_parallel.commands import check as check_cmd

    def call() -> CheckResult:
        with check_progress(as_json) as progress:
            return check_cmd.check(_project(), task, instances=list(instances) or None, gates=list(gates) or None,
                                   jobs=jobs, again=again, progress=progress)

    run_verb(as_json, call, render_check, ok=check_cmd.check_ok)


# -- pick, unpick, merge ----------------------------------------------------------------
def _render_pick(p: PickRecord, again: str) -> None:
    """One track's pick as text: winner, how it was chosen, what it changes
    of protected paths, the figures that decided, the losers and why."""
    from gitflow_parallel import model

    w = p["winner"]
    score = "unavailable" if p["score"] is None else p["score"]
    by = p["selection_method"]
    if by == model.HUMAN:
        by = f"{p['picked_by']}" + (f" ({p['reason']})" if p.get("reason") else "")
        if p["forced"]:
            by += "; forced, waiving: " + ("; ".join(p.get("waived") or []) or "nothing")
    click.echo(f"track {p['track']}: winner {w['id']} at {w['commit'][:12]}, score {score}, by {by}{again}")
    changes = p.get("protected_changes") or []
    if changes:
        # New test files, or tests only appended to one: judged as a second stage (added_tests), not a change
        # of the harness.
        added = all((c.get("change") == "added" or c.get("appended")) and not c.get("harness")
                    and not c.get("dependencies") for c in changes)
        click.echo("  it adds tests under protected paths (run as a second stage: added_tests), which merge "
                   "will land:" if added else "  it changes protected path(s), which merge will land:")
        for line in protected_summary(changes):
            click.echo(f"    {line}")
    decision = p.get("decision")  # absent from picks made before it was recorded
    if decision:
        click.echo(f"  decided by {decision['stage']}: {figures_text(decision['winner'])}"
                   + (f" against {figures_text(decision['runner_up'])}" if decision["runner_up"] else ""))
    for c in p.get("clusters") or []:
        click.echo(f"  cluster of {c['size']}: {', '.join(c['members'])}")
    render_differential(p.get("differential"), "  ")
    for m in (p.get("tournament") or {}).get("matches", []):
        if m["b"] is not None:
            ran = m["judge"]
            said = f"answered {ran['answer']}" if ran["answer"] else f"gave no answer: {ran['error']}"
            click.echo(f"  round {m['round']}: {m['a']} vs {m['b']} -> {m['winner']} "
                       f"(decided by {m['decided_by']}; the judge {said}; log {ran['log']})")
    for loser in p["losers"]:
        click.echo(f"  lost {loser['id']}: [{loser['code']}] {loser['reason']}")


@main_group.command()
@click.argument("task")
@click.option("--track", default=None, help="Pick only this track (default: every unpicked track).")
@click.option("--instance", "instance", default=None, metavar="ID",
              help="A person's pick: ID wins its track (recorded as selection_method human, with user.email).")
@click.option("--reason", default=None, metavar="TEXT", help="With --instance: why, kept in the pick record and note.")
@click.option("--force", is_flag=True,
              help="With --instance: pick it even without fresh, complete, passing evidence (recorded as forced).")
@json_option
def pick(task: str, track: str | None, instance: str | None, reason: str | None, force: bool, as_json: bool) -> None:
    """Select each track's winner among the instances with complete, fresh,
    passing evidence, by the run's `selection` rule, and write the write-once
    pick record and its note on the winner's commit.  critic_first_pass:
    highest score, then fewest changed lines against the base, then id (never
    timing).  majority_vote: the largest group of byte-identical trees (rare
    for agents, which seldom write the same bytes).  cluster: the largest
    group of candidates whose probe gates saw the same behaviour.  tournament:
    the judge command decides a bracket, in id order, among the largest
    clusters.  differential: the largest group that behaved alike on inputs
    the distinguish command made to tell the candidates apart.  Every rule breaks its ties by score, changed lines, then id,
    and the record names the stage and the figures that decided.  A track
    already picked prints its record and changes nothing.

    With --instance ID a person chooses instead: the record says
    "selection_method": "human", who (git config user.email) and why
    (--reason).  It needs the same evidence unless --force, which is
    recorded too.  `git parallel unpick` retires a pick that has not landed."""
    from gitflow_parallel.commands import pick as pick_cmd

    def render(r: PickResult) -> None:
        for p in r["picks"] + r["existing"]:
            _render_pick(p, " (already picked)" if p in r["existing"] else "")
        click.echo(f"next: git parallel merge {task}")

    def call() -> PickResult:
        if instance is None:
            if reason is not None or force:
                raise click.UsageError("--reason and --force go with --instance ID (a person's pick)")
            return pick_cmd.pick(_project(), task, track)
        if track is not None:
            raise click.UsageError("--instance picks the instance's own track; leave out --track")
        return pick_cmd.pick_human(_project(), task, instance, reason=reason, force=force)

    run_verb(as_json, call, render)


@main_group.command()
@click.argument("task")
@click.option("--track", default=None, help="Retire only this track's pick (default: every picked track).")
@json_option
def unpick(task: str, track: str | None, as_json: bool) -> None:
    """Retire a pick that has not landed, so the track can be picked again.
    The pick record is never deleted: it moves to
    parallel/picks/<run_id>/retired/<track>.<n>.json and the run record
    lists it under retired_picks.  Refused once the run is merged."""
    from gitflow_parallel.commands import unpick as unpick_cmd

    def render(r: unpick_cmd.Unpicked) -> None:
        for x in r["retired"]:
            click.echo(f"retired the pick of track {x['track']} (winner {x['winner']}); kept at {x['path']}")
        click.echo(f"next: git parallel pick {task} [--instance ID]")

    run_verb(as_json, lambda: unpick_cmd.unpick(_project(), task, track), render)


@main_group.command()
@click.argument("task")
@click.option("--push", "push_remote", default=None, metavar="REMOTE",
              help="Land onto REMOTE's tip of the base, then move REMOTE's base by one atomic push with a lease "
                   "(with the notes, run snapshot and evidence refs); a merged run is only pushed.")
@click.option("--pr", "as_pr", is_flag=True,
              help="Do not land: push the winner's branch and its provenance, and open a pull request with gh "
                   "(or a merge request with glab), or print the command and write its body file.")
@click.option("--remote", "pr_remote", default=None, metavar="REMOTE",
              help="The remote --pr pushes to (default: origin).")
@json_option
def merge(task: str, push_remote: str | None, as_pr: bool, pr_remote: str | None, as_json: bool) -> None:
    """Land the picked winner(s) on the base branch: fast-forward when
    possible, else a merge commit computed in memory and resolved by
    merge.policy; the base ref moves once, by compare-and-swap, retried if
    it moved meanwhile.  With several tracks every track needs a pick (join).
    A worktree of the base follows the new tip; its uncommitted changes to
    other paths stay, and one to a path the landing changes (or an untracked
    or ignored file where it adds one) refuses before anything moves.  Then
    the run's worktrees are cleaned up (tips kept in archive refs).

    --push REMOTE lands where the team lands: onto REMOTE's base when it is
    ahead (refused when the two diverged), then pushes it with a lease, so
    another clone's commit is never overwritten; if REMOTE moved meanwhile
    the landing is computed again onto its new tip (up to merge.retries).
    --pr proposes the winner for review instead; the run stays picked."""
    from gitflow_parallel.commands import merge as merge_cmd

    if as_pr and push_remote:
        raise click.UsageError("--push and --pr exclude each other: --pr does not move the base")
    if pr_remote and not as_pr:
        raise click.UsageError("--remote goes with --pr (--push names its remote itself)")
    if as_pr:
        run_verb(as_json, lambda: merge_cmd.merge_pr(_project(), task, pr_remote or "origin"), render_pr)
        return

    def render(r: MergeResult) -> None:
        m = r["merge"]
        if r["already"]:
            click.echo(f"already merged: {m['base_ref']} at {m['landed'][:12]}")
            render_push(r.get("push"))
            return
        moved = (m.get("attempts") or 1) - 1  # the landing is computed again each time the base moves under it
        click.echo(f"landed {m['method']} on {m['base_ref']}: {(m['previous'] or '')[:12]} -> {m['landed'][:12]}"
                   + (f" (the base moved during the merge: computed again {moved} time(s))" if moved else ""))
        for f in m["resolved_files"]:
            dropped = f.get("winner_lines_dropped", 0) if f.get("kept") == "base" else 0
            click.echo(f"  resolved by {m['policy']}: {f['path']} (track {f['track']}; "
                       f"{dropped} line(s) of the winner dropped)")
        for v in m["verified"]:
            names = ", ".join(g["name"] for g in v["gates"]) or "no enforced gate"
            click.echo(f"  re-proved track {v['track']} on the landing tree in a clean checkout: "
                       f"{'pass' if v['passed'] else 'fail'} ({names})" + (f"; {v['why']}" if v.get("why") else ""))
        for e in m.get("rests_on") or []:
            restored = (f" with the base's protected paths ({e['judged_tree'][:12]}), as a re-proof would"
                        if e.get("judged_tree") else "")
            click.echo(f"  not re-proved: track {e['track']} lands the tree {e['tree'][:12]} its check judged "
                       f"here{restored} (evidence {(e['pack_sha256'] or '')[:12]} of instance {e['instance']}, "
                       "merge.verify: auto)")
        if not m["verified"] and m.get("verify") == "never":
            click.echo("  not re-proved (merge.verify: never)")
        for landed in r.get("protected_landed") or []:
            click.echo(f"warning: track {landed['track']} landed protected change(s) of instance "
                       f"{landed['winner']}, picked by a person:", err=True)
            for line in protected_summary(landed["changes"]):
                click.echo(f"  {line}", err=True)
        if m.get("worktree_error"):
            click.echo(f"warning: could not update {m['worktree']}: {m['worktree_error']}", err=True)
        refused, cleaned = r.get("cleanup_error"), r.get("cleanup")
        if refused:
            click.echo(f"warning: cleanup refused: error[{refused['code']}]: {refused['message']}", err=True)
            click.echo(f"hint: {refused['hint']}", err=True)
        elif cleaned:
            click.echo(f"cleaned up {len(cleaned['removed'])} worktree(s); tips kept under refs/parallel/archive/")
        click.echo(f"provenance: git notes --ref=parallel show {m['landed'][:12]}")
        render_push(r.get("push"))

    run_verb(as_json, lambda: merge_cmd.merge(_project(), task, push_remote), render)
