/* The data-parallel training loop (see trainer.h). */
#include "train/trainer.h"

#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/version.h"
#include "core/threads.h"
#include "models/models.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "train/state.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ct_peak_rss_mib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ct_error_set(CT_EINVAL, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return ct_error_set(CT_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return ct_error_set(CT_EIO, "%s: exists and is not a directory", buf);
            *p = c;
            if (c == '\0')
                break;
        }
    }
    return 0;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Rank 0: create the run directory; move an earlier run's files aside so that
 * nothing already saved is lost; write the resolved config and the run record. */
/* Is `name` one of the files or directories a run owns in its run dir? */
static int run_owned(const char *name)
{
    static const char *const owned[] = {"metrics.jsonl", "steps.jsonl", "config.ini", "run.json",
                                        "placement.txt", "latest"};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
        if (strcmp(name, owned[i]) == 0)
            return 1;
    return strncmp(name, "ckpt-", 5) == 0;
}

/* Rank 0: create the run directory; unless resuming, move an earlier run's
 * files (metrics, checkpoints, ...) aside so that nothing already saved is
 * lost; write the resolved config, the binding table and the run record. */
/* Keep only the lines of a .jsonl log whose "step" is at most max_step: a
 * run resumed after a crash repeats the steps after its checkpoint, and the
 * log should hold each step once. */
static int trim_log(const char *path, int64_t max_step)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return 0; /* nothing logged yet */
    char tmp[1500];
    snprintf(tmp, sizeof tmp, "%s.trim", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return ct_error_set(CT_EIO, "%s: cannot write: %s", tmp, strerror(errno));
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) {
        const char *p = strstr(line, "\"step\": ");
        long long step = p ? strtoll(p + 8, NULL, 10) : 0;
        if (step <= max_step)
            fputs(line, out);
    }
    free(line);
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, path) != 0)
        return ct_error_set(CT_EIO, "%s: cannot rewrite: %s", path, strerror(errno));
    return 0;
}

static int prepare_run_dir(struct ct_trainer *tr)
{
    int rc = make_dirs(tr->run_dir);
    if (rc < 0)
        return rc;
    char path[1400], prev[1200], dst[1500];
    /* A run resumed from one of this directory's own checkpoints continues
     * its files; anything else (a fresh run, or a run started from another
     * run's checkpoint) moves them aside first. */
    DIR *d = tr->resumed_in_place ? NULL : opendir(tr->run_dir);
    struct dirent *e;
    prev[0] = '\0';
    while (d && (e = readdir(d)) != NULL) {
        if (!run_owned(e->d_name))
            continue;
        if (!prev[0]) {
            time_t t = time(NULL);
            struct tm tm;
            gmtime_r(&t, &tm);
            char stamp[32];
            strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
            snprintf(prev, sizeof prev, "%s/previous-%s", tr->run_dir, stamp);
            for (int k = 1; file_exists(prev); k++)
                snprintf(prev, sizeof prev, "%s/previous-%s-%d", tr->run_dir, stamp, k);
            if ((rc = make_dirs(prev)) < 0) {
                closedir(d);
                return rc;
            }
        }
        snprintf(path, sizeof path, "%s/%s", tr->run_dir, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", prev, e->d_name);
        if (rename(path, dst) != 0) {
            rc = ct_error_set(CT_EIO, "%s: cannot move the previous run's file to %s: %s", path,
                              dst, strerror(errno));
            closedir(d);
            return rc;
        }
    }
    if (d)
        closedir(d);
    if (prev[0])
        ct_log_info("run directory %s held an earlier run: moved it to %s", tr->run_dir, prev);

    snprintf(path, sizeof path, "%s/config.ini", tr->run_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return ct_error_set(CT_EIO, "%s: cannot write: %s", path, strerror(errno));
    rc = ct_config_write(tr->cfg, f);
    if (fclose(f) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno));
    if (rc < 0)
        return rc;

    snprintf(path, sizeof path, "%s/placement.txt", tr->run_dir);
    if (!(f = fopen(path, "w")))
        return ct_error_set(CT_EIO, "%s: cannot write: %s", path, strerror(errno));
    fputs(tr->placement_table ? tr->placement_table : "", f);
    if (fclose(f) != 0)
        return ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno));

    /* run.json describes how the run started; a resumed run's differences
     * are in its checkpoints' manifests ("changes"). */
    snprintf(path, sizeof path, "%s/run.json", tr->run_dir);
    if (tr->resumed_in_place && file_exists(path))
        goto logs;
    if (!(f = fopen(path, "w")))
        return ct_error_set(CT_EIO, "%s: cannot write: %s", path, strerror(errno));
    char cfg_path[CT_CONFIG_PATH_MAX * 2];
    size_t j = 0;
    for (const char *s = tr->cfg->path; *s && j < sizeof cfg_path - 3; s++) {
        if (*s == '"' || *s == '\\')
            cfg_path[j++] = '\\';
        cfg_path[j++] = *s;
    }
    cfg_path[j] = '\0';
    fprintf(f,
            "{\"version\": \"%s\", \"git\": \"%s\", \"config\": \"%s\", \"world\": %d, "
            "\"blas_threads\": %d, \"blas\": \"%s\", \"gemm\": \"%s\", \"host0\": \"%s\", "
            "\"params\": %zu, "
            "\"steps_per_epoch\": %lld, \"total_steps\": %lld}\n",
            CT_VERSION, CT_GIT_DESCRIBE, cfg_path, tr->comm->world, tr->blas_threads,
            ct_blas_config(), ct_sgemm_impl(), tr->comm->host, ct_model_param_count(&tr->model),
            (long long)tr->steps_per_epoch, (long long)tr->total_steps);
    if (fclose(f) != 0)
        return ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno));

