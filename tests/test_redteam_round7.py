"""Red team, round seven: routes earlier rounds did not try, as the agent
and as the attempt's own code.

Each test runs one route and asserts the promise, so a working attack
fails the test.  Routes that still work are marked ``xfail(strict=True)``
with the fix they need."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import GP, git
from hostile import log_of, needs_namespace
from test_escapes import control_free
from test_hostile import HONEST, PY, project
from test_sandbox import LAYERS, fenced

pytestmark = pytest.mark.slow


def _refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ", 1)[::-1][::-1] for line in out.splitlines()) if out else {}


# -- 1. refs other than its own branch, made in the agent's private view ---------------

@needs_namespace
def test_tags_notes_and_other_refs_an_agent_makes_in_its_view_reach_no_shared_ref(tmp_path: Path) -> None:
    """The agent's git writes its refs into a view of the common dir
    (``git/shadow``).  Beside its own branch it makes a lightweight and an
    annotated tag, a note under git-parallel's own notes ref, a branch
    ``main`` moved to its commit, a remote-tracking ref, and (where the view
    links a shared folder) replaces that link with a folder of its own and
    writes a ``packed-refs`` line: a tag in the shared store would put its
    commit in every sibling's judged view (tags are shown as history), a
    note would be read as git-parallel's provenance, ``main`` would land it."""
    repo, gp = project(tmp_path)
    before = _refs(repo)
    gp("spawn", "t", "-n", "1")
    script = (f"{HONEST} && git commit -qam fix && c=$(git rev-parse HEAD) && gd=$(git rev-parse --git-common-dir) && "
              "{ git tag light $c; git tag -a -m annotated heavy $c; "
              "git notes --ref=parallel add -m 'verdict: pass (forged)' $c; "
              "git update-ref refs/heads/main $c; git update-ref refs/remotes/origin/main $c; "
              "for f in refs/tags refs/notes refs/remotes refs/heads; do "
              "  if [ -L $gd/$f ]; then rm -f $gd/$f && mkdir -p $gd/$f; fi; done; "
              "git tag light2 $c; git notes --ref=parallel add -f -m 'forged again' $c; "
              "git update-ref refs/heads/main $c; git update-ref refs/parallel/archive/x/1/0 $c; "
              "printf '%s refs/tags/packed\\n%s refs/heads/main\\n' $c $c >> $gd/packed-refs; true; }")
    gp("run", "t", "--", "sh", "-c", script, code=None)
    after = _refs(repo)
    made = {ref: oid for ref, oid in after.items() if before.get(ref) != oid}
    unexpected = {ref: oid for ref, oid in made.items()
                  if not ref.startswith(("refs/heads/parallel/t/", "refs/parallel/", "refs/notes/parallel"))
                  or ref.startswith("refs/parallel/archive/x/")}
    assert unexpected == {}, unexpected
    assert git(repo, "rev-parse", "main") == before["refs/heads/main"]
    # git-parallel's own notes (the run's provenance) are there; none of the agent's.
    notes = git(repo, "log", "--all", "--format=%H %N", "--notes=parallel", check=False)
    assert "forged" not in notes, notes
    assert "forged" not in git(repo, "log", "--format=%B", "refs/notes/parallel", check=False)


# -- 2. file names an attempt commits, as `diff`, `show` and `status` print them ---------

NAMES = ["evil\x1b[2J\x1b]0;pwned\x07.py", "ok\u202eyp.txt", "c1\u009b31m.py", "multi\nline.py", "cr\rreturn.py"]


