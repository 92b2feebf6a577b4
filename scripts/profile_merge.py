#!/usr/bin/env python3
"""What one ``git parallel merge`` walks through: modules and record loads.

Builds a throwaway repository in a sealed environment (private HOME,
GIT_CONFIG_NOSYSTEM, fixed identities, this checkout's code), spawns a run
of two instances whose agents write different files, checks and picks it
with real subprocesses of ``git parallel``, and then runs ``git parallel
merge T --json`` (or ``merge T --push origin --json`` against a bare
remote, with ``--push``) in this process under ``sys.setprofile``.  It
counts, for the package's own code only:

* ``modules``: the package modules whose functions ran, and ``imported``: the
  package modules first imported while the verb ran (their body ran);
* ``switches``: calls from a function of one package module into another
  (how often a reader following the verb changes files);
* ``record_loads``: calls of ``Store.read``, the one function that reads and
  parses a run record file.

Counts, not times: they do not depend on the machine's load.  The modules
the CLI imports before the verb starts are imported before profiling, so
the figures are the verb's own.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchenv import ROOT, discard, new_repo, sh, workspace  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's package, whatever is installed

PACKAGE = str(ROOT / "gitflow_parallel") + os.sep

CONFIG = """\
gates:
  - name: "true"
    run: ["true"]
    mode: enforced
"""


def build(repo: Path, env: dict[str, str], remote: Path | None) -> None:
    new_repo(repo, env, CONFIG, readme="profile\n")
    if remote is not None:
        sh(["git", "init", "-q", "--bare", "-b", "main", str(remote)], repo, env)
        sh(["git", "remote", "add", "origin", str(remote)], repo, env)
        sh(["git", "push", "-q", "origin", "main"], repo, env)
    sh(["git", "parallel", "spawn", "T", "-n", "2"], repo, env)
    agent = [sys.executable, "-c", "open('{instance}.txt', 'w').write('{instance}\\n')"]
    sh(["git", "parallel", "run", "T", "--", *agent], repo, env)
    sh(["git", "parallel", "check", "T"], repo, env)
    sh(["git", "parallel", "pick", "T"], repo, env)


def module_of(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    path = frame.f_code.co_filename
    if not path.startswith(PACKAGE):
        return None
    rel = path[len(PACKAGE):].removesuffix(".py").replace(os.sep, "/")
    return rel.removesuffix("/__init__") or "__init__"


def profile(repo: Path, env: dict[str, str], args: list[str]) -> dict[str, Any]:
    """Run the CLI with ``args`` in this process, sealed like the subprocesses."""
    import pygit2

    os.environ.clear()
    os.environ.update(env)
    for level in (pygit2.enums.ConfigLevel.GLOBAL, pygit2.enums.ConfigLevel.XDG, pygit2.enums.ConfigLevel.SYSTEM):
        pygit2.settings.search_path[level] = env["HOME"]
    os.chdir(repo)
    from gitflow_parallel import cli
    from gitflow_parallel.state import store

    entered: Counter[str] = Counter()
    imported: set[str] = set()
    callers: list[str] = []
    switches = 0
    loads = 0

    def hook(frame: FrameType, event: str, arg: object) -> None:
        nonlocal switches, loads
        if event != "call":
            return
        mine = module_of(frame)
        if mine is None:
            return
        if not frame.f_code.co_flags & inspect.CO_NEWLOCALS:
            imported.add(mine)  # a module's body (or a class body in it): an import
            return
        entered[mine] += 1
        caller = module_of(frame.f_back)
        if caller is not None and caller != mine:
            switches += 1
        if frame.f_code is store.Store.read.__code__:
            loads += 1
            chain, up = [], frame.f_back
            while up is not None and module_of(up) is not None and len(chain) < 4:
                chain.append(f"{module_of(up)}.{up.f_code.co_name}")
                up = up.f_back
            callers.append(" <- ".join(chain))

    out_path = repo.parent / "merge.json"
    saved = sys.stdout
    with open(out_path, "w") as out:
        sys.stdout = out
        sys.setprofile(hook)
        try:
            cli.main_group.main(args=args, prog_name="git parallel", standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise
        finally:
            sys.setprofile(None)
            sys.stdout = saved
    result = json.loads(out_path.read_text())
    if not result.get("ok"):
        raise SystemExit(f"the merge did not land: {result}")
    return {"modules": sorted(entered), "imported": sorted(imported), "switches": switches,
            "record_loads": loads, "load_callers": callers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--push", action="store_true", help="profile `merge --push origin` (a bare remote) instead")
    ap.add_argument("--list", action="store_true", help="name the modules entered and who loaded the record")
    opts = ap.parse_args()
    base, env = workspace("gp-profile-merge-")
    env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
    try:
        repo = base / "repo"
        build(repo, env, base / "origin.git" if opts.push else None)
        args = ["merge", "T", "--json"] + (["--push", "origin"] if opts.push else [])
        found = profile(repo, env, args)
        print(f"git parallel {' '.join(args)}")
        print(f"modules={len(found['modules'])} imported={len(found['imported'])} switches={found['switches']} "
              f"record_loads={found['record_loads']}")
        if opts.list:
            print("modules:", " ".join(found["modules"]))
            print("imported:", " ".join(found["imported"]))
            print("record loads:\n  " + "\n  ".join(found["load_callers"]))
        return 0
    finally:
        os.chdir(ROOT)
        discard(base)


if __name__ == "__main__":
    sys.exit(main())
