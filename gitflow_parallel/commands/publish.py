"""``git parallel publish``: push a run (its instance branches, with them the
base commit, and its manifest) to a remote, atomically, for workers there."""

from __future__ import annotations



from gitflow_parallel import errors as E
from gitflow_parallel import model
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.state.project import Project
from gitflow_parallel.state.share import check_remote, run_ref
from gitflow_parallel.state.transport import Update, ls_remote, manifest_commit, push
from gitflow_parallel.model import refuse_finished
from gitflow_parallel.shapes.results import PublishResult


def publish(project: Project, task: str, remote: str, agent: list[str] | None = None,
            timeout: float | None = None) -> PublishResult:
    """Push the run's instance branches (and with them the base commit) and
    its manifest to ``remote``, atomically; with ``agent``, the manifest
    names the command workers run.  The record then says where it went."""
    check_name(task, "task")
    repo = project.repo
    check_remote(repo, remote)
    if agent is not None and (not agent or not agent[0]):
        raise ParallelError(E.EXECUTE_FAILED, "no command to run",
                            hint=f"give it after --: `git parallel run {task} --remote {remote} -- CMD [ARG...]`")
    record = project.store.load(task)
    refuse_finished(record, "publish")
    before = record.get("remote")
    if before is not None and before["name"] != remote:
        raise ParallelError(E.REMOTE_FAILED, f"run {record['run_id']} is published to {before['name']!r}, "
                            f"not {remote!r}", hint=f"publish it with --remote {before['name']}")
    if agent is None:  # as published before, if it was
        agent, timeout = (before["agent"], before["timeout"]) if before is not None else (None, None)
    info = model.new_remote(remote, agent, timeout, utcnow())
    # The manifest is built from the record as it will be stored, and the
    # record changes only once the remote took the push.
    manifest = manifest_commit(project, {**record, "remote": info})
    name = run_ref(record["run_id"])
    there = ls_remote(repo, remote, [name, f"refs/heads/parallel/{task}/*"])
    updates = [Update(manifest, name, there.get(name, ""))]
    kept = []
    for inst in record["instances"]:
        ref, tip = f"refs/heads/{inst['branch']}", project.tip(inst)
        if tip is None or there.get(ref) == tip:
            continue
        if ref in there:
            kept.append(inst["id"])  # a worker's work is there: never overwritten from here
            continue
        updates.append(Update(tip, ref, ""))
    pushed = push(repo, remote, updates)
    if not pushed.ok:
        raise ParallelError(E.REMOTE_FAILED, f"git push --atomic to {remote} was refused; nothing was pushed: "
                            f"{pushed.output}", hint=f"see the message; `git parallel publish {task} --remote "
                            f"{remote}` tries again")
    repo.cas_ref(name, manifest, repo.ref_target(name), f"git-parallel: publish {task}")

    record, _ = project.store.update(task, lambda rec: model.mark_published(rec, info))
    return {"task": task, "run_id": record["run_id"], "remote": remote, "manifest": manifest, "ref": name,
            "agent": info["agent"], "timeout": info["timeout"], "branches": [u.dst for u in updates[1:]],
            "kept_remote": kept, "instances": [i["id"] for i in record["instances"]]}
