"""Crash recovery: ``validate`` reports what is inconsistent, ``recover``
repairs what can be decided safely.

Both verbs start from one read-only *inspection* of a run against what git,
the files under ``<common>/parallel/`` and the operating system hold now.  An
inspection yields ``Finding``s: a stable code, a severity (``error`` makes
``validate`` exit 1, ``warning`` does not), a message saying what was found
and a ``fix`` saying what to run.  Every finding recover would repair is an
error, so a clean ``validate`` means ``recover`` has nothing to do; warnings
are what recover leaves alone and nothing is broken by (a lock some live git
may hold, local changes in the base worktree).  A finding that ``recover`` acts on carries
a ``Repair``; one that recover would have to act on but cannot decide safely
carries a ``refusal`` instead.  Findings recover does not own (a tampered
evidence pack, a failed instance that needs an explicit ``retry``) carry
neither and are listed as left for the user.

``recover`` is all or nothing at the decision level: it inspects under the
project lock, and if any finding is refused it raises
``PARALLEL_RECOVERY_REFUSED`` naming every one and changes nothing.
Otherwise the repairs run in a fixed order of phases, each step idempotent,
so that a ``recover`` killed half-way is finished by the next one:

1. stale git lock files are removed (later steps would trip over them);
2. git-side work that keeps commits: leftover changes of a dead agent
   committed, tips archived, half-made worktrees completed or rolled back,
   interrupted cleanups finished;
3. the base branch's worktree is moved from the previous tree to the landed
   one when a merge crashed between moving the ref and updating it;
4. every record change in **one** store update, compare-and-swap on the
   ``run_revision`` read at inspection;
5. every missing note in **one** notes commit, computed from the records as
   they are after step 4;
6. files that only described an unfinished step (the merge intent) go last,
   because until the record says merged they are what proves the landing.

Every step is appended to ``<common>/parallel/audit/<run_id>.jsonl``
(``validated`` before anything changes, one ``repaired`` per step,
``refused`` or ``idempotent_noop`` otherwise) under a recovery id derived
from ``run_id`` and ``run_revision``, so the same state always gets the same
id.  A second ``recover`` finds nothing to repair, logs ``idempotent_noop``
and changes nothing else.

What recover decides, and why:

* An instance ``running`` whose process is gone becomes ``succeeded`` only if
  its tip has fresh, complete, passing evidence (the lifecycle write was
  lost); otherwise ``failed`` with ``error: "process gone: ..."``.  The
  agent's commits stay on its branch and become the record's ``head``; with
  ``commit_leftovers`` its uncommitted changes are committed first, as the
  runner would have.  A live process is never touched.
* A spawn that never finished (revision 1, every instance pending, some
  branch or worktree missing) is completed when at least one worktree is
  usable, and rolled back otherwise: tips that differ from the base are
  archived, what exists is removed, and the record is kept as ``aborted`` so
  that ``spawn`` can start again.  A half-made worktree folder is removed only
  if every file in it is identical to the base commit's, so nobody's edits
  are deleted.
* The base branch holding the winners (the merge intent's landing, or every
  winner commit reachable from the base) makes the record ``merged``, with
  the landed commit found from the intent, or for a plain ``git merge`` as the
  oldest commit on the base's first-parent line that holds every winner.
  Cleanup is not run: it removes worktrees and stays an explicit verb.
* A pick record or evidence pack that was written but never bound to the run
  record (a crash between the two writes) is bound, if it still validates
  against the record and the branch tip exactly as the interrupted verb
  would have checked it.
* Failed and aborted instances are never retried.
"""

from __future__ import annotations

from gitflow_parallel.recovery.scan import Finding, Repair, Scan, missing_notes, recovery_id, required_notes


__all__ = ["Finding", "Repair", "Scan", "missing_notes", "recover", "recovery_id", "required_notes", "validate"]
