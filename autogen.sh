#!/bin/sh
# SPDX-License-Identifier: MIT
# Generates ./configure from configure.ac (needs autoconf, automake, libtool, pkg-config).
set -e
cd "$(dirname "$0")"
autoreconf --install --force --warnings=all "$@"
