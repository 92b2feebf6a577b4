"""What new users hit on real projects (issue 39): the tool's own commits
under the user's identity, tampering and hidden counts in plain sight,
hooks that check the tree they vouch for, a findings file an attempt cannot
write, and a merge that keeps the user's ignored files."""

from __future__ import annotations

import pytest

import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import test_hooks as hooks
from conftest import AGENT, GP, git, make_repo, snapshot
import scenarios

PY = sys.executable


def project(tmp_path: Path, extra: str = "", files: dict[str, str] | None = None) -> tuple[Path, GP]:
    """A repository whose one gate passes when no ``*.bad`` file exists."""
    gate = "import pathlib, sys\nsys.exit(1 if list(pathlib.Path('.').rglob('*.bad')) else 0)\n"
    return scenarios.project(tmp_path, gate, name="ok", extra=extra, files=files)


def agent(gp: GP, task: str, inst: str, *files: str) -> None:
    gp("run", task, "--instance", inst, "--", PY, str(gp.cwd.parent / "tools" / "agent.py"), *files)


def test_leftovers_and_landing_commits_honour_the_identity_variables(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, extra="merge:\n  squash: false\n")
    git(repo, "config", "user.name", "Config Person")
    git(repo, "config", "user.email", "config@example.com")
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "a.txt=one")
    (repo / "base.txt").write_text("moved\n")  # the base moves: the landing is a merge commit of ours
    git(repo, "add", "base.txt")
    git(repo, "commit", "-q", "-m", "base moves")
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    fmt = "%an <%ae> %aI | %cn <%ce> %cI"
    want = "Test Author <author@example.com> 2026-01-01T00:00:00+00:00 | " \
           "Test Committer <committer@example.com> 2026-01-01T00:00:00+00:00"
    assert git(repo, "log", "-1", f"--format={fmt}", "main") == want  # the landing (merge) commit
    assert git(repo, "log", "-1", f"--format={fmt}", "main^2") == want  # the leftovers commit
    # And every other commit the tool writes: notes, evidence refs.
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/notes/", "refs/parallel/evidence/").split()
    made = "\n".join(f"{ref} " + git(repo, "log", "-1", f"--format={fmt}", ref) for ref in refs)
    assert "refs/notes/parallel " in made and "refs/parallel/evidence/" in made, made
    assert all(line.endswith(" " + want) for line in made.splitlines()), made


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_a_committed_findings_file_does_not_score_the_attempt(tmp_path: Path) -> None:
    # The review gate writes its findings where none are yet (as a cached
    # review does); an attempt that commits its own file must not be believed.
    review = tmp_path / "review.py"
    review.write_text("import pathlib\np = pathlib.Path('findings.jsonl')\n"
                      "p.exists() or p.write_text('{\"anti_slop_score\": 3}\\n')\n")
    repo, gp = project(tmp_path, extra=textwrap.dedent(f"""
          - name: review
            run: [{PY}, {review}]
        score:
          threshold: 0
          findings: findings.jsonl
    """))
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", 'findings.jsonl={"anti_slop_score": 10}\\n', "a.txt=self-scored")
    agent(gp, "t", "2", "a.txt=honest")
    checked = gp.json("check", "t")
    scores = {i["id"]: i["score"] for i in checked["instances"]}
    assert scores == {"1": 3, "2": 3}, checked
    # It is a protected path: the attempt's copy is listed as a change it made.
    first = next(i for i in checked["instances"] if i["id"] == "1")
    assert "findings.jsonl" in first["protected_changes"], first


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_a_findings_path_written_with_dot_slash_is_protected_and_its_copy_blocks_a_pick(tmp_path: Path) -> None:
    # `./out/findings.jsonl` names the same file as `out/findings.jsonl`: the
    # attempt's copy must be replaced there too, and a committed findings
    # file is no new test (it would land, and score every later attempt).
    review = tmp_path / "review.py"
    review.write_text("import pathlib\np = pathlib.Path('out/findings.jsonl')\np.parent.mkdir(exist_ok=True)\n"
                      "p.exists() or p.write_text('{\"anti_slop_score\": 3}\\n')\n")
    repo, gp = project(tmp_path, extra=textwrap.dedent(f"""
          - name: review
            run: [{PY}, {review}]
        score:
          threshold: 0
          findings: ./out//findings.jsonl
    """))
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", 'out/findings.jsonl={"anti_slop_score": 10}\\n', "a.txt=self-scored")
    agent(gp, "t", "2", "a.txt=honest and longer")
    checked = gp("check", "t")
    assert "out/findings.jsonl added +1 -0  (blocks an automatic pick)" in checked.stdout, checked.stdout
    scores = {i["id"]: i["score"] for i in gp.json("status", "t")["run"]["instances"]}
    assert scores == {"1": 3, "2": 3}, scores
    picked = gp("pick", "t").stdout
    assert "winner 2" in picked and "lost 1: [PARALLEL_PROTECTED_PATH_CHANGED]" in picked, picked


