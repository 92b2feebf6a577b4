"""The verbs of one task's flow: init, spawn, run, check, pick, unpick,
merge, done, attach, status, retry, abort, cleanup."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Mapping

import click

from gitflow_parallel.provenance import protected_summary
from gitflow_parallel.cli.base import json_option, main_group, project as _project, run_verb
from gitflow_parallel.cli.render import (
    RunProgress, RunWaitNotice, check_progress, figures_text, render_check, render_differential, render_pr, render_published,
    render_push, render_rounds, render_run,
)

if TYPE_CHECKING:
    from gitflow_parallel.commands.init import InitResult
    from gitflow_parallel.commands.init.explain import InitCheck
    from gitflow_parallel.commands.merge import MergeResult
    from gitflow_parallel.state.retire import Cleanup
    from gitflow_parallel.flows import Rounds
    from gitflow_parallel.shapes import AbortResult, CheckResult, PickRecord, PickResult, PublishResult, RunRecord, SpawnResult


# -- init ---------------------------------------------------------------------------
@main_group.command()
@click.option("--force", is_flag=True, help="Overwrite an existing .gitparallel.yaml with what init finds now.")
@click.option("--display", is_flag=True,
              help="Also set notes.displayRef, so plain `git log` prints the notes (every JSON line).")
@click.option("--remote", default=None, metavar="REMOTE",
              help="Add fetch refspecs to REMOTE for the notes and refs/parallel/ (into tracking refs).")
@click.option("--check", "explain", is_flag=True,
              help="Write nothing: explain the worktree's .gitparallel.yaml (what each gate protects, what it "
                   "does not, which fence holds).")
@json_option
def init(force: bool, display: bool, remote: str | None, explain: bool, as_json: bool) -> None:
    """Write a .gitparallel.yaml for the project's test runner and set
    notes.rewriteRef to the notes ref, so notes follow rebases and amends
    (`git log --notes=parallel` shows them; --display makes plain `git log`
    show them too).  Commit the file: spawn reads it from the base commit.

    init recognises pytest, npm/pnpm/yarn test, go test, cargo test and
    make test: the gate names the test folder (which protects it), and
    `setup:` builds the environment in the judged checkout from the
    attempt's own files.  With none found it writes the commented template."""
    from gitflow_parallel.commands import init as init_cmd

    if explain and (force or display or remote):
        raise click.UsageError("--check writes nothing: give it alone (with --json if wanted)")

    def render(r: InitResult) -> None:
        click.echo(f"{'wrote' if r['wrote'] else 'kept existing'} {r['config']}")
        gate, setup = r["gate"], r["setup"]
        if gate:
            found = next(d for d in r["detected"] if d["run"])
            found_in = found["found_in"]
            assert isinstance(found_in, list)  # (a Runner's, as init_cmd.detect made it)
            click.echo(f"found {found['tool']} ({', '.join(found_in)}): gate `{shlex.join(gate)}`"
                       + (f", setup `{shlex.join(setup['run'])}`" if setup else ""))
        else:
            click.echo("found no test runner: the gates in the file are comments; write one naming the tests")
        if not r["wrote"]:
            click.echo("(`git parallel init --force` writes what was found now; `init --check` explains the file)")
        for k, v in r["git_config"].items():
            click.echo(f"git config {k} {v}")
        refspecs = r["refspecs"]
        if refspecs:
            for spec in refspecs[f"remote.{r['remote']}.fetch"]:
                state = "added" if spec in refspecs["added"] else "already there"
                click.echo(f"git config --add remote.{r['remote']}.fetch {spec}  ({state})")
            click.echo(f"share runs with `git parallel push {r['remote']}` and `git parallel fetch {r['remote']}`")
        click.echo("next: review the file, commit it, then `git parallel spawn TASK`")

    if explain:
        run_verb(as_json, lambda: init_cmd.check(_project()), render_init_check, renders_warnings=True)
    else:
        run_verb(as_json, lambda: init_cmd.init(_project(), force=force, display=display, remote=remote), render)


