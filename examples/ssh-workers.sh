#!/bin/sh
# Plain ssh: start one worker on each host, each in its own clone, and wait.
# Every host needs git, Python with git-parallel, the agent, and a clone of
# the repository whose origin is the remote the run was published to:
#   git parallel spawn fix-login -n 6 --remote origin
#   git parallel run fix-login --remote origin -- aider --yes-always --message "Fix the bug in ISSUE.md"
#   sh examples/ssh-workers.sh fix-login build1 build2 build3
# Each worker keeps taking instances until none is left, waiting for claims
# held elsewhere (and taking over those whose lease expires).  Then, here:
#   git parallel collect fix-login && git parallel pick fix-login && git parallel merge fix-login
set -eu
task=$1; shift
for host in "$@"; do
    ssh "$host" "cd ~/src/project && git fetch -q origin && git parallel worker --remote origin --task $task --wait --name $host" &
done
wait
