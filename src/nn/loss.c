/* Fused softmax + cross-entropy (see loss.h). */
#include "nn/loss.h"

#include <math.h>
#include <stddef.h>

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
        double sum = 0.0;
        for (int k = 0; k < K; k++)
            sum += exp((double)row[k] - mx);
        total += log(sum) + mx - (double)row[y[b]];
        hits += arg == y[b];
        if (dlogits) {
            float *drow = dlogits + (size_t)b * K;
            double inv = 1.0 / sum;
            for (int k = 0; k < K; k++) {
                double p = exp((double)row[k] - mx) * inv;
                drow[k] = (float)((p - (k == y[b])) * grad_scale);
            }
        }
    }
    if (correct)
        *correct = hits;
    return total;
}
