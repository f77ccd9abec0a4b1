# SPDX-License-Identifier: MIT
# Sourced by the Python package's test scripts, with `name` set (the script's name, for
# messages): puts the build tree's package together in a temporary directory (removed at exit)
# and sets top, builddir, py and tmp. $tmp/ext/cupool holds python/cupool/*.py of the source
# tree and the extension libtool built; $tmp/noext/cupool the .py files alone. Exits 77 (SKIP)
# where configure built no Python package and in sanitizer builds (the interpreter would need
# the sanitizer's runtime preloaded), 99 when the extension is missing.
top=$(cd "${srcdir:-.}" && pwd)
builddir=$(cd "${CUPOOLTEST_BUILDDIR:-.}" && pwd)
py=${CUPOOLTEST_PYTHON:-}
if [ -z "$py" ] || [ "$py" = : ]; then
    echo "$name: no Python package was built (configure found no python3 with its headers)"
    exit 77
fi
if [ -n "${CUPOOLTEST_SANITIZER:-}" ]; then
    echo "$name: sanitizer build ($CUPOOLTEST_SANITIZER): not run under Python"
    exit 77
fi
ext="$builddir/python/cupool/.libs/_cupool.so"
[ -f "$ext" ] || { echo "$name: $ext was not built"; exit 99; }

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
