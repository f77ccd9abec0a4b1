#!/bin/sh
# SPDX-License-Identifier: MIT
# cupool's Python objects used by CuPy, PyTorch and cuda.core (tests/python/check_frameworks.py),
# through the C extension of the build tree, on the real driver only: the frameworks call the
# GPU's own driver, so the simulated driver's handles mean nothing to them. make check lists it
# as tests/real/check_frameworks.real. SKIP (77) where no Python package was built, in
# sanitizer builds, where no GPU answers, and where none of the three frameworks imports.
set -u
top=$(cd "${srcdir:-.}" && pwd)
builddir=$(cd "${CUPOOLTEST_BUILDDIR:-.}" && pwd)
py=${CUPOOLTEST_PYTHON:-}
if [ -z "$py" ] || [ "$py" = : ] || [ -n "${CUPOOLTEST_SANITIZER:-}" ]; then
    echo "check_frameworks: no Python package in this build (or a sanitizer build): SKIP"
    exit 77
fi
if [ -z "${CUPOOLTEST_REAL:-}" ]; then
    echo "check_frameworks: the frameworks need the real driver: SKIP"
    exit 77
fi
ext="$builddir/python/cupool/.libs/_cupool.so"
[ -f "$ext" ] || { echo "check_frameworks: $ext was not built"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/cupool" || exit 99
for f in "$top"/python/cupool/*.py "$ext"; do ln -s "$f" "$tmp/cupool/" || exit 99; done
PYTHONDONTWRITEBYTECODE=1 CUPOOL_PY_LIBRARY="$builddir/.libs/libcupool.so.0" PYTHONPATH="$tmp" \
    "$py" "$top/tests/python/check_frameworks.py"
