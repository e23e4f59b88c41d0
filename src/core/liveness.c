/* Liveness marks (see liveness.h). */
#include "core/liveness.h"

#include <stdatomic.h>
#include <stddef.h>

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

/* The wait: its name (NULL: none), its collective's number, since when
 * (ms); the collectives started. Set by the thread that blocks (the main
 * one: every collective is started there), read by the watchdog's: relaxed
 * atomics are enough, a heartbeat may pair a name with the previous
 * number for one beat. */
static _Atomic(const char *) g_wait;
static _Atomic uint64_t g_wait_seq, g_started;
static _Atomic int64_t g_wait_ms;
static _Atomic int g_wait_depth;

uint64_t ct_liveness_collective(void)
{
    return atomic_fetch_add_explicit(&g_started, 1, memory_order_relaxed) + 1;
}

void ct_liveness_wait_begin(const char *what, uint64_t seq)
{
    if (atomic_fetch_add_explicit(&g_wait_depth, 1, memory_order_relaxed) > 0)
        return;
    atomic_store_explicit(&g_wait_seq, seq, memory_order_relaxed);
    atomic_store_explicit(&g_wait_ms, (int64_t)(ct_now_s() * 1000.0), memory_order_relaxed);
    atomic_store_explicit(&g_wait, what, memory_order_release);
}

void ct_liveness_wait_end(void)
{
    if (atomic_fetch_sub_explicit(&g_wait_depth, 1, memory_order_relaxed) == 1)
        atomic_store_explicit(&g_wait, NULL, memory_order_release);
}

const char *ct_liveness_waiting(uint64_t *seq, double *for_s)
{
    const char *what = atomic_load_explicit(&g_wait, memory_order_acquire);
    *seq = what ? atomic_load_explicit(&g_wait_seq, memory_order_relaxed)
                : atomic_load_explicit(&g_started, memory_order_relaxed);
    *for_s = what ? ct_now_s() - (double)atomic_load_explicit(&g_wait_ms, memory_order_relaxed) / 1000.0 : 0.0;
    return what;
}
