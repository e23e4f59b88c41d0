/* Reproducible summation: sums of floats whose bits do not depend on the
 * order of the terms, on how they are grouped (micro-batches, ranks) or on
 * how many ranks hold them. Used by the deterministic training mode.
 *
 * The method is pre-rounding to a shared grid, after Demmel and Nguyen
 * ("Fast reproducible floating-point summation", ARITH 2013; ReproBLAS):
 *  1. every term set (one micro-batch's gradient, say) reports, per block of
 *     `block` consecutive elements, an exponent e with |x| < 2^e for every x
 *     in the block (ct_repro_block_exponents, max-accumulating);
 *  2. the exponents are MAX-reduced over every term set and every rank (one
 *     small int64 MAX-allreduce), then each block gets a grid step 2^s with
 *     s = e_max - 62 + ceil(log2(n_terms)) (ct_repro_shifts), so that the sum
 *     of n_terms rounded values cannot overflow an int64;
 *  3. each term is rounded to a multiple of 2^s (round to nearest even, a
 *     function of the term and s only) and added as an int64
 *     (ct_repro_accumulate). Integer addition is exact and associative, so
 *     any grouping and any order give the same int64 sums, also across ranks
 *     (an int64 SUM-allreduce);
 *  4. the int64 sums are turned back into floats (ct_repro_finish).
 * Precision: a term loses only the bits below 2^s, that is more than
 * 62 - log2(n_terms) binades under its block's largest magnitude; a float
 * term within ~30 binades of its block's maximum is added exactly.
 *
 * Non-finite terms have no exponent: ct_repro_block_exponents marks their
 * block with CT_REPRO_EXP_NONFINITE, which survives the MAX-reduce, so every
 * rank learns of a NaN or Inf anywhere from the same collective (the caller
 * must not accumulate then: ct_repro_shifts reports it).
 *
 * What this is not: compensated (Kahan) summation; it is as accurate as one
 * int64 per element allows, and its purpose is identical bits, not extra
 * accuracy.
 *
 *     int64_t e[nb]; ct_repro_exp_init(e, nb);
 *     for each term set x_k: ct_repro_block_exponents(e, x_k, n, block);
 *     MAX-allreduce e over ranks;
 *     rc = ct_repro_shifts(e, nb, n_terms_total);      // e becomes the shifts
 *     memset(acc, 0, n * sizeof *acc);
 *     for each term set x_k: ct_repro_accumulate(acc, x_k, n, e, block);
 *     SUM-allreduce acc over ranks;
 *     ct_repro_finish(out, acc, n, e, block);
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
 * 1/32 of the int64 traffic. */
#define CT_REPRO_BLOCK 256

/* Number of blocks of `block` elements covering n elements. */
size_t ct_repro_n_blocks(size_t n, size_t block);

/* Set nb exponents to CT_REPRO_EXP_ZERO (the identity of the MAX). */
void ct_repro_exp_init(int64_t *e, size_t nb);

/* The smallest e with |v| < 2^e (frexp's exponent), CT_REPRO_EXP_ZERO for
 * 0, CT_REPRO_EXP_NONFINITE for NaN and Inf. */
int64_t ct_repro_exponent(double v);

/* e[b] = max(e[b], exponent of every x in block b) for the blocks of x[0..n). */
void ct_repro_block_exponents(int64_t *e, const float *x, size_t n, size_t block);

/* Turn MAX-reduced exponents into grid shifts in place, for sums of at most
 * n_terms terms per element. Returns CT_ERANGE (with a message naming the
 * first block) when a block holds a non-finite value, CT_EINVAL when
 * n_terms < 1. Zero blocks get a shift too (their sums are 0). */
int ct_repro_shifts(int64_t *e, size_t nb, int64_t n_terms);

/* acc[i] += round(x[i] / 2^s[block of i]): exact int64 additions. */
void ct_repro_accumulate(int64_t *acc, const float *x, size_t n, const int64_t *s, size_t block);

/* out[i] = acc[i] * 2^s[block of i], rounded to float. */
void ct_repro_finish(float *out, const int64_t *acc, size_t n, const int64_t *s, size_t block);

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

/* A whole reproducible sum over ranks of k term sets of n floats each
 * (terms[j] for j < k, k >= 0, may differ between ranks), n_terms_total the
 * number of term sets over all ranks: out = their sum, the same bits for any
 * split of the term sets over ranks and any order. Collective (one int64
 * MAX-allreduce of the block exponents, one int64 SUM-allreduce of n). work
 * holds n + nb int64 (nb = ct_repro_n_blocks(n, block)). Returns CT_ERANGE
 * on every rank when any term anywhere is non-finite (out untouched), a
 * communicator error otherwise. */
int ct_repro_allreduce(struct ct_comm *c, float *out, const float *const *terms, int k, size_t n,
                       int64_t n_terms_total, size_t block, int64_t *work);

/* The deterministic micro-batch cut: a global batch of global_batch samples
 * is cut into micro-batches of micro_batch samples (the last may be
 * shorter), the same cut for any number of ranks; rank r of world owns the
 * contiguous micro-batches [first, first + count), with count = n_mb / world.
 * CT_EINVAL (with a message) when world does not divide the number of
 * micro-batches or an argument is out of range. */
struct ct_mbcut {
    int64_t n_mb;        /* micro-batches in the global batch */
    int64_t first, count; /* this rank's */
    int64_t sample_begin, sample_end; /* this rank's samples, within the global batch */
};
int ct_mbcut_plan(int64_t global_batch, int64_t micro_batch, int world, int rank,
                  struct ct_mbcut *out);

#endif
