"""Red team, round three: new routes out of the sandbox (issue 35's model),
written as the attempt's agent and as the attempt's own code, grouped by
place.  Each test asserts the promise; an attack that works makes it fail
(one the fix needs a design choice for is a strict xfail, its route
explained)."""

from __future__ import annotations

import uuid
import json
import platform
import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import log_of, needs_namespace
from test_hostile import HONEST, PY, act, project
from test_sandbox import LAYERS, fenced

# -- processes: what a sandboxed command may do to the mounts it is given ------

# sh: undo the fence as a process with capabilities could (bwrap started by
# root keeps every capability in the sandbox unless told to drop them):
# uncover the hidden folders, make `/` writable, write outside.
UNDO_MOUNTS = ("grep CapEff /proc/self/status; "
               "for m in $(awk '{print $5}' /proc/self/mountinfo | sort -r); do umount -l $m 2>/dev/null; done; "
               "mount -o remount,rw / 2>/dev/null; ")


@needs_namespace
def test_a_gate_holds_no_capability_to_undo_its_mounts(tmp_path: Path) -> None:
    # As root (a container, a CI runner), bwrap makes no user namespace and
    # keeps every capability: the attempt's code unmounted the covers over
    # the hidden tests and remounted `/` read-write.
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    mark = tmp_path / "written-by-the-gate"
    (tmp_path / "spy.sh").write_text(UNDO_MOUNTS + f"cat {hidden}/tests/test_secret.py; echo out > {mark}; true\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: spy
            run: [sh, {tmp_path / 'spy.sh'}]
          - name: hidden
            run: [sh, -c, 'grep -q SECRET tests/test_secret.py && echo "1 passed"']
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    checked = gp.json("check", "t", code=None)["instances"][0]
    said = Path(next(g for g in checked["gates"] if g["name"] == "spy")["log"]).read_text()
    assert "SECRET_ANSWER" not in said, "a gate uncovered the hidden tests"
    assert not mark.exists(), "a gate wrote outside its layer"
    assert "CapEff:\t0000000000000000" in said, said


@needs_namespace
def test_an_agent_holds_no_capability_to_undo_its_mounts(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    mark = tmp_path / "written-by-the-agent"
    gp("spawn", "t", "-n", "1")
    agent = (HONEST + " && git commit -qam fix && grep CapEff /proc/self/status; "
             f"mount -o remount,rw / 2>/dev/null; echo out > {mark}; true")
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    said = log_of(gp, "t", "1")
    assert not mark.exists(), "an agent wrote outside its worktree"
    assert "CapEff:\t0000000000000000" in said, said


# -- shared places: the user's services ----------------------------------------


@needs_namespace
def test_no_sandboxed_command_reaches_a_unix_socket_of_the_users_services(tmp_path: Path) -> None:
    # A path socket is reached through the file system, whatever the
    # network namespace: `/` is bound read-only, and connect() needs no
    # write to the mount.  The user's D-Bus session bus (systemd-run --user),
    # ssh-agent, Docker's socket or X server each run what they are asked
    # to, outside the sandbox; the gate has no network and reached them.
    import socket

    service = tmp_path / "service.sock"  # as /run/user/<uid>/bus or /var/run/docker.sock would be
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(service))
    server.listen(4)
    try:
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"print('service-' + ('connected' if s.connect_ex({str(service)!r}) == 0 else 'refused'))")
        (tmp_path / "probe.py").write_text(probe + "\n")
        config = f"gates:\n  - name: probe\n    mode: observe\n    run: ['{PY}', '{tmp_path / 'probe.py'}']\n"
        repo, gp = project(tmp_path, config)
        gp("spawn", "t", "-n", "1")
        gp("run", "t", "--", "sh", "-c", f"'{PY}' '{tmp_path / 'probe.py'}' && {HONEST}")
        assert "service-refused" in log_of(gp, "t", "1"), log_of(gp, "t", "1")
        gate = gp.json("check", "t")["instances"][0]["gates"][0]
        said = Path(gate["log"]).read_text()
        assert "service-refused" in said, said
    finally:
        server.close()


# Under Landlock alone a command may write under /dev (its terminal, /dev/null,
# a pty it opens): /dev/pts/* of the user's other terminals with it.
TERMINAL_LAYERS = [LAYERS[0], pytest.param("landlock", marks=[*LAYERS[1].marks, pytest.mark.xfail(
    strict=True, reason="Landlock alone grants writes under /dev whole, the user's /dev/pts/N included; a rule per "
                        "device (null, zero, full, random, urandom, tty, ptmx and the command's own pty) would need "
                        "the pty a command opens granted as it opens it")])]


