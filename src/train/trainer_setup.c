/* A trainer's set-up and tear-down (see trainer.h): the session and the
 * stepper, the MFU peak, the resume from a checkpoint, rank 0's run
 * directory (config, binding table, run record, logs) and the start's log
 * lines; ct_trainer_open/close. The loop itself is trainer.c.
 */
#include "train/trainer-impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/chain.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/trace.h"
#include "core/version.h"
#include "core/sha256.h"
#include "run/provenance.h"
#include "run/record.h"
#include "run/tbevents.h"
#include "run/rundir.h"
#include "train/init_from.h"

/* A path into a fixed buffer, never silently truncated. */
static int copy_path(char *out, size_t cap, const char *path)
{
    if (snprintf(out, cap, "%s", path ? path : "") >= (int)cap)
        return ct_error_set(CT_ERANGE, "%.80s...: path too long (at most %zu bytes)", path, cap - 1);
    return 0;
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
    } else if ((rc = copy_path(path, sizeof path, resume)) < 0) {
        return ct_comm_agree(tr->comm, rc);
    }
    struct ct_ckpt *ck = calloc(1, sizeof *ck);
    rc = ck ? ct_ckpt_open(ck, path) : ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    if (rc == 0) {
        rc = ct__trainer_restore(tr, ck);
        ct_ckpt_close(ck);
    }
    free(ck);
    rc = ct_comm_agree(tr->comm, rc);
    if (rc < 0)
        return rc;
    tr->resumed = 1;
    /* In place: the checkpoint is a directory of this run directory. */
    char a[PATH_MAX], b[PATH_MAX], parent[1300];
    snprintf(parent, sizeof parent, "%s/..", path);
    tr->resumed_in_place = realpath(parent, a) && realpath(tr->run_dir, b) && strcmp(a, b) == 0;
    ct_log_info("resumed from %s: step %lld (epoch %lld, step %lld of it)", path,
                (long long)tr->step, (long long)ct_loader_epoch(&tr->s.loader),
                (long long)ct_loader_step(&tr->s.loader));
    for (int i = 0; i < tr->n_changes; i++)
        ct_log_info("  changed since the checkpoint: %s", tr->changes[i]);
    return 0;
}

/* train.init_from, on a fresh start (a resume takes the checkpoint's
 * weights): rank 0 loads the file over the seed's draw, every rank gets its
 * parameters and buffers. The file's digest is among the data files
 * (train/session.c), so run.json and every checkpoint name it. */
static int init_from(struct ct_trainer *tr)
{
    struct ct_model *m = &tr->s.model;
    const char *path = tr->cfg->train.init_from;
    int rc = tr->comm->rank == 0 ? ct_init_from_load(m, tr->cfg->model.name, path) : 0;
    if (rc < 0)
        rc = ct_error_wrap(rc, "%s: train.init_from", tr->cfg->path);
    if ((rc = ct_comm_agree(tr->comm, rc)) < 0)
        return rc;
    rc = ct_comm_bcast(tr->comm, m->params.data, m->params.numel * sizeof(float), 0);
    if (rc == 0 && m->buffers.numel)
        rc = ct_comm_bcast(tr->comm, m->buffers.data, m->buffers.numel * sizeof(float), 0);
    if (rc == 0)
        ct_log_info("initialized from %s (train.init_from): %zu parameters", path, ct_model_param_count(m));
    return rc;
}

/* The recorded train.init_from file, or NULL. */
static const struct ct_ckpt_data_file *init_from_file(const struct ct_trainer *tr)
{
    for (int i = 0; i < tr->s.n_data_files; i++)
        if (strcmp(tr->s.data_files[i].format, CT_SESSION_INIT_FROM_FORMAT) == 0)
            return &tr->s.data_files[i];
    return NULL;
}

/* run.json: how the run started (a resumed run's differences are in its
 * checkpoints' manifests, "changes"). */
