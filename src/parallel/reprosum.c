/* Reproducible summation by pre-rounding to a shared grid (see reprosum.h
 * and docs/determinism.md). The pure kernels (exponents, shifts, rounding
 * and accumulation, conversion back) come first; the collective sum object
 * (struct ct_reprosum) and ct_repro_allreduce, its one-segment case, at the
 * end. */
#include "parallel/reprosum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/simd.h"

size_t ct_repro_n_blocks(size_t n, size_t block) { return block ? (n + block - 1) / block : 0; }

void ct_repro_exp_init(int64_t *e, size_t nb)
{
    for (size_t b = 0; b < nb; b++)
        e[b] = CT_REPRO_EXP_ZERO;
}

int64_t ct_repro_exponent(double v)
{
    if (!isfinite(v))
        return CT_REPRO_EXP_NONFINITE;
    if (v == 0.0)
        return CT_REPRO_EXP_ZERO;
    int e;
    frexp(v, &e); /* v = m 2^e, 0.5 <= |m| < 1, so |v| < 2^e */
    return e;
}

/* The naive form, kept beside the fast one (the unit tests compare them). */
void ct_repro_block_exponents_ref(int64_t *e, const float *x, size_t n, size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        /* The largest magnitude decides the exponent; a NaN compares false
         * and is caught by the finiteness flag instead. */
        float amax = 0.0f;
        int finite = 1;
        for (size_t i = b0; i < end; i++) {
            const float a = fabsf(x[i]);
            finite &= isfinite(a) != 0;
            amax = a > amax ? a : amax;
        }
        const int64_t eb = finite ? ct_repro_exponent(amax) : CT_REPRO_EXP_NONFINITE;
        if (eb > e[b])
            e[b] = eb;
    }
}

/* The same on the bits: the magnitude bits of a float order like its
 * absolute value, with every NaN and Inf (exponent field all ones) above
 * every finite value, so one unsigned max per block finds the largest
 * magnitude and any non-finite value at once, in a loop the compiler
 * vectorizes (the float compares of the naive form, with the finiteness
 * test, stay scalar). */
CT_VECTOR_CLONES
void ct_repro_block_exponents(int64_t *e, const float *x, size_t n, size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        uint32_t m = 0;
        for (size_t i = b0; i < end; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            u &= 0x7fffffffu;
            m = u > m ? u : m;
        }
        int64_t eb = CT_REPRO_EXP_NONFINITE;
        if (m < 0x7f800000u) {
            float amax;
            memcpy(&amax, &m, sizeof amax);
            eb = ct_repro_exponent(amax);
        }
        if (eb > e[b])
            e[b] = eb;
    }
}

static int ceil_log2(int64_t n)
{
    int l = 0;
    while (l < 62 && ((int64_t)1 << l) < n)
        l++;
    return l;
}

int ct_repro_acc_bits(int64_t n_terms) { return n_terms <= CT_REPRO_I32_MAX_TERMS ? 32 : 64; }

int ct_repro_shifts_bits(int64_t *e, size_t nb, int64_t n_terms, int bits)
{
    if (n_terms < 1)
        return ct_error_set(CT_EINVAL, "reproducible sum: %lld terms (at least 1)",
                            (long long)n_terms);
    if (bits != 32 && bits != 64)
        return ct_error_set(CT_EINVAL, "reproducible sum: %d-bit accumulators (32 or 64)", bits);
    const int l = ceil_log2(n_terms), head = bits - 2;
    if (l > head)
        return ct_error_set(CT_ERANGE, "reproducible sum: %lld terms overflow %d-bit sums",
                            (long long)n_terms, bits);
    for (size_t b = 0; b < nb; b++) {
        if (e[b] >= CT_REPRO_EXP_NONFINITE)
            return ct_error_set(CT_ERANGE,
                                "reproducible sum: a NaN or Inf in block %zu", b);
        /* Each rounded term is at most 2^(e - s) = 2^(head - l) in magnitude,
         * so n_terms <= 2^l of them, and every partial sum of them, are at
         * most 2^head = 2^(bits - 2): no overflow. */
        e[b] = e[b] <= CT_REPRO_EXP_ZERO ? 0 : e[b] - head + l;
    }
    return 0;
}

