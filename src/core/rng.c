/* Philox4x32-10 wrapper (see rng.h). Random123 is header-only; this file is the
 * one place that includes it. */
#include "core/rng.h"

#include <Random123/philox.h>

struct ct_rng_key ct_rng_key(uint64_t seed, uint32_t purpose)
{
    /* Hash (seed, purpose) with Philox under a fixed key: a key collision for
     * two different pairs would need a Philox output collision. */
    philox4x32_ctr_t c = {{(uint32_t)seed, (uint32_t)(seed >> 32), purpose, 0x63747261u /* "ctra" */}};
    philox4x32_key_t k = {{0x9E3779B9u, 0xBB67AE85u}};
    philox4x32_ctr_t r = philox4x32(c, k);
    struct ct_rng_key out = {{r.v[0], r.v[1]}};
    return out;
}

void ct_rng_block(struct ct_rng_key key, const uint32_t ctr[4], uint32_t out[4])
{
    philox4x32_ctr_t c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
    philox4x32_key_t k = {{key.k[0], key.k[1]}};
    philox4x32_ctr_t r = philox4x32(c, k);
    out[0] = r.v[0];
    out[1] = r.v[1];
    out[2] = r.v[2];
    out[3] = r.v[3];
}

uint32_t ct_rng_below(struct ct_rng_key key, const uint32_t ctr[3], uint32_t bound)
{
    /* Lemire: x*bound >> 32 is uniform once the low word clears the threshold
     * (2^32 mod bound). */
    uint32_t threshold = (uint32_t)(-bound) % bound;
    for (uint32_t attempt = 0;; attempt++) {
        uint32_t r[4];
        ct_rng_block(key, (const uint32_t[4]){ctr[0], ctr[1], ctr[2], attempt}, r);
        for (int i = 0; i < 4; i++) {
            uint64_t m = (uint64_t)r[i] * bound;
            if ((uint32_t)m >= threshold)
                return (uint32_t)(m >> 32);
        }
    }
}