def render_init_check(r: InitCheck) -> None:
    state = "committed" if r["committed"] else "not committed" if r["exists"] else "absent"
    click.echo(f"config: {r['config']} ({state})")
    setup = r["setup"]
    if setup:
        click.echo(f"setup: `{shlex.join(setup['run'])}` in the judged checkout"
                   + (f", reused while {', '.join(setup['cache_key'])} are unchanged" if setup["keep"] else "")
                   + (f"; PATH starts with {', '.join(setup['path'])}" if setup["path"] else ""))
    else:
        click.echo("setup: none (gates run with the tools on PATH)")
    for gate in r["gates"]:
        click.echo(f"gate {gate['name']} ({gate['mode']}{', after setup' if gate['setup'] else ''}): "
                   f"{shlex.join(gate['run'])}")
        click.echo(f"  its run protects: {', '.join(gate['names']) or 'nothing'}")
        if gate["hidden"]:
            click.echo(f"  hidden tests from {gate['hidden']}")
        for w in gate["warnings"]:
            click.echo(f"  warning: {w}")
    sections = "; the test sections of pyproject.toml, setup.cfg, package.json" if r["protect_defaults"] else ""
    click.echo(f"protected for every gate: {', '.join(r['protected'])}{sections}")
    click.echo(f"tests in HEAD: {r['tests']}, not protected: {len(r['unprotected_tests'])}; "
               f"tests an attempt adds: {r['added_tests']}")
    for w in r["warnings"]:
        click.echo(f"warning: {w}")
    click.echo(f"fence: {r['fence']['holds']}: {r['fence']['why']}")


# -- spawn --------------------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.option("-n", "instances", type=click.IntRange(1, 64), default=None,
              help="Instances per track (default: `instances` from the config, 3).")
@click.option("--base", default=None, help="Base branch to start from and land on (default: the current branch).")
@click.option("--track", "tracks", multiple=True, help="A track (sub-task); repeat for fan-out. Default: one track 'main'.")
@click.option("--remote", default=None, metavar="R",
              help="Also publish the run to remote R (its branches and manifest), for `git parallel worker` "
                   "on other machines.")
@json_option
def spawn(task: str, instances: int | None, base: str | None, tracks: tuple[str, ...], remote: str | None,
          as_json: bool) -> None:
    """Create a run for TASK: N branches parallel/TASK/ID at the base commit,
    each with its own worktree, recorded in the common git dir.

    All or nothing: if any branch or worktree cannot be made, everything is
    removed again.  Refused past max_total live instances in the repository."""
    from gitflow_parallel.commands import spawn as spawn_cmd

    def render(r: SpawnResult) -> None:
        for w in r.get("warnings") or []:
            click.echo(f"warning: {w}", err=True)
        click.echo(f"spawned run {r['run_id']} for {r['task']} on {r['base']['ref']} at {r['base']['commit'][:12]}")
        for inst in r["instances"]:
            click.echo(f"  {inst['id']:<10} {inst['branch']:<32} {inst['worktree']}")
        if r.get("published"):
            render_published(r["published"])
            click.echo(f"next: git parallel run {r['task']} --remote {r['published']['remote']} -- <agent command>")
        else:
            click.echo(f"next: git parallel run {r['task']} -- <agent command>")

    def call() -> SpawnResult:
        if remote is not None:
            from gitflow_parallel.flows import spawn_remote

            return spawn_remote(_project(), task, remote, n=instances, base=base, tracks=list(tracks))
        return spawn_cmd.spawn(_project(), task, n=instances, base=base, tracks=list(tracks))

    run_verb(as_json, call, render)


# -- retry / abort / cleanup ------------------------------------------------------------
@main_group.command()
@click.argument("task")
@click.argument("instance")
@click.option("--revision", type=int, default=None, help="Refuse unless the run is still at this run_revision.")
@click.option("--force", is_flag=True,
              help="Retry a succeeded instance that did not fail its gates, and one whose worktree has "
                   "uncommitted changes (kept on the archive ref first).")
