"""Small file primitives shared by every store: atomic writes, exclusive
creation, hashing and timestamps.

Records are replaced by writing a temporary file in the same folder, fsyncing
it and renaming it over the old one, so a reader sees the old bytes or the new
bytes and a crash leaves no half-written record behind.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import stat
from pathlib import Path
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import yaml


def utcnow() -> str:
    """An ISO-8601 UTC timestamp with microseconds, sortable as text."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def env_seconds(name: str, default: float) -> float:
    """A duration from the environment; an unusable value (not a finite
    number of seconds >= 0) falls back to the default rather than crash at
    import."""
    import math

    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def canonical_json(obj: object) -> str:
    """Compact, key-sorted JSON: the form hashed and written to notes."""
    # ASCII with \u escapes, so that paths and arguments that are not UTF-8
    # (surrogate escapes) can be written too.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def config_sha256(config: Mapping[str, object]) -> str:
    """The hash a run record binds its frozen config with.  Here, not in
    ``config``, because every record read checks it, and reading records
    (``status``) should not load the config schema and its template."""
    return sha256_bytes(canonical_json(config).encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _complete_temp(target: Path, payload: bytes, mode: int | None) -> str:
    """A fully written, fsynced temporary file beside ``target``."""
    import tempfile  # (only writers need it: the verbs that only read start without it)

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        _unlink(tmp)
        raise
    return tmp


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` so that readers never see a partial file
    (nor, with ``mode``, one without its permission bits)."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _complete_temp(target, payload, mode)
    try:
        os.replace(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise
    _fsync_dir(target.parent)


def new_file_mode() -> int:
    """The mode ``open()`` would give a new file (0666 less the umask): for
    files written for the user to keep, as git writes its work tree files
    (a temporary file from mkstemp is 0600)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # no other way to read it; set back at once
    os.umask(mask)
    return 0o666 & ~mask


def create_exclusive(path: str | os.PathLike[str], data: bytes | str) -> bool:
    """Write ``path`` only if it does not exist yet; return False if it did.

    The content is first written to a temporary file and then hard-linked into
    place, so the write-once file is either absent or complete.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _complete_temp(target, payload, None)
    try:
        os.link(tmp, target)
    except FileExistsError:
        return False
    finally:
        _unlink(tmp)
    _fsync_dir(target.parent)
    return True


def append_jsonl(path: str | os.PathLike[str], record: Mapping[str, object]) -> None:
    """Append one JSON line; a single write() of a short line is atomic for appends."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    line = (canonical_json(record) + "\n").encode("utf-8")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


# The largest .gitignore or .gitattributes git-parallel lets git read in an
# untrusted worktree: libgit2 reads each whole (git caps attributes at
# 100 MB, ignores not at all), and a sparse 20 GB one costs its writer no disk.
MAX_GIT_RULES_BYTES = 8 << 20
_GIT_RULES = (".gitignore", ".gitattributes")
# Files libgit2 opens through a link (git opens them without following one):
# a link to a FIFO outside the worktree, where the agent can leave one that
# outlives it (a ``sandbox_write`` folder; ``/dev/shm`` under Landlock
# alone), blocked the runner's look for leftovers for ever.
_LINKED_RULES = (*_GIT_RULES, ".gitmodules")


def _regular_rules(path: str) -> bool:
    """Is what the link ``path`` names a regular file libgit2 may read whole?"""
    try:
        st = os.stat(path)
    except OSError:
        return False  # dangling now: nothing git reads, and it could name a FIFO made later
    return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_GIT_RULES_BYTES


def remove_hostile_files(worktree: str | os.PathLike[str]) -> list[str]:
    """Remove what git and libgit2 must not read under ``worktree`` (an
    attempt's worktree, a checkout a gate wrote), no link followed, and name
    it (relative paths): FIFOs, sockets and device files, which git cannot
    hold and whose opening blocks (a FIFO ``.gitignore`` blocked the
    leftovers commit, ``check``'s look for changes and ``cleanup`` for ever),
    and a ``.gitignore`` or ``.gitattributes`` over ``MAX_GIT_RULES_BYTES``,
    which libgit2 would read whole; and a ``.gitignore``, ``.gitattributes``
    or ``.gitmodules`` that is a link to anything else (libgit2 follows it)."""
    found: list[str] = []
    for entry, name in tree_entries(worktree):
        try:
            if entry.is_symlink():
                if entry.name in _LINKED_RULES and not _regular_rules(entry.path):
                    os.unlink(entry.path)
                    found.append(name)
                continue
            if entry.is_dir(follow_symlinks=False):
                continue
            if not entry.is_file(follow_symlinks=False) or (
                    entry.name in _GIT_RULES and entry.stat(follow_symlinks=False).st_size > MAX_GIT_RULES_BYTES):
                os.unlink(entry.path)
                found.append(name)
        except OSError:
            continue
    return found


# Trees an attempt made (its worktree, its admin folder, a gate's layer) are
# walked and removed without recursion: a folder 1,500 deep costs a loop of
# mkdir and chdir, and Python's recursion (shutil.rmtree, os.walk) ends at
# 1,000 levels with a RecursionError, which no ``except OSError`` catches.
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def tree_entries(top: str | os.PathLike[str],
                 prune: Callable[[str], bool] = lambda rel: False) -> Iterator[tuple[os.DirEntry[str], str]]:
    """Every entry under the folder ``top`` with its path relative to it,
    at any depth, no link followed; ``prune(rel)`` true keeps a folder's
    content out.  A folder that cannot be listed (gone, or past ``PATH_MAX``)
    is passed by."""
    stack = [(os.fspath(top), "")]
    while stack:
        folder, rel = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            name = rel + entry.name
            yield entry, name
            try:
                if entry.is_dir(follow_symlinks=False) and not prune(name):
                    stack.append((entry.path, name + "/"))
            except OSError:
                continue


def remove_tree(path: str | os.PathLike[str], ignore_errors: bool = False, dir_fd: int | None = None) -> None:
    """``shutil.rmtree`` at any depth: ``path`` and everything under it
    removed through folder descriptors (no link followed, no path past
    ``PATH_MAX``), folders a command left without write or search permission
    opened up first.  A link at ``path`` is refused as rmtree refuses it.
    ``path`` is relative to the folder ``dir_fd`` when given (``beneath``).
    ``OSError`` when something could not be removed (what could be is),
    unless ``ignore_errors``."""
    try:
        if stat.S_ISLNK(os.lstat(path, dir_fd=dir_fd).st_mode):
            raise OSError(f"{os.fspath(path)} is a symbolic link: not removed as a folder")
        _remove_tree(os.fspath(path), dir_fd)
    except OSError:
        if not ignore_errors:
            raise


def _open_folder(name: str, parent: int | None) -> int:
    try:
        return os.open(name, _DIR, dir_fd=parent)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent)  # a folder (O_DIRECTORY said so), made by the attempt
        return os.open(name, _DIR, dir_fd=parent)


def _remove_tree(top: str, dir_fd: int | None = None) -> None:
    fd = _open_folder(top, dir_fd)
    names: list[str] = []  # the folders descended into, from top
    stuck: list[set[str]] = [set()]  # per level: folders that would not go
    failed: OSError | None = None
    try:
        while True:
            try:
                os.fchmod(fd, 0o700)
            except OSError:
                pass
            sub = None
            for entry in os.scandir(fd):
                if entry.name in stuck[-1]:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    sub = entry.name
                    break
                try:
                    os.unlink(entry.name, dir_fd=fd)
                except OSError as exc:
                    failed = exc
            if sub is not None:
                try:
                    child = _open_folder(sub, fd)
                except OSError as exc:
                    failed = exc
                    stuck[-1].add(sub)
                    continue
                os.close(fd)
                fd, names, stuck = child, [*names, sub], [*stuck, set()]
                continue
            if not names:
                break
            parent = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd, name = parent, names.pop()
            stuck.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as exc:
                failed = exc
                stuck[-1].add(name)
    finally:
        os.close(fd)
    os.rmdir(top, dir_fd=dir_fd)
    if failed is not None:
        raise failed


@contextmanager
def beneath(root: str | os.PathLike[str], rel: str) -> Iterator[tuple[int, str]]:
    """(a descriptor of the folder holding ``rel`` under ``root``, its last
    name), every folder on the way opened without following a link: what
    the judge writes or removes in a folder untrusted code wrote (a judged
    checkout under Landlock alone) never goes through a link it left there.
    ``OSError`` when a folder on the way is a link, not a folder, or gone."""
    parts = [p for p in os.path.normpath(rel).split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise OSError(f"{rel!r} is not a path under {os.fspath(root)}")
    fd = os.open(root, _DIR)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = inner
        yield fd, parts[-1]
    finally:
        os.close(fd)


def unlink_beneath(root: str | os.PathLike[str], rel: str) -> None:
    """Remove the file (or link) ``rel`` under ``root`` (see ``beneath``); gone already is fine."""
    with beneath(root, rel) as (fd, name):
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass


def write_beneath(root: str | os.PathLike[str], rel: str, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` as the new file ``rel`` under ``root`` (see
    ``beneath``): ``FileExistsError`` if anything is at that name."""
    with beneath(root, rel) as (folder, name):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), mode)  # the mode asked, whatever the umask


def untrusted_json(text: str | bytes) -> Any:
    """``json.loads`` of what an attempt could have written (an events line,
    a findings line, a probe's answer, its package.json): a document nested
    past Python's recursion limit (100,000 brackets) raises ``ValueError``,
    as any text that does not parse does, not ``RecursionError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to parse") from None


def untrusted_toml(text: str) -> Any:
    """``tomllib.loads`` of an attempt's file, ``ValueError`` as above."""
    import tomllib

    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ValueError("nested too deep to parse") from None


# What git-parallel reads of a file that an agent or a gate could have grown
# (a log, an events file): a sparse `truncate -s 20G` costs them no disk, and
# reading it whole would cost us 20 GB of memory.
LOG_TAIL_BYTES = 1 << 20


def read_tail(path: str | os.PathLike[str], limit: int = LOG_TAIL_BYTES) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a regular file, and how many bytes before
    them were not read (0 when it was read whole).  ``OSError`` if it cannot
    be opened or is not a regular file (a FIFO would block the reader)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with open(fd, "rb", closefd=True) as handle:
        size = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        cut = max(0, size - limit)
        handle.seek(cut)
        return handle.read(limit), cut


def cut_notice(cut: int) -> bytes:
    """The line put before a tail that left ``cut`` bytes unread."""
    return f"[git-parallel: the first {cut:,} bytes of this file are not shown]\n".encode() if cut else b""


# Nodes a YAML document may expand to, aliases counted each time they are
# used: far above any config or record (a 100-instance record is about 6,000),
# far below an alias bomb ("billion laughs": 10^9 from a few hundred bytes),
# which would otherwise be walked node by node by every validation.
MAX_YAML_NODES = 1_000_000


class YamlTooLarge(yaml.YAMLError):
    """A document that expands to more than ``MAX_YAML_NODES`` nodes."""

    def __init__(self) -> None:
        self.problem = f"it expands to more than {MAX_YAML_NODES:,} nodes once its aliases are expanded (an alias bomb?)"
        super().__init__(self.problem)


def _expanded(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The nodes ``node`` stands for once every alias is expanded; each
    distinct node is counted once and memoised, so this costs the size of
    the text, not of the expansion."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    sizes[id(node)] = MAX_YAML_NODES + 1  # a node reached again through itself: a recursive alias
    children: list[yaml.Node] = []
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    total = 1
    for child in children:
        total += _expanded(child, sizes)
        if total > MAX_YAML_NODES:
            break
    sizes[id(node)] = total
    return total


def load_yaml(text: str | bytes, loader: type = yaml.SafeLoader) -> tuple[Any, yaml.Node | None]:
    """``yaml.safe_load`` (with ``loader``, a safe one) and the composed
    node, refusing with ``YamlTooLarge`` a document that expands too far."""
    reader = loader(text)
    try:
        node = reader.get_single_node()
        if node is not None:
            if _expanded(node, {}) > MAX_YAML_NODES:
                raise YamlTooLarge()
        return (reader.construct_document(node) if node is not None else None), node
    finally:
        reader.dispose()


def flock_held(path: str | os.PathLike[str]) -> bool:
    """Does some process hold a ``flock`` on ``path``, in whatever PID
    namespace?  Read from ``/proc/locks``, never by taking the lock (taken
    for a moment, it would turn away whoever asks for it just then).
    False where ``/proc/locks`` cannot be read."""
    try:
        info = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            text = handle.read(1 << 20)
    except OSError:
        return False
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    # "1: FLOCK  ADVISORY  WRITE 3017 fd:00:1835029 0 EOF"; a waiter's line has "->" after the number.
    return any(fields[1:2] == ["FLOCK"] and fields[5:6] == [where] for fields in map(str.split, text.splitlines()))
