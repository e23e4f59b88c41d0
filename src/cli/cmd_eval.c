/* ctrain-dist eval --checkpoint CKPT: a checkpoint evaluated on the test set
 * with its own recorded config (with --set overrides, e.g. another
 * data.dir): loss, accuracy, per class, confusion matrix. The evaluation is
 * predict's too (cmd_predict.c), which writes every sample's row instead. */
#include "cli/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "train/predict.h"
#include "train/session.h"
#include "train/state.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--checkpoint", NULL, CT_CLI_VALUE, checkpoint, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_OUTPUT | CT_CLI_NO_GENERATE | CT_CLI_NO_PREDICT |
                                  CT_CLI_NO_CONFIG);
    return rc ? rc : ct_cli_check_checkpoint_command(a);
}

/* Rank 0: the results, or the predictions' CSV. */
static int print_results(struct ct_comm *comm, const struct ct_cli_args *a, const struct ct_session *s,
                         const struct ct_ckpt *ck, struct ct_predictions *p, int predict)
{
    int wrc = 0;
    printf("checkpoint %s (step %lld): test_loss %.6f test_acc %.4f on %zu samples, "
           "%d rank%s x %d thread%s (%s)\n",
           a->checkpoint, (long long)ct_ckpt_step(ck), p->loss, p->acc, s->test.n, comm->world,
           comm->world == 1 ? "" : "s", ct_gemm_threads(), ct_gemm_threads() == 1 ? "" : "s",
           ct_gemm_impl());
    char bpb[48] = ""; /* byte tokens: a token is a byte */
    if (p->targets > 1 && p->n_classes <= 256)
        snprintf(bpb, sizeof bpb, ", val_bpb %.4f", p->loss / log(2.0));
    if (p->targets > 1)
        printf("val_loss %.6f nats per token%s, next-token accuracy %.4f, "
               "%zu windows of %d tokens\n", p->loss, bpb, p->acc, p->n, p->targets);
    else
        wrc = predict ? ct_predictions_write_csv(p, a->output) : ct_predictions_print_confusion(p, stdout);
    if (wrc == 0 && predict)
        printf("%s: %zu predictions of %s\n", a->output, p->n, s->cfg->data.test_images);
    return wrc;
}

/* No training set, no optimizer state, no run directory: the session of the
 * test set alone, the checkpoint's model restored into it. */
static int evaluate_session(struct ct_comm *comm, const struct ct_cli_args *a, const struct ct_ckpt *ck,
                            const struct ct_config *cfg, int predict)
{
    struct ct_session *s = calloc(1, sizeof *s);
    struct ct_session_params sp = {.train = 0, .digests = 0};
    int rc = ct_comm_agree(comm, s ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    if (rc == 0 && (rc = ct_session_init(s, cfg, comm, &sp)) == 0) {
        rc = ct_comm_agree(comm, ct__model_restore(&s->model, ck));
        struct ct_predictions p;
        if (rc == 0)
            rc = ct_session_predict(s, predict, &p);
        if (rc == 0) {
            int wrc = comm->rank == 0 ? print_results(comm, a, s, ck, &p, predict) : 0;
            ct_predictions_free(&p);
            rc = ct_comm_agree(comm, wrc);
        }
        ct_session_free(s);
    }
    free(s);
    return rc;
}

int ct_cli_evaluate(struct ct_comm *comm, const struct ct_cli_args *a, int predict)
{
    /* predict --data/--labels: the test set's files replaced, after the
     * user's --set overrides. */
    const char *sets[CT_CLI_MAX_SETS + 2];
    int n_sets = a->n_sets;
    char set_images[CT_CONFIG_PATH_MAX + 32], set_labels[CT_CONFIG_PATH_MAX + 32];
    memcpy(sets, a->sets, sizeof(a->sets[0]) * (size_t)a->n_sets);
    if (a->data) {
        snprintf(set_images, sizeof set_images, "data.test_images=%s", a->data);
        snprintf(set_labels, sizeof set_labels, "data.test_labels=%s", a->labels);
        sets[n_sets++] = set_images;
        sets[n_sets++] = set_labels;
    }
    struct ct_cli_recorded r;
    int rc = ct_cli_recorded_open(comm, &r, a->checkpoint, sets, n_sets);
    if (rc == 0)
        rc = evaluate_session(comm, a, r.ck, r.cfg, predict);
    ct_cli_recorded_close(&r);
    return ct_cli_recorded_status(comm, &r, rc);
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    return ct_cli_evaluate(comm, a, 0);
}

const struct ct_cli_command ct_cli_eval = {
    .name = "eval",
    .synopsis = "eval --checkpoint CHECKPOINT [--set S.K=V]...",
    .summary = "evaluate a checkpoint on the test set: loss, accuracy, per class, confusion matrix",
    .help = "  --checkpoint DIR     the checkpoint (its recorded config is used)\n"
            "  --set S.K=V          override one config key, e.g. --set train.epochs=1 (repeatable)\n",
    .options = options,
    .check = check,
    .run = run,
};
