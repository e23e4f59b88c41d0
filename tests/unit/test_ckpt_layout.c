/* The data.bin layout planner (src/ckpt/layout-impl.h) without MPI: the
 * plans of ranks 0..N-1 built side by side from synthetic tensor lists
 * (odd sizes, empty and 0-d tensors, replicated and sharded sections, the
 * sharded ones cut as ZeRO cuts its flat state buffers), for N = 1..8.
 *
 * Each plan is checked against properties computed here, not by the
 * planner's own arithmetic: sections 64-byte aligned and in order; every
 * rank computes the same offsets, runs and hashing owners; each rank's
 * range of a run is covered exactly by its own pieces, and the ranks'
 * ranges partition the tensor region, so that writing every rank's ranges
 * from its own pieces into one image yields each byte exactly once and the
 * image equals the replicated file; replicated shares start on 4 KiB
 * boundaries; the write rounds cover each range; every section is hashed by
 * exactly one rank that holds all of it (or gathered to rank 0); the
 * records follow back to back. The collective side (the parts gathered,
 * MPI-IO) is tested under mpirun in tests/mpi/test_ckpt.c and test_zero.c. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/layout-impl.h"
#include "core/error.h"
#include "ct_test.h"

#define MAXW 8
#define MAXN 40

/* One section of a synthetic list; a sharded one belongs to `group` (the
 * consecutive sections of one flat state buffer, cut over the ranks). */
struct spec {
    enum ct_dtype dtype;
    int ndim;
    int64_t shape[4];
    int sharded;
    int group;
};

/* Source bytes: section i's content is g_src + 7 * i (any distinct bytes). */
static uint8_t g_src[1 << 20];

static void fill_src(void)
{
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof g_src; i++) {
        x = x * 1664525u + 1013904223u;
        g_src[i] = (uint8_t)(x >> 24);
    }
}

static const uint8_t *src_of(int i) { return g_src + 7 * (size_t)i; }

static uint64_t bytes_of(const struct spec *s)
{
    uint64_t b = ct_dtype_size(s->dtype);
    for (int k = 0; k < s->ndim; k++)
        b *= (uint64_t)s->shape[k];
    return b;
}

/* The plans of ranks 0..world-1, side by side. */
struct side {
    int world, n;
    struct ct_ckpt_tensor t[MAXW][MAXN];
    struct ct__ckpt_layout L[MAXW];
    int owner[MAXW][MAXN];
};

/* Cut each group's concatenated bytes at `cuts` (world + 1 points: rank r
 * holds [cut[r], cut[r+1]) of the group), as ZeRO shards a flat buffer.
 * policy 0: even; 1: all to the last rank; 2: pseudo-random, some ranks
 * empty. */
static void cut_groups(const struct spec *sp, int n, int world, int policy, uint32_t seed,
                       uint64_t parts[MAXW][MAXN][2])
{
    memset(parts, 0, sizeof(uint64_t) * MAXW * MAXN * 2);
    for (int i0 = 0; i0 < n;) {
        if (!sp[i0].sharded) {
            i0++;
            continue;
        }
        int i1 = i0;
        uint64_t total = 0;
        while (i1 < n && sp[i1].sharded && sp[i1].group == sp[i0].group)
            total += bytes_of(&sp[i1++]);
        uint64_t cut[MAXW + 1];
        cut[0] = 0;
        cut[world] = total;
        for (int r = 1; r < world; r++) {
            if (policy == 0)
                cut[r] = total * (uint64_t)r / (uint64_t)world;
            else if (policy == 1)
                cut[r] = 0;
            else {
                seed = seed * 1103515245u + 12345u;
                cut[r] = (seed >> 8) % 3 == 0 ? cut[r - 1] : cut[r - 1] + (seed >> 4) % (total + 1);
                cut[r] = cut[r] > total ? total : cut[r];
            }
        }
        uint64_t base = 0;
        for (int i = i0; i < i1; i++) {
            uint64_t len = bytes_of(&sp[i]);
            for (int r = 0; r < world; r++) {
                uint64_t a = cut[r] > base ? cut[r] - base : 0, b = cut[r + 1] - base;
                a = a > len ? len : a;
                b = cut[r + 1] < base ? 0 : b > len ? len : b;
                parts[r][i][0] = a < b ? a : 0;
                parts[r][i][1] = a < b ? b : 0;
            }
            base += len;
        }
        i0 = i1;
    }
}

