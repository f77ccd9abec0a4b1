/* SPDX-License-Identifier: MIT */
/* Events: how an event class creates and destroys its handles. */
#include "base/internal.h"
#include "pool/pool.h"
#include "base/driver.h"

static CUresult event_create(const struct cupool__class *cls, void **handle)
{
    return cupool__drv.cuEventCreate((CUevent *)handle, cls->flags);
}

static CUresult event_destroy(void *handle)
{
    return cupool__drv.cuEventDestroy((CUevent)handle);
}

const struct cupool__class_ops cupool__event_ops = {
    .kind = CUPOOL_KIND_EVENT,
    .name = "event",
    .create = event_create,
    .destroy = event_destroy,
};