logs:
    /* A run resumed in place continues the logs of the run it resumes,
     * without the steps after the checkpoint (they are about to be redone). */
    snprintf(path, sizeof path, "%s/metrics.jsonl", tr->run_dir);
    if (tr->resumed_in_place && (rc = trim_log(path, tr->step)) < 0)
        return rc;
    if (!(tr->metrics = fopen(path, tr->resumed_in_place ? "a" : "w")))
        return ct_error_set(CT_EIO, "%s: cannot write: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/steps.jsonl", tr->run_dir);
    if (tr->resumed_in_place && (rc = trim_log(path, tr->step)) < 0)
        return rc;
    if (!(tr->steps_log = fopen(path, tr->resumed_in_place ? "a" : "w")))
        return ct_error_set(CT_EIO, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

static int load_data(struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    int rc = ct_dataset_load(&tr->train, cfg->data.dir, cfg->data.train_images,
                             cfg->data.train_labels, cfg->data.mean, cfg->data.std);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: loading the training set (data.dir = %s)", cfg->path, cfg->data.dir);
    rc = ct_dataset_load(&tr->test, cfg->data.dir, cfg->data.test_images, cfg->data.test_labels,
                         cfg->data.mean, cfg->data.std);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: loading the test set (data.dir = %s)", cfg->path, cfg->data.dir);
    if (tr->test.sample_numel != tr->train.sample_numel)
        return ct_error_set(CT_EFORMAT, "%s: test images are %dx%dx%d but training images are %dx%dx%d",
                            cfg->path, tr->test.c, tr->test.h, tr->test.w, tr->train.c,
                            tr->train.h, tr->train.w);
    if (tr->train.n > UINT32_MAX)
        return ct_error_set(CT_ERANGE, "%s: %zu training samples (at most 2^32-1)", cfg->path, tr->train.n);
    tr->n_classes = tr->train.n_classes > tr->test.n_classes ? tr->train.n_classes : tr->test.n_classes;
    return 0;
}

/* Rank 0 hashes the data files once (for checkpoint manifests: which data
 * produced which weights) and shares the digests. */
static int hash_data(struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    const char *files[4] = {cfg->data.train_images, cfg->data.train_labels, cfg->data.test_images,
                            cfg->data.test_labels};
    int rc = 0;
    tr->n_data_files = 4;
    for (int i = 0; i < 4; i++) {
        /* The very path the data set was loaded from. */
        char *p = ct_dataset_path(cfg->data.dir, files[i]);
        snprintf(tr->data_paths[i], sizeof tr->data_paths[i], "%s", p ? p : files[i]);
        free(p);
        tr->data_files[i].path = tr->data_paths[i];
        if (tr->comm->rank == 0 && rc == 0) {
            struct stat st;
            rc = ct_sha256_file(tr->data_paths[i], tr->data_files[i].sha256);
            if (rc == 0 && stat(tr->data_paths[i], &st) == 0)
                tr->data_files[i].size = (uint64_t)st.st_size;
        }
    }
    rc = ct_comm_agree(tr->comm, rc);
    for (int i = 0; i < 4 && rc == 0; i++) {
        rc = ct_comm_bcast(tr->comm, tr->data_files[i].sha256, CT_SHA256_LEN, 0);
        if (rc == 0)
            rc = ct_comm_bcast(tr->comm, &tr->data_files[i].size, sizeof tr->data_files[i].size, 0);
    }
    return rc;
}

/* Collective: find the checkpoint to resume from (rank 0 looks, everybody
 * learns the answer), open and verify it on every rank, restore. */
static int resume_from(struct ct_trainer *tr, const char *resume)
{
    char path[1200];
    int64_t found = 1;
    int rc = 0;
    if (strcmp(resume, "auto") == 0) {
        if (tr->comm->rank == 0) {
            rc = ct_ckpt_find_latest(tr->run_dir, path, sizeof path);
            if (rc == CT_ENOENT) {
                found = 0;
                rc = 0;
            }
        }
        rc = ct_comm_agree(tr->comm, rc);
        if (rc == 0)
            rc = ct_comm_bcast(tr->comm, &found, sizeof found, 0);
        if (rc == 0)
            rc = ct_comm_bcast(tr->comm, path, sizeof path, 0);
        if (rc < 0)
            return rc;
        if (!found) {
            ct_log_info("resume auto: no checkpoint in %s yet, starting from scratch", tr->run_dir);
            return 0;
        }
    } else {
        snprintf(path, sizeof path, "%s", resume);
    }
    static struct ct_ckpt ck;
    rc = ct_ckpt_open(&ck, path);
    if (rc == 0) {
        rc = ct__trainer_restore(tr, &ck);
        ct_ckpt_close(&ck);
    }
    rc = ct_comm_agree(tr->comm, rc);
    if (rc == 0) {
        tr->resumed = 1;
        /* In place: the checkpoint is a directory of this run directory. */
        char a[PATH_MAX], b[PATH_MAX], parent[1300];
        snprintf(parent, sizeof parent, "%s/..", path);
        tr->resumed_in_place = realpath(parent, a) && realpath(tr->run_dir, b) && strcmp(a, b) == 0;
        ct_log_info("resumed from %s: step %lld (epoch %lld, step %lld of it)", path,
                    (long long)tr->step, (long long)tr->sampler.epoch, (long long)tr->sampler.step);
        for (int i = 0; i < tr->n_changes; i++)
            ct_log_info("  changed since the checkpoint: %s", tr->changes[i]);
    }
    return rc;
}

static int build(struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    struct ct_comm *c = tr->comm;
    if (cfg->train.global_batch % c->world != 0)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.global_batch = %d is not divisible by the number of ranks (%d)",
                            cfg->path, cfg->train.global_batch, c->world);
    tr->local_batch = cfg->train.global_batch / c->world;
    if (tr->local_batch % cfg->train.accum_steps != 0)
        return ct_error_set(CT_ECONFIG,
                            "%s: the per-rank batch (%d = train.global_batch %d / %d ranks) is not "
                            "divisible by train.accum_steps = %d",
                            cfg->path, tr->local_batch, cfg->train.global_batch, c->world,
                            cfg->train.accum_steps);
    tr->micro_batch = tr->local_batch / cfg->train.accum_steps;
    /* The arena holds activations for max(micro-batch, eval batch) rows, so
     * an evaluation batch above the micro-batch costs memory: by default
     * evaluate in micro-batch chunks. */
    tr->eval_batch = cfg->train.eval_batch > 0 ? cfg->train.eval_batch : tr->micro_batch;
    int rc = ct_sampler_init(&tr->sampler, (uint32_t)tr->train.n, cfg->train.global_batch,
                             cfg->train.seed, c->world, c->rank);
    if (rc < 0)
        return ct_error_wrap(CT_ECONFIG, "%s", cfg->path);
    tr->steps_per_epoch = ct_sampler_steps_per_epoch(tr->train.n, cfg->train.global_batch);
    tr->total_steps = tr->steps_per_epoch * cfg->train.epochs;

    struct ct_model_spec spec = ct_model_default_spec();
    spec.name = cfg->model.name;
    spec.in_c = tr->train.c;
    spec.in_h = tr->train.h;
    spec.in_w = tr->train.w;
    spec.n_classes = tr->n_classes;
    spec.n_hidden = cfg->model.n_hidden;
    for (int i = 0; i < cfg->model.n_hidden && i < CT_MODEL_MAX_HIDDEN; i++)
        spec.hidden[i] = cfg->model.hidden[i];
    spec.n_channels = cfg->model.n_channels;
    for (int i = 0; i < cfg->model.n_channels && i < CT_MODEL_MAX_HIDDEN; i++)
        spec.channels[i] = cfg->model.channels[i];
    spec.blocks = cfg->model.blocks;
    spec.depth = cfg->model.depth;
    spec.width = cfg->model.width;
    spec.heads = cfg->model.heads;
    spec.patch = cfg->model.patch;
    spec.mlp_ratio = cfg->model.mlp_ratio;
    spec.gelu_tanh = cfg->model.gelu_tanh;
    spec.dropout = (float)cfg->model.dropout;
    spec.bn_sync = cfg->model.bn_sync;
    spec.fused = cfg->model.fused;
    int max_batch = tr->micro_batch > tr->eval_batch ? tr->micro_batch : tr->eval_batch;
    if ((rc = ct_model_build(&tr->model, &spec, max_batch)) < 0)
        return ct_error_wrap(rc, "%s", cfg->path);
    tr->labels = malloc((size_t)max_batch * sizeof *tr->labels);
    if (!tr->labels)
        return ct_error_set(CT_ENOMEM, "labels buffer: out of memory");

    struct ct_optimizer_params hp = {
        .kind = strcmp(cfg->optim.name, "adamw") == 0 ? CT_OPTIM_ADAMW : CT_OPTIM_SGD,
        .sgd = {.momentum = cfg->optim.momentum,
                .dampening = cfg->optim.dampening,
                .weight_decay = cfg->optim.weight_decay,
                .nesterov = cfg->optim.nesterov},
        .adamw = {.beta1 = cfg->optim.beta1,
                  .beta2 = cfg->optim.beta2,
                  .eps = cfg->optim.eps,
                  .weight_decay = cfg->optim.weight_decay}};
    if ((rc = ct_optimizer_init(&tr->opt, &hp, &tr->model.layout)) < 0)
        return ct_error_wrap(rc, "%s", cfg->path);
    tr->sched = (struct ct_schedule){.kind = (enum ct_sched_kind)cfg->schedule.kind,
                                     .base_lr = cfg->optim.lr,
                                     .total_steps = tr->total_steps,
                                     .warmup_steps = cfg->schedule.warmup_steps,
                                     .step_size = cfg->schedule.step_size,
                                     .gamma = cfg->schedule.gamma,
                                     .min_lr = cfg->schedule.min_lr};
    return 0;
}