int ct_repro_shifts(int64_t *e, size_t nb, int64_t n_terms)
{
    return ct_repro_shifts_bits(e, nb, n_terms, 64);
}

int64_t ct_repro_round(double v, int64_t s)
{
    /* ldexp is exact (a power-of-two scaling within double's range); llrint
     * rounds to nearest even under the default rounding mode, which nothing
     * in this program changes. */
    return llrint(ldexp(v, (int)-s));
}

double ct_repro_unround(int64_t q, int64_t s) { return ldexp((double)q, (int)s); }

int ct_repro_allreduce_f64(struct ct_comm *c, const double *x, size_t n, int64_t n_total,
                           double *out)
{
    int64_t e = CT_REPRO_EXP_ZERO;
    for (size_t i = 0; i < n; i++) {
        int64_t ei = ct_repro_exponent(x[i]);
        e = ei > e ? ei : e;
    }
    int rc = ct_comm_allreduce_i64(c, &e, 1, CT_REDUCE_MAX);
    if (rc < 0)
        return rc;
    if (e >= CT_REPRO_EXP_NONFINITE) {
        *out = NAN;
        return 0;
    }
    if ((rc = ct_repro_shifts(&e, 1, n_total > 0 ? n_total : 1)) < 0)
        return rc;
    int64_t q = 0;
    for (size_t i = 0; i < n; i++)
        q += ct_repro_round(x[i], e);
    if ((rc = ct_comm_allreduce_i64(c, &q, 1, CT_REDUCE_SUM)) < 0)
        return rc;
    *out = ct_repro_unround(q, e);
    return 0;
}

void ct_repro_accumulate(int64_t *acc, const float *x, size_t n, const int64_t *s, size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        /* Multiplying by a power of two is exact in double for every shift
         * a float block can get (|s| < 300), and much cheaper than ldexp. */
        const double scale = ldexp(1.0, (int)-s[b]);
        for (size_t i = b0; i < end; i++)
            acc[i] += llrint((double)x[i] * scale);
    }
}

void ct_repro_finish(float *out, const int64_t *acc, size_t n, const int64_t *s, size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        const double scale = ldexp(1.0, (int)s[b]);
        for (size_t i = b0; i < end; i++)
            out[i] = (float)((double)acc[i] * scale);
    }
}

/* 1.5 * 2^52: adding it to a double of magnitude below 2^51 leaves no bit
 * below the units, so (r + M) - M is r rounded to the nearest integer, ties
 * to even (the default rounding mode, which nothing here changes), the same
 * integer llrint gives. Two additions vectorize on every ISA, where rint
 * needs SSE4.1 and a double-to-int64 conversion AVX-512DQ. */
#define ROUND_MAGIC 6755399441055744.0

/* The int32 forms. Every |x| < 2^e of its block and s = e - 30 + l, so
 * |x / 2^s| < 2^30: well inside the magic constant's range, and the
 * product by a power of two is exact in double. */
static inline int32_t round_i32(float x, double scale)
{
    return (int32_t)(((double)x * scale + ROUND_MAGIC) - ROUND_MAGIC);
}

CT_VECTOR_CLONES
void ct_repro_store_i32(int32_t *acc, const float *x, size_t n, const int64_t *s, size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        const double scale = ldexp(1.0, (int)-s[b]);
        for (size_t i = b0; i < end; i++)
            acc[i] = round_i32(x[i], scale);
    }
}

CT_VECTOR_CLONES
void ct_repro_accumulate_i32(int32_t *acc, const float *x, size_t n, const int64_t *s,
                             size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        const double scale = ldexp(1.0, (int)-s[b]);
        for (size_t i = b0; i < end; i++)
            acc[i] += round_i32(x[i], scale);
    }
}

