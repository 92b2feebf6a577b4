"""`git parallel comment`: a review comment on an attempt is kept in the
record and a note, reaches the next agent through `retry`'s feedback
(GIT_PARALLEL_FEEDBACK and {feedback}) beside the failing gate, and shows
in `show` and the report.  Real git, real agent processes, real gates."""

from __future__ import annotations

import pytest

import json
import sys
import textwrap
from pathlib import Path

from conftest import GP, git, make_repo

PY = sys.executable

# Attempt 0 writes a wrong file; later attempts write ok.txt and keep the
# {feedback} they were given (argv[1]) and the file GIT_PARALLEL_FEEDBACK names.
AGENT = textwrap.dedent("""
    import os, sys
    attempt = os.environ["GIT_PARALLEL_ATTEMPT"]
    open("app.py", "w").write("x = 1\\ny = 2\\nz = [1, 2]\\n")
    if attempt != "0":
        open("ok.txt", "w").write("ok\\n")
        open("got-argv.md", "w").write(sys.argv[1])
        open("got-env.md", "w").write(open(os.environ["GIT_PARALLEL_FEEDBACK"]).read())
""")
GATE = "import os, sys\nprint('ok.txt present' if os.path.exists('ok.txt') else 'ok.txt missing')\n" \
       "sys.exit(0 if os.path.exists('ok.txt') else 1)\n"


@pytest.mark.unfenced("its agent hands over through a file outside its worktree")
@pytest.mark.slow  # the default tier keeps under 150 s; CI runs this after it
def test_a_comment_on_attempt_reaches_its_retry_and_the_report(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "gate.py").write_text(GATE)
    repo = make_repo(tmp_path / "repo", config=f"gates:\n  - name: has-ok\n    run: [{PY}, {tmp_path / 'gate.py'}]\n")
    git(repo, "config", "user.email", "reviewer@example.com")
    gp = GP(repo)
    agent = [PY, str(tmp_path / "agent.py"), "{feedback}"]
    gp("spawn", "T", "-n", "2")
    gp("run", "T", "--", *agent)
    assert "FAIL has-ok" in gp("check", "T", code=1).stdout  # both fail the gate
    tip = git(repo, "rev-parse", "parallel/T/2")
    out = gp("comment", "T", "2", "--file", "app.py", "--line", "3", "use a tuple for z").stdout
    assert "on app.py:3 on attempt 0 of T/2" in out
    gp("comment", "T", "2", "and write ok.txt")
    assert "--line needs --file" in gp("comment", "T", "2", "--line", "3", "x", code=1).stderr
    assert "empty" in gp("comment", "T", "2", " ", code=1).stderr

    inst = next(i for i in gp.json("status", "T")["run"]["instances"] if i["id"] == "2")
    assert [(c["attempt"], c["file"], c["line"], c["text"]) for c in inst["comments"]] == [
        (0, "app.py", 3, "use a tuple for z"), (0, None, None, "and write ok.txt")]
    notes = [json.loads(x) for x in git(repo, "notes", "--ref=parallel", "show", tip).splitlines() if x.startswith("{")]
    assert [(n["file"], n["line"], n["text"]) for n in notes if n["kind"] == "comment"] == [
        ("app.py", 3, "use a tuple for z"), (None, None, "and write ok.txt")]
    assert "comment on attempt 0 by reviewer@example.com: app.py:3: use a tuple for z" in gp("show", "T", "2").stdout

    gp("retry", "T", "2")
    gp("run", "T", "--instance", "2", "--", *agent)
    worktree = Path(inst["worktree"])
    for name in ("got-argv.md", "got-env.md"):
        text = (worktree / name).read_text()
        assert "## Gate has-ok: exit 1" in text and "ok.txt missing" in text  # the gate failure
        assert "## Review comments" in text
        assert "- app.py:3: use a tuple for z (reviewer@example.com)" in text
        assert "- and write ok.txt (reviewer@example.com)" in text
    # instance 1 had no comment: its feedback has none
    gp("retry", "T", "1")
    feedback = next(i for i in gp.json("status", "T")["run"]["instances"] if i["id"] == "1")["feedback"]
    assert "Review comments" not in Path(feedback).read_text()

    page = Path(gp.json("report", "T")["path"]).read_text()
    assert 'data-role="comments"' in page and "use a tuple for z" in page and 'data-line="3"' in page
