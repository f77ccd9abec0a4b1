#!/bin/sh
# SPDX-License-Identifier: MIT
# The release tarball is a whole source:
#  - every script, file and document README.md's commands use or link is in the source tree
#    (run by make distcheck from the unpacked tarball, this proves the tarball carries them);
#  - in a git checkout, every file git tracks (but .gitignore) goes into the tarball
#    (make distdir into a temporary directory, compared with git ls-files).
set -u
top=${srcdir:-.}
status=0
fail() { echo "check_dist: $*"; status=1; }

for f in autogen.sh LICENSE NEWS $(grep -o 'scripts/[A-Za-z0-9_-]*' "$top/README.md" | sort -u); do
    [ -e "$top/$f" ] || fail "README.md uses $f: not in the source tree"
done
for f in $(grep -o '](\([^)#]*\))' "$top/README.md" | sed 's/^](//; s/)$//' | grep -v '://' |
           sort -u); do
    [ -e "$top/$f" ] || fail "README.md links $f: not in the source tree"
done

if [ -e "$top/.git" ] && command -v git >/dev/null 2>&1; then
    tmp=$(mktemp -d) || exit 99
    trap 'rm -rf "$tmp"' EXIT
    if ${MAKE:-make} -s distdir distdir="$tmp/d" >"$tmp/log" 2>&1; then
        git -C "$top" ls-files >"$tmp/tracked"
        while read -r f; do
            case "$f" in .gitignore) continue ;; esac
            [ -e "$tmp/d/$f" ] || echo "$f"
        done <"$tmp/tracked" >"$tmp/missing"
        [ -s "$tmp/missing" ] &&
            fail "tracked but not in the tarball (add to Makefile.am): $(tr '\n' ' ' <"$tmp/missing")"
        echo "check_dist: $(wc -l <"$tmp/tracked") tracked files, all in the tarball but those named"
    else
        cat "$tmp/log"
        fail "make distdir failed"
    fi
else
    echo "check_dist: not a git checkout: the tarball's own files checked only"
fi
[ $status -eq 0 ] && echo "check_dist: what README.md uses is here"
exit $status
