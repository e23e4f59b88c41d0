/* The command line through the commands' tables (see cli.h): one pass over
 * argv. A shared command's pass recognises every option of every shared
 * command (their own tables, plus the few that every one takes), then the
 * refusals the commands share; an option of another command is parsed like
 * the command's own, so that its check can refuse it by name. A command
 * with options of its own (audit, summary, data) recognises only its (or
 * its subcommand's) options, in its own words. What goes together is each
 * command's check (its own file), not this parser's. */
#include "cli/cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* Taken by every shared command. */
static const struct ct_cli_option every_command[] = {
    CT_CLI_OPTION("--set", NULL, CT_CLI_SET, sets, NULL),
    CT_CLI_OPTION("--quiet", "-q", CT_CLI_FLAG, quiet, NULL),
    CT_CLI_OPTION("--verbose", "-v", CT_CLI_FLAG, verbose, NULL),
    CT_CLI_OPTION("--help", "-h", CT_CLI_FLAG, help, NULL),
    CT_CLI_OPTION("--version", NULL, CT_CLI_FLAG, version, NULL),
    CT_CLI_END,
};

static const char *prefix_of(const struct ct_cli_command *c)
{
    return c->prefix ? c->prefix : "";
}

static int is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

/* arg is `o`: its name or alias exactly; a valued --long name also as
 * "--long=VALUE" (any valued name with `short_equals`; *inline_value then
 * points at VALUE). */
static int spells(const struct ct_cli_option *o, const char *arg, int short_equals,
                  const char **inline_value)
{
    *inline_value = NULL;
    if (strcmp(arg, o->name) == 0 || (o->alias && strcmp(arg, o->alias) == 0))
        return 1;
    size_t l = strlen(o->name);
    if (o->kind != CT_CLI_FLAG && (short_equals || strncmp(o->name, "--", 2) == 0) &&
        strncmp(arg, o->name, l) == 0 && arg[l] == '=') {
        *inline_value = arg + l + 1;
        return 1;
    }
    return 0;
}

static const struct ct_cli_option *in_table(const struct ct_cli_option *t, const char *arg, int short_equals,
                                            const char **inline_value)
{
    for (; t && t->name; t++)
        if (spells(t, arg, short_equals, inline_value))
            return t;
    return NULL;
}

/* arg among the options every shared command takes, then every shared
 * command's own. */
static const struct ct_cli_option *find_shared_option(const char *arg, const char **inline_value)
{
    const struct ct_cli_option *o = in_table(every_command, arg, 0, inline_value);
    for (int i = 0; !o && ct_cli_commands[i]; i++)
        if (!ct_cli_commands[i]->own_options)
            o = in_table(ct_cli_commands[i]->options, arg, 0, inline_value);
    return o;
}

/* CT_CLI_INT and CT_CLI_CHOICE: the value converted into its int field. */
static int take_number(const struct ct_cli_command *c, const struct ct_cli_option *o, const char *val,
                       int *field)
{
    if (o->kind == CT_CLI_INT) {
        char *end;
        errno = 0;
        const long k = strtol(val, &end, 10);
        if (errno || end == val || *end || k < o->lo || k > o->hi)
            return ct_error_set(CT_EUSAGE, "%s%s '%s': expected a whole number in %ld .. %ld", prefix_of(c),
                                o->name, val, o->lo, o->hi);
        *field = (int)k;
        return 0;
    }
    char known[256] = "";
    for (int k = 0; o->names[k]; k++) {
        if (strcmp(val, o->names[k]) == 0) {
            *field = k;
            return 0;
        }
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "", o->names[k]);
    }
    return ct_error_set(CT_EUSAGE, "%s%s '%s' (known: %s)", prefix_of(c), o->name, val, known);
}

