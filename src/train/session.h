/* A session: everything a rank needs to compute with a model, set up once.
 *
 * Placement (pinning the rank, BLAS threads), the data (the test set, and for
 * training the training set behind a prefetching loader, its images mapped
 * once per node), the model, the optimizer and schedule, the parameters
 * initialised from the seed (rank 0's broadcast, every rank's own draw
 * compared with it), and the SHA-256 of the data files (and of the
 * tokenizer's, data.tokenizer). Training, `eval` of a
 * checkpoint and a later `audit replay` all start here; nothing here knows
 * about run directories, checkpoints on disk, logs or the training loop.
 *
 *     struct ct_session s;
 *     struct ct_session_params sp = {.train = 1, .digests = 1};
 *     rc = ct_session_init(&s, &cfg, &comm, &sp);        // collective
 *     rc = ct_session_evaluate(&s, &loss, &acc);          // collective (train/predict.h)
 *     ct_session_free(&s);
 */
#ifndef CT_TRAIN_SESSION_H
#define CT_TRAIN_SESSION_H

#include <stdint.h>

#include "ckpt/ckpt.h"
#include "config/config.h"
#include "core/shmem.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "parallel/comm.h"
#include "parallel/placement.h"
#include "parallel/shard.h"
#include "train/spec.h"

/* The training set's files, then the test set's. */
#define CT_SESSION_DATA_FILES (2 * CT_DATA_MAX_FILES + 3)
/* The format recorded for train.init_from's file among the data files. */
#define CT_SESSION_INIT_FROM_FORMAT "init_from"

struct ct_session_params {
    int train;   /* load the training set and start the loader (else only the test set) */
    int digests; /* SHA-256 of the data files (rank 0 reads them, all ranks get them) */
};

struct ct_session {
    const struct ct_config *cfg;
    struct ct_comm *comm;

    struct ct_placement placement; /* this rank's cores, NUMA node, device */
    char *placement_table;         /* rank 0: the binding table of all ranks */
    int blas_threads;

    struct ct_shared_alloc shared; /* node-shared memory for the training images */
    struct ct_dataset train;       /* loaded only with params.train */
    struct ct_dataset test;
    struct ct_loader loader;       /* the training batches (params.train) */
    int have_loader;
    int n_classes;
    /* K, the targets of a sample (1: a class label; T: a token window's
     * next tokens), which the training loss and its means count in: the
     * training set's, checked equal to the test set's at set-up (the test
     * set's when only it is loaded). */
    int targets;

    struct ct_batch_plan batches;
    int64_t steps_per_epoch;       /* full global batches (drop_last) */
    int64_t total_steps;           /* over all configured epochs */

    struct ct_model model;
    /* dist.shard_optimizer (ZeRO-1): this rank's slice of the flat
     * parameters, which is all the optimizer holds state for and updates. */
    int sharded;
    struct ct_shard shard;
    struct ct_optimizer opt;       /* over shard.slice elements when sharded, else params.numel */
    struct ct_schedule sched;
    int32_t *eval_labels;          /* (batches.eval_batch) */

    /* With params.digests; the paths point into train.files and test.files,
     * and (data.tokenizer) into tokenizer_files. */
    struct ct_ckpt_data_file data_files[CT_SESSION_DATA_FILES];
    int n_data_files;
    char tokenizer_files[2][CT_CONFIG_PATH_MAX + 16];
};

/* Collective. On failure every rank returns the same error (ct_comm_agree)
 * and the session is freed. */
int ct_session_init(struct ct_session *s, const struct ct_config *cfg, struct ct_comm *comm,
                    const struct ct_session_params *p);
void ct_session_free(struct ct_session *s);

/* Collective. SHA-256 of the parameters in state_dict order, checked to be
 * the same on every rank (CT_EMISMATCH naming how many ranks differ). */
int ct_session_check_replicas(struct ct_session *s, int64_t step, char hex[65]);

/* Peak resident set size of this process, in MiB (ru_maxrss: every shared
 * page it touched counts in full). */
double ct_peak_rss_mib(void);
/* Bytes of optimizer state this rank holds (its slice's, when sharded). */
size_t ct_session_optim_state_bytes(struct ct_session *s);
/* Proportional set size now, in MiB (/proc/self/smaps_rollup: a page shared
 * by k processes counts 1/k), or NaN where the kernel does not say: what the
 * node-shared images save shows here. */
double ct_pss_mib(void);

#endif
