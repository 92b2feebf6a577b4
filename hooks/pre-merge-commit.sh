# pre-merge-commit: git is about to record a merge commit (not a fast-forward,
# not a conflicted merge; those reach reference-transaction or `git commit`).
# Refused unless every instance commit it brings in comes with the picked
# winner's exact commit and fresh, passing evidence, and nothing of a
# finished run's losers.  Python decides while a run is live; sh makes sure
# there is a run at all, and when only finished ones are left, lets through
# a merge that brings in none of their losers.

gp_legacy "$@" || exit $?
# git-parallel's own git commands are never second-guessed.
gp_internal && exit 0
gp_common
[ -f "$GP_LIVE" ] || exit 0
# When every run the index lists is finished, sh decides a merge that brings
# in none of their losers (gp_done_clear).  The merge heads are what git
# exports as GITHEAD_<oid>; without them, Python finds them.
set -f
gp_read_done
if [ "$GP_LIVE_BASES" = " " ]; then
    gp_heads=
    while IFS= read -r gp_line; do
        case "$gp_line" in
            "export GITHEAD_"*) gp_head=${gp_line#export GITHEAD_} ;;
            "declare -x GITHEAD_"*) gp_head=${gp_line#declare -x GITHEAD_} ;;
            *) continue ;;
        esac
        gp_head=${gp_head%%=*}
        case "$gp_head" in
            ""|*[!0-9a-f]*) ;;
            *) gp_heads="$gp_heads $gp_head" ;;
        esac
    done <<GP_ENV
$(export -p)
GP_ENV
    # $gp_heads is split on purpose.
    [ -n "$gp_heads" ] && gp_done_clear HEAD $gp_heads && exit 0
fi
gp_python pre-merge-commit --common "$GP_COMMON" -- "$@" || exit 1
exit 0
