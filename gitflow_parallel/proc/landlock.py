"""Landlock through its three system calls: the file-system (and TCP) fence
an agent or a gate runs in, on Linux 5.13 and later.  Standard library only.

Why our own ~150 lines of ctypes rather than a binding: the three calls and
two structures are all there is to it, a binding would be a fourth runtime
dependency for that, and the way it is applied here (below) needs the raw
calls, which the bindings looked at wrap away.

How it is applied.  Landlock restricts the calling *thread* (and whatever
it starts afterwards), and so does ``PR_SET_NO_NEW_PRIVS``.  So
``Ruleset.spawn`` starts a short-lived thread, restricts that thread
(``prctl`` then ``landlock_restrict_self``), starts the command from it with
``subprocess.Popen`` and lets the thread end; the caller's threads stay
unrestricted.  Why not a ``preexec_fn`` in the child, as this module first
did: a ``preexec_fn`` makes ``subprocess`` ``fork()`` the whole parent
instead of ``vfork()``ing, which copies the page tables of a process that
holds pygit2 - about 4 ms per command here, most of what the fence cost
(``scripts/bench_run.py``, ``docs/benchmarks.md``); a thread costs about
0.1 ms.  A fence that cannot be applied raises ``OSError`` in the caller
before anything is started, so a command never runs unfenced by mistake.
The ruleset fd is close-on-exec.

Rules are allow-lists of hierarchies; there is no "deny inside allow".  To
leave reads open except some folders, ``read_rules`` grants read on every
sibling along the path to each denied folder (and listing, only, on the
folders on that path).  A folder made later next to a denied one is not
readable until the next command starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import stat
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")

SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446  # the same on every Linux architecture but alpha
CREATE_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# LANDLOCK_ACCESS_FS_*
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
# LANDLOCK_ACCESS_NET_*
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1
# LANDLOCK_SCOPE_*
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # what a rule on a non-folder may grant


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux" or platform.machine() == "alpha":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
if _LIBC is not None:
    _syscall = _LIBC.syscall
    _syscall.restype = ctypes.c_long
    _prctl = _LIBC.prctl
    _prctl.restype = ctypes.c_int


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux,
    older than 5.13, or disabled at boot)."""
    if _LIBC is None:
        return 0
    version = _syscall(ctypes.c_long(SYS_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_VERSION))
    return int(version) if version > 0 else 0


def handled_fs(version: int) -> int:
    """Every file-system access this ABI knows (all of them are handled)."""
    access = (1 << 13) - 1
    if version >= 2:
        access |= REFER
    if version >= 3:
        access |= TRUNCATE
    if version >= 5:
        access |= IOCTL_DEV
    return access


