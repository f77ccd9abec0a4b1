#!/bin/sh
# SPDX-License-Identifier: MIT
# The documentation states what the code and the tests hold:
#  - every test docs/reliability.md names for a guarantee exists (a START_TEST of that name in
#    a suite, or a suite tests/*/NAME.c);
#  - every CUPOOL_* variable of src/base/config.c's table is documented in docs/environment.md;
#  - the limits the library cannot lift are stated where a user reads them: what a release can
#    and cannot catch (docs/reliability.md), that cupool is not async-signal-safe (cupool(3)),
#    the promise an explicit pool can be made with (cupool_stream_pool_get(3));
#  - every public function has a manual page (its own, or an alias whose page names it).
set -u
top=${srcdir:-.}
status=0
fail() { echo "check_docs: $*"; status=1; }

names=$(sed -n 's/^| [0-9][0-9]* |.*| \([^|]*\) |$/\1/p' "$top/docs/reliability.md" |
        grep -o '`[A-Za-z0-9_./]*`' | tr -d '`' | sort -u)
[ -n "$names" ] || fail "no tests found in the guarantees table of docs/reliability.md"
for n in $names; do
    case "$n" in
    check_*) ls "$top"/tests/*/"$n.c" >/dev/null 2>&1 || fail "docs/reliability.md names suite $n: no tests/*/$n.c" ;;
    */*|CUPOOL_*|*.*) ;; # paths, variables
    *) grep -q "START_TEST($n)" "$top"/tests/*/*.c || fail "docs/reliability.md names test $n: not found in tests/*/" ;;
    esac
done

for v in $(grep -o '{"CUPOOL_[A-Z_]*"' "$top/src/base/config.c" | tr -d '{"'); do
    grep -q "\`$v\`" "$top/docs/environment.md" || fail "$v is not documented in docs/environment.md"
done

grep -q '^## What a release can and cannot catch' "$top/docs/reliability.md" ||
    fail "docs/reliability.md does not say what a release can and cannot catch"
grep -q 'not async-signal-safe' "$top/docs/man/cupool.3" ||
    fail "cupool(3) does not say that cupool is not async-signal-safe"
grep -q 'CUPOOL_POOL_CONTEXT_OUTLIVES' "$top/docs/man/cupool_stream_pool_get.3" ||
    fail "cupool_stream_pool_get(3) does not document CUPOOL_POOL_CONTEXT_OUTLIVES"
# Every public function has a manual page: its own docs/man/NAME.3, or an alias NAME:PAGE in
# Makefile.am's man_aliases whose PAGE names it in its NAME section.
api=$(grep -h 'CUPOOL_API\|CUPOOL_RT_API' "$top/include/cupool.h" "$top/include/cupool_runtime.h" |
      grep -o 'cupool_[A-Za-z0-9_]*(' | tr -d '(' | sort -u)
[ -n "$api" ] || fail "no public functions found in include/"
for f in $api; do
    [ -f "$top/docs/man/$f.3" ] && continue
    page=$(sed -n "s/^[[:space:]]*$f:\([A-Za-z0-9_]*\).*/\1/p" "$top/Makefile.am" | head -n 1)
    if [ -z "$page" ]; then
        fail "$f has no manual page: add docs/man/$f.3 or an alias in Makefile.am's man_aliases"
    elif ! sed -n '/^\.SH NAME/,/^\.SH/p' "$top/docs/man/$page.3" | grep -q "\b$f\b"; then
        fail "$f's alias page $page.3 does not name it in its NAME section"
    fi
done

[ $status -eq 0 ] && echo "check_docs: $(echo "$names" | wc -w) names of docs/reliability.md, every variable, the stated limits, a manual page per function ($(echo "$api" | wc -w)): consistent"
exit $status