TAMPER = 'echo x > b.txt; git config --file "$(git rev-parse --git-common-dir)/config" user.name Mallory'


def _cards(page: str) -> dict[str, str]:
    """Each attempt's card of the report, by instance id."""
    found = re.findall(r'<section class="attempt[^"]*" data-attempt="([^"]+)".*?</section>', page, re.S)
    return dict(zip(found, re.findall(r'<section class="attempt.*?</section>', page, re.S)))


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
@pytest.mark.unfenced("its agent tampers with the shared config, which the sandbox would refuse outright")
def test_tampering_and_protected_changes_are_on_the_card_in_pick_and_in_show(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, files={"README.md": "hello\n", "tests/test_a.py": "def test_a(): pass\n"},
                       extra="protect: ['tests/**']\n")
    gp("spawn", "t", "-n", "4")
    agent(gp, "t", "1", "a.txt=honest")
    ran = gp("run", "t", "--instance", "2", "--", "sh", "-c", TAMPER, code=1)
    assert "PARALLEL_AGENT_TAMPERED" in ran.stdout, ran.stdout
    agent(gp, "t", "3", "tests/test_a.py=def test_a(): assert 0\\n", "c.bad=x")  # fails, and edits a test
    agent(gp, "t", "4", "tests/test_a.py=def test_a(): assert 1\\n")  # passes, and edits a test
    assert "FAIL ok" in gp("check", "t", code=1).stdout
    picked = gp("pick", "t").stdout
    assert "lost 2: [PARALLEL_AGENT_TAMPERED]" in picked and "config" in picked, picked
    assert "lost 3: [PARALLEL_DEV_SELECTION_NO_PASS]" in picked and "tests/test_a.py" in picked, picked
    assert "lost 4: [PARALLEL_PROTECTED_PATH_CHANGED]" in picked, picked
    shown = gp("show", "t", "2").stdout
    assert "tampered: it changed config" in shown and "[PARALLEL_AGENT_TAMPERED]" in shown, shown
    page = tmp_path / "r.html"
    gp("report", "t", "--html", str(page))
    cards = _cards(page.read_text())
    assert 'data-role="tampered"' in cards["2"] and "PARALLEL_AGENT_TAMPERED" in cards["2"], cards["2"]
    assert "config" in cards["2"]
    assert 'data-role="protected"' in cards["3"] and "tests/test_a.py" in cards["3"], cards["3"]
    assert 'data-role="tampered"' not in cards["1"] and 'data-role="protected"' not in cards["1"]
    # The pick's table of losers gives each its code, a loser that passed its gates too.
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr data-losers="([^"]+)".*?</tr>', page.read_text())}
    assert "PARALLEL_AGENT_TAMPERED" in rows["2"] and "PARALLEL_PROTECTED_PATH_CHANGED" in rows["4"], rows


