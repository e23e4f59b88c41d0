/* ctrain-dist data inspect|stats|tokenize: what a data file holds, before a
 * config points at it; and byte-level token shards made from text.
 *
 * This file is the command line (tables for args.c, cli.h) and the exit
 * statuses; the work is src/data's: describe.h (inspect: the header facts,
 * no pixel read; stats: the class histogram, the per-channel mean and std
 * that data.mean / data.std want, each file's SHA-256, a token shard's
 * counts, from stats.h) and tokenize.h (`tokenize --bytes`: one shard of
 * the text files' bytes, each byte a token, written atomically).
 *
 * The work is rank 0's alone; under mpirun the other ranks only learn the
 * status (ct_comm_agree), so every rank exits with the same one. This
 * command deliberately is not a general converter nor a viewer: the one
 * thing it writes is a byte-level token shard, and it knows no other
 * tokenizer.
 */
#include "cli/cli.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/sha256.h"
#include "data/describe.h"
#include "data/tokenize.h"
#include "data/tokens.h"

#define DATA_SYNOPSIS                                                                        \
    "data inspect FILE [--format F] [--layout L] [--window W]\n"                             \
    "                   | stats IMAGES [LABELS] [--format F] [--layout L] [--window W] [--vocab V]\n" \
    "                   | tokenize --bytes|--gpt2 DIR TEXT... -o SHARD"
static const char data_summary[] =
    "print a data file's header facts, or its classes, mean/std and SHA-256; tokenize text";
static const char data_help[] =
    "  inspect FILE         format, count, per-sample shape (C x H x W), dtype, stored\n"
    "                       layout, file size, gzip: the header only, no pixel is read\n"
    "                       (float32 .npy: the open also checks every value is finite);\n"
    "                       a token shard: its header's version and token count\n"
    "  stats IMAGES [LABELS]\n"
    "                       count, shape, dtype, class histogram (with LABELS, or\n"
    "                       cifar10), per-channel mean and population std of the values\n"
    "                       as training scales them (uint8: v/255; float32: as stored)\n"
    "                       from exact sums, as `mean = ...` / `std = ...` lines for the\n"
    "                       config's [data] section, and each file's SHA-256; token\n"
    "                       shards: tokens, windows, vocabulary, the most frequent tokens\n"
    "  tokenize --bytes TEXT... -o SHARD\n"
    "                       one token shard (llm.c's layout: data.format = tokens) of the\n"
    "                       files' bytes one after another, each byte a token\n"
    "                       (data.vocab = 256); written atomically, with its SHA-256\n"
    "  tokenize --gpt2 DIR TEXT... -o SHARD\n"
    "                       the same with GPT-2's BPE (DIR: encoder.json and vocab.bpe,\n"
    "                       launch/get-data.sh gpt2-bpe; data.vocab = 50257), each file\n"
    "                       one document after an <|endoftext|> token (50256)\n"
    "  --format F           auto (default: by the first bytes), idx, npy, cifar10 or\n"
    "                       tokens (cifar10, and tokens for stats: a comma list of files)\n"
    "  --layout L           .npy images: auto (default: a last axis of 1, 3 or 4 is\n"
    "                       channels), nchw or nhwc (data.layout)\n"
    "  --window W           token shards: tokens per sample, model.block + 1; counts the\n"
    "                       windows (N) training will see\n"
    "  --vocab V            stats of token shards: refuse a token >= V (data.vocab)\n";

static const char exit_line[] = "Exit status: 0 success, 1 a bad data file, 2 a bad command line.\n";

/* ------------------------------------------------------------ inspect, stats */

/* In enum ct_data_format's and enum ct_data_layout's order. */
static const char *const format_names[] = {"auto", "idx", "npy", "cifar10", "tokens", NULL};
static const char *const layout_names[] = {"auto", "nchw", "nhwc", NULL};

#define FILE_OPTIONS                                                   \
    CT_CLI_CHOICE_OPTION("--format", data_format, format_names),      \
    CT_CLI_CHOICE_OPTION("--layout", data_layout, layout_names),      \
    CT_CLI_INT_OPTION("--window", window, 2, INT_MAX)

