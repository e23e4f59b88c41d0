/* The data-parallel training loop (see trainer.h). */
#include "train/trainer-impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/liveness.h"
#include "core/log.h"
#include "core/path.h"
#include "core/threads.h"
#include "core/version.h"
#include "run/provenance.h"
#include "run/record.h"
#include "run/rundir.h"
#include "ckpt/chain.h"
#include "train/state.h"

static volatile sig_atomic_t g_stop_signal;

/* A path into a fixed buffer, never silently truncated. */
static int copy_path(char *out, size_t cap, const char *path)
{
    if (snprintf(out, cap, "%s", path ? path : "") >= (int)cap)
        return ct_error_set(CT_ERANGE, "%.80s...: path too long (at most %zu bytes)", path, cap - 1);
    return 0;
}

void ct_trainer_request_stop(int signal_number) { g_stop_signal = signal_number; }

/* ------------------------------------------------------------ set-up */

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

/* run.json: how the run started (a resumed run's differences are in its
 * checkpoints' manifests, "changes"). */
static int write_run_record(const struct ct_trainer *tr)
{
    /* The library versions a checkpoint's manifest holds, also here so that
     * a run's report can show them before (or without) any checkpoint: as
     * "lib.<name>" keys (gemm and openblas are the fixed keys gemm and blas). */
    struct ct_library_version libs[CT_PROVENANCE_MAX_LIBS];
    int n_libs = ct_provenance_libraries(libs, CT_PROVENANCE_MAX_LIBS);
    enum { N_FIXED_EXTRA = 3 }; /* data_format, grad_compress, grad_compress_feedback */
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
    if (rc == 0 && resume)
        rc = resume_from(tr, resume);
    if (rc == 0 && tr->resumed_in_place)
        rc = repair_chain(tr);
    if (rc == 0)
        rc = ct_comm_agree(comm, comm->rank == 0 ? prepare_run_dir(tr) : 0);
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
    for (int i = 0; i < tr->n_changes; i++)
        free(tr->changes[i]);
    ct_progress_free(&tr->progress);
    ct_stepper_free(&tr->st);
    ct_session_free(&tr->s);
    memset(tr, 0, sizeof *tr);
}

/* ------------------------------------------------------------ policies */

/* train.max_steps reached: stop before the next step. */
static int max_steps_reached(const struct ct_trainer *tr)
{
    return tr->cfg->train.max_steps > 0 && tr->step >= tr->cfg->train.max_steps;
}

/* dist.check_every: compare the replicas' digests between epochs too, so a
 * divergence is named near the step it happened (the epoch's end checks
 * always). Collective: every rank reaches the same steps. */
static int check_replicas_due(struct ct_trainer *tr)
{
    const int64_t every = tr->cfg->dist.check_every;
    if (every <= 0 || tr->step % every != 0)
        return 0;
    char hex[65];
    return ct_comm_agree(tr->comm, ct_session_check_replicas(&tr->s, tr->step, hex));
}

/* Checkpoint now unless one was just written at this step; what to do when
 * it fails is the config's choice (checkpoint.on_error). */
static int checkpoint(struct ct_trainer *tr)
{
    if (tr->last_ckpt_step == tr->step)
        return 0;
    ct_liveness_mark(-1); /* a long checkpoint is not a hang */
    int rc = ct__trainer_save(tr);
    ct_liveness_mark(-1);
    if (rc < 0 && tr->cfg->checkpoint.on_error_continue) {
        ct_log_warn("checkpoint at step %lld failed, training goes on (checkpoint.on_error = "
                    "continue): %s", (long long)tr->step, ct_error_message());
        return 0;
    }
    /* ct_ckpt_write agrees on failures: every rank returns this error. */
    tr->error_agreed = rc < 0;
    return rc < 0 ? ct_error_wrap(rc, "checkpoint at step %lld", (long long)tr->step) : 0;
}

