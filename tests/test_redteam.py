"""Red team: attacks on the sandbox (issue 35's model), written as the
attempt's agent and as the attempt's own code.  Each test asserts the
product's promise; an attack that works makes it fail (marked xfail strict)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from conftest import git
from hostile import log_of, needs_namespace, status
from test_hostile import APP_BUGGY, HONEST, PY, act, project

# sh: a commit whose test passes with the bug left in, made as objects only
# (the branch is left at the base, so no tamper rule sees "its" commits).
EVIL_COMMIT = (
    "printf 'def test_add():\\n    pass\\n' > tests/test_app.py && git add -A && "
    "X=$(git commit-tree $(git write-tree) -p HEAD -m evil) && git reset -q --hard HEAD && "
    "M=$(git rev-parse refs/heads/main) && "
    "V=$(git rev-parse --git-dir)/parallel-common && "
)


@needs_namespace
@pytest.mark.xfail(strict=True, reason="agent forges start-refs.json in its view: import_refs moves refs/heads/main")
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