@pytest.mark.parametrize("layer", TERMINAL_LAYERS)
def test_no_sandboxed_command_reaches_the_users_terminals(tmp_path: Path, layer: str) -> None:
    # The host's /dev was bound whole, /dev/pts with it: a gate opened the
    # user's terminal (the same user owns it) and wrote to it, or read what
    # was typed there (a password meant for the user's shell).
    import os

    master, slave = os.openpty()  # a terminal of the user's, as their shell's would be
    try:
        name = os.ttyname(slave)
        probe = (f"import os\ntry:\n    fd = os.open({name!r}, os.O_WRONLY | os.O_NOCTTY)\n"
                 f"    os.write(fd, b'INJECTED-BY-THE-GATE')\n    print('terminal-opened')\n"
                 f"except OSError as exc:\n    print('terminal-refused', exc)\n")
        (tmp_path / "probe.py").write_text(probe)
        config = f"gates:\n  - name: probe\n    mode: observe\n    run: ['{PY}', '{tmp_path / 'probe.py'}']\n"
        repo, gp = project(tmp_path, config)
        gp("spawn", "t", "-n", "1")
        gp("run", "t", "--", "sh", "-c", f"'{PY}' '{tmp_path / 'probe.py'}' && {HONEST}", env=fenced(layer))
        assert "terminal-refused" in log_of(gp, "t", "1"), log_of(gp, "t", "1")
        gate = gp.json("check", "t", env=fenced(layer))["instances"][0]["gates"][0]
        said = Path(gate["log"]).read_text()
        assert "terminal-refused" in said, said
    finally:
        os.close(master)
        os.close(slave)


# Python: put a key in the user's keyring ("put"), or print the one put
# there ("get"): a channel past every mount, unless each command has a user
# namespace (and so a keyring) of its own.  x86_64 system call numbers.
KEYRING = textwrap.dedent("""\
    import ctypes, sys
    libc = ctypes.CDLL(None, use_errno=True)
    name = b"gp-redteam-" + sys.argv[2].encode()
    if sys.argv[1] == "put":
        data = open("tests/test_app.py", "rb").read()[:1000]
        print("put", libc.syscall(248, b"user", name, data, len(data), -4))  # add_key to the user keyring
    else:
        key, buf = libc.syscall(249, b"user", name, None, 0), ctypes.create_string_buffer(4096)  # request_key
        n = libc.syscall(250, 11, key, buf, 4096) if key > 0 else 0  # KEYCTL_READ
        print("got", buf.raw[:max(n, 0)])
    """)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the attack's system call numbers are x86_64's")
