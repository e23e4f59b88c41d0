/* Unit tests for the progress lines (src/train/progress.c): the text of a line
 * (bar, thousands, durations, unknown values, colour codes only when asked),
 * when lines are written (every_steps or the interval without a terminal; at
 * most one redraw per redraw_s on one, always at the epoch's last step), and
 * that a log line clears a drawn bar first. */
#include "core/log.h"
#include "train/progress.h"
#include "ct_test.h"

#include <math.h>

static void test_format(void)
{
    char s[512];
    struct ct_progress_line l = {.epoch = 2, .epochs = 5, .step = 117, .steps = 234,
                                 .samples_per_s = 103512.4, .loss = 0.43214,
                                 .eta_epoch_s = 61.4, .eta_run_s = 3725};
    ct_progress_format(s, sizeof s, &l, 10, 0);
    CU_ASSERT_STRING_EQUAL(s, "epoch 2/5 [#####>----] 117/234  103,512 samples/s  loss 0.4321  "
                              "ETA 1:01 epoch, 1:02:05 run");
    ct_progress_format(s, sizeof s, &l, 0, 0);
    CU_ASSERT_STRING_EQUAL(s, "epoch 2/5 117/234  103,512 samples/s  loss 0.4321  ETA 1:01 epoch, 1:02:05 run");
    l = (struct ct_progress_line){.epoch = 1, .epochs = 1, .step = 1, .steps = 4, .loss = NAN,
                                  .eta_epoch_s = -1, .eta_run_s = -1, .samples_per_s = 999};
    ct_progress_format(s, sizeof s, &l, 4, 1);
    CU_ASSERT_STRING_EQUAL(s, "epoch 1/1 [\033[32m#>--\033[0m] 1/4  999 samples/s  loss ?  ETA ? epoch, ? run");
    l.step = 4;
    ct_progress_format(s, sizeof s, &l, 4, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "[####] 4/4"));
    /* MFU after the throughput; unknown (NaN) or 0: left out. */
    l.mfu = 0.4321;
    ct_progress_format(s, sizeof s, &l, 0, 0);
    CU_ASSERT_STRING_EQUAL(s, "epoch 1/1 4/4  999 samples/s  mfu 0.43  loss ?  ETA ? epoch, ? run");
    l.mfu = NAN;
    ct_progress_format(s, sizeof s, &l, 0, 0);
    CU_ASSERT_STRING_EQUAL(s, "epoch 1/1 4/4  999 samples/s  loss ?  ETA ? epoch, ? run");
    /* Below 10 a second, two decimals (GPT-2 small: 0.31 samples, 314 tokens). */
    l.samples_per_s = 0.3066;
    l.tokens_per_s = 313.96;
    ct_progress_format(s, sizeof s, &l, 0, 0);
    CU_ASSERT_STRING_EQUAL(s, "epoch 1/1 4/4  0.31 samples/s (314 tokens/s)  loss ?  ETA ? epoch, ? run");
    CU_ASSERT_EQUAL(CT_RATE_DECIMALS(9.99), 2);
    CU_ASSERT_EQUAL(CT_RATE_DECIMALS(10.0), 0);
    CU_ASSERT_EQUAL(CT_RATE_DECIMALS(0.0), 0);
}

