"""Imported by every Python a gate starts, before any of the judged
checkout's files can be (git-parallel puts this folder first on the gate's
``PYTHONPATH`` and sets ``PYTHONSAFEPATH``, so the working folder or the
script's folder is not first on ``sys.path``).

That folder still belongs on the path, since projects import their own
code from it, but after the standard library and the installed packages:
a committed ``iniconfig.py`` or ``pytest/__main__.py`` at the root, or a
``json.py`` beside a test script, would otherwise replace what the runner
imports.  Then the environment's own ``sitecustomize`` runs, if it has one.

Standard library only; runs on every Python from 3.8.
"""

import os
import sys


def _first_folder():
    # What Python would have put first without PYTHONSAFEPATH: the working
    # folder for -c, -m and an interactive start, else the script's folder.
    first = sys.argv[0] if sys.argv else ""
    if first in ("", "-c", "-m", "-"):
        return os.getcwd()
    return os.path.dirname(os.path.realpath(first))


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import sitecustomize  # noqa: F401  (the environment's own, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


# The environment's own first, as Python would have run it: before the
# folder below was on the path (a checkout's root sitecustomize.py never ran).
_chain()
if os.environ.get("GIT_PARALLEL_SAFE_PATH") == "1" and getattr(sys.flags, "safe_path", False):
    try:
        _folder = _first_folder()
    except OSError:
        _folder = None
    if _folder and _folder not in sys.path:
        sys.path.append(_folder)