@pytest.mark.unfenced("its agent tampers with the shared config, which the sandbox would refuse outright")
def test_show_names_the_tampering_of_an_earlier_attempt(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    ran = gp("run", "t", "--instance", "1", "--", "sh", "-c", TAMPER, code=1)
    assert "PARALLEL_AGENT_TAMPERED" in ran.stdout, ran.stdout
    gp("retry", "t", "1")
    shown = gp("show", "t", "1").stdout
    assert re.search(r"earlier attempt 0: failed \(PARALLEL_AGENT_TAMPERED: .*config", shown), shown


# Code of the attempt's, run by a gate, that writes the shared config.
GATE_TAMPER = ("import subprocess\\nc = subprocess.run(['git', 'rev-parse', '--git-common-dir'], capture_output=True, "
               "text=True).stdout.strip()\\nsubprocess.run(['git', 'config', '--file', c + '/config', 'user.name', 'M'])\\n")


@pytest.mark.unfenced("its code tampers with the shared config while a gate runs, which the sandbox would refuse outright")
@pytest.mark.slow  # a whole flow; the default tier keeps under 150 s
def test_tampering_while_a_gate_runs_is_named_in_pick_show_and_the_report(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, files={"README.md": "hello\n", "check.py": "import lib\n", "lib.py": "pass\n"},
                       extra=f"  - name: own\n    run: [{PY}, check.py]\n")
    gp("spawn", "t", "-n", "2")
    agent(gp, "t", "1", "a.txt=honest")
    agent(gp, "t", "2", "lib.py=" + GATE_TAMPER)  # check.py is protected; what it imports is the attempt's
    ran = gp("check", "t", "--jobs", "1", code=1)  # one at a time: a sibling's check writing meanwhile would cover it
    assert "PARALLEL_AGENT_TAMPERED" in ran.stdout, ran.stdout
    assert "name = M" not in (repo / ".git" / "config").read_text()
    picked = gp("pick", "t").stdout
    assert "lost 2: [PARALLEL_AGENT_TAMPERED]" in picked and "while gate own ran" in picked, picked
    shown = gp("show", "t", "2").stdout
    assert "tampered: while gate own ran" in shown and "config" in shown, shown
    assert "[PARALLEL_AGENT_TAMPERED]" in shown.split("outcome:")[1], shown
    page = tmp_path / "r.html"
    gp("report", "t", "--html", str(page))
    card = _cards(page.read_text())["2"]
    assert 'data-role="tampered"' in card and "while gate own ran" in card, card


CALC_TESTS = "from calc import double\n\n\ndef test_two():\n    assert double(2) == 4\n"
HIDDEN_TESTS = "".join(f"from calc import double\n\n\ndef test_h{n}():\n    assert double({n}) == {2 * n}\n\n\n"
                       for n in range(4))


def test_hidden_gate_counts_in_check_show_report_and_logs(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text(HIDDEN_TESTS)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "agent.py").write_text(AGENT)
    pytest_run = f"[{PY}, -m, pytest, -q, -p, no:cacheprovider, tests]"
    repo = make_repo(tmp_path / "repo", {"calc.py": "def double(n):\n    return 4\n", "tests/test_calc.py": CALC_TESTS},
                     config=f"gates:\n  - name: hidden\n    run: {pytest_run}\n    hidden: {hidden}\n")
    gp = GP(repo)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "calc.py=def double(n):\\n    return 4 if n == 2 else 2 * n if n < 2 else 0\\n")
    checked = gp("check", "t", code=1).stdout
    assert "hidden tests: 1 failed, 4 passed (output not kept)" in checked, checked
    again = gp("check", "t", code=1).stdout  # fresh evidence: skipped, with its counts
    assert "skipped" in again and "failed hidden (hidden tests: 1 failed, 4 passed)" in again, again
    refused = gp("pick", "t", code=1).stderr  # and pick's reason for each loser
    assert "1: failed enforced gates: hidden (hidden tests: 1 failed, 4 passed)" in refused, refused
    assert "hidden tests: 1 failed, 4 passed" in gp("show", "t", "1").stdout
    page = tmp_path / "r.html"
    gp("report", "t", "--html", str(page))
    assert re.search(r'data-role="hidden-counts">1 failed, 4 passed<', page.read_text())
    asked = gp("logs", "t", "1", "--gate", "hidden", code=1)
    assert "error[PARALLEL_EVIDENCE_MISSING]: gate hidden ran for instance 1" in asked.stderr, asked.stderr
    assert "failed, exit 1, hidden tests: 1 failed, 4 passed; its output is not kept" in asked.stderr
    assert "did not run" not in asked.stderr and "hint: " in asked.stderr


