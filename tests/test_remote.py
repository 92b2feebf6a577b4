"""Runs across machines, coordinated through a git remote: manifests, claims
with leases, workers in other clones (separate processes, separate HOMEs),
collect, and a landing re-proved on the coordinator.  Real git throughout:
a local bare remote stands for the hosting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import GP, git, make_repo, snapshot

CONFIG = """\
max_total: 16
gates:
  - name: tests
    run: [sh, test.sh]
"""
# The gate passes when out.txt says "good".
TEST_SH = "grep -q good out.txt\n"
GOOD_AGENT = ["sh", "-c", 'echo "good $GIT_PARALLEL_INSTANCE" > out.txt']


def _home(tmp: Path, name: str) -> dict[str, str]:
    home = tmp / f"home-{name}"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def setup_remote(tmp: Path, workers: int) -> tuple[Path, Path, GP, list[Path]]:
    """A bare remote with one commit on main, the coordinator's clone and
    ``workers`` worker clones."""
    origin = tmp / "origin.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = make_repo(tmp / "seed", {"test.sh": TEST_SH, "out.txt": "bad\n"}, config=CONFIG)
    git(seed, "push", "-q", str(origin), "main")
    coord = tmp / "coord"
    git(tmp, "clone", "-q", str(origin), str(coord))
    clones = []
    for k in range(1, workers + 1):
        path = tmp / f"w{k}"
        git(tmp, "clone", "-q", str(origin), str(path))
        clones.append(path)
    return origin, coord, GP(coord), clones


def start_worker(clone: Path, tmp: Path, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``git parallel worker`` as its own process (the real one, not git's
    wrapper, so that a signal reaches it), with a HOME of its own."""
    full = dict(os.environ, **_home(tmp, name), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "gitflow_parallel", "worker", "--remote", "origin", "--name", name,
                             "--json", *args], cwd=str(clone), env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert out.strip(), f"no output (exit {proc.returncode}); stderr:\n{err}"
    return {**json.loads(out), "exit": proc.returncode, "stderr": err}


def remote_refs(origin: Path, prefix: str) -> dict[str, str]:
    out = git(origin, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split() for line in out.splitlines() if line)


def claim_chain(origin: Path, ref: str) -> list[dict[str, Any]]:
    """Every state of a claim on the remote, oldest first."""
    commits = git(origin, "rev-list", "--first-parent", "--reverse", ref).split()
    return [{**json.loads(git(origin, "show", f"{c}:claim.json")), "commit": c} for c in commits]


def spawn_published(gp: GP, task: str, n: int, agent: list[str]) -> str:
    out = gp.json("spawn", task, "-n", str(n), "--remote", "origin")
    gp("run", task, "--remote", "origin", "--", *agent)
    return out["run_id"]


