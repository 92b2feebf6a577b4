"""Landing the winners on the base branch.

The merge is computed in memory with pygit2 and never checks the winner out
in the main worktree.  For each track in order: a fast-forward when the
result so far is an ancestor of the winner, nothing when the winner is
already contained, else a merge commit written without moving any ref.
Conflicting hunks are resolved by ``merge.policy``: ``first_pass_wins``
keeps the base side (which landed first), ``last_pass_wins`` and its alias
``winner_takes_all`` take the winner's side, ``manual`` never merges.

The base ref then moves **once**, by compare-and-swap against the oid read at
the start of the attempt.  If it moved meanwhile, everything is recomputed
(up to ``merge.retries`` times), so a concurrent commit on the base is never
overwritten.  With ``merge.verify``, a merged tree that differs from every
tree the gates saw is checked again in a temporary worktree before the base
moves.  Every refusal happens before the base moves, so a refused merge
changes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import faults, notes
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import atomic_write, canonical_json, utcnow
from gitflow_parallel.gitrepo import Repo
from gitflow_parallel.names import check_name
from gitflow_parallel.project import Project
from gitflow_parallel.selection import pick_note, winner_check, winner_instances

BASE_SIDE_POLICIES = ("first_pass_wins",)
WINNER_SIDE_POLICIES = ("last_pass_wins", "winner_takes_all")


# -- the base branch's worktree ------------------------------------------------------
def base_worktree(repo: Repo, base_ref: str) -> Path | None:
    """The worktree that has ``base_ref`` checked out, if any."""
    candidates: list[Path] = []
    if repo.main_workdir is not None:
        candidates.append(repo.main_workdir)
    for name in repo.main.list_worktrees():
        try:
            candidates.append(Path(repo.main.lookup_worktree(name).path))
        except (pygit2.GitError, KeyError):
            continue
    for path in candidates:
        head = _head_ref(path)
        if head == base_ref:
            return path
    return None


def _head_ref(path: Path) -> str | None:
    gitfile = path / ".git"
    if gitfile.is_dir():
        head = gitfile / "HEAD"
    elif gitfile.is_file():
        text = gitfile.read_text().strip()
        if not text.startswith("gitdir:"):
            return None
        gitdir = Path(text[len("gitdir:"):].strip())
        if not gitdir.is_absolute():
            gitdir = (path / gitdir).resolve()
        head = gitdir / "HEAD"
    else:
        return None
    try:
        content = head.read_text().strip()
    except OSError:
        return None
    return content[len("ref: "):] if content.startswith("ref: ") else None


def _dirty(path: Path, new_tree: pygit2.Tree | None) -> list[str]:
    """Changes in the base worktree that an update of it would endanger:
    every tracked change, and untracked files the new tip would overwrite."""
    wt = pygit2.Repository(str(path))
    out = []
    for rel, flags in wt.status(untracked_files="all", ignored=False).items():
        if flags == pygit2.GIT_STATUS_CURRENT or flags & pygit2.GIT_STATUS_IGNORED:
            continue
        if flags == pygit2.GIT_STATUS_WT_NEW:
            # An untracked file is in the way if the new tip has that path, or
            # a file where one of its parent folders is.
            if new_tree is None or not _in_the_way(new_tree, rel.rstrip("/")):
                continue
        out.append(rel)
    return sorted(out)


def _in_the_way(tree: pygit2.Tree, rel: str) -> bool:
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        try:
            entry = tree["/".join(parts[:i])]
        except KeyError:
            return False
        if i < len(parts) and entry.type_str != "tree":
            return True  # a file of the new tip where our folder is
    return True


def _refuse_dirty(path: Path, dirty: list[str]) -> ParallelError:
    shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
    return ParallelError(
        E.BASE_DIRTY,
        f"the base branch is checked out in {path}, which has uncommitted changes: {shown}",
        hint="commit or stash them there (git stash -u), then run `git parallel merge` again; nothing was changed",
    )


# -- computing the landing --------------------------------------------------------------
def _merge_one(repo: pygit2.Repository, ours: pygit2.Oid, theirs: pygit2.Oid, policy: str,
               message: str, sig: pygit2.Signature) -> tuple[pygit2.Oid, list[str]]:
    """A merge commit of ``theirs`` into ``ours`` resolved by ``policy``;
    returns its oid and the paths the policy decided."""
    plain = repo.merge_commits(ours, theirs)
    conflicted = sorted({(a or o or t).path for a, o, t in plain.conflicts}) if plain.conflicts else []
    if conflicted:
        if policy == "manual":
            raise AssertionError("manual policy never reaches the merge")
        favor = pygit2.enums.MergeFavor.OURS if policy in BASE_SIDE_POLICIES else pygit2.enums.MergeFavor.THEIRS
        index = repo.merge_commits(ours, theirs, favor=favor)
        if index.conflicts:
            # Conflicts no hunk-level favor can settle (modify/delete, add/add of
            # binaries, modes): take the chosen side's whole entry.
            for ancestor, our, their in list(index.conflicts):
                side = our if policy in BASE_SIDE_POLICIES else their
                path = (ancestor or our or their).path
                del index.conflicts[path]
                if side is None:
                    try:
                        index.remove(path)
                    except (KeyError, OSError, pygit2.GitError):
                        pass
                else:
                    index.add(pygit2.IndexEntry(side.path, side.id, side.mode))
    else:
        index = plain
    collision = _file_dir_collision(index)
    if collision:
        # write_tree would keep one of the two silently, dropping the other
        # side's work: refuse instead.
        raise ParallelError(
            E.MERGE_CONFLICT,
            f"{collision} is a file on one side and a folder on the other; no policy can keep both",
            hint="nothing moved; resolve it by hand (git merge) or make the sides agree and run the instance again",
        )
    tree = index.write_tree(repo)
    commit = repo.create_commit(None, sig, sig, message, tree, [ours, theirs])
    return commit, conflicted


def _file_dir_collision(index: pygit2.Index) -> str | None:
    """A path that is both a file and a folder in ``index``, if any."""
    paths = sorted(entry.path for entry in index)
    files = set(paths)
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in files:
                return prefix
    return None


def compute(project: Project, record: dict[str, Any], start: str,
            winners: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """The commit the base would move to from ``start``, track by track."""
    repo = project.repo.git
    policy = record["config"]["merge"]["policy"]
    sig = project.repo.signature()
    current = pygit2.Oid(hex=start)
    steps, resolved = [], []
    for pick, inst in winners:
        w = pygit2.Oid(hex=pick["winner"]["commit"])
        if current == w or repo.descendant_of(current, w):
            steps.append({"track": pick["track"], "winner": inst["id"], "method": "already-contained"})
            continue
        if repo.descendant_of(w, current):
            current = w
            steps.append({"track": pick["track"], "winner": inst["id"], "method": "fast-forward", "commit": str(w)})
            continue
        message = (f"git-parallel: merge {record['task']} track {pick['track']} winner {inst['id']}\n\n"
                   f"Run: {record['run_id']}\nWinner: {inst['branch']} at {w}\n"
                   f"Policy: {policy}\n")
        current, files = _merge_one(repo, current, w, policy, message, sig)
        resolved += [{"track": pick["track"], "path": f} for f in files]
        steps.append({"track": pick["track"], "winner": inst["id"], "method": "merge", "commit": str(current),
                      "resolved_files": files})
    return {"commit": str(current), "steps": steps, "resolved_files": resolved}


def _verify(project: Project, record: dict[str, Any], landing: dict[str, Any],
            winners: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    """Re-run the enforced gates on the landing tree where no gate saw it."""
    from gitflow_parallel import gates

    tree = project.repo.tree_of(landing["commit"])
    results = []
    for pick, _ in winners:
        if pick["winner"]["tree"] == tree:
            continue
        outcome = gates.verify_tree(project, record, pick["track"], landing["commit"])
        results.append({"track": pick["track"], "passed": outcome["passed"], "gates": outcome["gates"]})
        if not outcome["passed"]:
            failed = [g["name"] for g in outcome["gates"] if not g.get("passed") and g.get("mode") == "enforced"]
            raise ParallelError(
                E.MERGE_CONFLICT,
                f"the merged tree {tree[:12]} fails enforced gate(s) {', '.join(failed) or '?'} of track "
                f"{pick['track']}, although the winner passed alone (a semantic conflict)",
                hint="nothing moved; rebase the work onto the new base and run it again "
                     "(git parallel retry / run / check / pick), or merge by hand",
            )
    return results


class _MergedMeanwhile(Exception):
    """Another merge of the same run landed while this one computed."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__(record["run_id"])
        self.record = record


