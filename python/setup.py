# SPDX-License-Identifier: MIT
"""Builds the cupool._cupool extension against an installed libcupool.

Where it is: CUPOOL_PREFIX=DIR (headers in DIR/include, library in DIR/lib or DIR/lib64),
else pkg-config cupool (PKG_CONFIG_PATH for a prefix of your own). cuda.h comes from
pkg-config's flags, or CUDA_DIR/include (default /usr/local/cuda). The library's directory is
recorded as the extension's run path, so no LD_LIBRARY_PATH is needed. The package's metadata
is in pyproject.toml."""
import os
import shlex
import subprocess

from setuptools import Extension, setup


def flags():
    prefix = os.environ.get("CUPOOL_PREFIX")
    cuda = os.path.join(os.environ.get("CUDA_DIR", "/usr/local/cuda"), "include")
    if prefix:
        lib = os.path.join(prefix, "lib")
        if not os.path.exists(os.path.join(lib, "libcupool.so")) and \
                os.path.exists(os.path.join(prefix, "lib64", "libcupool.so")):
            lib = os.path.join(prefix, "lib64")
        return [os.path.join(prefix, "include"), cuda], [lib]
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", "cupool"], text=True)
        libs = subprocess.check_output(["pkg-config", "--libs-only-L", "cupool"], text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("cupool: libcupool not found: set CUPOOL_PREFIX=DIR or make "
                         "pkg-config cupool work (PKG_CONFIG_PATH=DIR/lib/pkgconfig): %s" % e)
    inc = [f[2:] for f in shlex.split(cflags) if f.startswith("-I")]
    return inc + [cuda], [f[2:] for f in shlex.split(libs) if f.startswith("-L")]


include_dirs, library_dirs = flags()
setup(
    ext_modules=[
        Extension(
            "cupool._cupool",
            sources=["cupool/_cupool.c"],
            include_dirs=include_dirs,
            library_dirs=library_dirs,
            runtime_library_dirs=library_dirs,
            libraries=["cupool"],
        )
    ],
)
