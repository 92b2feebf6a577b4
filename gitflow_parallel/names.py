"""Validation of the names a user gives: tasks, tracks and instance ids.

A task or track name becomes a ref component (``parallel/<task>/<id>``) and a
folder name, so only a conservative alphabet is accepted.
"""

from __future__ import annotations

import re

from gitflow_parallel.errors import INVALID_NAME, ParallelError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(value: str, what: str = "task") -> str:
    problem = None
    if not isinstance(value, str) or value == "":
        problem = "it is empty"
    elif len(value) > 64:
        problem = f"it is {len(value)} characters long (at most 64)"
    elif not _SAFE.fullmatch(value):
        problem = "it must start with a letter or digit and use only letters, digits, '.', '_' and '-'"
    elif ".." in value:
        problem = "it contains '..'"
    elif value.endswith(".lock"):
        problem = "it ends in '.lock'"
    elif value.endswith("."):
        problem = "it ends in '.'"
    if problem:
        raise ParallelError(
            INVALID_NAME,
            f"invalid {what} name {value!r}: {problem}",
            hint=f"choose a {what} name like 'fix-login' (pattern [A-Za-z0-9][A-Za-z0-9._-]{{0,63}})",
        )
    return value
