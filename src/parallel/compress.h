/* Gradient compression for the allreduce: float32 gradients sent as
 * bfloat16 (dist.grad_compress = bf16), half the bytes on the wire. Pure
 * functions over arrays: round (to nearest even), sum (two bf16 vectors
 * added in float32 and rounded back: the bf16 allreduce's operation, in
 * comm_mpi.c), widen, and error feedback's residual. docs/parallel.md has
 * the arithmetic and its error bound. Not here: when buckets start
 * (gradsync), or a reproducible compressed sum (the deterministic mode
 * refuses bf16).
 *
 *     ct_compress_round_bf16(wire, grads, n);      // each rank, before the sum
 *     ct_comm_allreduce_bf16(comm, wire, n);       // ct_compress_sum_bf16 per hop
 *     ct_compress_widen_bf16(grads, wire, n);
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