@needs_namespace
def test_no_sandboxed_command_leaves_anything_for_another_in_a_kernel_keyring(tmp_path: Path) -> None:
    # Keyrings belong to a user (per user namespace), not to a mount or PID
    # namespace: started by root, bwrap made no user namespace, and one
    # gate (a hidden one, say) left the tests it read for the next command.
    (tmp_path / "key.py").write_text(KEYRING)
    word = uuid.uuid4().hex  # unique beside another run of the suite
    config = textwrap.dedent(f"""\
        gates:
          - name: put
            mode: observe
            run: ['{PY}', '{tmp_path / 'key.py'}', put, {word}]
          - name: get
            mode: observe
            run: ['{PY}', '{tmp_path / 'key.py'}', get, {word}]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    gates = {g["name"]: Path(g["log"]).read_text() for g in gp.json("check", "t")["instances"][0]["gates"]}
    assert "put" in gates["put"], gates  # the attack was made
    assert "assert add(2, 3)" not in gates["get"], gates


# -- judged checkouts and worktrees: what the judge removes after them ---------

# sh: a folder tree deeper than Python's recursion limit (shutil.rmtree
# recurses once per level), made in the current folder.
DEEP = (f"'{PY}' -c \"import os\nfor _ in range(1500): os.mkdir('d'); os.chdir('d')\"")


@pytest.mark.slow  # a whole run, check (and merge)
@needs_namespace
def test_a_deep_tree_a_gate_leaves_in_its_layer_crashes_no_check(tmp_path: Path) -> None:
    # The judge removes each gate's upper layer with shutil.rmtree, which
    # raised RecursionError (not an OSError: ignore_errors does not cover
    # it): every check of the attempt ended in an internal error.
    (tmp_path / "gate.sh").write_text(f"{DEEP} && ./test.sh\n")
    config = f"gates:\n  - name: tests\n    run: [sh, {tmp_path / 'gate.sh'}]\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    proc = gp("check", "t", "--json", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-800:]
    assert json.loads(proc.stdout)["instances"][0]["verdict"] == "pass"
    assert not list((repo / ".git" / "parallel" / "layers").glob("*")), "the gate's layer was left behind"


@pytest.mark.slow  # a whole run, check (and merge)
@needs_namespace
def test_a_deep_tree_an_agent_leaves_in_its_worktree_crashes_no_merge(tmp_path: Path) -> None:
    # Merge removes the attempts' worktrees (shutil.rmtree): an ignored
    # folder deeper than the recursion limit made it end in an internal
    # error after main had moved, every worktree and branch left behind;
    # and it looks for submodule git dirs in the admin folder (Path.rglob).
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = HONEST + (f" && echo deep/ > .gitignore && git add -A && git commit -qm fix && mkdir deep && (cd deep && {DEEP})"
                      f" && A=$(git rev-parse --absolute-git-dir) && mkdir -p $A/modules && cd $A/modules && {DEEP}")
    gp("run", "t", "--", "sh", "-c", agent)
    gp("check", "t")
    gp("pick", "t")
    proc = gp("merge", "t", code=None)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert git(repo, "show", "main:app.py").strip().endswith("a + b")
    assert gp("cleanup", "t", code=None).returncode == 0


# -- what the judge parses of an attempt: JSON nested past the recursion limit --

# Python's json (and tomllib) parse nesting by recursion: a document of
# 100,000 brackets raises RecursionError, which no `except ValueError`
# catches, so the command ended in an internal error.


@needs_namespace
def test_a_deeply_nested_line_an_agent_appends_to_its_events_crashes_no_command(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = HONEST + f" && git commit -qam fix && {PY} -c \"print('[' * 100_000)\" >> \"$GIT_PARALLEL_EVENTS\""
    proc = gp("run", "t", "--", "sh", "-c", agent, code=None)
    assert proc.returncode in (0, 1), proc.stderr[-800:]
    for verb in (("check", "t"), ("show", "t", "1"), ("status", "t")):
        proc = gp(*verb, code=None)
        assert proc.returncode in (0, 1), (verb, proc.stderr[-800:])


@pytest.mark.slow  # a whole run, check (and merge)
@needs_namespace
def test_a_deeply_nested_package_json_an_attempt_commits_crashes_no_check(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    (repo / "package.json").write_text('{"name": "app", "scripts": {"test": "true"}}\n')
    (repo / "pyproject.toml").write_text('[project]\nname = "app"\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "package files")
    gp("spawn", "t", "-n", "1")
    (tmp_path / "deep.py").write_text("open('package.json', 'w').write('{\"a\": ' + '[' * 100_000)\n"
                                      "open('pyproject.toml', 'w').write('a = ' + '[' * 100_000)\n")
    deep = f"{PY} {tmp_path / 'deep.py'}"
    act(gp, "t", "1", HONEST + " && " + deep)
    proc = gp("check", "t", code=None)
    assert proc.returncode in (0, 1), proc.stderr[-800:]


# -- unbounded reads: what a gate hands back -----------------------------------


@pytest.mark.slow  # a capped process and a 64 MB report
@needs_namespace
def test_a_test_report_of_millions_of_elements_is_not_built_whole_by_the_judge(tmp_path: Path) -> None:
    # The report is read only under 64 MB, but ElementTree built all of it:
    # 16 million empty elements took the judge 1.6 GB.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    (tmp_path / "report.py").write_text(
        "import sys\nwith open(sys.argv[1], 'wb') as f:\n"
        "    f.write(b'<testsuite>' + b'<a/>' * (16 * 1024 * 1024 - 6) + b'</testsuite>')\n")
    config = textwrap.dedent(f"""\
        gates:
          - name: tests
            run: ['{PY}', '{tmp_path / 'report.py'}', '{{report}}']
            expect:
              fail_to_pass: [tests/test_app.py::test_add]
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    act(gp, "t", "1", HONEST)
    proc, rss = run_capped(repo, "check", "t")
    assert proc.returncode == 1 and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])


# -- objects: what the runner takes in from an attempt's own store -------------

