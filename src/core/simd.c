/* Run-time choice of the hand-written SIMD kernels (see simd.h). */
#include "core/simd.h"

#include <stdlib.h>
#include <string.h>

static int force_portable;

void ct_simd_set_portable(int on) { force_portable = on != 0; }

int ct_simd_avx512(void)
{
#if CT_HAVE_AVX512_KERNELS
    static int have = -1;
    if (have < 0) {
        const char *env = getenv("CT_SIMD");
        have = __builtin_cpu_supports("avx512f") && !(env && strcmp(env, "portable") == 0);
    }
    return have && !force_portable;
#else
    return 0;
#endif
}
