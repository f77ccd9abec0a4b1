#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package of the build tree, run by tests/python/check_python.py three times:
#  1. through the C extension (cupool._cupool);
#  2. through ctypes, forced with CUPOOL_PY_FORCE_CTYPES=1;
#  3. through ctypes because the package has no extension (the fallback on ImportError).
# The package is put together in a temporary directory: python/cupool/*.py of the source tree
# and the extension libtool built. SKIP (77) where configure built no Python package, and in
# sanitizer builds (the interpreter would need the sanitizer's runtime preloaded).
# On the simulated driver by default (CUPOOL_DRIVER_PATH); tests/real/check_python.real runs it
# on the real one.
set -u
top=$(cd "${srcdir:-.}" && pwd)
builddir=$(cd "${CUPOOLTEST_BUILDDIR:-.}" && pwd)
py=${CUPOOLTEST_PYTHON:-}
if [ -z "$py" ] || [ "$py" = : ]; then
    echo "check_python: no Python package was built (configure found no python3 with its headers)"
    exit 77
fi
if [ -n "${CUPOOLTEST_SANITIZER:-}" ]; then
    echo "check_python: sanitizer build ($CUPOOLTEST_SANITIZER): not run under Python"
    exit 77
fi
ext="$builddir/python/cupool/.libs/_cupool.so"
[ -f "$ext" ] || { echo "check_python: $ext was not built"; exit 99; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/ext" "$tmp/ext/cupool" "$tmp/noext" "$tmp/noext/cupool"
for f in "$top"/python/cupool/*.py; do
    ln -s "$f" "$tmp/ext/cupool/" && ln -s "$f" "$tmp/noext/cupool/" || exit 99
done
ln -s "$ext" "$tmp/ext/cupool/_cupool.so" || exit 99

PYTHONDONTWRITEBYTECODE=1
CUPOOL_PY_LIBRARY="$builddir/.libs/libcupool.so.0"
export PYTHONDONTWRITEBYTECODE CUPOOL_PY_LIBRARY
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
