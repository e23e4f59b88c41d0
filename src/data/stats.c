/* Exact sums, per-channel moments, class and token counts of a data set
 * (data/stats.h). Nothing here prints. */
#include "data/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/tokens.h"

/* ------------------------------------------------------------ exact sums */

void ct_xsum_init(struct ct_xsum *s)
{
    s->n = 0;
}

void ct_xsum_add(struct ct_xsum *s, double x)
{
    int k = 0;
    for (int j = 0; j < s->n; j++) {
        double y = s->p[j];
        if (fabs(x) < fabs(y)) {
            const double t = x;
            x = y;
            y = t;
        }
        const double hi = x + y;
        const double lo = y - (hi - x); /* exact: the bits of x + y that hi dropped */
        if (lo != 0.0)
            s->p[k++] = lo;
        x = hi;
    }
    if (k < CT_XSUM_MAX) /* k <= the bound of stats.h; never false for float32 terms */
        s->p[k++] = x;
    s->n = k;
}

double ct_xsum_value(const struct ct_xsum *s)
{
    int n = s->n;
    if (n == 0)
        return 0.0;
    double hi = s->p[--n], lo = 0.0;
    while (n > 0) {
        const double x = hi, y = s->p[--n];
        hi = x + y;
        lo = y - (hi - x);
        if (lo != 0.0)
            break;
    }
    /* Round half to even across the partials: if the remainder below lo has
     * the same sign, the tie goes the other way. */
    if (n > 0 && ((lo < 0.0 && s->p[n - 1] < 0.0) || (lo > 0.0 && s->p[n - 1] > 0.0))) {
        const double y = lo * 2.0, x = hi + y;
        if (y == x - hi)
            hi = x;
    }
    return hi;
}

/* ------------------------------------------------------------ channels */

struct channel_sums {
    /* uint8: sum of v and of v^2 over the channel's N*HW values, exact in
     * integers (s1 <= 255 * count, s2 <= 65025 * count, count <= 2^48). */
    unsigned __int128 s1, s2;
    /* float32: the same sums, as exact expansions. */
    struct ct_xsum x1, x2;
};

/* One sample's values of every channel, in either layout, into the sums. */
static int add_sample(struct channel_sums *cs, const struct ct_dataset *ds, size_t i)
{
    const void *src = ds->ops->sample(ds, i);
    const size_t HW = (size_t)ds->h * ds->w, C = (size_t)ds->c;
    const int nchw = ds->layout == CT_DATA_LAYOUT_NCHW;
    for (size_t c = 0; c < C; c++) {
        const size_t first = nchw ? c * HW : c, step = nchw ? 1 : C;
        if (ds->dtype == CT_DATA_U8) {
            const uint8_t *v = (const uint8_t *)src + first;
            uint64_t a1 = 0, a2 = 0; /* one sample: HW * 65025 fits easily */
            for (size_t k = 0; k < HW; k++) {
                const uint64_t b = v[k * step];
                a1 += b;
                a2 += b * b;
            }
            cs[c].s1 += a1;
            cs[c].s2 += a2;
        } else {
            const float *v = (const float *)src + first;
            for (size_t k = 0; k < HW; k++) {
                const double x = v[k * step];
                if (!isfinite(x))
                    return ct_error_set(CT_EFORMAT, "%s: sample %zu holds a non-finite value (%g)",
                                        ds->files[0], i, x);
                ct_xsum_add(&cs[c].x1, x);
                ct_xsum_add(&cs[c].x2, x * x); /* exact: 24-bit significand squared */
            }
        }
    }
    return 0;
}

/* Mean and population std (divided by count = N*HW) of one channel, scaled
 * as training scales the values (uint8: v/255). */
