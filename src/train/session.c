/* Session set-up: placement, data, model, optimizer, parameters (see
 * session.h). */
#include "train/session.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/threads.h"
#include "core/sha256.h"
#include "data/bpe.h"
#include "data/sampler.h"
#include "nn/loss.h"

double ct_peak_rss_mib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

double ct_pss_mib(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return NAN;
    char line[256];
    double kib = NAN;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %lf kB", &kib) == 1)
            break;
    fclose(f);
    return kib / 1024.0;
}

/* Placement first: before the data is loaded (so its pages land on the
 * rank's NUMA node) and before any thread starts (threads inherit the
 * binding). ct_placement_apply agrees on errors itself. */
static int place(struct ct_session *s)
{
    struct ct_placement_params pp = ct_spec_placement(s->cfg);
    /* How gradients (and every other allreduce) travel: dist.allreduce. */
    ct_comm_set_allreduce(s->comm, (enum ct_allreduce)s->cfg->dist.allreduce);
    int rc = ct_placement_apply(s->comm, &pp, &s->placement);
    if (rc == 0)
        rc = ct_placement_table(s->comm, &s->placement, &s->placement_table);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: placing the ranks", s->cfg->path);
    s->blas_threads = s->placement.threads;
    /* Deterministic mode: one BLAS thread per product, so no product's bits
     * depend on dist.threads (OpenBLAS may split a sum over threads). */
    if (s->cfg->train.deterministic && s->blas_threads != 1)
        s->blas_threads = ct_set_blas_threads(s->comm->local_world, 1);
    return 0;
}

/* The training images are mapped once per node (data.shared): every rank of
 * the node takes part in the allocation, so this step is collective over
 * the node and its errors are agreed there by the loader of the data set. */
static int load_data(struct ct_session *s, int train)
{
    const struct ct_config *cfg = s->cfg;
    int rc = 0;
    if (train) {
        struct ct_dataset_params p = ct_spec_dataset(cfg, 1);
        if (cfg->data.shared && (rc = ct_comm_shared_alloc(s->comm, &s->shared)) == 0)
            p.shared = &s->shared;
        else if (cfg->data.shared)
            return rc;
        rc = ct_dataset_open(&s->train, &p);
        if (rc < 0)
            return ct_error_wrap(rc, "%s: loading the training set (data.dir = %s)", cfg->path,
                                 cfg->data.dir);
        if (s->train.n > UINT32_MAX)
            return ct_error_set(CT_ERANGE, "%s: %zu training samples (at most 2^32-1)", cfg->path,
                                s->train.n);
    }
    struct ct_dataset_params p = ct_spec_dataset(cfg, 0);
    rc = ct_dataset_open(&s->test, &p);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: loading the test set (data.dir = %s)", cfg->path, cfg->data.dir);
    if (train && (s->test.c != s->train.c || s->test.h != s->train.h || s->test.w != s->train.w))
        return ct_error_set(CT_EFORMAT, "%s: test images are %dx%dx%d but training images are %dx%dx%d",
                            cfg->path, s->test.c, s->test.h, s->test.w, s->train.c, s->train.h,
                            s->train.w);
    if (train && (s->test.targets != s->train.targets || s->test.format != s->train.format))
        return ct_error_set(CT_EFORMAT, "%s: the test set is %s data with %d targets per sample but "
                            "the training set is %s data with %d", cfg->path,
                            ct_data_format_name(s->test.format), s->test.targets,
                            ct_data_format_name(s->train.format), s->train.targets);
    /* A sample has one class label, or (tokens) a target per position. */
    if (s->test.targets != 1 && s->test.format != CT_DATA_FORMAT_TOKENS)
        return ct_error_set(CT_EFORMAT, "%s: the %s set has no labels (data.%s_labels is empty and "
                            "the %s format keeps none inside its files)", cfg->path,
                            train ? "training" : "test", train ? "train" : "test",
                            ct_data_format_name(s->test.format));
    /* A language model reads tokens, and token windows need one. */
    const int lm = strcmp(cfg->model.name, "gpt") == 0;
    if (lm != (s->test.format == CT_DATA_FORMAT_TOKENS))
        return ct_error_set(CT_ECONFIG, lm ? "%s: model.name = gpt needs token data (data.format = tokens), "
                                             "not %s"
                                           : "%s: token data (data.format = tokens) needs a language model "
                                             "(model.name = gpt), not model.name = %s",
                            cfg->path, lm ? ct_data_format_name(s->test.format) : cfg->model.name);
    s->targets = train ? s->train.targets : s->test.targets;
    s->n_classes = s->test.n_classes;
    if (train && s->train.n_classes > s->n_classes)
        s->n_classes = s->train.n_classes;
    return 0;
}