/* checkpoint.every_steps */
static int checkpoint_step_cadence(struct ct_trainer *tr)
{
    int64_t every = tr->cfg->checkpoint.every_steps;
    return every > 0 && tr->step % every == 0 ? checkpoint(tr) : 0;
}

/* checkpoint.every_epochs, after a whole epoch (not a partial or stopped one). */
static int checkpoint_epoch_cadence(struct ct_trainer *tr, int epoch, int epoch_done)
{
    int every = tr->cfg->checkpoint.every_epochs;
    return epoch_done && every > 0 && (epoch + 1) % every == 0 ? checkpoint(tr) : 0;
}

/* train.eval_every, and always at the end. A stop request at the very end of
 * an epoch still evaluates it: the resumed run starts with the next epoch
 * and would never log it. */
static int evaluation_due(const struct ct_trainer *tr, int epoch, int last, int signalled, int partial)
{
    if (signalled && partial)
        return 0;
    return last || (epoch + 1) % tr->cfg->train.eval_every == 0;
}

/* ------------------------------------------------------------ the epoch */

struct epoch_run {
    double loss_sum;       /* this rank's, over the epoch (skipped steps left out) */
    int64_t correct;       /* this rank's training samples classified right (ditto) */
    double window_loss;    /* since the last steps.jsonl line */
    int64_t window_correct;
    int64_t window_steps;  /* ... and its steps that were not skipped */
    int64_t window_taken;  /* ... and all its steps, skipped too (tokens/s) */
    double window_t0;      /* ... and when it began (this rank's clock) */
    int64_t steps;         /* steps taken in this epoch */
    int64_t skipped;       /* ... of them dropped as non-finite */
    int stopped;           /* max_steps or a stop request */
    int signalled;         /* the stop request's signal */
    double train_s;        /* this rank's wall time of the steps */
    int64_t rank_samples;  /* samples this rank computed (skipped steps too: their work was done) */
    struct ct_step_times t;
};

/* Every log.every_steps steps: the mean loss of the window over all ranks
 * (all ranks reach this at the same step, so the reduction is collective). */
static int log_window(struct ct_trainer *tr, struct epoch_run *er)
{
    int every = tr->cfg->log.every_steps;
    if (every <= 0 || tr->step % every != 0 || er->window_steps == 0)
        return 0; /* (no line when every step since the last was skipped: all ranks agree) */
    /* One reduction for both: the hit count is exact in a double (< 2^53). */
    double sums[2] = {er->window_loss, (double)er->window_correct};
    int rc = ct_comm_allreduce_f64(tr->comm, sums, 2, CT_REDUCE_SUM);
    if (rc < 0)
        return rc;
    /* Means over targets: samples, or for token data their B*T tokens. */
    const double samples = (double)er->window_steps * tr->cfg->train.global_batch * tr->s.targets;
    /* Token data: the window's tokens over its wall time (a checkpoint
     * written inside the window counts, as it delays training). */
    const double now = ct_now_s();
    const double tokens = tr->s.test.format == CT_DATA_FORMAT_TOKENS
                              ? (double)er->window_taken * tr->cfg->train.global_batch * tr->s.targets
                              : 0.0;
    const struct ct_step_record rec = {.step = tr->step, .loss = sums[0] / samples,
                                       .acc = sums[1] / samples,
                                       .lr = ct_schedule_lr(&tr->s.sched, tr->step - 1),
                                       .tokens_per_s = now > er->window_t0
                                                           ? tokens / (now - er->window_t0) : 0.0};
    ct_log_debug("  step %lld  loss %.4f  acc %.4f  lr %.5f", (long long)tr->step, rec.loss, rec.acc,
                 rec.lr);
    /* Rank 0's write error is kept for the epoch's end, where every rank
     * agrees on it: returning it here would leave the others waiting in
     * the next step's collectives. */
    char path[sizeof tr->run_dir + 32];
    if (tr->comm->rank == 0 && tr->steps_log && tr->log_status == 0 &&
        (tr->log_status = ct_path_join(path, sizeof path, tr->run_dir, "steps.jsonl")) == 0)
        tr->log_status = ct_steps_append(tr->steps_log, path, &rec);
    er->window_loss = 0.0;
    er->window_correct = 0;
    er->window_steps = 0;
    er->window_taken = 0;
    er->window_t0 = now;
    return 0;
}

