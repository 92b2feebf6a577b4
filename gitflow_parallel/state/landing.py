"""The landing computed in memory: each winner merged onto the base with
pygit2 (or a fast-forward), conflicts described hunk by hunk, the folder and
file-or-folder clashes git would refuse, and the landing commit's message.
Nothing here moves a ref: ``commands/merge`` does, by compare-and-swap."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, TypedDict

import pygit2

from gitflow_parallel import errors as E
from gitflow_parallel import provenance
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.git.repo import Identity
from gitflow_parallel.model import InstanceRecord, LandingStep, PickRecord, RunRecord, Winner
from gitflow_parallel.state.project import Project


BASE_SIDE_POLICIES = ("first_pass_wins",)


class Landing(TypedDict):
    """What the base would move to (``commit``), how each track got there,
    and the conflicts ``merge.policy`` decided (one entry per file)."""
    commit: str
    steps: list[LandingStep]
    resolved_files: list[dict[str, Any]]


def _landing_paths(repo: pygit2.Repository, old_tree: pygit2.Tree, new_tree: pygit2.Tree) -> set[str]:
    """Every path the landing changes, with the folders that hold them."""
    out: set[str] = set()
    for delta in old_tree.diff_to_tree(new_tree).deltas:
        for rel in {delta.old_file.path, delta.new_file.path}:
            parts = rel.split("/")
            out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def dirty_paths(path: Path, new_tree: pygit2.Tree | None, old_tree: pygit2.Tree | None = None) -> list[str]:
    """Changes in the base worktree that an update of it would endanger:
    tracked changes to paths the landing changes (as ``git merge`` does,
    changes elsewhere stay where they are), and untracked files the new tip
    would overwrite.  Without the trees, every tracked change counts."""
    wt = pygit2.Repository(str(path))
    touched = _landing_paths(wt, old_tree, new_tree) if new_tree is not None and old_tree is not None else None
    out = []
    for rel, flags in wt.status(untracked_files="all", ignored=False).items():
        if flags == pygit2.GIT_STATUS_CURRENT or flags & pygit2.GIT_STATUS_IGNORED:
            continue
        if touched is not None and flags != pygit2.GIT_STATUS_WT_NEW and rel.rstrip("/") not in touched:
            continue  # the landing leaves this path alone: so does the update of the worktree
        if flags == pygit2.GIT_STATUS_WT_NEW:
            # An untracked file is in the way if the new tip has that path, or
            # a file where one of its parent folders is.
            if new_tree is None or not _in_the_way(new_tree, rel.rstrip("/")):
                continue
        out.append(rel)
    if new_tree is not None and old_tree is not None:
        out += [f"{rel} (ignored)" for rel in _ignored_in_the_way(wt, Path(path), old_tree, new_tree)]
    return sorted(out)


def _ignored_in_the_way(wt: pygit2.Repository, root: Path, old_tree: pygit2.Tree,
                        new_tree: pygit2.Tree) -> list[str]:
    """Ignored files of the checkout that the update would overwrite or
    remove: where the landing adds a path, an untracked ignored file there
    or in place of a folder it needs (``.env.local``), and the ignored files
    in a folder there where it adds a file (git removes the folder, with
    them).  Git treats ignored files as expendable; they are the user's, so
    they count as in the way."""
    out: set[str] = set()
    for delta in old_tree.diff_to_tree(new_tree).deltas:
        if delta.status == pygit2.enums.DeltaStatus.ADDED:
            out.update(_ignored_at(wt, root, old_tree, delta.new_file.path))
    return sorted(out)


def ignored_in_checkout(path: Path, old: str, new: str) -> list[str]:
    """The ignored files of the checkout at ``path`` that bringing it from
    commit ``old`` to ``new`` would overwrite or remove, each named
    ``<path> (ignored)`` (for recover, finishing an interrupted landing)."""
    wt = pygit2.Repository(str(path))
    old_tree, new_tree = (wt[oid].peel(pygit2.Tree) for oid in (old, new))
    return [f"{rel} (ignored)" for rel in _ignored_in_the_way(wt, Path(path), old_tree, new_tree)]


def _ignored_at(wt: pygit2.Repository, root: Path, old_tree: pygit2.Tree, added: str) -> list[str]:
    parts = added.split("/")
    for i in range(1, len(parts) + 1):
        rel = "/".join(parts[:i])
        on_disk = root / rel
        if not os.path.lexists(on_disk):
            return []
        folder = on_disk.is_dir() and not on_disk.is_symlink()
        if folder and i < len(parts):
            continue  # a folder on the way down: look further
        if folder:
            return _ignored_under(wt, root, old_tree, rel)
        return [rel] if not _tracked(old_tree, rel) and wt.path_is_ignored(rel) else []
    return []


def _ignored_under(wt: pygit2.Repository, root: Path, old_tree: pygit2.Tree, folder: str,
                   limit: int = 100) -> list[str]:
    """The untracked ignored files in ``folder`` (links not followed; the
    first ``limit``: enough to name them)."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root / folder):
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in sorted(filenames + links):
            rel = Path(dirpath, name).relative_to(root).as_posix()
            if not _tracked(old_tree, rel) and wt.path_is_ignored(rel):
                out.append(rel)
                if len(out) >= limit:
                    return out
    return out