/* data.tokenizer: token data, and a vocabulary that loads (rank 0; the
 * caller agrees). Its files' paths for hash_data. */
static int check_tokenizer(struct ct_session *s)
{
    const struct ct_config *cfg = s->cfg;
    if (!cfg->data.tokenizer[0])
        return 0;
    if (s->test.format != CT_DATA_FORMAT_TOKENS)
        return ct_error_set(CT_ECONFIG, "%s: data.tokenizer = %s is for token data (data.format = "
                            "tokens), not %s", cfg->path, cfg->data.tokenizer,
                            ct_data_format_name(s->test.format));
    const char *names[2] = {CT_BPE_ENCODER_FILE, CT_BPE_MERGES_FILE};
    for (int k = 0; k < 2; k++)
        snprintf(s->tokenizer_files[k], sizeof s->tokenizer_files[k], "%s/%s", cfg->data.tokenizer,
                 names[k]);
    if (s->comm->rank != 0)
        return 0;
    struct ct_bpe *b;
    int rc = ct_bpe_load(&b, cfg->data.tokenizer);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: data.tokenizer", cfg->path);
    ct_bpe_free(b);
    return 0;
}

/* train.init_from names a file rank 0 can read (the caller agrees; the
 * trainer loads it on a fresh start, train/init_from.h). */
static int check_init_from(const struct ct_session *s)
{
    const char *path = s->cfg->train.init_from;
    if (!path[0] || s->comm->rank != 0)
        return 0;
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: train.init_from = %s: %s", s->cfg->path,
                            path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ct_error_set(CT_ECONFIG, "%s: train.init_from = %s: not a file (an npz or a safetensors "
                            "file)", s->cfg->path, path);
    return 0;
}

/* One data file: its path and format; rank 0 hashes it. */
static int add_data_file(struct ct_session *s, const char *path, const char *format, int rc)
{
    struct ct_ckpt_data_file *f = &s->data_files[s->n_data_files++];
    f->path = path;
    f->format = format;
    if (s->comm->rank == 0 && rc == 0) {
        struct stat st;
        rc = ct_sha256_file(f->path, f->sha256);
        if (rc == 0 && stat(f->path, &st) == 0)
            f->size = (uint64_t)st.st_size;
    }
    return rc;
}

/* Rank 0 hashes the data files once (for checkpoint manifests: which data
 * produced which weights), the tokenizer's and train.init_from's, and shares
 * the digests. */
static int hash_data(struct ct_session *s)
{
    int rc = 0;
    s->n_data_files = 0;
    const struct ct_dataset *sets[2] = {&s->train, &s->test};
    for (int d = 0; d < 2; d++)
        for (int i = 0; i < sets[d]->n_files; i++) /* the very paths the sets were opened from */
            rc = add_data_file(s, sets[d]->files[i], ct_data_format_name(sets[d]->format), rc);
    if (s->cfg->data.tokenizer[0])
        for (int k = 0; k < 2; k++)
            rc = add_data_file(s, s->tokenizer_files[k], "gpt2-bpe", rc);
    /* The weights a fresh start loads (train/trainer_setup.c): a resume
     * needs them unchanged too, as it needs the data. */
    if (s->cfg->train.init_from[0])
        rc = add_data_file(s, s->cfg->train.init_from, CT_SESSION_INIT_FROM_FORMAT, rc);
    rc = ct_comm_agree(s->comm, rc);
    for (int i = 0; i < s->n_data_files && rc == 0; i++) {
        rc = ct_comm_bcast(s->comm, s->data_files[i].sha256, CT_SHA256_LEN, 0);
        if (rc == 0)
            rc = ct_comm_bcast(s->comm, &s->data_files[i].size, sizeof s->data_files[i].size, 0);
    }
    return rc;
}