/* train.on_nonfinite, for a step the stepper dropped (every rank sees the
 * same r, so every rank takes the same branch). stop: one error on every
 * rank, before this step's checkpoint could be written (the newest
 * checkpoint stays the last finite state). skip: the step counts as taken
 * (its samples are consumed, the schedule moves on with the step number)
 * but made no update, as PyTorch's GradScaler skips optimizer.step(); the
 * optimizer's own step count (Adam's bias correction) does not move. When
 * the parameters themselves are non-finite (an update that overflowed),
 * every later step would be dropped too: that stops the run in either
 * policy. */
static int nonfinite_policy(struct ct_trainer *tr, struct epoch_run *er,
                            const struct ct_step_result *r)
{
    const long long step = (long long)tr->step + 1; /* as steps.jsonl and ckpt-N count */
    char who[96];
    if (r->nonfinite_rank >= 0)
        snprintf(who, sizeof who, "first seen on rank %d", r->nonfinite_rank);
    else
        snprintf(who, sizeof who, "in the sum over ranks (every rank's own values were finite)");
    int view = -1;
    size_t elem = 0;
    int64_t params_bad = ct_flat_find_nonfinite(&tr->s.model.params, &view, &elem);
    int rc = ct_comm_allreduce_i64(tr->comm, &params_bad, 1, CT_REDUCE_MAX);
    if (rc < 0)
        return rc;
    tr->error_agreed = 1;
    if (params_bad)
        return ct_error_set(CT_ERANGE,
                            "step %lld: a non-finite loss or gradient, %s, and the parameters "
                            "themselves are non-finite (an earlier update overflowed): no step can "
                            "be taken from them; no update made, no checkpoint written",
                            step, who);
    if (!tr->cfg->train.on_nonfinite_skip)
        return ct_error_set(CT_ERANGE,
                            "step %lld: a non-finite loss or gradient, %s; no update made, no "
                            "checkpoint of this step (train.on_nonfinite = stop; the newest "
                            "checkpoint is the last finite state)",
                            step, who);
    tr->error_agreed = 0;
    er->skipped++;
    tr->nonfinite_skipped++;
    if (tr->comm->rank == 0)
        ct_log_warn("step %lld: a non-finite loss or gradient, %s: step skipped on every rank "
                    "(train.on_nonfinite = skip; %lld skipped in this run)",
                    step, who, (long long)tr->nonfinite_skipped);
    return 0;
}

/* Steps until the epoch ends, max_steps, or a stop request. */
static int run_steps(struct ct_trainer *tr, struct epoch_run *er)
{
    struct ct_loader *ld = &tr->s.loader;
    int rc;
    double t0 = ct_now_s();
    er->window_t0 = t0;
    for (;;) {
        if (max_steps_reached(tr)) {
            er->stopped = 1;
            break;
        }
        double w0 = ct_loader_wait_s(ld);
        struct ct_batch b;
        if ((rc = ct_loader_next(ld, &b)) < 0)
            return rc;
        er->t.data_wait_s += ct_loader_wait_s(ld) - w0;
        er->rank_samples += rc > 0 ? b.n : 0;
        if (rc == 0)
            break; /* the epoch's end */
        struct ct_step_result r;
        if ((rc = ct_step(&tr->st, &b, tr->step, g_stop_signal, &r)) < 0)
            return rc;
        if (r.nonfinite && (rc = nonfinite_policy(tr, er, &r)) < 0)
            return rc;
        tr->step++;
        ct_liveness_mark(tr->step);
        er->steps++;
        er->window_taken++;
        if (!r.nonfinite) {
            er->loss_sum += r.loss_sum;
            er->correct += r.correct;
            er->window_loss += r.loss_sum;
            er->window_correct += r.correct;
            er->window_steps++;
        }
        ct_progress_step(&tr->progress, (int)b.epoch, b.step + 1, tr->step,
                         r.nonfinite ? 0.0 : r.loss_sum,
                         r.nonfinite ? 0 : (int64_t)b.n * tr->s.targets, ct_now_s());
        if ((rc = log_window(tr, er)) < 0)
            return rc;
        if ((rc = check_replicas_due(tr)) < 0)
            return rc;
        if (r.stop) {
            er->signalled = (int)r.stop;
            er->stopped = 1;
            break;
        }
        if ((rc = checkpoint_step_cadence(tr)) < 0)
            return rc;
    }
    er->train_s = ct_now_s() - t0;
    ct_progress_end_epoch(&tr->progress);
    struct ct_step_times st = ct_stepper_take_times(&tr->st);
    er->t.forward_backward_s = st.forward_backward_s;
    er->t.exposed_comm_s = st.exposed_comm_s;
    er->t.optim_s = st.optim_s;
    return 0;
}

