/* Liveness marks: "this process is getting somewhere", for the hang watchdog.
 *
 * The watchdog (parallel/watchdog.h) ends a job in which no rank made
 * progress for dist.watchdog_s. What counts as progress is marked here, by
 * the code that does the work, at every layer: a training step, an
 * evaluation batch, every 64 MiB hashed (core/sha256.c: data files,
 * checkpoint sections) or read from a data file (data/idx.c), every round
 * of a collective checkpoint write (ckpt/data.c; the single-rank POSIX
 * path writes in one pass). So a long start-up, evaluation or
 * checkpoint is not a hang, while a rank blocked in one collective or one
 * system call for the whole deadline is. The marks live in core, not in
 * the watchdog's module, because the data and checkpoint layers that make
 * them sit below src/parallel.
 *
 * Two process-wide atomics; ct_liveness_mark is lock-free and
 * async-signal-safe, and costs one clock read: call it as often as useful,
 * from any thread. What it is not: a progress bar (train/progress.h).
 *
 *     ct_liveness_mark(step);       // completed `step` global steps
 *     ct_liveness_mark(-1);         // progress inside the same step
 *     double idle = ct_liveness_idle_s();
 *
 * Waits: the communication layer (parallel/comm.h) says which collective
 * this process is blocked in and the how-manieth it is, so that the
 * watchdog can tell ranks alive but blocked in communication (a partition:
 * every heartbeat fresh, every rank waiting) from a stopped rank, and name
 * the collective and the ranks that never entered it.
 *
 *     uint64_t seq = ct_liveness_collective();   // at every collective's start
 *     ct_liveness_wait_begin("allreduce", seq);  ... blocked ...  ct_liveness_wait_end();
 */
#ifndef CT_CORE_LIVENESS_H
#define CT_CORE_LIVENESS_H

#include <stdint.h>

/* Progress now; step >= 0 also records the number of completed global
 * steps (-1: unchanged). */
void ct_liveness_mark(int64_t step);

/* The last step recorded (0 before any). */
int64_t ct_liveness_step(void);

/* Seconds since the last mark; before any mark, since this was first
 * asked (0 then), so a process that has not begun its work is not idle. */
double ct_liveness_idle_s(void);

/* One more collective started (blocking or not): its number, 1 for the
 * first. Every rank starts the same collectives in the same order, so the
 * numbers match across ranks. */
uint64_t ct_liveness_collective(void);

/* This process now blocks in collective number seq, `what` (a string
 * literal, no spaces: stored, not copied), until the matching end. Nested
 * begins (a collective made of collectives) keep the outermost. */
void ct_liveness_wait_begin(const char *what, uint64_t seq);
void ct_liveness_wait_end(void);

/* The collective this process blocks in (NULL when none), with its number
 * in *seq and the seconds since the wait began in *for_s; when none, *seq
 * is the number of collectives started so far. */
const char *ct_liveness_waiting(uint64_t *seq, double *for_s);

#endif
