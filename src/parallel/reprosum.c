/* Reproducible summation by pre-rounding to a shared grid (see reprosum.h).
 * The pure parts (exponents, shifts, int64 accumulation, conversion back,
 * micro-batch cut) come first; ct_repro_allreduce, the only collective, is
 * at the end. */
#include "parallel/reprosum.h"

#include <math.h>
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

size_t ct_repro_work_bytes(size_t n, size_t block)
{
    return (ct_repro_n_blocks(n, block) + n) * sizeof(int64_t);
}

int ct_repro_allreduce(struct ct_comm *c, float *out, const float *const *terms, int k, size_t n,
                       int64_t n_terms_total, size_t block, void *work)
{
    const size_t nb = ct_repro_n_blocks(n, block);
    int64_t *e = work;
    void *acc = e + nb;
    const int bits = ct_repro_acc_bits(n_terms_total);
    ct_repro_exp_init(e, nb);
    for (int j = 0; j < k; j++)
        ct_repro_block_exponents(e, terms[j], n, block);
    int rc = ct_comm_allreduce_i64(c, e, nb, CT_REDUCE_MAX);
    if (rc < 0)
        return ct_error_wrap(rc, "reproducible sum: exponent MAX-allreduce");
    /* Every rank holds the same reduced exponents, so every rank takes the
     * same branch here and nobody is left in the next collective. */
    rc = ct_repro_shifts_bits(e, nb, n_terms_total, bits);
    if (rc < 0)
        return rc;
    if (bits == 32) {
        int32_t *a = acc;
        memset(a, 0, n * sizeof *a);
        for (int j = 0; j < k; j++)
            ct_repro_accumulate_i32(a, terms[j], n, e, block);
        rc = ct_comm_allreduce_i32(c, a, n, CT_REDUCE_SUM);
        if (rc < 0)
            return ct_error_wrap(rc, "reproducible sum: int32 SUM-allreduce");
        ct_repro_finish_i32(out, a, n, e, block);
        return 0;
    }
    int64_t *a = acc;
    memset(a, 0, n * sizeof *a);
    for (int j = 0; j < k; j++)
        ct_repro_accumulate(a, terms[j], n, e, block);
    rc = ct_comm_allreduce_i64(c, a, n, CT_REDUCE_SUM);
    if (rc < 0)
        return ct_error_wrap(rc, "reproducible sum: int64 SUM-allreduce");
    ct_repro_finish(out, a, n, e, block);
    return 0;
}
