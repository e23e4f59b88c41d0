/* The data-parallel training loop (see trainer.h): the epochs, their
 * steps and the policies between steps (max_steps, replica checks,
 * checkpoint cadence, train.on_nonfinite, evaluation), steps.jsonl and
 * metrics.jsonl. Set-up and tear-down are trainer_setup.c.
 */
#include "train/trainer-impl.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/liveness.h"
#include "core/log.h"
#include "core/path.h"
#include "core/trace.h"
#include "run/record.h"
#include "run/tbevents.h"
#include "train/predict.h"

static volatile sig_atomic_t g_stop_signal;

void ct_trainer_request_stop(int signal_number) { g_stop_signal = signal_number; }

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
    const double t0 = ct_now_s();
    int rc = ct__trainer_save(tr);
    ct_trace_span(CT_TRACE_MAIN, "checkpoint", "checkpoint", t0, ct_now_s());
    ct_liveness_mark(-1);
    /* A job that lost the run directory to another stops whatever
     * on_error says: it may not commit there any more. */
    if (rc < 0 && rc != CT_EBUSY && tr->cfg->checkpoint.on_error_continue) {
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
    if (tr->comm->rank == 0 && tr->log_status == 0)
        ct_tb_steps(tr->tb, &rec);
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
        /* At the epoch's last batch the loader stands at its end until
         * next() reports it: let it, so that a run stopped there by
         * max_steps checkpoints the state a run passing through would
         * (the next epoch's step 0, its random streams), and audit replay
         * to an epoch's last checkpoint finds the same bits. */
        if (max_steps_reached(tr) && ct_loader_step(ld) < tr->s.steps_per_epoch) {
            er->stopped = 1;
            break;
        }
        /* log.trace: between steps, outside their timing; collective */
        if ((rc = ct_trace_window_step(&tr->trace, tr->step)) < 0)
            return rc;
        const double s0 = ct_now_s();
        double w0 = ct_loader_wait_s(ld);
        struct ct_batch b;
        if ((rc = ct_loader_next(ld, &b)) < 0)
            return rc;
        ct_trace_span(CT_TRACE_MAIN, "phase", "data_wait", s0, ct_now_s());
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
        ct_trace_span_args(CT_TRACE_MAIN, "step", "step", s0, ct_now_s(), "step", tr->step, NULL, 0);
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
    if (rc == 0)
        ct_tb_epoch(tr->tb, &rec);
    free(cols);
    char tokens[48] = "", bpb[32] = "";
    if (m->tokens_per_s > 0)
        snprintf(tokens, sizeof tokens, " (%.0f tokens/s)", m->tokens_per_s);
    if (!isnan(m->val_bpb))
        snprintf(bpb, sizeof bpb, "  val_bpb %.4f", m->val_bpb);
    if (isnan(m->test_loss))
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  %.*f samples/s%s  mfu %.2f  %.2f s  "
                    "rss %.0f MiB pss %.0f MiB", m->epoch, tr->cfg->train.epochs,
                    m->partial ? " (partial)" : "", (long long)m->step, m->train_loss,
                    CT_RATE_DECIMALS(m->samples_per_s), m->samples_per_s, tokens, m->mfu,
                    m->epoch_s, m->peak_rss_mib, m->pss_mib);
    else
        ct_log_info("epoch %d/%d%s step %lld  train_loss %.4f  test_loss %.4f%s  test_acc %.4f  "
                    "%.*f samples/s%s  mfu %.2f  %.2f s  rss %.0f MiB pss %.0f MiB",
                    m->epoch, tr->cfg->train.epochs, m->partial ? " (partial)" : "",
                    (long long)m->step, m->train_loss, m->test_loss, bpb, m->test_acc,
                    CT_RATE_DECIMALS(m->samples_per_s), m->samples_per_s, tokens, m->mfu,
                    m->epoch_s, m->peak_rss_mib, m->pss_mib);
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
        ct_trace_span(CT_TRACE_MAIN, "eval", "eval", te, te + em->eval_s);
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
    if ((rc = ct_trace_window_close(&tr->trace, tr->step)) < 0)
        return rc;
    summary->stopped_by_signal = signalled;
    summary->steps = tr->step;
    summary->samples_per_s = summary->train_s > 0 ? (double)samples_total / summary->train_s : 0.0;
    return 0;
}
