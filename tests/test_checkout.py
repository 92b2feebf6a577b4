"""Checkouts that skip libgit2's filters (git/checkout) write what git
writes: byte for byte the files ``git worktree add`` makes, in the
worktrees of spawn and in the scratch checkouts that gates judge, whether
the filters could change bytes (attributes, ``core.autocrlf``) or not."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from conftest import GP, git, make_repo

FILES = {"a.txt": "one\ntwo\n", "sub/b.txt": "$Id$\nthree\n", "sub/deep/c.txt": "four\n"}


def _tree_bytes(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(top).parts}


def _git_worktree(repo: Path, where: Path) -> dict[str, bytes]:
    """What C git writes for HEAD, the oracle."""
    git(repo, "worktree", "add", "-q", "--detach", str(where), "HEAD")
    return _tree_bytes(where)


def _scratch(repo: Path) -> dict[str, bytes]:
    from gitflow_parallel.git import scratch
    from gitflow_parallel.state.project import Project

    project = Project.open(str(repo))
    head = git(repo, "rev-parse", "HEAD")
    with scratch.borrow(project.repo) as checkout:
        return _tree_bytes(checkout.prepare(head))


def _filters_idle(repo: Path) -> bool:
    from gitflow_parallel.git.checkout import filters_idle

    handle = pygit2.Repository(str(repo))
    return filters_idle(handle, Path(handle.path), handle.head.peel(pygit2.Commit).tree)


def test_without_attributes_the_filters_are_skipped_and_the_bytes_are_gits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", FILES)
    assert _filters_idle(repo)
    oracle = _git_worktree(repo, tmp_path / "oracle")
    GP(repo)("spawn", "t", "-n", "2")
    for k in ("1", "2"):
        top = tmp_path / "repo.parallel" / "t" / k
        assert _tree_bytes(top) == oracle
        assert git(top, "status", "--porcelain") == ""  # the index git reads is the one written
        assert git(top, "rev-parse", "--abbrev-ref", "HEAD") == f"parallel/t/{k}"
    listed = git(repo, "worktree", "list", "--porcelain")
    assert str((tmp_path / "repo.parallel" / "t" / "1").resolve()) in listed
    assert _scratch(repo) == oracle
    GP(repo)("abort", "t", "--force")
    assert git(repo, "worktree", "prune", "--dry-run", "-v") == ""  # nothing half made is left


@pytest.mark.parametrize("rules", [
    "* text=auto\n*.pem eol=lf\n# eol=crlf in a comment\n",  # pip's kind, and the most common line there is
    "*.txt text\n*.bin binary\n*.sh -ident !eol\n[attr]unix eol=lf\nsub/** unix\n",
])
def test_attributes_that_change_no_byte_here_skip_the_filters(tmp_path: Path, rules: str) -> None:
    """Most real .gitattributes (pip's: ``eol=lf`` lines) write a blob's
    bytes as they are on this system: the filters are skipped (libgit2's
    attribute lookup cost one readlink per path component, twice per file),
    and what is written is still what git writes."""
    repo = make_repo(tmp_path / "repo", {**FILES, ".gitattributes": rules, "sub/deep/.gitattributes": rules,
                                         "crlf.txt": "stored\r\nwith crlf\r\n"})
    assert _filters_idle(repo)
    oracle = _git_worktree(repo, tmp_path / "oracle")
    GP(repo)("spawn", "t", "-n", "1")
    assert _tree_bytes(tmp_path / "repo.parallel" / "t" / "1") == oracle
    assert _scratch(repo) == oracle


def test_a_linked_or_huge_gitattributes_keeps_the_filters(tmp_path: Path) -> None:
    """A ``.gitattributes`` that is a link names rules elsewhere, followed in
    the worktree; one of a MiB or more is not read to decide."""
    repo = make_repo(tmp_path / "repo", {**FILES, "rules": "*.txt eol=crlf\n",
                                         "sub/.gitattributes": "# padding\n" * (1 << 17)})
    (repo / ".gitattributes").symlink_to("rules")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "link")
    assert not _filters_idle(repo)
    git(repo, "rm", "-q", ".gitattributes")
    git(repo, "commit", "-qm", "no link")
    assert not _filters_idle(repo)  # the huge one alone
    git(repo, "rm", "-q", "sub/.gitattributes")
    git(repo, "commit", "-qm", "neither")
    assert _filters_idle(repo)


@pytest.mark.parametrize("source", ["nested .gitattributes", "info/attributes", "core.autocrlf", "attributesFile",
                                    "a macro", "core.eol", "ident alone"])
def test_where_a_filter_could_change_bytes_it_still_does(tmp_path: Path, source: str) -> None:
    files = dict(FILES)
    if source == "nested .gitattributes":
        files["sub/deep/.gitattributes"] = "*.txt text eol=crlf\n"
    elif source == "a macro":
        files[".gitattributes"] = "[attr]windows text eol=crlf\n*.txt windows\n"
    elif source == "core.eol":
        files[".gitattributes"] = "*.txt text\n"
    elif source == "ident alone":
        files[".gitattributes"] = "*.txt eol=lf\nsub/*.txt ident\n"
    repo = make_repo(tmp_path / "repo", files)
    rules = "*.txt text eol=crlf\n*.txt ident\n"
    if source == "info/attributes":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "attributes").write_text(rules)
    elif source == "core.autocrlf":
        git(repo, "config", "core.autocrlf", "true")
    elif source == "core.eol":
        git(repo, "config", "core.eol", "crlf")
    elif source == "attributesFile":
        (tmp_path / "attrs").write_text(rules)
        git(repo, "config", "core.attributesFile", str(tmp_path / "attrs"))
    assert not _filters_idle(repo)
    oracle = _git_worktree(repo, tmp_path / "oracle")
    assert any(b"\r\n" in data or b"$Id: " in data for data in oracle.values())  # the case is real: git converts
    GP(repo)("spawn", "t", "-n", "1")
    spawned = _tree_bytes(tmp_path / "repo.parallel" / "t" / "1")
    assert spawned == oracle
    assert _scratch(repo) == oracle


def test_a_filter_driver_never_runs_even_with_attributes(tmp_path: Path) -> None:
    """Skipping or not, no external filter runs: the smudge command would
    leave a marker file."""
    marker = tmp_path / "smudged"
    repo = make_repo(tmp_path / "repo", {**FILES, ".gitattributes": "*.txt filter=mark\n"})
    git(repo, "config", "filter.mark.smudge", f"sh -c 'touch {marker}; cat'")
    GP(repo)("spawn", "t", "-n", "1")
    _scratch(repo)
    assert not marker.exists()
