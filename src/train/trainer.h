/* The data-parallel training loop.
 *
 * One trainer per rank. Every rank holds the whole model; each step it takes
 * its slice of the global batch from the sampler, runs forward and backward,
 * and the ranks sum their gradients with one allreduce over the flat gradient
 * buffer (the loss is already scaled by 1/global_batch, so the sum is the
 * gradient of the global-batch mean). Then every rank applies the same
 * optimizer step to the same parameters, so replicas stay identical; the
 * trainer checks this by digest after every epoch.
 *
 * After every `eval_every` epochs (and at the end) the test set is evaluated
 * in eval mode, split across ranks in contiguous shards so every test sample
 * is counted exactly once. Rank 0 appends one JSON object per epoch to
 * <run_dir>/metrics.jsonl and prints a readable line.
 *
 * `train.max_steps` stops the run after that many global steps and changes
 * nothing else: the schedule still spans all configured epochs, so a run
 * stopped early follows the same trajectory as a full one.
 *
 *     struct ct_trainer tr;
 *     rc = ct_trainer_init(&tr, &cfg, &comm, "runs/fmnist-mlp");   // collective
 *     if (rc == 0) rc = ct_trainer_run(&tr, &summary);               // collective
 *     ct_trainer_free(&tr);
 */
#ifndef CT_TRAIN_TRAINER_H
#define CT_TRAIN_TRAINER_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "config/config.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "parallel/comm.h"
#include "parallel/placement.h"
#include "nn/module.h"
#include "optim/optimizer.h"

/* Where a training step's time goes (rank 0's view). */
enum ct_phase {
    CT_PHASE_DATA,      /* gathering and normalizing the batch */
    CT_PHASE_COMPUTE,   /* forward, loss, backward */
    CT_PHASE_ALLREDUCE, /* gradient allreduce, including waiting for other ranks */
    CT_PHASE_OPTIM,     /* optimizer step */
    CT_PHASE_COUNT
};

struct ct_epoch_metrics {
    int epoch;            /* 1-based: epochs begun */
    int partial;          /* stopped by max_steps inside this epoch */
    int64_t step;         /* global steps completed */
    double train_loss;    /* mean over the epoch's samples, all ranks */
    double test_loss, test_acc; /* NAN when not evaluated */
    double samples_per_s; /* global, training only */
    double epoch_s;       /* training wall time of the epoch (max over ranks) */
    double eval_s;
    double lr;            /* learning rate of the epoch's last step */
    double peak_rss_mib;  /* max over ranks */
    double phase_s[CT_PHASE_COUNT]; /* rank 0's training time by phase */
    char param_sha256[65];
};

struct ct_train_summary {
    struct ct_epoch_metrics last;
    int stopped_by_signal;  /* the signal (SIGUSR1, SIGTERM) that ended the run after a checkpoint */
    int64_t steps;
    double train_s;       /* sum of epoch_s */
    double samples_per_s; /* all training samples / train_s */
};

struct ct_trainer {
    const struct ct_config *cfg;
    struct ct_comm *comm;
    char run_dir[1024];

    struct ct_dataset train, test;
    struct ct_model model;
    struct ct_optimizer opt;
    struct ct_schedule sched;
    struct ct_sampler sampler;

    int local_batch;       /* global_batch / world */
    int micro_batch;       /* local_batch / accum_steps: rows per forward */
    int eval_batch;        /* rows per evaluation forward */
    int n_classes;
    int blas_threads;
    struct ct_placement placement; /* this rank's cores, NUMA node, device */
    char *placement_table;         /* rank 0: the binding table of all ranks */
    int64_t step;          /* global steps completed */
    double last_grad_norm; /* before clipping, of the last step (0 if clipping is off) */
    int64_t steps_per_epoch;
    int64_t total_steps;   /* over all configured epochs */
    int32_t *labels;       /* (max(local_batch, eval_batch)) */
    FILE *metrics;         /* rank 0 only */
    FILE *steps_log;       /* rank 0 only: steps.jsonl */

    /* Checkpoints */
    struct ct_ckpt_data_file data_files[4]; /* digests of the data files used */
    char data_paths[4][1200];
    int n_data_files;
    uint8_t parent_sha256[CT_SHA256_LEN];   /* digest of the last checkpoint written or resumed */
    int have_parent;
    int resumed;                            /* started from a checkpoint */
    int resumed_in_place;                   /* ... of this run directory: continue its logs */
    int64_t last_ckpt_step;                 /* -1: none yet */
#define CT_TRAINER_MAX_CHANGES 64
    char *changes[CT_TRAINER_MAX_CHANGES];  /* settings changed at resume, for the next manifest */
    int n_changes;
    int error_agreed;                       /* the last error was seen by every rank */
};

/* Collective. Loads the data, builds the model and optimizer, initialises the
 * parameters from the seed on every rank, broadcasts rank 0's and checks the
 * digests agree, and (rank 0) prepares the run directory: an earlier run's
 * files are moved into previous-<time>/, never overwritten; the resolved
 * config is written to config.ini. On failure every rank returns the same
 * error (see ct_comm_agree) and the trainer is freed.
 *
 * run_dir NULL: no run directory and no data digests (evaluating a
 * checkpoint).
 *
 * resume: NULL (start from scratch), "auto" (the newest committed checkpoint
 * of run_dir if there is one, else from scratch: one command line for every
 * requeue of a job) or a checkpoint directory. A resumed run appends to the
 * run directory's files instead of moving them aside. */
int ct_trainer_init(struct ct_trainer *tr, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume);
/* Collective. Trains to the end (or max_steps). */
int ct_trainer_run(struct ct_trainer *tr, struct ct_train_summary *summary);
/* Collective. Evaluates the test set in eval mode: mean loss and accuracy. */
int ct_trainer_evaluate(struct ct_trainer *tr, double *loss, double *acc);
void ct_trainer_free(struct ct_trainer *tr);

/* Ask a running trainer to checkpoint and stop at the next step boundary
 * (async-signal-safe: meant for SIGUSR1/SIGTERM handlers). The request is
 * combined across ranks with an allreduce, so all ranks stop at the same
 * step. */
void ct_trainer_request_stop(int signal_number);

/* Peak resident set size of this process, in MiB. */
double ct_peak_rss_mib(void);

#endif