/* Every rank's phase split and achieved GFLOP/s (the last of N_GATHERED
 * values), gathered on rank 0 (rank order), and the rank with the most step
 * time: the one the others waited for. */
#define N_PHASES 4
#define N_GATHERED (N_PHASES + 1)
static int gather_phases(struct ct_trainer *tr, const struct epoch_run *er, double *all,
                         int *slowest)
{
    double achieved = er->train_s > 0
                          ? tr->flops_per_sample * (double)er->rank_samples / er->train_s / 1e9
                          : 0.0;
    double mine[N_GATHERED] = {er->t.data_wait_s, er->t.forward_backward_s, er->t.exposed_comm_s,
                               er->t.optim_s, achieved};
    int rc = ct_comm_gather(tr->comm, mine, sizeof mine, all, 0);
    *slowest = 0;
    if (rc < 0 || tr->comm->rank != 0)
        return rc;
    double worst = -1.0;
    for (int r = 0; r < tr->comm->world; r++) {
        /* Waiting for the sync is time spent because of another rank. */
        const double *p = all + (size_t)r * N_GATHERED;
        double busy = p[0] + p[1] + p[3];
        if (busy > worst) {
            worst = busy;
            *slowest = r;
        }
    }
    return 0;
}

/* Rank 0: one line of metrics.jsonl and a readable log line. */
static int write_metrics(struct ct_trainer *tr, const struct ct_epoch_metrics *m, const double *phases,
                         int slowest)
{
    const int W = tr->comm->world;
    double *cols = malloc((size_t)W * N_GATHERED * sizeof *cols);
    if (!cols)
        return ct_error_set(CT_ENOMEM, "metrics: out of memory");
    for (int r = 0; r < W; r++)
        for (int p = 0; p < N_GATHERED; p++)
            cols[(size_t)p * W + r] = phases[(size_t)r * N_GATHERED + p];
    struct ct_epoch_record rec = {
        .epoch = m->epoch, .step = m->step, .partial = m->partial, .train_loss = m->train_loss,
        .train_acc = m->train_acc,
        .test_loss = m->test_loss, .test_acc = m->test_acc, .samples_per_s = m->samples_per_s,
        .tokens_per_s = m->tokens_per_s, .val_bpb = m->val_bpb,
        .epoch_s = m->epoch_s, .eval_s = m->eval_s, .lr = m->lr, .peak_rss_mib = m->peak_rss_mib,
        .pss_mib = m->pss_mib, .optim_state_bytes = m->optim_state_bytes,
        .nonfinite_skipped = m->nonfinite_skipped,
        .nonfinite_skipped_total = m->nonfinite_skipped_total,
        .world = W, .data_wait_s = cols, .forward_backward_s = cols + W,
        .exposed_comm_s = cols + 2 * W, .optim_s = cols + 3 * W, .slowest_rank = slowest,
        .flops_per_sample = tr->flops_per_sample, .achieved_gflops = cols + 4 * W,
        .peak_gflops = tr->peak_gflops, .mfu = m->mfu, .samples = (double)m->samples,
    };
    snprintf(rec.param_sha256, sizeof rec.param_sha256, "%s", m->param_sha256);
    char path[sizeof tr->run_dir + 32];
    int rc = ct_path_join(path, sizeof path, tr->run_dir, "metrics.jsonl");
    if (rc == 0)
        rc = ct_metrics_append(tr->metrics, path, &rec);
    free(cols);
    char tokens[48] = "", bpb[32] = "";
    if (m->tokens_per_s > 0)
        snprintf(tokens, sizeof tokens, " (%.0f tokens/s)", m->tokens_per_s);
    if (!isnan(m->val_bpb))
        snprintf(bpb, sizeof bpb, "  val_bpb %.4f", m->val_bpb);
    if (isnan(m->test_loss))
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  %.0f samples/s%s  mfu %.2f  %.2f s  "
                    "rss %.0f MiB pss %.0f MiB", m->epoch, tr->cfg->train.epochs,
                    m->partial ? " (partial)" : "", (long long)m->step, m->train_loss,
                    m->samples_per_s, tokens, m->mfu, m->epoch_s,
                    m->peak_rss_mib, m->pss_mib);
    else
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  test_loss %.4f%s  test_acc %.4f  "
                    "%.0f samples/s%s  mfu %.2f  %.2f s  rss %.0f MiB pss %.0f MiB",
                    m->epoch, tr->cfg->train.epochs, m->partial ? " (partial)" : "",
                    (long long)m->step, m->train_loss, m->test_loss, bpb, m->test_acc,
                    m->samples_per_s, tokens, m->mfu, m->epoch_s, m->peak_rss_mib, m->pss_mib);
    return rc;
}

