/* Test-set predictions (see predict.h). */
#include "train/predict.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/liveness.h"
#include "core/path.h"
#include "data/sampler.h"
#include "nn/softmax.h"
#include "nn/loss.h"
#include "parallel/reprosum.h"

void ct_predictions_free(struct ct_predictions *p)
{
    free(p->probs);
    free(p->predicted);
    free(p->labels);
    free(p->confusion);
    memset(p, 0, sizeof *p);
}

static int alloc_predictions(struct ct_predictions *p, size_t n, int C, int K, int per_sample)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->n_classes = C;
    p->targets = K;
    /* A confusion matrix of a vocabulary (50257^2 for GPT-2's) is neither
     * affordable nor read by anyone: class labels only. */
    p->confusion = calloc(K == 1 ? (size_t)C * (size_t)C : 1, sizeof *p->confusion);
    if (per_sample) {
        p->probs = calloc(n * (size_t)C, sizeof *p->probs);
        p->predicted = calloc(n, sizeof *p->predicted);
        p->labels = calloc(n, sizeof *p->labels);
    }
    if (!p->confusion || (per_sample && (!p->probs || !p->predicted || !p->labels))) {
        ct_predictions_free(p);
        return ct_error_set(CT_ENOMEM, "predictions of %zu samples: out of memory", n);
    }
    return 0;
}

/* This rank's shard: forward in eval mode, softmax, argmax, counts; with
 * `losses`, each sample's loss too (a call over one sample's K rows gives
 * exactly the terms the batched call adds). With K targets per sample
 * (tokens) every position counts: sums are over the B*K targets, and the
 * per-sample outputs (confusion, probs) are for class labels only. */
static void predict_shard(struct ct_session *s, size_t first, size_t count, float *probs_rows,
                          struct ct_predictions *p, double sums[3], double *losses)
{
    struct ct_model *m = &s->model;
    const int C = p->n_classes, K = p->targets;
    const size_t eb = (size_t)s->batches.eval_batch, CK = (size_t)C * (size_t)K;
    for (size_t off = 0; off < count; off += eb) {
        int B = (int)(count - off < eb ? count - off : eb);
        ct_dataset_gather_range(&s->test, first + off, (size_t)B, ct_model_input(m), s->eval_labels);
        const float *logits = ct_model_forward(m, B);
        int64_t hits = 0;
        sums[0] += ct_xent_forward_backward(NULL, logits, s->eval_labels, B * K, C, 0.0f, &hits);
        sums[1] += (double)hits;
        sums[2] += (double)B * K;
        for (int b = 0; b < B && losses; b++)
            losses[off + (size_t)b] = ct_xent_forward_backward(
                NULL, logits + (size_t)b * CK, s->eval_labels + (size_t)b * K, K, C, 0.0f, NULL);
        for (int b = 0; b < B && K == 1; b++) {
            const float *z = logits + (size_t)b * (size_t)C;
            int best = 0;
            for (int k = 1; k < C; k++)
                if (z[k] > z[best])
                    best = k;
            p->confusion[(size_t)s->eval_labels[b] * (size_t)C + (size_t)best]++;
            if (probs_rows) {
                size_t row = first + off + (size_t)b;
                p->predicted[row] = best;
                p->labels[row] = s->eval_labels[b];
            }
        }
        if (probs_rows)
            ct_softmax_forward(probs_rows + (off * (size_t)C), logits, B, C);
        ct_liveness_mark(-1); /* a long evaluation is not a hang */
    }
}

/* Every rank filled only its own rows (the others are zero): a sum combines
 * them exactly. */
static int combine(struct ct_session *s, struct ct_predictions *p, double sums[3])
{
    struct ct_comm *c = s->comm;
    const int C = p->n_classes;
    int rc = p->targets == 1 ? ct_comm_allreduce_i64(c, p->confusion, (size_t)C * (size_t)C, CT_REDUCE_SUM) : 0;
    if (rc == 0)
        rc = ct_comm_allreduce_f64(c, sums, 3, CT_REDUCE_SUM);
    if (rc == 0 && p->probs) {
        size_t n = p->n * (size_t)C;
        double *tmp = malloc((n > p->n ? n : p->n) * sizeof *tmp);
        if (!tmp)
            return ct_error_set(CT_ENOMEM, "predictions: out of memory");
        for (size_t i = 0; i < n; i++)
            tmp[i] = p->probs[i];
        rc = ct_comm_allreduce_f64(c, tmp, n, CT_REDUCE_SUM);
        for (size_t i = 0; rc == 0 && i < n; i++)
            p->probs[i] = (float)tmp[i]; /* float -> double -> float: exact */
        for (int which = 0; rc == 0 && which < 2; which++) {
            int32_t *v = which ? p->labels : p->predicted;
            for (size_t i = 0; i < p->n; i++)
                tmp[i] = v[i];
            rc = ct_comm_allreduce_f64(c, tmp, p->n, CT_REDUCE_SUM);
            for (size_t i = 0; rc == 0 && i < p->n; i++)
                v[i] = (int32_t)tmp[i];
        }
        free(tmp);
    }
    return rc;
}

