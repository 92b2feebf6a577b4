"""Verbs that start at once: a verb imports what it uses, not the engines of
the others.  Each verb runs in a fresh ``python -m gitflow_parallel``
process whose module table is written out at exit, so what is asserted is
what a user's ``git parallel status`` really loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import GP, make_repo

# Runs the real entry point, then writes sys.modules (at exit, after the
# verb's sys.exit) to the file named by the first argument.
PROBE = ("import atexit, json, runpy, sys\n"
         "out = sys.argv[1]\n"
         "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
         "sys.argv = ['git-parallel', *sys.argv[2:]]\n"
         "runpy.run_module('gitflow_parallel', run_name='__main__')\n")

VERB_MODULES = {"status": "status", "show": "show", "logs": "logs", "diff": "diff"}
# Never needed to look at runs: the engines and the other verbs' CLI modules.
HEAVY = ("gitflow_parallel.cli.attempts", "gitflow_parallel.cli.landing", "gitflow_parallel.cli.live",
         "gitflow_parallel.cli.maintenance", "gitflow_parallel.judge", "gitflow_parallel.recovery", "gitflow_parallel.proc.engine",
         "gitflow_parallel.git.scratch", "gitflow_parallel.state.landing", "gitflow_parallel.state.transport")


def loaded(repo: Path, tmp_path: Path, *args: str) -> list[str]:
    out = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=repo, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.fixture
def spawned(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    gp = GP(repo)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--", sys.executable, "-c", "open('work.txt', 'w').write('done')")
    return repo


@pytest.mark.parametrize("args", [("status",), ("status", "t"), ("show", "t", "1"), ("logs", "t", "1"),
                                  ("diff", "t")])
def test_a_verb_imports_no_other_verb_nor_an_engine(spawned: Path, tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = loaded(spawned, tmp_path, *args)
    verbs = [m for m in modules if m.startswith("gitflow_parallel.commands.")]
    assert verbs == [f"gitflow_parallel.commands.{VERB_MODULES[args[0]]}"]
    heavy = [m for m in modules if m.startswith(HEAVY)]
    assert heavy == [], f"`git parallel {' '.join(args)}` imported {heavy}"


# What `status` never needs: worktree making, config parsing, templates,
# the lock, the sandbox, git notes, and pygit2 itself (about 80 ms of CPU
# to import): it reads records, ref files and evidence packs.
STATUS_ABSENT = ("gitflow_parallel.git.worktrees", "gitflow_parallel.git.checkout", "gitflow_parallel.config",
                 "gitflow_parallel.template", "gitflow_parallel.state.view", "gitflow_parallel.proc.sandbox",
                 "gitflow_parallel.git.notes", "pygit2", "filelock", "asyncio", "tempfile",
                 # nor the parser: its plain forms run without click (cli/status)
                 "click", "gitflow_parallel.cli.base", "gitflow_parallel.cli.review")


def test_status_imports_only_what_reading_a_run_takes(spawned: Path, tmp_path: Path) -> None:
    # The list of runs and one run's table: the records, the refs, the
    # evidence packs, the flags (a checked, a picked run: refs of every kind).
    gp = GP(spawned)
    gp("check", "t")
    gp("pick", "t")
    for args in (("status",), ("status", "t"), ("status", "t", "--json")):
        modules = set(loaded(spawned, tmp_path, *args))
        imported = [m for m in modules if m.startswith(STATUS_ABSENT)]
        assert imported == [], f"`git parallel {' '.join(args)}` imported {imported}"
        assert "gitflow_parallel.commands.status" in modules and "yaml" in modules


def test_logs_and_show_read_a_local_run_without_making_worktrees(spawned: Path, tmp_path: Path) -> None:
    # Their record, packs and logs are files; the archive refs (worktrees)
    # only matter for an attempt whose branch is gone.
    for args in (("logs", "t", "1"), ("show", "t", "1")):
        modules = set(loaded(spawned, tmp_path, *args))
        assert not {"gitflow_parallel.git.worktrees", "gitflow_parallel.config", "filelock"} & modules, args
    assert "pygit2" not in loaded(spawned, tmp_path, "logs", "t", "1")


def test_status_without_pygit2_says_what_it_said_with_it(spawned: Path, tmp_path: Path) -> None:
    # The refs read from files (loose, then packed) give the table pygit2
    # gave: the same tips, the same flags, after `git pack-refs --all` too.
    gp = GP(spawned)
    gp("check", "t")
    before = gp.json("status", "t")
    subprocess.run(["git", "pack-refs", "--all"], cwd=spawned, check=True)
    assert not (spawned / ".git" / "refs" / "heads" / "parallel" / "t" / "1").exists()
    after = gp.json("status", "t")
    assert after == before
    tips = {i["id"]: i["live"]["tip"] for i in after["run"]["instances"]}
    for inst, tip in tips.items():
        assert tip == subprocess.run(["git", "rev-parse", f"refs/heads/parallel/t/{inst}"], cwd=spawned,
                                     capture_output=True, text=True, check=True).stdout.strip()
    assert after["base_tip"] == subprocess.run(["git", "rev-parse", "HEAD"], cwd=spawned, capture_output=True,
                                               text=True, check=True).stdout.strip()


def test_help_still_lists_every_command(spawned: Path) -> None:
    # Commands are imported when asked for; --help asks for all of them.
    from gitflow_parallel.cli.base import HOMES

    proc = subprocess.run([sys.executable, "-m", "gitflow_parallel", "-h"], cwd=spawned, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    shown = [name for name in HOMES if not name.startswith("_")]
    missing = [name for name in shown if f"  {name} " not in proc.stdout and f"  {name}\n" not in proc.stdout]
    assert missing == []


def test_the_repository_found_without_pygit2_is_the_one_pygit2_finds(spawned: Path) -> None:
    # From the main worktree, a subfolder and an instance's linked worktree:
    # the same git dir, common dir, worktree and main worktree, and refs
    # read from files as libgit2 reads them (a symbolic ref followed; a name
    # that would read outside refs/ is no ref).
    import pygit2

    from gitflow_parallel.git import refs
    from gitflow_parallel.git.repo import Repo

    worktree = spawned.parent / "repo.parallel" / "t" / "1"
    (spawned / "sub").mkdir()
    for start in (spawned, spawned / "sub", worktree):
        found = refs.discover(start)
        assert found is not None, start
        libgit2 = pygit2.Repository(str(start))
        assert found.gitdir == Path(libgit2.path).resolve() and found.workdir == Path(libgit2.workdir).resolve()
        repo = Repo.open(start)
        assert repo.main_workdir == spawned.resolve() and repo.common_dir == (spawned / ".git").resolve()
        for name in ("HEAD", "refs/heads/parallel/t/1", "refs/heads/main", "refs/heads/none"):
            ref = libgit2.references.get(name)
            assert repo.ref_target(name) == (str(ref.resolve().target) if ref is not None else None), name
    subprocess.run(["git", "symbolic-ref", "refs/heads/alias", "refs/heads/main"], cwd=spawned, check=True)
    repo = Repo.open(spawned)
    assert repo.ref_target("refs/heads/alias") == repo.ref_target("refs/heads/main") is not None
    for bad in ("refs/heads/../../config", "refs/../HEAD", "refs/heads/main.lock", "config", "refs/heads/ma in"):
        assert repo.ref_target(bad) is None, bad
    assert [n for n, _ in repo.refs_under("refs/heads/parallel/t/")] == ["refs/heads/parallel/t/1",
                                                                        "refs/heads/parallel/t/2"]


def _parsed(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git parallel ARGS`` through click's parser, as every other verb runs."""
    code = ("import sys; from gitflow_parallel.cli.base import main_group; "
            "main_group.main(args=sys.argv[1:], prog_name='git parallel')")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=repo, capture_output=True, text=True, timeout=60)