/* After the epoch's steps: reductions, evaluation, replica check, metrics. */
static int finish_epoch(struct ct_trainer *tr, int epoch, const struct epoch_run *er,
                        struct ct_epoch_metrics *em)
{
    struct ct_comm *c = tr->comm;
    const struct ct_config *cfg = tr->cfg;
    *em = (struct ct_epoch_metrics){.epoch = epoch + 1, .test_loss = NAN, .test_acc = NAN};
    /* After an epoch's last batch the loader stands at its end (step ==
     * steps_per_epoch) until next() reports it: a stop there is not partial. */
    em->partial = er->stopped && ct_loader_step(&tr->s.loader) < tr->s.steps_per_epoch;
    double loss = er->loss_sum, train_s = er->train_s;
    int64_t correct = er->correct;
    int rc;
    if ((rc = ct_comm_allreduce_f64(c, &loss, 1, CT_REDUCE_SUM)) < 0 ||
        (rc = ct_comm_allreduce_i64(c, &correct, 1, CT_REDUCE_SUM)) < 0 ||
        (rc = ct_comm_allreduce_f64(c, &train_s, 1, CT_REDUCE_MAX)) < 0)
        return rc;
    int64_t samples = er->steps * cfg->train.global_batch;
    int64_t trained = (er->steps - er->skipped) * cfg->train.global_batch;
    em->step = tr->step;
    em->samples = samples;
    em->nonfinite_skipped = er->skipped;
    em->nonfinite_skipped_total = tr->nonfinite_skipped;
    /* Per target: a sample's label, or each of a window's T tokens. */
    const int K = tr->s.targets;
    em->train_loss = trained ? loss / ((double)trained * K) : NAN;
    em->train_acc = trained ? (double)correct / ((double)trained * K) : NAN;
    em->epoch_s = train_s;
    em->samples_per_s = samples ? (double)samples / train_s : 0.0;
    const int tokens = tr->s.test.format == CT_DATA_FORMAT_TOKENS;
    em->tokens_per_s = tokens ? em->samples_per_s * K : 0.0;
    em->val_bpb = NAN;
    em->lr = ct_schedule_lr(&tr->s.sched, tr->step - 1);
    int last = epoch + 1 == cfg->train.epochs || er->stopped;
    if (evaluation_due(tr, epoch, last, er->signalled, em->partial)) {
        double te = ct_now_s();
        if ((rc = ct_session_evaluate(&tr->s, &em->test_loss, &em->test_acc)) < 0)
            return rc;
        em->eval_s = ct_now_s() - te;
        if (tokens && tr->s.n_classes <= 256) /* byte tokens: nats per byte -> bits per byte */
            em->val_bpb = em->test_loss / log(2.0);
    }
    if ((rc = ct_comm_agree(c, ct_session_check_replicas(&tr->s, tr->step, em->param_sha256))) < 0)
        return rc;
    double mem[3] = {ct_peak_rss_mib(), ct_pss_mib(), (double)ct_session_optim_state_bytes(&tr->s)};
    if ((rc = ct_comm_allreduce_f64(c, mem, 3, CT_REDUCE_MAX)) < 0)
        return rc;
    em->peak_rss_mib = mem[0];
    em->pss_mib = mem[1];
    em->optim_state_bytes = (int64_t)mem[2];
    double *phases = c->rank == 0 ? calloc((size_t)c->world * N_GATHERED, sizeof *phases) : NULL;
    int slowest = 0;
    rc = c->rank == 0 && !phases ? ct_error_set(CT_ENOMEM, "metrics: out of memory") : 0;
    int grc = gather_phases(tr, er, phases, &slowest);
    if (rc == 0)
        rc = grc;
    em->mfu = NAN;
    if (rc == 0 && c->rank == 0 && tr->peak_gflops > 0) {
        double sum = 0.0;
        for (int r = 0; r < c->world; r++)
            sum += phases[(size_t)r * N_GATHERED + N_PHASES];
        em->mfu = sum / (c->world * tr->peak_gflops);
    }
    /* The steps log's error (kept since that step) comes first: it happened
     * first, and a full disk would otherwise be reported on metrics.jsonl. */
    if (rc == 0)
        rc = tr->log_status;
    if (rc == 0 && c->rank == 0 && samples)
        rc = write_metrics(tr, em, phases, slowest);
    free(phases);
    tr->error_agreed = 1;
    return ct_comm_agree(c, rc);
}

