/* The trainer's parts (see trainer.h): for the code in this tree that
 * embeds a trainer or reads its session and stepper (src/cli, audit replay,
 * the MPI tests). Not installed: a program built on libctrain uses
 * ct_trainer_open/run/close and ct_trainer_model. */
#ifndef CT_TRAIN_TRAINER_IMPL_H
#define CT_TRAIN_TRAINER_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "parallel/transport.h"
#include "train/progress.h"
#include "train/session.h"
#include "train/step.h"
#include "train/trace_window.h"
#include "train/trainer.h"

#define CT_TRAINER_MAX_CHANGES 64

struct ct_tb;

struct ct_trainer {
    const struct ct_config *cfg;
    struct ct_comm *comm;
    char run_dir[1024];

    struct ct_session s;
    struct ct_stepper st;
    int64_t step;          /* global steps completed */

    FILE *metrics;         /* rank 0 only: metrics.jsonl */
    FILE *steps_log;       /* rank 0 only: steps.jsonl */
    int log_status;        /* rank 0: the first steps.jsonl write error, agreed at the epoch's end */
    struct ct_tb *tb;      /* rank 0 with log.tensorboard: the event file (run/tbevents.h) */
    struct ct_trace_window trace; /* log.trace (train/trace_window.h) */

    /* Checkpoints */
    uint8_t parent_sha256[CT_SHA256_LEN];   /* digest of the last checkpoint written or resumed */
    int have_parent;
    int resumed;                            /* started from a checkpoint */
    int resumed_in_place;                   /* ... of this run directory: continue its logs */
    int64_t last_ckpt_step;                 /* -1: none yet */
    char *changes[CT_TRAINER_MAX_CHANGES];  /* settings changed at resume, for the next manifest */
    int n_changes;
    int error_agreed;                       /* the last error was seen by every rank */
    uint64_t owner_nonce;                   /* != 0: each commit first checks that the run
                                             * directory's owner is still this job (run/owner.h) */
    int64_t nonfinite_skipped;              /* steps dropped so far (train.on_nonfinite = skip),
                                             * restored from the checkpoint's manifest */

    struct ct_progress progress;            /* rank 0: the progress bar or lines */

    /* Model FLOP utilization: each rank's achieved rate, flops_per_sample x
     * the samples it computed in the epoch / its wall time of the epoch's
     * steps (everything included: data wait, exposed communication, the
     * optimizer, logging), against peak_gflops; mfu = the ranks' summed
     * rates / (world x peak_gflops). */
    double flops_per_sample;                /* matmul FLOPs, forward + backward (nn/module.h) */
    double peak_gflops;                     /* one rank's: dist.peak_gflops, or the probe's
                                             * best over the ranks */
    char peak_kernel[96];                   /* the probe's kernel, shape, threads; "" for config */

    struct ct_transport transport;          /* what carries the traffic (run.json, manifests) */
};

/* ct_trainer_open on storage of the caller's (static or embedded): the same
 * set-up and the same collective failure, after which the trainer is freed. */
int ct_trainer_init(struct ct_trainer *tr, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume);
/* Frees what ct_trainer_init set up (not the struct itself). */
void ct_trainer_free(struct ct_trainer *tr);

/* The trainer's state as checkpoint sections and back (state.c). */
/* Collective: write a checkpoint of the trainer's current state. */
int ct__trainer_save(struct ct_trainer *tr);
/* Collective: restore everything from an opened checkpoint (verified by
 * ct_ckpt_open). Refuses a checkpoint of a different experiment (model,
 * optimizer, data, ...) with the differing keys; settings that do not
 * change the state may differ and are recorded for the next manifest. */
int ct__trainer_restore(struct ct_trainer *tr, const struct ct_ckpt *ck);

#endif