/* Build every rank's plan as the writer does, the gather of the parts
 * replaced by filling the table from every rank's list. */
static void build(struct side *S, const struct spec *sp, int n, int world, int policy,
                  uint32_t seed)
{
    static uint64_t parts[MAXW][MAXN][2];
    memset(S, 0, sizeof *S);
    S->world = world;
    S->n = n;
    cut_groups(sp, n, world, policy, seed, parts);
    int any = 0;
    for (int r = 0; r < world; r++)
        for (int i = 0; i < n; i++) {
            struct ct_ckpt_tensor *t = &S->t[r][i];
            snprintf(t->name, sizeof t->name, "section.%d", i);
            t->dtype = sp[i].dtype;
            t->ndim = sp[i].ndim;
            memcpy(t->shape, sp[i].shape, sizeof t->shape);
            t->sharded = sp[i].sharded;
            any |= t->sharded;
            t->part_begin = parts[r][i][0];
            t->part_end = parts[r][i][1];
            t->data = src_of(i) + (t->sharded ? t->part_begin : 0);
        }
    for (int r = 0; r < world; r++) {
        struct ct__ckpt_layout *L = &S->L[r];
        CU_ASSERT_EQUAL_FATAL(ct__ckpt_layout_tensors(L, S->t[r], n), 0);
        if (any) {
            L->parts = calloc(2 * (size_t)n * (size_t)world, sizeof *L->parts);
            CU_ASSERT_PTR_NOT_NULL_FATAL(L->parts);
            for (int q = 0; q < world; q++)
                ct__ckpt_layout_my_parts(S->t[q], n, &L->parts[2 * (size_t)n * (size_t)q]);
            CU_ASSERT_EQUAL(ct__ckpt_layout_check_parts(L, S->t[r], world), 0);
        }
        ct__ckpt_plan_runs(L, S->t[r], world);
        CU_ASSERT_EQUAL(ct__ckpt_hash_owners(L, S->t[r], world, S->owner[r]), 0);
        L->rec = calloc((size_t)world, sizeof *L->rec);
        L->rec_off = calloc((size_t)world, sizeof *L->rec_off);
        CU_ASSERT_PTR_NOT_NULL_FATAL(L->rec);
        CU_ASSERT_PTR_NOT_NULL_FATAL(L->rec_off);
        for (int q = 0; q < world; q++)
            L->rec[q].len = (uint64_t)q * 41; /* rank 0's empty */
        ct__ckpt_layout_place_records(L, world);
    }
}

static void side_free(struct side *S)
{
    for (int r = 0; r < S->world; r++)
        ct__ckpt_layout_free(&S->L[r]);
}

static int same_run(const struct ct__ckpt_run *a, const struct ct__ckpt_run *b)
{
    return a->first == b->first && a->last == b->last && a->sharded == b->sharded &&
           a->lo == b->lo && a->hi == b->hi;
}

