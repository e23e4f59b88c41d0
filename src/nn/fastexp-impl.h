/* Branch-free float helpers shared by the element-wise kernels of src/nn
 * (gelu.c, softmax.c): a bit-mask select and an inline exp that vectorizes.
 * Internal to src/nn; not installed. */
#ifndef CT_NN_FASTEXP_IMPL_H
#define CT_NN_FASTEXP_IMPL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* c ? a : b through bit masks. With a plain ?: the compiler moves the
 * computation of the side not always taken into a branch, and (trapping
 * math being on) then will not vectorize the loop; a mask keeps both sides
 * unconditional and the loop branch-free. */
static inline float pick(int c, float a, float b)
{
    uint32_t m = 0u - (uint32_t)(c != 0), ab, bb;
    memcpy(&ab, &a, sizeof ab);
    memcpy(&bb, &b, sizeof bb);
    uint32_t rb = (ab & m) | (bb & ~m);
    float r;
    memcpy(&r, &rb, sizeof r);
    return r;
}

/* exp(x) within ~2 ulp for x in [-87.33, 88]; 0 below (where exp(x) would
 * be subnormal or 0: no caller needs relative precision there), +inf above,
 * NaN for NaN. Round x/ln2 to n with the 1.5 * 2^23 trick, reduce
 * r = x - n ln2 in two parts (n * LN2_HI is exact for |n| <= 128), then a
 * degree-7 Taylor polynomial (truncation below 6e-9 on |r| <= ln2/2) times
 * 2^n built in the exponent bits. Out-of-range x make garbage that the two
 * picks at the end replace (clamping x first would put a branch in the
 * callers' loops, see pick()). */
static inline float fexp(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    float k = x * 1.44269504f + magic;
    uint32_t kb;
    memcpy(&kb, &k, sizeof kb); /* n = kb - bits(magic), in the low mantissa bits */
    k -= magic;
    float r = (x - k * 0.693145752f) - k * 1.42860677e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t sb = (kb - 0x4B400000u + 127u) << 23; /* 2^n, a normal number in range */
    float s;
    memcpy(&s, &sb, sizeof s);
    float y = p * s;
    return pick(x < -87.33f, 0.0f, pick(x > 88.0f, INFINITY, y));
}

#endif
