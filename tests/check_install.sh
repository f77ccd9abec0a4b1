#!/bin/sh
# SPDX-License-Identifier: MIT
# What make install puts in place, installed into a temporary DESTDIR:
#  - pkg-config --variable=fakecuda cupool names the installed simulated driver;
#  - the installed tree, moved elsewhere whole, still runs: cupool-bench finds the simulated
#    driver relative to its own place;
#  - the CMake package: a project that says only find_package(cupool CONFIG REQUIRED) and links
#    cupool::cupool builds and runs against it (on the simulated driver its cupool_FAKECUDA
#    names), and a request for another minor version of 0.x is refused (skipped without cmake);
#  - the Python package (where configure built it; not in sanitizer builds): the installed
#    cupool imports with its extension, and through ctypes finds the libcupool installed beside
#    it.
set -u
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
${MAKE:-make} -s install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; echo "check_install: make install failed"; exit 1; }
prefix="$tmp/root${CUPOOLTEST_PREFIX:?}"
libdir="$tmp/root${CUPOOLTEST_LIBDIR:?}"

if command -v pkg-config >/dev/null 2>&1; then
    fake=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --variable=fakecuda cupool)
    [ "$fake" = "$CUPOOLTEST_LIBDIR/cupool/fakecuda.so" ] && [ -f "$tmp/root$fake" ] ||
        { echo "check_install: pkg-config --variable=fakecuda says '$fake'"; exit 1; }
    echo "check_install: pkg-config --variable=fakecuda cupool: $fake"
fi

if [ -n "${CUPOOLTEST_PYTHON:-}" ] && [ -z "${CUPOOLTEST_SANITIZER:-}" ]; then
    pydir="$tmp/root${CUPOOLTEST_PYEXECDIR:?}"
    [ -f "$pydir/cupool/__init__.py" ] && [ -f "$pydir/cupool/_cupool.so" ] ||
        { echo "check_install: no package in $pydir/cupool: $(ls "$pydir/cupool" 2>&1)"; exit 1; }
    code='import cupool; cupool.ensure_context(); s = cupool.stream(); s.release(); print(cupool.BACKEND, cupool.version())'
    out=$(cd "$tmp" && PYTHONPATH="$pydir" LD_LIBRARY_PATH="$libdir" "$CUPOOLTEST_PYTHON" -c "$code" 2>&1) &&
        [ "$out" = "extension $(sed -n 's/^Version: //p' "$libdir/pkgconfig/cupool.pc")" ] ||
        { echo "check_install: the installed package: $out"; exit 1; }
    out2=$(cd "$tmp" && env -u CUPOOL_PY_LIBRARY PYTHONPATH="$pydir" CUPOOL_PY_FORCE_CTYPES=1 \
           "$CUPOOLTEST_PYTHON" -c "$code" 2>&1) && [ "${out2%% *}" = ctypes ] ||
        { echo "check_install: the installed package through ctypes: $out2"; exit 1; }
    echo "check_install: the installed Python package imports ($out; $out2)"
fi

man3="$tmp/root$(dirname "$CUPOOLTEST_LIBDIR")/share/man/man3"
[ -d "$man3" ] || man3=$(find "$tmp/root" -type d -name man3 | head -n 1)
for a in cupool_stream_release cupool_pipeline_launch cupool_cuStreamCreate; do
    t=$(readlink "$man3/$a.3") && [ -f "$man3/$t" ] ||
        { echo "check_install: the alias page $a.3 is not a link to a page beside it"; exit 1; }
done
# the installed pages name the simulated driver where this prefix puts it (roff: \- for -)
${MAKE:-make} -s install-data prefix=/opt/cu-other DESTDIR="$tmp/other" >"$tmp/other.log" 2>&1 ||
    { cat "$tmp/other.log"; echo "check_install: make install-data prefix=/opt/cu-other failed"; exit 1; }
