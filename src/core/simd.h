/* CT_VECTOR_CLONES: compile a function once per vector ISA -- AVX-512,
 * AVX2, and the x86-64 baseline (SSE2) -- and let the loader pick one by the
 * CPU's features (GCC's target_clones, resolved once through an ifunc). For
 * the element-wise kernels that run over every activation: the binary stays
 * portable and the loops run 8 or 16 floats at a time where the CPU allows.
 *
 * Every clone computes the same bits: the build is ISO C (-std=c11, so
 * -ffp-contract=off: no fused multiply-add), without -ffast-math (no
 * reassociation), so vector width changes how many elements one
 * instruction handles, never the arithmetic of one element. Reductions that
 * must vectorize keep explicit lanes, whose order the source fixes.
 *
 * Put it on a function that loops over a whole plane or batch (a clone is
 * called through a pointer and is not inlined). Elsewhere (other compilers,
 * other CPUs) it expands to nothing. */
#ifndef CT_CORE_SIMD_H
#define CT_CORE_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CT_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CT_VECTOR_CLONES
#endif

/* A few kernels whose loops are too short or too irregular for the
 * compiler (2x2 pooling windows over 14-pixel rows, im2col row segments)
 * also have hand-written AVX-512 forms, each beside its portable twin and
 * computing the same bits. CT_HAVE_AVX512_KERNELS says whether this build
 * has them (x86-64 with GCC or clang: functions with target("avx512f")
 * attributes, so the rest of the binary stays baseline x86-64);
 * ct_simd_avx512() whether to use them now: the CPU has AVX-512F, the
 * environment does not say CT_SIMD=portable (to compare or debug a run with
 * the portable kernels; CT_SIMD=auto or unset: use what the CPU has), and
 * ct_simd_set_portable(1) was not called (tests and benchmarks call it to
 * run the portable twins; process-wide; kernels already running finish with
 * the form they started with). ct_simd_init() reads CT_SIMD: programs call
 * it at start to refuse a bad value (CT_EINVAL with a message); otherwise
 * the first kernel reads it and takes a bad value as auto. */
#if defined(__x86_64__) && defined(__GNUC__)
#define CT_HAVE_AVX512_KERNELS 1
#define CT_TARGET_AVX512 __attribute__((target("avx512f")))
#else
#define CT_HAVE_AVX512_KERNELS 0
#endif

/* The CPU's vector features, from one check (cpuid, through GCC's
 * __builtin_cpu_supports) shared by every caller that chooses kernels:
 * our AVX-512 kernels (AVX-512F), the bf16 products (AVX512_BF16) and OpenBLAS's core type (core/threads.h:
 * Haswell needs AVX2 and FMA, SkylakeX AVX-512 F/CD/BW/DQ/VL). 0 on other
 * CPUs and compilers. */
enum ct_cpu_feature {
    CT_CPU_AVX2_FMA = 1u << 0,
    CT_CPU_AVX512F = 1u << 1,
    CT_CPU_AVX512_SKX = 1u << 2, /* F, CD, BW, DQ and VL */
    CT_CPU_AVX512_BF16 = 1u << 3, /* vdpbf16ps (core/bgemm.h) */
};
unsigned ct_cpu_features(void);

int ct_simd_init(void);
/* Whether this build has the AVX-512 kernels and the CPU has AVX-512F,
 * whatever CT_SIMD says (core/gemm.h's own choice uses it). */
int ct_simd_cpu_avx512(void);
int ct_simd_avx512(void);
void ct_simd_set_portable(int on);

#endif
