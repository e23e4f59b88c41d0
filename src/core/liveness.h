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

#endif
