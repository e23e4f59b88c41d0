/* log.trace = steps:A-B: the window of steps the timeline recorder
 * (core/trace.h) is on for, and the collective writing of RUN_DIR/trace.json
 * at its end (the format: docs/performance.md, "Timeline trace").
 *
 * The trainer calls, at the same steps on every rank (so every rank enters
 * the same collectives):
 *
 *     ct_trace_window_init(&tw, comm, run_dir, first, last, max_mb, step);
 *     loop: rc = ct_trace_window_step(&tw, step);  // before the data wait of step+1
 *           ... the step ...
 *     rc = ct_trace_window_close(&tw);             // the run's end: writes a window still open
 *     ct_trace_window_free(&tw);                   // after the loader thread stopped
 *
 * Opening the window measures the clock offsets (parallel/clocksync.h) and
 * turns recording on; its end records a barrier on every rank (cat "clock",
 * the alignment's check), measures the offsets again (drift is interpolated
 * between the two), and rank 0 gathers every rank's events and writes
 * trace.json through a temporary file and a rename. A file that cannot be
 * written (a full disk, a directory in the way) is a warning on rank 0 and
 * training goes on; only a failing collective is an error (the job ends).
 * A window already past at a resume is not traced again.
 */
#ifndef CT_TRAIN_TRACE_WINDOW_H
#define CT_TRAIN_TRACE_WINDOW_H

#include <stdint.h>

#include "parallel/clocksync.h"
#include "parallel/comm.h"

/* Bytes of a rank's part per gatherv (internal; tests make it small). */
extern size_t ct__trace_piece;

/* Rounds of each clock measurement. */
#define CT_TRACE_CLOCK_ROUNDS 16

struct ct_trace_window {
    struct ct_comm *comm;
    const char *run_dir;      /* borrowed */
    int64_t first, last;      /* 1-based global steps; 0: off */
    int max_mb;
    int state;                /* 0 waiting, 1 recording, 2 done or off */
    int64_t traced_first;     /* the first step recorded */
    int64_t traced_last;      /* the last step completed while recording */
    double origin;            /* rank 0's trace clock at the window's start */
    struct ct_clock_sample *start, *end; /* (world) every rank's; local_s this rank's */
};

/* Not collective. Allocates the recorder (core/trace.h) when a window is
 * set and not already past (`step`: the steps completed). CT_ENOMEM, or
 * CT_EINVAL for a malformed CT_TRACE_CLOCK_SKEW. */
int ct_trace_window_init(struct ct_trace_window *tw, struct ct_comm *comm, const char *run_dir,
                         int64_t first, int64_t last, int max_mb, int64_t step);
/* Collective at every step boundary; `step`: global steps completed. */
int ct_trace_window_step(struct ct_trace_window *tw, int64_t step);
/* Collective at the run's normal end. */
int ct_trace_window_close(struct ct_trace_window *tw, int64_t step);
void ct_trace_window_free(struct ct_trace_window *tw);

#endif
