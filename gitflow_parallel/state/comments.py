"""Review comments on attempts, as the agent of the next attempt reads them.

``git parallel comment`` keeps each comment in the instance record (through
``model.add_comment``) with the attempt it is about; ``retry`` writes the
feedback for the next attempt (``state/feedback``), which ends with
:func:`feedback_lines`: the comments on the attempt being replaced, each
with its file and line when it names them."""

from __future__ import annotations

from gitflow_parallel.model import Comment, InstanceRecord


def on_attempt(inst: InstanceRecord, attempt: int) -> list[Comment]:
    return [c for c in inst.get("comments") or [] if c.get("attempt") == attempt]


def where(comment: Comment) -> str:
    """``src/app.py:12``, ``src/app.py``, or "" for a comment on the whole attempt."""
    file = comment.get("file")
    if not file:
        return ""
    return file + (f":{comment['line']}" if comment.get("line") else "")


def feedback_lines(inst: InstanceRecord) -> list[str]:
    """The review section of the feedback on ``inst``'s current attempt."""
    found = on_attempt(inst, inst["attempt"])
    if not found:
        return []
    out = ["## Review comments", "", "A person reviewing the previous attempt wrote:", ""]
    for c in found:
        at = where(c)
        out.append(f"- {at + ': ' if at else ''}{c['text']} ({c['by']})")
    return out + [""]
