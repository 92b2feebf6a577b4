"""Red team, round two: new routes out of the sandbox (issue 35's model),
written as the attempt's agent and as the attempt's own code.  Each test
asserts the promise; an attack that works makes it fail.  The cheap
attacks the sandbox held are kept too, so that it goes on holding."""

from __future__ import annotations

import uuid
import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import log_of, needs_namespace, status
from test_hostile import CONFIG, HONEST, PY, act, project
from test_sandbox import LAYERS, fenced

# sh: the agent's admin folder and the real common dir (not its view).
ADMIN = 'A=$(git rev-parse --absolute-git-dir) && R=$(cd "$A/../.." && pwd) && '
COMMIT = HONEST + " && git commit -qam fix && "


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
@needs_namespace
def test_a_fifo_an_agent_leaves_in_its_admin_folder_hangs_no_later_command(tmp_path: Path) -> None:
    # git-parallel reads HEAD, ORIG_HEAD and logs/HEAD of every admin
    # folder (the fence of every later command lists the instances'
    # worktrees), some of it under the project lock: a FIFO there blocked
    # `run` forever, and every later command on the lock.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    agent = COMMIT + ADMIN + "for f in ORIG_HEAD logs/HEAD HEAD; do rm -f $A/$f; mkfifo $A/$f; done"
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, code=None, own_process=True, timeout=60)
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, own_process=True, timeout=60)
    checked = {i["id"]: i for i in gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"]}
    assert checked["2"]["verdict"] == "pass"
    assert status(gp, "t")["1"]["status"] == "failed"  # it broke its own worktree: named, never trusted


@pytest.mark.parametrize("layer", LAYERS)
def test_a_link_an_agent_plants_in_the_reflogs_is_never_written_through(tmp_path: Path, layer: str) -> None:
    # The task's reflog folder was the agents' to write: a link there made
    # the runner's own ref update append to any file of the user's.
    repo, gp = project(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    gp("spawn", "t", "-n", "2")
    agent = COMMIT + ADMIN + (
        f"for L in $(git rev-parse --git-common-dir)/logs/refs/heads/parallel/t $R/logs/refs/heads/parallel/t; do "
        f"for n in 1 2; do rm -f $L/$n; ln -s {victim} $L/$n; done; done; "
        f"rm -f $A/logs/HEAD; ln -s {victim} $A/logs/HEAD; echo leftover > left.txt")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", agent, code=None, env=fenced(layer))
    gp("run", "t", "--instance", "2", "--", "sh", "-c", HONEST, env=fenced(layer))
    assert victim.read_text() == "mine\n", "the runner wrote through the agent's link"


@needs_namespace
def test_a_fifo_in_place_of_the_test_report_hangs_no_check(tmp_path: Path) -> None:
    # The gate may write its report's folder: a FIFO named as the report
    # blocked the judge's read of it forever.
    config = textwrap.dedent("""\
        gates:
          - name: tests
            run: [sh, -c, 'rm -f "$0"; mkfifo "$0"', '{report}']
            expect:
              fail_to_pass: [tests/test_app.py::test_add]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    checked = gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"][0]
    assert checked["verdict"] == "fail"


@needs_namespace
def test_fifos_the_agent_leaves_in_its_worktree_hang_no_leftovers_commit(tmp_path: Path) -> None:
    # git reads .gitattributes, .gitignore and .mailmap from the worktree it
    # commits; the agent's FIFOs there must not block the runner.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = HONEST + " && mkfifo .gitattributes .gitignore tests/.gitignore .mailmap"
    gp("run", "t", "--", "sh", "-c", agent, code=None, own_process=True, timeout=60)
    assert status(gp, "t")["1"]["status"] in ("succeeded", "failed")


@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_cannot_read_a_running_siblings_private_tmpdir(tmp_path: Path, layer: str) -> None:
    # /tmp is read-only in the sandbox, not hidden, and each command's
    # TMPDIR was a folder of /tmp: a sibling's scratch work was readable.
    meet = tmp_path / "meet"  # a sandbox_write folder both may write: only to meet
    repo, gp = project(tmp_path, CONFIG + f"sandbox_write: ['{meet}']\n")
    gp("spawn", "t", "-n", "2")
    wait = "i=0; while [ ! -e {f} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e {f} ] && echo met-the-other; "
    one = f"echo SECRET-OF-ONE > $TMPDIR/notes.txt; touch {meet}/ready; " + wait.replace("{f}", f"{meet}/done")
    two = (wait.replace("{f}", f"{meet}/ready") +
           "cat /tmp/git-parallel-*/notes.txt /tmp/git-parallel-*/*/notes.txt $(dirname $TMPDIR)/*/notes.txt; "
           f"touch {meet}/done")
    agent = f'case "$GIT_PARALLEL_INSTANCE" in 1) {one};; *) {two};; esac 2>/dev/null; true'
    gp("run", "t", "--", "sh", "-c", agent, env=fenced(layer))
    said = log_of(gp, "t", "2")
    assert "met-the-other" in said, "the two agents did not run side by side: " + said  # the attack was made
    assert "SECRET-OF-ONE" not in said, "an agent read its sibling's TMPDIR"


def hidden_project(tmp_path: Path, run: str) -> tuple[Path, object]:
    """A project whose one gate runs the script ``run`` (sh) over hidden tests, and an
    honest attempt to judge."""
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    (tmp_path / "gate.sh").write_text(run + "\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: hidden
            run: [sh, {tmp_path / 'gate.sh'}]
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    return repo, gp


def hidden_summary(gp: object) -> str:
    return gp.json("check", "t", code=None)["instances"][0]["gates"][0]["hidden"]["summary"]  # type: ignore[attr-defined]


@needs_namespace
def test_a_hidden_gates_output_is_not_where_other_sandboxed_commands_can_read_it(tmp_path: Path) -> None:
    # Its output (which may quote the hidden tests) went to a file of /tmp,
    # which every sandboxed command can read: an agent running meanwhile
    # could copy it.  The gate itself says, in its counts, whether it sees it.
    run = ('n=$(ls /tmp/git-parallel-hidden-* /tmp/git-parallel-*/git-parallel-hidden-* 2>/dev/null | wc -l); '
           'echo "$n skipped, 1 passed"')
    repo, gp = hidden_project(tmp_path, run)
    assert hidden_summary(gp) == "0 skipped, 1 passed"


@needs_namespace
def test_a_hidden_gates_counts_carry_no_more_than_counts(tmp_path: Path) -> None:
    # The counts of a hidden gate are its only output kept, and go back to
    # the agent in retry feedback: the attempt's code could print the hidden
    # tests as one long number.
    leak = ("import pathlib; s = pathlib.Path('tests/test_secret.py').read_bytes(); "
            "print(str(int.from_bytes(s, 'big')) + ' passed, ' + ', '.join(f'{b} failed' for b in s))")
    repo, gp = hidden_project(tmp_path, f'"{PY}" -c "{leak}"')
    said = hidden_summary(gp)
    secret = b"SECRET_ANSWER = 42\n"
    assert str(int.from_bytes(secret, "big")) not in said and len(said) < 120, said


@needs_namespace
def test_a_filter_an_agent_configures_for_its_worktree_alone_runs_nowhere_unfenced(tmp_path: Path) -> None:
    # With extensions.worktreeConfig (set by `git sparse-checkout` in a
    # worktree, or by the user), git reads <admin>/config.worktree, which is
    # in the agent's admin folder: a clean filter there ran in the runner's
    # leftovers commit, outside the sandbox.
    repo, gp = project(tmp_path)
    git(repo, "config", "extensions.worktreeConfig", "true")
    mark = tmp_path / "pwned"
    gp("spawn", "t", "-n", "1")
    agent = (f"git config --worktree filter.x.clean \"sh -c 'id > {mark}; cat'\" && "
             f"echo '*.py filter=x' > .gitattributes && " + HONEST)
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    print(log_of(gp, "t", "1"))
    assert not mark.exists(), "the agent's filter ran outside the sandbox"


# What a sandboxed command sees of the runner: its inherited descriptors
# (only stdin, stdout and stderr: no lock, ruleset or pipe of the runner's,
# but for a gate the writing end of its own results pipe, judge/stream)
# and the processes it can name (its own namespace's: no runner, no user's).
SEES = textwrap.dedent("""\
    import os, sys
    fds = [f for f in sorted(int(f) for f in os.listdir('/proc/self/fd')) if os.path.lexists(f'/proc/self/fd/{f}')]
    results = int(os.environ.get('GIT_PARALLEL_RESULTS_FD', '-1'))
    if results >= 0:
        assert os.readlink(f'/proc/self/fd/{results}').startswith('pipe:'), 'not a pipe'
    mine = {0, 1, 2, results}  # and the gate's results pipe (the listing's own is closed by now)
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
    runner = (b'-m\\0pytest', b'-m\\0gitflow_parallel', b'bin/git-parallel\\0')
    outside = [p for p in pids if any(r in open(f'/proc/{p}/cmdline', 'rb').read() for r in runner)]
    print('extra-fds', [f for f in fds if f not in mine], 'outside', outside)
    """)


@needs_namespace
def test_agents_and_gates_inherit_no_descriptor_and_name_no_process_of_the_runner(tmp_path: Path) -> None:
    (tmp_path / "sees.py").write_text(SEES)
    config = f"gates:\n  - name: sees\n    mode: observe\n    run: ['{PY}', '{tmp_path / 'sees.py'}']\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", f"'{PY}' '{tmp_path / 'sees.py'}' && {HONEST}")
    assert "extra-fds [] outside []" in log_of(gp, "t", "1")
    gate = gp.json("check", "t")["instances"][0]["gates"][0]
    assert "extra-fds [] outside []" in Path(gate["log"]).read_text()


@needs_namespace
def test_a_gate_reaches_no_abstract_unix_socket_of_the_host(tmp_path: Path) -> None:
    # Abstract sockets have no path for the mount fence to hide: only the
    # gate's own network namespace keeps it from the user's services.
    import socket

    name = f"\0gp-redteam-{uuid.uuid4().hex}"  # unique beside another run of the suite
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"print('connected' if s.connect_ex({name!r}) == 0 else 'refused')")
        (tmp_path / "probe.py").write_text(probe + "\n")
        config = f"gates:\n  - name: probe\n    mode: observe\n    run: ['{PY}', '{tmp_path / 'probe.py'}']\n"
        repo, gp = project(tmp_path, config)
        gp("spawn", "t", "-n", "1")
        act(gp, "t", "1", HONEST)
        gate = gp.json("check", "t")["instances"][0]["gates"][0]
        said = Path(gate["log"]).read_text()
        assert "refused" in said and "connected" not in said, said
    finally:
        server.close()


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
@needs_namespace
def test_a_findings_file_left_as_a_fifo_or_a_link_to_dev_zero_hangs_no_check(tmp_path: Path) -> None:
    for n, make in enumerate(("mkfifo findings.jsonl", "ln -s /dev/zero findings.jsonl")):
        config = textwrap.dedent(f"""\
            gates:
              - name: tests
                run: [sh, -c, '{make}']
            score:
              findings: findings.jsonl
            """)
        repo, gp = project(tmp_path / str(n), config)
        gp("spawn", "t", "-n", "1")
        act(gp, "t", "1", HONEST)
        checked = gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"][0]
        assert checked["score"] is None and "findings" in (checked["score_error"] or ""), checked


@pytest.mark.slow  # two checks, a pick and a merge
@pytest.mark.parametrize("layer", LAYERS)
def test_fifos_a_gate_leaves_in_its_checkout_hang_no_later_judging(tmp_path: Path, layer: str) -> None:
    # Under Landlock alone the gate writes the judged checkout itself, which
    # is made afresh (libgit2, git clean) before the next judging in it.
    config = textwrap.dedent("""\
        gates:
          - name: tests
            run: [sh, -c, 'rm -f .gitignore; mkfifo .gitignore .gitattributes tests/.gitattributes && ./test.sh']
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST, env=fenced(layer))
    for _ in range(2):
        checked = gp.json("check", "t", "--again", code=None, env=fenced(layer), timeout=60)["instances"][0]
        assert checked["verdict"] == "pass", checked
    gp("pick", "t", env=fenced(layer), timeout=60)
    gp("merge", "t", env=fenced(layer), timeout=60)
    assert git(repo, "show", "main:app.py").strip().endswith("a + b")


@pytest.mark.slow  # a capped process and 1 GB sparse files
@needs_namespace
def test_a_huge_sparse_gitignore_the_agent_leaves_is_not_read_whole_by_the_runner(tmp_path: Path) -> None:
    # libgit2 reads a worktree's .gitignore and .gitattributes whole (git
    # caps attributes at 100 MB): a sparse one costs the agent no disk.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    # 1 GB: under the cap, so a whole read shows in the peak size (a 20 GB
    # one would fail to allocate there, and be handled as an error).
    agent = HONEST + " && truncate -s 1G .gitignore tests/.gitattributes"
    proc, rss = run_capped(repo, "run", "t", "--", "sh", "-c", agent)
    assert proc.returncode in (0, 1) and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])


