/* Clock alignment for the timeline trace: every rank's clock offset to rank
 * 0's, with a bound that is proven, not estimated, using only the
 * communicator's collectives (so it works over any MPI and across hosts).
 *
 * One round: rank 0 reads t0 and broadcasts; each rank r reads a_r when the
 * broadcast returns; the a_r are gathered on rank 0, which reads t1 when the
 * gather returns. Rank r's return from the broadcast happened after rank 0
 * entered it and before rank 0's gather could complete, so at rank 0's time
 * T in [t0, t1] rank r's clock read a_r: offset_r = a_r - T lies in
 * [a_r - t1, a_r - t0]. The intervals of N rounds are intersected; the
 * offset is the midpoint and the bound the half-width (each round's width is
 * one round trip; the intersection keeps the tightest constraints of all).
 *
 *     struct ct_clock_sample mine, *all = calloc(world, sizeof *all);
 *     rc = ct_clocksync_measure(comm, 16, ct_trace_now, &mine, all);
 *     // local time t of this rank, on rank 0's clock: t - mine.offset_s,
 *     // within mine.bound_s
 *
 * Not here: drift (the trace measures at the window's start and end and
 * interpolates: train/trace_window.c) and what the offsets are used for.
 */
#ifndef CT_PARALLEL_CLOCKSYNC_H
#define CT_PARALLEL_CLOCKSYNC_H

#include "parallel/comm.h"

struct ct_clock_sample {
    double offset_s; /* this rank's clock minus rank 0's (0 on rank 0) */
    double bound_s;  /* |true offset - offset_s| <= bound_s */
    double local_s;  /* this rank's clock at the measurement (its last a_r) */
};

/* Collective. rounds >= 1. *mine: this rank's; all (world entries, may be
 * NULL): every rank's offset and bound (local_s is only this rank's own).
 * `now` is the clock to align (the trace's, with its test-only skew). */
int ct_clocksync_measure(struct ct_comm *c, int rounds, double (*now)(void),
                         struct ct_clock_sample *mine, struct ct_clock_sample *all);

/* Pure: the intersection of [a[i] - t1[i], a[i] - t0[i]] over n rounds,
 * as its midpoint and half-width. CT_EMISMATCH if it is empty (a clock
 * that went backwards, or a collective that did not order as assumed). */
int ct_clocksync_intersect(const double *t0, const double *t1, const double *a, int n,
                           double *offset, double *bound);

#endif