# -- the whole flow across clones ---------------------------------------------------------------
@pytest.mark.slow
def test_three_workers_claim_each_instance_once_and_the_winner_lands(tmp_path: Path) -> None:
    origin, coord, gp, clones = setup_remote(tmp_path, 3)
    run_id = spawn_published(gp, "fx", 3, GOOD_AGENT)
    manifest = remote_refs(origin, f"refs/parallel/runs/{run_id}")
    assert list(manifest) == [f"refs/parallel/runs/{run_id}"]
    published = git(origin, "show", f"refs/parallel/runs/{run_id}:record.yaml")
    assert "config_sha256" in published and "good $GIT_PARALLEL_INSTANCE" in published

    procs = [start_worker(c, tmp_path, f"w{k}", "--once", "--lease", "30") for k, c in enumerate(clones, 1)]
    results = [finish(p) for p in procs]
    for r in results:
        assert r["exit"] == 0, r
    taken = [row["id"] for r in results for row in r["instances"]]
    assert sorted(taken) == ["1", "2", "3"]  # every instance exactly once
    claims = remote_refs(origin, f"refs/parallel/claims/{run_id}/")
    assert len(claims) == 3
    for ref in claims:
        chain = claim_chain(origin, ref)
        assert {c["generation"] for c in chain} == {1} and all(c["takeover"] is None for c in chain)
        assert len({c["worker"] for c in chain}) == 1 and chain[-1]["state"] == "done"
    assert len(remote_refs(origin, f"refs/parallel/evidence/{run_id}/")) == 3

    collected = gp.json("collect", "fx")
    assert [(r["id"], r["status"], r["verdict"]) for r in collected["instances"]] == [
        ("1", "succeeded", "pass"), ("2", "succeeded", "pass"), ("3", "succeeded", "pass")]
    assert collected["pending"] == []
    assert {r["worker"] for r in collected["instances"]} == {"w1", "w2", "w3"}
    status = gp.json("status", "fx")
    assert {i["live"]["evidence"] for i in status["run"]["instances"]} == {"fresh"}
    gp("pick", "fx")
    out = gp.json("merge", "fx", "--push", "origin")
    merged = out["merge"]
    assert merged["verified"] and merged["verified"][0]["passed"]
    # The workers' notes on the remote were merged in (cat_sort_uniq) and the
    # landing went out with them, in one atomic push.
    assert out["push"]["moved_base"] and "refs/notes/parallel" in out["push"]["refs"]
    assert git(origin, "rev-parse", "main") == merged["landed"]

    fourth = tmp_path / "w4"
    git(tmp_path, "clone", "-q", str(origin), str(fourth))
    git(fourth, "fetch", "-q", "origin", "refs/notes/parallel:refs/notes/parallel",
        f"refs/parallel/evidence/{run_id}/*:refs/parallel/evidence/{run_id}/*")
    shown = git(fourth, "notes", "--ref=parallel", "show", "main").splitlines()
    assert any(l.startswith("git-parallel: fx won by") for l in shown)
    lines = [json.loads(l) for l in shown if l.startswith("{")]
    kinds = {l["kind"] for l in lines}
    assert {"pick", "merge"} <= kinds  # landed as one new commit (merge.squash: auto); evidence is on the winner's
    pick = next(l for l in lines if l["kind"] == "pick")
    winner = pick["winner"]
    assert "evidence" in {json.loads(l)["kind"] for l in git(fourth, "notes", "--ref=parallel", "show",
                                                               pick["commit"]).splitlines() if l.startswith("{")}
    pack = json.loads(git(fourth, "show", f"refs/parallel/evidence/{run_id}/{winner}/0:pack.json"))
    assert pack["verdict"] == "pass" and pack["commit"] == pick["commit"] and pack["checkout"] == "clean"
    assert pack["tree"] == git(fourth, "rev-parse", "main^{tree}")


