/* The records' exact bytes: run.json, metrics.jsonl, steps.jsonl and
 * chain.jsonl lines written from records that exercise every key, every
 * gate (token data, MFU, peak_source), nulls (NaN, -1, NULL arrays, empty
 * parent), infinities and large values, compared with the bytes the writer
 * produced before the writers were driven by key tables (captured from
 * that code with `test_record_golden --dump` and pasted below). The files a
 * run writes must not change by one byte when the code that writes them is
 * restructured.
 */
#include "core/error.h"
#include "ct_test.h"
#include "run/record.h"

#include <math.h>

static const double ph_a[2] = {0.125, 1.5};
static const double ph_b[2] = {NAN, 2.0 / 3.0};
static const double ph_c[2] = {1e-9, INFINITY};
static const double ph_d[2] = {3.25, 0.0};
static const double ach[2] = {12.345, 678.9};

/* Record i of the metrics cases. */
static struct ct_epoch_record epoch_case(int i)
{
    struct ct_epoch_record r = {
        .epoch = 3, .step = 702, .partial = 0, .train_loss = 0.123456789, .train_acc = 0.98765,
        .test_loss = 0.3333333333, .test_acc = 0.9, .samples_per_s = 12345.678, .epoch_s = 4.56789,
        .eval_s = 0.5, .lr = 0.1, .peak_rss_mib = 512.25, .pss_mib = 300.04,
        .optim_state_bytes = 1234567, .world = 2, .data_wait_s = ph_a, .forward_backward_s = ph_b,
        .exposed_comm_s = ph_c, .optim_s = ph_d, .slowest_rank = 1, .nonfinite_skipped = 2,
        .nonfinite_skipped_total = 5, .param_sha256 = "0123456789abcdef0123456789abcdef"
                                                      "0123456789abcdef0123456789abcdef",
    };
    switch (i) {
    case 0: break;
    case 1: /* not evaluated, unknowns, no phases */
        r.partial = 1;
        r.train_acc = r.test_loss = r.test_acc = r.pss_mib = NAN;
        r.optim_state_bytes = -1;
        r.slowest_rank = -1;
        r.data_wait_s = r.forward_backward_s = r.exposed_comm_s = r.optim_s = NULL;
        r.lr = 3e-4;
        r.samples_per_s = INFINITY;
        r.world = 1;
        break;
    case 2: /* token data and MFU */
        r.tokens_per_s = 98765.4321;
        r.val_bpb = 1.23456;
        r.flops_per_sample = 1.5e9 + 0.4;
        r.achieved_gflops = ach;
        r.peak_gflops = 1000.0 / 3.0;
        r.mfu = 0.0123456;
        r.lr = 1e300;
        r.train_loss = -0.0;
        break;
    case 3: /* token data, bpb unknown; MFU without achieved rates */
        r.tokens_per_s = 1e-3;
        r.val_bpb = NAN;
        r.flops_per_sample = 7;
        r.peak_gflops = NAN;
        r.mfu = NAN;
        r.lr = 0.123456789012;
        r.epoch = 2147483647;
        r.step = INT64_MAX;
        break;
    }
    return r;
}
#define N_EPOCH_CASES 4

static struct ct_step_record step_case(int i)
{
    switch (i) {
    case 0: return (struct ct_step_record){.step = 10, .loss = 2.302585093, .acc = 0.1171875, .lr = 0.05};
    case 1: return (struct ct_step_record){.step = 20, .loss = NAN, .acc = NAN, .lr = 1e-7};
    default:
        return (struct ct_step_record){.step = 30, .loss = 1.0 / 3.0, .acc = 1, .lr = 6e-4,
                                       .tokens_per_s = 123456.789};
    }
}
#define N_STEP_CASES 3

static struct ct_chain_entry chain_case(int i)
{
    struct ct_chain_entry e = {
        .step = 40, .epoch = 2, .ckpt = "ckpt-40",
        .digest = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        .parent = "", .config_digest = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        .code_version = "0.1.0 (c777258-dirty)", .world = 4, .hosts = "node-01,node-\"02\"",
        .gemm = "avx512", .blas = "OpenBLAS 0.3.21", .libraries = "mpi=Open MPI v4.1.4; hwloc=2.8.0",
        .time = "2026-12-03T08:40:00Z",
    };
    if (i == 1) {
        memcpy(e.parent, e.digest, sizeof e.parent);
        e.libraries[0] = '\0';
        e.step = 80;
    }
    return e;
}
#define N_CHAIN_CASES 2

