/* The timeline recorder behind log.trace: each process keeps, for a window
 * of steps, the spans its threads went through (a step, its phases, each
 * module's forward and backward, each gradient bucket's collective from its
 * start to its observed completion, the loader thread's gathers) in one
 * preallocated array, for src/train/trace_window.c to write as Chrome trace
 * events (docs/performance.md, "Timeline trace").
 *
 * Recording is off unless a window is open, and the check is one relaxed
 * atomic load, so instrumented code costs nothing measurable when off:
 *
 *     int tr = ct_trace_on();
 *     double t0 = tr ? ct_now_s() : 0.0;
 *     ... the work ...
 *     if (tr)
 *         ct_trace_span(CT_TRACE_MAIN, "phase", "forward", t0, ct_now_s());
 *
 * A span is kept only when recording is on at its end too (ct_trace_span
 * checks again), so every kept span lies inside the window. Any thread may
 * record: a slot is reserved with an atomic fetch-add and published with a
 * release store of its `ready` flag. Names, categories and argument keys are
 * not copied: they must be string literals or strings that outlive the
 * writing of the trace (a module's name). Spans past the buffer's capacity
 * are counted as dropped, not kept.
 *
 * Timestamps are ct_now_s() seconds plus this process's test-only skew
 * (CT_TRACE_CLOCK_SKEW="<rank>:<seconds>"), applied here and in
 * ct_trace_now(), so the clock alignment (parallel/clocksync.h) sees the
 * skewed clock as a real one and must remove it.
 *
 * Deliberately not here: which steps are traced, the clock alignment, the
 * JSON (train/trace_window.h, train/trace_json.h).
 */
#ifndef CT_CORE_TRACE_H
#define CT_CORE_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The thread a span belongs to. Comm spans are collectives in flight; the
 * writer gives them lanes (tid 2 + K) so that spans of one lane never
 * overlap (ct_trace_assign_lanes). */
enum ct_trace_tid {
    CT_TRACE_MAIN,   /* the training loop's thread */
    CT_TRACE_LOADER, /* the data loader's prefetch thread */
    CT_TRACE_COMM,   /* communication in flight */
    CT_TRACE_TID_COUNT
};

struct ct_trace_event {
    double t0, t1;           /* trace clock, seconds: begin and end */
    const char *cat, *name;  /* not copied (see above) */
    const char *k0, *k1;     /* argument keys; NULL: no such argument */
    int64_t v0, v1;          /* their values */
    int tid;                 /* enum ct_trace_tid */
    atomic_int ready;        /* 1 once every field above is written */
};

/* The on/off flag (internal: read it through ct_trace_on). */
extern atomic_int ct__trace_flag;

static inline int ct_trace_on(void)
{
    return atomic_load_explicit(&ct__trace_flag, memory_order_relaxed);
}

/* Allocate room for max_bytes of spans (at least one) and read
 * CT_TRACE_CLOCK_SKEW for this rank. Recording stays off. CT_ENOMEM;
 * CT_EINVAL for a malformed CT_TRACE_CLOCK_SKEW (naming it). Calling it again
 * replaces the buffer (recording must be off and no thread recording). */
int ct_trace_init(size_t max_bytes, int rank);
/* Frees the buffer: every thread that may record must have stopped. */
void ct_trace_free(void);
/* Turn recording on or off (no-op on without a buffer). */
void ct_trace_set_on(int on);
/* The trace clock: ct_now_s() plus this process's test-only skew. */
double ct_trace_now(void);
double ct_trace_skew(void);

/* Record a complete span [t0, t1] (ct_now_s() seconds) when recording is on. */
void ct_trace_span(int tid, const char *cat, const char *name, double t0, double t1);
/* ... with up to two integer arguments ({"bucket": K, "bytes": N}). */
void ct_trace_span_args(int tid, const char *cat, const char *name, double t0, double t1,
                        const char *k0, int64_t v0, const char *k1, int64_t v1);

/* The spans reserved so far (at most the capacity): a slot whose `ready` is
 * still 0 was reserved by a thread that has not finished writing it, and is
 * to be skipped. */
size_t ct_trace_snapshot(const struct ct_trace_event **ev);
/* Spans not kept for want of room. */
uint64_t ct_trace_dropped(void);
/* Forget the spans and the drop count (recording off; for tests). */
void ct_trace_reset(void);

/* Pure: tid_out[i] = ev[i].tid for main and loader spans; comm spans get
 * CT_TRACE_COMM + K, K the first lane whose last span ends at or before
 * this one's begin, in the order of begins (interval partitioning: as few
 * lanes as spans overlap at once). Spans whose `ready` is 0 get -1.
 * Returns the number of comm lanes, or CT_ENOMEM. */
int ct_trace_assign_lanes(const struct ct_trace_event *ev, size_t n, int *tid_out);

/* log.trace's value: "off" (*first = *last = 0) or "steps:A-B", global steps
 * counted from 1 as in steps.jsonl, 1 <= A <= B. Returns 0, or -1 with what
 * is wrong in why (for the config's message). */
int ct_trace_parse_window(const char *text, int64_t *first, int64_t *last, char *why, size_t n);

#endif