int ct_trainer_run(struct ct_trainer *tr, struct ct_train_summary *summary)
{
    const struct ct_config *cfg = tr->cfg;
    memset(summary, 0, sizeof *summary);
    tr->error_agreed = 0;
    int rc = 0, stopped = 0, signalled = 0;
    int64_t samples_total = 0;
    for (int epoch = (int)ct_loader_epoch(&tr->s.loader); epoch < cfg->train.epochs && !stopped; epoch++) {
        if ((rc = ct_comm_barrier(tr->comm)) < 0)
            return rc;
        struct epoch_run er = {0};
        if ((rc = run_steps(tr, &er)) < 0)
            return rc;
        stopped = er.stopped;
        signalled = er.signalled;
        if (er.steps == 0 && stopped && !signalled)
            break; /* max_steps fell exactly on the previous epoch's end */
        struct ct_epoch_metrics em;
        if ((rc = finish_epoch(tr, epoch, &er, &em)) < 0)
            return rc;
        tr->error_agreed = 0;
        samples_total += er.steps * cfg->train.global_batch;
        summary->train_s += em.epoch_s;
        summary->last = em;
        if ((rc = checkpoint_epoch_cadence(tr, epoch, !em.partial && !signalled)) < 0)
            return rc;
    }
    /* The end of the run, a stop at max_steps and a stop on request all
     * leave a checkpoint of the final state. */
    if ((rc = checkpoint(tr)) < 0)
        return rc;
    summary->stopped_by_signal = signalled;
    summary->steps = tr->step;
    summary->samples_per_s = summary->train_s > 0 ? (double)samples_total / summary->train_s : 0.0;
    return 0;
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
