"""Repository-wide concurrency slots: the cap on agent commands running at
once across every ``git parallel run`` of one repository.

The cap (``max_total``) is a row of slot files, ``slot-0`` … ``slot-<N-1>``,
under ``<common dir>/parallel/slots/``.  Holding slot *k* means holding an
exclusive ``flock`` on ``slot-k`` through an open file description that only
the runner owns.  The kernel drops the lock when that description is closed,
and it is closed when the holder exits for any reason, ``kill -9`` included,
so a dead runner never keeps a slot and nothing has to be "repaired".  A
counter in a file would instead stay wrong after a crash.

Rules that keep this sound:

- Slot files are created once and never deleted.  Unlinking a lock file
  while it is held lets a second process lock a *new* file of the same name,
  and then two holders both believe they own slot *k*.
- The descriptors are opened close-on-exec and ``subprocess`` closes every
  other descriptor in its children, so an agent (or a daemon it leaves
  behind) can never inherit a slot and keep it after the runner is gone.
- Each run honours the ``max_total`` frozen in its own record: it uses slots
  ``0 … max_total-1``.  Runs frozen with different caps share the low slots,
  so the strictest cap applies among them and the largest one bounds the
  total.

The file's bytes name the last holder (pid, task, instance, since) for a
person looking at a stuck run; they are informative only, the lock is the
truth.  POSIX only (``fcntl``).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from gitflow_parallel.files import utcnow
from gitflow_parallel.state.claims import claim_path


def slots_dir(parallel_dir: Path) -> Path:
    return parallel_dir / "slots"


def slot_path(parallel_dir: Path, index: int) -> Path:
    return slots_dir(parallel_dir) / f"slot-{index}"


class Slot:
    """One held slot; ``release`` (or the holder's death) frees it."""

    __slots__ = ("index", "path", "_fd")

    def __init__(self, index: int, path: Path, fd: int) -> None:
        self.index = index
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            # Closing the only descriptor of the open file drops the flock.
            os.close(fd)

    def __repr__(self) -> str:
        return f"Slot({self.index}, {'held' if self.held else 'released'})"


class Slots:
    """The ``total`` slots of one repository, as seen by one run."""

    def __init__(self, parallel_dir: Path, total: int) -> None:
        if total < 1:
            raise ValueError(f"a slot pool needs at least one slot, not {total}")
        self.dir = slots_dir(parallel_dir)
        self.parallel_dir = parallel_dir
        self.total = total
        self._made = False

    def _open(self, index: int) -> int:
        if not self._made:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._made = True
        return os.open(slot_path(self.parallel_dir, index), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def try_acquire(self, holder: str = "") -> Slot | None:
        """Take the lowest free slot without waiting; None when all are held."""
        for index in range(self.total):
            fd = self._open(index)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue
                raise
            try:
                note = f"pid={os.getpid()} {holder} since={utcnow()}\n".encode("utf-8")
                os.ftruncate(fd, 0)
                os.pwrite(fd, note, 0)
            except OSError:
                pass  # the note is for people; the lock is what counts
            return Slot(index, slot_path(self.parallel_dir, index), fd)
        return None


# -- instance claims -------------------------------------------------------------------
# A runner holds one more lock per instance it selected, from selection until
# the agent is gone and its leftovers are committed: ``parallel/locks/
# run-<task>-<id>.lock``, the same kind of flock as a slot (never unlinked,
# close-on-exec, dropped by the kernel when the runner dies).  Selection takes
# them under the project lock, so two runs of one task never split its
# pending instances between them: the first takes all it selected, the
# second finds them claimed.  ``abort`` waits on them to know that a stopped
# agent's runner has finished with its worktree.


def try_claim(parallel_dir: Path, task: str, inst_id: str, holder: str = "") -> Slot | None:
    """Take the instance's claim without waiting; None if another runner holds it."""
    path = claim_path(parallel_dir, task, inst_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} {holder} since={utcnow()}\n".encode("utf-8"), 0)
    except OSError:
        pass
    return Slot(-1, path, fd)


def claim_holder(parallel_dir: Path, task: str, inst_id: str) -> str:
    try:
        return claim_path(parallel_dir, task, inst_id).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def wait_unclaimed(parallel_dir: Path, task: str, inst_id: str, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until no runner holds the instance's claim."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        claim = try_claim(parallel_dir, task, inst_id, "probe")
        if claim is not None:
            claim.release()
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
