"""Which instances a ``run`` takes, and its claim on each, before anything
starts (``proc/engine`` then starts them): a finished or published run, a
named instance that is running or terminal, a missing worktree or branch,
or an instance another runner claimed first is refused here, changing
nothing."""

from __future__ import annotations

from pathlib import Path
from gitflow_parallel.model import InstanceRecord, RunRecord

from gitflow_parallel import config
from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.model import FINISHED_RUN, check_transition, find_instance
from gitflow_parallel.names import check_name
from gitflow_parallel.proc import sandbox, slots
from gitflow_parallel.proc.slots import Slot
from gitflow_parallel.state.project import Project, pid_alive


def select(project: Project, record: RunRecord, wanted: list[str] | None) -> list[InstanceRecord]:
    task = record["task"]
    if wanted:
        chosen = []
        for inst_id in dict.fromkeys(wanted):  # keep order, drop repeats
            inst = find_instance(record, inst_id)
            if inst["status"] == "running":
                alive = pid_alive(inst.get("pid"))
                raise ParallelError(
                    E.BRANCH_TERMINAL,
                    f"instance {inst_id} is already running (pid {inst.get('pid')}, "
                    f"{'alive' if alive else 'process gone'})",
                    hint=(f"wait for it, or stop it with `git parallel abort {task} {inst_id}`" if alive else
                          f"its runner died: `git parallel recover {task}`, or `git parallel abort {task} {inst_id}` "
                          f"then `git parallel retry {task} {inst_id}`"),
                )
            check_transition(record, inst, "running")  # the store's rule: terminal ones need a retry
            chosen.append(inst)
    else:
        chosen = [i for i in record["instances"] if i["status"] == "pending"]
        if not chosen:
            counts: dict[str, int] = {}
            for i in record["instances"]:
                counts[i["status"]] = counts.get(i["status"], 0) + 1
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"run {record['run_id']} of {task!r} has no pending instance ({summary})",
                hint=f"`git parallel retry {task} ID` starts a new attempt of a failed or aborted one; "
                f"see `git parallel status {task}`",
            )
    for inst in chosen:
        path = Path(inst["worktree"])
        tip = project.tip(inst)
        if inst.get("removed") or not (path / ".git").exists() or tip is None:
            what = "branch" if tip is None else "worktree"
            raise ParallelError(
                E.BRANCH_NOT_FOUND,
                f"the {what} of instance {inst['id']} is missing ({inst['branch']} at {path}); nothing was started",
                hint=f"`git parallel abort {task} {inst['id']}` then `git parallel retry {task} {inst['id']}` "
                f"makes it again; `git parallel validate {task}` shows what else is off",
            )
    return chosen


def refuse_options(task: str, argv: list[str], timeout: float | None, jobs: int | None) -> None:
    """Refuse a run that cannot start, before anything is claimed."""
    check_name(task, "task")
    if not argv or not argv[0]:
        raise ParallelError(E.EXECUTE_FAILED, "no command to run",
                            hint=f"give it after --: `git parallel run {task} -- CMD [ARG...]`")
    if timeout is not None and not timeout > 0:
        raise ParallelError(E.EXECUTE_FAILED, f"--timeout {timeout} is not a positive number of seconds",
                            hint="pass --timeout S with S > 0, or leave it out for no limit")
    if jobs is not None and jobs < 1:
        raise ParallelError(E.EXECUTE_FAILED, f"--jobs {jobs} is below 1", hint="pass --jobs 1 or more")


def select_and_claim(project: Project, task: str, instances: list[str] | None
                      ) -> tuple[RunRecord, list[tuple[InstanceRecord, Slot]]]:
    with project.store.lock():
        record = project.store.load(task)
        if record["status"] in FINISHED_RUN:
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"run {record['run_id']} of {task!r} is {record['status']}; nothing to run",
                hint=f"spawn a new run with `git parallel spawn {task}`",
            )
        # What runs on the host (the agents' split, notify) comes from the
        # base commit, never from a record an earlier agent could have edited.
        config.verify_frozen(project.repo, record)
        remote = record.get("remote")
        if remote and remote.get("agent"):
            # Its instances are the workers' to run; running them here too
            # would race their deliveries.
            raise ParallelError(
                E.BRANCH_TERMINAL,
                f"run {record['run_id']} of {task!r} is published to {remote['name']} for workers",
                hint=f"workers run it (`git parallel worker --remote {remote['name']}`); "
                     f"`git parallel collect {task}` brings their results")
        chosen = select(project, record, instances)
        sandbox.refuse_unavailable(record["config"], "an agent")
        sandbox.tmp_root()  # every TMPDIR is made there: refused now, before anything is claimed
        sandbox.extra_writes(record["config"], project.repo.common_dir, project.repo.main_workdir)
        return record, _take_claims(project, record, chosen, named=bool(instances))


def _take_claims(project: Project, record: RunRecord, chosen: list[InstanceRecord],
                 named: bool) -> list[tuple[InstanceRecord, Slot]]:
    """Claim every selected instance (under the project lock).  Without
    ``--instance``, those another runner claimed first are left to it; a
    named one is refused, and so is a run left with nothing to do."""
    task, parallel_dir = record["task"], project.repo.parallel_dir
    taken: list[tuple[InstanceRecord, Slot]] = []
    busy: list[str] = []
    for inst in chosen:
        claim = slots.try_claim(parallel_dir, task, inst["id"], f"task={task} run={record['run_id']}")
        if claim is None:
            busy.append(inst["id"])
        else:
            taken.append((inst, claim))
    if busy and (named or not taken):
        for _, claim in taken:
            claim.release()
        who = slots.claim_holder(parallel_dir, task, busy[0])
        raise ParallelError(
            E.BRANCH_TERMINAL,
            f"instance(s) {', '.join(busy)} of {task!r} are being run by another `git parallel run` "
            f"({who or 'holder unknown'}); nothing was started",
            hint=f"wait for that run to finish (`git parallel status {task}`), or stop it with "
                 f"`git parallel abort {task} ID`",
        )
    return taken
