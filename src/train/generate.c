/* Text from a language-model checkpoint (see generate.h). */
#include "train/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "data/bpe.h"
#include "data/dataset.h"
#include "models/models.h"
#include "train/spec.h"
#include "train/state.h"

/* ------------------------------------------------------------- UTF-8 */

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* The second byte's range depends on the lead (no overlong forms, no
 * surrogates, nothing above U+10FFFF); later ones are 80..BF. */
static int second_ok(unsigned char lead, unsigned char b)
{
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
    }
}

int ct_utf8_put(struct ct_utf8 *d, unsigned char byte, FILE *out)
{
    int w = 0;
    if (d->n > 0) {
        int ok = d->n == 1 ? second_ok(d->pending[0], byte) : byte >= 0x80 && byte <= 0xBF;
        if (ok) {
            d->pending[d->n++] = byte;
            if (d->n < d->need)
                return 0;
            fwrite(d->pending, 1, (size_t)d->n, out);
            w = d->n;
            d->n = 0;
            return w;
        }
        /* The held bytes are a maximal ill-formed subpart; this byte starts afresh. */
        fputs(replacement, out);
        w = 3;
        d->n = 0;
    }
    if (byte < 0x80) {
        fputc(byte, out);
        return w + 1;
    }
    int need = byte >= 0xC2 && byte <= 0xDF ? 2 : byte >= 0xE0 && byte <= 0xEF ? 3
             : byte >= 0xF0 && byte <= 0xF4 ? 4 : 0;
    if (!need) { /* a stray continuation byte, C0, C1 or F5..FF */
        fputs(replacement, out);
        return w + 3;
    }
    d->pending[0] = byte;
    d->n = 1;
    d->need = need;
    return w;
}

int ct_utf8_flush(struct ct_utf8 *d, FILE *out)
{
    if (d->n == 0)
        return 0;
    d->n = 0;
    fputs(replacement, out);
    return 3;
}

/* ---------------------------------------------------------- sampling */

double ct_generate_uniform(uint64_t seed, int64_t i)
{
    uint32_t r[4];
    ct_rng_block(ct_rng_key(seed, CT_RNG_GENERATE),
                 (const uint32_t[4]){(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 0}, r);
    return ((double)(r[0] >> 5) * 67108864.0 + (double)(r[1] >> 6)) * (1.0 / 9007199254740992.0);
}

static int desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

int ct_sample_logits(const float *logits, int V, double temperature, int top_k, double u,
                     double *work)
{
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = v;
    if (temperature == 0.0 || top_k == 1)
        return best;
    double *p = work, *sorted = work + V;
    /* The k-th largest logit, and how many equal to it are kept (the
     * lowest ids first): exactly k tokens survive. */
    double cut = -INFINITY;
    int at_cut = V;
    if (top_k > 0 && top_k < V) {
        for (int v = 0; v < V; v++)
            sorted[v] = logits[v];
        qsort(sorted, (size_t)V, sizeof *sorted, desc);
        cut = sorted[top_k - 1];
        int above = 0;
        for (int v = 0; v < V; v++)
            above += logits[v] > cut;
        at_cut = top_k - above;
    }
    const double m = logits[best];
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        int keep = logits[v] > cut || (logits[v] == cut && at_cut-- > 0);
        p[v] = keep ? exp(((double)logits[v] - m) / temperature) : 0.0;
        sum += p[v];
    }
    const double target = u * sum;
    double acc = 0.0;
    int last = best;
    for (int v = 0; v < V; v++) {
        if (p[v] == 0.0)
            continue;
        acc += p[v];
        last = v;
        if (acc > target)
            return v;
    }
    return last; /* u * sum rounded up to the total */
}

/* ------------------------------------------------------------ generate */

/* The vocabulary: rows of the token embedding (the data files need not be
 * at hand). */
static int vocabulary(const struct ct_ckpt *ck, int *V)
{
    const char *suffix = ".wte.weight";
    for (int i = 0; i < ct_ckpt_n_sections(ck); i++) {
        struct ct_ckpt_section s;
        if (ct_ckpt_section_at(ck, i, &s) < 0)
            continue;
        size_t n = strlen(s.name), k = strlen(suffix);
        if (n > k && strcmp(s.name + n - k, suffix) == 0 && s.ndim == 2 && s.shape[0] >= 2 &&
            s.shape[0] <= CT_DATA_MAX_TARGET) {
            *V = (int)s.shape[0];
            return 0;
        }
    }
    return ct_error_set(CT_EFORMAT, "%s: no token embedding (*%s) among the checkpoint's tensors",
                        ck->dir, suffix);
}

