"""git-parallel's hooks beside the hook managers people use, each installed
from its registry (husky, lefthook and simple-git-hooks from npm, pre-commit
from PyPI) once
per session: the managers' own hooks keep running, a manager's reinstall
that takes ours away is said loudly by `hooks status`, `check` and `merge`,
and `hooks install` chains ours in again without refusing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import git
from test_hooks import agent, proc, setup, spawn

pytestmark = pytest.mark.slow  # each manager is downloaded once per session

# The environment the session started with: the registries' settings
# (~/.npmrc, pip's index) live there, not in a test's sealed HOME.
OUTER_ENV = dict(os.environ)


def _fetch(cmd: list[str], cwd: Path, what: str) -> None:
    try:
        out = subprocess.run(cmd, cwd=str(cwd), env=OUTER_ENV, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{what} could not be installed from its registry: {exc}")
    if out.returncode != 0:
        pytest.skip(f"{what} could not be installed from its registry: {out.stderr.strip()[-400:]}")


@pytest.fixture(scope="session")
def npm_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with husky, lefthook and simple-git-hooks installed by npm
    (lefthook's package ships its binary as a dependency, so no install
    script is needed)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    where = tmp_path_factory.mktemp("npm-tools")
    (where / "package.json").write_text('{"name": "tools", "version": "1.0.0", "private": true}\n')
    _fetch(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "husky@9", "lefthook", "simple-git-hooks@2"],
           where, "husky, lefthook and simple-git-hooks")
    return where / "node_modules"


@pytest.fixture(scope="session")
def pre_commit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pre-commit command, pip-installed into a venv of its own."""
    venv = tmp_path_factory.mktemp("pre-commit-venv")
    _fetch([sys.executable, "-m", "venv", str(venv)], venv, "a venv for pre-commit")
    _fetch([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "pre-commit"], venv, "pre-commit")
    return venv / "bin" / "pre-commit"


