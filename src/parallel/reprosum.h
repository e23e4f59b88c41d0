/* Reproducible summation: sums of float rows whose bits do not depend on
 * the order of the rows, on how they are grouped (micro-batches, ranks) or
 * on how many ranks hold them; the deterministic training mode's sums.
 * Pre-rounding to a shared grid (Demmel and Nguyen, ARITH 2013): per block
 * of elements a MAX-reduced exponent sets a grid step, every term is rounded
 * onto it and added as an integer (exact, associative), the integer sums are
 * reduced over ranks and turned back into floats. docs/determinism.md has
 * the method, its precision bounds and why int32 sums are enough up to 64
 * rows. It is not compensated (Kahan) summation: identical bits, not extra
 * accuracy.
 *
 * struct ct_reprosum runs the protocol: rows in, exponents exchanged,
 * integers reduced (an allreduce, or a reduce-scatter of the first segment
 * by counts), floats out. A row is one float vector per segment (a
 * micro-batch's gradient and its buffer terms, say); blocks never straddle
 * two segments.
 *
 *     struct ct_reprosum r;
 *     size_t n[2] = {P, NB};
 *     struct ct_reprosum_params p = {.n = n, .n_seg = 2, .n_terms = rows_all_ranks,
 *                                    .max_rows = my_rows, .n_side = 1};
 *     rc = ct_reprosum_init(&r, comm, &p);
 *     ct_reprosum_begin(&r);
 *     for each row: ct_reprosum_add(&r, (const float *[]){grad_j, buf_j});
 *     ct_reprosum_side(&r)[0] = my_flag;       // MAX-reduced with the exponents
 *     rc = ct_reprosum_exchange(&r);           // collective: int64 MAX
 *     if (r.nonfinite) ... a NaN or Inf in some row on some rank: stop here
 *     rc = ct_reprosum_reduce(&r, NULL);       // collective: int32/int64 SUM
 *     ct_reprosum_finish(&r, 0, grad); ct_reprosum_finish(&r, 1, buf);
 *     ct_reprosum_free(&r);
 *
 * The kernels below it (exponents, shifts, rounding, accumulation, finish)
 * are public too: the unit tests check each, and ct_repro_allreduce_f64 sums
 * doubles with them.
 */
#ifndef CT_PARALLEL_REPROSUM_H
#define CT_PARALLEL_REPROSUM_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"

/* The exponent of a block of zeros (below every real one) and of a block
 * holding a NaN or an Inf (above every real one). */
#define CT_REPRO_EXP_ZERO (-100000)
#define CT_REPRO_EXP_NONFINITE (100000)

/* The default block: 256 elements (1 KiB of floats), so the exponents are
 * 1/32 of the int64 sums' traffic, 1/16 of the int32 sums'. */
#define CT_REPRO_BLOCK 256

/* Number of blocks of `block` elements covering n elements. */
size_t ct_repro_n_blocks(size_t n, size_t block);

/* Set nb exponents to CT_REPRO_EXP_ZERO (the identity of the MAX). */
void ct_repro_exp_init(int64_t *e, size_t nb);

/* The smallest e with |v| < 2^e (frexp's exponent), CT_REPRO_EXP_ZERO for
 * 0, CT_REPRO_EXP_NONFINITE for NaN and Inf. */
int64_t ct_repro_exponent(double v);

/* e[b] = max(e[b], exponent of every x in block b) for the blocks of x[0..n).
 * Vectorized (on the float bits); _ref is the naive float loop it must
 * match bit for bit. */
void ct_repro_block_exponents(int64_t *e, const float *x, size_t n, size_t block);
void ct_repro_block_exponents_ref(int64_t *e, const float *x, size_t n, size_t block);

/* The largest n_terms summed in int32 (l = ceil(log2 n_terms) <= 6: the
 * grid step stays within the block's top-binade float ulp: docs/determinism.md). */
#define CT_REPRO_I32_MAX_TERMS 64

/* The accumulator width for sums of n_terms terms: 32 up to
 * CT_REPRO_I32_MAX_TERMS, else 64. */
