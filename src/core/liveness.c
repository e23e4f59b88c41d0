/* Liveness marks (see liveness.h). */
#include "core/liveness.h"

#include <stdatomic.h>

#include "core/clock.h"

static _Atomic int64_t g_step;
static _Atomic int64_t g_mark_ms = -1; /* ct_now_s() of the last mark, in ms; -1: none yet */

void ct_liveness_mark(int64_t step)
{
    if (step >= 0)
        atomic_store_explicit(&g_step, step, memory_order_relaxed);
    atomic_store_explicit(&g_mark_ms, (int64_t)(ct_now_s() * 1000.0), memory_order_relaxed);
}

int64_t ct_liveness_step(void) { return atomic_load_explicit(&g_step, memory_order_relaxed); }

double ct_liveness_idle_s(void)
{
    int64_t ms = atomic_load_explicit(&g_mark_ms, memory_order_relaxed);
    if (ms < 0) {
        /* No mark yet: count from the first question, so a process that has
         * not started its work is not idle since boot. */
        int64_t now = (int64_t)(ct_now_s() * 1000.0), none = -1;
        atomic_compare_exchange_strong(&g_mark_ms, &none, now);
        return 0.0;
    }
    return ct_now_s() - (double)ms / 1000.0;
}
