/* ZeRO-1's collective pieces under real mpirun (1, 2 and 4 ranks):
 * - the communicator's reduce-scatter (fp32, int32, int64; in place or not; blocking and
 *   not; ranks with nothing to receive), in-place all-gather and gather of
 *   varying counts;
 * - gradsync with a shard plan (parallel/shard.h): every rank's slice holds
 *   the exact sum of its elements, for buckets from one per module to one
 *   for all, overlapped and blocking (the same bits), fp32 and bf16 (whose
 *   values are chosen so that every partial sum is exact in bf16), the
 *   sums in place at the slice's own elements of the gradient buffer;
 * - the checkpoint writer's sharded sections: a checkpoint whose optimizer
 *   sections are written as every rank's slice (spread over several ranks,
 *   held whole by one, held by none) has the same data.bin, byte for byte,
 *   and the same section digests as one written from whole copies, with
 *   one write call per rank or many (a tiny chunk); each rank reads its
 *   slice back with ct_ckpt_read_tensor_part; parts that do not tile a
 *   section are refused on every rank, naming it. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/bf16.h"
#include "core/error.h"
#include "ct_mpi_test.h"
#include "parallel/gradsync.h"
#include "parallel/shard.h"

extern uint64_t ct__ckpt_write_chunk;
extern uint64_t ct__ckpt_spread_window;

static const struct ct_grad_span g_spans[] = {{0, 1000}, {1000, 5000}, {5008, 40000}, {40000, 40010}};
enum { N_MODULES = 4, NUMEL = 40016 };

/* Rank r's gradient i: an integer times a power of two that depends on i
 * only, |k| <= 8, so that sums over up to 4 ranks are exact in fp32 and
 * in bf16. */
static float grad_value(int rank, int step, size_t i)
{
    int k = (int)((i * 2654435761u + (size_t)rank * 40503u + (size_t)step * 9973u) % 17) - 8;
    return ldexpf((float)k, (int)(i % 13) - 6);
}

/* ---------------------------------------------------------------- comm */

static void test_comm_vectors(void)
{
    struct ct_comm *c = &g_comm;
    const int W = c->world, R = c->rank;
    /* Rank r receives r + 1 elements, except rank 1 none. */
    int counts[8], displs[8], total = 0;
    for (int r = 0; r < W; r++) {
        counts[r] = r == 1 ? 0 : r + 1;
        displs[r] = total;
        total += counts[r];
    }
    float *f = malloc((size_t)total * sizeof *f), out[8] = {0};
    int64_t *l = malloc((size_t)total * sizeof *l), lout[8] = {0};
    int32_t *s = malloc((size_t)total * sizeof *s), sout[8] = {0};
    for (int i = 0; i < total; i++) {
        f[i] = (float)(i * (R + 1));
        l[i] = ((int64_t)1 << 40) * i + R;
        s[i] = i - R;
    }
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, f, out, counts, CT_ELEM_F32, CT_REDUCE_SUM, NULL), 0);
    struct ct_request req = {0};
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, l, lout, counts, CT_ELEM_I64, CT_REDUCE_SUM, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, s, sout, counts, CT_ELEM_I32, CT_REDUCE_MAX, NULL), 0);
    const int64_t rsum = (int64_t)W * (W - 1) / 2;
    for (int j = 0; j < counts[R]; j++) {
        const int i = displs[R] + j;
        CU_ASSERT_EQUAL(out[j], (float)i * (float)(W * (W + 1) / 2));
        CU_ASSERT_EQUAL(lout[j], ((int64_t)1 << 40) * i * W + rsum);
        CU_ASSERT_EQUAL(sout[j], i); /* the max of i - r is rank 0's */
    }
    /* In place: rank r's sums land at the start of the buffer. */
    for (int i = 0; i < total; i++) {
        f[i] = (float)(i * (R + 1));
        l[i] = ((int64_t)1 << 40) * i + R;
    }
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, NULL, f, counts, CT_ELEM_F32, CT_REDUCE_SUM, NULL), 0);
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, NULL, l, counts, CT_ELEM_I64, CT_REDUCE_SUM, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
    for (int j = 0; j < counts[R]; j++) {
        const int i = displs[R] + j;
        CU_ASSERT_EQUAL(f[j], (float)i * (float)(W * (W + 1) / 2));
        CU_ASSERT_EQUAL(l[j], ((int64_t)1 << 40) * i * W + rsum);
    }
    /* A byte sum is no reduction. */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_comm_reduce_scatter(c, f, out, counts, CT_ELEM_BYTE, CT_REDUCE_SUM, NULL),
                    CT_EINVAL);

    /* All-gather in place: every rank ends with every rank's part. */
    for (int i = 0; i < total; i++)
        f[i] = i >= displs[R] && i < displs[R] + counts[R] ? (float)(100 * R + i) : -1.0f;
    CU_ASSERT_EQUAL(ct_comm_allgatherv(c, NULL, f, counts, displs, CT_ELEM_F32, &req), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
    for (int r = 0, bad = 0; r < W; r++) {
        for (int j = 0; j < counts[r]; j++)
            bad += f[displs[r] + j] != (float)(100 * r + displs[r] + j);
        CU_ASSERT_EQUAL(bad, 0);
    }
    /* From a send buffer (blocking and not): every rank's part lands in
     * every buffer, this rank's own place included. */
    for (int nb = 0; nb < 2; nb++) {
        float part[8];
        for (int j = 0; j < counts[R]; j++)
            part[j] = (float)(1000 * (nb + 1) + 10 * R + j);
        for (int i = 0; i < total; i++)
            f[i] = -1.0f;
        CU_ASSERT_EQUAL(ct_comm_allgatherv(c, part, f, counts, displs, CT_ELEM_F32,
                                           nb ? &req : NULL), 0);
        if (nb)
            CU_ASSERT_EQUAL(ct_comm_wait(c, &req), 0);
        for (int r = 0, bad = 0; r < W; r++) {
            for (int j = 0; j < counts[r]; j++)
                bad += f[displs[r] + j] != (float)(1000 * (nb + 1) + 10 * r + j);
            CU_ASSERT_EQUAL(bad, 0);
        }
    }
    /* Gather to rank 0 of varying byte counts. */
    uint8_t mine[8], all[64];
    memset(all, 0xee, sizeof all);
    for (int j = 0; j < counts[R]; j++)
        mine[j] = (uint8_t)(10 * R + j);
    CU_ASSERT_EQUAL(ct_comm_gatherv(c, mine, counts[R], all, counts, displs, CT_ELEM_BYTE, 0), 0);
    if (R == 0)
        for (int r = 0; r < W; r++)
            for (int j = 0; j < counts[r]; j++)
                CU_ASSERT_EQUAL(all[displs[r] + j], 10 * r + j);
    free(f);
    free(l);
    free(s);
}