int ct_repro_acc_bits(int64_t n_terms);

/* Turn MAX-reduced exponents into grid shifts in place, for sums of at most
 * n_terms terms per element in `bits`-bit (32 or 64) integers. Returns
 * CT_ERANGE (with a message naming the first block) when a block holds a
 * non-finite value or when n_terms overflows the width, CT_EINVAL when
 * n_terms < 1 or bits is neither. Zero blocks get a shift too (their sums
 * are 0). ct_repro_shifts is the 64-bit form. */
int ct_repro_shifts_bits(int64_t *e, size_t nb, int64_t n_terms, int bits);
int ct_repro_shifts(int64_t *e, size_t nb, int64_t n_terms);

/* acc[i] += round(x[i] / 2^s[block of i]): exact int64 additions. */
void ct_repro_accumulate(int64_t *acc, const float *x, size_t n, const int64_t *s, size_t block);

/* out[i] = acc[i] * 2^s[block of i], rounded to float. */
void ct_repro_finish(float *out, const int64_t *acc, size_t n, const int64_t *s, size_t block);

/* The int32 forms, for shifts from ct_repro_shifts_bits(.., 32): store sets
 * acc[i] = round(x[i] / 2^s) (the first term set: no memset, one pass),
 * accumulate adds it. Vectorized; accumulate_i32_ref is the naive llrint
 * loop they must match bit for bit. */
void ct_repro_store_i32(int32_t *acc, const float *x, size_t n, const int64_t *s, size_t block);
void ct_repro_accumulate_i32(int32_t *acc, const float *x, size_t n, const int64_t *s,
                             size_t block);
void ct_repro_accumulate_i32_ref(int32_t *acc, const float *x, size_t n, const int64_t *s,
                                 size_t block);
void ct_repro_finish_i32(float *out, const int32_t *acc, size_t n, const int64_t *s,
                         size_t block);

/* The same for one double (a loss sum, a count): its value on the grid of
 * shift s, and back. */
int64_t ct_repro_round(double v, int64_t s);
double ct_repro_unround(int64_t q, int64_t s);

/* The reproducible sum over ranks of doubles (per-sample losses, say): every
 * rank passes its own n terms (n may differ, may be 0), n_total is the
 * count over all ranks; *out is their sum on a grid shared through one
 * int64 MAX-allreduce of the largest exponent, then exact int64 sums (one
 * int64 SUM-allreduce): the same bits on every rank for any split of the
 * terms over ranks and any order. NaN on every rank when a term anywhere is
 * not finite. Collective. */
int ct_repro_allreduce_f64(struct ct_comm *c, const double *x, size_t n, int64_t n_total,
                           double *out);

/* The sum object's one-segment case in one call (ct_reprosum below): a
 * reproducible sum over ranks of k term sets of n floats each (terms[j] for
 * j < k, k >= 0, may differ between ranks), n_terms_total the number of term
 * sets over all ranks: out = their sum, the same bits for any split of the
 * term sets over ranks and any order. Collective (one int64 MAX-allreduce of
 * the block exponents, one SUM-allreduce of n int32 or int64, by
 * ct_repro_acc_bits(n_terms_total)). work: ct_repro_work_bytes(n, block)
 * bytes from malloc (the exponents, then the sums as int32 or int64; not a
 * declared int64 array, whose type the int32 view would break). Returns
 * CT_ERANGE on every rank when any term anywhere is non-finite (out
 * untouched), a communicator error otherwise. */
size_t ct_repro_work_bytes(size_t n, size_t block);
int ct_repro_allreduce(struct ct_comm *c, float *out, const float *const *terms, int k, size_t n,
                       int64_t n_terms_total, size_t block, void *work);

/* ---------------------------------------------------------------- the sum object */

/* The most segments of one row. */
#define CT_REPROSUM_MAX_SEG 4