@needs_namespace
def test_file_names_an_attempt_commits_print_as_escapes(tmp_path: Path) -> None:
    """Git allows every byte but NUL and ``/`` in a file name: a name with
    an escape sequence, a C1 CSI, a bidirectional override, a newline or a
    lone carriage return, printed raw by ``diff --stat`` or ``show``, would
    rewrite what the person reads (a FAIL turned into a pass, a file hidden
    from the list)."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    maker = tmp_path / "names.py"
    maker.write_text(f"import pathlib\nfor n in {NAMES!r}:\n    pathlib.Path(n).write_text('x\\n')\n")
    gp("run", "t", "--", "sh", "-c", f"{HONEST} && {PY} {maker} && git add -A && git commit -qm names")
    gp("check", "t", code=None)
    for args in (("diff", "t", "--stat"), ("diff", "t"), ("show", "t", "1"), ("status", "t"), ("status", "t", "1"),
                 ("report", "t")):
        proc = subprocess.run(["git", "parallel", *args], cwd=repo, capture_output=True)
        text = proc.stdout.decode("utf-8", "replace")
        assert control_free(text.replace("\r\n", "\n")), (args, repr(text)[:2000])
        err = proc.stderr.decode("utf-8", "replace")
        assert control_free(err), (args, repr(err)[:2000])


# -- 3. a live sibling's agent log, read through the common dir ---------------------------

@pytest.mark.parametrize("layer", LAYERS)
def test_an_agent_cannot_read_a_live_siblings_log(tmp_path: Path, layer: str) -> None:
    """An agent's output goes to ``<common>/parallel/logs/<run_id>/``, and
    real agents print the code they write (a transcript, a diff, ``cat``).
    The wrong agent waits for its live sibling's log to show the fix, copies
    it and commits it as its own: it then passes with work not its own (and
    under Landlock alone the judged view cannot tell, its sibling's commit
    is never named)."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    common = repo / ".git"
    # The sibling prints its fix and stays alive a while (so it is live
    # while the other reads), then commits it.
    two = f"{HONEST} && cat app.py && sleep 4 && git commit -qam right"
    one = ("i=0; while [ $i -lt 60 ]; do "
           f"  f=$(grep -l 'return a + b' {common}/parallel/logs/*/* 2>/dev/null | head -n 1); "
           "  if [ -n \"$f\" ]; then grep -A1 '^def add' \"$f\" | head -n 2 > app.py; echo found-it; break; fi; "
           "  sleep 0.1; i=$((i+1)); done; "
           "git commit -qam mine; true")
    _copier_beside_its_sibling(gp, one, two, "the code its sibling printed", fenced(layer))


def _copier_beside_its_sibling(gp: GP, one: str, two: str, what: str, env: dict[str, str] | None = None) -> None:
    """Instance 1 runs ``one``, the copier, side by side with instance 2's
    ``two``, the honest sibling at work; then both are checked: the sibling
    passes, and the copier fails, never having found (``found-it``) the
    sibling's work."""
    agent = f'case "$GIT_PARALLEL_INSTANCE" in 1) {one};; *) {two};; esac'
    gp("run", "t", "--jobs", "2", "--", "sh", "-c", agent, env=env)
    said = log_of(gp, "t", "1")
    checked = {i["id"]: i for i in gp.json("check", "t", code=None)["instances"]}
    assert checked["2"]["verdict"] == "pass", json.dumps(checked["2"]["gates"])[:600]
    assert checked["1"]["verdict"] == "fail", f"the wrong attempt passed with {what}"
    assert "found-it" not in said, said


# -- 4. a live sibling's command lines, read through /proc ---------------------------------

