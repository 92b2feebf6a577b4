"""Red team, round four, as the attempt's own committed code (what a gate,
setup, probe or distinguish run starts: its tests import it), grouped by
place.  Each test asserts the promise; an attack that works makes it fail
(one the fix needs a design choice for is a strict xfail, its route
explained).  The agent's own routes are in test_redteam_round4_agent.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git, make_repo
from hostile import needs_namespace
from test_hostile import APP_FIXED, HONEST, PY, project
from test_sandbox import LAYERS, fenced

# Each attack runs a whole flow: the slow tier, which CI runs after the default one
# (kept under 150 s).
pytestmark = pytest.mark.slow

LANDLOCK = [LAYERS[1]]


def commit_app(gp: GP, tmp_path: Path, source: str) -> None:
    """One attempt whose agent replaces app.py with ``source`` (the
    attempt's code the judge then runs)."""
    gp("spawn", "t", "-n", "1")
    (tmp_path / "app.py").write_text(source)
    gp("run", "t", "--", "sh", "-c", f"cp {tmp_path / 'app.py'} app.py")

# -- judged checkouts under Landlock alone: what the judge writes, removes and reads after a gate ---
#
# Under Landlock alone the gates write their checkout itself, and the judge,
# unfenced, then takes out what it laid there (the added tests, a hidden
# gate's tests) and puts back what they replaced.  The attempt's code, run
# by that gate, turned the folder on the way into a link to a folder of the
# user's: the judge's unlink and write went through it.

# The attempt's app.py: right, and when imported with `marker` in the
# checkout (the stage that holds the judge's files), `tests` made a link to
# `victim`.
def _turncoat(marker: str, victim: Path) -> str:
    return APP_FIXED + textwrap.dedent(f"""\
        import os, shutil
        if os.path.exists({marker!r}) and not os.path.islink('tests'):
            shutil.rmtree('tests')
            os.symlink({str(victim)!r}, 'tests')
        """)


@pytest.mark.parametrize("layer", LANDLOCK)
def test_the_added_tests_stage_deletes_nothing_through_a_link_the_gate_left(tmp_path: Path, layer: str) -> None:
    # The attempt names its added test as it likes (any file under the
    # protected glob): the judge's removal of it after the stage unlinked
    # the user's file of that name.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("mine\n")
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    (tmp_path / "app.py").write_text(_turncoat("tests/precious.txt", victim))
    agent = f"cp {tmp_path / 'app.py'} app.py && echo added > tests/precious.txt && git add -A && git commit -qm fix"
    gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
    gp("check", "t", code=None, env=fenced(layer))
    assert (victim / "precious.txt").exists(), "the judge deleted the user's file through the gate's link"


@pytest.mark.parametrize("layer", LANDLOCK)
def test_a_hidden_gate_writes_nothing_back_through_a_link_the_gate_left(tmp_path: Path, layer: str) -> None:
    # After a hidden gate the judge puts back the attempt's file at each
    # hidden path: through the link, it replaced the user's file with it.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "test_app.py").write_text("mine\n")
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_app.py").write_text("from app import add\n\n\ndef test_secret():\n    assert add(1, 1) == 2\n")
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: hidden
            run: [./test.sh]
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    (tmp_path / "app.py").write_text(_turncoat("tests/test_app.py", victim))
    gp("run", "t", "--", "sh", "-c", f"cp {tmp_path / 'app.py'} app.py", env=fenced(layer))
    gp("check", "t", code=None, env=fenced(layer))
    assert sorted(p.name for p in victim.iterdir()) == ["test_app.py"]
    assert (victim / "test_app.py").read_text() == "mine\n", "the judge wrote through the gate's link"


# The attempt's app.py: right, and its checkout's `.git` file made to name
# the admin folder of the user's own worktree `feature` (beside the
# checkout's own in <common>/worktrees, which a gate may read).
REPOINT = APP_FIXED + textwrap.dedent("""\
    import os
    try:
        own = open('.git').read().split('gitdir:', 1)[1].strip()
        open('.git', 'w').write('gitdir: ' + os.path.join(os.path.dirname(own), 'feature') + '\\n')
    except OSError:
        pass
    """)


@pytest.mark.parametrize("layer", LANDLOCK)
def test_a_checkout_whose_git_file_a_gate_repointed_is_removed_alone(tmp_path: Path, layer: str) -> None:
    # A checkout a gate wrote in is removed before it is judged in again,
    # with the admin folder its `.git` file names: repointed by the gate, it
    # named the admin folder of a worktree of the user's, which went too
    # (its HEAD, its index: git no longer knows the worktree).
    repo, gp = project(tmp_path)
    git(repo, "worktree", "add", "-q", str(tmp_path / "feature"), "-b", "feature")
    gp("spawn", "t", "-n", "2")
    (tmp_path / "app.py").write_text(REPOINT)
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"cp {tmp_path / 'app.py'} app.py", env=fenced(layer))
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, env=fenced(layer))
    for inst in ("1", "2"):  # one after another: the second borrows the checkout the first left
        gp("check", "t", "--instance", inst, "--jobs", "1", code=None, env=fenced(layer))
    assert (repo / ".git" / "worktrees" / "feature" / "HEAD").is_file(), "the user's worktree lost its admin folder"
    assert git(tmp_path / "feature", "rev-parse", "--abbrev-ref", "HEAD") == "feature"


