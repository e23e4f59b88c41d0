/* Unit tests for the run-directory reader (src/run/runread): ct_run_mean_std
 * (NaN left out, counts, the empty and one-value cases); ct_run_open's
 * flags (everything, the final epoch alone as summary reads it, the strict
 * chain of audit verify) and their messages; and `summary` and `report`
 * agreeing on the mean +- std of the final test_loss over runs where one
 * run's final test_loss is null (before the one mean_std, summary printed
 * "nan +- nan" there and the report the mean of the others).
 */
#include "config/config.h"
#include "core/error.h"
#include "ct_test.h"
#include "report/audit.h"
#include "report/report.h"
#include "run/runread.h"

#include <sys/stat.h>

static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static void test_mean_std(void)
{
    double mean, std;
    const double v[] = {1, NAN, 3, INFINITY, 5};
    CU_ASSERT_EQUAL(ct_run_mean_std(v, 5, &mean, &std), 3);
    CU_ASSERT_DOUBLE_EQUAL(mean, 3.0, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(std, 2.0, 1e-15); /* sample std of 1, 3, 5 */
    const double one[] = {NAN, 2.5};
    CU_ASSERT_EQUAL(ct_run_mean_std(one, 2, &mean, &std), 1);
    CU_ASSERT_DOUBLE_EQUAL(mean, 2.5, 0);
    CU_ASSERT(isnan(std));
    const double none[] = {NAN, NAN};
    CU_ASSERT_EQUAL(ct_run_mean_std(none, 2, &mean, &std), 0);
    CU_ASSERT(isnan(mean) && isnan(std));
    CU_ASSERT_EQUAL(ct_run_mean_std(NULL, 0, &mean, &std), 0);
    CU_ASSERT(isnan(mean));
}

/* A run directory: run.json, config.ini (the resolved mlp config with this
 * seed) and one metrics line per test_loss given. */
static void make_run(const char *dir, int seed, const double *test_loss, int n)
{
    static struct ct_config cfg;
    char set[64], path[1024];
    snprintf(set, sizeof set, "train.seed=%d", seed);
    const char *sets[1] = {set};
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    CU_ASSERT_EQUAL_FATAL(ct_config_load(&cfg, CT_FIXTURE_DIR "/../../configs/fmnist-mlp.ini", sets, 1), 0);
    char *text = NULL;
    CU_ASSERT_EQUAL_FATAL(ct_config_text(&cfg, &text), 0);
    snprintf(path, sizeof path, "%s/config.ini", dir);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, text, strlen(text)), 0);
    free(text);
    struct ct_run_record run = {.version = "0.1.0", .world = 1, .blas_threads = 1, .params = 10,
                                .steps_per_epoch = 5, .total_steps = 10};
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &run), 0);
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    for (int i = 0; i < n; i++) {
        struct ct_epoch_record e = {.epoch = i + 1, .step = 5 * (i + 1), .train_loss = 1.0 + seed,
                                    .train_acc = 0.5, .test_loss = test_loss[i], .test_acc = 0.25 * seed,
                                    .samples_per_s = 100, .epoch_s = 1, .eval_s = 0.1, .lr = 0.1,
                                    .peak_rss_mib = 10, .pss_mib = 5, .optim_state_bytes = -1,
                                    .world = 1, .slowest_rank = -1};
        memset(e.param_sha256, 'a', 64);
        CU_ASSERT_EQUAL(ct_metrics_append(f, path, &e), 0);
    }
    fclose(f);
}

/* "<name>  MEAN +- STD" of summary's output, as "MEAN +- STD". */
static void summary_mean(const char *out, const char *name, char *got, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "  %-10s ", name);
    const char *p = strstr(out, pat);
    got[0] = '\0';
    if (p)
        sscanf(p + strlen(pat), "%63[^\n]", got);
    (void)cap;
}

/* The report's mean row, cell k (0: train_loss, 1: test_loss, ...), with
 * "&plusmn;" read as "+-". */
static void report_mean(const char *html, int k, char *got, size_t cap)
{
    const char *p = strstr(html, "<tr class=\"mean\">");
    got[0] = '\0';
    for (int i = 0; p && i <= k; i++)
        if ((p = strstr(p + 1, "<td class=\"num\">")))
            p += strlen("<td class=\"num\">");
    if (!p)
        return;
    double mean, std;
    if (sscanf(p, "%lf &plusmn; %lf", &mean, &std) == 2)
        snprintf(got, cap, "%.6f +- %.6f", mean, std);
}

