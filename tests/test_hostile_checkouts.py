"""Hostile attempts against the judged checkouts: the attempt's own code,
run by the gates, rewrites the checkout it runs in; the judge's checkout
stays as the judge wrote it, and what it judges next is judged right."""

from __future__ import annotations

import pytest

import textwrap
from pathlib import Path

from conftest import git
from hostile import needs_namespace, status
from test_hostile import APP_BUGGY, HONEST, act, project

# The attempt's code: when the tests import it, it rewrites the checkout's
# .git file to a gitdir of its making, turns the tests folder into a link
# to a folder outside, writes through it, and leaves the bug in place.
VANDAL = textwrap.dedent('''\
    import os, pathlib, shutil
    here = pathlib.Path.cwd()
    outside = pathlib.Path(os.environ.get("OUTSIDE", "/nonexistent"))
    try:
        fake = here / "fake-gitdir"
        fake.mkdir(exist_ok=True)
        (fake / "HEAD").write_text("ref: refs/heads/main\\n")
        (here / ".git").write_text(f"gitdir: {fake}\\n")
        shutil.rmtree(here / "tests")
        os.symlink(outside, here / "tests")
        (here / "tests" / "authorized_keys").write_text("ssh-ed25519 attacker\\n")
    except OSError:
        pass
    def add(a, b):
        return a - b
''')


@needs_namespace
@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_checkout_the_attempts_code_rewrote_judges_the_next_attempt_right(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "authorized_keys").write_text("ssh-ed25519 owner\n")
    config = ("max_total: 16\nprotect: [tests/**]\ngates:\n  - name: tests\n    run: [./test.sh]\n"
              f"    env: {{OUTSIDE: '{outside}'}}\n")
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "3")
    act(gp, "t", "1", f"cat > app.py <<'EOF'\n{VANDAL}EOF")
    act(gp, "t", "2", f"printf '{APP_BUGGY}# still wrong\\n' > app.py")
    act(gp, "t", "3", HONEST)
    # One at a time, so that each borrows the same scratch checkout after the vandal.
    verdicts = {}
    for inst in ("1", "2", "3"):
        verdicts[inst] = gp.json("check", "t", "--instance", inst, "--jobs", "1", code=None)["instances"][0]["verdict"]
    assert verdicts == {"1": "fail", "2": "fail", "3": "pass"}
    assert (outside / "authorized_keys").read_text() == "ssh-ed25519 owner\n"
    scratch = tmp_path / "repo.parallel" / ".judged" / "scratch+1"
    assert (scratch / ".git").read_text().startswith(f"gitdir: {repo / '.git' / 'worktrees'}")
    assert (scratch / "tests").is_dir() and not (scratch / "tests").is_symlink()
    assert not (scratch / "fake-gitdir").exists()
    packs = [status(gp, "t")[i] for i in ("1", "2", "3")]
    assert all(p["verdict"] is not None for p in packs)
    gp("pick", "t")
    gp("merge", "t")
    assert git(repo, "show", "main:app.py").endswith("a + b")


@needs_namespace
def test_the_import_probe_runs_the_attempts_code_sandboxed(tmp_path: Path) -> None:
    # A committed json.py is what `python -c` imports first in the checkout:
    # the question of where the gate's Python imports from runs it.
    from conftest import GP, make_repo
    from test_hostile import PY

    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": "def add(a, b):\n    return a + b\n",
                                         "tests/check.py": "from calc import add\nassert add(2, 3) == 5\n"},
                     config=f"gates:\n  - name: tests\n    run: ['{PY}', tests/check.py]\n")
    gp = GP(repo)
    main = git(repo, "rev-parse", "main")
    attack = textwrap.dedent(f"""\
        import subprocess
        open({str(repo / 'pwned')!r}, "w").write("ran as the user")
        subprocess.run(["git", "-C", {str(repo)!r}, "update-ref", "refs/heads/main", "HEAD~0"])
        raise SystemExit(0)
        """)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", f"cat > json.py <<'EOF'\n{attack}EOF")
    gp("check", "t", code=None)
    assert not (repo / "pwned").exists()
    assert git(repo, "rev-parse", "main") == main
