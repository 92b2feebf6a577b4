"""A command as the configuration gives it, made an argv: a list of words
or one string split as a shell would.  ``config_schema`` converts the
configuration's commands with it, and the modules that check their own
keys (``mix``, ``notify``) too; it imports none of them, so none of them
imports another to reach it."""

from __future__ import annotations

import shlex

from gitflow_parallel.schema import Invalid


def to_argv(value: object) -> list[str] | None:
    """A command: a list of words (numbers become strings) or one string split
    like a shell would; ``None`` stays (where the declaration allows it)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise Invalid(f"cannot split command: {exc}") from None
    elif isinstance(value, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        argv = [str(a) for a in value]
    elif isinstance(value, list) and any(isinstance(a, bool) for a in value):
        raise Invalid("YAML read a bare true/false/yes/no as a boolean; quote it (\"true\")")
    else:
        raise Invalid("must be a command: a list of strings or one string")
    if not argv:
        raise Invalid("must not be empty")
    return argv
