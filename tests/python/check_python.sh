#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package of the build tree, run by tests/python/check_python.py three times:
#  1. through the C extension (cupool._cupool);
#  2. through ctypes, forced with CUPOOL_PY_FORCE_CTYPES=1;
#  3. through ctypes because the package has no extension (the fallback on ImportError).
# The package is put together in a temporary directory (tests/python/package.sh). SKIP (77)
# where configure built no Python package, and in sanitizer builds.
# On the simulated driver by default (CUPOOL_DRIVER_PATH); tests/real/check_python.real runs it
# on the real one.
set -u
name=check_python
. "${srcdir:-.}/tests/python/package.sh"
run() { # BACKEND PACKAGE-DIR [VAR=VALUE]
    expect=$1 dir=$2
    shift 2
    env "$@" PYTHONPATH="$dir" CUPOOLTEST_EXPECT_BACKEND="$expect" "$py" "$top/tests/python/check_python.py"
}
run extension "$tmp/ext"
rc=$?
[ $rc -eq 0 ] || exit $rc
run ctypes "$tmp/ext" CUPOOL_PY_FORCE_CTYPES=1 || exit $?
run ctypes "$tmp/noext" || exit $?
echo "check_python: passed through the extension, through forced ctypes and through the fallback"
