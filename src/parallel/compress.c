/* Gradient compression to bf16 (see compress.h): plain loops the compiler
 * vectorises, once per vector ISA (CT_VECTOR_CLONES: the same bits in each,
 * since rounding is integer code, core/bf16.h, and the one float operation
 * is an IEEE addition). */
#include "parallel/compress.h"

#include "core/bf16.h"
#include "core/simd.h"

const char *const ct_grad_compress_names[] = {"none", "bf16", NULL};
_Static_assert(CT_GRAD_COMPRESS_COUNT == 2, "ct_grad_compress_names lists every value");

CT_VECTOR_CLONES
void ct_compress_round_bf16(uint16_t *out, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ct_bf16_from_f32(g[i]);
}

CT_VECTOR_CLONES
void ct_compress_round_bf16_feedback(uint16_t *out, const float *g, const float *res_in,
                                     float *res_out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const float v = g[i] + res_in[i];
        const uint16_t h = ct_bf16_from_f32(v);
        out[i] = h;
        res_out[i] = v - ct_bf16_to_f32(h);
    }
}

CT_VECTOR_CLONES
void ct_compress_widen_bf16(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ct_bf16_to_f32(in[i]);
}

CT_VECTOR_CLONES
void ct_compress_sum_bf16(uint16_t *inout, const uint16_t *in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        inout[i] = ct_bf16_from_f32(ct_bf16_to_f32(in[i]) + ct_bf16_to_f32(inout[i]));
}
