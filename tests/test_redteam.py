"""Red team: attacks on the sandbox (issue 35's model), written as the
attempt's agent and as the attempt's own code.  Each test asserts the
product's promise; an attack that works makes it fail (marked xfail strict)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git
from hostile import log_of, needs_namespace
from test_hostile import HONEST, PY, act, project

# sh: a commit whose test passes with the bug left in, made as objects only
# (the branch is left at the base, so no tamper rule sees "its" commits).
EVIL_COMMIT = (
    "printf 'def test_add():\\n    pass\\n' > tests/test_app.py && git add -A && "
    "X=$(git commit-tree $(git write-tree) -p HEAD -m evil) && git reset -q --hard HEAD && "
    "M=$(git rev-parse refs/heads/main) && "
    "V=$(git rev-parse --git-dir)/parallel-common && "
)


@needs_namespace
def test_forged_start_refs_cannot_move_main(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    main_before = git(repo, "rev-parse", "main")
    gp("spawn", "t", "-n", "1")
    agent = EVIL_COMMIT + (
        "rm -f $V/refs/heads/main && echo $X > $V/refs/heads/main && "
        "printf '{\"own\": \"refs/heads\", \"inst\": \"main\", \"refs\": {\"main\": \"%s\"}}' $M > $V/start-refs.json && "
        "echo forged $X"
    )
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    print(log_of(gp, "t", "1"))
    assert git(repo, "rev-parse", "main") == main_before, "main moved to the agent's unjudged commit"


@needs_namespace
def test_the_leftovers_commit_runs_no_filter_the_agent_configured(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    mark = tmp_path / "pwned"
    gp("spawn", "t", "-n", "1")
    agent = (f"{HONEST} && rm -f .git && git init -q -b parallel/t/1 . && "
             f"git config filter.x.clean \"sh -c 'id > {mark}; cat'\" && echo '* filter=x' > .gitattributes; "
             f"touch {mark} 2>/dev/null && echo 'sandbox let me write it'; true")
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    assert "sandbox let me write it" not in log_of(gp, "t", "1")
    assert not mark.exists(), "a filter the agent configured ran outside the sandbox: " + mark.read_text()


@pytest.mark.slow  # the default tier keeps near 150 s; CI runs this after it
@needs_namespace
def test_an_agent_cannot_read_a_live_siblings_commits(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    writer = "echo SECRET-WORK-OF-ONE > secret.txt && git add secret.txt && git commit -qm mine && sleep 5"
    reader = ("V=$(dirname $(git rev-parse --absolute-git-dir))/..; for i in $(seq 40); do "
              "for a in $V/worktrees/*; do git --git-dir=$a show HEAD:secret.txt 2>/dev/null && exit 0; done; "
              "sleep 0.2; done")
    agent = f'case "$GIT_PARALLEL_INSTANCE" in 1) {writer};; *) {reader};; esac'
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    assert "SECRET-WORK-OF-ONE" not in log_of(gp, "t", "2")


@needs_namespace
def test_a_visible_gate_cannot_read_the_hidden_tests(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: tests
            run: [./test.sh]
          - name: hidden
            run: [./test.sh]
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    spy = ("import re, pathlib\\n"
           "h = re.search(r'hidden: (\\\\S+)', pathlib.Path('.gitparallel.yaml').read_text()).group(1)\\n"
           "raise RuntimeError('LEAK ' + ' '.join(p.read_text() for p in pathlib.Path(h).rglob('*.py')))\\n")
    act(gp, "t", "1", f"printf \"{spy}\" > app.py")
    checked = gp.json("check", "t", code=None)["instances"][0]
    logs = " ".join(Path(g["log"]).read_text() for g in checked["gates"] if g.get("log"))
    assert "SECRET_ANSWER" not in logs, "a gate read the hidden tests"


# The attempt's app.py: the bug stays; imported outside pytest it rewrites
# the protected test in the attempt's shared upper layer.
REWRITER = textwrap.dedent("""\
    import os, sys
    def add(a, b):
        return a - b
    if 'pytest' not in sys.modules and os.path.isdir('tests'):
        open('tests/test_app.py', 'w').write('def test_add():\\n    pass\\n')
    """)


def judge_and_land(gp: GP) -> dict:
    """check, pick and merge the task as a user would; the one attempt's check result."""
    checked = gp.json("check", "t", code=None)["instances"][0]
    gp("pick", "t", code=None)
    gp("merge", "t", code=None)
    return checked


def heredoc(name: str, text: str) -> str:
    return f"cat > {name} <<'GP_EOF'\n{text}GP_EOF\n"


@needs_namespace
def test_an_earlier_gate_cannot_rewrite_the_protected_tests_of_a_later_one(tmp_path: Path) -> None:
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: imports
            run: ['{PY}', -c, 'import app']
          - name: tests
            run: [./test.sh]
            requires: [imports]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", heredoc("app.py", REWRITER))
    checked = judge_and_land(gp)
    assert "pytest" not in git(repo, "show", "main:app.py"), "the bug landed on main (re-proved)"
    assert checked["verdict"] != "pass", "the bug passed its tests"


# The attempt's app.py under a gate with expect: it writes the runner's
# report itself (its path is in the environment) and ends the run.
FORGED_REPORT = textwrap.dedent("""\
    import os
    def add(a, b):
        return a - b
    r = os.environ.get('GIT_PARALLEL_REPORT')
    if r:
        open(r, 'w').write('<testsuite tests="1"><testcase classname="tests.test_app" name="test_add"/></testsuite>')
        os._exit(0)
    """)


@needs_namespace
def test_expect_cannot_be_satisfied_by_a_report_the_attempt_wrote(tmp_path: Path) -> None:
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: tests
            run: ['{PY}', -m, pytest, -q, -p, no:cacheprovider, '--junitxml={{report}}', tests]
            expect:
              fail_to_pass: [tests/test_app.py::test_add]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", heredoc("app.py", FORGED_REPORT))
    checked = judge_and_land(gp)
    assert "GIT_PARALLEL_REPORT" not in git(repo, "show", "main:app.py"), "the bug landed on main (re-proved)"
    assert checked["verdict"] != "pass", "the bug passed by a forged report"


@needs_namespace
def test_an_agents_admin_gitdir_cannot_fail_an_honest_sibling(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    act(gp, "t", "1", HONEST)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", 'echo /.git > "$(git rev-parse --absolute-git-dir)/gitdir"',
       code=None)
    checked = {i["id"]: i for i in gp.json("check", "t", code=None)["instances"]}
    assert checked["1"]["verdict"] == "pass", json.dumps(checked["1"]["gates"])[:600]