@pytest.mark.slow  # a capped process and a 1 GB sparse file
@needs_namespace
def test_a_huge_sparse_index_the_agent_leaves_is_not_read_whole_by_the_runner(tmp_path: Path) -> None:
    from test_bounded_reads import MAX_RSS_MB, run_capped

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = HONEST + ' && truncate -s 1G "$(git rev-parse --absolute-git-dir)/index"'
    proc, rss = run_capped(repo, "run", "t", "--", "sh", "-c", agent)
    assert proc.returncode in (0, 1) and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])


@pytest.mark.slow  # Landlock alone
@pytest.mark.parametrize("layer", LAYERS)
def test_a_visible_gate_cannot_read_the_hidden_tests_under_either_layer(tmp_path: Path, layer: str) -> None:
    # test_redteam holds this under the namespace layer; under Landlock alone
    # the gates' fence denied the worktrees but not the hidden folders.
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: spy
            run: [sh, -c, 'cat {hidden}/tests/test_secret.py; true']
          - name: hidden
            run: [sh, -c, 'grep -q SECRET tests/test_secret.py && echo "1 passed"']
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST, env=fenced(layer))
    checked = gp.json("check", "t", code=None, env=fenced(layer))["instances"][0]
    spy = next(g for g in checked["gates"] if g["name"] == "spy")
    assert "SECRET_ANSWER" not in Path(spy["log"]).read_text(), "a visible gate read the hidden tests"
    assert checked["verdict"] == "pass"  # and the hidden gate still runs its tests