# Python, run by the agent: a loose object of 1 GiB of zeros in its own
# store (1 MB on disk), named at random: the name is checked only once the
# whole content has been read.
BIG_OBJECT = textwrap.dedent("""\
    import os, subprocess, zlib
    store = subprocess.check_output(["git", "rev-parse", "--git-path", "objects"], text=True).strip()
    name = os.urandom(20).hex()
    os.makedirs(os.path.join(store, name[:2]), exist_ok=True)
    z, chunk = zlib.compressobj(1), bytes(1 << 24)
    with open(os.path.join(store, name[:2], name[2:]), "wb") as out:
        out.write(z.compress(b"blob %d\\0" % (1 << 30)))
        for _ in range(64):
            out.write(z.compress(chunk))
        out.write(z.flush())
    """)


@pytest.mark.slow  # a capped process and a 1 GiB object to inflate
@needs_namespace
def test_a_huge_object_in_the_attempts_own_store_is_not_read_whole_by_the_runner(tmp_path: Path) -> None:
    # The runner takes the attempt's objects in by reading each whole (to
    # check its name): a zlib bomb of zeros made it hold 1 GiB per object,
    # twice; a few of them and the runner (and `recover`, which takes them
    # in again) is killed for memory.
    from test_bounded_reads import MAX_RSS_MB, run_capped

    (tmp_path / "big.py").write_text(BIG_OBJECT)
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    proc, rss = run_capped(repo, "run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam fix && {PY} {tmp_path / 'big.py'}")
    assert proc.returncode in (0, 1) and rss < MAX_RSS_MB, (proc.returncode, rss, proc.stderr[-600:])


# -- judged checkouts: links the attempt commits --------------------------------


@pytest.mark.slow  # a guard: this route held
@pytest.mark.parametrize("layer", LAYERS)
def test_a_committed_link_in_place_of_a_protected_folder_is_never_written_through(tmp_path: Path, layer: str) -> None:
    # The judge lays the base's protected tests (and a hidden gate's tests)
    # over the attempt's tree: `tests` committed as a link to a folder of
    # the user's must not carry them there.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "test_app.py").write_text("mine\n")
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_secret.py").write_text("SECRET_ANSWER = 42\n")
    config = textwrap.dedent(f"""\
        protect: [tests/**]
        gates:
          - name: tests
            run: [./test.sh]
          - name: hidden
            run: [sh, -c, 'echo "1 passed"']
            hidden: {hidden}
        """)
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST + f" && git rm -rq tests && ln -s {victim} tests && git add tests",
       env=fenced(layer))
    gp("check", "t", code=None, env=fenced(layer))
    assert sorted(p.name for p in victim.iterdir()) == ["test_app.py"], "the judge wrote into the user's folder"
    assert (victim / "test_app.py").read_text() == "mine\n"


# -- crash: what recover trusts of a killed runner's attempt --------------------


