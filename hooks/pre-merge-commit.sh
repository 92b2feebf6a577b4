# pre-merge-commit: git is about to record a merge commit (not a fast-forward,
# not a conflicted merge; those reach reference-transaction or `git commit`).
# Refused unless every instance commit it brings in comes with the picked
# winner's exact commit and fresh, passing evidence.  Python decides; sh only
# makes sure there is a live run at all.

gp_legacy "$@" || exit $?
# git-parallel's own git commands are never second-guessed.
gp_internal && exit 0
gp_common
[ -f "$GP_LIVE" ] || exit 0
gp_python pre-merge-commit --common "$GP_COMMON" -- "$@" || exit 1
exit 0
