// SPDX-License-Identifier: MIT
// A C++ static object whose destructor releases handles: it is constructed before main (so
// before cupool and the driver initialise) and destroyed after both have run their exit
// handlers, the order every C++ program with a global RAII wrapper around a stream gets.
extern "C" {
void lifecycle_child_static_release(void);
extern int lifecycle_child_static_armed;
int lifecycle_child_have_cxx = 1;
}

namespace {
struct ReleaseAtStaticDestruction {
    ~ReleaseAtStaticDestruction()
    {
        if (lifecycle_child_static_armed)
            lifecycle_child_static_release();
    }
} release_at_static_destruction;
} // namespace
