/* Text from a language-model checkpoint: `ctrain-dist generate`.
 *
 * Dims legend: T = the model's context (model.block), V = its vocabulary.
 *
 * The checkpoint's gpt is built from its recorded config (no data files;
 * V is its token embedding's shape), restored, and run in eval mode on one
 * row; the logits at the context's last position give the next token:
 * divided by the temperature (0: the argmax), cut to the top_k largest
 * (ties to the lower id), softmax in double, sampled at a uniform from Philox keyed (seed,
 * CT_RNG_GENERATE) with counter (i, 0, 0), so the same seed gives the same
 * text wherever the model computes the same bits. Output is UTF-8 (invalid
 * bytes as U+FFFD) for byte vocabularies and for data.tokenizer's GPT-2 BPE
 * (its files must have the SHA-256 the checkpoint recorded; the prompt is
 * encoded with it; ids past its vocabulary, a padded embedding's, are never
 * sampled), token ids otherwise. The exact rules: docs/models.md.
 *
 *     struct ct_generate_params p = {.prompt = "Call me", .n = 300, .temperature = 0.8,
 *                                    .top_k = 40, .seed = 0, .out = stdout};
 *     rc = ct_generate(ck, &cfg, &p);   // cfg: the checkpoint's recorded config
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
 * vocabulary other than bytes without a tokenizer; CT_EMISMATCH for a
 * tokenizer whose files are not the recorded ones; CT_ERANGE for logits that are not finite;
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