/* The naive form: llrint of the scaled term, as the int64 path rounds. */
void ct_repro_accumulate_i32_ref(int32_t *acc, const float *x, size_t n, const int64_t *s,
                                 size_t block)
{
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        for (size_t i = b0; i < end; i++)
            acc[i] += (int32_t)llrint(ldexp((double)x[i], (int)-s[b]));
    }
}

CT_VECTOR_CLONES
void ct_repro_finish_i32(float *out, const int32_t *acc, size_t n, const int64_t *s,
                         size_t block)
{
    /* acc * 2^s is exact in double (31 bits), so the one rounding is to float. */
    for (size_t b0 = 0, b = 0; b0 < n; b0 += block, b++) {
        const size_t end = b0 + block < n ? b0 + block : n;
        const double scale = ldexp(1.0, (int)s[b]);
        for (size_t i = b0; i < end; i++)
            out[i] = (float)((double)acc[i] * scale);
    }
}

/* ---------------------------------------------------------------- the sum object */

/* The layout every init computes the same way: each segment's blocks and
 * first sum, the totals. */
static int reprosum_layout(struct ct_reprosum *r, const struct ct_reprosum_params *p)
{
    if (p->n_seg < 1 || p->n_seg > CT_REPROSUM_MAX_SEG || p->max_rows < 0 || p->n_side < 0)
        return ct_error_set(CT_EINVAL,
                            "reproducible sum: %d segments (1 to %d), %d rows, %d side slots",
                            p->n_seg, CT_REPROSUM_MAX_SEG, p->max_rows, p->n_side);
    r->n_seg = p->n_seg;
    r->block = p->block ? p->block : CT_REPRO_BLOCK;
    r->n_side = p->n_side;
    r->max_rows = p->max_rows;
    r->n_terms = p->n_terms;
    r->bits = ct_repro_acc_bits(p->n_terms);
    r->n_all = r->ne = 0;
    for (int g = 0; g < p->n_seg; g++) {
        r->n[g] = p->n[g];
        r->nb[g] = ct_repro_n_blocks(p->n[g], r->block);
        r->at[g] = r->n_all;
        r->eat[g] = r->ne;
        r->n_all += r->n[g];
        r->ne += r->nb[g];
    }
    /* The term count decides the grid and the width: refused here, before
     * any collective, the same on every rank (shifts of zero blocks). */
    return ct_repro_shifts_bits(NULL, 0, p->n_terms, r->bits);
}

size_t ct_reprosum_work_bytes(const struct ct_reprosum_params *p)
{
    struct ct_reprosum r = {0};
    if (reprosum_layout(&r, p) < 0)
        return 0;
    return (r.ne + (size_t)r.n_side + r.n_all) * sizeof(int64_t);
}

int ct_reprosum_init(struct ct_reprosum *r, struct ct_comm *c,
                     const struct ct_reprosum_params *p)
{
    memset(r, 0, sizeof *r);
    int rc = reprosum_layout(r, p);
    if (rc < 0)
        return rc;
    r->comm = c;
    void *work = p->work;
    if (!work) {
        const size_t bytes = (r->ne + (size_t)r->n_side) * sizeof(int64_t) +
                             r->n_all * (size_t)(r->bits / 8);
        work = r->own = malloc(bytes ? bytes : 1);
    }
    r->rows = malloc((size_t)(r->max_rows ? r->max_rows : 1) * (size_t)r->n_seg * sizeof *r->rows);
    if (!work || !r->rows) {
        ct_reprosum_free(r);
        return ct_error_set(CT_ENOMEM, "reproducible sum: out of memory for %zu sums", r->n_all);
    }
    r->e = work;
    r->acc = r->e + r->ne + r->n_side;
    return 0;
}