def _land(project: Project, record: dict[str, Any], winners: list[tuple[dict[str, Any], dict[str, Any]]],
          worktree: Path | None, finish: Any) -> Any:
    """Compute, verify and publish the landing; retried while the base moves.

    Computing and verifying (which runs gates, possibly for minutes) happen
    outside the project lock, so other commands (a ``run`` of another task
    recording its agents) are never held up.  The lock is taken only to
    publish: the record must still be at the revision read, the base
    worktree still clean, the base ref still at the oid read; then the intent
    is written, the ref moved by compare-and-swap, and ``finish`` records the
    result before the lock is let go."""
    repo = project.repo
    store = project.store
    task = record["task"]
    cfg = record["config"]["merge"]
    base_ref = record["base"]["ref"]
    deadline = time.monotonic() + float(cfg["timeout"])
    attempts = 0
    history: list[dict[str, Any]] = []
    while True:
        attempts += 1
        old = repo.ref_target(base_ref)
        if old is None:
            raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                                hint="recreate it, or abort the run")
        _check_clean(repo, worktree, None)
        landing = compute(project, record, old, winners)
        new_tree = repo.git.get(landing["commit"]).tree
        _check_clean(repo, worktree, new_tree)
        verified = _verify(project, record, landing, winners) if cfg["verify"] else []
        if time.monotonic() > deadline:
            raise ParallelError(E.MERGE_TIMEOUT, f"the merge of {task} took longer than merge.timeout "
                                f"({cfg['timeout']}s); nothing moved",
                                hint="raise merge.timeout for new runs, or make the gates faster; then merge again")
        with store.lock():
            current = store.load(task)
            if current["run_revision"] != record["run_revision"] and current["status"] == "merged" \
                    and current["run_id"] == record["run_id"]:
                # A concurrent merge of this run landed first: what was asked
                # is done, so say what landed, as a merge run after it would.
                raise _MergedMeanwhile(current)
            if current["run_revision"] != record["run_revision"]:
                raise ParallelError(
                    E.RUN_REVISION_CONFLICT,
                    f"run {record['run_id']} changed while it was being merged (revision "
                    f"{record['run_revision']} → {current['run_revision']}); nothing moved",
                    hint=f"see `git parallel status {task}`, then `git parallel merge {task}` again",
                )
            _check_clean(repo, worktree, None)
            _check_clean(repo, worktree, new_tree)
            moved = False
            try:
                ref = repo.git.references[base_ref]
            except KeyError:
                raise ParallelError(E.BASE_NOT_FOUND, f"the base branch {base_ref} no longer exists",
                                    hint="recreate it, or abort the run") from None
            if str(ref.target) == old:
                if landing["commit"] == old:
                    moved = True  # everything already on the base
                else:
                    # Say what is about to happen before it happens, so that a
                    # crash right after the ref moves leaves recover enough to finish.
                    intent = {"previous": old, "landing": landing["commit"], "base_ref": base_ref,
                              "worktree": str(worktree) if worktree else None, "steps": landing["steps"],
                              "resolved_files": landing["resolved_files"], "written_at": utcnow()}
                    atomic_write(intent_path(project, record), canonical_json(intent))
                    try:
                        ref.set_target(pygit2.Oid(hex=landing["commit"]),
                                       f"git-parallel: land {task} ({record['run_id']})")
                        moved = True
                    except (pygit2.GitError, ValueError, OSError):
                        clear_intent(project, record)
            if moved:
                return finish(landing, old, attempts, history, verified)
        history.append({"attempt": attempts, "base_was": old, "computed": landing["commit"]})
        if attempts > int(cfg["retries"]):
            raise ParallelError(
                E.MERGE_CONFLICT,
                f"the base {base_ref} kept moving while merging ({attempts} attempts); nothing moved",
                hint="wait for the other writer to finish, then run `git parallel merge` again",
            )