class Ruleset:
    """A built ruleset: ``allow`` paths, then ``spawn`` the command under it."""

    def __init__(self, version: int, network: bool) -> None:
        self.version = version
        self.fs = handled_fs(version)
        net = 0 if network or version < 4 else BIND_TCP | CONNECT_TCP
        # From ABI 6 (Linux 6.12) no signal to, and no abstract Unix socket
        # of, a process outside the fence: without a PID namespace a gate
        # killed the runner that judged it.
        scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
        attr = _RulesetAttr(self.fs, net, scoped)
        size = 8 if version < 4 else 16 if version < 6 else 24
        fd = _syscall(ctypes.c_long(SYS_CREATE), ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = int(fd)
        self.network_blocked = bool(net)

    def allow(self, path: str | os.PathLike[str], access: int, folder: bool | None = None) -> bool:
        """Grant ``access`` beneath ``path`` (``folder``: whether it is one,
        if the caller knows); False if it does not exist."""
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            self.allow_fd(fd, access, folder if folder is not None else stat.S_ISDIR(os.fstat(fd).st_mode), path)
        finally:
            os.close(fd)
        return True

    def allow_fd(self, fd: int, access: int, folder: bool, path: object = "") -> None:
        """Grant ``access`` beneath what ``fd`` (an ``O_PATH`` fd) opens."""
        if not folder:
            access &= FILE_ONLY
        rule = _PathBeneath(access & self.fs, fd)
        rc = _syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(self.fd), ctypes.c_int(RULE_PATH_BENEATH),
                      ctypes.byref(rule), ctypes.c_uint32(0))
        if rc < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")

    def spawn(self, start: Callable[[], T]) -> T:
        """``start()`` (which starts a command) in a thread of its own
        restricted by this ruleset; its result, or its exception.  Raises
        ``OSError`` if the thread could not be restricted (nothing started)."""
        result: list[T] = []
        failed: list[BaseException] = []

        def fenced() -> None:
            try:
                self.restrict_current()
                result.append(start())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                failed.append(exc)

        thread = threading.Thread(target=fenced, name="git-parallel-fence", daemon=True)
        thread.start()
        thread.join()
        if failed:
            raise failed[0]
        return result[0]

    def restrict_current(self) -> None:
        """Fence the calling thread (and what it starts) by this ruleset."""
        if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or _syscall(SYS_RESTRICT, self.fd, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"the Landlock fence could not be applied: {os.strerror(err)}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_rules(denied: Iterable[str | os.PathLike[str]]) -> tuple[list[tuple[str, bool]], list[str]]:
    """(paths to grant reading beneath, each with whether it is a folder;
    folders to grant listing only) so that everything is readable except
    what is beneath a ``denied`` folder.  Plain strings: this runs before
    every fenced command."""
    wanted = {os.path.realpath(p) for p in denied}
    deny = {p for p in wanted if not any(str(parent) in wanted for parent in Path(p).parents)}
    if not deny:
        return [("/", True)], []
    along: set[str] = set()
    for path in deny:
        along.update(str(parent) for parent in Path(path).parents)
    grant: list[tuple[str, bool]] = []
    for folder in sorted(along):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            # A symlink is not followed: a rule on it would be a rule on its
            # target, which may be (or hold) a denied folder; the target has
            # rules of its own where it lives.
            if entry.path not in deny and entry.path not in along and not entry.is_symlink():
                grant.append((entry.path, entry.is_dir(follow_symlinks=False)))
    return grant, sorted(along)


def grant_writes(ruleset: Ruleset, write: Iterable[str | os.PathLike[str]],
                 files: Iterable[str | os.PathLike[str]]) -> None:
    """Everything beneath each of ``write``; reading and writing ``files``
    (files and ioctls only: ``/dev/null``, terminals, ``cgroup.procs``);
    and ``/dev/shm``, which Python's multiprocessing and many tools need."""
    everything = handled_fs(ruleset.version)
    for path in write:
        ruleset.allow(path, everything)
    for path in files:
        ruleset.allow(path, READ | FILE_ONLY)
    ruleset.allow("/dev/shm", everything)


def grant_reads(ruleset: Ruleset, read: Iterable[str | os.PathLike[str]]) -> None:
    """Reading (and running) everything beneath each of ``read``: a folder
    made after the read rules were worked out (``sandbox.Reads``), such as
    a gate's results channel (``judge/stream``)."""
    for path in read:
        ruleset.allow(path, READ)


def _paths(plan: dict[str, object], key: str) -> list[str]:
    """A list of paths of a fence's plan (``sandbox`` writes them as strings)."""
    value = plan[key]
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ValueError(f"the fence plan's {key} is not a list of paths")
    return value


def from_plan(plan: dict[str, object]) -> Ruleset:
    """The ruleset of a fence rebuilt from its paths (``sandbox.Fence.plan``),
    where the one the runner built cannot be handed over: a ``--tmux`` agent
    is started by the tmux server, and its pane fences it (``tmux``)."""
    ruleset = Ruleset(abi(), bool(plan["network"]))
    try:
        grant, listing = read_rules(_paths(plan, "denied"))
        for path, folder in grant:
            ruleset.allow(path, READ, folder)
        for path in listing:
            ruleset.allow(path, READ_DIR, True)
        grant_writes(ruleset, _paths(plan, "write"), _paths(plan, "files"))
        grant_reads(ruleset, _paths(plan, "read") if "read" in plan else [])
    except BaseException:
        ruleset.close()
        raise
    return ruleset
