/* Counter-based random numbers: Philox4x32-10 from Random123.
 *
 * A random number is a pure function of (key, counter): no hidden state, no
 * sequence to replay. Keys are derived from the run's seed and a purpose
 * (parameter init, shuffling, dropout, ...), so streams for different purposes
 * never overlap; counters name *what* the number is for (epoch, sample index,
 * element index), so a sample's randomness is the same on whichever rank, with
 * however many ranks, handles it.
 *
 *     struct ct_rng_key k = ct_rng_key(seed, CT_RNG_SHUFFLE);
 *     uint32_t r[4];
 *     ct_rng_block(k, (uint32_t[4]){epoch, i, 0, 0}, r);
 */
#ifndef CT_CORE_RNG_H
#define CT_CORE_RNG_H

#include <stdint.h>

/* Purposes: append-only (they are part of every recorded experiment). */
enum ct_rng_purpose {
    CT_RNG_INIT = 1,     /* parameter initialisation */
    CT_RNG_SHUFFLE = 2,  /* the sampler's epoch permutation */
    CT_RNG_DROPOUT = 3,  /* dropout masks */
    CT_RNG_AUGMENT = 4,  /* data augmentation */
    CT_RNG_WINDOW = 5,   /* token data: the epoch's window offset */
    CT_RNG_GENERATE = 6, /* sampling text from a language model */
    CT_RNG_PURPOSE_COUNT
};

struct ct_rng_key {
    uint32_t k[2];
};

/* The key for (seed, purpose): a Philox hash of both, so that nearby seeds
 * and purposes give unrelated keys. */
struct ct_rng_key ct_rng_key(uint64_t seed, uint32_t purpose);

/* Four 32-bit random words for one counter. */
void ct_rng_block(struct ct_rng_key key, const uint32_t ctr[4], uint32_t out[4]);

/* A 32-bit word -> float in [0, 1) with 24 random bits (exactly representable). */
static inline float ct_rng_u01(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* An unbiased integer in [0, bound) (bound >= 1) for the counter `ctr`,
 * by Lemire's multiply-and-reject method; rejected draws use the next word
 * and, after four, the next value of ctr[3]. */
uint32_t ct_rng_below(struct ct_rng_key key, const uint32_t ctr[3], uint32_t bound);

#endif
