/* SPDX-License-Identifier: MIT */
/*
 * Reports what cupool made of its environment, for check_reliability's privileged-process
 * test, which runs a setuid copy of this program. Linked with cupool's static convenience
 * library, so it is a plain executable (a libtool wrapper script cannot be setuid).
 * Prints "secure=<AT_SECURE>", "init=<result>" and the statistics header (which names the
 * driver library loaded); CUPOOL_STATS, if honoured, writes the statistics at exit.
 */
#include <stdio.h>
#include <sys/auxv.h>

#include "cupool.h"

int main(void)
{
    printf("secure=%lu\n", getauxval(AT_SECURE));
    CUresult r = cupool_init();
    printf("init=%s: %s\n", cupool_result_name(r), r == CUDA_SUCCESS ? "" : cupool_error_string());
    cupool_stats_print(stdout);
    return 0;
}
