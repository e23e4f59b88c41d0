/* Gradient compression for the allreduce: float32 gradients sent as
 * bfloat16 (dist.grad_compress = bf16), half the bytes on the wire.
 *
 * The pieces, pure functions over arrays so that tests check them without
 * MPI; parallel/gradsync.c runs them per bucket, parallel/comm.c wraps
 * ct_compress_sum_bf16 in a user-defined MPI operation (MPI has no bf16
 * type: the elements travel as MPI_UINT16_T):
 *  - round: each rank rounds its (already averaged: the loss is scaled by
 *    1/global_batch, so the sum over ranks is the mean) gradient to bf16,
 *    round-to-nearest-even (core/bf16.h);
 *  - sum: the MPI operation adds two bf16 vectors in float32 and rounds the
 *    sum back to bf16, since whatever travels between ranks is bf16. With N
 *    ranks every element's partial sums are so rounded N - 1 times, in an
 *    order MPI picks (the operation is commutative, as MPI_SUM on floats
 *    is: a + b rounds like b + a; like MPI_SUM it is not associative, and
 *    MPI gives every rank the same result as it does for MPI_SUM). Each
 *    rounding is correctly rounded (float32 holds a sum of two bf16 values
 *    to more than 17 bits), so with s the exact sum of the N rounded inputs
 *    |result - s| <= (N-1) * 2^-8 * (sum of |partial sums|) (first order);
 *    with the inputs' own rounding, a relative error of about N * 2^-8 in
 *    the worst case, 2^-8 * sqrt(N) typically. PyTorch's
 *    bf16_compress_hook (torch.distributed.algorithms.ddp_comm_hooks)
 *    does the same arithmetic: it divides by N in float32, casts to bf16
 *    and allreduces in bf16 through NCCL, whose bf16 reduction also adds in
 *    float32 and rounds at every hop;
 *  - widen: the bf16 sum back into the float32 gradient buffer (exact).
 *  - error feedback (dist.grad_compress_feedback = true): each rank keeps
 *    what its own rounding dropped, r = v - widen(round(v)) with
 *    v = g + r_previous, and adds it to the next step's gradient before
 *    rounding (Seide et al. 2014, "1-bit SGD"; Karimireddy et al. 2019,
 *    "EF-SGD"). The subtraction is exact in float32, so v = widen(sent) + r
 *    exactly: nothing of the rank's own gradient is lost, only delayed. The
 *    rounding of the partial sums inside the allreduce is not fed back (no
 *    rank owns it).
 *
 * Not here: when buckets are started and who commits a residual (gradsync),
 * or a reproducible compressed sum (the deterministic mode refuses bf16).
 */
#ifndef CT_PARALLEL_COMPRESS_H
#define CT_PARALLEL_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

/* dist.grad_compress. Append-only; the names are the config's values. */
enum ct_grad_compress {
    CT_GRAD_COMPRESS_NONE,
    CT_GRAD_COMPRESS_BF16,
    CT_GRAD_COMPRESS_COUNT
};
extern const char *const ct_grad_compress_names[]; /* "none", "bf16", NULL */

/* out[i] = bf16(g[i]). */
void ct_compress_round_bf16(uint16_t *out, const float *g, size_t n);
/* With error feedback: v = g[i] + res_in[i], out[i] = bf16(v),
 * res_out[i] = v - widen(out[i]) (exact). res_out may be res_in. A
 * non-finite v gives a non-finite residual: the step that carries it is
 * dropped, and its residual with it (gradsync commits only kept steps). */
void ct_compress_round_bf16_feedback(uint16_t *out, const float *g, const float *res_in,
                                     float *res_out, size_t n);
/* out[i] = float(in[i]) (exact). */
void ct_compress_widen_bf16(float *out, const uint16_t *in, size_t n);
/* The MPI operation's body: inout[i] = bf16(float(in[i]) + float(inout[i])). */
void ct_compress_sum_bf16(uint16_t *inout, const uint16_t *in, size_t n);

#endif
