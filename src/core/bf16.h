/* bfloat16 as 16-bit patterns: the top half of an IEEE float32 (sign, the
 * same 8 exponent bits, 7 mantissa bits), so widening is a shift and the
 * range is float32's; only the precision drops (8 significant bits: a unit
 * roundoff of 2^-8 for round-to-nearest).
 *
 * Rounding is round-to-nearest, ties to even, as every bf16 conversion in
 * hardware and in PyTorch (`tensor.to(torch.bfloat16)`): a finite value
 * past the largest bf16 (0x7F7F, about 3.39e38) rounds to Inf, Inf stays
 * Inf, a NaN stays a NaN (made quiet, sign and top payload bits kept: the
 * add-0x7FFF trick alone would turn some NaNs into Inf), subnormals round
 * like any other value (bf16 has float32's subnormal range). Pure integer
 * code: the result does not depend on the FPU's rounding mode or on
 * flush-to-zero.
 *
 * Not here: bf16 arithmetic. A sum of bf16 values is done in float32 and
 * rounded back (parallel/compress.h), which for + is the correctly rounded
 * bf16 sum (float32 has more than 2 * 8 + 1 bits of precision, so the
 * double rounding is innocuous).
 */
#ifndef CT_CORE_BF16_H
#define CT_CORE_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t ct_bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* Adding 0x7FFF (plus the lowest kept bit, for ties to even) carries into
     * the kept half exactly when the dropped half is above the midpoint (or
     * at it with an odd kept half); a carry out of the mantissa bumps the
     * exponent, up to Inf, as rounding must. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The same, as the AVX512_BF16 conversion vcvtne2ps2bf16 rounds (and so
 * the operands of core/bgemm.h's bf16 products): zero and subnormal inputs
 * become a zero of their sign (the instruction takes them as zero), every
 * other input as above. */
static inline uint16_t ct_bf16_from_f32_daz(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0)
        return (uint16_t)((u >> 16) & 0x8000u);
    return ct_bf16_from_f32(x);
}

static inline float ct_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
