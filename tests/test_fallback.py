"""Where the namespace layer is missing (Ubuntu 24.04's AppArmor setting, a
user namespace whose ``max_user_namespaces`` is 0, or
``GIT_PARALLEL_NAMESPACE=off`` as here): the private temp places cannot be
squatted, the fallback is said where people look, and nothing of a hidden
gate is left after it ends."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import GP, git, make_repo
from scenarios import project, stored_record

PY = sys.executable
OFF = {"GIT_PARALLEL_NAMESPACE": "off"}
WRITE = [PY, "{agent}", "calc.txt=fixed"]


def _agent(tmp_path: Path) -> list[str]:
    return [a.replace("{agent}", str(tmp_path / "tools" / "agent.py")) for a in WRITE]


# -- the private temp root ----------------------------------------------------------------------
def _squat(root: Path, how: str, elsewhere: Path) -> None:
    if how == "another-owner":
        root.mkdir(mode=0o700)
        try:
            os.chown(root, 12345, 12345)
        except OSError as exc:  # (a user namespace mapping no other uid)
            pytest.skip(f"cannot give a folder to another user here: {exc}")
    elif how == "link":
        elsewhere.mkdir(mode=0o700)
        root.symlink_to(elsewhere)
    else:  # ours, but others may read it
        root.mkdir()
        os.chmod(root, 0o755)


SQUATS = [pytest.param("another-owner", marks=pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")),
          "link", "open"]


@pytest.mark.parametrize("how", SQUATS)
def test_a_squatted_temp_root_refuses_run_and_nothing_goes_to_the_shared_tmp(tmp_path: Path, how: str) -> None:
    shared = tmp_path / "shared-tmp"  # stands for /tmp: TMPDIR names it
    shared.mkdir()
    os.chmod(shared, 0o1777)
    root = shared / f"git-parallel-{os.getuid()}"
    _squat(root, how, tmp_path / "elsewhere")
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "2")
    proc = gp("run", "t", "--", *_agent(tmp_path), code=1, env={"TMPDIR": str(shared)})
    assert "error[PARALLEL_SANDBOX_TMP_UNSAFE]" in proc.stderr, proc.stderr
    assert str(root) in proc.stderr and "hint:" in proc.stderr
    assert sorted(os.listdir(shared)) == [root.name]  # nothing fell back to the shared folder
    if how == "link":
        assert os.listdir(tmp_path / "elsewhere") == []
    elif how == "another-owner":
        assert os.listdir(root) == []
    assert {i["status"] for i in stored_record(repo)["instances"]} == {"pending"}  # nothing claimed


def test_a_temp_root_squatted_after_run_refuses_check(tmp_path: Path) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", *_agent(tmp_path), env={"TMPDIR": str(shared)})
    root = shared / f"git-parallel-{os.getuid()}"
    assert root.is_dir() and not root.is_symlink() and (os.stat(root).st_mode & 0o777) == 0o700
    root.rmdir()
    _squat(root, "link", tmp_path / "elsewhere")
    proc = gp("check", "t", code=1, env={"TMPDIR": str(shared)})
    assert "error[PARALLEL_SANDBOX_TMP_UNSAFE]" in proc.stderr, proc.stderr
    assert os.listdir(tmp_path / "elsewhere") == [] and sorted(os.listdir(shared)) == [root.name]


def test_a_fresh_temp_root_is_made_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitflow_parallel.proc import sandbox

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    root = sandbox.tmp_root()
    info = os.lstat(root)
    assert root == tmp_path / f"git-parallel-{os.getuid()}" and info.st_uid == os.getuid()
    assert (info.st_mode & 0o7777) == 0o700
    assert sandbox.tmp_root() == root  # verified again, kept


# -- a hidden gate leaves nothing ---------------------------------------------------------------
CALC = "def mul(a, b):\n    return a * b\n"
VISIBLE = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
HIDDEN = "from calc import mul\n\n\ndef test_hidden_secret_square():\n    assert mul(7, 7) == 49  # SECRET-HIDDEN-MARKER\n"


def test_nothing_of_a_hidden_gate_is_left_under_landlock_alone(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # the gate's python writes bytecode, as by default
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text(HIDDEN)
    # No -p no:cacheprovider: pytest's cache would name the hidden tests too.
    config = (f"gates:\n  - name: tests\n    run: [{PY}, -m, pytest, -q, tests]\n"
              f"  - name: hidden\n    run: [{PY}, -m, pytest, -q, tests]\n    hidden: {hidden}\n")
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": CALC, "tests/test_calc.py": VISIBLE}, config=config)
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    worktree = Path(stored_record(repo)["instances"][0]["worktree"])
    (worktree / "calc" / "__init__.py").write_text(CALC.replace("a * b", "b * a"))
    git(worktree, "commit", "-qam", "commute")
    checked = gp.json("check", "t")
    gate = checked["instances"][0]["gates"][1]
    assert gate["name"] == "hidden" and gate["hidden"]["summary"] == "2 passed", checked
    left = []
    for where in (repo, tmp_path / "repo.parallel"):
        for path in where.rglob("*"):
            if "test_hidden" in path.name:
                left.append(path)
            elif path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if b"SECRET-HIDDEN-MARKER" in data or b"test_hidden" in data:
                    left.append(path)
    assert left == []


# -- the fallback said where people look --------------------------------------------------------
def test_run_and_check_say_the_namespace_layer_is_missing_in_one_line(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--", *_agent(tmp_path))
    checked = gp("check", "t")
    for proc in (ran, checked):
        said = [line for line in proc.stderr.splitlines() if "namespace layer" in line]
        assert len(said) == 1, proc.stderr
        assert said[0].startswith("warning: ") and "GIT_PARALLEL_NAMESPACE=off" in said[0]
        assert "PID namespace" in said[0] and "judging.md" in said[0]
    assert "namespace layer" in " ".join(gp.json("check", "t", "--again")["warnings"])


def test_run_until_pass_says_it_once(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "1")
    proc = gp("run", "t", "--until-pass", "2", "--", *_agent(tmp_path), env=OFF)
    assert [line for line in proc.stderr.splitlines() if "namespace layer" in line][0].startswith("warning: ")
    assert len([line for line in proc.stderr.splitlines() if "namespace layer" in line]) == 1, proc.stderr


def test_the_warning_names_the_apparmor_fix_where_bwrap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from gitflow_parallel.proc import namespace, sandbox

    monkeypatch.setattr(namespace, "unavailable",
                        lambda: "bwrap cannot make namespaces here: setting up uid map: Permission denied")
    said = sandbox.fallback_warning({})
    assert said is not None and "kernel.apparmor_restrict_unprivileged_userns" in said
    assert sandbox.fallback_warning({"sandbox": "off"}) is None


def test_status_show_and_the_report_carry_the_layers_that_held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", *_agent(tmp_path))
    gp("check", "t")
    row = gp.json("status", "t")["run"]["instances"][0]
    assert row["live"]["sandbox"] == {"agent": ["landlock"], "gates": ["landlock"]}, row
    shown = gp.json("show", "t", "1")
    assert shown["sandbox"] == {"agent": ["landlock"], "gates": ["landlock"]}
    assert "layers: agent landlock; gates landlock" in gp("show", "t", "1").stdout
    report = gp.json("report", "t")
    assert report["attempts"][0]["sandbox"] == {"agent": ["landlock"], "gates": ["landlock"]}
    assert '<div class="meta" data-role="layers">layers: agent landlock; gates landlock</div>' in \
        Path(report["path"]).read_text()


REQUIRED = "sandbox: required\n"


def test_sandbox_required_without_namespaces_is_refused_at_spawn(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    repo, gp = project(tmp_path, "print('1 passed')", extra=REQUIRED)
    proc = gp("spawn", "t", "-n", "2", code=1)
    assert "error[PARALLEL_SANDBOX_UNAVAILABLE]" in proc.stderr and "spawn" in proc.stderr
    assert not (tmp_path / "repo.parallel" / "t").exists()
    assert git(repo, "branch", "--list", "parallel/*") == ""
    assert gp("status", "t", code=None).returncode != 0  # no run recorded


def test_init_check_warns_that_sandbox_required_refuses_every_run(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    repo, gp = project(tmp_path, "print('1 passed')", extra=REQUIRED)
    warnings = gp.json("init", "--check")["warnings"]
    assert any("sandbox: required" in w and "spawn" in w for w in warnings), warnings
    monkeypatch.delenv("GIT_PARALLEL_NAMESPACE")
    from gitflow_parallel.proc import namespace

    if namespace.unavailable() is None:
        assert not any("sandbox: required" in w for w in gp.json("init", "--check")["warnings"])


def test_run_tmux_under_landlock_alone_needs_the_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    repo, gp = project(tmp_path, "print('1 passed')")
    gp("spawn", "t", "-n", "1")
    proc = gp("run", "t", "--tmux", "--", *_agent(tmp_path), code=1)
    assert "error[PARALLEL_SANDBOX_UNAVAILABLE]" in proc.stderr and "--allow-tmux-escape" in proc.stderr
    assert stored_record(repo)["instances"][0]["status"] == "pending"


def test_the_tmux_refusal_holds_only_under_landlock_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitflow_parallel.proc import sandbox

    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")
    if sandbox.abi() == 0:
        pytest.skip("no Landlock here: agents run unfenced, and tmux takes nothing away")
    with pytest.raises(Exception) as refused:
        sandbox.refuse_tmux({}, allowed=False)
    assert "tmux" in str(refused.value)
    sandbox.refuse_tmux({}, allowed=True)
    sandbox.refuse_tmux({"sandbox": "off"}, allowed=False)

