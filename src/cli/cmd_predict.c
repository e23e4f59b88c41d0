/* ctrain-dist predict --checkpoint CKPT -o FILE: every test sample's label,
 * predicted class and probabilities as CSV (the evaluation is eval's:
 * cmd_eval.c), on the config's test set or on another labelled IDX pair. */
#include "cli/cli.h"

#include "core/error.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--checkpoint", NULL, CT_CLI_VALUE, checkpoint, NULL),
    CT_CLI_OPTION("--data", NULL, CT_CLI_VALUE, data, NULL),
    CT_CLI_OPTION("--labels", NULL, CT_CLI_VALUE, labels, NULL),
    CT_CLI_OPTION("--output", "-o", CT_CLI_VALUE, output, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_GENERATE);
    if (rc == 0 && (!a->output || !*a->output))
        rc = ct_error_set(CT_EUSAGE, "predict needs -o FILE (the CSV to write)");
    if (rc == 0 && !a->data != !a->labels)
        rc = ct_error_set(CT_EUSAGE, "predict: --data IMAGES and --labels LABELS go together");
    if (rc == 0)
        rc = ct_cli_refuse(a, CT_CLI_NO_CONFIG);
    return rc ? rc : ct_cli_check_checkpoint_command(a);
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    return ct_cli_evaluate(comm, a, 1);
}

const struct ct_cli_command ct_cli_predict = {
    .name = "predict",
    .synopsis = "predict --checkpoint CHECKPOINT [--data IMAGES --labels LABELS] -o FILE",
    .summary = "write every test sample's label, predicted class and probabilities as CSV",
    .help = "  --checkpoint DIR     the checkpoint (its recorded config is used)\n"
            "  --data IMAGES        an IDX image file instead of the config's test images ...\n"
            "  --labels LABELS      ... with its IDX label file\n"
            "  -o, --output FILE    the CSV: index,label,predicted,p0,...\n"
            "  --set S.K=V          override one config key, e.g. --set train.epochs=1 (repeatable)\n",
    .options = options,
    .check = check,
    .run = run,
};