def _check_clean(repo: Repo, worktree: Path | None, new_tree: pygit2.Tree | None) -> None:
    if worktree is not None:
        dirty = _dirty(worktree, new_tree)
        if dirty:
            raise _refuse_dirty(worktree, dirty)


# -- the intent file ---------------------------------------------------------------------
def intent_path(project: Project, record: dict[str, Any]) -> Path:
    """``parallel/merges/<run_id>.intent.json``: written just before the base
    ref moves and removed once the record says merged (or the merge is
    refused), so a crash in between tells recover the old and new oid."""
    return project.repo.parallel_dir / "merges" / f"{record['run_id']}.intent.json"


def clear_intent(project: Project, record: dict[str, Any]) -> None:
    try:
        intent_path(project, record).unlink()
    except FileNotFoundError:
        pass


# -- the verb --------------------------------------------------------------------------
def merge(project: Project, task: str) -> dict[str, Any]:
    check_name(task, "task")
    store = project.store
    repo = project.repo
    with store.lock():
        record = store.load(task)
        if record["status"] == "merged":
            return {"already": True, "run_id": record["run_id"], "merge": record["merge"], "cleanup": None}
        if record["status"] == "aborted":
            raise ParallelError(E.BRANCH_TERMINAL, f"run {record['run_id']} of {task!r} was aborted",
                                hint=f"spawn a new run with `git parallel spawn {task}`")
        if intent_path(project, record).exists():
            # An earlier merge of this run died between writing its intent and
            # recording the result: the base may already have moved, its
            # checkout may still show the old tree (which would read as
            # "uncommitted changes" here), and the intent is what tells
            # recover which.  Never overwrite or clear it from here.
            raise ParallelError(
                E.MERGE_CONFLICT,
                f"an earlier `git parallel merge` of run {record['run_id']} was interrupted "
                f"({intent_path(project, record)} is still there); nothing was changed",
                hint=f"run `git parallel recover {task}`, which records or discards that merge, then merge again if needed",
            )
        winners = winner_instances(project, record)
        for pick, inst in winners:
            ok, code, why = winner_check(project, record, inst, project.tip(inst) or "")
            if not ok:
                raise ParallelError(code or E.EVIDENCE_MISMATCH, f"cannot land track {pick['track']}: {why}",
                                    hint=f"run `git parallel check {task}`; a changed winner needs a new run or retry")
        cfg = record["config"]["merge"]
        base_ref = record["base"]["ref"]
        if cfg["policy"] == "manual":
            lines = [f"git switch {base_ref[len('refs/heads/'):]}"] + [
                f"git merge --no-ff {inst['branch']}" for _, inst in winners]
            raise ParallelError(
                E.MANUAL_HALT,
                "merge.policy is manual: git parallel does not merge; run:\n  " + "\n  ".join(lines),
                hint="the installed hooks (`git parallel hooks install`) gate that merge; "
                     "then `git parallel recover " + task + "` records it",
                commands=lines,
            )
        worktree = base_worktree(repo, base_ref)

    def finish(landing: dict[str, Any], old: str, attempts: int, history: list[dict[str, Any]],
               verified: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Under the lock, right after the base moved: its checkout, the record."""
        faults.point("merge.after_ref")
        worktree_error = None
        if worktree is not None and landing["commit"] != old:
            proc = repo.run_git(["read-tree", "-m", "-u", old, landing["commit"]], cwd=worktree, check=False)
            if proc.returncode != 0:
                worktree_error = proc.stderr.decode(errors="replace").strip()
        faults.point("merge.after_worktree")
        merge_record = {
            "landed": landing["commit"], "previous": old, "base_ref": base_ref, "steps": landing["steps"],
            "method": ("fast-forward" if all(s["method"] != "merge" for s in landing["steps"]) else "merge"),
            "resolved_files": landing["resolved_files"], "policy": cfg["policy"], "attempts": attempts,
            "retried": history, "verified": verified, "worktree": str(worktree) if worktree else None,
            "worktree_error": worktree_error, "merged_at": utcnow(),
        }

        def apply(rec: dict[str, Any]) -> None:
            rec["status"] = "merged"
            rec["merge"] = merge_record

        updated, _ = store.update(task, apply)
        clear_intent(project, updated)
        return updated, merge_record

    try:
        record, merge_record = _land(project, record, winners, worktree, finish)
    except _MergedMeanwhile as done:
        return {"already": True, "run_id": done.record["run_id"], "merge": done.record["merge"], "cleanup": None,
                "raced": True}
    landing = {"commit": merge_record["landed"]}
    old = merge_record["previous"]
    entries = [(landing["commit"], pick_note(p)) for p, _ in winners]
    entries.append((landing["commit"], notes.line("merge", record["run_id"], task=task, landed=landing["commit"],
                                                  previous=old, base_ref=base_ref, method=merge_record["method"],
                                                  policy=cfg["policy"], merged_at=merge_record["merged_at"])))
    notes_error = project.mirror_notes(record, entries, "merge")
    from gitflow_parallel import lifecycle

    try:
        cleaned = lifecycle.cleanup(project, task, keep_losers=bool(record["config"]["keep_losers"]))
        cleanup_error = None
    except ParallelError as exc:
        cleaned, cleanup_error = None, {"code": exc.code, "message": exc.message, "hint": exc.hint}
    return {"already": False, "run_id": record["run_id"], "merge": merge_record,
            "cleanup": cleaned and {"removed": cleaned["removed"], "kept": cleaned["kept"]},
            "cleanup_error": cleanup_error, "notes_error": notes_error}
