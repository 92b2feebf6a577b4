"""``git parallel stats``: which agent wins here, from the runs this clone
knows (``state/tally`` reads them and computes the figures)."""

from __future__ import annotations

import datetime as dt

from gitflow_parallel import errors as E
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.state import tally
from gitflow_parallel.state.project import Project


def parse_since(text: str | None) -> dt.datetime | None:
    """``--since``: a date (``2026-01-31``) or a time (``2026-01-31T12:00``), UTC unless it says."""
    if text is None:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ParallelError(E.INVALID_NAME, f"--since {text!r} is not a date",
                            hint="give a date like 2026-01-31 or a time like 2026-01-31T12:00") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def stats(project: Project, since: str | None = None) -> tally.Figures:
    """Per agent: attempts, pass rate, win rate, median time to pass, median
    lines changed and retries needed, over the runs since ``since``."""
    return tally.figures(project, parse_since(since))
