/* SPDX-License-Identifier: MIT */
/* Linked with tests/api/libpreloadctor.la, whose constructor creates and destroys two streams
 * (tests/api/preload_ctor_lib.c). Prints "ctor R reused U": R 0 when its calls succeeded, U 1
 * when the second stream was the first one again (pooled). Exits 0 when R is 0. */
#include <cuda.h>
#include <stdio.h>

extern int preload_ctor_result;
extern CUstream preload_ctor_streams[2];

int main(void)
{
    printf("ctor %d reused %d\n", preload_ctor_result,
           preload_ctor_streams[0] == preload_ctor_streams[1]);
    return preload_ctor_result == 0 ? 0 : 1;
}
