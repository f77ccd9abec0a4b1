/* SPDX-License-Identifier: MIT */
/* Metadata allocation: magazines, thread caches, classes, registry tables and records. */
#ifndef CUPOOL_ALLOC_H
#define CUPOOL_ALLOC_H
#include <stddef.h>

/* Zeroed, 64-byte aligned block of `size` bytes, or NULL. From a private jemalloc arena when
 * the shared library was built with jemalloc, from libc otherwise. Thread-safe; takes a mutex
 * (allocation is never on a fast path). */
void *cupool__alloc(size_t size);
/* Frees a block from cupool__alloc(). NULL is ignored. */
void cupool__free(void *p, size_t size);
/* Bytes held by live blocks, headers included. */
size_t cupool__alloc_bytes(void);
/* Frees every block ever allocated and not freed, and the jemalloc arena: for unloading the
 * library, when nothing may touch cupool's structures again. */
void cupool__alloc_release_all(void);
/* "jemalloc arena N" or "libc", for the statistics header. */
const char *cupool__alloc_name(void);

#endif