def test_logs_of_a_hidden_gate_says_why_it_failed_when_its_exit_status_does_not(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    (hidden / "tests").mkdir(parents=True)
    (hidden / "tests" / "test_hidden.py").write_text("def test_h():\n    pass\n")
    gates = "".join(f"  - name: {name}\n    run: {run}\n    hidden: {hidden}\n"
                    for name, run in (("quiet", f"[{PY}, -c, 'pass']"), ("gone", "[./no-such-runner]")))
    repo, gp = project(tmp_path, extra=gates)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "a.txt=one")
    assert "FAIL gone" in gp("check", "t", code=1).stdout
    quiet = gp("logs", "t", "1", "--gate", "quiet", code=1).stderr
    assert "gate quiet ran for instance 1" in quiet and "failed, exit 0 (the hidden tests reported no count" in quiet, quiet
    gone = gp("logs", "t", "1", "--gate", "gone", code=1).stderr
    assert "gate gone ran for instance 1" in gone and "failed (" in gone and "no-such-runner" in gone, gone
    assert "None" not in gone and "its output is not kept" in gone, gone


def test_merge_refuses_to_overwrite_an_ignored_file_of_the_base_checkout(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, files={"README.md": "hello\n", ".gitignore": ".env.local\nbuild/\n"})
    (repo / ".env.local").write_text("SECRET=mine\n")
    (repo / "build").mkdir()
    (repo / "build" / "keep.o").write_text("local build\n")
    gp("spawn", "t", "-n", "1")
    adds = "printf 'SECRET=agent\\n' > .env.local; mkdir -p build; echo x > build/new.o; " \
           "git add -f .env.local build/new.o; git commit -qm 'add env'"
    gp("run", "t", "--instance", "1", "--", "sh", "-c", adds)
    gp("check", "t")
    gp("pick", "t")
    before = snapshot(repo)
    refused = gp("merge", "t", code=1)
    assert "error[PARALLEL_BASE_DIRTY]" in refused.stderr and ".env.local" in refused.stderr, refused.stderr
    assert "ignored" in refused.stderr and "hint: " in refused.stderr
    assert "build/" not in refused.stderr  # build/new.o is new there: nothing of the user's is in its way
    assert (repo / ".env.local").read_text() == "SECRET=mine\n"
    assert snapshot(repo) == before  # a refused merge changes nothing
    # Moved out of the way, the merge lands and the user's other ignored files stay.
    (repo / ".env.local").rename(tmp_path / "env.saved")
    gp("merge", "t")
    assert (repo / ".env.local").read_text() == "SECRET=agent\n"
    assert (repo / "build" / "keep.o").read_text() == "local build\n"


def test_merge_refuses_to_remove_a_folder_of_ignored_files_where_the_winner_adds_a_file(tmp_path: Path) -> None:
    # git's read-tree deletes logs/app.log without a word to put the file logs there.
    repo, gp = project(tmp_path, files={"README.md": "hello\n", ".gitignore": "*.log\n"})
    (repo / "logs").mkdir()
    (repo / "logs" / "app.log").write_text("mine\n")
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "logs=a file now")
    gp("check", "t")
    gp("pick", "t")
    before = snapshot(repo)
    refused = gp("merge", "t", code=1)
    assert "error[PARALLEL_BASE_DIRTY]" in refused.stderr and "logs/app.log (ignored)" in refused.stderr, refused.stderr
    assert snapshot(repo) == before and (repo / "logs" / "app.log").read_text() == "mine\n"


