#!/bin/sh
# SPDX-License-Identifier: MIT
# The documentation states what the code and the tests hold:
#  - every test docs/reliability.md names for a guarantee exists (a START_TEST of that name in
#    a suite, or a suite tests/*/NAME.c);
#  - every CUPOOL_* variable of src/base/config.c's table is documented in docs/environment.md;
#  - the limits the library cannot lift are stated where a user reads them: what a release can
#    and cannot catch (docs/reliability.md), that cupool is not async-signal-safe (cupool(3)),
#    the promise an explicit pool can be made with (cupool_stream_pool_get(3)).
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
[ $status -eq 0 ] && echo "check_docs: $(echo "$names" | wc -w) names of docs/reliability.md, every variable, the stated limits: consistent"
exit $status
