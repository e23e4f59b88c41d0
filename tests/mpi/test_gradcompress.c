/* bf16 gradient compression under real mpirun (1, 2 and 4 ranks):
 * - the communicator's bf16 allreduce (blocking and not) of values whose
 *   partial sums are exact in bf16 gives the sum of the ranks' rounded
 *   values bit for bit, in any order MPI picks; the inputs are rounded
 *   (1 + 2^-10 of each value is not sent);
 * - gradsync with compression, buckets from one per module to one for all,
 *   overlapped and blocking: the same bits on every rank and in both modes,
 *   within (N-1) * 2^-8 * sum|x| of the exact sum of the rounded inputs
 *   (compress.h), exact where the partial sums are;
 * - error feedback: each rank's residual is exactly what its own rounding
 *   dropped of g + previous residual, and feeds the next step;
 * - the trainer with bf16 and feedback: a resume from a checkpoint at the
 *   same N gives the same weights bit for bit (the residuals are restored:
 *   each rank's equals its section); the same checkpoint resumed by one rank
 *   (another N when N > 1) drops the residuals, says so in the changes, and
 *   trains on; the manifest's config and run.json record the setting. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/bf16.h"
#include "core/error.h"
#include "core/sha256.h"
#include "ct_mpi_test.h"
#include "ct_train_test.h"
#include "parallel/gradsync.h"
#include "train/trainer-impl.h"

static const struct ct_grad_span g_spans[] = {{0, 1000}, {1000, 5000}, {5008, 40000}, {40000, 40010}};
enum { N_MODULES = 4, NUMEL = 40016 };

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rb(float x) { return ct_bf16_to_f32(ct_bf16_from_f32(x)); }

/* Rank r's value i at step s. Exact kind: k * 2^e * (1 + 2^-10) with
 * k in [-8, 8], e in [-20, 4]: it rounds to k * 2^e (the factor is below
 * half a bf16 spacing), and any partial sum of up to 4 ranks' k * 2^e is
 * an integer below 33 times 2^e: exact in bf16. Otherwise mixed magnitudes. */
static float value(int rank, int step, size_t i, int exact)
{
    uint64_t h = mix(((uint64_t)rank << 48) ^ ((uint64_t)step << 32) ^ i ^ 0xbf16ull);
    if (exact) { /* the exponent is the element's, the same on every rank */
        int k = (int)(h % 17) - 8, e = (int)(mix(((uint64_t)step << 32) ^ i) % 25) - 20;
        return ldexpf((float)k * (1.0f + 0x1p-10f), e);
    }
    double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
    return (float)ldexp(u, (int)((h >> 5) % 16) - 10);
}

/* Ranks whose buffer differs from rank 0's, bit for bit (every rank gets it). */
static int ranks_differing(const void *buf, size_t bytes)
{
    struct ct_comm *c = &g_comm;
    uint8_t mine[CT_SHA256_LEN], root[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_sha256_buf(buf, bytes, mine), 0);
    memcpy(root, mine, sizeof root);
    CU_ASSERT_EQUAL(ct_comm_bcast(c, root, sizeof root, 0), 0);
    int64_t differ = memcmp(mine, root, sizeof mine) != 0;
    CU_ASSERT_EQUAL(ct_comm_allreduce_i64(c, &differ, 1, CT_REDUCE_SUM), 0);
    return (int)differ;
}

/* ---------------------------------------------------------------- comm */

