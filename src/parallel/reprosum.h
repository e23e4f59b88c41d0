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
 *     s = e_max - (W - 2) + ceil(log2(n_terms)) for W-bit accumulators
 *     (ct_repro_shifts_bits), so that the sum of n_terms rounded values, and
 *     every partial sum of them, stays within 2^(W-2): no overflow;
 *  3. each term is rounded to a multiple of 2^s (round to nearest even, a
 *     function of the term and s only) and added as a W-bit integer
 *     (ct_repro_accumulate, ct_repro_accumulate_i32). Integer addition is
 *     exact and associative, so any grouping and any order give the same
 *     sums, also across ranks (an integer SUM-allreduce);
 *  4. the integer sums are turned back into floats (ct_repro_finish*).
 *
 * The width W (ct_repro_acc_bits) is 32 when n_terms <= 64, else 64. It is
 * a function of n_terms alone, which callers take from the global problem
 * (the micro-batches of the whole global batch), never from the rank count,
 * so every N uses the same grid and gets the same bits.
 *
 * Precision. Write l = ceil(log2(n_terms)) and e for a block's exponent
 * (every |x| < 2^e). Each term is rounded by at most half a grid step,
 * 2^(s-1), so an element's sum is off by at most n_terms * 2^(s-1).
 *  - int64 (s = e - 62 + l): a term loses only bits more than 62 - l
 *    binades under its block's largest magnitude; a float term within ~30
 *    binades of the block's maximum is added exactly.
 *  - int32 (s = e - 30 + l, used for l <= 6): s <= e - 24, so the grid
 *    step is at most the ulp of a float in the block's top binade
 *    [2^(e-1), 2^e): the block's largest terms are added exactly, and each
 *    term errs by at most 2^(e-25), half that ulp: what one float32
 *    addition to a partial sum of the block maximum's size may cost. So
 *    the int32 sum's bound, n_terms * 2^(e-25), is that of n_terms float32
 *    additions at the block's top magnitude, while a float32 sum of the
 *    same terms (the default mode's accumulation and allreduce), whose
 *    partial sums grow to n_terms * 2^e, has a worst case near
 *    n_terms^2 * 2^(e-25): in these bounds int32 is no less accurate than
 *    the default mode. What int32 gives up against int64 are the low bits
 *    of elements far below their block's largest: an element k binades
 *    below the top binade keeps min(24, 30 - l - k) of its bits, and one
 *    more than 30 - l binades below rounds to 0 or one step. A float sum of
 *    such elements alone keeps them; they are well under the rounding of
 *    the block's large terms. int32 halves the bytes of the SUM-allreduce
 *    (as many as the default mode's float32 one) and of the rounding pass.
 *
 * Non-finite terms have no exponent: ct_repro_block_exponents marks their
 * block with CT_REPRO_EXP_NONFINITE, which survives the MAX-reduce, so every
 * rank learns of a NaN or Inf anywhere from the same collective (the caller
 * must not accumulate then: ct_repro_shifts reports it).
 *
 * What this is not: compensated (Kahan) summation; it is as accurate as one
 * int32 or int64 per element allows, and its purpose is identical bits, not
 * extra accuracy.
 *
 *     int64_t e[nb]; ct_repro_exp_init(e, nb);
 *     for each term set x_k: ct_repro_block_exponents(e, x_k, n, block);
 *     MAX-allreduce e over ranks;
 *     bits = ct_repro_acc_bits(n_terms_total);
 *     rc = ct_repro_shifts_bits(e, nb, n_terms_total, bits); // e becomes the shifts
 *     bits 32: ct_repro_store_i32(acc32, x_0, n, e, block);
 *              for each further x_k: ct_repro_accumulate_i32(acc32, x_k, n, e, block);
 *              SUM-allreduce acc32 (int32) over ranks;
 *              ct_repro_finish_i32(out, acc32, n, e, block);
 *     bits 64: memset(acc, 0, n * sizeof *acc);
 *              for each x_k: ct_repro_accumulate(acc, x_k, n, e, block);
 *              SUM-allreduce acc (int64) over ranks;
 *              ct_repro_finish(out, acc, n, e, block);
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
 * grid step stays within the block's top-binade float ulp, see above). */
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

/* A whole reproducible sum over ranks of k term sets of n floats each
 * (terms[j] for j < k, k >= 0, may differ between ranks), n_terms_total the
 * number of term sets over all ranks: out = their sum, the same bits for any
 * split of the term sets over ranks and any order. Collective (one int64
 * MAX-allreduce of the block exponents, one SUM-allreduce of n int32 or
 * int64, by ct_repro_acc_bits(n_terms_total)). work: ct_repro_work_bytes(n,
 * block) bytes from malloc (the exponents, then the sums as int32 or int64;
 * not a declared int64 array, whose type the int32 view would break).
 * Returns CT_ERANGE on every rank when any term anywhere is non-finite (out
 * untouched), a communicator error otherwise. */
size_t ct_repro_work_bytes(size_t n, size_t block);
int ct_repro_allreduce(struct ct_comm *c, float *out, const float *const *terms, int k, size_t n,
                       int64_t n_terms_total, size_t block, void *work);

#endif