static int write_run_record(const struct ct_trainer *tr)
{
    /* The library versions a checkpoint's manifest holds, also here so that
     * a run's report can show them before (or without) any checkpoint: as
     * "lib.<name>" keys (gemm and openblas are the fixed keys gemm and blas). */
    struct ct_library_version libs[CT_PROVENANCE_MAX_LIBS];
    int n_libs = ct_provenance_libraries(libs, CT_PROVENANCE_MAX_LIBS);
    /* data_format, grad_compress, grad_compress_feedback, init_from, init_from_sha256 */
    enum { N_FIXED_EXTRA = 5 };
    char keys[CT_PROVENANCE_MAX_LIBS + N_FIXED_EXTRA][48]; /* indexed like extra */
    struct ct_run_extra extra[CT_PROVENANCE_MAX_LIBS + N_FIXED_EXTRA];
    size_t n_extra = 0;
    /* The data format the training set was read as (data.format may say auto). */
    extra[n_extra++] = (struct ct_run_extra){"data_format", ct_data_format_name(tr->s.train.format)};
    /* What the gradients travel as (also in config.ini; here for reports). */
    extra[n_extra++] = (struct ct_run_extra){"grad_compress",
                                             ct_grad_compress_names[tr->cfg->dist.grad_compress]};
    extra[n_extra++] = (struct ct_run_extra){"grad_compress_feedback",
                                             tr->cfg->dist.grad_compress_feedback ? "true" : "false"};
    /* The weights it started from (a resumed run's start is its checkpoint). */
    const struct ct_ckpt_data_file *init = tr->resumed ? NULL : init_from_file(tr);
    char init_hex[CT_SHA256_HEX_LEN];
    if (init) {
        ct_sha256_hex(init->sha256, init_hex);
        extra[n_extra++] = (struct ct_run_extra){"init_from", init->path};
        extra[n_extra++] = (struct ct_run_extra){"init_from_sha256", init_hex};
    }
    for (int i = 0; i < n_libs; i++) {
        if (strcmp(libs[i].name, "gemm") == 0 || strcmp(libs[i].name, "openblas") == 0)
            continue;
        snprintf(keys[n_extra], sizeof keys[n_extra], "lib.%s", libs[i].name);
        extra[n_extra] = (struct ct_run_extra){keys[n_extra], libs[i].version};
        n_extra++;
    }
    struct ct_run_record rec = {
        .extra = extra,
        .n_extra = n_extra,
        .version = CT_VERSION,
        .git = CT_GIT_DESCRIBE,
        .config = tr->cfg->path,
        .world = tr->comm->world,
        .blas_threads = tr->s.blas_threads,
        .blas = ct_blas_config(),
        .gemm = ct_gemm_impl(),
        .host0 = tr->comm->host,
        .params = ct_model_param_count(&tr->s.model),
        .steps_per_epoch = tr->s.steps_per_epoch,
        .total_steps = tr->s.total_steps,
        .flops_per_sample = tr->flops_per_sample,
        .peak_gflops = tr->peak_gflops,
        .peak_source = tr->peak_kernel[0] ? "probe" : "config",
        .peak_kernel = tr->peak_kernel[0] ? tr->peak_kernel : NULL,
        .transport_mpi = tr->transport.v[CT_TRANSPORT_MPI],
        .transport_pml = tr->transport.v[CT_TRANSPORT_PML],
        .transport_btl = tr->transport.v[CT_TRANSPORT_BTL],
        .transport_tcp_if = tr->transport.v[CT_TRANSPORT_TCP_IF],
        .transport_ucx = tr->transport.v[CT_TRANSPORT_UCX],
        .transport_links = tr->transport.v[CT_TRANSPORT_LINKS],
        .transport_hosts = tr->transport.v[CT_TRANSPORT_HOSTS],
        .allreduce = tr->transport.v[CT_TRANSPORT_ALLREDUCE],
    };
    return ct_run_record_write(tr->run_dir, &rec);
}

/* Collective: the FLOPs of a sample and the peak MFU is measured against.
 * dist.peak_gflops = 0: every rank times its own gemm (core/gemm.h,
 * ct_sgemm_peak_probe) on its own cores, after placement, at once; the
 * best rate over the ranks is the peak (a probe can only be slowed down,
 * by whatever else runs on its core). */
static int measure_peak(struct ct_trainer *tr)
{
    struct ct_flops f = ct_model_flops(&tr->s.model);
    tr->flops_per_sample = f.fwd + f.bwd;
    tr->peak_gflops = tr->cfg->dist.peak_gflops;
    tr->peak_kernel[0] = '\0';
    if (tr->peak_gflops > 0)
        return 0;
    struct ct_sgemm_peak pk = {0};
    int rc = ct_comm_agree(tr->comm, ct_sgemm_peak_probe(&pk));
    double best = pk.gflops;
    if (rc == 0)
        rc = ct_comm_allreduce_f64(tr->comm, &best, 1, CT_REDUCE_MAX);
    if (rc < 0)
        return rc;
    tr->peak_gflops = best;
    snprintf(tr->peak_kernel, sizeof tr->peak_kernel, "%s %dx%dx%d, %d thread%s", pk.kernel, pk.n,
             pk.n, pk.n, pk.threads, pk.threads == 1 ? "" : "s");
    return 0;
}

/* Rank 0: create the run directory; unless resuming in place, move an
 * earlier run's files aside so that nothing already saved is lost; write
 * the resolved config, the binding table and the run record; open the logs
 * (a run resumed in place continues them, without the steps after its
 * checkpoint: they are about to be redone). */