@pytest.mark.slow  # over 2 s (a killed merge in its own process): the default tier keeps under 150 s
def test_recover_keeps_an_ignored_file_the_interrupted_landing_would_overwrite(tmp_path: Path) -> None:
    from gitflow_parallel import faults

    repo, gp = project(tmp_path, files={"README.md": "hello\n", ".gitignore": ".env.local\n"})
    gp("spawn", "t", "-n", "1")
    adds = "printf 'SECRET=agent\\n' > .env.local; git add -f .env.local; git commit -qm 'add env'"
    gp("run", "t", "--instance", "1", "--", "sh", "-c", adds)
    gp("check", "t")
    gp("pick", "t")
    killed = gp("merge", "t", env={faults.ENV: "merge.after_ref"}, code=None)  # the base moved, its checkout not yet
    assert killed.returncode in (-9, 137), killed.stderr
    (repo / ".env.local").write_text("SECRET=mine\n")  # made meanwhile (by hand, a tool, a restore)
    said = gp("recover", "t").stdout  # the record is finished; the checkout is left as it was
    assert (repo / ".env.local").read_text() == "SECRET=mine\n"
    assert "warning[PARALLEL_BASE_WORKTREE_STALE]" in said and ".env.local (ignored)" in said, said
    fix = re.search(r"fix: move them aside, then git -C (\S+) (read-tree -m -u \w+ \w+)", said)
    assert fix is not None, said
    (repo / ".env.local").rename(tmp_path / "env.saved")  # as the fix says
    git(Path(fix[1]), *fix[2].split())
    assert (repo / ".env.local").read_text() == "SECRET=agent\n" and git(repo, "status", "--short") == ""


def test_judging_doc_says_a_merge_lands_over_unrelated_edits_as_it_does(tmp_path: Path) -> None:
    repo, gp = project(tmp_path, files={"README.md": "hello\n", "notes.txt": "mine\n"})
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "a.txt=one")
    gp("check", "t")
    gp("pick", "t")
    (repo / "notes.txt").write_text("mine, edited\n")  # uncommitted, and not a path the landing changes
    gp("merge", "t")
    assert (repo / "notes.txt").read_text() == "mine, edited\n" and (repo / "a.txt").read_text() == "one"
    doc = " ".join((Path(__file__).parent.parent / "docs" / "judging.md").read_text().split())
    assert "when it has changes, the merge is refused" not in doc
    assert "its uncommitted changes to other paths stay as they are" in doc
    # `merge --help` and the man page made from it said so too.
    man = (Path(__file__).parent.parent / "man" / "git-parallel.1").read_text().replace("\\-", "-")
    for text in (" ".join(gp("merge", "--help").stdout.split()), man):
        assert "a dirty one refuses" not in text and "uncommitted changes to other paths stay" in text