# The attempt's app.py: right, and its checkout's `.git` file made to name
# a git dir of its own making: gone, or one whose index is a sparse file of
# 16 GB (no disk used).
def _regitted(kind: str) -> str:
    return APP_FIXED + textwrap.dedent(f"""\
        import os, shutil
        if {kind!r} == "gone":
            open('.git', 'w').write('gitdir: /nonexistent/gitdir\\n')
        else:
            own = open('.git').read().split('gitdir:', 1)[1].strip()
            shutil.copytree(own, 'fake', symlinks=True)
            common = os.path.realpath(os.path.join(own, open(os.path.join(own, 'commondir')).read().strip()))
            open('fake/commondir', 'w').write(common + '\\n')
            with open('fake/index', 'r+b') as index:
                index.truncate(16 << 30)
            open('.git', 'w').write('gitdir: ' + os.path.abspath('fake') + '\\n')
        """)


@pytest.mark.slow  # a capped process
@pytest.mark.parametrize("kind", ["gone", "huge-index"])
@pytest.mark.parametrize("layer", LANDLOCK)
def test_a_git_file_a_gate_repointed_is_never_followed_by_the_judge(tmp_path: Path, layer: str, kind: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # Under Landlock alone the judge then looks for tracked changes in the
    # checkout with libgit2, which follows its `.git` file: to a git dir
    # that is not there it raised (check ended in an internal error, the
    # honest sibling's evidence with it); to one of the gate's making it
    # read its 16 GB index whole.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    (tmp_path / "app.py").write_text(_regitted(kind))
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"cp {tmp_path / 'app.py'} app.py", env=fenced(layer))
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, env=fenced(layer))
    monkeypatch.setenv("GIT_PARALLEL_NAMESPACE", "off")  # run_capped's process inherits it
    proc, rss = run_capped(repo, "check", "t", "--jobs", "1")
    assert proc.returncode == 1 and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])
    assert gp.json("show", "t", "2")["pack"]["verdict"] == "pass"


@pytest.mark.parametrize("layer", LANDLOCK)
def test_a_failed_setup_removes_nothing_through_a_link_it_left(tmp_path: Path, layer: str) -> None:
    # Under Landlock alone setup builds in the checkout itself, and what a
    # failed one kept is removed by the judge, unfenced: the attempt's build
    # turned the folder holding a `keep` path into a link to a folder of the
    # user's, and the judge removed the user's folder of that name.
    victim = tmp_path / "victim"
    (victim / "node_modules").mkdir(parents=True)
    (victim / "node_modules" / "precious.txt").write_text("mine\n")
    config = textwrap.dedent("""\
        protect: [tests/**]
        setup:
          run: [sh, build.sh]
          cache_key: [build.sh]
          keep: [web/node_modules]
        gates:
          - name: tests
            run: [./test.sh]
        """)
    repo, gp = project(tmp_path, config)
    (repo / "build.sh").write_text("mkdir -p web/node_modules\n")
    git(repo, "add", "build.sh")
    git(repo, "commit", "-qm", "build")
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && echo 'rm -rf web && ln -s {victim} web && exit 1' > build.sh",
       env=fenced(layer))
    gp("check", "t", code=None, env=fenced(layer))
    assert (victim / "node_modules" / "precious.txt").is_file(), "the judge removed the user's folder through a link"


