"""Landing where the team lands: ``merge --push REMOTE`` moves a shared
base by an atomic push with a lease (onto the remote's tip, again onto a
newer one when it lost a race, never over another clone's commit), with the
notes and the run's refs; ``merge --pr`` proposes the winner instead.  Real
git throughout: a local bare repository stands for the hosting, other
clones for teammates, and a real ``update`` hook in the bare repository
makes the race happen on cue."""

from __future__ import annotations

import pytest

import json
import os
import stat
from pathlib import Path
from typing import Any

from conftest import GP, git, make_repo, snapshot

CONFIG = """\
gates:
  - name: tests
    run: [sh, test.sh]
"""
TEST_SH = "grep -q good out.txt\n"
GOOD_AGENT = ["sh", "-c", 'echo "good $GIT_PARALLEL_INSTANCE" > out.txt']


def team(tmp: Path) -> tuple[Path, Path, GP, Path]:
    """A bare origin with one commit on main, my clone (with ``gp``) and a teammate's clone."""
    origin = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = make_repo(tmp / "seed", {"test.sh": TEST_SH, "out.txt": "bad\n"}, config=CONFIG)
    git(seed, "push", "-q", str(origin), "main")
    mine, theirs = tmp / "mine", tmp / "theirs"
    git(tmp, "clone", "-q", str(origin), str(mine))
    git(tmp, "clone", "-q", str(origin), str(theirs))
    return origin, mine, GP(mine), theirs


def picked(gp: GP, task: str = "fx", n: int = 2) -> None:
    gp("spawn", task, "-n", str(n))
    gp("run", task, "--", *GOOD_AGENT)
    gp("check", task)
    gp("pick", task)


def teammate_commits(clone: Path, name: str, text: str, push: bool = True) -> str:
    git(clone, "pull", "-q", "--ff-only")
    (clone / name).write_text(text)
    git(clone, "add", name)
    git(clone, "commit", "-q", "-m", f"teammate: {name}")
    if push:
        git(clone, "push", "-q", "origin", "main")
    return git(clone, "rev-parse", "HEAD")


def note_lines(repo: Path, commit: str) -> list[dict[str, Any]]:
    shown = git(repo, "notes", "--ref=parallel", "show", commit).splitlines()
    return [json.loads(line) for line in shown if line.startswith("{")]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_merge_push_lands_on_the_remote_with_its_notes(tmp_path: Path) -> None:
    origin, mine, gp, _ = team(tmp_path)
    picked(gp)
    out = gp.json("merge", "fx", "--push", "origin")
    landed = out["merge"]["landed"]
    assert out["push"]["moved_base"] and out["push"]["attempts"] == 1
    assert git(origin, "rev-parse", "main") == landed == git(mine, "rev-parse", "main")
    assert git(mine, "ls-remote", "origin", "refs/notes/parallel")
    run_id = out["run_id"]
    on_remote = git(origin, "for-each-ref", "--format=%(refname)", "refs/parallel/")
    assert f"refs/parallel/runs/{run_id}" in on_remote and f"refs/parallel/evidence/{run_id}/" in on_remote
    # A teammate who never saw the run reads why it landed.
    fresh = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", str(origin), str(fresh))
    git(fresh, "fetch", "-q", "origin", "refs/notes/parallel:refs/notes/parallel")
    kinds = {line["kind"] for line in note_lines(fresh, "main")}
    assert {"merge", "pick"} <= kinds
    merge_line = next(line for line in note_lines(fresh, "main") if line["kind"] == "merge")
    assert merge_line["landed"] == landed and merge_line["run_id"] == run_id
    record = gp.json("status", "fx")["run"]
    assert record["merge"]["pushed"]["remote"] == "origin" and record["merge"]["pushed"]["landed"] == landed
    # Again: a merged run is only pushed.  The record now says it was pushed,
    # so its snapshot follows once; then the remote is left as it is.
    notes_before = git(origin, "rev-parse", "refs/notes/parallel")
    again = gp.json("merge", "fx", "--push", "origin")
    assert again["already"] and not again["push"]["moved_base"]
    assert set(again["push"]["refs"]) <= {f"refs/parallel/runs/{run_id}"}
    assert git(origin, "rev-parse", "main") == landed and git(origin, "rev-parse", "refs/notes/parallel") == notes_before
    before = git(origin, "for-each-ref", "--format=%(refname) %(objectname)")
    third = gp.json("merge", "fx", "--push", "origin")
    assert third["already"] and third["push"]["up_to_date"]
    assert git(origin, "for-each-ref", "--format=%(refname) %(objectname)") == before


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_merge_push_lands_onto_a_remote_that_moved_after_spawn(tmp_path: Path) -> None:
    origin, mine, gp, theirs = team(tmp_path)
    picked(gp)
    other = teammate_commits(theirs, "other.txt", "theirs\n")
    out = gp.json("merge", "fx", "--push", "origin")
    landed = out["merge"]["landed"]
    # A winner made only of its leftovers commit lands as one commit on the remote's tip (merge.squash: auto).
    assert out["merge"]["onto"] == other and out["merge"]["method"] == "squash"
    assert git(origin, "rev-parse", "main^") == other
    assert git(origin, "rev-parse", "main") == landed == git(mine, "rev-parse", "main")
    git(origin, "merge-base", "--is-ancestor", other, "main")  # never overwritten
    assert git(origin, "show", "main:other.txt") == "theirs"
    assert git(origin, "show", "main:out.txt").startswith("good")
    assert (mine / "other.txt").read_text() == "theirs\n"  # the clean checkout of main followed