/* Offsets, lengths, runs, owners and record offsets the same on every rank. */
static int check_same_plan(const struct side *S)
{
    int bad = 0;
    const struct ct__ckpt_layout *A = &S->L[0];
    for (int r = 1; r < S->world; r++) {
        const struct ct__ckpt_layout *B = &S->L[r];
        bad += A->n != B->n || A->tensor_end != B->tensor_end || A->n_runs != B->n_runs ||
               A->data_size != B->data_size;
        bad += memcmp(A->off, B->off, ((size_t)A->n + 1) * sizeof *A->off) != 0;
        bad += memcmp(A->len, B->len, (size_t)A->n * sizeof *A->len) != 0;
        for (int k = 0; k < A->n_runs && k < B->n_runs; k++)
            bad += !same_run(&A->runs[k], &B->runs[k]);
        bad += memcmp(A->rec_off, B->rec_off, (size_t)S->world * sizeof *A->rec_off) != 0;
        bad += memcmp(S->owner[0], S->owner[r], (size_t)S->n * sizeof(int)) != 0;
        bad += ct__ckpt_layout_fingerprint(S->t[0], S->n) != ct__ckpt_layout_fingerprint(S->t[r], S->n);
    }
    if (bad)
        fprintf(stderr, "\n    world %d: the ranks' plans differ\n", S->world);
    return bad;
}

/* Sections aligned, in order, of their dtype's size; runs tile the region. */
static int check_offsets(const struct side *S, const struct spec *sp)
{
    const struct ct__ckpt_layout *L = &S->L[0];
    int bad = 0;
    for (int i = 0; i < S->n; i++) {
        bad += L->off[i] % CT__CKPT_ALIGN != 0 || L->len[i] != bytes_of(&sp[i]);
        bad += L->off[i] + L->len[i] > L->off[i + 1] || L->off[i + 1] - (L->off[i] + L->len[i]) >= 64;
    }
    bad += L->off[S->n] != L->tensor_end || L->tensor_end % CT__CKPT_ALIGN != 0;
    uint64_t at = 0;
    int next = 0;
    for (int k = 0; k < L->n_runs; k++) {
        const struct ct__ckpt_run *u = &L->runs[k];
        bad += u->first != next || u->last < u->first || u->lo != at || u->lo != L->off[u->first] ||
               u->hi != L->off[u->last + 1];
        for (int i = u->first; i <= u->last; i++)
            bad += !!sp[i].sharded != u->sharded;
        at = u->hi;
        next = u->last + 1;
    }
    bad += next != S->n || at != L->tensor_end;
    if (bad)
        fprintf(stderr, "\n    world %d: %d offset or run errors\n", S->world, bad);
    return bad;
}

/* Every rank writes its range of every run, in rounds of `chunk`, from its
 * own pieces into one image: each byte of the tensor region written
 * exactly once, each range covered by the writer's pieces alone, and the
 * image the replicated file (sections, zero pads). */
static int check_image(const struct side *S, uint64_t chunk)
{
    const uint64_t size = S->L[0].tensor_end;
    uint8_t *img = calloc(size + 1, 1), *want = calloc(size + 1, 1);
    uint8_t *count = calloc(size + 1, 1);
    CU_ASSERT_FATAL(img && want && count);
    for (int i = 0; i < S->n; i++)
        memcpy(want + S->L[0].off[i], src_of(i), S->L[0].len[i]);
    int bad = 0;
    for (int k = 0; k < S->L[0].n_runs; k++) {
        uint64_t rounds = ct__ckpt_rounds_of(&S->L[0], k, S->world, chunk), prev_hi = S->L[0].runs[k].lo;
        for (int r = 0; r < S->world; r++) {
            const struct ct__ckpt_layout *L = &S->L[r];
            uint64_t lo, hi, mine = 0;
            ct__ckpt_range_of(L, k, r, S->world, &lo, &hi);
            bad += hi < lo || ct__ckpt_rounds_of(L, k, S->world, chunk) != rounds;
            bad += rounds * chunk < hi - lo; /* the rounds reach the end of the range */
            if (lo < hi) { /* in rank order, each where the one before ended */
                bad += lo != prev_hi;
                prev_hi = hi;
            }
            if (!L->runs[k].sharded && lo < hi)
                bad += (lo - L->runs[k].lo) % CT__CKPT_SHARE_ALIGN != 0;
            for (int p = 0; p < L->n_pieces; p++) {
                const struct ct__ckpt_piece *pc = &L->pieces[p];
                uint64_t a = pc->off > lo ? pc->off : lo, b = pc->off + pc->len < hi ? pc->off + pc->len : hi;
                for (uint64_t x = a; x < b; x++) {
                    img[x] = pc->p[x - pc->off];
                    count[x]++;
                    mine++;
                }
            }
            bad += mine != hi - lo; /* the range is this rank's bytes and nothing else */
        }
        bad += prev_hi != S->L[0].runs[k].hi;
    }
    for (uint64_t x = 0; x < size; x++)
        bad += count[x] != 1 || img[x] != want[x];
    if (bad)
        fprintf(stderr, "\n    world %d: %d errors writing the image of %" PRIu64 " bytes\n",
                S->world, bad, size);
    free(img);
    free(want);
    free(count);
    return bad;
}

