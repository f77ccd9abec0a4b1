#!/bin/sh
# SPDX-License-Identifier: MIT
# The sources' layers depend one way, base <- pool <- graph <- dropin (docs/design.md,
# "Layout"):
#  - no file of src/LAYER includes a header of a layer above it;
#  - no object of a layer refers to a cupool symbol that only a layer above it defines (the
#    built objects of libcupool_core, read with nm): hooks go up only through base/layer.h.
set -u
top=${srcdir:-.}
build=${CUPOOLTEST_BUILDDIR:-.}
layers="base pool graph dropin"
status=0
fail() { echo "check_layers: $*"; status=1; }
rank() { n=0; for l in $layers; do [ "$l" = "$1" ] && { echo $n; return; }; n=$((n + 1)); done; echo 99; }

for l in $layers; do
    r=$(rank "$l")
    for f in "$top/src/$l"/*.[ch]; do
        for up in $(sed -n 's/^#include "\([a-z]*\)\/.*/\1/p' "$f" | sort -u); do
            [ "$(rank "$up")" -le "$r" ] || fail "src/$l/$(basename "$f") includes a header of $up, a layer above"
        done
    done
done

objects() { # the core objects of one layer, from its sources (stale objects are ignored):
    # the plain ones, or the PIC ones where only those are built (--disable-static)
    for c in "$top/src/$1"/*.c; do
        n="libcupool_core_la-$(basename "$c" .c).o"
        for o in "$build/src/$1/$n" "$build/src/$1/.libs/$n"; do
            [ -f "$o" ] && { echo "$o"; break; }
        done
    done
}
below=""
checked=0
for l in $layers; do
    objs=$(objects "$l")
    [ -n "$objs" ] || { [ "$l" = dropin ] || fail "no objects of src/$l under $build (run make first)"; continue; }
    below="$below $objs"
    defined=$(nm --defined-only $below 2>/dev/null | awk 'NF == 3 {print $3}' | sort -u)
    for o in $objs; do
        for s in $(nm -u "$o" | awk '{print $2}' | grep '^cupool' | sort -u); do
            echo "$defined" | grep -qx "$s" ||
                fail "$(basename "$o" .o | sed 's/^libcupool_core_la-//').c of src/$l uses $s, defined only above it"
            checked=$((checked + 1))
        done
    done
done
[ $status -eq 0 ] && echo "check_layers: includes one way; $checked references to cupool symbols, each to its own layer or one below"
exit $status