static void test_summary_and_report_agree(void)
{
    char root[256], dirs[3][300];
    snprintf(root, sizeof root, "%s", ct_test_tmpdir());
    const double a[] = {0.5, 0.4}, b[] = {0.7, 0.6}, c[] = {NAN, NAN}; /* c never evaluated */
    const double *loss[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/seed-%d", root, i + 1);
        make_run(dirs[i], i + 1, loss[i], 2);
    }
    const char *const d[3] = {dirs[0], dirs[1], dirs[2]};
    char *sum = NULL, *html = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&sum, &len);
    CU_ASSERT_EQUAL(ct_audit_summary(d, 3, f), 0);
    fclose(f);
    struct ct_report_run runs[3];
    for (int i = 0; i < 3; i++)
        CU_ASSERT_EQUAL_FATAL(ct_report_run_load(dirs[i], &runs[i]), 0);
    f = open_memstream(&html, &len);
    CU_ASSERT_EQUAL(ct_report_write_html(f, runs, 3, NULL), 0);
    fclose(f);
    char s[64], r[64];
    summary_mean(sum, "test_loss", s, sizeof s);
    report_mean(html, 1, r, sizeof r);
    if (strcmp(s, r) != 0 || strcmp(s, "0.500000 +- 0.141421") != 0)
        fprintf(stderr, "\n    summary: \"%s\"\n    report:  \"%s\"\n%s", s, r, sum);
    CU_ASSERT_STRING_EQUAL(s, "0.500000 +- 0.141421"); /* 0.4 and 0.6; the null left out */
    CU_ASSERT_STRING_EQUAL(r, s);
    summary_mean(sum, "train_loss", s, sizeof s);
    report_mean(html, 0, r, sizeof r);
    CU_ASSERT_STRING_EQUAL(s, "3.000000 +- 1.000000");
    CU_ASSERT_STRING_EQUAL(r, s);
    for (int i = 0; i < 3; i++)
        ct_report_run_free(&runs[i]);
    free(sum);
    free(html);
    ct_test_rmtree(root);
}

static void test_open_flags(void)
{
    char root[256], dir[300], path[400];
    snprintf(root, sizeof root, "%s", ct_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/run", root);
    const double l[] = {0.5, 0.25};
    make_run(dir, 1, l, 2);
    struct ct_run run;
    /* Everything: steps, chain and placement may be absent. */
    CU_ASSERT_EQUAL_FATAL(ct_run_open(dir, CT_RUN_ALL, &run), 0);
    CU_ASSERT_EQUAL(run.n_epochs, 2);
    CU_ASSERT_EQUAL(run.n_steps, 0);
    CU_ASSERT_EQUAL(run.n_chain, 0);
    CU_ASSERT_PTR_NULL(run.placement);
    CU_ASSERT_EQUAL(run.run.world, 1);
    CU_ASSERT_STRING_EQUAL(ct_run_config_value(&run, "train.seed"), "1");
    ct_run_close(&run);
    ct_run_close(&run); /* harmless twice */
    /* Only what is asked for is read. */
    CU_ASSERT_EQUAL_FATAL(ct_run_open(dir, CT_RUN_METRICS, &run), 0);
    CU_ASSERT_PTR_NULL(run.config);
    CU_ASSERT_PTR_NULL(run.run.version);
    ct_run_close(&run);
    /* The final epoch alone, a torn last line parsed as it is. */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "a");
    fputs("{\"epoch\": 3", f);
    fclose(f);
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_LAST_EPOCH, &run), CT_EFORMAT);
    expect_msg("metrics.jsonl:3: offset 11");
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_METRICS, &run), 0); /* the torn line left out */
    CU_ASSERT_EQUAL(run.n_epochs, 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(run.notes, "metrics.jsonl:3: the last line was cut short"));
    ct_run_close(&run);
    CU_ASSERT_EQUAL(ct_test_write_file(path, "", 0), 0);
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_LAST_EPOCH, &run), CT_EFORMAT);
    expect_msg("metrics.jsonl: no epoch recorded");
    /* The strict chain: it must be there, whole. */
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_CHAIN_STRICT, &run), CT_ENOENT);
    expect_msg("chain.jsonl: cannot open");
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_CHAIN, &run), 0);
    ct_run_close(&run);
    snprintf(path, sizeof path, "%s/chain.jsonl", dir);
    CU_ASSERT_EQUAL(ct_test_write_file(path, "{\"step\"", 7), 0);
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_CHAIN_STRICT, &run), CT_EFORMAT);
    expect_msg("chain.jsonl:1: torn last line");
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_CHAIN, &run), 0);
    CU_ASSERT_EQUAL(run.n_chain, 0);
    ct_run_close(&run);
    /* A missing required file names itself. */
    snprintf(path, sizeof path, "%s/run.json", dir);
    remove(path);
    CU_ASSERT_EQUAL(ct_run_open(dir, CT_RUN_JSON, &run), CT_ENOENT);
    expect_msg("run.json: cannot open");
    ct_test_rmtree(root);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"mean_std", test_mean_std},
        {"open_flags", test_open_flags},
        {"summary_and_report_agree", test_summary_and_report_agree},
        {NULL, NULL},
    };
    return ct_test_run("runread", cases);
}