def test_merge_push_refuses_a_base_that_diverged_and_changes_nothing(tmp_path: Path) -> None:
    origin, mine, gp, theirs = team(tmp_path)
    picked(gp)
    teammate_commits(theirs, "other.txt", "theirs\n")
    (mine / "local.txt").write_text("mine, not pushed\n")
    git(mine, "add", "local.txt")
    git(mine, "commit", "-q", "-m", "local work")
    remote_before = git(origin, "for-each-ref", "--format=%(refname) %(objectname)")
    local_before = snapshot(mine)
    proc = gp("merge", "fx", "--push", "origin", code=1)
    assert "error[PARALLEL_REMOTE_DIVERGED]" in proc.stderr and "nothing was changed" in proc.stderr
    assert "hint: bring them together first (`git pull origin main`" in proc.stderr
    after = snapshot(mine)
    assert {k: v for k, v in after.items() if k != "refs"} == {k: v for k, v in local_before.items() if k != "refs"}
    # Only the remote-tracking origin/main (and origin/HEAD, its symref) may have moved: it was fetched.
    def strip(refs: str) -> list[str]:
        return [l for l in refs.splitlines() if not l.startswith(("refs/remotes/origin/main ", "refs/remotes/origin/HEAD "))]
    assert strip(after["refs"]) == strip(local_before["refs"])
    assert git(origin, "for-each-ref", "--format=%(refname) %(objectname)") == remote_before


UPDATE_HOOK = """#!/bin/sh
# The first push to main loses the race: another commit lands there first.
if [ "$1" = refs/heads/main ] && [ ! -e "$GIT_DIR/raced" ]; then
    touch "$GIT_DIR/raced"
    git update-ref refs/heads/main "$(git rev-parse refs/tags/racer)" "$2" || exit 2
    echo "main moved meanwhile" >&2
    exit 1
fi
exit 0
"""


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_a_push_that_loses_the_race_lands_again_onto_the_winner_of_it(tmp_path: Path) -> None:
    origin, mine, gp, theirs = team(tmp_path)
    picked(gp)
    racer = teammate_commits(theirs, "racer.txt", "first\n", push=False)
    git(theirs, "push", "-q", "origin", "HEAD:refs/tags/racer")
    hook = origin / "hooks" / "update"
    hook.write_text(UPDATE_HOOK)
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    out = gp.json("merge", "fx", "--push", "origin")
    assert (origin / "raced").exists()
    push = out["push"]
    assert push["attempts"] == 2 and len(push["relanded"]) == 1 and push["relanded"][0]["remote_tip"] == racer
    landed = out["merge"]["landed"]
    assert landed != push["relanded"][0]["landed"] and out["merge"]["onto"] == racer
    assert out["merge"]["relanded"][0]["landed"] == push["relanded"][0]["landed"]
    assert git(origin, "rev-parse", "main") == landed == git(mine, "rev-parse", "main")
    git(origin, "merge-base", "--is-ancestor", racer, "main")  # the other commit is kept
    assert git(origin, "show", "main:racer.txt") == "first"
    assert any(l["kind"] == "merge" and l["landed"] == landed for l in note_lines(mine, landed))
    remote_notes = git(origin, "notes", "--ref=parallel", "show", landed)
    assert f'"landed":"{landed}"' in remote_notes.replace(" ", "")