/* Modules that need cross-rank sums (synchronized BatchNorm) get them
 * through the model's step info, without depending on src/dist. */
static int step_allreduce(void *ctx, double *buf, size_t n)
{
    return ct_comm_allreduce_f64((struct ct_comm *)ctx, buf, n, CT_REDUCE_SUM);
}

/* Every rank draws the initial parameters from the seed; rank 0's are then
 * broadcast anyway, and a rank whose own draw differed says so (it would mean
 * different code or libraries on different ranks). */
static int init_params(struct ct_trainer *tr)
{
    ct_model_init_params(&tr->model, tr->cfg->train.seed);
    tr->model.step.seed = tr->cfg->train.seed;
    tr->model.step.allreduce_sum = tr->comm->world > 1 ? step_allreduce : NULL;
    tr->model.step.allreduce_ctx = tr->comm;
    uint8_t mine[CT_SHA256_LEN] = {0}, root[CT_SHA256_LEN];
    /* A local failure must not skip the collectives below (the other ranks
     * would wait in them): remember it and report it after. */
    int local = ct_flat_sha256(&tr->model.params, mine);
    memcpy(root, mine, sizeof root);
    int rc;
    if ((rc = ct_comm_bcast(tr->comm, root, sizeof root, 0)) < 0)
        return rc;
    if ((rc = ct_comm_bcast(tr->comm, tr->model.params.data, tr->model.params.numel * sizeof(float), 0)) < 0)
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
                tr->comm->rank, a, b);
    }
    return 0;
}