static void test_comm_bf16_exact(void)
{
    struct ct_comm *c = &g_comm;
    enum { N = 5000 };
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    float *f = malloc(N * sizeof *f);
    CU_ASSERT_FATAL(a && b && f);
    for (size_t i = 0; i < N; i++) {
        f[i] = value(c->rank, 0, i, 1);
        a[i] = b[i] = ct_bf16_from_f32(f[i]);
    }
    struct ct_request req = {0};
    CU_ASSERT_EQUAL(ct_comm_iallreduce_bf16(c, a, N, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_allreduce_bf16(c, b, N), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_allreduce_f32(c, f, N), 0);
    size_t bad = 0, raw_differs = 0;
    for (size_t i = 0; i < N; i++) {
        float want = 0;
        for (int r = 0; r < c->world; r++)
            want += rb(value(r, 0, i, 1)); /* exact: integers times 2^e */
        float got = ct_bf16_to_f32(a[i]);
        if (a[i] != b[i] || memcmp(&got, &want, sizeof got) != 0) {
            if (bad++ < 3)
                fprintf(stderr, "  [rank %d] %zu: got %a / %a want %a\n", c->rank, i, (double)got,
                        (double)ct_bf16_to_f32(b[i]), (double)want);
        }
        raw_differs += f[i] != want; /* the float32 sum keeps the 2^-10 parts */
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(raw_differs > N / 2);
    CU_ASSERT_EQUAL(ranks_differing(a, N * sizeof *a), 0);
    /* Zero elements, and a count one call cannot take. */
    CU_ASSERT_EQUAL(ct_comm_iallreduce_bf16(c, a, 0, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_bf16(c, a, (size_t)INT_MAX + 1, &req), CT_ERANGE);
    free(a);
    free(b);
    free(f);
}

/* ---------------------------------------------------------------- gradsync */

static const size_t g_caps[][2] = {{1, 1}, {4096, 16384}, {SIZE_MAX, SIZE_MAX}};
enum { N_CAPS = sizeof g_caps / sizeof g_caps[0] };

static struct ct_gradsync_params params(int cap, int overlap, int feedback)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    p.first_bucket_bytes = g_caps[cap][0];
    p.bucket_bytes = g_caps[cap][1];
    p.overlap = overlap;
    p.compress = CT_GRAD_COMPRESS_BF16;
    p.feedback = feedback;
    return p;
}

static void fill(float *g, int rank, int step, int exact)
{
    for (size_t i = 0; i < NUMEL; i++)
        g[i] = value(rank, step, i, exact);
}

/* One step; modules reported last to first when overlapping. */
static int run_step(struct ct_gradsync *gs, float *g, int step, int exact, int overlap)
{
    fill(g, g_comm.rank, step, exact);
    int rc = ct_gradsync_begin(gs, 0);
    CU_ASSERT_EQUAL(rc, 0);
    for (int i = N_MODULES - 1; overlap && i >= 0; i--)
        ct_gradsync_hook(gs, i);
    if ((rc = ct_gradsync_finish(gs, NULL)) < 0)
        fprintf(stderr, "[rank %d] finish: %s\n", g_comm.rank, ct_error_message());
    return rc;
}

/* The sum must be within the bound of compress.h of the exact sum of what
 * the ranks sent (sent[r][i] from `sent_of`), and exact for exact values. */
static size_t check_bound(const float *g, float (*sent_of)(int rank, size_t i, void *ctx), void *ctx,
                          int exact)
{
    const int W = g_comm.world;
    size_t bad = 0;
    for (size_t i = 0; i < NUMEL; i++) {
        double s = 0, abs = 0;
        for (int r = 0; r < W; r++) {
            double x = sent_of(r, i, ctx);
            s += x;
            abs += fabs(x);
        }
        double tol = exact ? 0 : (W - 1) * 0x1p-8 * abs;
        if (!(fabs((double)g[i] - s) <= tol) && bad++ < 3)
            fprintf(stderr, "  [rank %d] %zu: got %a want %a (tolerance %g)\n", g_comm.rank, i,
                    (double)g[i], s, tol);
    }
    return bad;
}

struct sent_ctx {
    int step, exact;
};

static float sent_plain(int rank, size_t i, void *ctx)
{
    const struct sent_ctx *s = ctx;
    return rb(value(rank, s->step, i, s->exact));
}

static void test_gradsync_sums(void)
{
    struct ct_comm *c = &g_comm;
    float *g = malloc(NUMEL * sizeof *g), *ref = malloc(NUMEL * sizeof *ref);
    CU_ASSERT_FATAL(g && ref);
    for (int exact = 1; exact >= 0; exact--)
        for (int cap = 0; cap < N_CAPS; cap++) {
            for (int overlap = 0; overlap < 2; overlap++) {
                struct ct_gradsync_params p = params(cap, overlap, 0);
                struct ct_gradsync gs;
                CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, &p), 0);
                CU_ASSERT_EQUAL(run_step(&gs, g, 3, exact, overlap), 0);
                struct sent_ctx sc = {3, exact};
                CU_ASSERT_EQUAL(check_bound(g, sent_plain, &sc, exact), 0);
                /* Every sum is a widened bf16. */
                size_t not_bf16 = 0;
                for (size_t i = 0; i < NUMEL; i++)
                    not_bf16 += rb(g[i]) != g[i];
                CU_ASSERT_EQUAL(not_bf16, 0);
                CU_ASSERT_EQUAL(ranks_differing(g, NUMEL * sizeof *g), 0);
                if (overlap == 0)
                    memcpy(ref, g, NUMEL * sizeof *g);
                else
                    CU_ASSERT(memcmp(ref, g, NUMEL * sizeof *g) == 0); /* overlap == blocking */
                ct_gradsync_free(&gs);
            }
        }
    free(g);
    free(ref);
}

