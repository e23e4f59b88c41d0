/* Predictions of a session's model on its test set: per-sample class
 * probabilities, the confusion matrix, loss and accuracy. What `eval` and
 * `predict` report, and what ct_session_evaluate (the trainer's periodic
 * validation) runs without the per-sample part.
 *
 * Each rank runs its contiguous shard of the test set in eval mode (with rank
 * 0's BatchNorm running statistics, as ct_session_evaluate); the results are
 * combined with sums in which every value but one is zero, so they are exact.
 *
 *     struct ct_predictions p;
 *     rc = ct_session_predict(&s, 1, &p);          // collective
 *     ... p.probs[i * p.n_classes + k], p.confusion[label * p.n_classes + pred] ...
 *     ct_predictions_free(&p);
 */
#ifndef CT_TRAIN_PREDICT_H
#define CT_TRAIN_PREDICT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "train/session.h"

struct ct_predictions {
    size_t n;           /* test samples */
    int n_classes;      /* C */
    int targets;        /* K per sample: 1 (class labels), T (tokens: no confusion, no per-sample rows) */
    float *probs;       /* (n, C) softmax of the logits; NULL unless asked for */
    int32_t *predicted; /* (n) argmax (first maximum); NULL unless asked for */
    int32_t *labels;    /* (n); NULL unless asked for */
    int64_t *confusion; /* (C, C): [true label][predicted class] counts; K == 1 only */
    double loss, acc;   /* mean cross-entropy and accuracy over the n*K targets */
};

/* Collective. per_sample: also fill probs, predicted and labels on every
 * rank. On failure p is empty. */
int ct_session_predict(struct ct_session *s, int per_sample, struct ct_predictions *p);
void ct_predictions_free(struct ct_predictions *p);

/* Collective. The test set in eval mode, each rank a contiguous shard: mean
 * loss and accuracy over every test sample exactly once (ct_session_predict
 * without the per-sample part). BatchNorm running statistics are rank 0's
 * (DDP's policy); they are broadcast first. */
int ct_session_evaluate(struct ct_session *s, double *loss, double *acc);

/* Print per-class accuracy and the confusion matrix (rows: true class,
 * columns: predicted). Returns CT_EIO when out cannot be written. */
int ct_predictions_print_confusion(const struct ct_predictions *p, FILE *out);

/* Write index,label,predicted,p0..p{C-1} (a header line, then one line per
 * sample) to path, atomically. */
int ct_predictions_write_csv(const struct ct_predictions *p, const char *path);

#endif