int ct_trainer_init(struct ct_trainer *tr, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume)
{
    memset(tr, 0, sizeof *tr);
    tr->last_ckpt_step = -1;
    tr->cfg = cfg;
    tr->comm = comm;
    snprintf(tr->run_dir, sizeof tr->run_dir, "%s", run_dir ? run_dir : "");
    /* Placement first: before the data is loaded (so its pages land on the
     * rank's NUMA node) and before any thread starts (threads inherit the
     * binding). ct_placement_apply agrees on errors itself. */
    struct ct_placement_params pp = ct_placement_default_params();
    pp.mode = (enum ct_placement_mode)cfg->dist.placement;
    pp.threads = cfg->dist.threads;
    pp.use_hyperthreads = cfg->dist.use_hyperthreads;
    int rc = ct_placement_apply(comm, &pp, &tr->placement);
    if (rc == 0)
        rc = ct_placement_table(comm, &tr->placement, &tr->placement_table);
    if (rc < 0) {
        ct_trainer_free(tr);
        return ct_error_wrap(rc, "%s: placing the ranks", cfg->path);
    }
    tr->blas_threads = tr->placement.threads;

    rc = ct_comm_agree(comm, load_data(tr));
    if (rc == 0)
        rc = ct_comm_agree(comm, build(tr));
    if (rc == 0)
        rc = ct_comm_agree(comm, init_params(tr));
    if (rc == 0 && run_dir)
        rc = hash_data(tr);
    if (rc == 0 && run_dir && resume)
        rc = resume_from(tr, resume);
    if (rc == 0 && run_dir)
        rc = ct_comm_agree(comm, comm->rank == 0 ? prepare_run_dir(tr) : 0);
    if (rc < 0) {
        ct_trainer_free(tr);
        return rc;
    }
    ct_log_info("ctrain-dist %s (%s): %d rank%s x %d BLAS thread%s, conv products %s, host %s",
                CT_VERSION, CT_GIT_DESCRIBE, comm->world, comm->world == 1 ? "" : "s",
                tr->blas_threads, tr->blas_threads == 1 ? "" : "s", ct_sgemm_impl(), comm->host);
    if (tr->placement_table)
        ct_log_info("%s", tr->placement_table);
    const char *blas_warning = ct_blas_kernel_warning();
    if (blas_warning)
        ct_log_warn("%s", blas_warning);
    if (getenv("CT__BLAS_REEXEC"))
        ct_log_info("OpenBLAS: using its %s kernels (ctrain-dist set OPENBLAS_CORETYPE=%s: OpenBLAS's "
                    "own detection picked generic ones for this CPU; CT_BLAS_CORETYPE_AUTO=0 turns this off)",
                    getenv("CT__BLAS_REEXEC"), getenv("CT__BLAS_REEXEC"));
    ct_log_info("model %s: %zu parameters; data %zu train / %zu test samples of %dx%dx%d, %d classes",
                cfg->model.name, ct_model_param_count(&tr->model), tr->train.n, tr->test.n,
                tr->train.c, tr->train.h, tr->train.w, tr->n_classes);
    ct_log_info("global batch %d (%d per rank), %lld steps/epoch, %d epochs, max_steps %lld; run dir %s",
                cfg->train.global_batch, tr->local_batch, (long long)tr->steps_per_epoch,
                cfg->train.epochs, (long long)cfg->train.max_steps, tr->run_dir);
    return 0;
}