int ct_session_predict(struct ct_session *s, int per_sample, struct ct_predictions *p)
{
    struct ct_model *m = &s->model;
    size_t first, count;
    ct_shard_range(s->test.n, s->comm->world, s->comm->rank, &first, &count);
    if (per_sample && s->test.targets != 1)
        return ct_error_set(CT_EINVAL, "per-sample predictions are for class labels; this model "
                            "predicts %d tokens per sample (use eval)", s->test.targets);
    int rc = alloc_predictions(p, s->test.n, s->n_classes, s->test.targets, per_sample);
    double *losses = NULL;
    if (rc == 0 && s->batches.deterministic && !(losses = malloc((count ? count : 1) * sizeof *losses)))
        rc = ct_error_set(CT_ENOMEM, "evaluation: out of memory for %zu losses", count);
    rc = ct_comm_agree(s->comm, rc);
    if (rc < 0) {
        free(losses);
        ct_predictions_free(p);
        return rc;
    }
    if (m->buffers.numel > 0 &&
        (rc = ct_comm_bcast(s->comm, m->buffers.data, m->buffers.numel * sizeof(float), 0)) < 0)
        goto fail;
    ct_model_set_training(m, 0);
    m->fwd.sample_index = NULL;
    double sums[3] = {0, 0, 0}; /* loss, correct, samples */
    predict_shard(s, first, count, p->probs ? p->probs + first * (size_t)p->n_classes : NULL, p,
                  sums, losses);
    ct_model_set_training(m, 1);
    if ((rc = combine(s, p, sums)) < 0)
        goto fail;
    /* Deterministic mode: the shards (and the evaluation batches within
     * them) group the samples' losses differently for each N, so the test
     * loss is summed on a shared grid, the same bits for every N. The
     * other sums (correct predictions, samples, the confusion matrix) are
     * integers, exact in any order already. */
    if (losses &&
        (rc = ct_repro_allreduce_f64(s->comm, losses, count, (int64_t)s->test.n, &sums[0])) < 0)
        goto fail;
    free(losses);
    losses = NULL;
    if (sums[2] != (double)s->test.n * p->targets) {
        rc = ct_error_set(CT_ESTATE, "evaluation counted %.0f targets, expected %zu x %d", sums[2],
                          s->test.n, p->targets);
        goto fail;
    }
    p->loss = sums[0] / sums[2];
    p->acc = sums[1] / sums[2];
    return 0;
fail:
    free(losses);
    ct_predictions_free(p);
    return rc;
}

int ct_predictions_print_confusion(const struct ct_predictions *p, FILE *out)
{
    const int C = p->n_classes;
    int bad = fprintf(out, "per-class accuracy (true class: correct/samples)\n") < 0;
    for (int t = 0; t < C && !bad; t++) {
        int64_t row = 0;
        for (int k = 0; k < C; k++)
            row += p->confusion[(size_t)t * (size_t)C + (size_t)k];
        int64_t hit = p->confusion[(size_t)t * (size_t)C + (size_t)t];
        bad |= fprintf(out, "  class %2d: %.4f (%lld/%lld)\n", t, row ? (double)hit / (double)row : 0.0,
                       (long long)hit, (long long)row) < 0;
    }
    bad |= fprintf(out, "confusion matrix (rows: true class, columns: predicted)\n      ") < 0;
    for (int k = 0; k < C && !bad; k++)
        bad |= fprintf(out, " %6d", k) < 0;
    for (int t = 0; t < C && !bad; t++) {
        bad |= fprintf(out, "\n  %2d: ", t) < 0;
        for (int k = 0; k < C && !bad; k++)
            bad |= fprintf(out, " %6lld", (long long)p->confusion[(size_t)t * (size_t)C + (size_t)k]) < 0;
    }
    bad |= fputc('\n', out) == EOF;
    if (bad || fflush(out) != 0)
        return ct_error_set(CT_EIO, "cannot print the confusion matrix: %s", strerror(errno ? errno : EIO));
    return 0;
}

int ct_predictions_write_csv(const struct ct_predictions *p, const char *path)
{
    if (!p->probs)
        return ct_error_set(CT_EINVAL, "%s: the predictions hold no per-sample values", path);
    struct ct_replace r;
    int rc = ct_replace_open(&r, path);
    if (rc < 0)
        return rc;
    const int C = p->n_classes;
    int bad = fprintf(r.f, "index,label,predicted") < 0;
    for (int k = 0; k < C && !bad; k++)
        bad |= fprintf(r.f, ",p%d", k) < 0;
    bad |= fputc('\n', r.f) == EOF;
    for (size_t i = 0; i < p->n && !bad; i++) {
        bad |= fprintf(r.f, "%zu,%d,%d", i, p->labels[i], p->predicted[i]) < 0;
        for (int k = 0; k < C && !bad; k++)
            bad |= fprintf(r.f, ",%.9g", p->probs[i * (size_t)C + (size_t)k]) < 0;
        bad |= fputc('\n', r.f) == EOF;
    }
    if (bad) {
        int e = errno ? errno : EIO;
        ct_replace_abort(&r);
        return ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(e));
    }
    return ct_replace_commit(&r);
}

int ct_session_evaluate(struct ct_session *s, double *loss, double *acc)
{
    struct ct_predictions p;
    int rc = ct_session_predict(s, 0, &p);
    if (rc < 0)
        return rc;
    *loss = p.loss;
    *acc = p.acc;
    ct_predictions_free(&p);
    return 0;
}