/* ---------------------------------------------------------------- gradsync */

/* One step of gradsync over shard plan sh: the slice's own elements of
 * the gradient buffer must hold the exact sum; returns a copy of them in
 * out (sh->slice floats). */
static void sharded_step(const struct ct_gradsync_params *p, const struct ct_shard *sh, int step,
                         float *out)
{
    struct ct_comm *c = &g_comm;
    float *g = malloc(NUMEL * sizeof *g);
    for (size_t i = 0; i < NUMEL; i++)
        g[i] = grad_value(c->rank, step, i);
    struct ct_gradsync gs;
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, p), 0);
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_shard(&gs, sh), 0);
    int64_t side = 0;
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, c->rank), 0);
    for (int m = N_MODULES - 1; m >= 0; m--)
        ct_gradsync_hook(&gs, m);
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, &side), 0);
    CU_ASSERT_EQUAL(side, c->world - 1);
    int bad = 0;
    for (size_t i = sh->lo; i < sh->hi; i++) {
        float want = 0.0f;
        for (int r = 0; r < c->world; r++)
            want += grad_value(r, step, i);
        bad += g[i] != want;
    }
    CU_ASSERT_EQUAL(bad, 0);
    memcpy(out, g + sh->lo, (sh->hi - sh->lo) * sizeof *out);
    ct_gradsync_free(&gs);
    free(g);
}

static void test_gradsync_sharded(void)
{
    struct ct_comm *c = &g_comm;
    struct ct_shard sh;
    CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, NUMEL, c->world, c->rank), 0);
    float *a = malloc(sh.slice * sizeof *a), *b = malloc(sh.slice * sizeof *b);
    const size_t caps[] = {0, 4096, (size_t)64 << 10, (size_t)1 << 30};
    for (int compress = 0; compress < 2; compress++)
        for (size_t k = 0; k < sizeof caps / sizeof *caps; k++) {
            struct ct_gradsync_params p = ct_gradsync_default_params();
            p.bucket_bytes = caps[k] ? caps[k] : 4;
            p.first_bucket_bytes = caps[k];
            p.compress = compress ? CT_GRAD_COMPRESS_BF16 : CT_GRAD_COMPRESS_NONE;
            p.overlap = 1;
            sharded_step(&p, &sh, (int)k, a);
            p.overlap = 0;
            sharded_step(&p, &sh, (int)k, b);
            CU_ASSERT_EQUAL(memcmp(a, b, (sh.hi - sh.lo) * sizeof *a), 0);
        }
    /* A plan of another size is refused. */
    struct ct_shard other;
    CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&other, NUMEL - 1, c->world, c->rank), 0);
    struct ct_gradsync gs;
    float *g = calloc(NUMEL, sizeof *g);
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, NULL), 0);
    CU_ASSERT_EQUAL(ct_gradsync_shard(&gs, &other), CT_EINVAL);
    ct_gradsync_free(&gs);
    ct_shard_free(&other);
    ct_shard_free(&sh);
    free(g);
    free(a);
    free(b);
}