void ct_trainer_free(struct ct_trainer *tr)
{
    if (tr->metrics)
        fclose(tr->metrics);
    if (tr->steps_log)
        fclose(tr->steps_log);
    free(tr->placement_table);
    for (int i = 0; i < tr->n_changes; i++)
        free(tr->changes[i]);
    free(tr->labels);
    ct_sampler_free(&tr->sampler);
    ct_optimizer_free(&tr->opt);
    ct_model_free(&tr->model);
    ct_dataset_free(&tr->train);
    ct_dataset_free(&tr->test);
    memset(tr, 0, sizeof *tr);
}

int ct_trainer_evaluate(struct ct_trainer *tr, double *loss, double *acc)
{
    size_t first, count;
    ct_shard_range(tr->test.n, tr->comm->world, tr->comm->rank, &first, &count);
    /* Buffers (BatchNorm running statistics) follow DDP's policy: rank 0's
     * are the model's. With synchronized statistics they are equal anyway. */
    int rc;
    if (tr->model.buffers.numel > 0 &&
        (rc = ct_comm_bcast(tr->comm, tr->model.buffers.data, tr->model.buffers.numel * sizeof(float), 0)) < 0)
        return rc;
    ct_model_set_training(&tr->model, 0);
    tr->model.step.sample_index = NULL;
    double sums[3] = {0, 0, 0}; /* loss, correct, samples */
    for (size_t off = 0; off < count; off += (size_t)tr->eval_batch) {
        int B = (int)(count - off < (size_t)tr->eval_batch ? count - off : (size_t)tr->eval_batch);
        ct_dataset_gather_range(&tr->test, first + off, (size_t)B, ct_model_input(&tr->model), tr->labels);
        const float *logits = ct_model_forward(&tr->model, B);
        int64_t hits = 0;
        sums[0] += ct_xent_forward_backward(NULL, logits, tr->labels, B, tr->n_classes, 0.0f, &hits);
        sums[1] += (double)hits;
        sums[2] += B;
    }
    ct_model_set_training(&tr->model, 1);
    rc = ct_comm_allreduce_f64(tr->comm, sums, 3, CT_REDUCE_SUM);
    if (rc < 0)
        return rc;
    if (sums[2] != (double)tr->test.n)
        return ct_error_set(CT_ESTATE, "evaluation counted %.0f samples, expected %zu", sums[2], tr->test.n);
    *loss = sums[0] / sums[2];
    *acc = sums[1] / sums[2];
    return 0;
}