def _tracked(tree: pygit2.Tree, rel: str) -> bool:
    try:
        tree[rel]
    except KeyError:
        return False
    return True


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


def refuse_dirty(path: Path, dirty: list[str]) -> ParallelError:
    shown = ", ".join(dirty[:10]) + (" …" if len(dirty) > 10 else "")
    return ParallelError(
        E.BASE_DIRTY,
        f"the base branch is checked out in {path}, which has uncommitted changes the landing would "
        f"overwrite: {shown}",
        hint="commit or stash them there (git stash -u; an ignored file: move it aside, or `git stash -u --all`), "
             "then run `git parallel merge` again; nothing was changed",
    )


# -- computing the landing --------------------------------------------------------------
def _lines(repo: pygit2.Repository, entry: pygit2.IndexEntry | None) -> list[bytes] | None:
    """The lines of a conflict side, or None when it has no text (absent, binary)."""
    if entry is None:
        return None
    data = repo.odb.read(entry.id)[1]
    return None if b"\0" in data[:8000] else data.splitlines(keepends=True)


def _changed_regions(old: list[bytes], new: list[bytes]) -> list[tuple[int, int, int, int]]:
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def conflict_hunks(ancestor: list[bytes], ours: list[bytes], theirs: list[bytes]) -> list[dict[str, Any]]:
    """Where the two sides changed the same (or touching) lines of the
    ancestor, differently: per hunk the 1-based line ranges in the base's
    and in the winner's file, and how many lines each side wrote there."""
    regions = sorted([(i1, i2, j1, j2, "ours") for i1, i2, j1, j2 in _changed_regions(ancestor, ours)]
                     + [(i1, i2, j1, j2, "theirs") for i1, i2, j1, j2 in _changed_regions(ancestor, theirs)])
    groups: list[list[tuple[int, int, int, int, str]]] = []
    for region in regions:
        if groups and region[0] <= max(r[1] for r in groups[-1]):
            groups[-1].append(region)
        else:
            groups.append([region])
    hunks = []
    for group in groups:
        sides = {r[4] for r in group}
        ours_part = [ours[j1:j2] for i1, i2, j1, j2, side in group if side == "ours"]
        theirs_part = [theirs[j1:j2] for i1, i2, j1, j2, side in group if side == "theirs"]
        if sides != {"ours", "theirs"} or ours_part == theirs_part:
            continue  # one side only, or both made the same change: git merges it
        hunk: dict[str, Any] = {}
        for side in ("ours", "theirs"):
            mine = [r for r in group if r[4] == side]
            lo, hi = min(r[2] for r in mine), max(r[3] for r in mine)
            hunk["base_lines" if side == "ours" else "winner_lines"] = [lo + 1, max(lo + 1, hi)]
            hunk["base_written" if side == "ours" else "winner_written"] = sum(r[3] - r[2] for r in mine)
        hunks.append(hunk)
    return hunks


def _folder_clash(tree: pygit2.Tree, path: str) -> bool:
    """Is ``path`` a folder in ``tree``, or under a file of it?"""
    parts = path.split("/")
    for k in range(1, len(parts) + 1):
        try:
            entry = tree["/".join(parts[:k])]
        except KeyError:
            return False
        if (k < len(parts)) != (entry.type_str == "tree"):
            return True
    return False


