/* Small trainer runs for the MPI tests (header-only; after ct_mpi_test.h). */
#ifndef CT_TRAIN_TEST_H
#define CT_TRAIN_TEST_H

#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "ct_mpi_test.h"
#include "train/trainer-impl.h"

#define CT_TEST_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A one-hidden-layer mlp (64 units) on Fashion-MNIST: SGD lr 0.05 with
 * momentum 0.9 on a cosine schedule, global batch 64, one thread a rank, no
 * progress lines; config path NAME.ini. The caller sets the epochs, seed,
 * max_steps and what its test is about. */
static inline void ct_test_mlp_config(struct ct_config *cfg, const char *name)
{
    ct_config_defaults(cfg);
    snprintf(cfg->path, sizeof cfg->path, "%s.ini", name);
    snprintf(cfg->name, sizeof cfg->name, "%s", name);
    snprintf(cfg->data.dir, sizeof cfg->data.dir, CT_TEST_FMNIST_DIR);
    snprintf(cfg->model.name, sizeof cfg->model.name, "mlp");
    cfg->model.hidden[0] = 64;
    cfg->model.n_hidden = 1;
    cfg->optim.lr = 0.05;
    cfg->optim.momentum = 0.9;
    cfg->schedule.kind = CT_SCHED_COSINE;
    cfg->train.global_batch = 64;
    cfg->dist.threads = 1;
    cfg->log.every_steps = 0;
}

/* ct_trainer_init (from checkpoint resume, or NULL) and ct_trainer_run on
 * comm in dir; a failure's message is printed with this rank's number.
 * The caller frees tr (ct_trainer_free) when init succeeded. */
static inline int ct_test_train(struct ct_trainer *tr, const struct ct_config *cfg,
                                struct ct_comm *comm, const char *dir, const char *resume,
                                struct ct_train_summary *sum)
{
    int rc = ct_trainer_init(tr, cfg, comm, dir, resume);
    if (rc < 0) {
        fprintf(stderr, "[rank %d] init: %s\n", g_comm.rank, ct_error_message());
        return rc;
    }
    if ((rc = ct_trainer_run(tr, sum)) < 0)
        fprintf(stderr, "[rank %d] run: %s\n", g_comm.rank, ct_error_message());
    return rc;
}

#endif