struct fb_ctx {
    const float *res; /* (world, NUMEL): every rank's residual before the step */
    int step;
};

static float sent_feedback(int rank, size_t i, void *ctx)
{
    const struct fb_ctx *s = ctx;
    return rb(value(rank, s->step, i, 0) + s->res[(size_t)rank * NUMEL + i]);
}

/* Every rank's residual, gathered everywhere (rank order). */
static void gather_all(const float *mine, float *all)
{
    struct ct_comm *c = &g_comm;
    CU_ASSERT_EQUAL(ct_comm_gather(c, mine, NUMEL * sizeof *mine, all, 0), 0);
    CU_ASSERT_EQUAL(ct_comm_bcast(c, all, (size_t)c->world * NUMEL * sizeof *all, 0), 0);
}

static void test_gradsync_feedback(void)
{
    struct ct_comm *c = &g_comm;
    const size_t W = (size_t)c->world;
    float *g = malloc(NUMEL * sizeof *g), *all = calloc(W * NUMEL, sizeof *all),
          *mine = malloc(NUMEL * sizeof *mine), *ref = malloc(NUMEL * sizeof *ref);
    CU_ASSERT_FATAL(g && all && mine && ref);
    for (int overlap = 0; overlap < 2; overlap++) {
        struct ct_gradsync_params p = params(1, overlap, 1);
        struct ct_gradsync gs;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, &p), 0);
        memset(all, 0, W * NUMEL * sizeof *all);
        for (int step = 1; step <= 3; step++) {
            CU_ASSERT_EQUAL(run_step(&gs, g, step, 0, overlap), 0);
            struct fb_ctx fc = {all, step};
            CU_ASSERT_EQUAL(check_bound(g, sent_feedback, &fc, 0), 0);
            CU_ASSERT_EQUAL(ranks_differing(g, NUMEL * sizeof *g), 0);
            ct_gradsync_commit(&gs);
            /* This rank's residual: exactly what its rounding dropped. */
            const float *res = ct_gradsync_residual(&gs);
            size_t bad = 0, nonzero = 0;
            for (size_t i = 0; i < NUMEL; i++) {
                float v = value(c->rank, step, i, 0) + all[(size_t)c->rank * NUMEL + i];
                float want = v - rb(v);
                bad += memcmp(&res[i], &want, sizeof want) != 0;
                nonzero += res[i] != 0;
            }
            CU_ASSERT_EQUAL(bad, 0);
            CU_ASSERT(nonzero > NUMEL / 2);
            memcpy(mine, res, NUMEL * sizeof *mine);
            gather_all(mine, all);
        }
        if (overlap == 0)
            memcpy(ref, g, NUMEL * sizeof *g);
        else
            CU_ASSERT(memcmp(ref, g, NUMEL * sizeof *g) == 0);
        ct_gradsync_free(&gs);
    }
    free(g);
    free(all);
    free(mine);
    free(ref);
}

/* ---------------------------------------------------------------- trainer */

static void small_config(struct ct_config *cfg)
{
    ct_test_mlp_config(cfg, "test_gradcompress");
    cfg->train.epochs = 1;
    cfg->train.seed = 11;
    cfg->train.max_steps = 12;
    cfg->train.eval_batch = 1000;
    cfg->dist.grad_compress = CT_GRAD_COMPRESS_BF16;
    cfg->dist.grad_compress_feedback = 1;
    cfg->checkpoint.every_steps = 6;
    cfg->checkpoint.every_epochs = 0;
    cfg->checkpoint.keep_last = 0;
}

