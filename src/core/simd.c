/* Run-time choice of the hand-written SIMD kernels (see simd.h). */
#include "core/simd.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* -1: not decided yet; 0: portable kernels; 1: AVX-512 kernels. Atomic: the
 * first kernel call may decide it lazily, from any thread. */
static atomic_int choice = -1;
static atomic_int force_portable;

void ct_simd_set_portable(int on) { atomic_store(&force_portable, on != 0); }

unsigned ct_cpu_features(void)
{
    unsigned f = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= CT_CPU_AVX2_FMA;
    if (__builtin_cpu_supports("avx512f"))
        f |= CT_CPU_AVX512F;
    if ((f & CT_CPU_AVX512F) && __builtin_cpu_supports("avx512cd") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        f |= CT_CPU_AVX512_SKX;
    if ((f & CT_CPU_AVX512F) && __builtin_cpu_supports("avx512bf16"))
        f |= CT_CPU_AVX512_BF16;
#endif
    return f;
}

int ct_simd_cpu_avx512(void)
{
    return CT_HAVE_AVX512_KERNELS && (ct_cpu_features() & CT_CPU_AVX512F) ? 1 : 0;
}

int ct_simd_init(void)
{
    const char *env = getenv("CT_SIMD");
    int portable = 0;
    int rc = 0;
    if (env && *env && strcmp(env, "auto") != 0) {
        if (strcmp(env, "portable") == 0)
            portable = 1;
        else
            rc = ct_error_set(CT_EINVAL, "CT_SIMD: unknown value '%.40s' (expected auto or portable)",
                              env);
    }
    atomic_store(&choice, ct_simd_cpu_avx512() && !portable);
    return rc;
}

int ct_simd_avx512(void)
{
    int c = atomic_load_explicit(&choice, memory_order_relaxed);
    if (c < 0) {
        (void)ct_simd_init(); /* a bad CT_SIMD is the program's to report (main does) */
        c = atomic_load_explicit(&choice, memory_order_relaxed);
    }
    return c && !atomic_load_explicit(&force_portable, memory_order_relaxed);
}
