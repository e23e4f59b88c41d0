/* Fused softmax + cross-entropy (see loss.h).
 *
 * exp is fastexp-impl.h's inline one (within ~2 ulp, no libm call), so the
 * row loops vectorize: a GPT-2 head's rows are 50,304 logits, and glibc's
 * double exp, twice an element, was a tenth of that model's step. The sum
 * of a row's exps runs in double over 16 explicit lanes (the source fixes
 * the order, so every vector width gives the same bits); the exps are kept
 * in dlogits between the two passes instead of being computed again. */
#include "nn/loss.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/simd.h"
#include "nn/fastexp-impl.h"

enum { LANES = 16 };

/* sum_k exp(row[k] - mx) in double. */
CT_VECTOR_CLONES
static double row_sum_exp(const float *row, int K, float mx)
{
    double lane[LANES] = {0};
    int k = 0;
    for (; k + LANES <= K; k += LANES)
        for (int j = 0; j < LANES; j++)
            lane[j] += fexp(row[k + j] - mx);
    for (; k < K; k++)
        lane[k % LANES] += fexp(row[k] - mx);
    double sum = 0.0;
    for (int j = 0; j < LANES; j++)
        sum += lane[j];
    return sum;
}

/* row[k] = exp(row[k] - mx) in place; returns their sum, in row_sum_exp's
 * lanes and order (the same bits). */
CT_VECTOR_CLONES
static double row_exp_inplace(float *row, int K, float mx)
{
    double lane[LANES] = {0};
    int k = 0;
    for (; k + LANES <= K; k += LANES)
        for (int j = 0; j < LANES; j++) {
            const float v = fexp(row[k + j] - mx);
            row[k + j] = v;
            lane[j] += v;
        }
    for (; k < K; k++) {
        row[k] = fexp(row[k] - mx);
        lane[k % LANES] += row[k];
    }
    double sum = 0.0;
    for (int j = 0; j < LANES; j++)
        sum += lane[j];
    return sum;
}

/* d[k] = d[k] * s, in place (d holds the exps). */
CT_VECTOR_CLONES
static void row_scale(float *d, int K, float s)
{
    for (int k = 0; k < K; k++)
        d[k] *= s;
}

double ct_xent_forward_backward(float *dlogits, const float *logits, const int32_t *y, int B,
                                int K, float grad_scale, int64_t *correct)
{
    double total = 0.0;
    int64_t hits = 0;
    for (int b = 0; b < B; b++) {
        const float *row = logits + (size_t)b * K;
        int arg = 0;
        float mx = row[0];
        for (int k = 1; k < K; k++)
            if (row[k] > mx) {
                mx = row[k];
                arg = k;
            }
        float *drow = dlogits ? dlogits + (size_t)b * K : NULL;
        const float target = row[y[b]]; /* read before an in-place drow overwrites it */
        /* The largest exp is exactly 1: sum in [1, K]. */
        if (drow && drow != row)
            memcpy(drow, row, (size_t)K * sizeof *drow); /* then in place, as in training */
        const double sum = drow ? row_exp_inplace(drow, K, mx) : row_sum_exp(row, K, mx);
        total += log(sum) + mx - (double)target;
        hits += arg == y[b];
        if (drow) {
            /* (p - onehot) * grad_scale, p = exp / sum. */
            const float inv = (float)(1.0 / sum);
            const float py = drow[y[b]] * inv;
            row_scale(drow, K, inv * grad_scale);
            drow[y[b]] = (py - 1.0f) * grad_scale;
        }
    }
    if (correct)
        *correct = hits;
    return total;
}