/* Each section hashed by one rank holding all of it, or gathered (-1) when
 * several hold parts; replicated ones over ranks by load. */
static int check_owners(const struct side *S)
{
    int bad = 0;
    const struct ct__ckpt_layout *L = &S->L[0];
    uint64_t load[MAXW] = {0}, most = 0;
    for (int i = 0; i < S->n; i++) {
        const int o = S->owner[0][i];
        if (!S->t[0][i].sharded) {
            bad += o < 0 || o >= S->world;
            if (o >= 0 && o < S->world)
                load[o] += L->len[i] + 1;
            most = L->len[i] + 1 > most ? L->len[i] + 1 : most;
            continue;
        }
        int holders = 0, holder = 0;
        for (int r = 0; r < S->world; r++)
            if (S->t[r][i].part_end > S->t[r][i].part_begin) {
                holders++;
                holder = r;
            }
        if (holders > 1)
            bad += o != -1;
        else if (holders == 1) /* the owner hashes its data, len bytes: all of it */
            bad += o != holder || S->t[o][i].part_begin != 0 || S->t[o][i].part_end != L->len[i];
        else
            bad += o != 0;
    }
    /* Greedy, largest first: no rank carries more than the least loaded
     * one plus the largest section. */
    for (int r = 0; r < S->world; r++)
        for (int q = 0; q < S->world; q++)
            bad += load[r] > load[q] + most;
    if (bad)
        fprintf(stderr, "\n    world %d: %d hashing owner errors\n", S->world, bad);
    return bad;
}

/* The records back to back after the tensor region, in rank order. */
static int check_records(const struct side *S)
{
    const struct ct__ckpt_layout *L = &S->L[0];
    uint64_t at = L->tensor_end;
    int bad = 0;
    for (int r = 0; r < S->world; r++) {
        bad += L->rec_off[r] != at;
        at += L->rec[r].len;
    }
    return bad + (L->data_size != at);
}

static int check_all(const struct spec *sp, int n, int world, int policy, uint32_t seed,
                     uint64_t chunk)
{
    static struct side S;
    build(&S, sp, n, world, policy, seed);
    int bad = check_same_plan(&S) + check_offsets(&S, sp) + check_image(&S, chunk) +
              check_owners(&S) + check_records(&S);
    side_free(&S);
    return bad;
}

/* A model's parameters (replicated), then two optimizer state buffers
 * (sharded, two groups), then more replicated state. */
static const struct spec g_mixed[] = {
    {CT_DTYPE_F32, 2, {3, 5}, 0, 0},    {CT_DTYPE_U8, 1, {37}, 0, 0},
    {CT_DTYPE_F32, 2, {300, 101}, 0, 0}, {CT_DTYPE_F32, 2, {0, 4}, 0, 0},
    {CT_DTYPE_F64, 1, {7}, 0, 0},       {CT_DTYPE_I64, 0, {0}, 0, 0},
    {CT_DTYPE_F32, 2, {3, 5}, 1, 1},    {CT_DTYPE_F32, 1, {37}, 1, 1},
    {CT_DTYPE_F32, 2, {300, 101}, 1, 1}, {CT_DTYPE_F32, 1, {0}, 1, 1},
    {CT_DTYPE_F32, 2, {3, 5}, 1, 2},    {CT_DTYPE_F32, 1, {37}, 1, 2},
    {CT_DTYPE_F32, 2, {300, 101}, 1, 2}, {CT_DTYPE_F32, 1, {0}, 1, 2},
    {CT_DTYPE_I64, 1, {3}, 0, 0},       {CT_DTYPE_U8, 1, {4097}, 0, 0},
};
#define N_MIXED ((int)(sizeof g_mixed / sizeof *g_mixed))