static struct ct_progress_params params(FILE *f, int tty)
{
    struct ct_progress_params p = ct_progress_default_params();
    p.out = f;
    p.tty = tty;
    p.epochs = 2;
    p.steps_per_epoch = 10;
    p.total_steps = 20;
    p.global_batch = 100;
    p.every_steps = 4;
    return p;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* A progress writer into memory (open_memstream): out.buf holds what it
 * wrote once out.f is flushed. */
struct captured {
    char *buf;
    size_t len;
    FILE *f;
};

static void capture_open(struct captured *out)
{
    *out = (struct captured){0};
    out->f = open_memstream(&out->buf, &out->len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out->f);
}

static void capture_close(struct ct_progress *pr, struct captured *out)
{
    ct_progress_free(pr);
    fclose(out->f);
    free(out->buf);
}

static void test_plain_lines(void)
{
    struct captured out;
    capture_open(&out);
    struct ct_progress pr;
    struct ct_progress_params p = params(out.f, 0);
    ct_progress_init(&pr, &p);
    /* 0.5 s per step: lines at steps 4, 8 (every_steps) of epoch 1; then a
     * 40 s step in epoch 2 writes one by the 30 s interval. */
    double t = 100;
    for (int k = 1; k <= 10; k++)
        ct_progress_step(&pr, 0, k, k, 2.0 * 50, 50, t += 0.5);
    ct_progress_end_epoch(&pr);
    ct_progress_step(&pr, 1, 1, 11, 50, 50, t += 0.5);
    ct_progress_step(&pr, 1, 2, 13, 50, 50, t += 40);
    fflush(out.f);
    CU_ASSERT_EQUAL(count(out.buf, "\n"), 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "epoch 1/2 4/10  "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "epoch 1/2 8/10  "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "loss 2.0000"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "epoch 2/2 2/10  "));
    CU_ASSERT_PTR_NULL(strstr(out.buf, "\r"));
    /* Epoch 1, step 8: 7 timed steps in 3.5 s -> 200 samples/s, 2 steps to go. */
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "8/10  200 samples/s  loss 2.0000  ETA 0:01 epoch, 0:06 run"));
    capture_close(&pr, &out);
}

/* MFU: rank 0's samples/s x FLOPs a sample / all ranks' peak. */
static void test_mfu_line(void)
{
    struct captured out;
    capture_open(&out);
    struct ct_progress pr;
    struct ct_progress_params p = params(out.f, 0);
    p.flops_per_sample = 1e9;
    p.peak_gflops = 400; /* e.g. 2 ranks of 200 */
    ct_progress_init(&pr, &p);
    double t = 100;
    for (int k = 1; k <= 4; k++) /* 200 samples/s x 1 GFLOP / 400 GFLOP/s */
        ct_progress_step(&pr, 0, k, k, 2.0 * 50, 50, t += 0.5);
    fflush(out.f);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "4/10  200 samples/s  mfu 0.50  loss 2.0000  "));
    capture_close(&pr, &out);
}

static void test_tty_redraws(void)
{
    struct captured out;
    capture_open(&out);
    struct ct_progress pr;
    struct ct_progress_params p = params(out.f, 1);
    ct_progress_init(&pr, &p);
    /* Steps 0.03 s apart: a redraw at most every 0.1 s, and at the last step. */
    double t = 0;
    for (int k = 1; k <= 10; k++)
        ct_progress_step(&pr, 0, k, k, 10, 50, t += 0.03);
    fflush(out.f);
    int draws = count(out.buf, "\r\033[K");
    CU_ASSERT(draws >= 2 && draws <= 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.buf, "10/10"));
    CU_ASSERT_PTR_NULL(strstr(out.buf, "\n"));
    /* A log line clears the bar first. */
    ct_log_info("a line");
    fflush(out.f);
    CU_ASSERT_EQUAL(count(out.buf, "\r\033[K"), draws + 1);
    ct_log_info("another line"); /* nothing drawn since: no second clear */
    fflush(out.f);
    CU_ASSERT_EQUAL(count(out.buf, "\r\033[K"), draws + 1);
    capture_close(&pr, &out);
}

static void test_off(void)
{
    struct ct_progress pr;
    struct ct_progress_params p = params(NULL, 0);
    ct_progress_init(&pr, &p);
    ct_progress_step(&pr, 0, 1, 1, 1, 1, 1.0); /* no stream: nothing, no crash */
    ct_progress_free(&pr);
    ct_log_init(0, 1, CT_LOG_LEVEL_WARN);
    ct_progress_detect(&p, 0);
    CU_ASSERT_PTR_NULL(p.out); /* --quiet */
    ct_log_init(0, 1, CT_LOG_LEVEL_INFO);
    ct_progress_detect(&p, 1);
    CU_ASSERT_PTR_NULL(p.out); /* not rank 0 */
}

static const struct ct_test_case cases[] = {
    {"format", test_format},
    {"plain_lines", test_plain_lines},
    {"mfu_line", test_mfu_line},
    {"tty_redraws", test_tty_redraws},
    {"off", test_off},
    {NULL, NULL},
};

int main(void) { return ct_test_run("progress", cases); }
