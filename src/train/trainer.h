/* The data-parallel training loop: one trainer per rank, running epochs of
 * global steps (train/step.h) over a session (train/session.h) and applying
 * the run's policies between them: the stop request, checkpoint and
 * evaluation cadences, the replica check, train.on_nonfinite and
 * train.max_steps (which stops early and changes nothing else). Rank 0
 * keeps the run directory's records (src/run). The loop's policies:
 * docs/index.md; the records: docs/records.md.
 *
 *     struct ct_trainer *tr;
 *     rc = ct_trainer_open(&tr, &cfg, &comm, "runs/fmnist-mlp", NULL);  // collective
 *     if (rc == 0) rc = ct_trainer_run(tr, &summary);                  // collective
 *     ct_trainer_close(tr);
 *
 * struct ct_trainer is opaque here: this header is the trainer's public API
 * (installed). Code in this tree that embeds a trainer or reads its parts
 * (the CLI, audit replay, the MPI tests) includes train/trainer-impl.h.
 */
#ifndef CT_TRAIN_TRAINER_H
#define CT_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "parallel/comm.h"

struct ct_model;

struct ct_epoch_metrics {
    int epoch;            /* 1-based: epochs begun */
    int partial;          /* stopped inside this epoch */
    int64_t step;         /* global steps completed */
    double train_loss;    /* mean over the epoch's samples, all ranks */
    double train_acc;     /* fraction of them classified right in training mode (dropout on) */
    double test_loss, test_acc; /* NAN when not evaluated */
    double samples_per_s; /* global, training only */
    double tokens_per_s;  /* token data: samples_per_s x T; 0 otherwise */
    double val_bpb;       /* byte tokens: test_loss / ln 2 (bits per byte); NaN otherwise */
    double epoch_s;       /* training wall time of the epoch (max over ranks) */
    double eval_s;
    double lr;            /* learning rate of the epoch's last step */
    double peak_rss_mib;  /* max over ranks */
    double pss_mib;       /* max over ranks, at the epoch's end */
    int64_t optim_state_bytes; /* the optimizer state one rank holds, max over ranks */
    int64_t nonfinite_skipped;       /* steps dropped in this epoch (train.on_nonfinite = skip) */
    int64_t nonfinite_skipped_total; /* ... in the whole run, across resumes */
    double mfu;           /* model FLOP utilization of the epoch (see trainer-impl.h) */
    int64_t samples;      /* training samples the epoch's steps drew (skipped steps included) */
    char param_sha256[65];
};

struct ct_train_summary {
    struct ct_epoch_metrics last;
    int stopped_by_signal;  /* the signal (SIGUSR1, SIGTERM) that ended the run after a checkpoint */
    int64_t steps;
    double train_s;       /* sum of epoch_s */
    double samples_per_s; /* all training samples / train_s */
};

/* The trainer of one rank (its parts: train/trainer-impl.h). */
struct ct_trainer;

/* Collective. Allocates and sets up a trainer in *out (ct_trainer_close
 * frees it): the session, and (rank 0) the run directory: an earlier run's
 * files are moved into previous-<time>/, never overwritten; the resolved
 * config is written to config.ini. On failure every rank returns the same
 * error (see ct_comm_agree) and *out is NULL.
 *
 * resume: NULL (start from scratch), "auto" (the newest committed checkpoint
 * of run_dir if there is one, else from scratch: one command line for every
 * requeue of a job) or a checkpoint directory. A resumed run appends to the
 * run directory's files instead of moving them aside. */
int ct_trainer_open(struct ct_trainer **out, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume);
/* Collective. Trains to the end (or max_steps, or a stop request). */
int ct_trainer_run(struct ct_trainer *tr, struct ct_train_summary *summary);
/* Frees what ct_trainer_open made (NULL: nothing). */
void ct_trainer_close(struct ct_trainer *tr);
/* The model being trained (models/models.h: ct_model_param_count, ...). */
const struct ct_model *ct_trainer_model(const struct ct_trainer *tr);

/* Ask a running trainer to checkpoint and stop at the next step boundary
 * (async-signal-safe: meant for SIGUSR1/SIGTERM handlers). The request
 * travels with the next step's gradient sync, so all ranks stop at the same
 * step. */
void ct_trainer_request_stop(int signal_number);

#endif
