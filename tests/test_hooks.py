"""The git hooks, fired by real git: `git merge`, `git merge --ff-only`,
`git reset`, `git push .`, `git checkout` and `git worktree add`, in real
repositories built with the real verbs (spawn, run, check, pick)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, make_repo
import scenarios
from gitflow_parallel.git.repo import internal_token

PY = sys.executable
HOOKS = ("pre-merge-commit", "reference-transaction", "post-checkout")

# An agent: writes result.txt (and any NAME=CONTENT files) in its worktree.
AGENT = textwrap.dedent("""
    import pathlib, sys
    for arg in sys.argv[1:]:
        name, _, content = arg.partition("=")
        pathlib.Path(name).write_text(content + "\\n")
""")
# The one gate: result.txt must start with "good".
GATE = textwrap.dedent("""
    import pathlib, sys
    sys.exit(0 if pathlib.Path("result.txt").read_text().startswith("good") else 1)
""")


def proc(cwd: Path, *args: str, env: dict[str, str] | None = None,
         input: str | None = None) -> subprocess.CompletedProcess[str]:
    """git, with its exit status and output for the test to judge."""
    return subprocess.run(["git", *args], cwd=str(cwd), capture_output=True, text=True,
                          env=None if env is None else {**os.environ, **env}, input=input)


def setup(tmp_path: Path, *, install: bool = True) -> tuple[Path, GP]:
    """A repository whose one gate passes at the base commit."""
    repo, gp = scenarios.project(tmp_path, GATE, name="good", max_total=12, agent=AGENT,
                                 files={"README.md": "hello\n", "result.txt": "good base\n"})
    if install:
        gp("hooks", "install")
    return repo, gp


def spawn(gp: GP, task: str = "t", n: int = 2, base: str | None = None, tracks: tuple[str, ...] = ()) -> dict:
    args = ["spawn", task, "-n", str(n)]
    if base:
        args += ["--base", base]
    for t in tracks:
        args += ["--track", t]
    return gp.json(*args)


def agent(gp: GP, task: str, inst: str, *files: str) -> None:
    gp("run", task, "--instance", inst, "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files)


def picked_run(tmp_path: Path, base: str | None = None, install: bool = True) -> tuple[Path, GP, dict]:
    """A live run of task t: instance 1 passes its gate and won the pick,
    instance 2 failed its gate and lost."""
    repo, gp = setup(tmp_path, install=install)
    if base:
        git(repo, "branch", base)
    spawn(gp, "t", 2, base=base)
    agent(gp, "t", "1", "result.txt=good one")
    agent(gp, "t", "2", "result.txt=bad two")
    assert "FAIL good" in gp("check", "t", code=1).stdout  # instance 2 fails its gate
    pick = gp.json("pick", "t")["picks"][0]
    assert pick["winner"]["id"] == "1"
    return repo, gp, gp.json("status", "t")["run"]


def tip(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", ref)


def worktree(run: dict, inst: str) -> Path:
    return Path(next(i["worktree"] for i in run["instances"] if i["id"] == inst))


def common_dir(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


# -- pre-merge-commit and reference-transaction ----------------------------------------
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_loser_merge_refused_winner_merge_allowed(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path)
    base = tip(repo, "main")
    lost = proc(repo, "merge", "--no-ff", "-m", "merge loser", "parallel/t/2")
    assert lost.returncode != 0
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in lost.stderr
    # pre-merge-commit said so (reference-transaction would say "moving main").
    assert "merging parallel/t/2" in lost.stderr and "Not committing merge" in lost.stderr
    assert "instance 2 lost the pick of track main (winner: 1)" in lost.stderr
    assert "hint: " in lost.stderr and "git parallel merge t" in lost.stderr
    assert tip(repo, "main") == base
    git(repo, "merge", "--abort")

    won = proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert won.returncode == 0, won.stderr
    assert "picked winner instance 1 of t" in won.stderr
    parents = git(repo, "rev-list", "--parents", "-n", "1", "main").split()[1:]
    assert parents == [base, tip(repo, "parallel/t/1")]
    # An ordinary commit on the live base is no parallel update and passes.
    (repo / "notes.txt").write_text("base work\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "ordinary work on main")


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_ff_only_to_loser_refused_by_reference_transaction(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path)
    base = tip(repo, "main")
    ff = proc(repo, "merge", "--ff-only", "parallel/t/2")
    assert ff.returncode != 0
    assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in ff.stderr
    assert "moving main to parallel/t/2" in ff.stderr and "main stays at" in ff.stderr
    assert "ref updates aborted by hook" in ff.stderr
    assert tip(repo, "main") == base
    # git had already checked the loser's files out; the hint's command undoes it.
    assert "git reset --merge" in ff.stderr
    git(repo, "reset", "-q", "--merge")
    assert git(repo, "status", "--porcelain") == ""

    reset = proc(repo, "reset", "--hard", "parallel/t/2")
    assert reset.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in reset.stderr
    assert tip(repo, "main") == base
    git(repo, "reset", "-q", "--merge")

    # `git push .` goes through receive-pack, whose ref update is judged too.
    git(repo, "config", "receive.denyCurrentBranch", "ignore")
    push = proc(repo, "push", ".", "parallel/t/2:main")
    assert push.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in push.stderr
    assert "git reset --merge" not in push.stderr  # a push touches no worktree
    assert tip(repo, "main") == base

    # A branch that is no live base is none of the hooks' business.
    git(repo, "branch", "-f", "scratch", "parallel/t/2")

    ok = proc(repo, "merge", "--ff-only", "parallel/t/1")
    assert ok.returncode == 0, ok.stderr
    assert tip(repo, "main") == tip(repo, "parallel/t/1")


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_unproven_and_stale_commits_refused(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path)
    base = tip(repo, "main")
    picked = tip(repo, "parallel/t/1")
    wt = worktree(run, "1")
    # The winner's branch moves on after the pick: its new tip is unproven.
    (wt / "extra.txt").write_text("after the pick\n")
    git(wt, "add", "extra.txt")
    git(wt, "commit", "-q", "-m", "after pick")
    moved = proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1")
    assert moved.returncode != 0 and "error[PARALLEL_EVIDENCE_MISMATCH]" in moved.stderr
    assert f"the pick is for {picked[:12]}" in moved.stderr
    git(repo, "merge", "--abort")
    ff = proc(repo, "merge", "--ff-only", "parallel/t/1")
    assert ff.returncode != 0 and "PARALLEL_EVIDENCE_MISMATCH" in ff.stderr
    git(repo, "reset", "-q", "--merge")
    assert tip(repo, "main") == base

    # The evidence pack of the picked commit is lost: nothing proves it now.
    inst = next(i for i in run["instances"] if i["id"] == "1")
    Path(inst["evidence"]["path"]).unlink()
    gone = proc(repo, "merge", "--ff-only", picked)
    assert gone.returncode != 0 and "error[PARALLEL_EVIDENCE_MISSING]" in gone.stderr
    assert "git parallel check t --instance 1" in gone.stderr
    git(repo, "reset", "-q", "--merge")
    assert tip(repo, "main") == base


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_unpicked_run_refused_until_picked(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    base = tip(repo, "main")
    early = proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1")
    assert early.returncode != 0 and "error[PARALLEL_DEV_SELECTION_NO_PASS]" in early.stderr
    assert "has no pick yet" in early.stderr
    git(repo, "merge", "--abort")
    assert tip(repo, "main") == base
    gp("check", "t")
    gp("pick", "t")
    assert proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1").returncode == 0


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_git_parallel_merge_is_not_blocked(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path)
    result = gp.json("merge", "t")
    assert tip(repo, "main") == result["merge"]["landed"]
    # Merged: the run is no longer live, but its loser stays guarded (a done
    # line) until the run is pruned; then the index is gone and git is on its own.
    live = (common_dir(repo) / "parallel" / "live").read_text()
    assert f"done refs/heads/main t {run['run_id']} merged " in live
    gp("prune", "--older-than", "0")
    assert not (common_dir(repo) / "parallel" / "live").exists()


@pytest.mark.slow
def test_join_of_two_track_winners_by_octopus_merge_is_left_to_git_parallel_merge(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    spawn(gp, "j", 1, tracks=("api", "ui"))
    agent(gp, "j", "api-1", "api.txt=api")
    agent(gp, "j", "ui-1", "ui.txt=ui")
    gp("check", "j")
    gp("pick", "j", "--track", "api")
    base = tip(repo, "main")
    # Every line of MERGE_HEAD counts: the ui head has no pick yet.
    half = proc(repo, "merge", "--no-ff", "-m", "join", "parallel/j/api-1", "parallel/j/ui-1")
    assert half.returncode != 0 and "error[PARALLEL_DEV_SELECTION_NO_PASS]" in half.stderr
    assert "instance ui-1" in half.stderr and "track ui of j has no pick yet" in half.stderr
    git(repo, "merge", "--abort")
    assert tip(repo, "main") == base
    gp("pick", "j", "--track", "ui")
    # Both winners picked: the hand-made join is a tree no check judged
    # (each track's check judged its winner alone); `git parallel merge`
    # re-proves it.
    join = proc(repo, "merge", "--no-ff", "-m", "join", "parallel/j/api-1", "parallel/j/ui-1")
    assert join.returncode != 0 and "is not the tree its check judged" in join.stderr, join.stderr
    assert "git parallel merge j" in join.stderr
    git(repo, "merge", "--abort")
    assert tip(repo, "main") == base


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_broken_record_still_guards_its_branches(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "a", 1)
    agent(gp, "a", "1", "result.txt=good a")
    record = common_dir(repo) / "parallel" / "runs" / "a.yaml"
    record.write_text(record.read_text().replace("status: ", "status: exploded-", 1))
    spawn(gp, "b", 1)  # rewrites the live index while a's record is broken
    live = (common_dir(repo) / "parallel" / "live").read_text()
    assert "refs/heads/parallel/a/1" in live and "refs/heads/parallel/b/1" in live
    base = tip(repo, "main")
    ff = proc(repo, "merge", "--ff-only", "parallel/a/1")
    assert ff.returncode != 0 and "error[PARALLEL_RECORD_INVALID]" in ff.stderr and "exploded" in ff.stderr
    assert tip(repo, "main") == base
    git(repo, "reset", "-q", "--merge")
    wt = worktree(run, "1")
    git(wt, "checkout", "-q", "--detach")
    out = proc(wt, "checkout", "parallel/a/1")
    assert out.returncode == 0
    assert "git-parallel: task a, instance 1: cannot verify it: error[PARALLEL_RECORD_INVALID]" in out.stderr


# -- post-checkout -------------------------------------------------------------------------
@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_checkout_of_instance_branch_reports_status(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path)
    wt1, wt2 = worktree(run, "1"), worktree(run, "2")
    git(wt1, "checkout", "-q", "--detach")
    out = proc(wt1, "checkout", "parallel/t/1")
    assert out.returncode == 0
    lines = [l for l in out.stderr.splitlines() if l.startswith("git-parallel:")]
    assert lines == ["git-parallel: task t, instance 1 (track main, attempt 0): succeeded, "
                     "evidence fresh (pass), picked winner"]
    git(wt2, "checkout", "-q", "--detach")
    out = proc(wt2, "checkout", "parallel/t/2")
    assert "instance 2 (track main, attempt 0): succeeded, evidence fresh (fail), lost the pick to 1" in out.stderr

    # A new commit makes the evidence stale, and the line says so.
    (wt1 / "more.txt").write_text("more\n")
    git(wt1, "add", "more.txt")
    git(wt1, "commit", "-q", "-m", "more")
    git(wt1, "checkout", "-q", "--detach")
    out = proc(wt1, "checkout", "parallel/t/1")
    assert "evidence stale (it proves" in out.stderr

    events = [json.loads(l) for l in
              (common_dir(repo) / "parallel" / "events" / run["run_id"] / "checkouts.jsonl").read_text().splitlines()]
    assert [(e["instance"], e["evidence"]) for e in events] == [("1", "fresh"), ("2", "fresh"), ("1", "stale")]
    assert events[0]["event"] == "checkout" and events[0]["branch"] == "refs/heads/parallel/t/1"
    assert Path(events[0]["worktree"]).resolve() == wt1.resolve() and events[0]["status"] == "succeeded"

    # Ordinary checkouts and file checkouts say nothing and record nothing.
    git(repo, "branch", "plain")
    quiet = proc(repo, "checkout", "plain")
    assert quiet.returncode == 0 and "git-parallel" not in quiet.stderr
    (wt2 / "README.md").write_text("changed\n")
    quiet = proc(wt2, "checkout", "--", "README.md")
    assert quiet.returncode == 0 and "git-parallel" not in quiet.stderr
    assert len((common_dir(repo) / "parallel" / "events" / run["run_id"] / "checkouts.jsonl")
               .read_text().splitlines()) == 3


def test_worktree_add_of_instance_branch_reports(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    spawn(gp, "t", 1)
    out = proc(repo, "worktree", "add", "-f", str(tmp_path / "second"), "parallel/t/1")
    assert out.returncode == 0, out.stderr
    assert "git-parallel: task t, instance 1 (track main, attempt 0): pending, evidence none (never checked)" in out.stderr


# -- installation ---------------------------------------------------------------------------
FOREIGN = {
    "pre-merge-commit": '#!/bin/sh\necho "pmc $*" >> "{log}"\n',
    "reference-transaction": '#!/bin/sh\necho "rt $1" >> "{log}"\ncat >> "{log}"\n',
    "post-checkout": '#!/bin/sh\necho "pc $3" >> "{log}"\n',
}


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_legacy_hooks_chained_and_restored(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    log = tmp_path / "legacy.log"
    hooks = repo / ".git" / "hooks"
    originals = {}
    for name, text in FOREIGN.items():
        (hooks / name).write_text(text.format(log=log))
        (hooks / name).chmod(0o755)
        originals[name] = (hooks / name).read_bytes()
    result = gp.json("hooks", "install")
    assert [h["action"] for h in result["hooks"]] == ["installed"] * 3
    for name in HOOKS:
        assert (hooks / f"{name}.legacy").read_bytes() == originals[name]
        assert "git-parallel hook v1" in (hooks / name).read_text()
    again = gp.json("hooks", "install")
    assert [h["action"] for h in again["hooks"]] == ["unchanged"] * 3
    for name in HOOKS:  # the second install did not chain us to ourselves
        assert (hooks / f"{name}.legacy").read_bytes() == originals[name]
    status = gp.json("hooks", "status")
    assert [(h["state"], bool(h["legacy"])) for h in status["hooks"]] == [("ours", True)] * 3

    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    log.write_text("")
    base = tip(repo, "main")
    refused = proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1")
    assert refused.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in refused.stderr
    text = log.read_text()
    assert "pmc" in text  # the legacy pre-merge-commit ran first
    git(repo, "merge", "--abort")
    log.write_text("")
    ff = proc(repo, "merge", "--ff-only", "parallel/t/1")
    assert ff.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in ff.stderr
    # The legacy reference-transaction got the same stdin our check saw.
    legacy_saw = log.read_text()
    assert "rt prepared\n" in legacy_saw and f"{base} {tip(repo, 'parallel/t/1')} refs/heads/main\n" in legacy_saw
    git(repo, "reset", "-q", "--merge")
    git(repo, "checkout", "-q", "-b", "side")
    assert "pc 1" in log.read_text()

    # A failing legacy hook still stops git, even where ours has nothing to say.
    (hooks / "pre-merge-commit.legacy").write_text("#!/bin/sh\necho 'legacy says no' >&2\nexit 7\n")
    (repo / "side.txt").write_text("side\n")
    git(repo, "add", "side.txt")
    git(repo, "commit", "-q", "-m", "side")
    git(repo, "checkout", "-q", "main")
    blocked = proc(repo, "merge", "--no-ff", "-m", "m", "side")
    assert blocked.returncode != 0 and "legacy says no" in blocked.stderr
    git(repo, "merge", "--abort")

    removed = gp.json("hooks", "uninstall")
    assert all(h["restored_legacy"] for h in removed["hooks"])
    for name in HOOKS:
        if name != "pre-merge-commit":
            assert (hooks / name).read_bytes() == originals[name]
        assert os.access(hooks / name, os.X_OK)
        assert not (hooks / f"{name}.legacy").exists()
    assert "legacy says no" in (hooks / "pre-merge-commit").read_text()
    status = gp.json("hooks", "status")
    assert [h["state"] for h in status["hooks"]] == ["foreign"] * 3
    # Uninstalling again leaves the foreign hooks alone.
    gp("hooks", "uninstall")
    assert (hooks / "post-checkout").read_bytes() == originals["post-checkout"]


def test_install_refuses_when_foreign_hook_and_legacy_both_exist(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    hooks = repo / ".git" / "hooks"
    (hooks / "post-checkout").write_text("#!/bin/sh\necho one\n")
    (hooks / "post-checkout.legacy").write_text("#!/bin/sh\necho two\n")
    before = sorted(p.name for p in hooks.iterdir())
    out = gp("hooks", "install", code=1)
    assert "error[PARALLEL_CONFIG_INVALID]" in out.stderr and "hint:" in out.stderr
    assert sorted(p.name for p in hooks.iterdir()) == before


def test_install_rechains_over_a_stale_copy_of_the_foreign_hook(tmp_path: Path) -> None:
    # A hook manager that rewrites its script leaves the copy we kept as
    # .legacy beside its new one: the copy is dropped, nothing is lost.
    repo, gp = setup(tmp_path, install=False)
    hooks = repo / ".git" / "hooks"
    for name in ("post-checkout", "post-checkout.legacy"):
        (hooks / name).write_text("#!/bin/sh\necho same\n")
        (hooks / name).chmod(0o755)
    result = gp.json("hooks", "install")
    entry = next(h for h in result["hooks"] if h["name"] == "post-checkout")
    assert entry["action"] == "installed" and entry["dropped_stale_legacy"] is True
    assert (hooks / "post-checkout.legacy").read_text() == "#!/bin/sh\necho same\n"
    assert gp.json("hooks", "status")["installed"] is True


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_core_hooks_path_is_honoured(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    git(repo, "config", "core.hooksPath", ".githooks")
    sub = repo / "sub"
    sub.mkdir()
    result = GP(sub).json("hooks", "install")  # relative to the worktree top, not the cwd
    assert result["hooks_dir"] == str(repo / ".githooks") and result["layout"] == "shared"
    assert all((repo / ".githooks" / name).exists() for name in HOOKS)
    assert not any((repo / ".git" / "hooks" / name).exists() for name in HOOKS)
    assert gp.json("hooks", "status")["installed"] is True
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    base = tip(repo, "main")
    ff = proc(repo, "merge", "--ff-only", "parallel/t/1")
    assert ff.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in ff.stderr
    assert tip(repo, "main") == base
    git(repo, "reset", "-q", "--merge")

    # A hooks folder several repositories share: each hook judges the
    # repository it runs for, not the one that installed it.
    other = make_repo(tmp_path / "other", files={"README.md": "other\n", "result.txt": "good\n"},
                      config=(repo / ".gitparallel.yaml").read_text())
    git(other, "config", "core.hooksPath", str(repo / ".githooks"))
    gp_other = GP(other)
    spawn(gp_other, "u", 1)
    agent(gp_other, "u", "1", "result.txt=good u")
    other_base = tip(other, "main")
    ff = proc(other, "merge", "--ff-only", "parallel/u/1")
    assert ff.returncode != 0 and "of task 'u'" in ff.stderr
    assert tip(other, "main") == other_base
    git(other, "reset", "-q", "--merge")
    # ... and the first repository's live run does not leak into the other's.
    git(other, "checkout", "-q", "-b", "side")
    (other / "s.txt").write_text("s\n")
    git(other, "add", "s.txt")
    git(other, "commit", "-q", "-m", "s")
    git(other, "checkout", "-q", "main")
    assert proc(other, "merge", "--no-ff", "-m", "m", "side").returncode == 0


@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_merge_inside_linked_worktree_is_enforced(tmp_path: Path) -> None:
    repo, gp, run = picked_run(tmp_path, base="release")
    linked = tmp_path / "release-wt"
    git(repo, "worktree", "add", "-q", str(linked), "release")
    base = tip(repo, "release")
    lost = proc(linked, "merge", "--no-ff", "-m", "m", "parallel/t/2")
    assert lost.returncode != 0 and "error[PARALLEL_DEV_SELECTION_NO_PASS]" in lost.stderr
    git(linked, "merge", "--abort")
    ff = proc(linked, "merge", "--ff-only", "parallel/t/2")
    assert ff.returncode != 0 and "moving release to parallel/t/2" in ff.stderr
    git(linked, "reset", "-q", "--merge")
    assert tip(repo, "release") == base
    # A branch other than the run's base is judged by pre-merge-commit too.
    git(linked, "checkout", "-q", "-b", "feature")
    other = proc(linked, "merge", "--no-ff", "-m", "m", "parallel/t/2")
    assert other.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in other.stderr
    assert "merging parallel/t/2" in other.stderr
    git(linked, "merge", "--abort")
    git(linked, "checkout", "-q", "release")
    won = proc(linked, "merge", "--no-ff", "-m", "m", "parallel/t/1")
    assert won.returncode == 0, won.stderr
    assert tip(repo, "release^2") == tip(repo, "parallel/t/1")


# -- cost and robustness -----------------------------------------------------------------------
def _set_python(hooks_dir: Path, python: Path | str) -> None:
    """Rewrite the Python the installed scripts recorded."""
    for name in HOOKS:
        path = hooks_dir / name
        text = path.read_text()
        start = text.index("\nGP_PYTHON=") + 1
        end = text.index("\n", start)
        path.write_text(text[:start] + f"GP_PYTHON={python}" + text[end:])


def _spy(hooks_dir: Path, tmp_path: Path) -> Path:
    """Point the installed scripts at a Python that logs each start."""
    log = tmp_path / "python-starts.log"
    spy = tmp_path / "spy-python"
    spy.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nexec {PY} "$@"\n')
    spy.chmod(0o755)
    _set_python(hooks_dir, spy)
    log.write_text("")
    return log


def test_fast_path_starts_no_python(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    log = _spy(repo / ".git" / "hooks", tmp_path)
    # No live run: nothing at all starts Python.
    git(repo, "branch", "other")
    git(repo, "checkout", "-q", "other")
    (repo / "o.txt").write_text("o\n")
    git(repo, "add", "o.txt")
    git(repo, "commit", "-q", "-m", "o")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "m", "other")
    assert log.read_text() == ""

    spawn(gp, "t", 1)
    log.write_text("")
    # A live run, but refs and checkouts that have nothing to do with it.
    git(repo, "checkout", "-q", "other")
    (repo / "o.txt").write_text("o2\n")
    git(repo, "commit", "-q", "-am", "o2")
    git(repo, "checkout", "-q", "--detach")
    git(repo, "checkout", "-q", "main")
    assert log.read_text() == ""
    # Nor does a commit to the live base (decided in sh); merges into it do
    # reach Python, and pass.
    (repo / "m.txt").write_text("m\n")
    git(repo, "add", "m.txt")
    git(repo, "commit", "-q", "-m", "m")
    assert log.read_text() == ""
    git(repo, "merge", "-q", "--no-ff", "-m", "m2", "other")
    assert "_hook pre-merge-commit" in log.read_text()
    assert "_hook reference-transaction" in log.read_text()

    # A bare GIT_PARALLEL_INTERNAL=1, as anyone can set it, is no pass.
    agent(gp, "t", "1", "result.txt=bad")
    log.write_text("")
    refused = proc(repo, "update-ref", "refs/heads/main", tip(repo, "parallel/t/1"),
                   env={"GIT_PARALLEL_INTERNAL": "1"})
    assert refused.returncode != 0 and "_hook reference-transaction" in log.read_text()
    # git-parallel's own git commands (a live token) pass untouched, even to a loser.
    log.write_text("")
    token = internal_token(repo / ".git")
    moved = proc(repo, "update-ref", "refs/heads/main", tip(repo, "parallel/t/1"),
                 env={"GIT_PARALLEL_INTERNAL": token})
    assert moved.returncode == 0 and log.read_text() == ""


def _without_python(hooks_dir: Path) -> dict[str, str]:
    """Take Python away from the installed hooks: the recorded Python is
    gone, and the returned environment's PATH has git and sh but no
    git-parallel.  Every hook that needs Python then warns and lets git go on."""
    _set_python(hooks_dir, "/nonexistent/python3")
    dirs = []
    for tool in ("git", "sh", "grep", "mktemp", "cat"):
        found = shutil.which(tool)
        assert found is not None
        if os.path.dirname(found) not in dirs:
            dirs.append(os.path.dirname(found))
    path = os.pathsep.join(dirs)
    assert shutil.which("git-parallel", path=path) is None
    return {"PATH": path}


def test_hooks_let_git_work_when_the_python_is_gone(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    env = _without_python(repo / ".git" / "hooks")
    assert [h["python_exists"] for h in gp.json("hooks", "status")["hooks"]] == [False] * 3
    merged = proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1", env=env)
    assert merged.returncode == 0, merged.stderr
    assert "git-parallel: warning:" in merged.stderr and "/nonexistent/python3 is gone" in merged.stderr
    wt = worktree(run, "1")
    git(wt, "checkout", "-q", "--detach")
    back = proc(wt, "checkout", "parallel/t/1", env=env)
    assert back.returncode == 0 and "warning" in back.stderr


def _commit(cwd: Path, name: str, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (cwd / name).write_text(f"{name} {len(flags)}\n")
    git(cwd, "add", name)
    return proc(cwd, "commit", "-q", *flags, "-m", f"add {name}", env=env)


def test_commit_on_live_base_needs_no_python(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    spawn(gp, "t", 2)
    agent(gp, "t", "1", "result.txt=good one")  # an instance commit on top of the base
    base, instance = tip(repo, "main"), tip(repo, "parallel/t/1")
    assert git(repo, "rev-parse", f"{instance}^") == base
    env = _without_python(repo / ".git" / "hooks")

    # The control: moving the base onto an instance commit needs Python, which
    # is not there, so the hook says so (and, never bricking git, lets it go).
    ff = proc(repo, "merge", "-q", "--ff-only", "parallel/t/1", env=env)
    assert ff.returncode == 0 and "/nonexistent/python3 is gone" in ff.stderr, ff.stderr
    undo = proc(repo, "reset", "-q", "--hard", base, env={**env, "GIT_PARALLEL_INTERNAL": internal_token(repo / ".git")})
    assert undo.returncode == 0 and tip(repo, "main") == base

    # An ordinary commit, a second one, and amends of them: decided in sh.
    for name, flags in (("a.txt", ()), ("b.txt", ()), ("c.txt", ("--amend",)), ("d.txt", ("--amend",))):
        before = tip(repo, "main")
        done = _commit(repo, name, *flags, env=env)
        assert done.returncode == 0, done.stderr
        assert "git-parallel" not in done.stderr and "warning" not in done.stderr
        assert tip(repo, "main") != before
    # In a linked worktree of the base branch too, and with `git commit-tree`
    # plus `git update-ref` (old value given), as scripts do.
    linked = tmp_path / "linked"
    git(repo, "branch", "side")
    git(repo, "worktree", "add", "-q", str(linked), "side")
    git(linked, "checkout", "-q", "--detach", "main")
    new = git(linked, "commit-tree", "-p", "main", "-m", "scripted", "main^{tree}")
    moved = proc(linked, "update-ref", "refs/heads/main", new, tip(repo, "main"), env=env)
    assert moved.returncode == 0 and moved.stderr == "", moved.stderr
    assert tip(repo, "main") == new


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_fast_forward_of_base_to_an_instance_commit_still_refused(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 1)
    log = _spy(repo / ".git" / "hooks", tmp_path)
    # The hostile agent's history: two commits, the first right on the base,
    # so that its only parent is the base's tip, like an ordinary commit's.
    wt = worktree(run, "1")
    first = _commit(wt, "one.txt")
    assert first.returncode == 0, first.stderr
    one = tip(wt, "HEAD")
    assert _commit(wt, "two.txt").returncode == 0
    base = tip(repo, "main")
    assert git(repo, "rev-parse", f"{one}^") == base

    for update in (["merge", "--ff-only", one], ["update-ref", "refs/heads/main", one, base],
                   ["push", ".", f"{one}:main"]):
        git(repo, "config", "receive.denyCurrentBranch", "ignore")
        log.write_text("")
        refused = proc(repo, *update)
        assert refused.returncode != 0, (update, refused.stderr)
        assert "error[PARALLEL_DEV_SELECTION_NO_PASS]" in refused.stderr, refused.stderr
        assert "_hook reference-transaction" in log.read_text()
        assert tip(repo, "main") == base
        git(repo, "reset", "-q", "--merge")

    # A commit of its own on top of an instance commit brings that one in too.
    git(repo, "checkout", "-q", "--detach", one)
    on_top = _commit(repo, "three.txt")
    assert on_top.returncode == 0, on_top.stderr
    built = tip(repo, "HEAD")
    git(repo, "checkout", "-q", "main")
    pushed = proc(repo, "push", ".", f"{built}:main")
    assert pushed.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in pushed.stderr, pushed.stderr
    assert tip(repo, "main") == base

    # An ordinary commit next to it still passes, in sh.
    log.write_text("")
    ok = _commit(repo, "plain.txt")
    assert ok.returncode == 0, ok.stderr
    assert log.read_text() == ""


def test_long_transaction_touching_the_base_is_still_judged(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    run = spawn(gp, "t", 1)
    log = _spy(repo / ".git" / "hooks", tmp_path)
    wt = worktree(run, "1")
    assert _commit(wt, "one.txt").returncode == 0
    one, base = tip(wt, "HEAD"), tip(repo, "main")
    # Five other branches created in the same transaction, the base's update
    # last: more lines than the hook reads itself, so grep finds the base's.
    others = "".join(f"create refs/heads/other{i} {base}\n" for i in range(5))
    refused = proc(repo, "update-ref", "--stdin", input=f"start\n{others}update refs/heads/main {one} {base}\ncommit\n")
    assert refused.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in refused.stderr, refused.stderr
    assert tip(repo, "main") == base and git(repo, "branch", "--list", "other*") == ""
    # The same long transaction with an ordinary commit for the base passes in sh.
    plain = git(repo, "commit-tree", "-p", base, "-m", "plain", f"{base}^{{tree}}")
    log.write_text("")
    passed = proc(repo, "update-ref", "--stdin", input=f"start\n{others}update refs/heads/main {plain} {base}\ncommit\n")
    assert passed.returncode == 0, passed.stderr
    assert tip(repo, "main") == plain and log.read_text() == ""


def test_legacy_that_leads_back_to_us_does_not_loop(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path)
    hooks = repo / ".git" / "hooks"
    # A hook manager that chains "the old hook" which is, by mistake, ours.
    (hooks / "post-checkout.legacy").symlink_to(hooks / "post-checkout")
    log = _spy(hooks, tmp_path)
    spawn(gp, "t", 1)
    out = subprocess.run(["git", "worktree", "add", "-f", str(tmp_path / "again"), "parallel/t/1"], cwd=repo,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # Our check ran twice (once as the legacy), and the chain stopped there.
    assert out.stderr.count("git-parallel: task t, instance 1") == 2
    assert log.read_text().count("_hook post-checkout") == 2


def test_status_reports_absent_and_foreign(tmp_path: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    (repo / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    status = gp.json("hooks", "status")
    assert [h["state"] for h in status["hooks"]] == ["absent", "absent", "foreign"]
    assert status["installed"] is False and status["live_runs"] == []
    text = gp("hooks", "status").stdout
    assert "post-checkout" in text and "foreign at" in text


def test_the_hook_scripts_slow_path_starts_without_the_cli(tmp_path: Path) -> None:
    # The scripts call `python -m gitflow_parallel _hook NAME --common DIR ...`;
    # that goes straight to the hook code: neither click nor any verb is
    # imported (a checkout of a live instance branch pays for each import).
    repo, gp, run = picked_run(tmp_path)
    probe = ("import atexit, runpy, sys\n"
             "atexit.register(lambda: print('imported:', 'click' in sys.modules, 'gitflow_parallel.cli' in sys.modules))\n"
             "sys.argv = ['gitflow_parallel', *sys.argv[1:]]\n"
             "runpy.run_module('gitflow_parallel', run_name='__main__')\n")
    common = str(common_dir(repo))

    def hook(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", probe, "_hook", *args], cwd=repo, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL)

    out = hook("post-checkout", "--common", common, "--branch", "refs/heads/parallel/t/1", "--", "0" * 40, "1" * 40, "1")
    assert out.returncode == 0, out.stderr
    assert "imported: False False" in out.stdout
    assert "task t, instance 1 (track main, attempt 0)" in out.stderr
    # Arguments of another shape go through the CLI, which says what is wrong.
    out = hook("post-checkout", "--bogus", "--")
    assert out.returncode == 2 and "imported: True True" in out.stdout and "--common" in out.stderr


def test_a_pass_of_a_process_in_another_pid_namespace_is_kept(tmp_path: Path) -> None:
    """A git-parallel in a container sharing the repository names a pid
    this process cannot look up: once its pass was swept as dead, and the
    hooks then refused its own git.  Its pass stays a day; a dead one of
    this namespace goes, in either form."""
    import subprocess
    import time

    from gitflow_parallel.git import repo as repo_mod

    repo = make_repo(tmp_path / "repo", files={"a.txt": "a\n"})
    folder = repo / ".git" / "parallel" / "internal"
    folder.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = repo_mod.pid_namespace()
    passes = {"foreign": f"{dead.pid} n1{here}\n", "foreign-old": f"{dead.pid} n1{here}\n",
              "dead-here": f"{dead.pid} n{here}\n", "dead-before": f"{dead.pid}\n"}
    for name, text in passes.items():
        (folder / name).write_text(text)
    day = time.time() - repo_mod.FOREIGN_TOKEN_S - 60
    os.utime(folder / "foreign-old", (day, day))
    repo_mod._TOKENS.pop(os.path.realpath(repo / ".git"), None)
    token = internal_token(repo / ".git")
    left = {p.name for p in folder.iterdir()}
    assert left == {"foreign", token}
    assert (folder / token).read_text() == f"{os.getpid()} n{here}\n"
