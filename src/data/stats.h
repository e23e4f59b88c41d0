/* What a data set holds, computed rather than printed: exact sums, the
 * per-channel mean and std that data.mean / data.std want, the class
 * histogram and a token shard's counts (`ctrain-dist data stats` prints
 * them; the C API and the tests call them directly).
 *
 *     struct ct_dataset ds;                 // ct_dataset_open'd
 *     struct ct_channel_stats cs;
 *     if ((rc = ct_data_channel_stats(&ds, &cs)) < 0) return rc;
 *     // cs.mean[c], cs.std[c]: of the values as training scales them
 *
 * Dims legend: N = samples, C, H, W = an image's channels, height, width.
 */
#ifndef CT_DATA_STATS_H
#define CT_DATA_STATS_H

#include <stdint.h>

#include "data/dataset.h"

/* An exact sum of doubles: Shewchuk's non-overlapping partials, as Python's
 * math.fsum. The running sum is kept as an exact expansion p[0] + ... +
 * p[n-1] (increasing magnitudes, no two sharing a bit), so nothing is lost
 * until the one rounding of ct_xsum_value. CT_XSUM_MAX partials cover any
 * terms that are float32 values or their squares (multiples of 2^-298 below
 * 2^300: ~600 bit positions); other terms may need more, and past the
 * bound the sum is no longer exact. Zero-initialise (or ct_xsum_init). */
#define CT_XSUM_MAX 640
struct ct_xsum {
    int n;
    double p[CT_XSUM_MAX];
};
void ct_xsum_init(struct ct_xsum *s);
void ct_xsum_add(struct ct_xsum *s, double x);
/* The expansion rounded once to the nearest double (ties to even). */
double ct_xsum_value(const struct ct_xsum *s);

/* Per channel, of the values as training scales them (uint8: v/255;
 * float32: as stored), from exact sums: the mean and the population std
 * (divided by count = N*H*W). */
struct ct_channel_stats {
    int c;
    uint64_t count;
    double mean[CT_DATA_MAX_CHANNELS], std[CT_DATA_MAX_CHANNELS];
};
/* Reads every value of an opened image set. CT_ERANGE when count is not in
 * 1 .. 2^48, CT_EFORMAT naming the sample on a non-finite float32. */
int ct_data_channel_stats(const struct ct_dataset *ds, struct ct_channel_stats *out);

/* Whether ds has one class label per sample (a histogram to count). */
int ct_data_has_classes(const struct ct_dataset *ds);
/* count[k] = how many samples have label k, k < ds->n_classes (count holds
 * n_classes entries). CT_EINVAL when ds has no class labels. */
int ct_data_class_counts(const struct ct_dataset *ds, uint64_t *count);

/* A tokens data set's counts over all its shards. */
enum { CT_TOKEN_TOP = 10 };
struct ct_token_stats {
    uint64_t total;           /* tokens in all shards */
    int largest, distinct;    /* the largest token that occurs; how many values occur */
    int ntop;                 /* min(CT_TOKEN_TOP, distinct) */
    int top[CT_TOKEN_TOP];    /* the most frequent, ties to the smaller token */
    uint64_t top_count[CT_TOKEN_TOP];
};
/* CT_EINVAL for another format; CT_ENOMEM. */
int ct_data_token_stats(const struct ct_dataset *ds, struct ct_token_stats *out);

#endif