struct ct_reprosum_params {
    const size_t *n;   /* (n_seg) elements of each segment */
    int n_seg;         /* 1 .. CT_REPROSUM_MAX_SEG */
    int64_t n_terms;   /* rows summed over ALL ranks: the grid and the width; >= 1 */
    int max_rows;      /* rows this rank adds to one sum, at most (may be 0) */
    int n_side;        /* int64 side slots MAX-reduced with the exponents */
    size_t block;      /* elements per exponent block; 0: CT_REPRO_BLOCK */
    void *work;        /* NULL: allocated; else ct_reprosum_work_bytes(p) bytes from malloc */
};

enum ct_reprosum_state {
    CT_REPROSUM_IDLE,
    CT_REPROSUM_ADDING,
    CT_REPROSUM_EXCHANGED,
    CT_REPROSUM_REDUCED
};

struct ct_reprosum {
    struct ct_comm *comm;
    int n_seg, n_side, max_rows, bits; /* bits: 32 or 64, ct_repro_acc_bits(n_terms) */
    int64_t n_terms;
    size_t block;
    size_t n[CT_REPROSUM_MAX_SEG], nb[CT_REPROSUM_MAX_SEG]; /* elements, blocks */
    size_t at[CT_REPROSUM_MAX_SEG], eat[CT_REPROSUM_MAX_SEG]; /* first sum, first exponent */
    size_t n_all, ne;        /* elements and blocks of all segments */
    int64_t *e;              /* (ne + n_side) exponents (then shifts), then side slots */
    void *acc;               /* (n_all) int32 or int64 sums, by bits */
    const float **rows;      /* (max_rows, n_seg) the rows added, read by reduce */
    int n_rows;
    enum ct_reprosum_state state;
    int nonfinite;           /* after exchange: a NaN or Inf in some row on some rank */
    size_t bad_block;        /* then the first block that holds one */
    size_t lo0, cnt0;        /* after reduce: segment 0's elements this rank holds */
    void *own;               /* what init allocated */
};

/* Bytes of `work` for p (0 when p is invalid). */
size_t ct_reprosum_work_bytes(const struct ct_reprosum_params *p);
/* Not collective. CT_EINVAL for bad params or n_terms < 1, CT_ERANGE when
 * n_terms overflows the sums, CT_ENOMEM. */
int ct_reprosum_init(struct ct_reprosum *r, struct ct_comm *c,
                     const struct ct_reprosum_params *p);
void ct_reprosum_free(struct ct_reprosum *r);

/* A new sum: no rows, exponents and side slots zeroed. */
void ct_reprosum_begin(struct ct_reprosum *r);
/* One row: row[g] is segment g's n[g] floats; they are read again by
 * reduce(), so they must stay as they are until it returns. CT_ESTATE past
 * max_rows or before begin(). */
int ct_reprosum_add(struct ct_reprosum *r, const float *const *row);
/* The n_side side slots (zero after begin): set them before exchange(),
 * read the MAX over ranks after it. */
int64_t *ct_reprosum_side(struct ct_reprosum *r);
/* This rank's rows hold a NaN or Inf (before exchange: to name the rank). */
int ct_reprosum_local_nonfinite(const struct ct_reprosum *r);
/* Collective: one int64 MAX-allreduce of the exponents and side slots.
 * Then r->nonfinite says whether any row on any rank held a NaN or Inf (the
 * same on every rank); if not, the grid is set. Communicator errors only. */
int ct_reprosum_exchange(struct ct_reprosum *r);
/* Collective: the rows onto the grid, as integers, summed over ranks.
 * counts NULL: one allreduce of every segment. counts (world ints summing to
 * n[0], each rank's part starting on a whole block): segment 0 is
 * reduce-scattered (rank r holds elements [counts[0] + .. + counts[r-1], +
 * counts[r])), the other segments allreduced. CT_ESTATE unless exchanged and
 * finite; CT_EINVAL for bad counts; communicator errors. */
int ct_reprosum_reduce(struct ct_reprosum *r, const int *counts);
/* Segment seg's sums back to floats into out, which indexes the whole
 * segment: every element after an allreduce, only this rank's part of
 * segment 0 after a reduce-scatter (the rest of out untouched). */
void ct_reprosum_finish(const struct ct_reprosum *r, int seg, float *out);

#endif