@pytest.mark.parametrize("layer", [
    pytest.param(LAYERS[0].values[0], marks=LAYERS[0].marks),
    pytest.param(LAYERS[1].values[0], marks=[*LAYERS[1].marks, pytest.mark.xfail(strict=True, reason=(
        "Landlock gives no PID namespace: every process of the user is listed in /proc, and a "
        "process's cmdline needs no ptrace access; an agent tool that passes its edits as "
        "arguments (Codex CLI's apply_patch, sed -i, sh -c printf) shows them to its siblings. "
        "Not fixable with Landlock alone; docs/judging.md should list it as out of reach"))]),
])
def test_an_agent_cannot_read_a_live_siblings_command_lines(tmp_path: Path, layer: str) -> None:
    """The sibling's tool writes the fix with the text in its arguments
    (``sh -c "printf ... > app.py"``, as Codex CLI's ``apply_patch`` passes
    a patch) and lives on; the wrong agent scans ``/proc/*/cmdline`` for
    it and commits what it found as its own."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    # A process of its own whose arguments hold the fix, as a tool's would
    # (a shell's builtin printf, in the agent's own shell, has none).
    tool = tmp_path / "tool.sh"
    tool.write_text(f"{PY} -c 'import time; open(\"app.py\", \"w\").write(\"def add(a, b):\\n    return a + b\\n\"); "
                    "time.sleep(4)'\n")
    two = f"sh {tool} && git commit -qam right"
    # The pattern is put together at run time, so that its own command line does not hold it.
    finder = tmp_path / "finder.py"
    finder.write_text(textwrap.dedent("""\
        import os, re, time
        want = "return a " + "+ b"
        for _ in range(60):
            for pid in os.listdir("/proc"):
                try:
                    text = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
                except OSError:
                    continue
                if want in text and "finder" not in text:
                    body = re.search(r"def add\\(a, b\\):(\\\\n|\\n)    return a \\+ b", text)
                    if body:
                        open("app.py", "w").write("def add(a, b):\\n    return a + b\\n")
                        print("found-it", pid)
                        raise SystemExit(0)
            time.sleep(0.1)
        """))
    one = f"{PY} {finder}; git commit -qam mine; true"
    _copier_beside_its_sibling(gp, one, two, "the fix its sibling's command line held", fenced(layer))


# -- 5. a live sibling's server on the loopback ----------------------------------------------

@needs_namespace
@pytest.mark.xfail(strict=True, reason=(
    "with network (sandbox_network: on, the default) an agent shares the host's network namespace, "
    "its loopback included: a sibling's dev server (http.server, vite, a test server) serves its "
    "worktree to every other agent of the run. Fix: a network namespace per agent with its own "
    "loopback and a user-mode path out (pasta or slirp4netns), or at least docs/judging.md naming it"))
def test_an_agent_cannot_read_a_live_siblings_server_on_the_loopback(tmp_path: Path) -> None:
    """The honest sibling serves its worktree on the loopback while it works
    (a dev server, a docs preview); the wrong agent fetches ``app.py`` from
    it and commits it as its own."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    two = (f"{HONEST} && ({PY} -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 5 && "
           "git commit -qam right")
    fetcher = tmp_path / "fetcher.py"
    fetcher.write_text(textwrap.dedent(f"""\
        import time, urllib.request
        for _ in range(60):
            try:
                text = urllib.request.urlopen("http://127.0.0.1:{port}/app.py", timeout=1).read().decode()
            except OSError:
                time.sleep(0.1)
                continue
            if "a " + "+ b" in text:
                open("app.py", "w").write(text)
                print("found-it")
                break
            time.sleep(0.1)
        """))
    one = f"{PY} {fetcher}; git commit -qam mine; true"
    _copier_beside_its_sibling(gp, one, two, "the code its sibling served")


# -- 6. the HEAD an agent leaves, under retry's reset ------------------------------------------