@pytest.mark.unfenced("its agents hand over through files outside their worktrees")
@pytest.mark.slow
def test_eight_instances_two_workers_and_a_killed_one_taken_over(tmp_path: Path) -> None:
    origin, coord, gp, (a, b) = setup_remote(tmp_path, 2)
    # A worker started with HANG set commits once, then hangs in its agent.
    agent = ["sh", "-c", 'echo "good $GIT_PARALLEL_INSTANCE" > out.txt && git add out.txt && '
                         'git commit -qm "first of $GIT_PARALLEL_INSTANCE" && '
                         'if [ -n "$HANG" ]; then sleep 120; fi']
    run_id = spawn_published(gp, "fx", 8, agent)
    slow = start_worker(a, tmp_path, "wa", "--once", "--lease", "4", env={"HANG": "1"})
    fast = start_worker(b, tmp_path, "wb", "--wait", "--lease", "4")
    # Wait until A's claim carries its first commit (a renewal pushed it).
    deadline = time.monotonic() + 120
    held = work = None
    while time.monotonic() < deadline and work is None:
        for ref in remote_refs(origin, f"refs/parallel/claims/{run_id}/"):
            last = claim_chain(origin, ref)[-1]
            if last["worker"] == "wa" and last.get("work"):
                held, work = ref, last["work"]
        time.sleep(0.2)
    assert work is not None, "worker A never pushed its first commit"
    assert slow.poll() is None
    os.kill(slow.pid, signal.SIGKILL)
    slow.wait()
    result = finish(fast)
    assert result["exit"] == 0, result
    ids = sorted((row["id"] for row in result["instances"]), key=int)
    assert ids == [str(k) for k in range(1, 9)]  # B did the seven and the one A left
    held_id = held.rsplit("/", 1)[1]
    took = next(row for row in result["instances"] if row["id"] == held_id)
    assert took["takeover"]["worker"] == "wa" and took["takeover"]["work"] == work
    for ref in remote_refs(origin, f"refs/parallel/claims/{run_id}/"):
        chain = claim_chain(origin, ref)
        gens = {c["generation"]: {c["worker"]} for c in chain}
        for c in chain:
            gens[c["generation"]].add(c["worker"])
        assert all(len(w) == 1 for w in gens.values())  # one worker per generation: never shared
        assert len(gens) == (2 if ref == held else 1)
        assert chain[-1]["state"] == "done" and chain[-1]["worker"] == "wb"
    # A's first commit is still reachable on the remote, from the claim.
    git(origin, "merge-base", "--is-ancestor", work, held)
    assert "first of" in git(origin, "log", "-1", "--format=%s", work)
    collected = gp.json("collect", "fx")
    row = next(r for r in collected["instances"] if r["id"] == held_id)
    assert row["takeovers"][0]["worker"] == "wa" and row["status"] == "succeeded"
    assert collected["pending"] == []


@pytest.mark.slow
def test_a_forged_passing_pack_never_lands(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    bad_agent = ["sh", "-c", 'echo "broken" > out.txt']
    run_id = spawn_published(gp, "fx", 1, bad_agent)
    honest = finish(start_worker(w, tmp_path, "w1", "--once", "--lease", "30"))
    assert honest["exit"] == 0 and honest["instances"][0]["verdict"] == "fail"
    # The worker now forges: a pack that says pass, and a claim naming it.
    ev_ref, claim = f"refs/parallel/evidence/{run_id}/1/0", f"refs/parallel/claims/{run_id}/1"
    git(w, "fetch", "-q", "origin", f"+{ev_ref}:{ev_ref}", f"+{claim}:{claim}")
    pack = json.loads(git(w, "show", f"{ev_ref}:pack.json"))
    pack["verdict"] = "pass"
    for g in pack["gates"]:
        g.update(passed=True, exit_code=0)
    forged = (json.dumps(pack, sort_keys=True, indent=2) + "\n").encode()
    import hashlib

    state = json.loads(git(w, "show", f"{claim}:claim.json"))
    state["result"].update(verdict="pass", evidence_sha256=hashlib.sha256(forged).hexdigest())
    ev_commit = _commit_files(w, {"pack.json": forged}, [pack["commit"]])
    claim_commit = _commit_files(w, {"claim.json": (json.dumps(state, indent=2) + "\n").encode()},
                                 [git(w, "rev-parse", claim)])
    git(w, "push", "-q", "--force", "origin", f"{ev_commit}:{ev_ref}", f"{claim_commit}:{claim}")

    collected = gp.json("collect", "fx")
    assert collected["instances"][0]["verdict"] == "pass"  # the forged pack is consistent, so it is bound
    gp("pick", "fx")
    before = git(coord, "rev-parse", "main")
    refused = gp.json("merge", "fx", code=1)
    assert refused["code"] == "PARALLEL_EVIDENCE_MISMATCH"  # the landing was re-proved and failed
    assert git(coord, "rev-parse", "main") == before
    assert git(origin, "rev-parse", "main") == before


def _commit_files(repo: Path, files: dict[str, bytes], parents: list[str]) -> str:
    index = repo / ".git" / "forge-index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index))
    for name, data in files.items():
        blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
                              check=True).stdout.decode().strip()
        subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{name}"], cwd=repo, env=env,
                       check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo, env=env, capture_output=True, check=True).stdout.decode().strip()
    index.unlink()
    args = [x for p in parents for x in ("-p", p)]
    return git(repo, "commit-tree", tree, *args, input="forged\n")


