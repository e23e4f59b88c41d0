/* ctrain-dist generate --checkpoint CKPT: text sampled from a language-model
 * checkpoint (a gpt); rank 0 generates, the others wait. */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "train/generate.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--checkpoint", NULL, CT_CLI_VALUE, checkpoint, NULL),
    CT_CLI_OPTION("--prompt", NULL, CT_CLI_VALUE, prompt, NULL),
    CT_CLI_OPTION("-n", NULL, CT_CLI_VALUE, gen_n, NULL),
    CT_CLI_OPTION("--temperature", NULL, CT_CLI_VALUE, temperature, NULL),
    CT_CLI_OPTION("--top-k", NULL, CT_CLI_VALUE, top_k, NULL),
    CT_CLI_OPTION("--seed", NULL, CT_CLI_VALUE, seed, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_OUTPUT | CT_CLI_NO_PREDICT | CT_CLI_NO_CONFIG);
    return rc ? rc : ct_cli_check_checkpoint_command(a);
}

/* The sampling options into gp; CT_EUSAGE naming the first bad one. */
static int sampling_params(const struct ct_cli_args *a, struct ct_generate_params *gp)
{
    double v;
    int rc = 0;
    if (rc == 0 && a->gen_n && (rc = ct_cli_parse_number("-n", a->gen_n, 0, 1e9, 1, &v)) == 0)
        gp->n = (int64_t)v;
    if (rc == 0 && a->temperature &&
        (rc = ct_cli_parse_number("--temperature", a->temperature, 0, 1e6, 0, &v)) == 0)
        gp->temperature = v;
    if (rc == 0 && a->top_k && (rc = ct_cli_parse_number("--top-k", a->top_k, 0, 65536, 1, &v)) == 0)
        gp->top_k = (int)v;
    if (rc == 0 && a->seed) { /* any uint64, as train.seed: not through a double */
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(a->seed, &end, 10);
        if (!isdigit((unsigned char)a->seed[0]) || *end || errno)
            rc = ct_error_set(CT_EUSAGE, "--seed '%s': expected a whole number in [0, %llu]", a->seed,
                              (unsigned long long)UINT64_MAX);
        gp->seed = seed;
    }
    return rc;
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    struct ct_generate_params gp = {.prompt = a->prompt, .n = 500, .temperature = 0.8, .top_k = 40,
                                    .seed = 0, .out = stdout};
    int rc = ct_comm_agree(comm, sampling_params(a, &gp));
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    struct ct_cli_recorded r;
    rc = ct_cli_recorded_open(comm, &r, a->checkpoint, a->sets, a->n_sets);
    if (rc == 0 && comm->rank == 0)
        rc = ct_generate(r.ck, r.cfg, &gp); /* its messages name the checkpoint */
    if (r.opened)
        rc = ct_comm_agree(comm, rc);
    ct_cli_recorded_close(&r);
    if (!r.opened)
        return ct_cli_fail(comm, CT_EXIT_RUNTIME);
    return rc < 0 ? ct_cli_fail(comm, rc == CT_EINVAL ? CT_EXIT_USAGE : CT_EXIT_RUNTIME) : 0;
}

const struct ct_cli_command ct_cli_generate = {
    .name = "generate",
    .synopsis = "generate --checkpoint CHECKPOINT [--prompt TEXT] [-n N] [--temperature T] [--top-k K]\n"
                "                   [--seed S]",
    .summary = "sample text from a language-model checkpoint (a gpt)",
    .help = "  --checkpoint DIR     the checkpoint (its recorded config is used; no data files needed)\n"
            "  --prompt TEXT        the text to continue, one token per byte (default: none; the\n"
            "                       text starts after a newline, which is not printed)\n"
            "  -n N                 tokens to generate (default 500)\n"
            "  --temperature T      logits / T before the softmax; 0 = always the likeliest (default 0.8)\n"
            "  --top-k K            sample among the K likeliest tokens only; 0 = all (default 40)\n"
            "  --seed S             the sampling seed: the same seed, the same text (default 0)\n"
            "\n"
            "Prints the prompt, then the tokens as they come, as UTF-8 (bytes that are not valid\n"
            "UTF-8 as U+FFFD), exactly that text: no newline is added. Runs on one rank (under\n"
            "mpirun, rank 0 generates).\n",
    .options = options,
    .check = check,
    .run = run,
};
