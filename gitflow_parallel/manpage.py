"""Renders the git-parallel(1) manual page from the click commands.

git turns ``git parallel --help`` into ``man git-parallel``, so the package
ships ``man/git-parallel.1`` (installed to ``share/man/man1``, which ``man``
finds beside the ``bin`` folder on PATH).  The page is generated from the
same help texts as ``-h``, so the two cannot drift; a test compares the
committed page with a fresh rendering byte for byte.

    python -m gitflow_parallel.manpage > man/git-parallel.1
"""

from __future__ import annotations

import sys

import click


def _roff(text: str) -> str:
    out = text.replace("\\", "\\\\").replace("-", "\\-")
    lines = []
    for line in out.splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in text.strip().split("\n\n") if p.strip()]


def _options(ctx: click.Context, cmd: click.Command) -> list[str]:
    out = []
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option):
            continue  # arguments are in the usage line (and click versions differ here)
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        out += [".TP", f"\\fB{_roff(names)}\\fR", _roff(help_text or "")]
    return out


def _section(ctx: click.Context, name: str, cmd: click.Command, prefix: str) -> list[str]:
    full = f"{prefix} {name}".strip()
    sub = click.Context(cmd, info_name=name, parent=ctx)
    usage = " ".join(cmd.collect_usage_pieces(sub))
    lines = [".SS " + _roff(full), f"\\fB{_roff('git parallel ' + full)}\\fR {_roff(usage)}"]
    for para in _paragraphs(cmd.help or ""):
        lines += [".PP", _roff(para)]
    lines += _options(sub, cmd)
    if isinstance(cmd, click.Group):
        for child_name in cmd.list_commands(sub):
            child = cmd.get_command(sub, child_name)
            if child is not None and not child.hidden:
                lines += _section(sub, child_name, child, full)
    return lines


def render() -> str:
    from gitflow_parallel import __version__
    from gitflow_parallel.cli import main_group

    ctx = click.Context(main_group, info_name="git parallel")
    lines = [
        f'.TH GIT\\-PARALLEL 1 "" "git-parallel {__version__}" "Git Manual"',
        ".SH NAME",
        "git\\-parallel \\- run several attempts at one task in parallel worktrees and merge the proven winner",
        ".SH SYNOPSIS",
        "\\fBgit parallel\\fR \\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
    ]
    for para in _paragraphs(main_group.help or ""):
        lines += [".PP", _roff(para)]
    lines += [".PP", "Every command but \\fBhelp\\fR takes \\fB\\-\\-json\\fR and then prints one JSON object.",
              ".SH COMMANDS"]
    for name in main_group.list_commands(ctx):
        cmd = main_group.get_command(ctx, name)
        if cmd is not None and not cmd.hidden:
            lines += _section(ctx, name, cmd, "")
    lines += [
        ".SH EXIT STATUS",
        "0 done; 1 refused or blocked (\\fBerror[CODE]:\\fR message and \\fBhint:\\fR on stderr); "
        "2 usage error; 3 unexpected internal error (the message names the traceback log).",
        ".SH FILES",
        "Everything of git\\-parallel's own lives in \\fI<git common dir>/parallel/\\fR; "
        "archive refs under \\fIrefs/parallel/archive/\\fR; notes on \\fIrefs/notes/parallel\\fR. "
        "docs/formats.md in the source documents every file and format; docs/ has the whole reference.",
        ".SH SEE ALSO",
        "\\fBgit\\-worktree\\fR(1), \\fBgit\\-notes\\fR(1), \\fBgithooks\\fR(5)",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
