#!/bin/sh
# SPDX-License-Identifier: MIT
# The drop-in names have one list, src/dropin/names.h; everything that names them agrees:
#  - include/cupool_compat.h's generated blocks are what scripts/dropin-names writes;
#  - the --wrap options of the test build (Makefile.am) and of docs/drop-in.md name exactly
#    the list's link-level names;
#  - the built libcupool.so has a __wrap_ alias for each of those names and no other;
#  - the built libcupool_preload.so exports every name of the list.
set -u
top=${srcdir:-.}
build=${CUPOOLTEST_BUILDDIR:-.}
gen="$top/scripts/dropin-names"
list="$top/src/dropin/names.h"
status=0
fail() { echo "check_dropin_names: $*"; status=1; }

block() { sed -n "/BEGIN $1:/,/END $1 /{/BEGIN $1:/d;/END $1 /d;p}" "$top/include/cupool_compat.h"; }
for b in compat-driver compat-runtime; do
    want=$(sh "$gen" "$b" "$list") || fail "scripts/dropin-names $b failed"
    [ -n "$want" ] || fail "scripts/dropin-names $b wrote nothing"
    [ "$(block "$b")" = "$want" ] ||
        fail "include/cupool_compat.h's $b block differs from 'scripts/dropin-names $b'"
done

link=$(sh "$gen" wrap "$list" | sort)
[ "$(echo "$link" | wc -l)" -ge 12 ] || fail "fewer link-level names than the twelve expected"
wraps() { grep -o -- '--wrap=[A-Za-z0-9_]*' "$1" | sed 's/--wrap=//' | grep -vx NAME | sort -u; }
[ "$(wraps "$top/Makefile.am")" = "$link" ] ||
    fail "Makefile.am's --wrap options differ from the list's link-level names"
[ "$(wraps "$top/docs/drop-in.md")" = "$link" ] ||
    fail "docs/drop-in.md's --wrap options differ from the list's link-level names"

syms() { nm -D --defined-only "$1" 2>/dev/null | awk '{print $3}'; }
lib="$build/.libs/libcupool.so"
pre="$build/.libs/libcupool_preload.so"
if [ -f "$lib" ]; then
    [ "$(syms "$lib" | sed -n 's/^__wrap_//p' | sort)" = "$link" ] ||
        fail "libcupool.so's __wrap_ aliases differ from the list's link-level names"
else
    fail "no $lib (run make first)"
fi
if [ -f "$pre" ]; then
    exported=$(syms "$pre")
    for n in $(sed -n 's/^ *X(\([A-Za-z0-9_]*\),.*/\1/p' "$list"); do
        echo "$exported" | grep -qx "$n" || fail "libcupool_preload.so does not export $n"
    done
else
    fail "no $pre (run make first)"
fi
[ $status -eq 0 ] && echo "check_dropin_names: $(echo "$link" | wc -l) link-level names, the compat header, the --wrap lists, the built aliases and exports: consistent"
exit $status