/* Option o of command c at argv[*i] into a. */
static int take(struct ct_cli_args *a, const struct ct_cli_command *c, const struct ct_cli_option *o,
                const char *inline_value, int argc, char **argv, int *i)
{
    char *field = (char *)a + o->field;
    if (o->kind == CT_CLI_FLAG) {
        *(int *)field = 1;
        return 0;
    }
    const char *val = inline_value;
    if (!val && *i + 1 < argc)
        val = argv[++*i];
    else if (!val)
        return ct_error_set(CT_EUSAGE, "%soption %s needs a value", prefix_of(c), o->name);
    if (o->kind == CT_CLI_SET) {
        const int max = c->max_sets ? c->max_sets : CT_CLI_MAX_SETS;
        if (a->n_sets == max)
            return ct_error_set(CT_EUSAGE, "%smore than %d --set options", prefix_of(c), max);
        a->sets[a->n_sets++] = val;
        return 0;
    }
    if (o->if_empty && !*val)
        return ct_error_set(CT_EUSAGE, "%s", o->if_empty);
    if (o->kind == CT_CLI_INT || o->kind == CT_CLI_CHOICE)
        return take_number(c, o, val, (int *)field);
    *(const char **)field = val;
    return 0;
}

static int add_operand(struct ct_cli_args *a, const struct ct_cli_command *c, const char *arg)
{
    if (c->max_operands && a->n_operands == c->max_operands)
        return ct_error_set(CT_EUSAGE, c->too_many, arg);
    if (c->empty_operand && !arg[0])
        return ct_error_set(CT_EUSAGE, "%s", c->empty_operand);
    a->operands[a->n_operands++] = arg;
    return 0;
}

static int unknown_option(const struct ct_cli_command *c, const char *arg)
{
    return ct_error_set(CT_EUSAGE, "%sunknown option '%s'%s", prefix_of(c), arg,
                        c->unknown_hint ? c->unknown_hint : " (see ctrain-dist --help)");
}

/* argv[1], when it is not an option, names the command (else: train). */
static int parse_command(struct ct_cli_args *a, int argc, char **argv, int *i)
{
    a->cmd = &ct_cli_train;
    if (*i < argc && argv[*i][0] != '-') {
        const struct ct_cli_command *c = ct_cli_find_command(argv[*i]);
        if (!c) {
            a->cmd = NULL;
            char known[256] = "";
            for (int k = 0; ct_cli_commands[k]; k++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
                         ct_cli_commands[k]->name);
            return ct_error_set(CT_EUSAGE, "unknown command '%s' (known: %s)", argv[*i], known);
        }
        a->cmd = c;
        a->explicit_command = 1;
        ++*i;
        if (c->operand == CT_CLI_CHECKPOINT_FIRST && *i < argc && argv[*i][0] != '-')
            a->checkpoint = argv[(*i)++];
    }
    a->command = a->cmd->name;
    return 0;
}

/* A shared command's options and operands, argv[i..]. */
static int parse_shared(struct ct_cli_args *a, int argc, char **argv, int i)
{
    int rc = 0;
    for (; rc == 0 && i < argc; i++) {
        const char *arg = argv[i], *inline_value;
        if (arg[0] != '-' && a->cmd->operand == CT_CLI_OPERANDS) {
            rc = add_operand(a, a->cmd, arg); /* report RUN_DIR...: before or after the options */
            continue;
        }
        const struct ct_cli_option *o = find_shared_option(arg, &inline_value);
        rc = o ? take(a, a->cmd, o, inline_value, argc, argv, &i) : unknown_option(a->cmd, arg);
    }
    if (rc < 0 || a->help || a->version || !a->cmd->check)
        return rc;
    return a->cmd->check(a);
}

/* Command c's own options and operands, argv[i..] (after its name and
 * its subcommand's). */
static int parse_own_options(struct ct_cli_args *a, const struct ct_cli_command *c, int argc, char **argv,
                             int i)
{
    int rc = 0;
    for (int lead = c->leading_operands; rc == 0 && i < argc && lead > 0; i++, lead--)
        rc = add_operand(a, c, argv[i]);
    for (; rc == 0 && i < argc; i++) {
        const char *arg = argv[i], *inline_value;
        if (c->pairs && i + 1 >= argc)
            return ct_error_set(CT_EUSAGE, "%soption %s needs a value", prefix_of(c), arg);
        if (!c->pairs && (arg[0] != '-' || (c->dash_operand && !arg[1]))) {
            rc = add_operand(a, c, arg);
            continue;
        }
        const struct ct_cli_option *o = in_table(c->options, arg, c->short_equals, &inline_value);
        if (o && c->pairs && inline_value)
            o = NULL; /* NAME VALUE only */
        rc = o ? take(a, c, o, inline_value, argc, argv, &i) : unknown_option(c, arg);
    }
    if (rc == 0 && a->n_operands < c->min_operands)
        rc = ct_error_set(CT_EUSAGE, "%s", c->too_few);
    return rc == 0 && c->check ? c->check(a) : rc;
}