@click.option("--onto-current", is_flag=True,
              help="Start the new attempt from the base branch's current tip instead of the spawn's base; "
                   "on a picked winner that no longer lands, its pick is retired first.")
@click.option("--keep", is_flag=True,
              help="Start the new attempt from this attempt's own tip (iterate on the same work); nothing is reset.")
@json_option
def retry(task: str, instance: str, revision: int | None, force: bool, onto_current: bool, keep: bool,
          as_json: bool) -> None:
    """Start a new attempt of a failed, aborted or gate-failed (verdict fail)
    INSTANCE: its tip is kept under refs/parallel/archive/, its branch and
    worktree are reset to the spawn's base (or the base branch's tip with
    --onto-current, or left at its tip with --keep), and its attempt goes up
    by one (at most rework_max times).  The new attempt's agent gets
    GIT_PARALLEL_FEEDBACK and {feedback}: why this attempt failed.  A
    worktree with uncommitted changes is refused unless --force.  A picked
    winner is retried only with --onto-current (the base moved and it no
    longer lands): that retires its pick in the same step."""
    from gitflow_parallel.commands import retry as retry_cmd
    from gitflow_parallel.model import find_instance

    def render(r: RunRecord) -> None:
        inst = find_instance(r, instance)
        start = inst.get("start") or {}
        where = {"base-tip": f"the current tip of {r['base']['ref']}", "previous-attempt": "its previous tip"}.get(
            start.get("from", ""), "the base")
        click.echo(f"instance {instance} starts attempt {inst['attempt']} from {where} at {(inst['head'] or '')[:12]}")
        prev = inst["history"][-1] if inst["history"] else None
        if prev and prev.get("archive_ref"):
            click.echo(f"previous attempt kept at {prev['archive_ref']}")
        if inst.get("feedback"):
            click.echo(f"feedback for the agent: {inst['feedback']} ($GIT_PARALLEL_FEEDBACK, {{feedback}})")
        click.echo(f"next: git parallel run {task} --instance {instance} -- <agent command>")

    if onto_current and keep:
        raise click.UsageError("--onto-current and --keep exclude each other")
    run_verb(as_json, lambda: retry_cmd.retry(_project(), task, instance, expected_revision=revision, force=force,
                                              onto_current=onto_current, keep=keep), render)


@main_group.command()
@click.argument("task")
@click.argument("instance", required=False)
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (kept on the archive ref first).")
@json_option
def abort(task: str, instance: str | None, force: bool, as_json: bool) -> None:
    """Abort one INSTANCE (stopped and marked aborted; its worktree stays for
    `retry`), or the whole run (every instance aborted, then cleaned up:
    tips archived under refs/parallel/archive/, worktrees and branches removed)."""
    from gitflow_parallel.commands import abort as abort_cmd

    def render(r: AbortResult) -> None:
        what = f"instance {instance}" if instance else f"run {r['run']['run_id']}"
        click.echo(f"aborted {what} of {task}")
        for i in r["stopped"]:
            click.echo(f"  stopped the process of {i}")
        for d in r["removed"]:
            click.echo(f"  removed {d['id']}; tip kept at {d['archived']}")

    run_verb(as_json, lambda: abort_cmd.abort(_project(), task, instance, force=force), render)