/* ---------------------------------------------------------------- checkpoints */

/* A flat "parameter" space of two views, a (1000) at 0 and b (10) at 1008,
 * numel 1018, and two state buffers m and v over it. */
enum { NV = 2, FLAT = 1018 };
static const size_t g_view_off[NV] = {0, 1008}, g_view_n[NV] = {1000, 10};
static const char *const g_view_name[NV] = {"a", "b"};

static float state_value(int buf, size_t i) { return (float)(buf * 100000 + (int)i) * 0.25f; }

/* The sections: params/a, params/b replicated; optim/m/..., optim/v/... either
 * whole copies (sharded = 0) or this rank's slice of them; then a
 * replicated scalar-like tensor. */
static int write_ckpt(const char *dir, int sharded, const struct ct_shard *sh,
                      float whole[2][FLAT], float *slices[2])
{
    struct ct_ckpt_tensor t[2 + 2 * NV + 1];
    int n = 0;
    memset(t, 0, sizeof t);
    for (int v = 0; v < NV; v++) {
        struct ct_ckpt_tensor *x = &t[n++];
        snprintf(x->name, sizeof x->name, "params/%s", g_view_name[v]);
        x->dtype = CT_DTYPE_F32;
        x->ndim = 1;
        x->shape[0] = (int64_t)g_view_n[v];
        x->data = whole[0] + g_view_off[v];
    }
    for (int buf = 0; buf < 2; buf++)
        for (int v = 0; v < NV; v++) {
            struct ct_ckpt_tensor *x = &t[n++];
            snprintf(x->name, sizeof x->name, "optim/%s/%s", buf ? "v" : "m", g_view_name[v]);
            x->dtype = CT_DTYPE_F32;
            x->ndim = 1;
            x->shape[0] = (int64_t)g_view_n[v];
            if (!sharded) {
                x->data = whole[buf] + g_view_off[v];
                continue;
            }
            size_t a = g_view_off[v] > sh->lo ? g_view_off[v] : sh->lo;
            size_t b = g_view_off[v] + g_view_n[v] < sh->hi ? g_view_off[v] + g_view_n[v] : sh->hi;
            x->sharded = 1;
            if (b > a) {
                x->part_begin = (a - g_view_off[v]) * sizeof(float);
                x->part_end = (b - g_view_off[v]) * sizeof(float);
                x->data = slices[buf] + (a - sh->lo);
            }
        }
    static const float tail[3] = {1, 2, 3};
    struct ct_ckpt_tensor *x = &t[n++];
    snprintf(x->name, sizeof x->name, "sampler/state");
    x->dtype = CT_DTYPE_F32;
    x->ndim = 1;
    x->shape[0] = 3;
    x->data = tail;
    uint8_t rec[16] = {(uint8_t)g_comm.rank};
    struct ct_ckpt_content c = {.step = 5, .config_text = "[x]\n", .code_version = "t",
                                .tensors = t, .n_tensors = n, .record = rec, .record_len = 16};
    struct ct_ckpt_write_params wp = {.run_dir = dir};
    uint8_t digest[CT_SHA256_LEN];
    return ct_ckpt_write(&g_comm, &wp, &c, digest, NULL, 0);
}

static void shared_dir(char *out, size_t n, const char *leaf)
{
    memset(out, 0, n);
    if (g_comm.rank == 0)
        snprintf(out, n, "%s/%s", ct_test_tmpdir(), leaf);
    ct_comm_bcast(&g_comm, out, n, 0);
}