# -- claims, leases, refusals (in one process where no agent runs) -------------------------------
def _open(path: Path) -> Any:
    from gitflow_parallel.state.project import Project

    return Project.open(path)


def _targets(project: Any, task: str = "fx") -> list[Any]:
    from gitflow_parallel.commands import worker

    return worker.survey(project, "origin", task)


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_a_claim_is_exclusive_and_an_expired_one_is_taken_over(tmp_path: Path) -> None:
    from gitflow_parallel.state import transport as R
    from gitflow_parallel.commands import worker

    origin, coord, gp, (a, b) = setup_remote(tmp_path, 2)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    pa, pb = _open(a), _open(b)
    ta, tb = _targets(pa)[0], _targets(pb)[0]
    assert ta.state == tb.state == "free"
    first = worker.Lease(pa, "origin", ta, "wa", lease_s=1.0)
    second = worker.Lease(pb, "origin", tb, "wb", lease_s=1.0)
    assert first.acquire() is True
    assert second.acquire() is False  # the ref exists: the empty lease refused it
    seen = _targets(pb)[0]
    assert seen.state == "held" and seen.claim["worker"] == "wa"
    time.sleep(1.3)
    expired = _targets(pb)[0]
    assert expired.state == "expired"
    taker = worker.Lease(pb, "origin", expired, "wb", lease_s=30.0)
    assert taker.acquire() is True
    chain = claim_chain(origin, R.claim_ref(run_id, "1"))
    assert [c["worker"] for c in chain] == ["wa", "wb"]
    assert chain[1]["takeover"]["worker"] == "wa" and chain[1]["takeover"]["claim"] == chain[0]["commit"]
    # The first holder's renewal is now refused: it has lost the claim.
    first.renew(pa.repo, "parallel/fx/1")
    assert first.lost is True
    assert claim_chain(origin, R.claim_ref(run_id, "1"))[-1]["worker"] == "wb"


