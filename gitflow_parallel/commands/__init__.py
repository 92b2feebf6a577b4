"""One module per verb.

Each command reads top-down: check the input, lock and load, decide, act on
git, record through ``model``, note through ``provenance``, return a result
for the CLI to render.  A command never imports another command: work two
verbs share lives in a library module below (``git/``, ``state/``,
``proc/``, ``judge/``, ``recovery/``).  The CLI is the only importer of this
package; ``tests/test_layout.py`` holds both rules."""