/* Compare every rank's parameter digest with rank 0's. */
static int check_replicas(struct ct_trainer *tr, char hex[CT_SHA256_HEX_LEN])
{
    uint8_t mine[CT_SHA256_LEN] = {0}, root[CT_SHA256_LEN];
    int local = ct_flat_sha256(&tr->model.params, mine); /* reported after the collectives */
    memcpy(root, mine, sizeof root);
    int rc;
    if ((rc = ct_comm_bcast(tr->comm, root, sizeof root, 0)) < 0)
        return rc;
    int64_t differ = memcmp(mine, root, sizeof root) != 0;
    if ((rc = ct_comm_allreduce_i64(tr->comm, &differ, 1, CT_REDUCE_SUM)) < 0)
        return rc;
    if (local < 0)
        return local;
    ct_sha256_hex(root, hex);
    if (differ)
        return ct_error_set(CT_EMISMATCH, "after step %lld the parameters of %lld rank(s) differ from rank 0's",
                            (long long)tr->step, (long long)differ);
    return 0;
}

static void write_metrics(struct ct_trainer *tr, const struct ct_epoch_metrics *m)
{
    if (tr->comm->rank != 0)
        return;
    char test_loss[32], test_acc[32];
    if (isnan(m->test_loss)) {
        snprintf(test_loss, sizeof test_loss, "null");
        snprintf(test_acc, sizeof test_acc, "null");
    } else {
        snprintf(test_loss, sizeof test_loss, "%.6f", m->test_loss);
        snprintf(test_acc, sizeof test_acc, "%.4f", m->test_acc);
    }
    fprintf(tr->metrics,
            "{\"epoch\": %d, \"step\": %lld, \"partial\": %s, \"train_loss\": %.6f, "
            "\"test_loss\": %s, \"test_acc\": %s, \"samples_per_s\": %.1f, \"epoch_s\": %.4f, "
            "\"eval_s\": %.4f, \"lr\": %.8g, \"peak_rss_mib\": %.1f, \"world\": %d, "
            "\"data_s\": %.4f, \"compute_s\": %.4f, \"allreduce_s\": %.4f, \"optim_s\": %.4f, "
            "\"param_sha256\": \"%s\"}\n",
            m->epoch, (long long)m->step, m->partial ? "true" : "false", m->train_loss, test_loss,
            test_acc, m->samples_per_s, m->epoch_s, m->eval_s, m->lr, m->peak_rss_mib,
            tr->comm->world, m->phase_s[CT_PHASE_DATA], m->phase_s[CT_PHASE_COMPUTE],
            m->phase_s[CT_PHASE_ALLREDUCE], m->phase_s[CT_PHASE_OPTIM], m->param_sha256);
    fflush(tr->metrics);
    if (isnan(m->test_loss))
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  %.0f samples/s  %.2f s  rss %.0f MiB",
                    m->epoch, tr->cfg->train.epochs, m->partial ? " (partial)" : "",
                    (long long)m->step, m->train_loss, m->samples_per_s, m->epoch_s, m->peak_rss_mib);
    else
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  test_loss %.4f  test_acc %.4f  "
                    "%.0f samples/s  %.2f s  rss %.0f MiB",
                    m->epoch, tr->cfg->train.epochs, m->partial ? " (partial)" : "",
                    (long long)m->step, m->train_loss, m->test_loss, m->test_acc, m->samples_per_s,
                    m->epoch_s, m->peak_rss_mib);
}

/* One global step on this rank's slice. Returns this rank's loss sum and adds
 * the time of each phase to t[CT_PHASE_*]. */
