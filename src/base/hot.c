/* SPDX-License-Identifier: MIT */
/* The hot line (internal.h): the read-mostly words every call loads. */
#include "base/internal.h"
#include "base/state.h"

struct cupool__hot cupool__hot = {.state = CUPOOL_ST_UNINIT, .mag_capacity = 16};
