# post-checkout: after a branch checkout (also `git worktree add` and
# `git clone`) onto a live instance branch, report the instance's status and
# evidence in one line and append a checkout event.  Reporting only: the
# checkout already happened, and git would turn our exit status into its own,
# so after the legacy hook this always exits 0.

gp_legacy "$@" || exit $?
# $3 is 1 for a branch checkout, 0 for `git checkout -- FILE`.
[ "$3" = 1 ] || exit 0
gp_internal && exit 0
gp_common
[ -f "$GP_LIVE" ] || exit 0
# Which branch is HEAD on now?  Read this worktree's HEAD file (git gives
# linked worktrees GIT_DIR; the main one has .git, a folder or a "gitdir:"
# file), which spares a git process on every checkout while a run is live;
# ask git where that is not plain (a reftable HEAD names refs/heads/.invalid).
gp_head=
if [ -n "${GIT_DIR-}" ]; then
    gp_gitdir=$GIT_DIR
elif [ -d .git ]; then
    gp_gitdir=.git
elif [ -f .git ]; then
    read -r gp_key gp_gitdir < .git 2>/dev/null || gp_gitdir=
else
    gp_gitdir=
fi
if [ -n "$gp_gitdir" ] && read -r gp_key gp_head < "$gp_gitdir/HEAD" 2>/dev/null; then
    [ "$gp_key" = "ref:" ] || exit 0  # detached: no instance branch
else
    gp_head=
fi
case "$gp_head" in
    ""|refs/heads/.invalid) gp_head=$(git symbolic-ref -q HEAD 2>/dev/null) || exit 0 ;;
esac
gp_found=
{
    while read -r gp_kind gp_ref gp_rest; do
        if [ "$gp_kind" = branch ] && [ "$gp_ref" = "$gp_head" ]; then
            gp_found=1
            break
        fi
    done < "$GP_LIVE"
} 2>/dev/null
[ -n "$gp_found" ] || exit 0
gp_python post-checkout --common "$GP_COMMON" --branch "$gp_head" -- "$@" || :
exit 0
