# reference-transaction: git is about to move refs.  Only the "prepared" state
# can abort the transaction ("committed" and "aborted" are news), and only an
# update of a live run's base ref can bring instance commits onto a base, so
# every other transaction (each checkout, fetch, note, commit elsewhere) ends
# in sh.  So does an ordinary commit or amend on a live base (gp_plain): one
# `git rev-list`, no Python.  stdin holds one "<old> <new> <ref>" line per
# update and can be read once, so when a legacy hook needs it too it is kept
# in a temporary file.

# Does the update of the live base $3 from $1 to $2 bring in $2 alone, a
# commit of no live run on that base?  Then `git parallel _hook` would let it
# pass, so sh does.  One walk answers it: git lists $2 and $1 with their
# parents, leaving out the history of $1's parents and of every instance
# branch and archived attempt of those runs.  It passes when nothing but $2
# and $1 is listed, $2 is (so $2 is no instance commit: none lies above it),
# and $2's only parent is $1 (a commit) or one of $1's parents (an amend):
# then $2 is all the update brings in, unless its patch is one a losing
# attempt made (the index's "lost" lines of this base: a cherry-pick, a
# squash), which two more git processes tell, and only while there are such
# lines.  Anything else - a fast-forward to an instance commit, a merge, a
# reset, a forced update with no old value, a loser's patch - goes to
# Python, which reads the records.
gp_plain() {
    case "$1" in *[!0]*) ;; *) return 1 ;; esac
    gp_globs=
    gp_lost=
    {
        while read -r gp_kind gp_ref gp_task gp_run gp_rest; do
            if [ "$gp_kind" = base ] && [ "$gp_ref" = "$3" ]; then
                gp_globs="$gp_globs --glob=refs/heads/parallel/$gp_task/* --glob=refs/parallel/archive/$gp_run/*"
            elif [ "$gp_kind" = lost ] && [ "$gp_ref" = "$3" ]; then
                gp_lost="$gp_lost ${gp_rest%% *}"
            fi
        done < "$GP_LIVE"
    } 2>/dev/null
    # -n 3: a third commit listed is enough to know it is not this case.
    # $gp_globs is split on purpose (set -f is on: no pathname expansion).
    gp_walk=$(git rev-list --parents -n 3 "$2" "$1" --not "$1^@" $gp_globs -- 2>/dev/null) || return 1
    gp_parent=
    gp_extra=x
    gp_olds=
    while read -r gp_commit gp_first gp_more; do
        if [ "$gp_commit" = "$2" ]; then
            gp_parent=$gp_first
            gp_extra=$gp_more
        elif [ "$gp_commit" = "$1" ]; then
            gp_olds=" $gp_first $gp_more "
        elif [ -n "$gp_commit" ]; then
            return 1
        fi
    done <<GP_WALK
$gp_walk
GP_WALK
    [ -n "$gp_parent" ] && [ -z "$gp_extra" ] || return 1
    if [ "$gp_parent" != "$1" ]; then
        case "$gp_olds" in
            *" $gp_parent "*) ;;
            *) return 1 ;;
        esac
    fi
    [ -n "$gp_lost" ] || return 0
    gp_patch=$(git diff-tree -p --no-ext-diff --no-textconv --no-color "$2" -- 2>/dev/null | git patch-id --stable 2>/dev/null)
    case "$gp_lost " in
        *" ${gp_patch%% *} "*) return 1 ;;
    esac
    return 0
}

gp_state=$1
gp_in=
if gp_has_legacy; then
    if gp_in=$(mktemp "${TMPDIR:-/tmp}/git-parallel-rt.XXXXXX" 2>/dev/null); then
        trap 'rm -f "$gp_in"' EXIT
        trap 'exit 1' HUP INT TERM
        cat > "$gp_in"
        gp_legacy "$@" < "$gp_in" || exit $?
    else
        # No place to keep stdin: the legacy hook gets it, our check is skipped.
        echo "git-parallel: warning: cannot create a temporary file; the $GP_HOOK check is skipped" >&2
        gp_legacy "$@"
        exit $?
    fi
fi
[ "$gp_state" = prepared ] || exit 0
gp_internal && exit 0
gp_common
[ -f "$GP_LIVE" ] || exit 0

# The live base refs: as grep patterns " <ref>" (the ref ends each stdin
# line; a longer ref with the same start is weeded out below) and as one
# space-separated list for an exact match.
set -f
set --
gp_bases=" "
{
    while read -r gp_kind gp_ref gp_rest; do
        if [ "$gp_kind" = base ]; then
            set -- "$@" -e " $gp_ref"
            gp_bases="$gp_bases$gp_ref "
        fi
    done < "$GP_LIVE"
} 2>/dev/null
[ "$#" -gt 0 ] || exit 0
if [ -n "$gp_in" ]; then
    gp_hits=$(grep -F "$@" < "$gp_in")
else
    # A commit's transaction is a line or two: those are read here (sh reads
    # a pipe a byte at a time, so not more), sparing a grep.  A longer one,
    # such as a fetch's, is filtered by grep, the lines read so far included.
    gp_hits=
    gp_count=0
    while [ "$gp_count" -lt 4 ] && { IFS= read -r gp_line || [ -n "$gp_line" ]; }; do
        gp_hits="$gp_hits$gp_line
"
        gp_count=$((gp_count + 1))
        gp_line=
    done
    if [ "$gp_count" -ge 4 ]; then
        gp_hits=$(printf '%s' "$gp_hits" | grep -F "$@"; grep -F "$@")
    fi
fi
[ -n "$gp_hits" ] || exit 0
gp_read_done
# Python sees every update of a live base ref in the transaction, but starts
# only if one of them may bring instance commits in: not for one that moves
# nothing or deletes the ref (Python lets both pass), nor for a gp_plain one.
gp_sel=
gp_ask=
while read -r gp_old gp_new gp_ref; do
    case "$gp_bases" in
        *" $gp_ref "*) ;;
        *) continue ;;
    esac
    gp_sel="$gp_sel$gp_old $gp_new $gp_ref
"
    [ -n "$gp_ask" ] && continue
    [ "$gp_old" = "$gp_new" ] && continue
    case "$gp_new" in *[!0]*) ;; *) continue ;; esac
    gp_this=$gp_ref  # (gp_plain reads the index into gp_ref)
    gp_plain "$gp_old" "$gp_new" "$gp_ref" && continue
    # A base only finished runs are on: sh decides an update that brings in
    # none of their losers (gp_done_clear; an update with no old value goes
    # to Python, which reads the ref).
    case "$GP_LIVE_BASES" in
        *" $gp_this "*) gp_ask=1; continue ;;
    esac
    case "$gp_old" in *[!0]*) ;; *) gp_ask=1; continue ;; esac
    gp_done_clear "$gp_old" "$gp_new" || gp_ask=1
done <<GP_HITS
$gp_hits
GP_HITS
[ -n "$gp_ask" ] || exit 0
printf '%s' "$gp_sel" | gp_python reference-transaction --common "$GP_COMMON" -- "$gp_state" || exit 1
exit 0