/* The checks that need no model: what the checkpoint holds, the numbers,
 * and a prompt the vocabulary can spell. */
static int check(const struct ct_ckpt *ck, const struct ct_config *cfg,
                 const struct ct_generate_params *p, int *V)
{
    if (strcmp(cfg->model.name, "gpt") != 0)
        return ct_error_set(CT_EINVAL, "generate needs a language model; %s holds a %s", ck->dir,
                            cfg->model.name);
    if (p->n < 0)
        return ct_error_set(CT_EINVAL, "generate: -n %lld: expected a count >= 0", (long long)p->n);
    if (!(p->temperature >= 0.0) || !isfinite(p->temperature))
        return ct_error_set(CT_EINVAL, "generate: --temperature %g: expected a number >= 0",
                            p->temperature);
    if (p->top_k < 0)
        return ct_error_set(CT_EINVAL, "generate: --top-k %d: expected a count >= 0 (0 = all)",
                            p->top_k);
    int rc = vocabulary(ck, V);
    if (rc == 0 && p->prompt && *p->prompt && *V != 256 && !cfg->data.tokenizer[0])
        rc = ct_error_set(CT_EINVAL, "generate: --prompt is text, one token per byte, but the model "
                          "in %s has a vocabulary of %d tokens (a byte model has 256) and no "
                          "data.tokenizer; leave the prompt out to start from token 10", ck->dir, *V);
    return rc;
}

/* Appends a token to the context, dropping the oldest when it holds T. */
static void push(int *ctx, int *L, int T, int token)
{
    if (*L == T) {
        for (int t = 1; t < T; t++)
            ctx[t - 1] = ctx[t];
        --*L;
    }
    ctx[(*L)++] = token;
}

/* data.tokenizer: its files as the checkpoint recorded them (the same
 * SHA-256, or the text would be another vocabulary's), loaded. */
static int open_tokenizer(const struct ct_ckpt *ck, const struct ct_config *cfg, struct ct_bpe **b)
{
    *b = NULL;
    const char *names[2] = {CT_BPE_ENCODER_FILE, CT_BPE_MERGES_FILE};
    for (int k = 0; k < 2; k++) {
        char path[CT_CONFIG_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/%s", cfg->data.tokenizer, names[k]);
        struct ct_ckpt_data_file rec;
        uint8_t now[CT_SHA256_LEN];
        int rc = ct_ckpt_find_data_file(ck, path, &rec);
        if (rc == CT_ENOENT)
            return ct_error_set(CT_EMISMATCH, "generate: %s records no tokenizer file %s (data.tokenizer "
                                "= %s): its training did not use it", ck->dir, path, cfg->data.tokenizer);
        if (rc < 0 || (rc = ct_sha256_file(path, now)) < 0)
            return rc;
        if (memcmp(now, rec.sha256, CT_SHA256_LEN) != 0)
            return ct_error_set(CT_EMISMATCH, "generate: %s: its SHA-256 differs from the one %s "
                                "recorded: another tokenizer than the model was trained with", path,
                                ck->dir);
    }
    int rc = ct_bpe_load(b, cfg->data.tokenizer);
    return rc < 0 ? ct_error_wrap(rc, "generate: data.tokenizer") : 0;
}

/* One token out: bytes (a byte vocabulary's, or the tokenizer's) through the
 * UTF-8 check, other vocabularies as ids; flushed at once, so the text
 * streams. */
static void emit(struct ct_utf8 *u, const struct ct_bpe *b, int V, int token, FILE *out)
{
    size_t n;
    const char *bytes = b ? ct_bpe_token(b, token, &n) : NULL;
    if (bytes)
        for (size_t i = 0; i < n; i++)
            ct_utf8_put(u, (unsigned char)bytes[i], out);
    else if (V <= 256)
        ct_utf8_put(u, (unsigned char)token, out);
    else
        fprintf(out, "%d ", token);
    fflush(out);
}

/* The prompt's tokens into the context (its bytes, or the tokenizer's
 * ids), echoed; '\n' when there is none. */
static int prompt_in(const struct ct_generate_params *p, const struct ct_bpe *b, int V, int *ctx, int *L,
                     int T, struct ct_utf8 *u)
{
    const size_t plen = p->prompt ? strlen(p->prompt) : 0;
    struct ct_bpe_ids ids = {0};
    int rc = b && plen ? ct_bpe_encode(b, p->prompt, plen, &ids) : 0;
    const size_t n = b ? ids.n : plen;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const int t = b ? ids.v[i] : (unsigned char)p->prompt[i];
        if (t >= V)
            rc = ct_error_set(CT_EINVAL, "generate: the prompt's token %d is past the model's "
                              "vocabulary (%d)", t, V);
        else {
            push(ctx, L, T, t);
            emit(u, b, V, t, p->out);
        }
    }
    ct_bpe_ids_free(&ids);
    if (rc == 0 && *L == 0)
        push(ctx, L, T, b && ct_bpe_eot(b) >= 0 && ct_bpe_eot(b) < V ? ct_bpe_eot(b) : '\n');
    return rc;
}