# -- environments: where a gate's programs and libraries come from ---------------------


@pytest.mark.slow  # a setup and a check
@pytest.mark.parametrize("layer", LAYERS)
def test_files_the_attempt_commits_under_a_kept_path_join_no_environment(tmp_path: Path, layer: str) -> None:
    # The kept environment (`keep: [.venv]`, `path: [.venv/bin]`) is laid
    # over the checkout as a folder merged with the checkout's own: a
    # `.venv/bin/sh` the attempt committed (the environment has none) came
    # first on the gates' PATH and ran as the gate's shell; the wrong
    # attempt passed.
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        setup:
          run: [sh, -c, 'mkdir -p .venv/bin && printf "#!/bin/sh\\\\nexec {PY} -m pytest -q -p no:cacheprovider tests\\\\n" > .venv/bin/runtests && chmod +x .venv/bin/runtests']
          cache_key: [.gitparallel.yaml]
          keep: [.venv]
          path: [.venv/bin]
        gates:
          - name: tests
            run: [sh, -c, runtests]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    agent = ("mkdir -p .venv/bin && printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/sh && chmod +x .venv/bin/sh && "
             "git add -f .venv/bin/sh && git commit -qm 'my shell'")
    gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
    checked = gp.json("check", "t", code=None, env=fenced(layer))["instances"][0]
    assert checked["verdict"] == "fail", checked["gates"]


def test_a_relative_folder_on_the_users_path_finds_no_program_of_the_attempts(tmp_path: Path) -> None:
    # A `PATH` of the user's with a relative folder (`node_modules/.bin`,
    # `.`, as many set it) was handed to the gates as it was, and resolved in
    # the judged checkout: a `node_modules/.bin/sh` the attempt committed ran
    # as the gate's shell, and the wrong attempt passed.
    config = "protect: [tests/**]\ngates:\n  - name: tests\n    run: [sh, -c, ./test.sh]\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    agent = ("mkdir -p node_modules/.bin && printf '#!/bin/sh\\nexit 0\\n' > node_modules/.bin/sh && "
             "chmod +x node_modules/.bin/sh && git add -f node_modules && git commit -qm 'my shell'")
    gp("run", "t", "--", "sh", "-c", agent)
    path = "node_modules/.bin" + os.pathsep + os.environ["PATH"]
    checked = gp.json("check", "t", code=None, env={"PATH": path})["instances"][0]
    assert checked["verdict"] == "fail", checked["gates"]


def test_no_empty_or_relative_folder_of_the_users_library_path_reaches_a_gate(tmp_path: Path) -> None:
    # An empty entry in LD_LIBRARY_PATH (`export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/opt/lib`
    # with it unset) is the current folder: in a gate, the judged checkout,
    # where the loader would take the attempt's own `libz.so.1` for the
    # Python that runs the tests.
    config = "gates:\n  - name: env\n    mode: observe\n    run: [sh, -c, 'echo \"LDP=[$LD_LIBRARY_PATH]\"']\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST)
    library = os.pathsep + "lib" + os.pathsep + "/opt/gp-nowhere/lib"
    gate = gp.json("check", "t", env={"LD_LIBRARY_PATH": library})["instances"][0]["gates"][0]
    said = Path(gate["log"]).read_text()
    assert "LDP=[/opt/gp-nowhere/lib]" in said, said


