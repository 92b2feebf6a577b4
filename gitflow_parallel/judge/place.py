"""Where and as whom a judged command runs: its environment, its fence and
overlay layers, and the one routine that runs it (``execute``), for
gates, setup, score, probes, the import probe, distinguish and the judge.

A ``Place`` is a judged checkout in use: its facts, its log names, its
fence plan (``proc/sandbox.GatePlan``) and, under the namespace layer, the
upper layer its commands share (``judge/layers``).  ``judging`` makes one
for a borrowed scratch checkout and takes it down afterwards.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from gitflow_parallel import errors as E
from gitflow_parallel.git import judged_view, tamper
from gitflow_parallel.judge import layers, stores, stream
from gitflow_parallel.judge.pace import Lane
from gitflow_parallel import environ as proc_env
from gitflow_parallel.proc import namespace, reaper, sandbox, supervise
from gitflow_parallel.proc.watchdog import shared as shared_watchdog
from gitflow_parallel.config_schema import FrozenConfig

if TYPE_CHECKING:
    from gitflow_parallel.git.scratch import Checkout


# -- running commands -------------------------------------------------------------
def gate_env(extra: dict[str, str], facts: dict[str, str], path_first: Iterable[str] = (),
             home: tuple[Path, Path] | None = None) -> dict[str, str]:
    """The environment a gate or score command runs with (see the module
    doc): ``path_first`` (what ``setup`` built) first on the ``PATH``, and
    never git-parallel's own virtual environment, whose interpreter is not
    the project's, nor an empty or relative folder of the user's ``PATH``
    or ``LD_LIBRARY_PATH`` (``node_modules/.bin``, ``.``, the empty entry a
    careless ``export`` leaves): looked for in the judged checkout, it found
    the attempt's own ``sh`` (or would load its own ``libz.so.1``).  With
    ``home`` (the main worktree, the checkout the command runs in), an
    entry of ``PYTHONPATH`` inside the main worktree (``<repo>/src``, as
    users of a src layout export it) names the same place in the checkout:
    the gates' Python would import the main worktree's code, and every
    check was refused (``environment.check_imports``)."""
    env = proc_env.for_command()
    if home is not None:
        proc_env.move_pythonpath(env, *home)
    own = os.path.join(sys.prefix, "bin") if sys.prefix != sys.base_prefix else None
    parts = [p for p in env.get("PATH", "").split(os.pathsep) if os.path.isabs(p) and p != own]
    if own and env.get("VIRTUAL_ENV") == sys.prefix:
        del env["VIRTUAL_ENV"]
    env["PATH"] = os.pathsep.join([*path_first, *parts])
    if "LD_LIBRARY_PATH" in env:
        libraries = [p for p in env.pop("LD_LIBRARY_PATH").split(os.pathsep) if os.path.isabs(p)]
        if libraries:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(libraries)
    env.update(extra)
    env.update({f"GIT_PARALLEL_{k}": v for k, v in facts.items()})
    return env


def execute(argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
            stdout: Path, stderr: Path | None = None,
            plan: sandbox.GatePlan | None = None, layer: Layer | None = None,
            channel: stream.Channel | None = None) -> tuple[int | None, str | None, float]:
    """Run ``argv`` in its own process group with output to ``stdout`` (and
    ``stderr``, or the same file), stopped past ``timeout`` (``proc.supervise``),
    in the fence of ``plan`` (default: the one planned for ``cwd``), with
    the overlay layers ``layer`` names (default: a throwaway upper layer)
    and the folder it may write besides (a test report's); ``channel``: the
    results pipe its test process writes to (``judge/stream``).
    Returns (exit code or None, error or None, seconds)."""
    stdout.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    reaper.become_subreaper()
    before = tamper.before_command(cwd)  # what no command may change, as it is now
    scope, plan = supervise.new_scope("gate"), plan or _PLANS.get(str(cwd))
    layer = layer or Layer()
    fence = (plan.fence(scope, layer.above, layer.upper, layer.network, layer.lower, layer.main, layer.writable,
                        channel.folder if channel is not None else None)
             if plan is not None else sandbox.none("no fence planned here"))
    env = {**env, **fence.env}
    with open(stdout, "wb") as out, (open(stderr, "wb") if stderr else contextlib.nullcontext()) as err, \
            contextlib.closing(fence):
        for tries in range(1, namespace.SANDBOXES_SOCKETS_GONE + 1):
            try:
                proc = supervise.start(argv, cwd, env, out, err, scope, shared_watchdog(), fence,
                                       pass_fds=() if channel is None else (channel.write_fd,))
            except supervise.START_ERRORS as exc:
                _, message = supervise.cannot_start(argv[0], exc)
                out.write(f"git-parallel: {message}\n".encode())
                return None, message, time.monotonic() - start
            try:
                timed_out = proc.wait(max(0.0, timeout - (time.monotonic() - start)))
            finally:
                # Whatever it left running goes too (also when we were
                # interrupted), then the leader is reaped.
                code = proc.end()
            why = namespace.last_line(stderr or stdout) if proc.never_ran else ""
            if not proc.never_ran or namespace.exec_failed(why):
                break
            # The sandbox was not set up (what bwrap covers changed under
            # it: a socket of the host gone): the command never ran, so
            # it is started again in a sandbox made afresh, never judged.
            if tries >= namespace.sandboxes_allowed(why):
                error = f"the sandbox could not be set up {tries} times, so the command never ran: {why or '(bwrap said nothing)'}"
                out.write(f"\ngit-parallel: {error}\n".encode())
                return None, error, time.monotonic() - start
            for handle in (out, err):
                if handle is not None:
                    handle.seek(0)
                    handle.truncate()
        fence.applied()
    if before is not None:
        finding = tamper.after_command(before)
        if finding.changes:
            error = f"{E.AGENT_TAMPERED}: the command changed what no command may change: {finding.describe()}"
            with open(stdout, "ab") as out:
                out.write(f"\ngit-parallel: {error}\n".encode())
            return None, error, time.monotonic() - start
    if timed_out:
        error = f"timed out after {timeout:g}s; its process group was killed"
        with open(stdout, "ab") as out:
            out.write(f"\ngit-parallel: {error}\n".encode())
        return None, error, time.monotonic() - start
    return code, None, time.monotonic() - start


def failure_code(error: str | None) -> str | None:
    """The reason code of a judged command's failure (``execute``'s error):
    tampering says so, anything else is a failure to execute."""
    if error is None:
        return None
    return E.AGENT_TAMPERED if error.startswith(E.AGENT_TAMPERED) else E.EXECUTE_FAILED


@dataclass
class Layer:
    """The overlay one command gets under the namespace layer (see
    ``sandbox.GatePlan.fence``); ignored under Landlock alone."""

    above: list[Path] = field(default_factory=list)
    upper: tuple[Path, Path] | None = None
    network: bool | None = None
    lower: list[Path] | None = None
    main: bool = False  # the main worktree readable (the import probe)
    writable: Path | None = None  # a folder it may write besides (a test report's)


# -- gates ----------------------------------------------------------------------
# The fence plan of each scratch checkout in use, by path (see ``Place``).
_PLANS: dict[str, sandbox.GatePlan | None] = {}


@dataclass
class Place:
    """Where and as whom gates run: a worktree, its env facts and log names,
    and the fence its commands run in (``execute`` honours it)."""

    worktree: Path
    facts: dict[str, str]
    log_dir: Path
    log_prefix: str
    path: list[str] = field(default_factory=list)  # what setup built, first on the PATH
    repository: list[Path] = field(default_factory=list)  # where hidden tests must not be
    fence: sandbox.GatePlan | None = None
    layer_root: Path | None = None  # where its commands' upper layers are made (namespace layer)
    spaces: list[layers.Space] = field(default_factory=list)  # each command's upper layer, oldest first
    owners: list[str | None] = field(default_factory=list)  # the gate each of them was made for
    above: list[Path] = field(default_factory=list)  # files the judge lays over the checkout (added tests)
    cleanups: list[Any] = field(default_factory=list)  # called when the judging in it is done
    lane: Lane = field(default_factory=Lane)  # the check's budget of cores, and its progress

    def __post_init__(self) -> None:
        _PLANS[str(self.worktree)] = self.fence

    def log(self, what: str) -> Path:
        return self.log_dir / f"{self.log_prefix}.{what}.log"

    @property
    def home(self) -> tuple[Path, Path] | None:
        """(the main worktree, this checkout), for ``gate_env``."""
        main = self.fence.main_workdir if self.fence is not None else None
        return (main, self.worktree) if main is not None else None

    @property
    def overlaid(self) -> bool:
        return self.fence is not None and self.fence.overlaid

    def layer(self, owner: str | None = None) -> Layer:
        """The overlay of a gate (``owner``, its name) or score: an upper
        layer of its own, over the pristine checkout (no gate sees what an
        earlier one wrote: the attempt's code runs in each), kept until the
        judging ends so that what it hands back (a findings file, a probe's
        outputs) can be read."""
        if self.layer_root is None:
            return Layer(above=list(self.above))
        space = layers.make_space(self.layer_root)
        self.spaces.append(space)
        self.owners.append(owner)
        return Layer(above=list(self.above), upper=space.pair)

    def written_by(self, rel: str) -> list[tuple[str | None, Path]]:
        """The commands whose own layer holds ``rel`` (the gate each ran
        for, and where the file is), oldest first."""
        found = [(owner, layers.Merged(space.upper).find(rel)) for owner, space in zip(self.owners, self.spaces)]
        return [(owner, path) for owner, path in found if path is not None]

    def merged(self) -> layers.Merged:
        """What the commands left, as the last one saw it (its layer over
        the checkout), then what earlier ones left."""
        return layers.Merged(*(s.upper for s in reversed(self.spaces)), self.worktree)

    def close(self) -> None:
        for space in self.spaces:
            layers.remove(space.folder)
        self.spaces.clear()
        self.owners.clear()
        for done in self.cleanups:
            done()
        self.cleanups.clear()


@contextlib.contextmanager
def judging(common_dir: Path, main_workdir: Path | None, parallel_dir: Path, checkout: Checkout, path: Path,
            config: FrozenConfig, reads: sandbox.Reads, *, facts: dict[str, str], log_dir: Path, log_prefix: str,
            repository: list[Path], judged: str, lane: Lane | None = None) -> Iterator[Place]:
    """The ``Place`` of the commands judged in the borrowed ``checkout``
    (at ``path``, holding the commit ``judged``): its fence plan and, under
    the namespace layer, the upper layers its commands write and the view
    its git has of the git dir (``git/judged_view``), removed when the
    ``with`` ends; under Landlock alone the checkout is marked used
    (``scratch``), so it is made afresh before anyone judges in it again."""
    plan = sandbox.GatePlan(common_dir, main_workdir, path, config, reads, unseen=stores.unseen(config))
    if plan.overlaid:
        plan.git_view = judged_view.make(common_dir, parallel_dir, judged)
    if not plan.overlaid:
        checkout.used()
        yield Place(worktree=path, fence=plan, facts=facts, log_dir=log_dir, log_prefix=log_prefix,
                    repository=repository, lane=lane or Lane())
        return
    place = Place(worktree=path, fence=plan, layer_root=parallel_dir, facts=facts, log_dir=log_dir,
                  log_prefix=log_prefix, repository=repository, lane=lane or Lane())
    try:
        yield place
    finally:
        place.close()
        if plan.git_view is not None:
            plan.git_view.remove()