def _refused(p: subprocess.CompletedProcess[str]) -> bool:
    return p.returncode != 0 and "error[PARALLEL_DEV_SELECTION_NO_PASS]" in p.stderr


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_hooks_check_the_tree_a_merge_carries_and_refuse_a_losers_patch(tmp_path: Path) -> None:
    repo, gp, run = hooks.picked_run(tmp_path)  # 1 won its pick, 2 lost
    base = hooks.tip(repo, "main")
    # A merge naming the winner as a parent but carrying the loser's files.
    git(repo, "merge", "-q", "--no-commit", "--no-ff", "parallel/t/1")
    git(repo, "checkout", "parallel/t/2", "--", ".")
    forged = hooks.proc(repo, "commit", "-q", "-m", "merge winner (really)")
    assert _refused(forged), forged.stderr
    assert "differs from the merge git makes of its parents" in forged.stderr, forged.stderr
    assert "result.txt" in forged.stderr, forged.stderr
    assert "fresh, passing evidence" not in forged.stderr and hooks.tip(repo, "main") == base
    git(repo, "merge", "--abort")
    # git merge -s ours names the winner and keeps none of it.
    ours = hooks.proc(repo, "merge", "-q", "-s", "ours", "-m", "ours", "parallel/t/1")
    assert _refused(ours) and "result.txt" in ours.stderr, ours.stderr
    git(repo, "merge", "--abort")
    assert hooks.tip(repo, "main") == base

    # An ordinary commit on the base needs no Python, while losers' patches are listed.
    env = hooks._without_python(repo / ".git" / "hooks")
    (repo / "notes.txt").write_text("base work\n")
    git(repo, "add", "notes.txt")
    plain = hooks.proc(repo, "commit", "-q", "-m", "ordinary", env=env)
    assert plain.returncode == 0 and plain.stderr == "", plain.stderr
    gp("hooks", "install")  # its Python back
    base = hooks.tip(repo, "main")

    # The loser's commit, cherry-picked or squashed, is its patch: refused.
    loser = hooks.tip(repo, "parallel/t/2")
    picked = hooks.proc(repo, "cherry-pick", loser)
    assert _refused(picked) and "patch-id" in picked.stderr and "instance 2" in picked.stderr, picked.stderr
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "merge", "-q", "--squash", "parallel/t/2")
    squashed = hooks.proc(repo, "commit", "-q", "-m", "squash")
    assert _refused(squashed) and "patch-id" in squashed.stderr, squashed.stderr
    git(repo, "reset", "-q", "--hard", base)
    assert hooks.tip(repo, "main") == base

    # The base moved (the ordinary commit): the merge is a tree no check judged.
    moved = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert moved.returncode != 0 and "is not the tree its check judged" in moved.stderr, moved.stderr
    git(repo, "merge", "--abort")
    git(repo, "reset", "-q", "--hard", "HEAD~1")  # the ordinary commit taken back
    won = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert won.returncode == 0, won.stderr
    assert "the tree is the merge git makes of its parents" in won.stderr, won.stderr


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_hooks_compare_a_merge_with_the_merge_git_makes(tmp_path: Path) -> None:
    # The winner moves lib/ to src/ while the base adds lib/new.py: git's
    # merge stops on the moved folder and suggests src/new.py, which the
    # person takes.  That is an honest merge of the winner, not other files.
    # (A tree no check judged: it lands only under merge.verify: never.)
    repo, gp = hooks.setup(tmp_path)
    (repo / ".gitparallel.yaml").write_text((repo / ".gitparallel.yaml").read_text() + "merge:\n  verify: never\n")
    git(repo, "commit", "-q", "-am", "merge.verify: never")
    (repo / "lib").mkdir()
    for i in range(3):
        (repo / "lib" / f"m{i}.py").write_text("".join(f"line {j} of module {i}\n" for j in range(30)))
    git(repo, "add", "lib")
    git(repo, "commit", "-q", "-m", "lib")
    hooks.spawn(gp, "t", 2)
    gp("run", "t", "--instance", "1", "--", "sh", "-c", "git mv lib src && git commit -qm 'lib is src'")
    hooks.agent(gp, "t", "2", "result.txt=bad two")
    assert "FAIL good" in gp("check", "t", code=1).stdout
    gp("pick", "t")
    (repo / "lib" / "new.py").write_text("new\n")
    git(repo, "add", "lib")
    git(repo, "commit", "-q", "-m", "base work")
    base = hooks.tip(repo, "main")
    stopped = hooks.proc(repo, "merge", "--no-ff", "-m", "merge winner", "parallel/t/1")
    assert stopped.returncode == 1 and "src/new.py" in stopped.stdout, stopped.stdout
    # With one more file changed than the conflict needs, it is refused ...
    (repo / "src" / "m2.py").write_text("not the winner's\n")
    git(repo, "add", "-A")
    forged = hooks.proc(repo, "commit", "-q", "--no-edit")
    assert _refused(forged) and "src/m2.py" in forged.stderr and "src/new.py" not in forged.stderr, forged.stderr
    assert hooks.tip(repo, "main") == base
    # ... and as git suggested, it lands, naming the path resolved by hand.
    git(repo, "checkout", "MERGE_HEAD", "--", "src/m2.py")
    honest = hooks.proc(repo, "commit", "-q", "--no-edit")
    assert honest.returncode == 0, honest.stderr
    assert "the tree is the merge git makes of its parents but for 1 conflicted path(s)" in honest.stderr, honest.stderr
    assert "warning" in honest.stderr and "merge.verify: never" in honest.stderr, honest.stderr
    assert "src/new.py" in honest.stderr and git(repo, "ls-tree", "--name-only", "HEAD", "src/") .split() == [
        "src/m0.py", "src/m1.py", "src/m2.py", "src/new.py"]