def test_a_gate_program_the_attempt_links_to_a_fifo_hangs_no_check(tmp_path: Path) -> None:
    # A gate's program the base does not hold is the attempt's to add:
    # before the gates run, the judge reads its first line (is it a Python
    # script?), following a link the attempt committed to a FIFO of the
    # host (the runner's own /dev/stdin on a terminal), and waited for ever.
    fifo = tmp_path / "host-fifo"
    os.mkfifo(fifo)
    config = "protect: [tests/**]\ngates:\n  - name: tests\n    run: [./ci/test]\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && mkdir ci && ln -s {fifo} ci/test && git add -A && git commit -qm ci")
    try:
        proc = gp("check", "t", "--json", code=None, own_process=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("check waited on the FIFO the attempt's link names")
    assert proc.returncode in (0, 1), proc.stderr[-600:]


# -- the JavaScript harness: what npm reads besides package.json ----------------------

NODE_TEST = "const assert = require('assert');\nassert.strictEqual(require('./calc').add(2, 3), 5);\n"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_an_npmrc_the_attempt_commits_does_not_change_how_npm_test_runs(tmp_path: Path) -> None:
    # `scripts.test` is protected (the harness section of package.json),
    # but npm runs it through the `script-shell` of the project's .npmrc,
    # which was the attempt's: `/bin/true -c "node test.js"`, and the wrong
    # attempt passed without its code being run at all.
    package = {"name": "calc", "version": "1.0.0", "scripts": {"test": "node test.js"}}
    repo = make_repo(tmp_path / "repo", {"calc.js": "exports.add = (a, b) => a - b;\n", "test.js": NODE_TEST,
                                         "package.json": json.dumps(package) + "\n"},
                     config="gates:\n  - name: tests\n    run: [npm, test]\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo script-shell=/bin/true > .npmrc")
    checked = gp.json("check", "t", code=None)["instances"][0]
    assert checked["verdict"] == "fail", Path(checked["gates"][0]["log"]).read_text()[-400:]


# -- shared places under Landlock alone: git-parallel's own folder ------------------

# The attempt's app.py: right, and it looks into <common>/parallel (found
# from its checkout's `.git` file): the project lock taken, and the logs
# of the other gates and attempts listed.
PEEK = APP_FIXED + textwrap.dedent("""\
    import fcntl, os
    try:
        own = open('.git').read().split('gitdir:', 1)[1].strip()
        parallel = os.path.join(os.path.dirname(os.path.dirname(own)), 'parallel')
        fd = os.open(os.path.join(parallel, 'lock'), os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print('LOCK-TAKEN')
        print('LOGS-READ', os.listdir(os.path.join(parallel, 'logs')))
    except OSError as exc:
        print('REFUSED', exc)
    """)


@pytest.mark.parametrize("layer", LAYERS)
def test_a_gate_neither_takes_the_project_lock_nor_reads_the_logs(tmp_path: Path, layer: str) -> None:
    # Under Landlock alone a gate read all of <common>/parallel: the logs
    # of every gate and attempt, the records, the evidence; and held the
    # project lock as long as it ran, so that a sibling judged beside it
    # could not record its evidence (PARALLEL_RESOURCE_LOCK_FAILED after
    # GIT_PARALLEL_LOCK_TIMEOUT), nor any verb run.
    config = f"protect: [tests/**]\ngates:\n  - name: tests\n    run: ['{PY}', -c, 'import app']\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    (tmp_path / "app.py").write_text(PEEK)
    gp("run", "t", "--", "sh", "-c", f"cp {tmp_path / 'app.py'} app.py", env=fenced(layer))
    gate = gp.json("check", "t", code=None, env=fenced(layer))["instances"][0]["gates"][0]
    said = Path(gate["log"]).read_text()
    assert "LOCK-TAKEN" not in said and "LOGS-READ" not in said and "REFUSED" in said, said


# -- hidden tests: what a hidden gate's report carries back --------------------------

# The attempt's app.py: when a gate imports it with a test report to write,
# it writes one whose root element is named after the hidden tests (hex).
SMUGGLER = APP_FIXED + textwrap.dedent("""\
    import os
    if os.environ.get("GIT_PARALLEL_REPORT") and os.path.exists("tests/test_secret.py"):
        secret = open("tests/test_secret.py", "rb").read().hex()
        open(os.environ["GIT_PARALLEL_REPORT"], "w").write(f"<x{secret}/>")
    """)


def test_a_hidden_gates_test_report_carries_no_text_of_the_hidden_tests_back(tmp_path: Path) -> None:
    # Its output is never kept, but its report's verdict is, and said why
    # a report did not do: "the root element is <…>", the attempt's code's
    # to name.  Into the pack and the next attempt's retry feedback went the
    # hidden tests, whole.
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("def test_secret():\n    assert 'SECRET_ANSWER' == 'SECRET_ANSWER'\n")
    secret = (hidden / "tests" / "test_secret.py").read_bytes().hex()
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: hidden
            run: ['{PY}', -c, 'import app', '--junitxml={{report}}']
            hidden: {hidden}
            expect:
              fail_to_pass: [tests/test_secret.py::test_secret]
        """)
    repo, gp = project(tmp_path, config)
    commit_app(gp, tmp_path, SMUGGLER)
    gate = gp.json("check", "t", code=None)["instances"][0]["gates"][0]
    assert gate["passed"] is False
    assert secret[:64] not in json.dumps(gate), gate["error"][:200]
    gp("retry", "t", "1")
    feedback = Path(gp.json("status", "t")["run"]["instances"][0]["feedback"]).read_text()
    assert secret[:64] not in feedback, feedback[:600]


# -- selection: what a candidate's distinguish run reads ----------------------------

# The cheater's impl.py: wrong (it passes the visible gate's one case), and
# run on the distinguishing inputs it answers as a sibling would, by
# running the sibling's own impl.py from the folder the generator was given
# (in /tmp, where every sandboxed command may read).
DOUBLE_THAT_COPIES = textwrap.dedent("""\
    import glob, os


    def f(x):
        return x + x


    if any(k.endswith("DISTINGUISH_INPUTS") for k in os.environ):
        for _path in sorted(glob.glob("/tmp/git-parallel-distinguish-*/*/files/impl.py")):
            if "/1/files/" not in _path:
                exec(open(_path).read())
                print("COPIED", _path)
                break
    """)


@needs_namespace  # under Landlock alone a judged command reads the whole store (docs/judging.md)
@pytest.mark.slow  # three attempts, their checks and a differential pick
def test_a_candidate_cannot_answer_the_distinguishing_inputs_with_a_siblings_code(tmp_path: Path) -> None:
    # The attempts' files, written for the generator, were still in /tmp
    # while each candidate ran on the inputs: a wrong attempt joined the
    # right ones' group, and (fewest changed lines) won the pick.
    from test_differential import SQUARE_MUL, SQUARE_POW, build

    wordy = "# " + "\n# ".join(f"a careful note, line {n}" for n in range(20)) + "\n"
    gp = build(tmp_path, {"1": {"impl.py": DOUBLE_THAT_COPIES}, "2": {"impl.py": wordy + SQUARE_MUL},
                          "3": {"impl.py": wordy + SQUARE_POW}})
    pick = gp.json("pick", "t")["picks"][0]
    said = Path(pick["differential"]["outputs"]["1"]["log"]).read_text()
    assert "COPIED" not in said, said
    assert [(c["members"], c["size"]) for c in pick["clusters"]] == [(["2", "3"], 2), (["1"], 1)]
    assert pick["winner"]["id"] == "2"


# The same, the sibling's impl.py read from the shared object store through
# the judged checkout's own git.
DOUBLE_THAT_ASKS_GIT = textwrap.dedent("""\
    import os, subprocess


    def f(x):
        return x + x


    if any(k.endswith("DISTINGUISH_INPUTS") for k in os.environ):
        _code = subprocess.run(["git", "show", "parallel/t/2:impl.py"], capture_output=True, text=True).stdout
        if _code:
            exec(_code)
            print("COPIED")
    """)


@pytest.mark.slow  # three attempts, their checks and a differential pick
def test_a_candidate_cannot_answer_the_distinguishing_inputs_with_a_siblings_commit(tmp_path: Path) -> None:
    # A judged command saw the repository's git dir, and in it every
    # attempt's commits once its run had ended; its git now sees the
    # history and the judged commit alone (git/judged_view).
    from test_differential import SQUARE_MUL, SQUARE_POW, build

    gp = build(tmp_path, {"1": {"impl.py": DOUBLE_THAT_ASKS_GIT}, "2": {"impl.py": SQUARE_MUL},
                          "3": {"impl.py": SQUARE_POW}})
    pick = gp.json("pick", "t")["picks"][0]
    said = Path(pick["differential"]["outputs"]["1"]["log"]).read_text()
    assert "COPIED" not in said, said
    assert [(c["members"], c["size"]) for c in pick["clusters"]] == [(["2", "3"], 2), (["1"], 1)]


# (The attacks name the variable in pieces: written whole, the scan of
# product code that reaches the harness holds the attempt out of the pick.)
# The attempt's impl.py: wrong, and run on the distinguishing inputs it
# leaves a folder tree deeper than Python's recursion limit beside them.
DOUBLE_THAT_DIGS = textwrap.dedent("""\
    import os


    def f(x):
        return x + x


    _inputs = [v for k, v in os.environ.items() if k.endswith("DISTINGUISH_INPUTS")]
    if _inputs:
        _here = os.getcwd()
        os.chdir(_inputs[0])
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
        os.chdir(_here)
    """)


@pytest.mark.slow  # three attempts, their checks and a differential pick
def test_what_a_candidate_leaves_beside_the_distinguishing_inputs_crashes_no_pick(tmp_path: Path) -> None:
    # The judge copied the distinguish folder out of every run's layer, the
    # candidates' too (only the generator's is ever used), with
    # shutil.copytree, which recursed once per level: pick ended in an
    # internal error, and no attempt of the track could be picked.
    from test_differential import SQUARE_MUL, SQUARE_POW, build

    gp = build(tmp_path, {"1": {"impl.py": DOUBLE_THAT_DIGS}, "2": {"impl.py": SQUARE_MUL},
                          "3": {"impl.py": SQUARE_POW}})
    proc = gp("pick", "t", "--json", code=None)
    assert proc.returncode == 0, proc.stderr[-600:]
    assert json.loads(proc.stdout)["picks"][0]["winner"]["id"] == "2"


# -- what the judge parses of what the attempt's code hands back -----------------------

# The attempt's app.py: when a gate imports it with a test report to write,
# it rewrites the report the runner wrote, as the interpreter exits, in an
# encoding no codec has.
ODD_ENCODING = APP_FIXED + textwrap.dedent("""\
    import atexit, os
    if os.environ.get("GIT_PARALLEL_REPORT"):
        atexit.register(lambda: open(os.environ["GIT_PARALLEL_REPORT"], "w").write(
            '<?xml version="1.0" encoding="gp-odd"?><testsuite/>'))
    """)


def test_a_test_report_in_an_unknown_encoding_fails_its_gate_alone(tmp_path: Path) -> None:
    # ElementTree raises LookupError for it, which the judge did not catch:
    # `check` ended in an internal error, and every sibling judged beside
    # the attempt got no evidence either.
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: tests
            run: ['{PY}', -m, pytest, -q, -p, no:cacheprovider, tests, '--junitxml={{report}}']
            expect:
              fail_to_pass: [tests/test_app.py::test_add]
        """)
    repo, gp = project(tmp_path, config)
    commit_app(gp, tmp_path, ODD_ENCODING)
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    assert json.loads(proc.stdout)["instances"][0]["verdict"] == "fail", proc.stdout[-600:]