@pytest.mark.slow  # two gates that wait for each other (bounded)
@pytest.mark.parametrize("layer", LAYERS)
def test_a_gate_cannot_read_the_checkout_another_attempt_is_judged_in(tmp_path: Path, layer: str) -> None:
    # The judged checkouts are a pool of folders side by side; under Landlock
    # alone a gate's fence denied the worktrees but not the other checkouts,
    # where a sibling's code (and, during a hidden gate, the hidden tests the
    # judge copies in) lies while it is judged.
    look = ('i=0; while [ $i -lt 60 ]; do grep -h "MARK-" ../*/app.py 2>/dev/null | grep -v "MARK-$GIT_PARALLEL_INSTANCE" '
            '&& break; sleep 0.1; i=$((i+1)); done; true')
    config = f"gates:\n  - name: look\n    run: [sh, -c, '{look}']\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--", "sh", "-c", HONEST + ' && echo "# MARK-$GIT_PARALLEL_INSTANCE" >> app.py', env=fenced(layer))
    checked = gp.json("check", "t", code=None, env=fenced(layer))["instances"]
    logs = {i["id"]: Path(i["gates"][0]["log"]).read_text() for i in checked}
    assert "MARK-2" not in logs["1"] and "MARK-1" not in logs["2"], logs


@needs_namespace
def test_a_link_a_probe_leaves_where_its_outputs_are_globbed_hangs_no_check(tmp_path: Path) -> None:
    # The judge globs a probe's `outputs` in the layer the probe wrote; a
    # recursive pattern through a link to / walked the host's whole tree
    # (and /proc/<pid>/root around it again) outside the sandbox.
    config = textwrap.dedent("""\
        gates:
          - name: values
            mode: probe
            run: [sh, -c, 'mkdir -p out && echo 1 > out/a.txt && ln -s / out/all && ln -s / top']
            outputs: ['out/**/*.txt', 'top/**/*.txt']
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    checked = gp.json("check", "t", code=None, own_process=True, timeout=60)["instances"][0]
    assert set(checked["gates"][0]["signature"]["files"]) == {"out/a.txt"}, checked["gates"][0]["signature"]
