/* Softmax over the last dimension, as torch.softmax(x, dim=-1): plain
 * kernels over raw buffers (attention.c has its own, with the causal mask; predictions
 * use this). Dims legend: N = rows, D = row length. */
#ifndef CT_NN_SOFTMAX_H
#define CT_NN_SOFTMAX_H

/* Row-wise softmax over the last dimension, stable for any finite input
 * (the row maximum is subtracted before exp). out (N, D) may alias inp.
 * A row of all -inf gives NaN, as in torch. */
void ct_softmax_forward(float *out, const float *inp, int N, int D);
/* dinp = out * (dout - sum(dout * out)) per row; dinp (N, D) may alias dout. */
void ct_softmax_backward(float *dinp, const float *dout, const float *out, int N, int D);

#endif
