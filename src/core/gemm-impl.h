/* Internals shared by the fp32 and bf16 matrix products (core/gemm.c,
 * core/bgemm.c). Not installed. */
#ifndef CT_CORE_GEMM_IMPL_H
#define CT_CORE_GEMM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/simd.h"

#if CT_HAVE_AVX512_KERNELS
/* dst rows 0..15 (ldd words apart) = columns 0..15 of the 16 rows of src
 * (lds words apart), 32-bit words moved as they are: the fp32 product
 * transposes floats with it, the bf16 one pairs of bf16. Four rounds of lane
 * shuffles (pairs of words, pairs of double words, then 128-bit quarters
 * twice) in registers. AVX-512F: call it only where ct_sgemm_impl or the
 * bf16 dispatch has chosen an AVX-512 path. */
CT_TARGET_AVX512
void ct__transpose16x16_u32(const uint32_t *restrict src, ptrdiff_t lds, uint32_t *restrict dst,
                            ptrdiff_t ldd);
#endif

#endif