static int train_step(struct ct_trainer *tr, const uint32_t *idx, int n, double *loss_sum,
                      double t[CT_PHASE_COUNT])
{
    struct ct_model *m = &tr->model;
    const float scale = 1.0f / (float)tr->cfg->train.global_batch;
    double t_data = 0.0, t0 = now_s();
    *loss_sum = 0.0;
    ct_model_zero_grad(m);
    /* Micro-batches: backward accumulates into the gradients, so k of them
     * sum to the gradient of the whole per-rank batch; one allreduce after. */
    for (int off = 0; off < n; off += tr->micro_batch) {
        int mb = n - off < tr->micro_batch ? n - off : tr->micro_batch;
        double td = now_s();
        ct_dataset_gather(&tr->train, idx + off, (size_t)mb, ct_model_input(m), tr->labels);
        t_data += now_s() - td;
        m->step.epoch = tr->sampler.epoch;
        m->step.sample_index = idx + off;
        const float *logits = ct_model_forward(m, mb);
        *loss_sum += ct_xent_forward_backward(ct_model_output_grad(m), logits, tr->labels, mb,
                                              tr->n_classes, scale, NULL);
        ct_model_backward(m, mb, NULL, NULL);
    }
    double t2 = now_s();
    if (m->step.status < 0)
        return ct_error_wrap(m->step.status, "step %lld: a cross-rank sum inside the model failed",
                             (long long)tr->step);
    int rc = ct_comm_allreduce_f32(tr->comm, m->grads.data, m->grads.numel);
    if (rc < 0)
        return rc;
    double t3 = now_s();
    /* Clipping after the allreduce: every rank sees the same summed
     * gradient, so every rank computes the same norm and scale. */
    if (tr->cfg->optim.clip_norm > 0)
        tr->last_grad_norm = ct_clip_grad_norm(m->grads.data, m->grads.numel, tr->cfg->optim.clip_norm);
    ct_optimizer_step(&tr->opt, m->params.data, m->grads.data, m->params.numel,
                      ct_schedule_lr(&tr->sched, tr->step));
    double t4 = now_s();
    t[CT_PHASE_DATA] += t_data;
    t[CT_PHASE_COMPUTE] += t2 - t0 - t_data;
    t[CT_PHASE_ALLREDUCE] += t3 - t2;
    t[CT_PHASE_OPTIM] += t4 - t3;
    tr->step++;
    return 0;
}

static volatile sig_atomic_t g_stop_signal;

void ct_trainer_request_stop(int signal_number) { g_stop_signal = signal_number; }

/* Checkpoint now unless one was just written at this step; what to do when
 * it fails is the config's choice (checkpoint.on_error). */
static int checkpoint(struct ct_trainer *tr)
{
    if (tr->last_ckpt_step == tr->step)
        return 0;
    int rc = ct__trainer_save(tr);
    if (rc < 0 && tr->cfg->checkpoint.on_error_continue) {
        ct_log_warn("checkpoint at step %lld failed, training goes on (checkpoint.on_error = "
                    "continue): %s", (long long)tr->step, ct_error_message());
        return 0;
    }
    /* ct_ckpt_write agrees on failures: every rank returns this error. */
    tr->error_agreed = rc < 0;
    return rc < 0 ? ct_error_wrap(rc, "checkpoint at step %lld", (long long)tr->step) : 0;
}

/* Rank 0: one line of steps.jsonl (the mean loss of the last `n` steps). */
static void write_step(struct ct_trainer *tr, double loss, int64_t n)
{
    if (tr->comm->rank != 0 || !tr->steps_log)
        return;
    fprintf(tr->steps_log, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g}\n", (long long)tr->step,
            loss, ct_schedule_lr(&tr->sched, tr->step - 1));
    (void)n;
    fflush(tr->steps_log);
}

