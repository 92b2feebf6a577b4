# reference-transaction: git is about to move refs.  Only the "prepared" state
# can abort the transaction ("committed" and "aborted" are news), and only an
# update of a live run's base ref can bring instance commits onto a base, so
# every other transaction (each commit, checkout, fetch, note) ends in sh.
# stdin holds one "<old> <new> <ref>" line per update and can be read once,
# so when a legacy hook needs it too it is kept in a temporary file.

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
    gp_hits=$(grep -F "$@")
fi
[ -n "$gp_hits" ] || exit 0
gp_sel=
while read -r gp_old gp_new gp_ref; do
    case "$gp_bases" in
        *" $gp_ref "*) gp_sel="$gp_sel$gp_old $gp_new $gp_ref
" ;;
    esac
done <<EOF
$gp_hits
EOF
[ -n "$gp_sel" ] || exit 0
printf '%s' "$gp_sel" | gp_python reference-transaction --common "$GP_COMMON" -- "$gp_state" || exit 1
exit 0