static const struct ct_cli_option inspect_options[] = {FILE_OPTIONS, CT_CLI_END};
static const struct ct_cli_option stats_options[] = {
    FILE_OPTIONS, CT_CLI_INT_OPTION("--vocab", vocab, 1, CT_DATA_MAX_TARGET), CT_CLI_END};

/* What goes together: several files in one operand only for the formats
 * that read several; LABELS only for the formats that have none inside. */
static int check_files(const struct ct_cli_args *a)
{
    const char *sub = a->sub->name;
    const int stats = strcmp(sub, "stats") == 0;
    const int lists =
        a->data_format == CT_DATA_FORMAT_CIFAR10 || (stats && a->data_format == CT_DATA_FORMAT_TOKENS);
    if (!lists && strchr(a->operands[0], ','))
        return ct_error_set(CT_EUSAGE, "data %s: '%s' is a list of files: only %s (%s)", sub, a->operands[0],
                            stats ? "cifar10 and tokens take several" : "cifar10 takes several",
                            stats ? "--format cifar10 or tokens" : "--format cifar10");
    if (a->data_format == CT_DATA_FORMAT_CIFAR10 && a->n_operands == 2)
        return ct_error_set(CT_EUSAGE, "data stats: cifar10 batches hold their labels: give no "
                            "LABELS file (found '%s')", a->operands[1]);
    if (a->data_format == CT_DATA_FORMAT_TOKENS && a->n_operands == 2)
        return ct_error_set(CT_EUSAGE, "data stats: a token window's targets are its own next "
                            "tokens: give no LABELS file (found '%s')", a->operands[1]);
    return 0;
}

static struct ct_data_probe probe_of(const struct ct_cli_args *a)
{
    struct ct_data_probe p = ct_data_probe_default();
    p.n_files = a->n_operands;
    for (int i = 0; i < a->n_operands; i++)
        p.files[i] = a->operands[i];
    p.format = (enum ct_data_format)a->data_format;
    p.layout = (enum ct_data_layout)a->data_layout;
    p.window = a->window;
    p.vocab = a->vocab;
    return p;
}

/* ------------------------------------------------------------ tokenize */

static const struct ct_cli_option tokenize_options[] = {
    CT_CLI_OPTION("--bytes", NULL, CT_CLI_FLAG, bytes, NULL),
    CT_CLI_OPTION("--gpt2", NULL, CT_CLI_VALUE, gpt2, "data tokenize: --gpt2 needs a directory"),
    CT_CLI_OPTION("-o", NULL, CT_CLI_VALUE, output, "data tokenize: an empty output file name"),
    CT_CLI_OPTION("--output", NULL, CT_CLI_VALUE, output, "data tokenize: an empty output file name"),
    CT_CLI_END,
};

static int check_tokenize(const struct ct_cli_args *a)
{
    if (!a->bytes == !a->gpt2)
        return ct_error_set(CT_EUSAGE, "data tokenize needs one tokenizer: --bytes (each byte of "
                            "the text one token, vocabulary 256) or --gpt2 DIR (GPT-2's BPE: DIR holds "
                            "encoder.json and vocab.bpe, launch/get-data.sh gpt2-bpe)");
    if (a->n_operands == 0)
        return ct_error_set(CT_EUSAGE, "data tokenize needs at least one TEXT file");
    if (!a->output)
        return ct_error_set(CT_EUSAGE, "data tokenize needs -o SHARD (the token shard to write)");
    return 0;
}