static void test_trainer_resume(void)
{
    static struct ct_config cfg;
    small_config(&cfg);
    char dir[256], a[300], b[300], ck[400];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(ck, sizeof ck, "%s/ckpt-6", a);

    static struct ct_trainer tr;
    struct ct_train_summary whole, resumed;
    CU_ASSERT_EQUAL_FATAL(ct_test_train(&tr, &cfg, &g_comm, a, NULL, &whole), 0);
    CU_ASSERT_EQUAL(whole.steps, 12);
    ct_trainer_free(&tr);

    /* The same N from step 6: the residuals are this rank's sections. */
    int rc = ct_trainer_init(&tr, &cfg, &g_comm, b, ck);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const float *res = ct_gradsync_residual(&tr.st.gs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(res);
    static struct ct_ckpt opened;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&opened, ck), 0);
    const struct ct_layout *lay = tr.s.model.grads.layout;
    size_t bad = 0, nonzero = 0;
    for (int v = 0; v < lay->n; v++) {
        char name[160];
        snprintf(name, sizeof name, "grad_residual/rank%d/%s", g_comm.rank, lay->views[v].name);
        size_t n = lay->views[v].numel;
        float *want = malloc(n * sizeof *want);
        CU_ASSERT_FATAL(want != NULL);
        CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&opened, name, CT_DTYPE_F32, lay->views[v].ndim,
                                            lay->views[v].shape, want), 0);
        const float *got = res + lay->views[v].offset;
        bad += memcmp(got, want, n * sizeof *want) != 0;
        for (size_t i = 0; i < n; i++)
            nonzero += got[i] != 0;
        free(want);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(nonzero > 0);
    /* Recorded: the manifest's config says bf16 with feedback. */
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_ckpt_config_text(&opened), "grad_compress = bf16"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_ckpt_config_text(&opened), "grad_compress_feedback = true"));
    ct_ckpt_close(&opened);
    rc = ct_trainer_run(&tr, &resumed);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(resumed.steps, 12);
    CU_ASSERT_STRING_EQUAL(resumed.last.param_sha256, whole.last.param_sha256);
    ct_trainer_free(&tr);

    /* One rank resumes it: with N > 1 another world size, whose residuals
     * are dropped (zero, a recorded change); with N = 1 the same as above. */
    struct ct_comm self;
    ct_comm_init_self(&self);
    char one[400];
    snprintf(one, sizeof one, "%s/one-%d", dir, g_comm.rank);
    CU_ASSERT_EQUAL_FATAL(ct_trainer_init(&tr, &cfg, &self, one, ck), 0);
    res = ct_gradsync_residual(&tr.st.gs);
    nonzero = 0;
    for (size_t i = 0; i < tr.s.model.grads.numel; i++)
        nonzero += res[i] != 0;
    int dropped = 0;
    for (int i = 0; i < tr.n_changes; i++)
        dropped += strstr(tr.changes[i], "residuals of") != NULL;
    if (g_comm.world > 1) {
        CU_ASSERT_EQUAL(nonzero, 0);
        CU_ASSERT_EQUAL(dropped, 1);
    } else {
        CU_ASSERT(nonzero > 0);
        CU_ASSERT_EQUAL(dropped, 0);
    }
    struct ct_train_summary s1;
    CU_ASSERT_EQUAL(ct_trainer_run(&tr, &s1), 0);
    CU_ASSERT_EQUAL(s1.steps, 12);
    if (g_comm.world == 1)
        CU_ASSERT_STRING_EQUAL(s1.last.param_sha256, whole.last.param_sha256);
    ct_trainer_free(&tr);
    ct_comm_free(&self);

    ct_comm_barrier(&g_comm);
    if (g_comm.rank == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/run.json", a);
        size_t len = 0;
        uint8_t *text = ct_test_read_file(path, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        CU_ASSERT_PTR_NOT_NULL(strstr((char *)text, "\"grad_compress\": \"bf16\""));
        CU_ASSERT_PTR_NOT_NULL(strstr((char *)text, "\"grad_compress_feedback\": \"true\""));
        free(text);
        ct_test_rmtree(dir);
    }
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"bf16 allreduce: exact sums of rounded values", test_comm_bf16_exact},
        {"gradsync bf16: bound, every rank, overlap == blocking", test_gradsync_sums},
        {"gradsync bf16: error feedback residuals", test_gradsync_feedback},
        {"trainer bf16 + feedback: resume bit-exact, another N drops residuals",
         test_trainer_resume},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "gradcompress", cases);
}