/* Exact offsets of a small hand-made list. */
static void test_offsets_by_hand(void)
{
    static const struct spec sp[] = {
        {CT_DTYPE_F32, 2, {3, 5}, 0, 0}, /* 60 bytes at 0, pad to 64 */
        {CT_DTYPE_U8, 1, {37}, 0, 0},    /* 37 at 64, pad to 128 */
        {CT_DTYPE_F32, 2, {0, 4}, 0, 0}, /* empty, at 128 */
        {CT_DTYPE_F64, 1, {8}, 0, 0},    /* 64 at 128, no pad */
        {CT_DTYPE_I64, 0, {0}, 0, 0},    /* a scalar: 8 at 192 */
    };
    static const uint64_t off[] = {0, 64, 128, 128, 192, 256};
    static struct side S;
    build(&S, sp, 5, 3, 0, 0);
    const struct ct__ckpt_layout *L = &S.L[1];
    for (int i = 0; i <= 5; i++)
        CU_ASSERT_EQUAL(L->off[i], off[i]);
    CU_ASSERT_EQUAL(L->len[0], 60);
    CU_ASSERT_EQUAL(L->len[2], 0);
    CU_ASSERT_EQUAL(L->len[4], 8);
    CU_ASSERT_EQUAL(L->tensor_end, 256);
    /* Pieces: 4 sections with bytes, 3 pads (after 60, 37 and 8 bytes). */
    CU_ASSERT_EQUAL(L->n_pieces, 7);
    CU_ASSERT_EQUAL(L->n_runs, 1);
    /* 256 bytes over 3 ranks: one 4 KiB share holds them all. */
    uint64_t lo, hi;
    ct__ckpt_range_of(L, 0, 0, 3, &lo, &hi);
    CU_ASSERT(lo == 0 && hi == 256);
    ct__ckpt_range_of(L, 0, 2, 3, &lo, &hi);
    CU_ASSERT(lo == 256 && hi == 256);
    /* Records of 0, 41 and 82 bytes follow. */
    CU_ASSERT_EQUAL(L->rec_off[0], 256);
    CU_ASSERT_EQUAL(L->rec_off[1], 256);
    CU_ASSERT_EQUAL(L->rec_off[2], 297);
    CU_ASSERT_EQUAL(L->data_size, 379);
    side_free(&S);
}

/* Replicated sections only: equal 4 KiB-aligned shares, worlds 1..8. */
static void test_replicated_shares(void)
{
    for (int world = 1; world <= MAXW; world++) {
        CU_ASSERT_EQUAL(check_all(g_mixed, 6, world, 0, 0, (uint64_t)256 << 20), 0);
        CU_ASSERT_EQUAL(check_all(g_mixed, 6, world, 0, 0, 4096 + 64), 0);
        static struct side S;
        build(&S, g_mixed, 6, world, 0, 0);
        /* 121,472 bytes in one run; rank r's share starts at r * share. */
        uint64_t len = S.L[0].tensor_end, share = (len + (uint64_t)world - 1) / (uint64_t)world;
        share = (share + 4095) / 4096 * 4096;
        CU_ASSERT_EQUAL(S.L[0].n_runs, 1);
        for (int r = 0; r < world; r++) {
            uint64_t lo, hi;
            ct__ckpt_range_of(&S.L[r], 0, r, world, &lo, &hi);
            CU_ASSERT_EQUAL(lo, share * (uint64_t)r < len ? share * (uint64_t)r : len);
        }
        side_free(&S);
    }
}