/* The shard written, then its size and digest. */
static int tokenize(FILE *out, const struct ct_cli_args *a)
{
    uint64_t total;
    int vocab = 256;
    uint8_t d[CT_SHA256_LEN];
    char hex[CT_SHA256_HEX_LEN];
    int rc = a->gpt2 ? ct_tokenize_gpt2(a->gpt2, a->operands, a->n_operands, a->output, &total, &vocab, d)
                     : ct_tokenize_bytes(a->operands, a->n_operands, a->output, &total);
    if (rc == CT_EINVAL) /* the texts are empty: the one CT_EINVAL */
        return ct_error_wrap(rc, "data tokenize");
    if (rc < 0)
        return rc;
    if (a->gpt2) {
        ct_sha256_hex(d, hex);
        fprintf(out, "wrote    %s: %llu tokens (GPT-2 BPE of %d document%s, each after <|endoftext|>; "
                "data.vocab = %d), %llu bytes\n", a->output, (unsigned long long)total, a->n_operands,
                a->n_operands == 1 ? "" : "s", vocab, (unsigned long long)(CT_TOKENS_HEADER_BYTES + 2 * total));
        fprintf(out, "tokenizer %s (SHA-256 of %s/encoder.json and vocab.bpe)\n", hex, a->gpt2);
    } else {
        fprintf(out, "wrote    %s: %llu tokens (the bytes of %d file%s; data.vocab = 256), %llu bytes\n",
                a->output, (unsigned long long)total, a->n_operands, a->n_operands == 1 ? "" : "s",
                (unsigned long long)(CT_TOKENS_HEADER_BYTES + 2 * total));
    }
    if ((rc = ct_sha256_file(a->output, d)) < 0)
        return rc;
    ct_sha256_hex(d, hex);
    fprintf(out, "sha256   %s  %s\n", hex, a->output);
    return 0;
}

/* ------------------------------------------------------------ the command */

/* Rank 0's result rc_rank0, agreed: every rank's exit status. */
static int finish(struct ct_comm *c, int rc_rank0)
{
    fflush(stdout);
    const int rc = ct_comm_agree(c, rc_rank0);
    if (rc == 0)
        return CT_EXIT_OK;
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    return rc == CT_EUSAGE ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
}

static int run_inspect(struct ct_comm *c, struct ct_cli_args *a)
{
    const struct ct_data_probe p = probe_of(a);
    return finish(c, c->rank == 0 ? ct_data_describe_header(stdout, &p) : 0);
}

static int run_stats(struct ct_comm *c, struct ct_cli_args *a)
{
    const struct ct_data_probe p = probe_of(a);
    return finish(c, c->rank == 0 ? ct_data_describe_stats(stdout, &p) : 0);
}

static int run_tokenize(struct ct_comm *c, struct ct_cli_args *a)
{
    return finish(c, c->rank == 0 ? tokenize(stdout, a) : 0);
}

static const struct ct_cli_command inspect = {
    .name = "inspect",
    .options = inspect_options,
    .prefix = "data inspect: ",
    .unknown_hint = "",
    .dash_operand = 1,
    .min_operands = 1,
    .max_operands = 1,
    .too_few = "data inspect needs a file (FILE)",
    .too_many = "data inspect: too many files: '%s' (inspect takes one FILE)",
    .empty_operand = "data inspect: an empty file name",
    .check = check_files,
    .run = run_inspect,
};

static const struct ct_cli_command stats = {
    .name = "stats",
    .options = stats_options,
    .prefix = "data stats: ",
    .unknown_hint = "",
    .dash_operand = 1,
    .min_operands = 1,
    .max_operands = 2,
    .too_few = "data stats needs a file (IMAGES [LABELS])",
    .too_many = "data stats: too many files: '%s' (stats takes IMAGES and at most one LABELS file)",
    .empty_operand = "data stats: an empty file name",
    .check = check_files,
    .run = run_stats,
};

static const struct ct_cli_command tokenize_cmd = {
    .name = "tokenize",
    .options = tokenize_options,
    .prefix = "data tokenize: ",
    .unknown_hint = " (known: --bytes, --gpt2, -o)",
    .dash_operand = 1,
    .short_equals = 1,
    .empty_operand = "data tokenize: an empty file name",
    .check = check_tokenize,
    .run = run_tokenize,
};

static void print_help(FILE *out)
{
    fprintf(out, "usage: ctrain-dist %s\n\n%s.\n\n%s\n%s", DATA_SYNOPSIS, data_summary, data_help,
            exit_line);
}

const struct ct_cli_command ct_cli_data = {
    .name = "data",
    .synopsis = DATA_SYNOPSIS,
    .summary = data_summary,
    .help = data_help,
    .own_options = 1,
    .subcommands = (const struct ct_cli_command *const[]){&inspect, &stats, &tokenize_cmd, NULL},
    .no_subcommand = "data needs a subcommand: inspect, stats or tokenize",
    .unknown_subcommand = "unknown data subcommand '%s' (known: inspect, stats, tokenize)",
    .help_anywhere = 1,
    .print_help = print_help,
    .usage = "usage: ctrain-dist " DATA_SYNOPSIS "\n",
};