/* Model, optimizer, schedule and the loader, from the config. */
static int build(struct ct_session *s, int train)
{
    const struct ct_config *cfg = s->cfg;
    int rc = ct_spec_batches(cfg, s->comm->world, &s->batches);
    if (rc < 0)
        return rc;
    const struct ct_dataset *shape_of = train ? &s->train : &s->test;
    if (train) {
        s->steps_per_epoch = ct_sampler_steps_per_epoch(s->train.n, cfg->train.global_batch);
        s->total_steps = s->steps_per_epoch * cfg->train.epochs;
        struct ct_loader_params lp = ct_spec_loader(cfg);
        rc = ct_loader_init(&s->loader, &s->train, cfg->train.global_batch, cfg->train.seed,
                            s->comm->world, s->comm->rank, &lp);
        if (rc < 0)
            return ct_error_wrap(CT_ECONFIG, "%s", cfg->path);
        s->have_loader = 1;
    }
    struct ct_model_spec ms;
    ct_spec_model(cfg, &(struct ct_data_shape){shape_of->c, shape_of->h, shape_of->w, s->n_classes}, &ms);
    if ((rc = ct_model_build(&s->model, &ms, s->batches.max_batch)) < 0)
        return ct_error_wrap(rc, "%s", cfg->path);
    s->eval_labels = malloc((size_t)s->batches.eval_batch * (size_t)s->test.targets *
                            sizeof *s->eval_labels);
    if (!s->eval_labels)
        return ct_error_set(CT_ENOMEM, "labels buffer: out of memory");
    struct ct_optimizer_params hp = ct_spec_optimizer(cfg);
    size_t opt_numel = s->model.params.numel;
    if (train && cfg->dist.shard_optimizer) {
        if ((rc = ct_shard_plan(&s->shard, s->model.params.numel, s->comm->world,
                                s->comm->rank)) < 0)
            return ct_error_wrap(rc, "%s", cfg->path);
        s->sharded = 1;
        opt_numel = s->shard.slice;
    }
    if ((rc = ct_optimizer_init(&s->opt, &hp, opt_numel)) < 0)
        return ct_error_wrap(rc, "%s", cfg->path);
    s->sched = ct_spec_schedule(cfg, s->total_steps);
    return 0;
}

/* Modules that need cross-rank sums (synchronized BatchNorm) get them
 * through the model's forward context, without depending on src/parallel. */
static int step_allreduce(void *ctx, double *buf, size_t n)
{
    return ct_comm_allreduce_f64((struct ct_comm *)ctx, buf, n, CT_REDUCE_SUM);
}

/* Every rank draws the initial parameters from the seed; rank 0's are then
 * broadcast anyway, and a rank whose own draw differed says so (it would mean
 * different code or libraries on different ranks). */
static int init_params(struct ct_session *s)
{
    ct_model_init_params(&s->model, s->cfg->train.seed);
    s->model.fwd.seed = s->cfg->train.seed;
    s->model.fwd.allreduce_sum = s->comm->world > 1 ? step_allreduce : NULL;
    s->model.fwd.allreduce_ctx = s->comm;
    uint8_t mine[CT_SHA256_LEN] = {0}, root[CT_SHA256_LEN];
    /* A local failure must not skip the collectives below (the other ranks
     * would wait in them): remember it and report it after. */
    int local = ct_flat_sha256(&s->model.params, mine);
    memcpy(root, mine, sizeof root);
    int rc;
    if ((rc = ct_comm_bcast(s->comm, root, sizeof root, 0)) < 0)
        return rc;
    if ((rc = ct_comm_bcast(s->comm, s->model.params.data, s->model.params.numel * sizeof(float), 0)) < 0)
        return rc;
    if (local < 0)
        return local;
    if (memcmp(mine, root, sizeof root) != 0) {
        char a[CT_SHA256_HEX_LEN], b[CT_SHA256_HEX_LEN];
        ct_sha256_hex(mine, a);
        ct_sha256_hex(root, b);
        fprintf(stderr,
                "[rank %d] warning: initial parameters drawn here (sha256 %.16s) differ from rank "
                "0's (%.16s); using rank 0's. Are all ranks running the same build?\n",
                s->comm->rank, a, b);
    }
    return 0;
}

