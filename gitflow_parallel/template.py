"""The commented ``.gitparallel.yaml`` that ``git parallel init`` writes:
every key with its default, as a comment (``config`` owns the schema;
``tests/test_docs.py`` and the init tests keep the two in step)."""

from __future__ import annotations

TEMPLATE_SETTINGS = """\
# git-parallel configuration (read from the base commit at spawn time).
# Every key is optional; the values shown are the defaults.

# instances: 3            # instances per track for `git parallel spawn`
# max_total: 6            # cap on live (non-terminal) instances in this repository
# worktree_root: null     # where worktrees go; default: <repo>.parallel beside the repo
# keep_losers: false      # keep losing branches and worktrees after merge
# rework_max: 2           # how many times one instance may be retried
# notes_ref: refs/notes/parallel
# commit_leftovers: true  # commit what an agent leaves uncommitted after `run`
# leftovers_exclude: [.aider*, .claude/, .codex/, .gemini/, __pycache__/, "*.pyc", .pytest_cache/]
#                         # untracked agent scratch (.gitignore lines) never committed; [] commits all
# run_log_bytes: 67108864       # cap of an agent's run log (its start and end kept past it)
# evidence_log_bytes: 1048576   # per log kept on refs/parallel/evidence/ (its end, if longer)
# selection: critic_first_pass   # majority_vote (identical trees) | cluster | tournament | differential

# Gates judge a clean checkout of the commit, with protected paths taken from
# the base commit: .gitparallel.yaml, every path a gate's `run` names (so name
# the test folder: `pytest tests`), the harness files (conftest.py, pytest.ini,
# tox.ini, Makefile, ...; the test sections of pyproject.toml, setup.cfg and
# package.json) and:
# protect: []             # more globs, e.g. [tests/**, "**/*_test.go"]
# protect_mode: restore   # or refuse: an attempt that changed one fails
# protect_defaults: true  # false: the harness files are not protected
# added_tests: observe    # tests an attempt adds run after the gates: observe | enforced | off

# Each agent attempt, setup and gate runs sandboxed: in namespaces of its own
# (bubblewrap: read-only /, its own PIDs, gates without network; a gate sees
# its checkout through a throwaway layer), else in a Landlock fence (Linux
# 5.13+); either way it writes only its worktree (a gate: its checkout).
# sandbox: auto           # required: refuse without the namespace layer; off
# sandbox_network: on     # off: agents and setup get no network
# sandbox_write: [~/.my-agent] # what other agents' tools write outside the worktree (not a setup store);
#                         # claude, codex, aider, gemini and opencode get theirs without it

# merge:
#   policy: refuse               # a conflict stops, like git; or first_pass_wins |
#                                # last_pass_wins | winner_takes_all | manual
#   retries: 2                   # recomputations when the base moves meanwhile
#   timeout: 60                  # seconds
#   verify: auto                 # re-prove the landing tree unless this machine's pristine
#                                # check proved it: auto | always | changed | never
#   squash: auto                 # true: land each winner as one commit on the base; auto: when
#                                # its history is only leftovers commits; false: never
#   message: null                # template of the commit that lands: {task} {track} {winner} {branch}
#                                # {commit} {run_id} {policy} {reason}

# score:
#   threshold: 6
#   command: null                # e.g. [python, score.py]; last stdout line is 0-10
#   findings: null               # e.g. findings.jsonl (minimum anti_slop_score), written by a gate; protected

# judge:                         # only with selection: tournament
#   command: null                # e.g. [python, judge.py]; last stdout line A or B
#   timeout: 300                 # seconds per match

# distinguish:                   # only with selection: differential
#   command: [python3, tools/distinguish_functions.py, generate]   # writes inputs, from the attempts' diffs
#   run: [python3, tools/distinguish_functions.py, run]            # each attempt on them; stdout compared
#   timeout: 300                 # seconds per command
"""

TEMPLATE_RUN = """\

# setup:                         # builds the judged checkout's own environment before the gates
#   run: [sh, -c, "python3 -m venv .venv && .venv/bin/python -m pip install -q -e . pytest"]
#   cache_key: [pyproject.toml]  # a built environment is reused while these files are unchanged
#   keep: [.venv]                # what setup builds, kept between checks
#   path: [.venv/bin]            # put first on the gates' PATH
#   stores: [pip]                # your package stores (pnpm, npm, yarn, pip, uv, go, cargo, or
#                                # folders): read through a throwaway layer, never written
#   timeout: 1800
#   worktrees: false             # also run it in each agent worktree at spawn

# gates:
#   - name: tests
#     run: [.venv/bin/python, -m, pytest, -q, tests]   # naming tests/ protects it
#     mode: enforced             # observe (recorded, never blocks) | probe (a behaviour signature)
#     timeout: 600
#     tracks: null               # or a list of track names
#     requires: []               # gates that must pass first
#     inputs: []                 # globs of files to fingerprint
#     outputs: []                # probe only: globs of files its signature hashes (default: stdout)
#     env: {}
#     setup: true                # false: run without the project's setup
#     hidden: null               # a folder outside the repository with tests the agents never see
"""

TEMPLATE = TEMPLATE_SETTINGS + TEMPLATE_RUN