def _conflicts(repo: pygit2.Repository, index: pygit2.Index, ours_tree: pygit2.Tree,
               theirs_tree: pygit2.Tree) -> list[dict[str, Any]]:
    """Every conflicted path with its hunks (text) or what kind of conflict it is."""
    out = []
    for ancestor, ours, theirs in index.conflicts:
        path = (ancestor or ours or theirs).path
        texts = [_lines(repo, e) for e in (ancestor, ours, theirs)]
        hunks: list[dict[str, Any]] = []
        if (ours is None and _folder_clash(ours_tree, path)) or (theirs is None and _folder_clash(theirs_tree, path)):
            kind = "a file on one side, a folder on the other"
        elif ours is None or theirs is None:
            kind = "deleted by the base" if ours is None else "deleted by the winner"
        elif texts[1] is None or texts[2] is None:
            kind = "binary"
        else:
            kind, hunks = "text", conflict_hunks(texts[0] or [], texts[1], texts[2])
        out.append({"path": path, "kind": kind, "hunks": hunks,
                    "winner_lines_dropped": sum(h["winner_written"] for h in hunks),
                    "base_lines_dropped": sum(h["base_written"] for h in hunks)})
    return sorted(out, key=lambda c: c["path"])


def conflicting_paths(repo: pygit2.Repository, ours: str, theirs: str) -> list[str]:
    """The paths a merge of ``theirs`` into ``ours`` would leave conflicted."""
    index = repo.merge_commits(pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs))
    return sorted({(a or o or t).path for a, o, t in index.conflicts}) if index.conflicts else []


def _describe_conflicts(conflicts: list[dict[str, Any]]) -> str:
    parts = []
    for c in conflicts:
        if not c["hunks"]:
            parts.append(f"{c['path']} ({c['kind']})")
            continue
        ranges = "; ".join(f"base lines {h['base_lines'][0]}-{h['base_lines'][1]}, "
                           f"winner lines {h['winner_lines'][0]}-{h['winner_lines'][1]}" for h in c["hunks"])
        parts.append(f"{c['path']} ({ranges})")
    return "\n  ".join(parts)


def _merge_one(repo: pygit2.Repository, ours: pygit2.Oid, theirs: pygit2.Oid, policy: str,
               message: str, sig: Identity, what: str, again: str) -> tuple[pygit2.Oid, list[dict[str, Any]]]:
    """A merge commit of ``theirs`` into ``ours`` resolved by ``policy``;
    returns its oid and the conflicts the policy decided (with the lines of
    each side it dropped).  ``again`` is the retry that starts the winner
    afresh on the base, for the hints."""
    plain = repo.merge_commits(ours, theirs)
    conflicts = (_conflicts(repo, plain, repo[ours].peel(pygit2.Tree), repo[theirs].peel(pygit2.Tree))
                 if plain.conflicts else [])
    if conflicts and policy == "refuse":
        raise ParallelError(
            E.MERGE_CONFLICT,
            f"{what} conflicts with the base:\n  {_describe_conflicts(conflicts)}\nnothing moved",
            hint=f"start a new attempt from the base as it is now (`{again}` retires the pick; "
                 "then run, check, pick), merge by hand (git merge), or choose merge.policy first_pass_wins "
                 "or last_pass_wins in .gitparallel.yaml for new runs",
            conflicts=conflicts)
    if conflicts:
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
    if tree == repo[ours].peel(pygit2.Commit).tree_id:
        dropped = sum(c["winner_lines_dropped"] for c in conflicts)
        raise ParallelError(
            E.MERGE_CONFLICT,
            f"merging {what} would land nothing: the merged tree is the base's own"
            + (f" (merge.policy {policy} dropped {dropped} line(s) of the winner)" if conflicts else ""),
            hint=f"nothing moved; start a new attempt from the current base (`{again}`) or merge by hand",
            conflicts=conflicts)
    commit = repo.create_commit(None, *sig, message, tree, [ours, theirs])
    for c in conflicts:
        c["kept"] = "base" if policy in BASE_SIDE_POLICIES else "winner"
    return commit, conflicts


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


DEFAULT_MESSAGE = ("git-parallel: merge {task} track {track} winner {winner}\n\n"
                   "Run: {run_id}\nWinner: {branch} at {commit}\nPolicy: {policy}\n")
# A winner whose history was only leftovers commits: the one commit that
# lands is the agent's work, so its subject names the task (a command, with
# its prompt, is no subject) and its body the agent.
LEFTOVERS_SQUASH_MESSAGE = ("{task} (git-parallel winner {winner})\n\n"
                            "Run: {run_id}\nWinner: {branch} at {commit}\nAgent: {agent}\nPolicy: {policy}\n")
UNRECORDED_AGENT = "an unrecorded command"
BY_HAND = "work done by hand"


MESSAGE_FIELDS = ("task", "track", "winner", "branch", "commit", "run_id", "policy", "reason", "agent")