int ct_trainer_run(struct ct_trainer *tr, struct ct_train_summary *summary)
{
    const struct ct_config *cfg = tr->cfg;
    struct ct_comm *c = tr->comm;
    int64_t max_steps = cfg->train.max_steps;
    memset(summary, 0, sizeof *summary);
    tr->error_agreed = 0;
    int rc = 0;
    int stopped = 0, signalled = 0;
    int64_t samples_total = 0;

    for (int epoch = (int)tr->sampler.epoch; epoch < cfg->train.epochs && !stopped; epoch++) {
        struct ct_epoch_metrics em = {.epoch = epoch + 1, .test_loss = NAN, .test_acc = NAN};
        double loss_sum = 0.0, window_loss = 0.0;
        int64_t window_steps = 0;
        double phase[CT_PHASE_COUNT] = {0};
        int64_t steps_here = 0;
        if ((rc = ct_comm_barrier(c)) < 0)
            return rc;
        double t0 = now_s();
        const uint32_t *idx;
        int n;
        for (;;) {
            if (max_steps > 0 && tr->step >= max_steps) {
                stopped = 1;
                break;
            }
            if (!ct_sampler_next(&tr->sampler, &idx, &n))
                break;
            double l;
            if ((rc = train_step(tr, idx, n, &l, phase)) < 0)
                return rc;
            loss_sum += l;
            window_loss += l;
            window_steps++;
            steps_here++;
            if (cfg->log.every_steps > 0 && tr->step % cfg->log.every_steps == 0) {
                /* All ranks reach this point at the same step, so the
                 * reduction is collective. */
                if ((rc = ct_comm_allreduce_f64(c, &window_loss, 1, CT_REDUCE_SUM)) < 0)
                    return rc;
                double mean = window_loss / ((double)window_steps * cfg->train.global_batch);
                ct_log_debug("  step %lld  loss %.4f  lr %.5f", (long long)tr->step, mean,
                             ct_schedule_lr(&tr->sched, tr->step - 1));
                write_step(tr, mean, window_steps);
                window_loss = 0.0;
                window_steps = 0;
            }
            /* A stop request (SIGUSR1/SIGTERM) on any rank stops every rank
             * at this same step: one tiny allreduce per step. */
            int64_t sig = g_stop_signal;
            if ((rc = ct_comm_allreduce_i64(c, &sig, 1, CT_REDUCE_MAX)) < 0)
                return rc;
            if (sig) {
                signalled = (int)sig;
                stopped = 1;
                break;
            }
            if (cfg->checkpoint.every_steps > 0 && tr->step % cfg->checkpoint.every_steps == 0 &&
                (rc = checkpoint(tr)) < 0)
                return rc;
        }
        double train_s = now_s() - t0;
        if (steps_here == 0 && stopped) {
            if (!signalled)
                break; /* max_steps fell exactly on the previous epoch's end */
        }
        em.partial = stopped && tr->sampler.step < tr->steps_per_epoch;

        double red[2] = {loss_sum, train_s};
        if ((rc = ct_comm_allreduce_f64(c, red, 1, CT_REDUCE_SUM)) < 0 ||
            (rc = ct_comm_allreduce_f64(c, red + 1, 1, CT_REDUCE_MAX)) < 0)
            return rc;
        int64_t samples = steps_here * cfg->train.global_batch;
        em.step = tr->step;
        em.train_loss = samples ? red[0] / (double)samples : NAN;
        em.epoch_s = red[1];
        em.samples_per_s = samples ? (double)samples / red[1] : 0.0;
        em.lr = ct_schedule_lr(&tr->sched, tr->step - 1);
        /* Rank 0's split of its own step time; the allreduce phase includes
         * waiting for slower ranks. */
        for (int p = 0; p < CT_PHASE_COUNT; p++)
            em.phase_s[p] = phase[p];
        samples_total += samples;
        summary->train_s += red[1];

        int last = epoch + 1 == cfg->train.epochs || stopped;
        /* A stop request at the very end of an epoch still evaluates it: the
         * resumed run starts with the next epoch and would never log it. */
        if ((!signalled || !em.partial) && (last || (epoch + 1) % cfg->train.eval_every == 0)) {
            double te = now_s();
            if ((rc = ct_trainer_evaluate(tr, &em.test_loss, &em.test_acc)) < 0)
                return rc;
            em.eval_s = now_s() - te;
        }
        if ((rc = ct_comm_agree(c, check_replicas(tr, em.param_sha256))) < 0)
            return rc;
        double rss = ct_peak_rss_mib();
        if ((rc = ct_comm_allreduce_f64(c, &rss, 1, CT_REDUCE_MAX)) < 0)
            return rc;
        em.peak_rss_mib = rss;
        if (samples)
            write_metrics(tr, &em);
        summary->last = em;
        int epoch_done = !em.partial && !signalled;
        if (epoch_done && cfg->checkpoint.every_epochs > 0 &&
            (epoch + 1) % cfg->checkpoint.every_epochs == 0 && (rc = checkpoint(tr)) < 0)
            return rc;
    }
    /* The end of the run, a stop at max_steps and a stop on request all
     * leave a checkpoint of the final state. */
    if ((rc = checkpoint(tr)) < 0)
        return rc;
    summary->stopped_by_signal = signalled;
    summary->steps = tr->step;
    summary->samples_per_s = summary->train_s > 0 ? (double)samples_total / summary->train_s : 0.0;
    rc = c->rank == 0 && tr->metrics && ferror(tr->metrics)
             ? ct_error_set(CT_EIO, "%s/metrics.jsonl: write failed", tr->run_dir)
             : 0;
    rc = ct_comm_agree(c, rc);
    tr->error_agreed = rc < 0;
    return rc;
}
