"""``git parallel spawn``: a run record first (so a crash leaves something ``recover``
can see), then every branch and worktree, all or nothing, under the project
lock and the repository-wide cap on live instances; with ``--remote`` the run
is published too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

import pygit2

from gitflow_parallel import config as C
from gitflow_parallel import errors as E
from gitflow_parallel import faults, model
from gitflow_parallel.git import protected, worktrees
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.git.repo import Repo
from gitflow_parallel.state.project import Project
from gitflow_parallel.model import TERMINAL, InstanceRecord, RunRecord

if TYPE_CHECKING:
    from gitflow_parallel.shapes.results import SpawnResult


MAX_INSTANCES = 64


# -- spawn ---------------------------------------------------------------------
def instance_ids(tracks: list[str], n: int) -> list[tuple[str, str]]:
    if tracks == ["main"]:
        return [("main", str(k)) for k in range(1, n + 1)]
    return [(t, f"{t}-{k}") for t in tracks for k in range(1, n + 1)]


def live_instances(project: Project) -> int:
    return sum(1 for r in project.store.load_unfinished()
               for i in r["instances"] if i["status"] not in TERMINAL)


def spawn(project: Project, task: str, n: int | None = None, base: str | None = None,
          tracks: list[str] | None = None) -> SpawnResult:
    check_name(task, "task")
    tracks = list(tracks or ["main"])
    for t in tracks:
        check_name(t, "track")
    if len(set(tracks)) != len(tracks):
        raise ParallelError(E.INVALID_NAME, f"track names repeat: {', '.join(tracks)}",
                            hint="give each --track once")
    repo = project.repo
    base_ref, base_commit = repo.resolve_base(base)
    cfg, source = C.load_from_commit(repo, base_commit)
    if cfg.get("sandbox") == "required":  # (only then: the probe starts bwrap)
        from gitflow_parallel.proc import sandbox

        # Every run and check of it would be refused: said before any worktree is made.
        sandbox.refuse_unavailable(cfg, "the agents and gates of a run spawned now",
                                   "nothing was made (no run, branch or worktree)")
    setup = cfg.get("setup")
    if cfg.get("sandbox_write") and setup is not None and setup.get("stores"):
        from gitflow_parallel.judge import stores  # (only then: spawn starts at once)

        stores.refuse_agents_writing(cfg)
    warnings = _config_drift(repo, base_commit)
    warnings += protected.unmatched_warnings(cfg, repo.pygit[base_commit].peel(pygit2.Commit).tree)
    count = cfg["instances"] if n is None else n
    if not 1 <= count <= MAX_INSTANCES:
        raise ParallelError(E.INVALID_NAME, f"-n {count} is out of range 1..{MAX_INSTANCES}",
                            hint="pass -n between 1 and 64")
    root = worktrees.resolve_root(repo, cfg["worktree_root"])
    record = model.new_run(
        task, {"ref": base_ref, "commit": base_commit}, tracks, cfg, C.config_sha256(cfg), source, root,
        [model.new_instance(task, t, i, root, base_commit) for t, i in instance_ids(tracks, count)], utcnow())
    store = project.store
    with store.lock():
        store.previous_run(task)  # "this task has a run" comes before "the repository is full"
        live = live_instances(project)
        wanted = len(record["instances"])
        if live + wanted > cfg["max_total"]:
            raise ParallelError(
                E.RESOURCE_CAP_EXHAUSTED,
                f"spawning {wanted} instances would make {live + wanted} live ones, over max_total {cfg['max_total']}",
                hint="finish or abort other runs (`git parallel status`), spawn fewer (-n), or raise max_total",
            )
        store.create(record)
        faults.point("spawn.after_record")
        try:
            worktrees.create(repo, task, base_commit, record["instances"], fault=faults.point)
        except BaseException:
            store.remove(task)
            raise
        store.mark_spawned(record["run_id"])
        faults.point("spawn.after_worktrees")
    warnings += _prepare_worktrees(project, record)
    # No notes: every tip is still the base commit (see project.notes_instance_on).
    # A record is a spawn result: its own keys (warnings, published) are NotRequired.
    return cast("SpawnResult", {**record, "warnings": warnings} if warnings else record)


def _prepare_worktrees(project: Project, record: RunRecord) -> list[str]:
    """``setup.worktrees``: the same setup the judge runs, in each new agent
    worktree (side by side), so an agent starts with the project's
    environment built; a failure is a warning, never a refusal (the agent
    may build it itself).  Returns the warnings."""
    setup = record["config"].get("setup")
    if not setup or not setup.get("worktrees"):
        return []
    from concurrent.futures import ThreadPoolExecutor

    from gitflow_parallel.judge import place
    from gitflow_parallel.proc.watchdog import shared as shared_watchdog

    log_dir = project.repo.parallel_dir / "logs" / record["run_id"]

    def one(inst: InstanceRecord) -> str | None:
        log = log_dir / f"{inst['id']}.{inst['attempt']}.setup.log"
        facts = {"TASK": record["task"], "RUN_ID": record["run_id"], "INSTANCE": inst["id"],
                 "TRACK": inst["track"], "WORKTREE": inst["worktree"]}
        main = project.repo.main_workdir
        env = place.gate_env({}, facts, home=(main, Path(inst["worktree"])) if main else None)
        code, error, _ = place.execute(list(setup["run"]), Path(inst["worktree"]), env, float(setup["timeout"]), log)
        if code == 0 and error is None:
            return None
        return f"setup in the worktree of instance {inst['id']} failed ({error or f'exit {code}'}); see {log}"

    shared_watchdog()  # forked before the threads
    with ThreadPoolExecutor(max_workers=min(len(record["instances"]), int(record["config"]["max_total"]))) as pool:
        return [w for w in pool.map(one, record["instances"]) if w]


def _config_drift(repo: Repo, base_commit: str) -> list[str]:
    """A warning when the .gitparallel.yaml of the worktree spawn runs in is
    not the base commit's: the gates used are the committed ones."""
    top = repo.workdir or repo.main_workdir
    if top is None:
        return []
    here = Path(top) / C.CONFIG_FILE
    try:
        mine: bytes | None = here.read_bytes()
    except OSError:
        mine = None
    tree = repo.pygit[base_commit].peel(pygit2.Commit).tree
    try:
        blob = repo.pygit[tree[C.CONFIG_FILE].id]
    except KeyError:
        blob = None
    committed = blob.data if isinstance(blob, pygit2.Blob) else None
    if mine == committed:
        return []
    what = "is not in the base commit" if committed is None else (
        "was deleted here" if mine is None else "differs from the base commit's")
    return [f"{here} {what}; the run uses the configuration committed at {base_commit[:12]} "
            f"(commit the file first to use it)"]