static int prepare_run_dir(struct ct_trainer *tr)
{
    char moved[1200] = "";
    int rc = ct_rundir_prepare(tr->run_dir, tr->resumed_in_place, moved, sizeof moved);
    if (rc < 0)
        return rc;
    if (moved[0])
        ct_log_info("run directory %s held an earlier run: moved it to %s", tr->run_dir, moved);
    char *cfg_text = NULL;
    if ((rc = ct_config_text(tr->cfg, &cfg_text)) == 0)
        rc = ct_rundir_write_file(tr->run_dir, "config.ini", cfg_text);
    free(cfg_text);
    if (rc == 0)
        rc = ct_rundir_write_file(tr->run_dir, "placement.txt",
                                  tr->s.placement_table ? tr->s.placement_table : "");
    if (rc == 0 && !(tr->resumed_in_place && ct_rundir_has(tr->run_dir, "run.json")))
        rc = write_run_record(tr);
    if (rc == 0)
        rc = ct_rundir_open_log(tr->run_dir, "metrics.jsonl", tr->resumed_in_place, tr->step,
                                &tr->metrics);
    if (rc == 0)
        rc = ct_rundir_open_log(tr->run_dir, "steps.jsonl", tr->resumed_in_place, tr->step,
                                &tr->steps_log);
    if (rc == 0) /* its errors are warnings (run/tbevents.h) */
        tr->tb = ct_tb_open(tr->run_dir, tr->cfg->log.tensorboard, tr->resumed_in_place, tr->step);
    return rc;
}

/* Collective: a run continued in place first makes its chain.jsonl whole
 * (a stop between a commit and the chain's append; ckpt/chain.h). */
static int repair_chain(struct ct_trainer *tr)
{
    int appended = 0;
    return ct_comm_agree(tr->comm, tr->comm->rank == 0 ? ct__chain_repair(tr->run_dir, &appended) : 0);
}

static void log_start(const struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    const struct ct_session *s = &tr->s;
    ct_log_info("ctrain-dist %s: %d rank%s x %d BLAS thread%s, conv products %s, host %s",
                ct_code_version(), tr->comm->world, tr->comm->world == 1 ? "" : "s",
                s->blas_threads, s->blas_threads == 1 ? "" : "s", ct_gemm_impl(), tr->comm->host);
    if (s->placement_table)
        ct_log_info("%s", s->placement_table);
    const char *blas_warning = ct_blas_kernel_warning();
    if (blas_warning)
        ct_log_warn("%s", blas_warning);
    if (getenv("CT__BLAS_REEXEC"))
        ct_log_info("OpenBLAS: using its %s kernels (ctrain-dist set OPENBLAS_CORETYPE=%s: OpenBLAS's "
                    "own detection picked generic ones for this CPU; CT_BLAS_CORETYPE_AUTO=0 turns this off)",
                    getenv("CT__BLAS_REEXEC"), getenv("CT__BLAS_REEXEC"));
    ct_log_info("model %s: %zu parameters; data %zu train / %zu test samples of %dx%dx%d, %d classes",
                cfg->model.name, ct_model_param_count(&s->model), s->train.n, s->test.n, s->train.c,
                s->train.h, s->train.w, s->n_classes);
    const char *compress = cfg->dist.grad_compress == CT_GRAD_COMPRESS_NONE ? ""
                           : cfg->dist.grad_compress_feedback ? ", bf16 with error feedback"
                                                              : ", bf16";
    ct_log_info("global batch %d (%d per rank), %lld steps/epoch, %d epochs, max_steps %lld; "
                "gradient sync %s, %d bucket%s%s; prefetch %d; run dir %s",
                cfg->train.global_batch, s->batches.local_batch, (long long)s->steps_per_epoch,
                cfg->train.epochs, (long long)cfg->train.max_steps,
                tr->st.gs.params.overlap ? "overlapped" : "blocking", tr->st.gs.n_buckets,
                tr->st.gs.n_buckets == 1 ? "" : "s", compress, cfg->data.prefetch, tr->run_dir);
    ct_log_info("MFU: %.4g GFLOP a sample (matmul forward + backward), peak %.1f GFLOP/s a rank (%s%s)",
                tr->flops_per_sample / 1e9, tr->peak_gflops,
                tr->peak_kernel[0] ? "gemm probe: " : "dist.peak_gflops",
                tr->peak_kernel);
}

