#!/bin/sh
# SPDX-License-Identifier: MIT
# cupool's Python objects used by CuPy, PyTorch and cuda.core (tests/python/check_frameworks.py),
# through the C extension of the build tree, on the real driver only: the frameworks call the
# GPU's own driver, so the simulated driver's handles mean nothing to them. make check lists it
# as tests/real/check_frameworks.real. SKIP (77) where no Python package was built, in
# sanitizer builds, where no GPU answers, and where none of the three frameworks imports.
set -u
if [ -z "${CUPOOLTEST_REAL:-}" ]; then
    echo "check_frameworks: the frameworks need the real driver: SKIP"
    exit 77
fi
name=check_frameworks
. "${srcdir:-.}/tests/python/package.sh"
PYTHONPATH="$tmp/ext" "$py" "$top/tests/python/check_frameworks.py"