@pytest.mark.slow  # a runner killed mid-agent, then recover
@needs_namespace
def test_recover_runs_nothing_an_agent_configured_in_a_common_dir_of_its_own(tmp_path: Path) -> None:
    # The agent may write its admin folder, `commondir` included: pointed at
    # a git dir of its own (its config holding a clean filter), and its
    # runner killed, recover took it for a worktree that needs no putting
    # right and committed its leftovers there, running the filter unfenced.
    import os
    import signal
    import subprocess
    import time

    mark, ready = tmp_path / "pwned", tmp_path / "meet" / "ready"
    repo, gp = project(tmp_path, textwrap.dedent(f"""\
        protect: [tests/**]
        sandbox_write: ['{ready.parent}']
        gates:
          - name: tests
            run: [./test.sh]
        """))
    gp("spawn", "t", "-n", "1")
    agent = (HONEST + " && A=$(git rev-parse --absolute-git-dir) && F=$A/own-common && git init -q --bare $F && "
             "O=$(git rev-parse --path-format=absolute --git-path objects) && "
             "{ cat $O/info/alternates; echo $O; } > $F/objects/info/alternates && "
             "git --git-dir=$F update-ref refs/heads/parallel/t/1 $(git rev-parse HEAD) && "
             f"git --git-dir=$F config filter.x.clean \"sh -c 'id > {mark}; cat'\" && "
             f"echo '* filter=x' > .gitattributes && echo $F > $A/commondir && touch {ready} && sleep 60")
    runner = subprocess.Popen(["git", "parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert runner.poll() is None and time.monotonic() < deadline, log_of(gp, "t", "1")
            time.sleep(0.05)
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        runner.wait()
    gp("recover", "t", code=None)
    assert not mark.exists(), "recover ran a filter the agent configured, unfenced: " + mark.read_text()


# -- refs: where the runner's own commits go -----------------------------------


@pytest.mark.slow  # a guard: this route held
@needs_namespace
def test_an_agent_pointing_its_head_at_main_moves_no_ref_through_the_leftovers_commit(tmp_path: Path) -> None:
    # The leftovers commit is made on HEAD, which the agent's admin folder
    # holds: pointed at refs/heads/main, the runner's own commit of the
    # agent's uncommitted (failing) work would move main.
    repo, gp = project(tmp_path)
    main_before = git(repo, "rev-parse", "main")
    gp("spawn", "t", "-n", "1")
    agent = "echo '# unjudged' >> app.py && git symbolic-ref HEAD refs/heads/main"
    gp("run", "t", "--", "sh", "-c", agent, code=None)
    assert git(repo, "rev-parse", "main") == main_before, "the leftovers commit moved main"
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"


# -- processes: signals under Landlock alone ------------------------------------

# sh, run as a gate: kill the process that started it, once sure it is the
# runner (its command line names git-parallel's module).
KILL_RUNNER = ("if tr '\\\\0' ' ' < /proc/$PPID/cmdline | grep -q gitflow_parallel; then "
               "kill -9 $PPID && echo killed-the-runner; else echo no-runner-in-sight; fi; ./test.sh")


@pytest.mark.slow  # the namespace layer held; Landlock alone is slow-tier anyway
@pytest.mark.parametrize("layer", LAYERS)
def test_a_gate_cannot_signal_the_runner(tmp_path: Path, layer: str) -> None:
    # Under Landlock alone there is no PID namespace, and the ruleset asked
    # for no scoping (ABI 6, Linux 6.12): a gate killed the `check` that ran it.
    (tmp_path / "gate.sh").write_text(KILL_RUNNER + "\n")
    config = f"gates:\n  - name: tests\n    run: [sh, {tmp_path / 'gate.sh'}]\n"
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", HONEST, env=fenced(layer))
    proc = gp("check", "t", "--json", code=None, env=fenced(layer))
    assert proc.returncode in (0, 1), f"check died: {proc.returncode} {proc.stderr[-400:]}"
    assert json.loads(proc.stdout)["instances"][0]["verdict"] == "pass"


# -- environments: where a gate's program is looked for ------------------------


@pytest.mark.slow  # two setups and a check
@needs_namespace
def test_a_gate_program_the_attempts_own_environment_hides_is_never_run_unfenced(tmp_path: Path) -> None:
    # A gate's program the namespace would not find (its environment layer
    # holds a folder there) was started as it was, outside bwrap, "to fail
    # as it would have": but outside, the checkout has no environment layer,
    # and the attempt had committed its own program at that path.
    mark = tmp_path / "pwned"
    build = f"printf '#!/bin/sh\\nexec \"{PY}\" -m pytest -q -p no:cacheprovider tests\\n' > .venv/bin/runtests\n" \
            "chmod +x .venv/bin/runtests\n"
    config = textwrap.dedent("""\
        protect: [tests/**]
        setup:
          run: [sh, -c, 'mkdir -p .venv/bin && sh build.sh']
          cache_key: [build.sh]
          keep: [.venv]
        gates:
          - name: tests
            run: [.venv/bin/runtests]
        """)
    repo, gp = project(tmp_path, config)
    (repo / "build.sh").write_text(build)
    git(repo, "add", "build.sh")
    git(repo, "commit", "-qm", "build")
    gp("spawn", "t", "-n", "1")
    agent = (f"mkdir -p .venv/bin && printf '#!/bin/sh\\nid > {mark}\\n' > .venv/bin/runtests && "
             "chmod +x .venv/bin/runtests && git add -f .venv/bin/runtests && "
             "echo 'rm -rf .venv/bin/runtests && mkdir .venv/bin/runtests' > build.sh && git add -A && git commit -qm mine")
    gp("run", "t", "--", "sh", "-c", agent)
    checked = gp.json("check", "t", code=None)["instances"][0]
    assert not mark.exists(), "the attempt's own program ran outside the sandbox: " + mark.read_text()
    assert checked["verdict"] == "fail"


@pytest.mark.slow  # Landlock alone
@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_with_network_reaches_no_abstract_unix_socket_under_landlock(tmp_path: Path, layer: str) -> None:
    # An agent keeps the host's network (sandbox_network: on), and with it
    # the abstract sockets of the user's services (an X server's, D-Bus's):
    # from Landlock ABI 6 the fence scopes them to itself.  Under the
    # namespace layer the agent shares the host's network namespace, so this
    # holds there only with sandbox_network: off.
    import socket

    from gitflow_parallel.proc import landlock

    if layer == "landlock" and landlock.abi() < 6:
        pytest.skip("Landlock scoping needs ABI 6 (Linux 6.12)")
    name = f"\0gp-redteam-{uuid.uuid4().hex}"  # unique beside another run of the suite
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(1)
    try:
        probe = (f"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"print('abstract-' + ('connected' if s.connect_ex({name!r}) == 0 else 'refused'))")
        (tmp_path / "probe.py").write_text(probe + "\n")
        network = "" if layer == "landlock" else "sandbox_network: off\n"
        repo, gp = project(tmp_path, textwrap.dedent("""\
            protect: [tests/**]
            gates:
              - name: tests
                run: [./test.sh]
            """) + network)
        gp("spawn", "t", "-n", "1")
        gp("run", "t", "--", "sh", "-c", f"'{PY}' '{tmp_path / 'probe.py'}' && {HONEST}", env=fenced(layer))
        assert "abstract-refused" in log_of(gp, "t", "1"), log_of(gp, "t", "1")
    finally:
        server.close()


# -- what the judge reads back: the findings file --------------------------------


REVIEWED = textwrap.dedent("""\
    protect: [tests/**]
    gates:
      - name: review
        mode: observe
        run: [sh, {review}]
      - name: tests
        run: [./test.sh]
    score:
      findings: findings.jsonl
    """)


@pytest.mark.slow  # a check with two gates
@needs_namespace
@pytest.mark.parametrize("named", [True, False], ids=["findings_from", "unnamed"])
def test_the_attempts_code_cannot_write_the_findings_that_score_it(tmp_path: Path, named: bool) -> None:
    # The findings file was read from the upper layers of every gate, the
    # last first: the attempt's code, run by a later gate, wrote it there
    # and shadowed the reviewer's.  Named, the writer's layer alone is read;
    # unnamed, a file more than one command wrote scores nothing.
    (tmp_path / "review.sh").write_text("echo '{\"anti_slop_score\": 2}' > findings.jsonl\n")
    config = REVIEWED.format(review=tmp_path / "review.sh") + ("  findings_from: review\n" if named else "")
    repo, gp = project(tmp_path, config)
    gp("spawn", "t", "-n", "1")
    # The attempt's code, run by the tests gate, scores itself.
    (tmp_path / "selfscore.py").write_text("\nopen('findings.jsonl', 'w').write('{\"anti_slop_score\": 10}')\n")
    act(gp, "t", "1", HONEST + f" && cat {tmp_path / 'selfscore.py'} >> app.py")
    checked = gp.json("check", "t")["instances"][0]
    assert checked["verdict"] == "pass"
    if named:
        assert checked["score"] == 2, checked["score"]
    else:
        assert checked["score"] is None, checked["score"]
        assert "findings_from" in checked["score_error"], checked["score_error"]


def test_findings_from_must_name_a_gate_and_a_findings_file(tmp_path: Path) -> None:
    for score in ("  findings: f.jsonl\n  findings_from: nobody\n", "  findings_from: tests\n"):
        repo, gp = project(tmp_path / str(len(score)), "gates:\n  - name: tests\n    run: [./test.sh]\nscore:\n" + score)
        refused = gp.json("spawn", "t", "-n", "1", code=1)
        assert refused["code"] == "PARALLEL_CONFIG_INVALID" and "findings_from" in refused["message"], refused


# -- refs: what the runner reads of the attempt's own view ------------------------


@needs_namespace
def test_a_fifo_in_place_of_the_views_packed_refs_hangs_no_run(tmp_path: Path) -> None:
    # The view's own packed-refs is the agent's to write; the runner reads it
    # to take the attempt's refs in, and a FIFO there blocked it for ever.
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent = (HONEST + " && git commit -qam fix && V=$(git rev-parse --path-format=absolute --git-common-dir) && "
             "rm -f $V/packed-refs && mkfifo $V/packed-refs")
    proc = gp("run", "t", "--", "sh", "-c", agent, code=None, own_process=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr[-600:]
    assert git(repo, "rev-parse", "parallel/t/1") != git(repo, "rev-parse", "main")  # its commit was taken in