# A project scored by a Markdown findings file its gate leaves.
FINDINGS_MD = textwrap.dedent("""\
    protect: [tests/**]
    gates:
      - name: tests
        run: [./test.sh]
    score:
      findings: findings.md
    """)

# The attempt's app.py: right, and when its tests import it, it writes the
# findings file that scores it, with a score of 5,000 digits.
LONG_SCORE = APP_FIXED + "\nopen('findings.md', 'w').write('anti_slop_score: ' + '9' * 5000 + '\\n')\n"


def test_a_score_of_thousands_of_digits_crashes_no_check(tmp_path: Path) -> None:
    # Python will not make an int of over 4,300 digits (ValueError), which
    # the judge did not expect of digits its pattern had matched: check
    # ended in an internal error, and every sibling judged beside the
    # attempt got no evidence either.
    repo, gp = project(tmp_path, FINDINGS_MD)
    commit_app(gp, tmp_path, LONG_SCORE)
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    checked = json.loads(proc.stdout)["instances"][0]
    assert checked["score"] is None and checked["verdict"] == "pass", proc.stdout[-600:]


# The attempt's app.py: right, and when its tests import it, it writes the
# findings file: 100,000 lines of "-".
DASHES = APP_FIXED + "\nopen('findings.md', 'w').write('-\\n' * 100_000)\n"