def history(repo: pygit2.Repository, record: RunRecord, inst: InstanceRecord, base: pygit2.Oid,
            winner: pygit2.Oid) -> tuple[bool, str]:
    """The winner's commits not on ``base``: are they only this attempt's
    leftovers commits (the agent committed nothing itself), and which agent
    command made them (``Parallel-Command``)?"""
    walker = repo.walk(winner, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.hide(base)
    only, agents = True, []
    for commit in walker:
        said = provenance.leftovers_of(commit.message)
        if said is None or said.get("Parallel-Run") != record["run_id"] or said.get("Parallel-Instance") != inst["id"]:
            only = False
        elif said.get("Parallel-Command") and said["Parallel-Command"] not in agents:
            agents.append(said["Parallel-Command"])
    named = [provenance.command_label(a) for a in agents]
    return only, "; ".join(named) or (BY_HAND if inst.get("origin") == "hand" else UNRECORDED_AGENT)


def landing_message(record: RunRecord, pick: PickRecord, inst: InstanceRecord,
                    agent: str = UNRECORDED_AGENT, leftovers_only: bool = False) -> str:
    """The message of a commit that lands a winner (a merge or a squash):
    ``merge.message`` or the default (for a winner made only of leftovers
    commits, one naming the task and the agent), with only the documented
    ``{field}``s replaced (other braces stay as written)."""
    template = (record["config"]["merge"].get("message")
                or (LEFTOVERS_SQUASH_MESSAGE if leftovers_only else DEFAULT_MESSAGE))
    values = {"task": record["task"], "track": pick["track"], "winner": inst["id"], "branch": inst["branch"],
              "commit": pick["winner"]["commit"], "run_id": record["run_id"],
              "policy": record["config"]["merge"]["policy"], "reason": pick.get("reason") or "", "agent": agent}
    for key in MESSAGE_FIELDS:
        template = template.replace("{" + key + "}", values[key])
    return template if template.endswith("\n") else template + "\n"


def _dropped(conflicts: list[dict[str, Any]]) -> int:
    """Lines the winner wrote in the hunks a policy decided for the base."""
    return sum(c["winner_lines_dropped"] for c in conflicts if c.get("kept") == "base")


def compute(project: Project, record: RunRecord, start: str, winners: list[Winner]) -> Landing:
    """The commit the base would move to from ``start``, track by track."""
    repo = project.repo.pygit
    policy = record["config"]["merge"]["policy"]
    sig = project.repo.identity()
    current = pygit2.Oid(hex=start)
    steps: list[LandingStep] = []
    resolved: list[dict[str, Any]] = []
    mode = record["config"]["merge"].get("squash")
    for pick, inst in winners:
        w = pygit2.Oid(hex=pick["winner"]["commit"])
        if current == w or repo.descendant_of(current, w):
            steps.append({"track": pick["track"], "winner": inst["id"], "method": "already-contained"})
            continue
        leftovers_only, agent = history(repo, record, inst, current, w)
        squash = mode is True or (mode == "auto" and leftovers_only)
        message = landing_message(record, pick, inst, agent, leftovers_only and squash)
        what = f"the winner {inst['id']} of track {pick['track']} ({inst['branch']} at {str(w)[:12]})"
        again = f"git parallel retry {record['task']} {inst['id']} --onto-current"
        if squash:
            # One new commit on the base with the tree the merge would have.
            conflicts: list[dict[str, Any]] = []
            if repo.descendant_of(w, current):
                tree = repo[w].peel(pygit2.Commit).tree_id
            else:
                merged, conflicts = _merge_one(repo, current, w, policy, message, sig, what, again)
                tree = repo[merged].peel(pygit2.Commit).tree_id
            current = repo.create_commit(None, *sig, message, tree, [current])
            resolved += [{"track": pick["track"], **c} for c in conflicts]
            steps.append({"track": pick["track"], "winner": inst["id"], "method": "squash", "commit": str(current),
                          "resolved_files": [c["path"] for c in conflicts],
                          "winner_lines_dropped": _dropped(conflicts)})
            continue
        if repo.descendant_of(w, current):
            current = w
            steps.append({"track": pick["track"], "winner": inst["id"], "method": "fast-forward", "commit": str(w)})
            continue
        current, conflicts = _merge_one(repo, current, w, policy, message, sig, what, again)
        resolved += [{"track": pick["track"], **c} for c in conflicts]
        steps.append({"track": pick["track"], "winner": inst["id"], "method": "merge", "commit": str(current),
                      "resolved_files": [c["path"] for c in conflicts],
                      "winner_lines_dropped": _dropped(conflicts)})
    return {"commit": str(current), "steps": steps, "resolved_files": resolved}
