/* GELU: the kernels and the module (see gelu.h). Dims legend: N = elements.
 *
 * The element-wise loops call no libm function: glibc's tanhf and erfcf cost
 * 10-25 ns an element here, which would make GELU the slowest layer of a
 * small transformer. Instead exp is evaluated inline (range reduction and a
 * polynomial, branch-free, so that the loops vectorize), the tanh form is
 * written as x * sigmoid(2u), and the normal CDF comes from a polynomial fit
 * of erfc(z) exp(z^2) times that same exp (which backward reuses for the
 * normal density). Accuracy is stated beside each piece and checked by the
 * tests against float64.
 */
#include "nn/gelu.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "nn/fastexp-impl.h"

#define INV_SQRT_2PI 0.398942280f /* 1/sqrt(2 pi) */
#define GELU_K0 0.797884561f      /* sqrt(2/pi) */
#define GELU_K1 0.044715f

/* Phi(x), the normal CDF, and phi(x), its density, through
 *     Phi(-|x|) = erfc(z)/2 = exp(-z^2) Q(t) / 2,   z = |x|/sqrt 2, t = 1/(1 + 0.4 z),
 * Q(t) = erfc(z) exp(z^2) being smooth and bounded in t in (0, 1], and
 * phi(x) = exp(-z^2) / sqrt(2 pi). Q is a degree-9 polynomial whose relative
 * error is 3e-8 on z in [0, 10] (beyond, exp(-z^2) is 0); the coefficients
 * come from this fit (Python 3 with numpy; minimax relative error by least
 * squares on Chebyshev nodes with Lawson reweighting):
 *
 *     t0 = 1 / (1 + 0.4 * 10)
 *     t = (1 + t0) / 2 + (1 - t0) / 2 * np.cos(np.pi * (np.arange(4000) + 0.5) / 4000)
 *     z = (1 / t - 1) / 0.4
 *     q = np.array([math.erfc(v) * math.exp(v * v) for v in z])
 *     V, w = np.vander(t, 10, increasing=True) / q[:, None], np.ones_like(t)
 *     for _ in range(60):
 *         c = np.linalg.lstsq(V * np.sqrt(w)[:, None], np.sqrt(w), rcond=None)[0]
 *         err = np.abs(V @ c - 1)
 *         w *= err / err.sum()
 *
 * In float the result is within ~1e-7 absolute of Phi for x >= 0 and within
 * ~2e-7 + z^2 * 1e-7 relative for x < 0 (the rounding of z^2 in exp), i.e.
 * ~1.3e-6 at x = -4 and 4e-6 at x = -6, where torch's 1 + erf(x/sqrt 2)
 * has already lost 2e-5 and 3e-2 respectively. */
static inline float normal_cdf(float x, float *pdf)
{
    float z2 = 0.5f * (x * x);
    float e = fexp(-z2);
    float t = 1.0f / (1.0f + 0.282842712f * fabsf(x)); /* 0.4 / sqrt 2 */
    float q = 0.0286957454f;
    q = q * t - 0.0747488758f;
    q = q * t - 0.0636867156f;
    q = q * t + 0.27578899f;
    q = q * t - 0.0685675153f;
    q = q * t + 0.26863806f;
    q = q * t + 0.177416191f;
    q = q * t + 0.231355172f;
    q = q * t + 0.225082574f;
    q = q * t + 2.64053128e-05f;
    float tail = 0.5f * e * q, head = 1.0f - tail; /* Phi(-|x|), Phi(|x|) */
    *pdf = e * INV_SQRT_2PI;
    return pick(x < 0.0f, tail, head);
}

/* For the tanh form, 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)),
 * u = k0 (x + k1 x^3): no cancellation for x << 0. Returns the sigmoid s
 * and, in *rest, 1 - s = exp(-2u) s, which is 1 (not inf * 0) when exp(-2u)
 * overflows. */
static inline float gelu_tanh_sigmoid(float x, float *rest)
{
    float u = GELU_K0 * (x + GELU_K1 * (x * x * x));
    float e = fexp(-2.0f * u);
    float s = 1.0f / (1.0f + e), es = e * s;
    *rest = pick(e > 1e30f, 1.0f, es);
    return s;
}

void ct_gelu_forward(float *out, const float *inp, size_t N, enum ct_gelu_approx approx)
{
    if (approx == CT_GELU_APPROX_TANH) {
        for (size_t i = 0; i < N; i++) {
            float rest, x = inp[i];
            out[i] = x * gelu_tanh_sigmoid(x, &rest);
        }
    } else {
        for (size_t i = 0; i < N; i++) {
            float pdf, x = inp[i];
            out[i] = x * normal_cdf(x, &pdf);
        }
    }
}

void ct_gelu_backward(float *dinp, const float *dout, const float *inp, size_t N,
                      enum ct_gelu_approx approx)
{
    if (approx == CT_GELU_APPROX_TANH) {
        /* d/dx x s(2u) = s + x * 2 s (1 - s) u',  u' = k0 (1 + 3 k1 x^2). */
        for (size_t i = 0; i < N; i++) {
            float rest, x = inp[i];
            float s = gelu_tanh_sigmoid(x, &rest);
            float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * (x * x));
            dinp[i] = dout[i] * (s + 2.0f * x * s * rest * du);
        }
    } else {
        /* d/dx x Phi(x) = Phi(x) + x phi(x). */
        for (size_t i = 0; i < N; i++) {
            float pdf, x = inp[i];
            float cdf = normal_cdf(x, &pdf);
            dinp[i] = dout[i] * (cdf + x * pdf);
        }
    }
}

/* ---------------------------------------------------------------- module */

static void gelu_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    ct_gelu_forward(out, inp, (size_t)B * m->in_numel, (enum ct_gelu_approx)(intptr_t)m->ctx);
}

static void gelu_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                     const float *out, int B)
{
    (void)out;
    if (dinp)
        ct_gelu_backward(dinp, dout, inp, (size_t)B * m->in_numel, (enum ct_gelu_approx)(intptr_t)m->ctx);
}

static void gelu_destroy(struct ct_module *m) { (void)m; /* ctx holds the approximation, not memory */ }

static const struct ct_module_ops gelu_ops = {
    .kind = "gelu",
    .forward = gelu_fwd,
    .backward = gelu_bwd,
    .backward_ignores_out = 1,
    /* Elementwise and deterministic: inside a residual block its output
     * (a GPT MLP's 4C a token) is recomputed in backward instead of kept. */
    .forward_recomputable = 1,
    .destroy = gelu_destroy,
};

struct ct_module *ct_gelu_new(size_t numel, int tanh_approx)
{
    struct ct_module *m = ct_module_alloc(&gelu_ops, numel, numel, 0);
    if (m)
        m->ctx = (void *)(intptr_t)(tanh_approx ? CT_GELU_APPROX_TANH : CT_GELU_APPROX_NONE);
    return m;
}