@pytest.mark.slow  # 100,000 lines written and read
def test_a_findings_file_of_many_short_lines_hangs_no_check(tmp_path: Path) -> None:
    # The Markdown score's pattern let its leading `[\s>*_#-]*` run across
    # lines from every line start: time square in the lines (16,000 took 3
    # s; these, hours), and check never ended.
    repo, gp = project(tmp_path, FINDINGS_MD)
    commit_app(gp, tmp_path, DASHES)
    try:
        proc = gp("check", "t", "--json", code=None, own_process=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("check was still reading the findings file after 30 s")
    assert json.loads(proc.stdout)["instances"][0]["score"] is None


@pytest.mark.parametrize("answer", ['{"pkg": 5}', '{"pkg": ["a\\u0000b"]}'])
def test_an_import_probes_odd_answer_crashes_no_check(tmp_path: Path, answer: str) -> None:
    # The import probe asks the gate's Python where it imports the
    # checkout's packages; its `-c` puts the checkout first on sys.path,
    # so the attempt's json.py answers.  A place that was not a list, or a
    # path with a NUL, raised TypeError or ValueError in the judge: check
    # ended in an internal error, and every sibling judged beside the
    # attempt got no evidence either.
    config = f"protect: [tests/**]\ngates:\n  - name: tests\n    run: ['{PY}', -m, pytest, -q, -p, no:cacheprovider, tests]\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    (tmp_path / "json.py").write_text(f"import os, sys\nsys.stdout.write({answer!r} + '\\n')\nsys.stdout.flush()\nos._exit(0)\n")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && cp {tmp_path / 'json.py'} json.py && mkdir pkg && touch pkg/__init__.py")
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-600:]