/* A command with options of its own: `CMD --help` alone, help anywhere
 * (help_anywhere), the subcommand, then its options. */
static int parse_own(struct ct_cli_args *a, int argc, char **argv, int i)
{
    const struct ct_cli_command *c = a->cmd;
    if (argc == 3 && is_help(argv[2])) {
        a->help = 1;
        return 0;
    }
    for (int k = i; c->help_anywhere && k < argc; k++)
        if (is_help(argv[k])) {
            a->own_help = 1;
            return 0;
        }
    if (c->subcommands) {
        if (i >= argc)
            return ct_error_set(CT_EUSAGE, "%s", c->no_subcommand);
        if (is_help(argv[i])) {
            a->own_help = 1;
            return 0;
        }
        for (int k = 0; !a->sub && c->subcommands[k]; k++)
            if (strcmp(argv[i], c->subcommands[k]->name) == 0)
                a->sub = c->subcommands[k];
        if (!a->sub)
            return ct_error_set(CT_EUSAGE, c->unknown_subcommand, argv[i]);
        c = a->sub;
        i++;
    }
    return parse_own_options(a, c, argc, argv, i);
}

int ct_cli_parse(struct ct_cli_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    if (!(a->operands = calloc((size_t)argc + 1, sizeof *a->operands)))
        return ct_error_set(CT_ENOMEM, "out of memory for the command line");
    int i = 1;
    int rc = parse_command(a, argc, argv, &i);
    if (rc < 0)
        return rc;
    return a->cmd->own_options ? parse_own(a, argc, argv, i) : parse_shared(a, argc, argv, i);
}

void ct_cli_args_free(struct ct_cli_args *a)
{
    free(a->operands);
    a->operands = NULL;
    a->n_operands = 0;
}

const struct ct_cli_command *ct_cli_runner(const struct ct_cli_args *a)
{
    return a->sub ? a->sub : a->cmd;
}

int ct_cli_refuse(const struct ct_cli_args *a, unsigned which)
{
    if ((which & CT_CLI_NO_FORMAT) && a->format)
        return ct_error_set(CT_EUSAGE, "--format belongs to the export and report commands");
    if ((which & CT_CLI_NO_OUTPUT) && a->output)
        return ct_error_set(CT_EUSAGE, "-o belongs to the export, predict and report commands");
    if ((which & CT_CLI_NO_GENERATE) && (a->prompt || a->gen_n || a->temperature || a->top_k || a->seed))
        return ct_error_set(CT_EUSAGE, "--prompt, -n, --temperature, --top-k and --seed belong to the "
                            "generate command");
    if ((which & CT_CLI_NO_PREDICT) && (a->data || a->labels))
        return ct_error_set(CT_EUSAGE, "--data and --labels belong to the predict command");
    if ((which & CT_CLI_NO_CONFIG) && (a->list || a->tsv || a->check))
        return ct_error_set(CT_EUSAGE, "--list, --tsv and --check belong to the config command");
    return 0;
}

int ct_cli_check_checkpoint_command(const struct ct_cli_args *a)
{
    if (!a->checkpoint)
        return ct_error_set(CT_EUSAGE, "%s needs a checkpoint (see ctrain-dist --help)", a->command);
    if (a->seeds)
        return ct_error_set(CT_EUSAGE, "--seeds is an option of train");
    if (a->config || a->resume)
        return ct_error_set(CT_EUSAGE, "%s takes its config from the checkpoint: no --config or --resume",
                            a->command);
    return 0;
}