/* Sharded state buffers between replicated sections, cut evenly, all to
 * one rank, and at random (some ranks empty), worlds 1..8, small rounds. */
static void test_sharded_runs(void)
{
    for (int world = 1; world <= MAXW; world++)
        for (int policy = 0; policy < 3; policy++)
            for (uint32_t seed = 1; seed <= (policy == 2 ? 20u : 1u); seed++) {
                int bad = check_all(g_mixed, N_MIXED, world, policy, seed, 1000);
                if (bad)
                    fprintf(stderr, "\n    world %d policy %d seed %u\n", world, policy, seed);
                CU_ASSERT_EQUAL(bad, 0);
            }
    /* Two state buffers cut evenly over 4 ranks: the second starts again at
     * rank 0, so it is a run of its own. */
    static struct side S;
    build(&S, g_mixed, N_MIXED, 4, 0, 0);
    CU_ASSERT_EQUAL(S.L[0].n_runs, 4);
    CU_ASSERT(S.L[0].runs[1].sharded && S.L[0].runs[1].first == 6 && S.L[0].runs[1].last == 9);
    CU_ASSERT(S.L[0].runs[2].sharded && S.L[0].runs[2].first == 10 && S.L[0].runs[2].last == 13);
    CU_ASSERT(!S.L[0].runs[3].sharded);
    side_free(&S);
}

/* Random lists: odd shapes, empty sections, replicated and sharded groups
 * in any order, worlds 1..8. */
static void test_random_lists(void)
{
    uint32_t x = 7;
#define RND(m) ((x = x * 1664525u + 1013904223u) >> 8) % (m)
    for (int trial = 0; trial < 60; trial++) {
        struct spec sp[MAXN];
        int n = 1 + (int)RND(MAXN - 1), group = 0;
        for (int i = 0; i < n; i++) {
            memset(&sp[i], 0, sizeof sp[i]);
            sp[i].dtype = (enum ct_dtype)RND(CT_DTYPE_COUNT);
            sp[i].ndim = (int)RND(4);
            for (int k = 0; k < sp[i].ndim; k++)
                sp[i].shape[k] = RND(8) == 0 ? 0 : 1 + (int64_t)RND(k == 0 ? 300 : 9);
            int prev_sharded = i > 0 && sp[i - 1].sharded;
            sp[i].sharded = (int)RND(2);
            if (sp[i].sharded)
                sp[i].group = prev_sharded && RND(3) ? group : ++group;
        }
        for (int world = 1; world <= MAXW; world++) {
            int bad = check_all(sp, n, world, 2, (uint32_t)trial + 1, 1 + RND(5000));
            if (bad)
                fprintf(stderr, "\n    trial %d world %d\n", trial, world);
            CU_ASSERT_EQUAL(bad, 0);
        }
    }
#undef RND
}

/* Greedy hashing: equal sections one per rank, largest first. */
static void test_hash_owners_exact(void)
{
    static const struct spec sp[] = {
        {CT_DTYPE_U8, 1, {100}, 0, 0}, {CT_DTYPE_U8, 1, {400}, 0, 0}, {CT_DTYPE_U8, 1, {300}, 0, 0},
        {CT_DTYPE_U8, 1, {200}, 0, 0}, {CT_DTYPE_U8, 1, {50}, 0, 0},  {CT_DTYPE_U8, 1, {0}, 1, 1},
        {CT_DTYPE_U8, 1, {90}, 1, 2},
    };
    static struct side S;
    build(&S, sp, 7, 3, 1, 0); /* sharded ones all to the last rank */
    /* By size: 400 -> 0, 300 -> 1, 200 -> 2, 100 -> 2 (load 201 < 301),
     * 50 -> 1 (301 < 401 and 302); the empty sharded section to rank 0,
     * the one held whole by rank 2 to rank 2. */
    static const int want[] = {2, 0, 1, 2, 1, 0, 2};
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(S.owner[0][i], want[i]);
    side_free(&S);
    build(&S, sp, 7, 3, 0, 0); /* cut evenly: the 90 bytes spread, gathered by rank 0 */
    CU_ASSERT_EQUAL(S.owner[0][6], -1);
    side_free(&S);
}