static void channel_moments(const struct channel_sums *cs, int dtype_u8, uint64_t count, double *mean,
                            double *std)
{
    if (dtype_u8) {
        /* mean = s1 / (255 n): the exact integer sum, one division.
         * var = (n s2 - s1^2) / (255^2 n^2): the numerator exact in 128-bit
         * integers (no cancellation can happen in floating point), one
         * division. Both in long double (64-bit significands on x86-64), so
         * that the doubles are the correctly rounded ones (but for a rare
         * double rounding), not a few ulps off. */
        const long double nl = (long double)count;
        *mean = (double)((long double)cs->s1 / (255.0L * nl));
        const unsigned __int128 num = (unsigned __int128)count * cs->s2 - cs->s1 * cs->s1;
        *std = (double)sqrtl((long double)num / (65025.0L * nl * nl));
        return;
    }
    /* float32: S1 and S2 are exact until rounded once each; var = S2/n -
     * mean^2 then loses at most a few ulps of (mean^2 + var) / var, far
     * below the digits printed for any data whose std is not tiny next to
     * its mean. */
    const double n = (double)count, s1 = ct_xsum_value(&cs->x1), s2 = ct_xsum_value(&cs->x2);
    *mean = s1 / n;
    const double var = s2 / n - *mean * *mean;
    *std = sqrt(var > 0.0 ? var : 0.0);
}

int ct_data_channel_stats(const struct ct_dataset *ds, struct ct_channel_stats *out)
{
    const size_t C = (size_t)ds->c;
    const uint64_t count = (uint64_t)ds->n * (uint64_t)ds->h * (uint64_t)ds->w;
    memset(out, 0, sizeof *out);
    if (count == 0 || count > ((uint64_t)1 << 48))
        return ct_error_set(CT_ERANGE, "%s: %llu values per channel: expected 1 .. 2^48",
                            ds->files[0], (unsigned long long)count);
    struct channel_sums *cs = calloc(C, sizeof *cs);
    if (!cs)
        return ct_error_set(CT_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ds->n; i++)
        rc = add_sample(cs, ds, i);
    if (rc == 0) {
        out->c = ds->c;
        out->count = count;
        for (size_t c = 0; c < C; c++)
            channel_moments(&cs[c], ds->dtype == CT_DATA_U8, count, &out->mean[c], &out->std[c]);
    }
    free(cs);
    return rc;
}

/* ------------------------------------------------------------ classes */

int ct_data_has_classes(const struct ct_dataset *ds)
{
    return ds->targets == 1 && ds->y;
}

int ct_data_class_counts(const struct ct_dataset *ds, uint64_t *count)
{
    if (!ct_data_has_classes(ds))
        return ct_error_set(CT_EINVAL, "%s: no class labels to count", ds->files[0]);
    memset(count, 0, (size_t)ds->n_classes * sizeof *count);
    for (size_t i = 0; i < ds->n; i++)
        count[ds->y[i]]++;
    return 0;
}

/* ------------------------------------------------------------ tokens */

/* The CT_TOKEN_TOP most frequent of count[], ties to the smaller token: a
 * selection over the table, CT_TOKEN_TOP passes. */
static void top_tokens(const uint64_t *count, struct ct_token_stats *st)
{
    for (st->ntop = 0; st->ntop < CT_TOKEN_TOP && st->ntop < st->distinct; st->ntop++) {
        int best = -1;
        for (int v = 0; v < CT_DATA_MAX_TARGET; v++) {
            int taken = 0;
            for (int k = 0; k < st->ntop; k++)
                taken |= st->top[k] == v;
            if (count[v] && !taken && (best < 0 || count[v] > count[best]))
                best = v;
        }
        st->top[st->ntop] = best;
        st->top_count[st->ntop] = count[best];
    }
}

int ct_data_token_stats(const struct ct_dataset *ds, struct ct_token_stats *out)
{
    memset(out, 0, sizeof *out);
    if (ds->format != CT_DATA_FORMAT_TOKENS)
        return ct_error_set(CT_EINVAL, "%s: not a tokens data set", ds->files[0]);
    uint64_t *count = calloc(CT_DATA_MAX_TARGET, sizeof *count);
    if (!count)
        return ct_error_set(CT_ENOMEM, "out of memory for %d token counts", CT_DATA_MAX_TARGET);
    size_t ntok, nwin;
    const uint16_t *tok;
    for (int s = 0; (tok = ct_tokens_shard(ds, s, &ntok, &nwin)); s++) {
        for (size_t k = 0; k < ntok; k++)
            count[tok[k]]++;
        out->total += ntok;
    }
    for (int v = 0; v < CT_DATA_MAX_TARGET; v++)
        if (count[v]) {
            out->largest = v;
            out->distinct++;
        }
    top_tokens(count, out);
    free(count);
    return 0;
}
