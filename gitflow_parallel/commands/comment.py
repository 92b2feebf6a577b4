"""``git parallel comment``: a person's review comment on an attempt, kept
in the run record (``model.add_comment``) and as a note line on the
attempt's commit (``provenance.comment_note``); ``retry`` hands the
comments on the attempt it replaces to the next agent in its feedback."""

from __future__ import annotations

from gitflow_parallel import errors as E
from gitflow_parallel import model, provenance
from gitflow_parallel.errors import ParallelError
from gitflow_parallel.files import utcnow
from gitflow_parallel.names import check_name
from gitflow_parallel.state.picks import who
from gitflow_parallel.state.project import Project
from gitflow_parallel.shapes.records import Comment, InstanceRecord, RunRecord
from gitflow_parallel.shapes.results import CommentResult


def _refuse(text: str, file: str | None, line: int | None, task: str, inst_id: str) -> None:
    usage = f'`git parallel comment {task} {inst_id} [--file F [--line L]] "text"`'
    if not text.strip() or "\0" in text:
        raise ParallelError(E.INVALID_NAME, "the comment is empty" if not text.strip() else "the comment holds a NUL",
                            hint=f"give the text: {usage}")
    if line is not None and (file is None or line < 1):
        raise ParallelError(E.INVALID_NAME, "--line needs --file and a line number from 1" if file is None
                            else f"--line {line} is below 1", hint=usage)
    if file is not None and (not file.strip() or file.startswith("/") or ".." in file.split("/") or "\0" in file):
        raise ParallelError(E.INVALID_NAME, f"--file {file!r} is not a path inside the repository",
                            hint="give it relative to the top of the repository, as `git diff` shows it")


def comment(project: Project, task: str, inst_id: str, text: str, file: str | None = None,
            line: int | None = None) -> CommentResult:
    """Keep ``text`` (about ``file``:``line`` if given) on the current
    attempt of ``inst_id``; returns the comment, the commit it is noted on,
    and a warning if the note could not be written."""
    check_name(task, "task")
    _refuse(text, file, line, task, inst_id)
    person, now = who(project), utcnow()

    def mutate(record: RunRecord, inst: InstanceRecord) -> Comment:
        made = model.new_comment(inst["attempt"], text, file, line, person, now)
        model.add_comment(inst, made)
        return made

    record, made = project.store.update_instance(task, inst_id, mutate)
    inst = model.find_instance(record, inst_id)
    commit = project.tip(inst) or inst["head"]
    warning = project.mirror_notes(record, [(commit, provenance.comment_note(record, inst, made, commit))],
                                   f"comment {inst_id}") if commit else None
    out: CommentResult = {"task": task, "run_id": record["run_id"], "instance": inst_id, "comment": made,
                          "commit": commit, "comments": len(inst.get("comments") or [])}
    if warning:
        out["warning"] = warning
    return out