def test_a_push_the_remote_refuses_says_what_landed_and_pushes_on_rerun(tmp_path: Path) -> None:
    origin, mine, gp, _ = team(tmp_path)
    picked(gp)
    hook = origin / "hooks" / "update"
    hook.write_text('#!/bin/sh\n[ -e "$GIT_DIR/open" ] && exit 0\necho "main is frozen" >&2\nexit 1\n')
    hook.chmod(0o755)
    seed = git(origin, "rev-parse", "main")
    proc = gp("merge", "fx", "--push", "origin", code=1)
    landed = git(mine, "rev-parse", "main")
    assert landed != seed and git(origin, "rev-parse", "main") == seed
    assert "error[PARALLEL_REMOTE_FAILED]" in proc.stderr
    assert f"landed on main here at {landed[:12]}" in proc.stderr and "nothing was pushed" in proc.stderr
    assert "git parallel merge fx --push origin" in proc.stderr
    assert not git(mine, "ls-remote", "origin", "refs/notes/parallel")  # atomic: none of it
    (origin / "open").touch()
    again = gp.json("merge", "fx", "--push", "origin")
    assert again["already"] and again["push"]["moved_base"]
    assert git(origin, "rev-parse", "main") == landed
    assert git(mine, "ls-remote", "origin", "refs/notes/parallel")


FAKE_GH = """#!/bin/sh
# Records its arguments and the body file it was given, like gh would read it.
printf '%s\\n' "$@" > "$GH_LOG/argv"
while [ $# -gt 0 ]; do
    if [ "$1" = --body-file ]; then cp "$2" "$GH_LOG/body"; fi
    shift
done
echo "https://github.example/team/repo/pull/7"
"""


def _pr_ready(tmp_path: Path) -> tuple[Path, Path, GP]:
    origin, mine, gp, _ = team(tmp_path)
    picked(gp)
    return origin, mine, gp


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_merge_pr_pushes_the_winner_and_asks_gh(tmp_path: Path) -> None:
    origin, mine, gp = _pr_ready(tmp_path)
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "gh").write_text(FAKE_GH)
    (fake / "gh").chmod(0o755)
    log = tmp_path / "ghlog"
    log.mkdir()
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "GH_LOG": str(log)}
    base = git(mine, "rev-parse", "main")
    out = gp.json("merge", "fx", "--pr", env=env)
    (p,) = out["proposals"]
    assert p["ran"] and p["tool"] == "gh" and p["url"] == "https://github.example/team/repo/pull/7"
    branch = p["branch"]
    argv = (log / "argv").read_text().splitlines()
    assert argv[:7] == ["pr", "create", "--base", "main", "--head", branch, "--title"]
    assert argv[8] == "--body-file" and argv[9] == p["body_file"]
    body = (log / "body").read_text()
    record = gp.json("status", "fx")["run"]
    assert record["run_id"] in body and f"instance `{p['winner']}`" in body and "| tests | enforced | pass |" in body
    assert f"refs/parallel/evidence/{record['run_id']}/{p['winner']}/0" in body
    # The winner's branch and provenance are on the remote; the base moved nowhere.
    assert git(origin, "rev-parse", f"refs/heads/{branch}") == p["commit"]
    assert git(origin, "rev-parse", "main") == base == git(mine, "rev-parse", "main")
    assert git(mine, "ls-remote", "origin", "refs/notes/parallel")
    assert record["status"] == "picked" and record["pr"]["proposals"][0]["url"] == p["url"]


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_merge_pr_without_gh_prints_the_command_and_writes_the_body(tmp_path: Path) -> None:
    origin, mine, gp = _pr_ready(tmp_path)
    bare = tmp_path / "bin-without-gh"
    bare.mkdir()
    for tool in ("git", "sh"):
        os.symlink(f"/usr/bin/{tool}", bare / tool)
    shim = next(p for p in os.environ["PATH"].split(os.pathsep) if (Path(p) / "git-parallel").exists())
    env = {"PATH": os.pathsep.join([shim, str(bare)])}
    proc = gp("merge", "fx", "--pr", env=env)
    record = gp.json("status", "fx")["run"]
    (p,) = record["pr"]["proposals"]
    body = Path(p["body_file"])
    assert body.is_file() and body.parent == Path(git(mine, "rev-parse", "--absolute-git-dir")) / "parallel" / "prs"
    assert "no gh on PATH" in proc.stdout and f"body: {body}" in proc.stdout
    expected = f"gh pr create --base main --head {p['branch']} --title"
    assert f"  {expected}" in proc.stdout and f"--body-file {body}" in proc.stdout
    assert not p["ran"] and record["status"] == "picked"
    assert "| tests | enforced | pass |" in body.read_text()
    assert git(origin, "rev-parse", f"refs/heads/{p['branch']}") == p["commit"]


def test_push_and_pr_exclude_each_other(tmp_path: Path) -> None:
    _, mine, gp, _ = team(tmp_path)
    proc = gp("merge", "fx", "--pr", "--push", "origin", code=2)
    assert "exclude each other" in proc.stderr