def run(cwd: Path, *cmd: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(list(cmd), cwd=str(cwd), capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def refused_merge(repo: Path) -> str:
    """A plain merge of an unpicked instance: our hook refuses it."""
    out = proc(repo, "merge", "--no-ff", "-m", "m", "parallel/t/1")
    assert out.returncode != 0 and "PARALLEL_DEV_SELECTION_NO_PASS" in out.stderr, out.stderr
    git(repo, "merge", "--abort")
    return out.stdout + out.stderr


def said_gone(gp, *names: str) -> str:
    status = gp.json("hooks", "status")
    assert status["installed"] is False and status["gone"], status
    for name in names:
        assert name in status["gone"]
    checked = gp("check", "t", code=None)
    assert "warning: git-parallel's hooks are gone" in checked.stderr
    return status["gone"]


def test_husky_hooks_keep_running_and_its_reinstall_is_said(tmp_path: Path, npm_tools: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    log = tmp_path / "husky.log"
    (repo / ".husky").mkdir()
    for name in ("pre-merge-commit", "post-checkout"):
        (repo / ".husky" / name).write_text(f'echo "husky {name}" >> "{log}"\n')
    husky = ["node", str(npm_tools / "husky" / "bin.js")]
    gp("hooks", "install")  # into .git/hooks, before husky came
    run(repo, *husky)  # what `npm install` runs as husky's prepare
    assert git(repo, "config", "core.hooksPath") == ".husky/_"
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    # husky moved git to .husky/_: ours in .git/hooks no longer run.
    assert str(repo / ".git" / "hooks") in said_gone(gp, "pre-merge-commit", "reference-transaction")

    for _ in range(2):  # installed, then after husky's reinstall took two of ours
        result = gp.json("hooks", "install")
        assert all(h["action"] in ("installed", "unchanged") for h in result["hooks"])
        assert gp.json("hooks", "status")["installed"] is True
        log.write_text("")
        refused_merge(repo)
        assert "husky pre-merge-commit" in log.read_text()  # husky's own hook ran, under its name
        git(repo, "checkout", "-q", "-b", f"side{_}")
        assert "husky post-checkout" in log.read_text()
        git(repo, "checkout", "-q", "main")
        run(repo, *husky)
        if _ == 0:
            gone = said_gone(gp, "pre-merge-commit", "post-checkout")
            assert "now husky's" in gone and "reference-transaction (" not in gone  # husky left that one

    gp("hooks", "install")
    gp("hooks", "uninstall")
    assert "git-parallel" not in (repo / ".husky" / "_" / "pre-merge-commit").read_text()
    assert not (repo / ".git" / "hooks" / "pre-merge-commit").exists()  # ours there went at the first install
    assert gp.json("hooks", "status")["gone"] is None


def test_lefthook_moving_ours_aside_is_said_and_undone(tmp_path: Path, npm_tools: Path) -> None:
    repo, gp = setup(tmp_path, install=False)
    log = tmp_path / "lefthook.log"
    (repo / "lefthook.yml").write_text(
        "".join(f"{name}:\n  commands:\n    say:\n      run: echo lefthook {name} >> {log}\n"
                for name in ("pre-merge-commit", "post-checkout")))
    lefthook = str(npm_tools / ".bin" / "lefthook")
    gp("hooks", "install")
    run(repo, lefthook, "install")  # moves ours to <name>.old, which it never runs
    hooks = repo / ".git" / "hooks"
    assert "git-parallel" in (hooks / "pre-merge-commit.old").read_text()
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    assert "pre-merge-commit.old" in said_gone(gp, "pre-merge-commit", "post-checkout")

    for _ in range(2):  # and again after lefthook's next install
        gp("hooks", "install")
        assert not (hooks / "pre-merge-commit.old").exists()
        assert gp.json("hooks", "status")["installed"] is True
        log.write_text("")
        refused_merge(repo)
        git(repo, "checkout", "-q", "-b", f"side{_}")
        git(repo, "checkout", "-q", "main")
        assert "lefthook pre-merge-commit" in log.read_text() and "lefthook post-checkout" in log.read_text()
        run(repo, lefthook, "install")  # succeeds: no copy of ours left in its way
        said_gone(gp, "pre-merge-commit")


def test_simple_git_hooks_deleting_ours_is_said_and_its_keep_list_keeps_them(tmp_path: Path,
                                                                             npm_tools: Path) -> None:
    """simple-git-hooks (its `prepare`, on every `npm install`) deletes every
    hook its config does not name: ours went without a trace, and nothing
    said so.  The mark `hooks install` leaves says so now, with the keep list
    to add, and with that list its next install leaves ours alone."""
    repo, gp = setup(tmp_path, install=False)
    log = tmp_path / "sgh.log"
    config = {"pre-commit": f"echo sgh pre-commit >> {log}"}

    def package(**more: object) -> None:
        (repo / "package.json").write_text(json.dumps({"name": "p", "version": "1.0.0", "private": True,
                                                       "simple-git-hooks": {**config, **more}}) + "\n")
        git(repo, "add", "package.json")
        git(repo, "commit", "-q", "-m", "package.json")

    package()
    sgh = ["node", str(npm_tools / "simple-git-hooks" / "cli.js")]
    gp("hooks", "install")
    run(repo, *sgh)  # what `npm install` runs as the project's prepare
    hooks = repo / ".git" / "hooks"
    assert not any((hooks / name).exists() for name in ("pre-merge-commit", "reference-transaction", "post-checkout"))
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    gone = said_gone(gp, "pre-merge-commit (absent)", "reference-transaction (absent)", "post-checkout (absent)")
    keep = ["pre-merge-commit", "reference-transaction", "post-checkout"]
    assert f'"preserveUnused": {json.dumps(keep)}' in gone, gone

    package(preserveUnused=keep)  # what the warning asks for
    gp("hooks", "install")
    run(repo, *sgh)
    assert gp.json("hooks", "status")["installed"] is True
    refused_merge(repo)
    log.write_text("")
    git(repo, "commit", "-q", "--allow-empty", "-m", "its own hook still runs")
    assert "sgh pre-commit" in log.read_text()

    gp("hooks", "uninstall")  # the mark goes with ours: absent is then what was asked
    assert gp.json("hooks", "status")["gone"] is None


def test_pre_commit_runs_ours_in_its_migration_mode(tmp_path: Path, pre_commit: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    repo, gp = setup(tmp_path, install=False)
    log = tmp_path / "pre-commit.log"
    stages = ("pre-merge-commit", "post-checkout")
    (repo / ".pre-commit-config.yaml").write_text(
        "repos:\n- repo: local\n  hooks:\n" + "".join(
            f"  - id: say-{s}\n    name: say\n    entry: sh -c 'echo pre-commit {s} >> {log}'\n"
            f"    language: system\n    always_run: true\n    pass_filenames: false\n    stages: [{s}]\n"
            for s in stages))
    git(repo, "add", ".pre-commit-config.yaml")
    git(repo, "commit", "-q", "-m", "pre-commit config")
    monkeypatch.setenv("PRE_COMMIT_HOME", str(tmp_path / "pre-commit-home"))  # the hooks git starts read it too
    install = [str(pre_commit), "install", "-t", "pre-merge-commit", "-t", "post-checkout"]
    run(repo, *install)
    hooks = repo / ".git" / "hooks"
    result = gp.json("hooks", "install")
    for name in stages:  # ours goes where pre-commit runs it first, pre-commit's stays in front
        assert "pre-commit" in (hooks / name).read_text()
        assert next(h for h in result["hooks"] if h["name"] == name)["run_by"] == "pre-commit"
    spawn(gp, "t", 1)
    agent(gp, "t", "1", "result.txt=good")
    for _ in range(2):  # and after pre-commit installs again
        assert gp.json("hooks", "status")["installed"] is True
        log.write_text("")
        refused_merge(repo)
        git(repo, "checkout", "-q", "-b", f"side{_}")
        git(repo, "checkout", "-q", "main")
        assert "pre-commit pre-merge-commit" in log.read_text() and "pre-commit post-checkout" in log.read_text()
        run(repo, *install)
    checked = gp("check", "t", code=None)
    assert "hooks are gone" not in checked.stderr

    # Ours first, pre-commit after: pre-commit keeps ours as .legacy and runs it.
    gp("hooks", "uninstall")
    assert "git-parallel" not in (hooks / "pre-merge-commit").read_text()
    assert not (hooks / "pre-merge-commit.legacy").exists()
    run(repo, str(pre_commit), "uninstall", "-t", "pre-merge-commit", "-t", "post-checkout")
    gp("hooks", "install")
    run(repo, *install)
    assert gp.json("hooks", "status")["installed"] is True
    refused_merge(repo)