@main_group.command()
@click.argument("task")
@click.option("--keep-losers", is_flag=True, help="Remove only the winners' worktrees; keep the losers'.")
@click.option("--force", is_flag=True, help="Remove worktrees with uncommitted changes (committed onto the archive ref first).")
@json_option
def cleanup(task: str, keep_losers: bool, force: bool, as_json: bool) -> None:
    """Remove the worktrees and branches of a merged or aborted run.  Every
    tip is first kept under refs/parallel/archive/<run_id>/<id>/<attempt>;
    a worktree with uncommitted changes is refused unless --force."""

    def render(r: Cleanup) -> None:
        for d in r["removed"]:
            extra = f" (uncommitted work committed as {d['dirty_committed'][:12]})" if d["dirty_committed"] else ""
            click.echo(f"removed {d['id']}; tip kept at {d['archived']}{extra}")
        if r["kept"]:
            click.echo(f"kept: {', '.join(r['kept'])}")
        if not r["removed"]:
            click.echo("nothing to remove")

    from gitflow_parallel.commands import cleanup as cleanup_cmd

    run_verb(as_json, lambda: cleanup_cmd.cleanup(_project(), task, keep_losers=keep_losers, force=force),
             render)


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
        # New test files only: judged as a second stage (added_tests), not a change of the harness.
        added = all(c.get("change") == "added" and not c.get("harness") and not c.get("dependencies") for c in changes)
        click.echo("  it adds test file(s) under protected paths (run as a second stage: added_tests), which merge "
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
            click.echo(f"  not re-proved: track {e['track']} lands the tree {e['tree'][:12]} its check judged "
                       f"here (evidence {(e['pack_sha256'] or '')[:12]} of instance {e['instance']}, merge.verify: auto)")
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


@main_group.command()
@click.argument("task")
@click.argument("instance")
@json_option
def done(task: str, instance: str, as_json: bool) -> None:
    """Mark a pending INSTANCE finished by a person (work done by hand in its
    worktree, no `git parallel run`): whatever is uncommitted there is
    committed as `run` would (commit_leftovers), and it becomes succeeded
    with "origin": "hand", ready for check, pick and merge.  (`check` also
    takes pending instances whose branch moved, or that it is given with
    --instance.)"""
    from gitflow_parallel.state import hand

    def render(r: Mapping[str, Any]) -> None:
        extra = f"; leftovers committed as {r['committed'][:12]}" if r["committed"] else ""
        click.echo(f"instance {instance} of {task} finished by hand at {r['instance']['head'][:12]}{extra}")
        click.echo(f"next: git parallel check {task}")

    run_verb(as_json, lambda: hand.done(_project(), task, instance), render)


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


@main_group.command()
@click.argument("task")
@click.option("--instance", "instances", multiple=True, metavar="ID",
              help="Run only this instance (repeatable). Default: every pending instance.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Stop a command after S seconds (its whole process group); the instance fails.")
@click.option("-j", "--jobs", type=click.IntRange(1, 1024), default=None, metavar="J",
              help="At most J commands at once (default: max_total).")
@click.option("--until-pass", "until_pass", type=click.IntRange(1, 100), default=None, metavar="K",
              help="Up to K rounds of run, check, and retry (with feedback) of the attempts that failed, "
                   "until each track has a passing one (rework_max still bounds the retries).")
@click.option("--tmux", "use_tmux", is_flag=True,
              help="Run each command in its own window of the tmux session parallel-TASK, with a real terminal "
                   "(`git parallel attach TASK [ID]` shows it); recorded as headless runs are.")
@click.option("--remote", default=None, metavar="R",
              help="Run nothing here: publish CMD (and --timeout) in the run's manifest on remote R, for "
                   "`git parallel worker --remote R` on other machines.")
@click.option("--agent", "agent_specs", multiple=True, metavar="NAME=CMD",
              help="A named agent (repeatable) instead of one command: the instances are split among them by "
                   "--split, each records its agent, and its retries run the same one.")
@click.option("--split", default=None, metavar="NAME:K,...|auto",
              help="How many instances each agent gets (weights when they do not add up); auto: by each "
                   "agent's win rate here (`git parallel stats`), at least one each. Default: agents.split, "
                   "else even.")
@json_option
@click.argument("command", nargs=-1, required=False, type=click.UNPROCESSED, metavar="[-- CMD [ARG]...]")
def run(task: str, instances: tuple[str, ...], timeout: float | None, jobs: int | None, until_pass: int | None,
        use_tmux: bool, remote: str | None, agent_specs: tuple[str, ...], split: str | None, as_json: bool,
        command: tuple[str, ...]) -> None:
    """Run CMD in the worktree of every pending instance of TASK, at most J
    at once and at most max_total in the whole repository.

    Arguments go to CMD as given, never through a shell; {task}, {instance},
    {track}, {attempt}, {worktree} and {feedback} in them are replaced, and
    the environment has GIT_PARALLEL_TASK, _RUN_ID, _INSTANCE, _TRACK,
    _ATTEMPT, _WORKTREE and _EVENTS (a JSONL file the command may append
    to).  On a retried attempt, GIT_PARALLEL_FEEDBACK names a file saying
    why the previous attempt failed (its gates' and its own output), and
    {feedback} is that text (empty on attempt 0; its last 64 KiB when
    longer), e.g. claude -p "Fix what failed: {feedback}".  Output goes to
    <git common dir>/parallel/logs/<run_id>/<id>.<attempt>.log.
    Whatever CMD leaves uncommitted is committed on the instance branch
    (commit_leftovers).  Exit status 0 only when every selected instance
    succeeded.

    Without CMD, each instance runs its agent: given by --agent NAME=CMD
    (split by --split), kept from an earlier run (a retry), or from
    `agents:` in the config."""
    from gitflow_parallel import mix
    from gitflow_parallel.commands import run as run_cmd

    if remote is not None:
        given = [o for o, v in (("--instance", instances), ("--jobs", jobs), ("--until-pass", until_pass),
                                ("--tmux", use_tmux), ("--agent", agent_specs), ("--split", split)) if v]
        if given:
            raise click.UsageError(f"{', '.join(given)} cannot go with --remote (workers run every instance)")
        from gitflow_parallel.commands import publish as publish_cmd

        def render(r: PublishResult) -> None:
            render_published(r)
            click.echo(f"next: git parallel worker --remote {remote} --task {task}  (on each worker machine), "
                       f"then git parallel collect {task}")

        run_verb(as_json, lambda: publish_cmd.publish(_project(), task, remote, agent=list(command), timeout=timeout),
                 render)
        return
    live = sys.stderr.isatty() and not as_json
    progress = RunProgress() if live else RunWaitNotice()

    def rounds(k: int) -> Rounds:
        from gitflow_parallel.flows import until_pass as run_until_pass

        try:
            return run_until_pass(_project(), task, list(command), k, instances=list(instances) or None,
                                  timeout=timeout, jobs=jobs, progress=progress, tmux=use_tmux,
                                  agent_commands=dict(mix.parse_agent(spec) for spec in agent_specs), split=split)
        finally:
            if isinstance(progress, RunProgress):
                progress.clear()

    def call() -> Mapping[str, Any]:
        try:
            return run_cmd.run(_project(), task, list(command), instances=list(instances) or None,
                               timeout=timeout, jobs=jobs, progress=progress, tmux=use_tmux,
                               agent_commands=dict(mix.parse_agent(spec) for spec in agent_specs), split=split)
        finally:
            if isinstance(progress, RunProgress):
                progress.clear()

    if until_pass is not None:
        k = until_pass
        run_verb(as_json, lambda: rounds(k), render_rounds, ok=lambda r: r["ok"])
    else:
        run_verb(as_json, call, render_run, ok=run_cmd.succeeded)


@main_group.command()
@click.argument("task")
@click.argument("instance", required=False)
@json_option
def attach(task: str, instance: str | None, as_json: bool) -> None:
    """Attach to the tmux session of `git parallel run TASK --tmux`
    (parallel-TASK), at INSTANCE's window if given; inside tmux, switch to
    it.  With --json, print the tmux commands instead of running them."""
    from gitflow_parallel.proc import tmux

    def call() -> dict[str, Any]:
        _project().store.load(task)  # the task must have a run
        session, steps = tmux.attach_target(task, instance)
        if not as_json:
            tmux.refuse_without_terminal(session)
        return {"session": session, "commands": steps}

    if as_json:
        run_verb(True, call)
        return
    holder: dict[str, Any] = {}
    run_verb(False, lambda: holder.update(call()), lambda r: None)
    steps = holder["commands"]
    for step in steps[:-1]:
        subprocess.run(step, check=False)
    sys.stdout.flush()
    os.execvp(steps[-1][0], steps[-1])
