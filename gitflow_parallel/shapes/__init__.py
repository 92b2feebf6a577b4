"""The shapes of what git-parallel writes and prints, declared once.

``records``: the run, instance, pick and merge records and the field types
they check; ``pack``: the evidence pack ``check`` writes; ``results``: what
the verbs print with ``--json`` that several modules build or render.  Each
is a TypedDict: mypy checks every write against it, and ``schema.check``
checks every load against the same declaration (``state/store`` for run
records, ``state/picks`` for pick records), so a shape is never written
twice.  ``model`` re-exports the record shapes beside the mutations that
change them; the frozen config's shape is ``config_schema.FrozenConfig``; a
result one verb alone builds is declared beside it (docs/formats.md lists
where each lives).

``Required`` fields are those every version ever wrote: a record without
one is refused.  ``NotRequired`` ones came later (a record from before them
still loads) or are written only in some states.  Keys no declaration names
are kept as they are, so a record written by a newer version loads too.
"""
