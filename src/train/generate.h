/* Text from a language-model checkpoint: `ctrain-dist generate`.
 *
 * Dims legend: T = the model's context (model.block), V = its vocabulary.
 *
 * The checkpoint's gpt is built from its recorded config (no data files are
 * read: V is the shape of its token embedding), its parameters restored, and
 * run in eval mode on one row: the context is the last <= T tokens at
 * positions 0..L-1 (the rest of the row zero: the attention is causal, so
 * they change nothing at L-1), and the logits at L-1 give the next token:
 *
 *     divided by the temperature (0: the argmax, first maximum), cut to the
 *     top_k largest (0: all; ties to the lower id), softmax in double, and
 *     sampled by inverting the cumulative sum at u in [0, 1), u drawn from
 *     Philox keyed (seed, CT_RNG_GENERATE) with counter (i, 0, 0) for the
 *     i-th token (0-based)
 *
 * so the same seed gives the same text wherever the model computes the
 * same bits. The prompt's bytes are its first tokens (byte vocabularies,
 * V = 256); an empty prompt starts from a newline (byte 10), not printed.
 * Output is UTF-8: bytes that do not form valid UTF-8 are written as U+FFFD,
 * one per maximal ill-formed subpart (as Unicode's "substitution of maximal
 * subparts" and Python's decode(errors="replace")), the stream decoded as a
 * whole (a character split across tokens is one character); a model with a
 * vocabulary larger than bytes prints token ids, separated by spaces. The
 * context is kept, not the whole text, so -n costs no memory.
 */
#ifndef CT_TRAIN_GENERATE_H
#define CT_TRAIN_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "config/config.h"

struct ct_generate_params {
    const char *prompt;  /* NULL or "": start from '\n' */
    int64_t n;           /* tokens to generate, >= 0 */
    double temperature;  /* >= 0; 0 = greedy */
    int top_k;           /* >= 0; 0 = no cut */
    uint64_t seed;
    FILE *out;           /* the prompt, then each token as it comes (flushed per token);
                            exactly the text, no newline added */
};

/* cfg: the checkpoint's config (ct_config_load_text of ct_ckpt_config_text).
 * Errors: CT_EINVAL for a checkpoint that holds no gpt ("generate needs a
 * language model; CKPT holds a cnn"), bad parameters or a prompt for a
 * vocabulary other than bytes; CT_ERANGE for logits that are not finite;
 * CT_EIO when out fails. */
int ct_generate(const struct ct_ckpt *ck, const struct ct_config *cfg,
                const struct ct_generate_params *p);

/* The sampling rule above for one row of V logits and a uniform u in
 * [0, 1); work holds 2 V doubles. Returns the token. */
int ct_sample_logits(const float *logits, int V, double temperature, int top_k, double u,
                     double *work);

/* The uniform of the i-th token: 53 random bits of Philox (seed,
 * CT_RNG_GENERATE), counter (i lo, i hi, 0, 0). */
double ct_generate_uniform(uint64_t seed, int64_t i);

/* A streaming UTF-8 validator: bytes in, valid UTF-8 out, U+FFFD for each
 * maximal ill-formed subpart. */
struct ct_utf8 {
    unsigned char pending[4];
    int n;    /* bytes held of an incomplete sequence */
    int need; /* its total length */
};
/* Writes what `byte` completes (0, 1 or more characters) to out; returns
 * the bytes written. */
int ct_utf8_put(struct ct_utf8 *d, unsigned char byte, FILE *out);
/* An incomplete sequence at the end becomes one U+FFFD. */
int ct_utf8_flush(struct ct_utf8 *d, FILE *out);

#endif