def _plain(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitflow_parallel", *args], cwd=repo, capture_output=True, text=True,
                          timeout=60)


def test_status_says_the_same_without_the_parser(spawned: Path) -> None:
    # Its plain forms skip click: every answer, a refusal included, is the
    # parser's to the byte, and its exit status too.
    (spawned / ".git" / "parallel" / "runs" / "broken.yaml").write_text("task: [unclosed\n")
    # (Which orders of the arguments take this route: the unit test below.)
    for args in (("status",), ("status", "t"), ("status", "--json", "t"), ("status", "nosuch", "--json"),
                 ("status", "bad name!")):
        plain, parsed = _plain(spawned, *args), _parsed(spawned, *args)
        assert (plain.returncode, plain.stdout, plain.stderr) == (parsed.returncode, parsed.stdout, parsed.stderr), args


@pytest.mark.parametrize("args,form", [
    (["status"], (None, False)), (["status", "t"], ("t", False)), (["status", "--json"], (None, True)),
    (["status", "--json", "t"], ("t", True)), (["status", "t", "--json"], ("t", True)), (["status", ""], ("", False)),
    (["status", "-h"], None), (["status", "--help"], None), (["status", "t", "u"], None), (["status", "--", "t"], None),
    (["status", "--json", "--json"], None), (["status", "--jsonx"], None), (["show", "t"], None), ([], None)])
def test_only_the_plain_forms_of_status_skip_the_parser(args: list[str], form: tuple[str | None, bool] | None) -> None:
    from gitflow_parallel.cli.status import plain_form

    assert plain_form(args) == form