@needs_namespace
@pytest.mark.parametrize("target", ["refs/heads/main", "refs/heads/parallel/t/2"])
def test_retry_moves_no_ref_through_the_head_an_agent_left(tmp_path: Path, target: str) -> None:
    """The agent points its worktree's HEAD (in its own admin folder) at
    ``main`` or at its sibling's branch and ends.  ``retry`` resets the
    worktree to the base with libgit2's hard reset, which moves the branch
    HEAD names: ``main`` would lose the user's commit made since, and the
    sibling's branch its work."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    gp("run", "t", "--instance", "1", "--", "sh", "-c", f"git symbolic-ref HEAD {target}; exit 3", code=None)
    git(repo, "commit", "-q", "--allow-empty", "-m", "the user's own work, after the spawn")
    before = {ref: git(repo, "rev-parse", ref) for ref in ("refs/heads/main", "refs/heads/parallel/t/2")}
    gp("retry", "t", "1", "--force", code=None)
    after = {ref: git(repo, "rev-parse", ref) for ref in before}
    assert after == before, f"retry moved a ref the agent's HEAD named: {before} -> {after}"


# -- 7. what `watch` reads of a live worktree ------------------------------------------------

@needs_namespace
@pytest.mark.parametrize("fifo", [".gitignore", "sub/.gitignore", "control"])
def test_a_fifo_a_live_agent_leaves_in_its_worktree_hangs_no_watch(tmp_path: Path, fifo: str) -> None:
    """``watch`` counts a running attempt's change from its worktree as it
    is on disk (``state/view.worktree_diff``, libgit2, unsandboxed), which
    the agent is writing: a FIFO where libgit2 reads an ignore file would
    block the person's ``watch`` until a writer came, which none does."""
    import os
    import signal
    import time

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    go = tmp_path / "go"
    make = "mkfifo" if fifo != "control" else "touch"  # control: a plain file there, watch shows it running
    agent = (f"mkdir -p sub && {make} {fifo} && echo more >> app.py && "
             f"i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; rm -f {fifo}")
    run = subprocess.Popen(["git", "parallel", "run", "t", "--", "sh", "-c", agent], cwd=repo,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    watch = None
    try:
        wt = Path(gp.json("status", "t")["run"]["instances"][0]["worktree"])
        deadline = time.monotonic() + 30
        while not (wt / fifo).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (wt / fifo).exists(), "the agent made no FIFO"
        watch = subprocess.Popen(["git", "parallel", "watch", "t", "--json"], cwd=repo, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
        lines = []
        assert watch.stdout is not None
        os.set_blocking(watch.stdout.fileno(), False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any('"running"' in line for line in lines):
            chunk = watch.stdout.read()
            if chunk:
                lines += chunk.decode(errors="replace").splitlines()
            time.sleep(0.1)
        assert any('"running"' in line for line in lines), f"watch showed nothing in 15 s: {lines}"
    finally:
        go.write_text("")
        for proc in (watch, run):
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


@needs_namespace
@pytest.mark.parametrize("verb", [("check", "t"), ("status", "t"), ("validate", "t"), ("diff", "t", "--stat"),
                                  ("show", "t", "1")])
def test_a_fifo_a_live_agent_leaves_in_its_worktree_hangs_no_other_verb(tmp_path: Path, verb: tuple[str, ...]) -> None:
    """The same FIFO while the agent still runs, and a verb a person runs
    meanwhile (``check`` judges the sibling that ended)."""
    import os
    import signal
    import time

    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    go = tmp_path / "go"
    agent = ("mkfifo .gitignore && echo more >> app.py && "
             f"i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; rm -f .gitignore")
    run = subprocess.Popen(["git", "parallel", "run", "t", "--instance", "1", "--", "sh", "-c", agent], cwd=repo,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wt = Path(gp.json("status", "t")["run"]["instances"][0]["worktree"])
        deadline = time.monotonic() + 30
        while not (wt / ".gitignore").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (wt / ".gitignore").exists(), "the agent made no FIFO"
        try:
            subprocess.run(["git", "parallel", *verb], cwd=repo, capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"git parallel {' '.join(verb)} hung on the FIFO a live agent left")
    finally:
        go.write_text("")
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


# -- 8. a .gitignore that links to a FIFO outside the worktree ---------------------------------

def _run_within(repo: Path, args: list[str], seconds: float, env: dict[str, str] | None = None) -> int | None:
    """``git parallel ARGS`` in a session of its own: its exit status, or
    None when it did not end within ``seconds`` (then its whole group is killed)."""
    import os
    import signal

    proc = subprocess.Popen(["git", "parallel", *args], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})})
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("name", [".gitignore", "sub/.gitignore", ".gitattributes"])
def test_a_rules_file_linked_to_a_fifo_outside_the_worktree_hangs_no_run(tmp_path: Path, layer: str,
                                                                         name: str) -> None:
    """The sweep of an ended agent's worktree removes the FIFOs in it, but
    passes links by; libgit2 (the runner's look for leftovers, ``check``'s
    for changes) follows a ``.gitignore`` that is a link (git itself does
    not) and blocked for ever on a FIFO the agent left where it outlives
    it: a ``sandbox_write`` folder, or ``/dev/shm`` under Landlock alone."""
    import uuid

    shared = tmp_path / "agent-cache"
    repo, gp = project(tmp_path, textwrap.dedent(f"""\
        max_total: 16
        protect: [tests/**]
        sandbox_write: ['{shared}']
        gates:
          - name: tests
            run: [./test.sh]
        """))
    gp("spawn", "t", "-n", "1")
    fifo = Path("/dev/shm") / f"gp-r7-{uuid.uuid4().hex}" if layer == "landlock" else shared / "fifo"
    agent = (f"{HONEST} && mkdir -p sub && mkfifo {fifo} && ln -s {fifo} {name} && "
             "echo '# more' >> app.py")
    try:
        code = _run_within(repo, ["run", "t", "--", "sh", "-c", agent], 90, fenced(layer))
        assert fifo.exists(), "the agent made no FIFO"
        assert code is not None, "run hung on a .gitignore linked to a FIFO"
        code = _run_within(repo, ["check", "t"], 90)
        assert code is not None, "check hung on a .gitignore linked to a FIFO"
    finally:
        fifo.unlink(missing_ok=True)


@needs_namespace
def test_a_committed_gitignore_link_turned_into_a_fifo_later_hangs_no_check(tmp_path: Path) -> None:
    """The attempt commits ``.gitignore`` as a link to a regular file of a
    ``sandbox_write`` folder, so the sweep at its end keeps it; that file is
    later replaced by a FIFO (by another agent that writes the same
    folder: this test does it in its stead).  The next check in that pool
    slot wrote its checkout over the attempt's with libgit2, which read the
    link and hung.  A checkout holding a tree that links a rules file is
    now made afresh (``scratch.Checkout._links_rules``)."""
    import os

    shared = tmp_path / "agent-cache"
    repo, gp = project(tmp_path, textwrap.dedent(f"""\
        max_total: 16
        protect: [tests/**]
        sandbox_write: ['{shared}']
        gates:
          - name: tests
            run: [./test.sh]
        """))
    target = shared / "rules"
    gp("spawn", "t", "-n", "2")
    gp("run", "t", "--instance", "1", "--", "sh", "-c",
       f"{HONEST} && echo '*.tmp' > {target} && ln -s {target} .gitignore && git add -A && git commit -qm link")
    gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam right")
    assert _run_within(repo, ["check", "t", "--instance", "1"], 90) is not None
    target.unlink()
    os.mkfifo(target)
    try:
        assert _run_within(repo, ["check", "t", "--instance", "2"], 30) is not None, \
            "check hung on the judged checkout's .gitignore link"
    finally:
        target.unlink(missing_ok=True)


# -- 9. a commit of the user's, named by the attempt ------------------------------------------

@needs_namespace
@pytest.mark.xfail(strict=True, reason=(
    "the hooks count as an instance's commits all that its tips and archive refs reach beyond the "
    "base, so a branch of the user's that the attempt reached (merged into its branch, or checked "
    "out and left, which retry keeps as a stray under its archive refs) becomes the attempt's "
    "work, and the patch of a loser that copied the user's commit is a lost line: the user's own "
    "merge of it into the live base is refused. Fix (a design call): leave out what the refs "
    "outside git-parallel's reached when the run was spawned (kept in the record), and the "
    "patch-ids of those commits from the lost lines, so that only work made during the run is "
    "an instance's"))
@pytest.mark.parametrize("how", ["merged", "reflog", "copied"])
def test_a_users_branch_the_attempt_reaches_is_not_made_the_attempts(tmp_path: Path, how: str) -> None:
    """The agent merges a branch of the user's into its own (its view shows
    every branch), or checks it out and comes back, so its HEAD reflog names
    that branch's tip (``retry`` keeps what an attempt's HEAD reached that
    its branch does not hold, ``keep_strays``, under its archive refs).  The
    hooks read both as the attempt's commits: the user's own branch became
    "instance 1's work", and a plain ``git merge`` of it into the live base
    was refused as a non-winner's."""
    repo, gp = project(tmp_path)
    git(repo, "switch", "-q", "-c", "feature")
    (repo / "feature.txt").write_text("the user's own work\n")
    git(repo, "add", "feature.txt")
    git(repo, "commit", "-q", "-m", "the user's feature")
    git(repo, "switch", "-q", "main")
    gp("hooks", "install")
    gp("spawn", "t", "-n", "2" if how == "copied" else "1")
    if how == "copied":  # the loser's patch is the user's: its lost line refuses the user's own commit
        gp("run", "t", "--instance", "2", "--", "sh", "-c", f"{HONEST} && git commit -qam fix")
        gp("run", "t", "--instance", "1", "--", "sh", "-c", "GIT_COMMITTER_DATE=2026-02-02T00:00:00Z git cherry-pick feature >/dev/null")
        gp("check", "t", code=None)
        gp("pick", "t")
    elif how == "merged":
        gp("run", "t", "--", "sh", "-c", f"{HONEST} && git commit -qam fix && git merge -q --no-edit feature")
    else:
        gp("run", "t", "--", "sh", "-c", "git checkout -q feature && git checkout -q - && exit 1", code=None)
        gp("retry", "t", "1", code=None)
    kept = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/parallel/archive", "refs/heads/parallel")
    merged = subprocess.run(["git", "merge", "-q", "--no-edit", "feature"], cwd=repo, capture_output=True, text=True)
    assert merged.returncode == 0, f"the user's merge of their own branch was refused:\n{merged.stderr}\n{kept}"


# -- 10. a store the agents write, read by the trusted setup -----------------------------------

def test_an_agent_cannot_plant_what_the_kept_environment_is_built_from(tmp_path: Path) -> None:
    """A folder both agents may write (``sandbox_write``: a pip, npm, Go or
    cargo cache, for their own installs) and setup reads (``setup.stores``)
    let the wrong agent replace a tool the base's setup installs into the
    kept environment (as ``pip install --no-index --find-links`` installs a
    cached wheel, which pip does not verify again) with one that passes
    everything: that environment is built from the base's files, so it is
    trusted, and every attempt was judged with it; the wrong one passed.
    Such a configuration is now refused before anything is made, whichever
    holds the other."""
    store = tmp_path / "store"
    (store / "wheels").mkdir(parents=True)
    (store / "run-tests").write_text(f"#!/bin/sh\nexec {PY} -m pytest -q -p no:cacheprovider tests\n")
    (store / "run-tests").chmod(0o755)
    for written, read in ((store, store), (store / "wheels", store), (store, store / "wheels")):
        config = textwrap.dedent(f"""\
            max_total: 16
            protect: [tests/**]
            sandbox_write: ['{written}']
            setup:
              run: [sh, -c, "mkdir -p .venv/bin && cp {store}/run-tests .venv/bin/ && chmod +x .venv/bin/run-tests"]
              stores: ['{read}']
              cache_key: [requirements.txt]
              keep: [.venv]
              path: [.venv/bin]
            gates:
              - name: tests
                run: [run-tests]
            """)
        repo, gp = project(tmp_path / written.name / read.name, config)
        refused = gp.json("spawn", "t", "-n", "2", code=1)
        assert refused["code"] == "PARALLEL_SANDBOX_WRITE_REFUSED", refused
        assert "setup.stores" in refused["message"] and "PIP_CACHE_DIR" in refused["hint"], refused
        assert gp.json("status")["runs"] == [] and git(repo, "branch", "--list", "parallel/*") == ""


# -- 11. what the agent may still read of git-parallel's folder: its own feedback ---------------

@pytest.mark.parametrize("layer", LAYERS)
def test_a_retried_agent_reads_its_own_feedback_file(tmp_path: Path, layer: str) -> None:
    """``<common>/parallel`` is hidden from agents under either layer (a
    sibling's log, gate logs and feedback are there), but the feedback file
    ``GIT_PARALLEL_FEEDBACK`` names is the attempt's own to read."""
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    gp("run", "t", "--", "sh", "-c", "echo '# not yet' >> app.py && git commit -qam no", env=fenced(layer))
    gp("check", "t", code=None)
    gp("retry", "t", "1")
    gp("run", "t", "--", "sh", "-c", f'cat "$GIT_PARALLEL_FEEDBACK" > feedback.txt; {HONEST}; git add -A; '
       "git commit -qm fix", env=fenced(layer))
    tip = gp.json("status", "t")["run"]["instances"][0]["head"]
    assert "git-parallel feedback" in git(repo, "show", f"{tip}:feedback.txt")