void ct_reprosum_free(struct ct_reprosum *r)
{
    free(r->own);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void ct_reprosum_begin(struct ct_reprosum *r)
{
    ct_repro_exp_init(r->e, r->ne);
    for (int i = 0; i < r->n_side; i++)
        r->e[r->ne + (size_t)i] = 0;
    r->n_rows = 0;
    r->state = CT_REPROSUM_ADDING;
    r->nonfinite = 0;
}

int ct_reprosum_add(struct ct_reprosum *r, const float *const *row)
{
    if (r->state != CT_REPROSUM_ADDING || r->n_rows == r->max_rows)
        return ct_error_set(CT_ESTATE, "reproducible sum: row %d of %d, %s", r->n_rows + 1,
                            r->max_rows,
                            r->state == CT_REPROSUM_ADDING ? "too many" : "not begun");
    for (int g = 0; g < r->n_seg; g++) {
        r->rows[(size_t)r->n_rows * (size_t)r->n_seg + (size_t)g] = row[g];
        ct_repro_block_exponents(r->e + r->eat[g], row[g], r->n[g], r->block);
    }
    r->n_rows++;
    return 0;
}

int64_t *ct_reprosum_side(struct ct_reprosum *r) { return r->e + r->ne; }

int ct_reprosum_local_nonfinite(const struct ct_reprosum *r)
{
    for (size_t b = 0; b < r->ne; b++)
        if (r->e[b] >= CT_REPRO_EXP_NONFINITE)
            return 1;
    return 0;
}

int ct_reprosum_exchange(struct ct_reprosum *r)
{
    if (r->state != CT_REPROSUM_ADDING)
        return ct_error_set(CT_ESTATE, "reproducible sum: exchange before begin");
    int rc = ct_comm_allreduce_i64(r->comm, r->e, r->ne + (size_t)r->n_side, CT_REDUCE_MAX);
    if (rc < 0)
        return rc;
    /* Every rank holds the same reduced exponents, so every rank takes the
     * same branch here and nobody is left in the next collective. */
    for (size_t b = 0; b < r->ne && !r->nonfinite; b++) {
        if (r->e[b] >= CT_REPRO_EXP_NONFINITE) {
            r->nonfinite = 1;
            r->bad_block = b;
        }
    }
    r->state = CT_REPROSUM_EXCHANGED;
    if (r->nonfinite)
        return 0;
    /* Cannot fail: the term count was checked at init, the blocks are finite. */
    return ct_repro_shifts_bits(r->e, r->ne, r->n_terms, r->bits);
}

/* The rows onto the grid, into the int32 or int64 sums of each segment: for
 * int32 the first row is stored and the others added, so that the usual
 * case of one row per rank is one pass with no memset. */
static void reprosum_accumulate(struct ct_reprosum *r)
{
    for (int g = 0; g < r->n_seg; g++) {
        const int64_t *s = r->e + r->eat[g];
        const size_t n = r->n[g], B = r->block;
        const float *const *rows = r->rows + g;
        const size_t step = (size_t)r->n_seg;
        if (r->bits == 32) {
            int32_t *acc = (int32_t *)r->acc + r->at[g];
            if (r->n_rows == 0)
                memset(acc, 0, n * sizeof *acc);
            for (int j = 0; j < r->n_rows; j++) {
                if (j == 0)
                    ct_repro_store_i32(acc, rows[0], n, s, B);
                else
                    ct_repro_accumulate_i32(acc, rows[(size_t)j * step], n, s, B);
            }
            continue;
        }
        int64_t *acc = (int64_t *)r->acc + r->at[g];
        memset(acc, 0, n * sizeof *acc);
        for (int j = 0; j < r->n_rows; j++)
            ct_repro_accumulate(acc, rows[(size_t)j * step], n, s, B);
    }
}

/* Segment 0's part on this rank after a reduce-scatter by counts: where it
 * starts, and that it starts on a whole block (its shifts are the blocks'). */
static int reprosum_part(struct ct_reprosum *r, const int *counts)
{
    const int world = r->comm->world, me = r->comm->rank;
    size_t lo = 0, total = 0;
    for (int q = 0; q < world; q++) {
        if (q == me)
            lo = total;
        total += (size_t)counts[q];
    }
    const size_t cnt = (size_t)counts[me];
    if (total != r->n[0] || (cnt > 0 && lo % r->block != 0))
        return ct_error_set(CT_EINVAL,
                            "reproducible sum: reduce-scatter counts sum to %zu of %zu, this "
                            "rank's part starts at %zu (not a multiple of the block, %zu)",
                            total, r->n[0], lo, r->block);
    r->lo0 = lo;
    r->cnt0 = cnt;
    return 0;
}

int ct_reprosum_reduce(struct ct_reprosum *r, const int *counts)
{
    if (r->state != CT_REPROSUM_EXCHANGED || r->nonfinite)
        return ct_error_set(CT_ESTATE, "reproducible sum: reduce %s",
                            r->nonfinite ? "of non-finite terms" : "before the exchange");
    const enum ct_elem t = r->bits == 32 ? CT_ELEM_I32 : CT_ELEM_I64;
    const size_t w = (size_t)r->bits / 8;
    int rc = 0;
    r->lo0 = 0;
    r->cnt0 = r->n[0];
    if (counts && (rc = reprosum_part(r, counts)) < 0)
        return rc;
    reprosum_accumulate(r);
    r->state = CT_REPROSUM_REDUCED;
    if (!counts)
        return ct_comm_allreduce(r->comm, r->acc, r->n_all, t, CT_REDUCE_SUM, NULL);
    /* Integer sums are exact, so the reduce-scatter's are the allreduce's;
     * this rank's part lands at the segment's start. */
    rc = ct_comm_reduce_scatter(r->comm, NULL, r->acc, counts, t, CT_REDUCE_SUM, NULL);
    if (rc == 0 && r->n_all > r->n[0])
        rc = ct_comm_allreduce(r->comm, (char *)r->acc + r->n[0] * w, r->n_all - r->n[0], t,
                               CT_REDUCE_SUM, NULL);
    return rc;
}

void ct_reprosum_finish(const struct ct_reprosum *r, int seg, float *out)
{
    const size_t lo = seg == 0 ? r->lo0 : 0, n = seg == 0 ? r->cnt0 : r->n[seg];
    const int64_t *s = r->e + r->eat[seg] + lo / r->block;
    if (r->bits == 32)
        ct_repro_finish_i32(out + lo, (const int32_t *)r->acc + r->at[seg], n, s, r->block);
    else
        ct_repro_finish(out + lo, (const int64_t *)r->acc + r->at[seg], n, s, r->block);
}

size_t ct_repro_work_bytes(size_t n, size_t block)
{
    return (ct_repro_n_blocks(n, block) + n) * sizeof(int64_t);
}

int ct_repro_allreduce(struct ct_comm *c, float *out, const float *const *terms, int k, size_t n,
                       int64_t n_terms_total, size_t block, void *work)
{
    const struct ct_reprosum_params p = {
        .n = &n, .n_seg = 1, .n_terms = n_terms_total, .max_rows = k, .block = block, .work = work};
    struct ct_reprosum r;
    int rc = ct_reprosum_init(&r, c, &p);
    if (rc < 0)
        return rc;
    ct_reprosum_begin(&r);
    for (int j = 0; j < k && rc == 0; j++)
        rc = ct_reprosum_add(&r, &terms[j]);
    if (rc == 0 && (rc = ct_reprosum_exchange(&r)) < 0)
        rc = ct_error_wrap(rc, "reproducible sum: exponent MAX-allreduce");
    else if (rc == 0 && r.nonfinite)
        rc = ct_error_set(CT_ERANGE, "reproducible sum: a NaN or Inf in block %zu", r.bad_block);
    else if (rc == 0 && (rc = ct_reprosum_reduce(&r, NULL)) < 0)
        rc = ct_error_wrap(rc, "reproducible sum: int%d SUM-allreduce", r.bits);
    if (rc == 0)
        ct_reprosum_finish(&r, 0, out);
    ct_reprosum_free(&r);
    return rc;
}