static int run_case(int i, const char *dir)
{
    static const struct ct_run_extra extra[] = {{"mpi", "Open MPI v4.1.4"}, {"note", "tab\there"}};
    struct ct_run_record r = {
        .version = "0.1.0", .git = NULL, .config = "configs/x.ini", .world = 4, .blas_threads = 2,
        .blas = "OpenBLAS 0.3.21", .gemm = "avx512", .host0 = "node-01", .params = 5000000000LL,
        .steps_per_epoch = 234, .total_steps = 1170,
    };
    if (i == 1) {
        r.flops_per_sample = 1234567.8;
        r.peak_gflops = 2000.0 / 3.0;
        r.peak_source = "probe";
        r.peak_kernel = NULL;
        r.extra = extra;
        r.n_extra = 2;
    }
    return ct_run_record_write(dir, &r);
}
#define N_RUN_CASES 2

/* Every case's bytes, in order, one string each. */
static int produce(char **out, size_t *n_out)
{
    const char *dir = ct_test_tmpdir();
    char path[512];
    size_t n = 0;
    for (int i = 0; i < N_RUN_CASES; i++) {
        if (run_case(i, dir) < 0)
            return -1;
        snprintf(path, sizeof path, "%s/run.json", dir);
        size_t len;
        out[n++] = (char *)ct_test_read_file(path, &len);
    }
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    for (int i = 0; i < N_EPOCH_CASES + N_STEP_CASES; i++) {
        FILE *f = fopen(path, "w");
        struct ct_epoch_record e = epoch_case(i);
        struct ct_step_record s = step_case(i - N_EPOCH_CASES);
        int rc = i < N_EPOCH_CASES ? ct_metrics_append(f, path, &e) : ct_steps_append(f, path, &s);
        fclose(f);
        if (rc < 0)
            return -1;
        size_t len;
        out[n++] = (char *)ct_test_read_file(path, &len);
    }
    for (int i = 0; i < N_CHAIN_CASES; i++) {
        struct ct_chain_entry e = chain_case(i);
        size_t len;
        if (ct_chain_format(&e, &out[n++], &len) < 0)
            return -1;
    }
    *n_out = n;
    ct_test_rmtree(dir);
    return 0;
}
#define N_CASES (N_RUN_CASES + N_EPOCH_CASES + N_STEP_CASES + N_CHAIN_CASES)

/* The bytes of the writers before the key tables. */
static const char *const golden[N_CASES] = {
#include "test_record_golden.inc"
};

static void test_bytes(void)
{
    char *got[N_CASES] = {0};
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(produce(got, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, N_CASES);
    for (size_t i = 0; i < n; i++) {
        if (!got[i] || strcmp(got[i], golden[i]) != 0)
            fprintf(stderr, "\n    case %zu\n    got:  %s\n    want: %s\n", i, got[i] ? got[i] : "(null)",
                    golden[i]);
        CU_ASSERT(got[i] && strcmp(got[i], golden[i]) == 0);
        free(got[i]);
    }
}

/* Print the bytes as C string literals (for test_record_golden.inc). */
static int dump(void)
{
    char *got[N_CASES] = {0};
    size_t n = 0;
    if (produce(got, &n) < 0) {
        fprintf(stderr, "%s\n", ct_error_message());
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        fputs("    \"", stdout);
        for (const char *p = got[i]; *p; p++) {
            if (*p == '"' || *p == '\\')
                printf("\\%c", *p);
            else if (*p == '\n')
                fputs("\\n", stdout);
            else if (*p == '\t')
                fputs("\\t", stdout);
            else
                putchar(*p);
        }
        fputs("\",\n", stdout);
        free(got[i]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--dump") == 0)
        return dump();
    static const struct ct_test_case cases[] = {
        {"bytes", test_bytes},
        {NULL, NULL},
    };
    return ct_test_run("record_golden", cases);
}