def test_default_landing_message_names_the_agent_without_its_absolute_paths(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "1")
    agent(gp, "t", "1", "a.txt=one")  # only a leftovers commit: it lands squashed (merge.squash: auto)
    gp("check", "t")
    gp("pick", "t")
    gp("merge", "t")
    message = git(repo, "log", "-1", "--format=%B", "main")
    assert str(tmp_path) not in message and sys.executable not in message, message
    # The commit's trailer keeps the command cut at 120 characters, so how
    # much of its arguments shows depends on how long this machine's paths are.
    subject = message.splitlines()[0]
    assert subject == "t (git-parallel winner 1)", subject
    assert f"Agent: {Path(PY).name} agent.py" in message, message


def test_a_long_agent_command_keeps_its_program_and_script_names_in_the_trailer() -> None:
    # CI's fresh clone has longer folders than a developer's: the cut at 120
    # characters once fell inside the script's path ("agent.…").
    from gitflow_parallel import provenance
    deep = "/tmp/" + "d" * 90
    text = provenance.command_text([f"{deep}/.venv/bin/python", f"{deep}/tools/agent.py", "a.txt=one"])
    assert text == "python agent.py a.txt=one", text
    short = provenance.command_text(["/usr/bin/python3", "/srv/agent.py"])
    assert short == "/usr/bin/python3 /srv/agent.py"  # a command that fits keeps its paths


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_report_file_follows_the_umask_and_its_chart_labels_do_not_overlap(tmp_path: Path) -> None:
    repo, gp = project(tmp_path)
    gp("spawn", "t", "-n", "3")
    agent(gp, "t", "1", "a.txt=one")
    agent(gp, "t", "2", "a.txt=two")
    gp("check", "t", "--instance", "2")  # 1 and 3 have no gate rows: their chart rows are empty
    page = tmp_path / "r.html"
    old = os.umask(0o022)
    try:
        gp("report", "t", "--html", str(page))
        assert stat.S_IMODE(page.stat().st_mode) == 0o644
        os.umask(0o002)
        gp("report", "t", "--html", str(page))
        assert stat.S_IMODE(page.stat().st_mode) == 0o664
    finally:
        os.umask(old)
    for chart in re.findall(r"<svg class=\"chart\".*?</svg>", page.read_text(), re.S):
        labels = [float(y) for y in re.findall(r'<text x="0" y="([\d.]+)">instance', chart)]
        assert len(labels) == 3
        assert all(b - a >= 16 for a, b in zip(labels, labels[1:])), labels  # 12px text, no overlap


def test_init_writes_its_config_with_the_umask_mode(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"README.md": "hi\n"})
    old = os.umask(0o022)
    try:
        GP(repo)("init")
    finally:
        os.umask(old)
    assert stat.S_IMODE((repo / ".gitparallel.yaml").stat().st_mode) == 0o644  # as git writes it (not mkstemp's 0600)


def test_readme_install_puts_the_command_on_path() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    install = readme.index("pipx install .")
    assert "pipx ensurepath" in readme[install:install + 300] and "uv tool update-shell" in readme
    assert "is not a git command" in readme


def test_init_check_trusts_protect_and_says_each_warning_once(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={"README.md": "hi\n", "tests/test_a.py": "def test_a(): pass\n",
                                               "pkg/tests/test_b.py": "def test_b(): pass\n"})
    # Written, not committed: the file differs from HEAD's.
    (repo / ".gitparallel.yaml").write_text(f"gates:\n  - name: t\n    run: [{PY}, -c, 'pass']\n"
                                            "protect: ['tests/**', 'pkg/tests/**']\n")
    shown = GP(repo)("init", "--check")
    both = shown.stdout + shown.stderr
    assert "names no test folder" not in both, both  # protect covers every test file
    assert both.count("differs from HEAD's") == 1, both
    assert "tests in HEAD: 2, not protected: 0" in shown.stdout
    # With a test protect does not cover, the gate's warning stands.
    (repo / ".gitparallel.yaml").write_text(f"gates:\n  - name: t\n    run: [{PY}, -c, 'pass']\n"
                                            "protect: ['tests/**']\n")
    assert "names no test folder" in GP(repo)("init", "--check").stdout
