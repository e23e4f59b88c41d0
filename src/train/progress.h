/* Training progress for people: on a terminal (rank 0's stderr), one line
 * per epoch redrawn in place at most 10 times a second,
 *
 *     epoch 2/5 [########>-----------]  97/234  103,512 samples/s  mfu 0.43  loss 0.4321  ETA 0:01 epoch, 0:09 run
 *
 * elsewhere the same fields as a plain line on stdout every log.every_steps
 * steps or 30 s. The loss is rank 0's mean over the epoch so far and mfu
 * rank 0's rate so far (no collective for either). Off with --quiet or
 * CT_PROGRESS=off; NO_COLOR drops the colours; under mpirun or srun the
 * default is lines and CT_PROGRESS=bar asks for the bar (README.md).
 * ct_progress_format() is pure (fields in, text out) so tests check it;
 * ct_progress_step/end decide when to draw and write.
 *
 *     struct ct_progress p;
 *     ct_progress_init(&p, &(struct ct_progress_params){...});
 *     each step:  ct_progress_step(&p, epoch, step_in_epoch, global_step, loss, ct_now_s());
 *     epoch end:  ct_progress_end_epoch(&p);
 *     ct_progress_free(&p);
 */
#ifndef CT_TRAIN_PROGRESS_H
#define CT_TRAIN_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

enum ct_progress_mode {
    CT_PROGRESS_AUTO,  /* bar on a terminal (stderr) when not under mpirun/srun, else lines */
    CT_PROGRESS_BAR,
    CT_PROGRESS_LINES,
    CT_PROGRESS_OFF,
    CT_PROGRESS_MODE_COUNT
};
extern const char *const ct_progress_mode_names[]; /* auto bar lines off */

/* The mode CT_PROGRESS asks for (unset or empty: auto); CT_EUSAGE for an
 * unknown value. */
int ct_progress_env_mode(enum ct_progress_mode *mode);

struct ct_progress_params {
    FILE *out;               /* rank 0's stderr (tty) or stdout; NULL: none (other ranks, --quiet) */
    int tty;                 /* out is a terminal: redraw one line in place */
    int color;               /* colour codes on the bar (tty, and NO_COLOR unset) */
    int epochs;              /* configured epochs */
    int64_t steps_per_epoch;
    int64_t total_steps;     /* of the run: all epochs, or max_steps when it is less */
    int global_batch;
    int tokens_per_sample;   /* token data: T (the line shows tokens/s too); 0: images */
    int every_steps;         /* not a tty: a line every this many steps (0: time only) */
    double line_interval_s;  /* not a tty: ... or after this long (30) */
    double redraw_s;         /* tty: at most one redraw per this long (0.1) */
    double flops_per_sample; /* MFU: matmul FLOPs, forward + backward; 0: no mfu shown */
    double peak_gflops;      /* ... against all ranks' peak together (world x one rank's) */
};

/* printf precision for a rate (`%.*f`): 0, or 2 below 10 (a GPT-2-sized
 * model does a fraction of a sample a second). */
#define CT_RATE_DECIMALS(v) ((v) > 0 && (v) < 10 ? 2 : 0)

/* What one line shows. */
struct ct_progress_line {
    int epoch, epochs;           /* 1-based */
    int64_t step, steps;         /* in the epoch */
    double samples_per_s;
    double tokens_per_s;         /* 0: not token data (not shown) */
    double mfu;                  /* model FLOP utilization; NaN or <= 0: not shown */
    double loss;                 /* NaN: not known yet */
    double eta_epoch_s, eta_run_s; /* < 0: unknown */
};

struct ct_progress {
    struct ct_progress_params p;
    int epoch;
    int64_t epoch_first_local; /* steps of the epoch done before this process started */
    double t_epoch, t_last_draw;
    double loss_sum;
    int64_t loss_n;
    int drawn;                /* a bar is on the terminal */
};

/* Defaults for the decisions: 30 s, 0.1 s. out NULL until the caller sets it. */
struct ct_progress_params ct_progress_default_params(void);

/* Whether progress should show, and how, from the rank, the log level,
 * CT_PROGRESS, the terminal and NO_COLOR: fills out, tty and color. */
void ct_progress_detect(struct ct_progress_params *p, int rank);

void ct_progress_init(struct ct_progress *pr, const struct ct_progress_params *p);
void ct_progress_free(struct ct_progress *pr);

/* The line's text, without a newline; bar_width 0 leaves the bar out. */
void ct_progress_format(char *out, size_t cap, const struct ct_progress_line *l, int bar_width,
                        int color);

/* After a step: epoch is 0-based, step_in_epoch counts the steps done in it
 * (1 after its first), loss_sum is that step's summed loss over this rank's
 * `targets` targets (its samples, or for token data their B*T tokens). */
void ct_progress_step(struct ct_progress *pr, int epoch, int64_t step_in_epoch, int64_t global_step,
                      double loss_sum, int64_t targets, double now);

/* Before the epoch's summary line: clears the bar. */
void ct_progress_end_epoch(struct ct_progress *pr);

#endif