/* The same inputs give the same plan; the fingerprint sees names, dtypes,
 * shapes and the sharded flags, not the parts. */
static void test_deterministic(void)
{
    static struct side A, B;
    build(&A, g_mixed, N_MIXED, 5, 2, 3);
    build(&B, g_mixed, N_MIXED, 5, 2, 3);
    for (int r = 0; r < 5; r++) {
        CU_ASSERT_EQUAL(A.L[r].n_runs, B.L[r].n_runs);
        for (int k = 0; k < A.L[r].n_runs; k++)
            CU_ASSERT(same_run(&A.L[r].runs[k], &B.L[r].runs[k]));
        CU_ASSERT_EQUAL(memcmp(A.L[r].pieces, B.L[r].pieces,
                               (size_t)A.L[r].n_pieces * sizeof *A.L[r].pieces), 0);
        CU_ASSERT_EQUAL(memcmp(A.owner[r], B.owner[r], sizeof A.owner[r]), 0);
    }
    int64_t f = ct__ckpt_layout_fingerprint(A.t[0], N_MIXED);
    CU_ASSERT(f >= 0);
    CU_ASSERT_EQUAL(f, ct__ckpt_layout_fingerprint(A.t[4], N_MIXED));
    struct ct_ckpt_tensor t[MAXN];
    memcpy(t, A.t[0], sizeof t);
    t[3].shape[1] = 5;
    CU_ASSERT_NOT_EQUAL(ct__ckpt_layout_fingerprint(t, N_MIXED), f);
    memcpy(t, A.t[0], sizeof t);
    t[0].dtype = CT_DTYPE_I64;
    CU_ASSERT_NOT_EQUAL(ct__ckpt_layout_fingerprint(t, N_MIXED), f);
    memcpy(t, A.t[0], sizeof t);
    t[7].sharded = 0;
    CU_ASSERT_NOT_EQUAL(ct__ckpt_layout_fingerprint(t, N_MIXED), f);
    memcpy(t, A.t[0], sizeof t);
    t[2].name[0] = 'S';
    CU_ASSERT_NOT_EQUAL(ct__ckpt_layout_fingerprint(t, N_MIXED), f);
    memcpy(t, A.t[0], sizeof t);
    t[2].shape[3] = 99; /* beyond ndim: not part of the section */
    CU_ASSERT_EQUAL(ct__ckpt_layout_fingerprint(t, N_MIXED), f);
    side_free(&A);
    side_free(&B);
}

/* One section, its data in g_src. */
static void set_tensor(struct ct_ckpt_tensor *t, const char *name, enum ct_dtype dtype, int ndim,
                       int64_t d0, int64_t d1, int sharded)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->sharded = sharded;
    t->data = g_src;
}