@pytest.mark.slow  # a whole flow of about 2 s; the default tier keeps under 150 s
def test_refusals_change_nothing(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    gp("spawn", "fx", "-n", "1")
    before = snapshot(coord)
    err = gp.json("publish", "fx", "--remote", "nowhere", code=1)
    assert err["code"] == "PARALLEL_REMOTE_NOT_FOUND"
    err = gp.json("collect", "fx", code=1)
    assert err["code"] == "PARALLEL_REMOTE_NOT_FOUND" and "never published" in err["message"]
    assert snapshot(coord) == before
    gp("run", "fx", "--remote", "origin", "--", *GOOD_AGENT)
    # Run here too, and the workers' deliveries would race it.
    refused = json.loads(gp("run", "fx", "--json", "--", "true", code=1).stdout)
    assert refused["code"] == "PARALLEL_BRANCH_TERMINAL" and "for workers" in refused["message"]
    assert gp("run", "fx", "--remote", "origin", "--jobs", "2", "--", "true", code=2)
    # A worker in the coordinator's own clone would collide with its branches.
    err = gp.json("worker", "--remote", "origin", "--once", code=1)
    assert err["code"] == "PARALLEL_RUN_EXISTS"
    assert gp.json("collect", "fx")["instances"][0]["claim_state"] == "released"  # it gave the claim back


def test_a_manifest_whose_config_was_weakened_is_refused(tmp_path: Path) -> None:
    from gitflow_parallel.state import transport as R
    from gitflow_parallel.config import config_sha256
    from gitflow_parallel.state.store import dump

    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    project = _open(coord)
    record = project.store.load("fx")
    record["config"]["gates"] = []
    record["config_sha256"] = config_sha256(record["config"])  # a consistent, weakened record
    assert "gates: []" in dump(record)
    forged = R.manifest_commit(project, record)
    git(coord, "push", "-q", "--force", "origin", f"{forged}:refs/parallel/runs/{run_id}")
    out = finish(start_worker(w, tmp_path, "w1", "--once"))
    assert out["exit"] == 1 and out["code"] == "PARALLEL_RECORD_INVALID" and "config.gates" in out["message"]
    assert remote_refs(origin, "refs/heads/parallel/fx/")["refs/heads/parallel/fx/1"] == git(coord, "rev-parse", "main")
    assert remote_refs(origin, f"refs/parallel/evidence/{run_id}/") == {}
    assert claim_chain(origin, R.claim_ref(run_id, "1"))[-1]["state"] == "released"


@pytest.mark.slow  # over 2 s: the default tier keeps under 150 s; CI runs it after
def test_worker_with_index_takes_that_instance_and_nothing_else(tmp_path: Path) -> None:
    origin, coord, gp, (w,) = setup_remote(tmp_path, 1)
    run_id = spawn_published(gp, "fx", 3, GOOD_AGENT)
    out = finish(start_worker(w, tmp_path, "k8s-1", "--task", "fx", "--index", "1"))
    assert out["exit"] == 0 and [r["id"] for r in out["instances"]] == ["2"]
    assert list(remote_refs(origin, f"refs/parallel/claims/{run_id}/")) == [f"refs/parallel/claims/{run_id}/2"]
    again = finish(start_worker(w, tmp_path, "k8s-1b", "--task", "fx", "--index", "1"))
    assert again["exit"] == 0 and again["instances"] == []  # done already: a restarted pod does nothing
    bad = finish(start_worker(w, tmp_path, "k8s-9", "--task", "fx", "--index", "7"))
    assert bad["exit"] == 1 and bad["code"] == "PARALLEL_BRANCH_NOT_FOUND"
    # The worker's clone keeps no worktree or branch of it; the work is on the remote.
    assert git(w, "branch", "--list", "parallel/*") == ""
    # Only the clone's own checkout and its reusable scratch pool (kept from run to run) remain.
    others = [l for l in git(w, "worktree", "list").splitlines()[1:] if "/scratch+" not in l]
    assert others == []


@pytest.mark.parametrize("broken, state, said", [
    ({"attempt": 0}, "expired", "claim of stranger expired (it names no lease time; a worker may take it over)"),
    ({"attempt": None, "expires_epoch": 4e9}, "free", "unclaimed"),
])
def test_collect_reads_a_broken_claim_as_one_anyone_may_take(tmp_path: Path, broken: dict[str, Any], state: str,
                                                             said: str) -> None:
    """A claim on the shared remote is written by other machines: one with no
    expiry, or no attempt number (a foreign or broken worker's), is a claim
    anyone may take over, and ``collect`` says so instead of failing on it."""
    from gitflow_parallel.state import transport as R

    origin, coord, gp, _ = setup_remote(tmp_path, 0)
    run_id = spawn_published(gp, "fx", 1, GOOD_AGENT)
    claim = {"v": R.CLAIM_VERSION, "run_id": run_id, "task": "fx", "instance": "1", "state": "held",
             "worker": "stranger", **broken}
    blob = git(coord, "hash-object", "-w", "--stdin", input=json.dumps(claim))
    tree = git(coord, "mktree", input=f"100644 blob {blob}\tclaim.json\n")
    commit = git(coord, "commit-tree", tree, "-m", "a claim with no lease time")
    git(coord, "push", "-q", "origin", f"{commit}:{R.claim_ref(run_id, '1')}")
    out = gp.json("collect", "fx")
    row = out["instances"][0]
    assert (row["claim_state"], row["claim"]) == (state, said)
