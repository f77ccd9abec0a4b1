#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs a test program against the real CUDA driver: `make check` lists tests/real/NAME.real,
# and this runs the program NAME of tests/*/ (tests/api/NAME, tests/lifecycle/NAME, ...) with
# CUPOOL_DRIVER_PATH unset; a test that is a script, tests/*/NAME.sh of the source tree, is run
# by the shell. The program itself exits 77 (SKIP) when no GPU answers, so a
# machine without one reports SKIP, never PASS.
name=$(basename "$1" .real)
builddir=${CUPOOLTEST_BUILDDIR:-.}
unset CUPOOL_DRIVER_PATH
CUPOOLTEST_REAL=1
export CUPOOLTEST_REAL
for prog in "$builddir"/tests/*/"$name"; do
    [ -f "$prog" ] && exec "$prog"
done
for script in "${srcdir:-.}"/tests/*/"$name.sh"; do
    [ -f "$script" ] && exec ${SHELL:-/bin/sh} "$script"
done
echo "real-driver.sh: no program $name in $builddir/tests/*/" >&2
exit 99