/* Bad sections are refused with the section named. */
static void test_bad_tensors(void)
{
    struct ct_ckpt_tensor t;
    struct ct__ckpt_layout L;
    static const struct {
        int field;
        const char *msg;
    } cases[] = {{0, "unknown dtype"},   {1, "5 dimensions"},       {2, "without a valid name"},
                 {3, "bad dimension -2"}, {4, "is not inside its 60"}, {5, "no data"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        set_tensor(&t, "params/w", CT_DTYPE_F32, 2, 3, 5, 0);
        memset(&L, 0, sizeof L);
        switch (cases[c].field) {
        case 0: t.dtype = CT_DTYPE_COUNT; break;
        case 1: t.ndim = 5; break;
        case 2: t.name[0] = '\0'; break;
        case 3: t.shape[1] = -2; break;
        case 4: t.sharded = 1; t.part_begin = 8; t.part_end = 64; break;
        default: t.data = NULL; break;
        }
        CU_ASSERT_EQUAL(ct__ckpt_layout_tensors(&L, &t, 1), CT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), cases[c].msg));
        if (cases[c].field != 2)
            CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "params/w"));
        ct__ckpt_layout_free(&L);
    }
    /* A sharded section of which this rank holds nothing needs no data. */
    set_tensor(&t, "opt/m", CT_DTYPE_U8, 1, 10, 0, 1);
    t.data = NULL;
    t.part_begin = t.part_end = 4;
    memset(&L, 0, sizeof L);
    CU_ASSERT_EQUAL(ct__ckpt_layout_tensors(&L, &t, 1), 0);
    CU_ASSERT_EQUAL(L.n_pieces, 1); /* the pad only */
    ct__ckpt_layout_free(&L);
}

/* Parts that do not tile a section in rank order are refused. */
static void test_bad_parts(void)
{
    static const struct {
        uint64_t p[3][2];
        const char *msg;
    } cases[] = {
        {{{0, 4}, {5, 10}, {0, 0}}, "rank 1's part starts at byte 5, expected 4"},
        {{{0, 6}, {4, 10}, {0, 0}}, "rank 1's part starts at byte 4, expected 6"},
        {{{5, 10}, {0, 5}, {0, 0}}, "rank 0's part starts at byte 5, expected 0"},
        {{{0, 4}, {0, 0}, {4, 9}}, "the ranks' parts cover 9 of its 10 bytes"},
        {{{0, 0}, {0, 0}, {0, 0}}, "the ranks' parts cover 0 of its 10 bytes"},
    };
    struct ct_ckpt_tensor t;
    set_tensor(&t, "opt/v", CT_DTYPE_U8, 1, 10, 0, 1);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct ct__ckpt_layout L;
        memset(&L, 0, sizeof L);
        CU_ASSERT_EQUAL_FATAL(ct__ckpt_layout_tensors(&L, &t, 1), 0);
        L.parts = calloc(6, sizeof *L.parts);
        CU_ASSERT_PTR_NOT_NULL_FATAL(L.parts);
        memcpy(L.parts, cases[c].p, sizeof cases[c].p);
        CU_ASSERT_EQUAL(ct__ckpt_layout_check_parts(&L, &t, 3), CT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "opt/v"));
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), cases[c].msg));
        if (!strstr(ct_error_message(), cases[c].msg))
            fprintf(stderr, "\n    case %zu: %s\n", c, ct_error_message());
        ct__ckpt_layout_free(&L);
    }
}

/* No sections at all: an empty tensor region, the records only. */
static void test_no_sections(void)
{
    for (int world = 1; world <= MAXW; world++) {
        static struct side S;
        build(&S, g_mixed, 0, world, 0, 0);
        CU_ASSERT_EQUAL(S.L[0].tensor_end, 0);
        CU_ASSERT_EQUAL(S.L[0].n_runs, 0);
        CU_ASSERT_EQUAL(S.L[0].n_pieces, 0);
        CU_ASSERT_EQUAL(check_records(&S), 0);
        side_free(&S);
    }
}

int main(void)
{
    fill_src();
    static const struct ct_test_case cases[] = {
        {"offsets by hand", test_offsets_by_hand},
        {"replicated: equal aligned shares, worlds 1..8", test_replicated_shares},
        {"sharded state buffers, worlds 1..8", test_sharded_runs},
        {"random lists, worlds 1..8", test_random_lists},
        {"hashing owners", test_hash_owners_exact},
        {"deterministic; the fingerprint", test_deterministic},
        {"bad sections refused", test_bad_tensors},
        {"parts that do not tile refused", test_bad_parts},
        {"no sections", test_no_sections},
        {NULL, NULL},
    };
    return ct_test_run("ckpt_layout", cases);
}