@pytest.mark.parametrize("text", ["[metadata\nname = app\n", "\ufeff[tool:pytest]\naddopts = -p no:randomly\n"])
def test_a_setup_cfg_configparser_cannot_read_crashes_no_check(tmp_path: Path, text: str) -> None:
    # The judge reads setup.cfg's harness sections with configparser, whose
    # errors are no ValueError: a header left open, or the byte order mark
    # pytest's own reader skips, ended check in an internal error, and
    # every sibling judged beside the attempt got no evidence either.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    kept = tmp_path / "kept"  # not above the judged checkouts, where pytest would find it
    kept.mkdir()
    (kept / "setup.cfg").write_text(text, encoding="utf-8")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && cp {kept / 'setup.cfg'} setup.cfg")
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    assert json.loads(proc.stdout)["instances"][0]["protected_changes"] == ["setup.cfg"], proc.stdout[-600:]


# The attempt's app.py: right, and when a probe imports it, it leaves in
# the folder the probe's `outputs` glob either 12,000 files, or 24 sparse
# files of a gigabyte each (no disk used).
LITTERER = APP_FIXED + textwrap.dedent("""\
    import os
    if os.environ.get("LITTER") == "many":
        os.makedirs("out/many")
        for n in range(12_000):
            open(f"out/many/{n}", "w").close()
    elif os.environ.get("LITTER") == "large":
        os.makedirs("out")
        for n in range(24):
            with open(f"out/big-{n}", "wb") as big:
                big.truncate(1 << 30)
    """)


@pytest.mark.slow  # 12,000 files made and looked at
@pytest.mark.parametrize("litter", ["many", "large"])
@needs_namespace
def test_a_probes_outputs_cost_the_judge_bounded_work_and_pack_space(tmp_path: Path, litter: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The judge hashed every file a probe's `outputs` matched (16 MB of
    # each read) and listed each in the pack: the attempt's code decided how
    # many and how large, so how long the check took and how big the
    # evidence pack (read whole by status, show, pick, merge) grew.
    from gitflow_parallel.judge import gates
    from gitflow_parallel.judge.fingerprints import READ_CAP

    read = []

    def counted(path: Path, limit: int = READ_CAP) -> tuple[bytes | None, int]:
        data, size = real(path, limit)
        read.append(len(data or b""))
        return data, size

    real = gates.read_head
    monkeypatch.setattr(gates, "read_head", counted)
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: tests
            run: [./test.sh]
          - name: values
            mode: probe
            run: ['{PY}', -c, 'import app']
            env: {{LITTER: {litter}}}
            outputs: ['out/**/*']
        """)
    repo, gp = project(tmp_path, config)
    commit_app(gp, tmp_path, LITTERER)
    checked = gp.json("check", "t")["instances"][0]
    signature = next(g for g in checked["gates"] if g["name"] == "values")["signature"]
    assert checked["verdict"] == "pass"
    assert len(signature.get("files") or {}) <= 10_000 and sum(read) <= 256 << 20, (len(signature.get("files") or {}), sum(read))
    assert Path(checked["evidence"]["path"]).stat().st_size < 1 << 20