for page in man3/cupool.3 man1/cupool-bench.1; do
    grep -qF '/opt/cu\-other/lib/cupool/fakecuda.so' "$tmp/other/opt/cu-other/share/man/$page" ||
        { echo "check_install: $page does not name /opt/cu-other/lib/cupool/fakecuda.so"; exit 1; }
done
echo "check_install: alias pages link to their pages; the pages follow the prefix"

mv "$tmp/root" "$tmp/moved"
mprefix="$tmp/moved$CUPOOLTEST_PREFIX"
out=$(env -u CUPOOL_DRIVER_PATH LD_LIBRARY_PATH="$tmp/moved$CUPOOLTEST_LIBDIR" \
      "$mprefix/bin/cupool-bench" streams --threads 1 --repeats 1 --pairs 1000 --driver-pairs 10 2>&1)
case "$out" in
*"SIMULATED driver $tmp/moved"*) echo "check_install: a moved cupool-bench found its simulated driver" ;;
*"SIMULATED driver"*) echo "$out" | head -3; echo "check_install: a moved cupool-bench used a simulated driver outside its tree"; exit 1 ;;
*"NO GPU"*|*"no simulated driver"*) echo "$out" | head -3; echo "check_install: a moved cupool-bench did not find its simulated driver"; exit 1 ;;
*) echo "check_install: a GPU answered: the relocation check needs a machine without one (not checked)" ;;
esac
mv "$tmp/moved" "$tmp/root"

command -v cmake >/dev/null 2>&1 || { echo "check_install: no cmake: the CMake package not checked"; exit 0; }
mkdir -p "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(cupool_user C)
find_package(cupool 0.1 CONFIG REQUIRED)
add_executable(user user.c)
target_link_libraries(user PRIVATE cupool::cupool)
file(WRITE "${CMAKE_BINARY_DIR}/fakecuda.txt" "${cupool_FAKECUDA}")
find_package(cupool 0.99 CONFIG QUIET)
file(WRITE "${CMAKE_BINARY_DIR}/other-minor.txt" "${cupool_FOUND}")
CMAKE
cat >"$tmp/proj/user.c" <<'C'
#include <cupool.h>
#include <stdio.h>
int main(void)
{
    CUresult (*init)(unsigned), (*retain)(CUcontext *, CUdevice), (*set)(CUcontext);
    if (cupool_driver_get_proc("cuInit", 2000, (void **)&init) ||
        cupool_driver_get_proc("cuDevicePrimaryCtxRetain", 7000, (void **)&retain) ||
        cupool_driver_get_proc("cuCtxSetCurrent", 4000, (void **)&set))
        return 2;
    CUcontext ctx;
    CUstream s;
    if (init(0) || retain(&ctx, 0) || set(ctx) || cupool_stream_acquire(&s, 0, 0) ||
        cupool_stream_release(s))
        return 3;
    printf("cupool %s: a pooled stream\n", cupool_version());
    return 0;
}
C
# a library built with sanitizers needs their runtimes in the program too
san=${CUPOOLTEST_SANITIZER_FLAGS:-}
cmake -S "$tmp/proj" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="${CUPOOLTEST_CC:-cc}" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" \
    >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; echo "check_install: configure failed"; exit 1; }
cmake --build "$tmp/b" >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log"; echo "check_install: build failed"; exit 1; }
fake=$(cat "$tmp/b/fakecuda.txt")
[ -f "$fake" ] || { echo "check_install: cupool_FAKECUDA names $fake: no such file"; exit 1; }
[ "$(cat "$tmp/b/other-minor.txt")" != 1 ] ||
    { echo "check_install: find_package(cupool 0.99) accepted this 0.x release"; exit 1; }
out=$(CUPOOL_DRIVER_PATH="$fake" LD_LIBRARY_PATH="$prefix/lib:${CUPOOLTEST_LIBDIR:+$tmp/root$CUPOOLTEST_LIBDIR}" \
      "$tmp/b/user") || { echo "check_install: the program failed ($?): $out"; exit 1; }
echo "check_install: $out (built with find_package(cupool CONFIG), run on $fake)"
