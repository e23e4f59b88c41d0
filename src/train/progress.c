/* Training progress lines (see progress.h). */
#include "train/progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"

struct ct_progress_params ct_progress_default_params(void)
{
    return (struct ct_progress_params){.line_interval_s = 30.0, .redraw_s = 0.1};
}

const char *const ct_progress_mode_names[] = {"auto", "bar", "lines", "off", NULL};

int ct_progress_env_mode(enum ct_progress_mode *mode)
{
    const char *v = getenv("CT_PROGRESS");
    *mode = CT_PROGRESS_AUTO;
    if (!v || !*v)
        return 0;
    for (int i = 0; ct_progress_mode_names[i]; i++)
        if (strcmp(v, ct_progress_mode_names[i]) == 0) {
            *mode = (enum ct_progress_mode)i;
            return 0;
        }
    return ct_error_set(CT_EUSAGE, "CT_PROGRESS: unknown value '%s' (expected auto, bar, lines or off)", v);
}

/* Launched by mpirun or srun: a rank's stdout is a pty (Open MPI's) or a
 * pipe (hydra's) and its stderr a pipe whatever the user's terminal is, so
 * only the launcher knows (launch/ctrain-run sets CT_PROGRESS=bar on a
 * terminal). The process-management interface says a launcher started us,
 * whichever MPI: PMIX_RANK (Open MPI's mpirun, srun --mpi=pmix), PMI_RANK
 * (MPICH's hydra, Intel MPI, srun --mpi=pmi2), SLURM_PROCID (any srun). */
static int under_launcher(void)
{
    return getenv("PMIX_RANK") || getenv("PMI_RANK") || getenv("SLURM_PROCID");
}

void ct_progress_detect(struct ct_progress_params *p, int rank)
{
    p->out = NULL;
    enum ct_progress_mode mode;
    if (rank != 0 || ct_log_level() < CT_LOG_LEVEL_INFO || ct_progress_env_mode(&mode) < 0 ||
        mode == CT_PROGRESS_OFF)
        return;
    if (mode == CT_PROGRESS_AUTO)
        mode = isatty(STDERR_FILENO) && !under_launcher() ? CT_PROGRESS_BAR : CT_PROGRESS_LINES;
    /* A bar on stderr; plain lines go with the other log lines, to stdout. */
    p->tty = mode == CT_PROGRESS_BAR;
    p->out = p->tty ? stderr : stdout;
    p->color = p->tty && !getenv("NO_COLOR");
}

static void clear_bar(void *ctx)
{
    struct ct_progress *pr = ctx;
    if (pr->drawn) {
        fputs("\r\033[K", pr->p.out);
        fflush(pr->p.out);
        pr->drawn = 0;
    }
}

void ct_progress_init(struct ct_progress *pr, const struct ct_progress_params *p)
{
    memset(pr, 0, sizeof *pr);
    pr->p = *p;
    pr->epoch = -1;
    if (p->out && p->tty)
        ct_log_set_before_line(clear_bar, pr);
}

void ct_progress_free(struct ct_progress *pr)
{
    if (pr->p.out && pr->p.tty) {
        clear_bar(pr);
        ct_log_set_before_line(NULL, NULL);
    }
    memset(pr, 0, sizeof *pr);
}

/* h:mm:ss, or m:ss under an hour; "?" when unknown. */
static void format_duration(char *out, size_t cap, double s)
{
    if (!(s >= 0) || s > 1e8) {
        snprintf(out, cap, "?");
        return;
    }
    long t = lround(s);
    if (t >= 3600)
        snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, cap, "%ld:%02ld", t / 60, t % 60);
}

/* 103512.4 -> "103,512" */
/* A rate: whole numbers with thousands separators; below 10, two decimals
 * (CT_RATE_DECIMALS). */