/* The model of the checkpoint, built for one row and restored, in eval mode. */
static int load_model(struct ct_model *m, const struct ct_ckpt *ck, const struct ct_config *cfg,
                      int V)
{
    struct ct_model_spec ms;
    ct_spec_model(cfg, &(struct ct_data_shape){1, 1, cfg->model.block, V}, &ms);
    memset(m, 0, sizeof *m);
    int rc = ct_model_build(m, &ms, 1);
    if (rc < 0)
        return ct_error_wrap(rc, "%s", ck->dir);
    if ((rc = ct__model_restore(m, ck)) < 0)
        return rc;
    ct_model_set_training(m, 0);
    m->fwd.sample_index = NULL;
    return 0;
}


int ct_generate(const struct ct_ckpt *ck, const struct ct_config *cfg,
                const struct ct_generate_params *p)
{
    int V = 0, rc = check(ck, cfg, p, &V);
    if (rc < 0)
        return rc;
    struct ct_bpe *bpe = NULL;
    if (cfg->data.tokenizer[0] && (rc = open_tokenizer(ck, cfg, &bpe)) < 0)
        return rc;
    /* A vocabulary padded past the tokenizer's (for speed) never samples
     * the padding. */
    const int Vs = bpe && ct_bpe_vocab(bpe) < V ? ct_bpe_vocab(bpe) : V;
    struct ct_model m;
    if ((rc = load_model(&m, ck, cfg, V)) < 0)
        goto out;
    const int T = cfg->model.block;
    /* The context: the last <= T tokens, oldest first, at ctx[0..L-1]. */
    int *ctx = malloc((size_t)T * sizeof *ctx);
    double *work = malloc(2 * (size_t)V * sizeof *work);
    if (!ctx || !work) {
        rc = ct_error_set(CT_ENOMEM, "generate: out of memory for a context of %d tokens", T);
        goto out_free;
    }
    int L = 0;
    struct ct_utf8 u = {0};
    if ((rc = prompt_in(p, bpe, V, ctx, &L, T, &u)) < 0)
        goto out_free;
    float *x = ct_model_input(&m);
    for (int64_t i = 0; i < p->n; i++) {
        for (int t = 0; t < T; t++)
            x[t] = t < L ? (float)ctx[t] : 0.0f;
        const float *logits = ct_model_forward(&m, 1);
        if ((rc = m.fwd.status) < 0)
            goto out_free;
        const float *row = logits + (size_t)(L - 1) * V;
        for (int v = 0; v < V; v++)
            if (!isfinite(row[v])) {
                rc = ct_error_set(CT_ERANGE, "generate: %s: logit %d of token %lld is %g (the "
                                  "model's weights are not usable)", ck->dir, v, (long long)i,
                                  (double)row[v]);
                goto out_free;
            }
        const int next = ct_sample_logits(row, Vs, p->temperature, p->top_k,
                                           ct_generate_uniform(p->seed, i), work);
        push(ctx, &L, T, next);
        emit(&u, bpe, V, next, p->out);
    }
    ct_utf8_flush(&u, p->out);
    if (fflush(p->out) != 0 || ferror(p->out))
        rc = ct_error_set(CT_EIO, "generate: writing the text failed");
out_free:
    free(ctx);
    free(work);
out:
    ct_model_free(&m);
    ct_bpe_free(bpe);
    return rc;
}
