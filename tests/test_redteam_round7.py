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

from conftest import git
from hostile import needs_namespace, processes_with, token
from test_escapes import control_free
from test_hostile import HONEST, PY, project

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
