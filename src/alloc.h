/* SPDX-License-Identifier: MIT */
/* Metadata allocation: magazines, thread caches, classes, registry tables and records. */
#ifndef CUPOOL_ALLOC_H
#define CUPOOL_ALLOC_H
#include <stddef.h>

/* Zeroed, 64-byte aligned block of `size` bytes, or NULL. From a private jemalloc arena when
 * the shared library was built with jemalloc, from libc otherwise. Thread-safe. */
void *cupool__alloc(size_t size);
/* Frees a block from cupool__alloc(); `size` must be the size asked for. NULL is ignored. */
void cupool__free(void *p, size_t size);
/* "jemalloc arena N" or "libc", for the statistics header. */
const char *cupool__alloc_name(void);

#endif