/* The progress bar (terminal) or lines (logs) of rank 0. */
static void start_progress(struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    struct ct_progress_params pp = ct_progress_default_params();
    ct_progress_detect(&pp, tr->comm->rank);
    pp.epochs = cfg->train.epochs;
    pp.steps_per_epoch = tr->s.steps_per_epoch;
    pp.total_steps = tr->s.total_steps;
    if (cfg->train.max_steps > 0 && cfg->train.max_steps < pp.total_steps)
        pp.total_steps = cfg->train.max_steps;
    pp.global_batch = cfg->train.global_batch;
    pp.tokens_per_sample = tr->s.test.format == CT_DATA_FORMAT_TOKENS ? tr->s.targets : 0;
    pp.every_steps = cfg->log.every_steps;
    pp.flops_per_sample = tr->flops_per_sample;
    pp.peak_gflops = tr->peak_gflops * tr->comm->world;
    ct_progress_init(&tr->progress, &pp);
}

/* log.trace: the window and its recorder (train/trace_window.h); the value
 * was checked when the config was read. */
static int init_trace(struct ct_trainer *tr)
{
    int64_t first = 0, last = 0;
    char why[256];
    if (ct_trace_parse_window(tr->cfg->log.trace, &first, &last, why, sizeof why) < 0)
        return ct_error_set(CT_ECONFIG, "log.trace: %s", why);
    return ct_trace_window_init(&tr->trace, tr->comm, tr->run_dir, first, last,
                                tr->cfg->log.trace_max_mb, tr->step);
}

int ct_trainer_init(struct ct_trainer *tr, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume)
{
    memset(tr, 0, sizeof *tr);
    tr->last_ckpt_step = -1;
    tr->cfg = cfg;
    tr->comm = comm;
    int rc = ct_comm_agree(comm, copy_path(tr->run_dir, sizeof tr->run_dir, run_dir));
    if (rc < 0)
        return rc;
    struct ct_session_params sp = {.train = 1, .digests = 1};
    if ((rc = ct_session_init(&tr->s, cfg, comm, &sp)) < 0)
        return rc;
    rc = ct_comm_agree(comm, ct_stepper_init(&tr->st, &tr->s));
    if (rc == 0)
        rc = measure_peak(tr);
    if (rc == 0)
        rc = ct_transport_probe(comm, &tr->transport);
    if (rc == 0 && resume)
        rc = resume_from(tr, resume);
    if (rc == 0 && !tr->resumed && cfg->train.init_from[0])
        rc = init_from(tr);
    if (rc == 0 && tr->resumed_in_place)
        rc = repair_chain(tr);
    if (rc == 0)
        rc = ct_comm_agree(comm, comm->rank == 0 ? prepare_run_dir(tr) : 0);
    if (rc == 0)
        rc = ct_comm_agree(comm, init_trace(tr));
    if (rc < 0) {
        ct_trainer_free(tr);
        return rc;
    }
    log_start(tr);
    start_progress(tr);
    return 0;
}

/* Every line was flushed when written (and its error reported then); a
 * failing close can still lose what the file system held back (NFS), so it
 * is said, naming the file. */
static void close_log(FILE *f, const char *run_dir, const char *name)
{
    if (f && fclose(f) != 0)
        ct_log_warn("%s/%s: close failed: %s", run_dir, name, strerror(errno));
}

void ct_trainer_free(struct ct_trainer *tr)
{
    close_log(tr->metrics, tr->run_dir, "metrics.jsonl");
    close_log(tr->steps_log, tr->run_dir, "steps.jsonl");
    ct_tb_close(tr->tb);
    for (int i = 0; i < tr->n_changes; i++)
        free(tr->changes[i]);
    ct_progress_free(&tr->progress);
    ct_stepper_free(&tr->st);
    ct_session_free(&tr->s);
    ct_trace_window_free(&tr->trace); /* after the loader's thread, which records too */
    memset(tr, 0, sizeof *tr);
}

int ct_trainer_open(struct ct_trainer **out, const struct ct_config *cfg, struct ct_comm *comm,
                    const char *run_dir, const char *resume)
{
    *out = NULL;
    struct ct_trainer *tr = calloc(1, sizeof *tr);
    /* Agreed before set-up: a rank that could not allocate must not leave
     * the others in ct_trainer_init's collectives. */
    int rc = ct_comm_agree(comm, tr ? 0 : ct_error_set(CT_ENOMEM, "trainer: out of memory"));
    if (rc == 0)
        rc = ct_trainer_init(tr, cfg, comm, run_dir, resume);
    if (rc < 0) {
        free(tr);
        return rc;
    }
    *out = tr;
    return 0;
}

void ct_trainer_close(struct ct_trainer *tr)
{
    if (!tr)
        return;
    ct_trainer_free(tr);
    free(tr);
}

const struct ct_model *ct_trainer_model(const struct ct_trainer *tr)
{
    return &tr->s.model;
}