int ct_session_init(struct ct_session *s, const struct ct_config *cfg, struct ct_comm *comm,
                    const struct ct_session_params *p)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->comm = comm;
    /* The products' precision, process-wide (core/gemm.h), before anything
     * computes: training, evaluation, generation and audit replays all
     * come through here. */
    ct_gemm_set_precision(cfg->train.precision);
    int rc = place(s);
    /* load_data is collective over the node (the shared images): every rank
     * runs it, then all agree. */
    if (rc == 0)
        rc = ct_comm_agree(comm, load_data(s, p->train));
    if (rc == 0)
        rc = ct_comm_agree(comm, check_tokenizer(s));
    if (rc == 0 && p->digests)
        rc = ct_comm_agree(comm, check_init_from(s));
    if (rc == 0)
        rc = ct_comm_agree(comm, build(s, p->train));
    if (rc == 0)
        rc = ct_comm_agree(comm, init_params(s));
    if (rc == 0 && p->digests)
        rc = hash_data(s);
    if (rc < 0)
        ct_session_free(s);
    return rc;
}

size_t ct_session_optim_state_bytes(struct ct_session *s)
{
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    int ns = ct_optimizer_state(&s->opt, bufs, names);
    size_t bytes = 0;
    for (int i = 0; i < ns; i++)
        bytes += bufs[i]->numel * sizeof(float);
    return bytes;
}

void ct_session_free(struct ct_session *s)
{
    if (s->have_loader)
        ct_loader_free(&s->loader);
    free(s->placement_table);
    free(s->eval_labels);
    ct_optimizer_free(&s->opt);
    ct_shard_free(&s->shard);
    ct_model_free(&s->model);
    ct_dataset_close(&s->train);
    ct_dataset_close(&s->test);
    memset(s, 0, sizeof *s);
}

/* The ranks that differ are named through one SUM-allreduce of a bitmap of
 * the first 63 * 64 ranks (each sets only its own bit, so the sum is the
 * union) and a count of differing ranks beyond them: fixed size, on the
 * stack, so no rank can fail to take part. */
#define REPLICA_WORDS 64
int ct_session_check_replicas(struct ct_session *s, int64_t step, char hex[65])
{
    uint8_t mine[CT_SHA256_LEN] = {0}, root[CT_SHA256_LEN];
    int local = ct_flat_sha256(&s->model.params, mine); /* reported after the collectives */
    memcpy(root, mine, sizeof root);
    int rc;
    if ((rc = ct_comm_bcast(s->comm, root, sizeof root, 0)) < 0)
        return rc;
    int64_t bits[REPLICA_WORDS + 1] = {0};
    const int rank = s->comm->rank;
    if (memcmp(mine, root, sizeof root) != 0) {
        if (rank < 63 * REPLICA_WORDS)
            bits[rank / 63] = (int64_t)1 << (rank % 63);
        else
            bits[REPLICA_WORDS] = 1;
    }
    if ((rc = ct_comm_allreduce_i64(s->comm, bits, REPLICA_WORDS + 1, CT_REDUCE_SUM)) < 0)
        return rc;
    if (local < 0)
        return local;
    char names[160] = "";
    size_t len = 0;
    int64_t differ = bits[REPLICA_WORDS];
    for (int r = 0; r < 63 * REPLICA_WORDS && r < s->comm->world; r++)
        if ((bits[r / 63] >> (r % 63) & 1) && differ++ < 16)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%d", len ? "," : "", r);
    ct_sha256_hex(root, hex);
    if (differ)
        return ct_error_set(CT_EMISMATCH,
                            "after step %lld the parameters of %lld rank(s) differ from rank 0's "
                            "(ranks %s%s): the replicas diverged",
                            (long long)step, (long long)differ, names, differ > 16 ? ",..." : "");
    return 0;
}