static void test_ckpt_sharded_sections(void)
{
    struct ct_comm *c = &g_comm;
    struct ct_shard sh;
    CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, FLAT, c->world, c->rank), 0);
    static float whole[2][FLAT];
    float *slices[2];
    for (int buf = 0; buf < 2; buf++) {
        for (size_t i = 0; i < FLAT; i++)
            whole[buf][i] = state_value(buf, i);
        slices[buf] = calloc(sh.slice ? sh.slice : 1, sizeof(float));
        memcpy(slices[buf], whole[buf] + sh.lo, (sh.hi - sh.lo) * sizeof(float));
    }
    char ref[512], one[512], many[512];
    shared_dir(ref, sizeof ref, "whole");
    shared_dir(one, sizeof one, "sharded");
    shared_dir(many, sizeof many, "sharded-chunks");
    CU_ASSERT_EQUAL(write_ckpt(ref, 0, &sh, whole, slices), 0);
    CU_ASSERT_EQUAL(write_ckpt(one, 1, &sh, whole, slices), 0);
    uint64_t saved = ct__ckpt_write_chunk, saved_window = ct__ckpt_spread_window;
    ct__ckpt_write_chunk = 100; /* many rounds, ranks with different counts */
    ct__ckpt_spread_window = 1000; /* the digests hashed through windows across the parts */
    CU_ASSERT_EQUAL(write_ckpt(many, 1, &sh, whole, slices), 0);
    ct__ckpt_write_chunk = saved;
    ct__ckpt_spread_window = saved_window;

    /* Every rank opens all three: the same data.bin bytes. */
    struct ct_ckpt a, b, d;
    char pa[600], pb[600], pd[600];
    snprintf(pa, sizeof pa, "%s/ckpt-5", ref);
    snprintf(pb, sizeof pb, "%s/ckpt-5", one);
    snprintf(pd, sizeof pd, "%s/ckpt-5", many);
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&a, pa), 0);
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&b, pb), 0);
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&d, pd), 0);
    CU_ASSERT_EQUAL(a.data_size, b.data_size);
    CU_ASSERT_EQUAL(a.data_size, d.data_size);
    CU_ASSERT(memcmp(a.data, b.data, a.data_size) == 0 && memcmp(a.data, d.data, a.data_size) == 0);
    /* The manifests differ in nothing but time; their digests of sections
     * are the same (ct_ckpt_open verified each against the bytes). */

    /* Each rank's slice read back by range, from the sharded write. */
    for (int buf = 0; buf < 2; buf++) {
        float *got = calloc(sh.slice ? sh.slice : 1, sizeof *got);
        for (int v = 0; v < NV; v++) {
            size_t lo = g_view_off[v] > sh.lo ? g_view_off[v] : sh.lo;
            size_t hi = g_view_off[v] + g_view_n[v] < sh.hi ? g_view_off[v] + g_view_n[v] : sh.hi;
            if (hi <= lo)
                continue;
            char name[64];
            snprintf(name, sizeof name, "optim/%s/%s", buf ? "v" : "m", g_view_name[v]);
            const int64_t shape[1] = {(int64_t)g_view_n[v]};
            CU_ASSERT_EQUAL(ct_ckpt_read_tensor_part(&b, name, CT_DTYPE_F32, 1, shape,
                                                     (lo - g_view_off[v]) * 4,
                                                     (hi - g_view_off[v]) * 4, got + (lo - sh.lo)),
                            0);
        }
        for (size_t i = sh.lo; i < sh.hi; i++)
            if (i < 1000 || i >= 1008)
                CU_ASSERT_EQUAL(got[i - sh.lo], whole[buf][i]);
        free(got);
    }
    const int64_t shape_a[1] = {1000};
    float tmp[8];
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor_part(&b, "optim/m/a", CT_DTYPE_F32, 1, shape_a, 3996, 4004, tmp),
                    CT_EINVAL);
    ct_ckpt_close(&a);
    ct_ckpt_close(&b);
    ct_ckpt_close(&d);

    /* Parts that leave a gap (the last rank claims nothing of section a
     * at N > 1; at N = 1, rank 0 claims one byte short) are refused on
     * every rank with the section's name. */
    if (c->world > 1 && c->rank == c->world - 1 && sh.hi > sh.lo)
        sh.lo = sh.hi = 0;
    else if (c->world == 1)
        sh.hi -= 1;
    char bad[512];
    shared_dir(bad, sizeof bad, "gap");
    ct_error_clear();
    int rc = write_ckpt(bad, 1, &sh, whole, slices);
    CU_ASSERT_EQUAL(rc, CT_EINVAL);
    if (c->rank == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "optim/m/"));
    ct_comm_barrier(c);
    if (c->rank == 0)
        ct_test_rmtree(ct_test_tmpdir());
    ct_shard_free(&sh);
    free(slices[0]);
    free(slices[1]);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"reduce-scatter, all-gather, gather of varying counts", test_comm_vectors},
        {"gradsync sharded: exact slice sums, overlap == blocking, fp32 and bf16",
         test_gradsync_sharded},
        {"checkpoint: sharded sections = whole copies, byte for byte; parts read back; gaps refused",
         test_ckpt_sharded_sections},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "zero", cases);
}