static void format_thousands(char *out, size_t cap, double v)
{
    char digits[32];
    if (CT_RATE_DECIMALS(v)) {
        snprintf(out, cap, "%.2f", v);
        return;
    }
    snprintf(digits, sizeof digits, "%.0f", v >= 0 && v < 1e15 ? v : 0.0);
    size_t n = strlen(digits), o = 0;
    for (size_t i = 0; i < n && o + 2 < cap; i++) {
        if (i && (n - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
}

void ct_progress_format(char *out, size_t cap, const struct ct_progress_line *l, int bar_width,
                        int color)
{
    char bar[256] = "", rate[32], tokens[64] = "", mfu[32] = "", loss[32], eta_e[32], eta_r[32];
    if (bar_width > 0) {
        if (bar_width > 200)
            bar_width = 200;
        int filled = l->steps > 0 ? (int)((double)bar_width * (double)l->step / (double)l->steps) : 0;
        filled = filled < 0 ? 0 : filled > bar_width ? bar_width : filled;
        size_t o = 0;
        bar[o++] = '[';
        if (color)
            o += (size_t)snprintf(bar + o, sizeof bar - o, "\033[32m");
        for (int i = 0; i < bar_width; i++)
            bar[o++] = i < filled ? '#' : i == filled ? '>' : '-';
        if (color)
            o += (size_t)snprintf(bar + o, sizeof bar - o, "\033[0m");
        snprintf(bar + o, sizeof bar - o, "] ");
    }
    format_thousands(rate, sizeof rate, l->samples_per_s);
    if (l->tokens_per_s > 0) {
        char t[32];
        format_thousands(t, sizeof t, l->tokens_per_s);
        snprintf(tokens, sizeof tokens, " (%s tokens/s)", t);
    }
    if (l->mfu > 0 && l->mfu < 1e6)
        snprintf(mfu, sizeof mfu, "  mfu %.2f", l->mfu);
    if (isnan(l->loss))
        snprintf(loss, sizeof loss, "?");
    else
        snprintf(loss, sizeof loss, "%.4f", l->loss);
    format_duration(eta_e, sizeof eta_e, l->eta_epoch_s);
    format_duration(eta_r, sizeof eta_r, l->eta_run_s);
    snprintf(out, cap, "epoch %d/%d %s%lld/%lld  %s samples/s%s%s  loss %s  ETA %s epoch, %s run",
             l->epoch, l->epochs, bar, (long long)l->step, (long long)l->steps, rate, tokens, mfu,
             loss, eta_e, eta_r);
}

void ct_progress_step(struct ct_progress *pr, int epoch, int64_t step_in_epoch, int64_t global_step,
                      double loss_sum, int64_t targets, double now)
{
    const struct ct_progress_params *p = &pr->p;
    if (!p->out)
        return;
    if (epoch != pr->epoch) { /* the first step of an epoch (or of a resumed one) */
        pr->epoch = epoch;
        pr->epoch_first_local = step_in_epoch;
        pr->t_epoch = now;
        pr->t_last_draw = now;
        pr->loss_sum = 0;
        pr->loss_n = 0;
    }
    pr->loss_sum += loss_sum;
    pr->loss_n += targets;
    int64_t done = step_in_epoch - pr->epoch_first_local; /* timed steps */
    int due;
    if (p->tty)
        due = now - pr->t_last_draw >= p->redraw_s || step_in_epoch == p->steps_per_epoch;
    else
        due = (p->every_steps > 0 && global_step % p->every_steps == 0) ||
              now - pr->t_last_draw >= p->line_interval_s;
    if (!due)
        return;
    double per_step = done > 0 ? (now - pr->t_epoch) / (double)done : -1.0;
    struct ct_progress_line l = {
        .epoch = epoch + 1, .epochs = p->epochs, .step = step_in_epoch, .steps = p->steps_per_epoch,
        .samples_per_s = per_step > 0 ? p->global_batch / per_step : 0.0,
        .tokens_per_s = per_step > 0 ? (double)p->global_batch * p->tokens_per_sample / per_step : 0.0,
        .mfu = per_step > 0 && p->peak_gflops > 0
                   ? p->global_batch / per_step * p->flops_per_sample / (p->peak_gflops * 1e9)
                   : NAN,
        .loss = pr->loss_n ? pr->loss_sum / (double)pr->loss_n : NAN,
        .eta_epoch_s = per_step > 0 ? per_step * (double)(p->steps_per_epoch - step_in_epoch) : -1,
        .eta_run_s = per_step > 0 ? per_step * (double)(p->total_steps - global_step) : -1,
    };
    char line[512];
    ct_progress_format(line, sizeof line, &l, p->tty ? 24 : 0, p->color);
    if (p->tty)
        fprintf(p->out, "\r\033[K%s", line);
    else
        fprintf(p->out, "%s\n", line);
    fflush(p->out);
    pr->drawn = p->tty;
    pr->t_last_draw = now;
}

void ct_progress_end_epoch(struct ct_progress *pr)
{
    if (pr->p.out && pr->p.tty)
        clear_bar(pr);
    pr->epoch = -1;
}
