/* Row-wise softmax kernels (see softmax.h). Dims legend: N = rows, D = row
 * length. exp is fastexp-impl.h's inline one (no libm call), as in GELU. */
#include "nn/softmax.h"

#include <math.h>
#include <stddef.h>

#include "nn/fastexp-impl.h"

void ct_softmax_forward(float *out, const float *inp, int N, int D)
{
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * D;
        float *y = out + (size_t)r * D;
        float mx = -INFINITY;
        for (int i = 0; i < D; i++)
            mx = x[i] > mx ? x[i] : mx;
        /* Every exp is <= 1 and the largest is exactly 1, so the sum is in
         * [1, D]: no overflow, no division by a tiny number. A row of -inf
         * has mx - mx = NaN, as torch. */
        for (int i = 0; i < D; i++)
            y[i] = fexp(x[i] - mx);
        double sum = 0;
        for (int i = 0; i < D; i++)
            sum += y[i];
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < D; i++)
            y[i] *= inv;
    }
}

void ct_softmax_backward(float *dinp, const float *dout, const float *out, int N, int D)
{
    for (int r = 0; r < N; r++) {
        const float *dy = dout + (size_t)r * D, *y = out + (size_t)r * D;
        float *dx = dinp + (size_t)r * D;
        double dot = 0;
        for (int i = 0; i < D; i++)
            dot += (double)dy[i] * y[i];
        const float d = (float)dot;
        for (int i = 0; i < D; i++)
            dx[i] = y[i] * (dy[i] - d);
    }
}
