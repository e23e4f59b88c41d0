/* The parsed commands' command line (see cli.h): one pass over argv that
 * recognises every option of every command (the commands' own tables, plus
 * the few that every command takes), then the refusals the commands share.
 * An option of another command is parsed like the command's own, so that
 * its check can refuse it by name; what goes together is each command's
 * check (its own file), not this parser's. */
#include "cli/cli.h"

#include <string.h>

#include "core/error.h"

/* Taken by every parsed command. */
static const struct ct_cli_option every_command[] = {
    CT_CLI_OPTION("--set", NULL, CT_CLI_SET, sets, NULL),
    CT_CLI_OPTION("--quiet", "-q", CT_CLI_FLAG, quiet, NULL),
    CT_CLI_OPTION("--verbose", "-v", CT_CLI_FLAG, verbose, NULL),
    CT_CLI_OPTION("--help", "-h", CT_CLI_FLAG, help, NULL),
    CT_CLI_OPTION("--version", NULL, CT_CLI_FLAG, version, NULL),
    {NULL, NULL, 0, 0, NULL},
};

/* arg is `o`: its name or alias exactly; a valued --long name also as
 * "--long=VALUE" (*inline_value then points at VALUE). */
static int spells(const struct ct_cli_option *o, const char *arg, const char **inline_value)
{
    *inline_value = NULL;
    if (strcmp(arg, o->name) == 0 || (o->alias && strcmp(arg, o->alias) == 0))
        return 1;
    size_t l = strlen(o->name);
    if (o->kind != CT_CLI_FLAG && strncmp(o->name, "--", 2) == 0 && strncmp(arg, o->name, l) == 0 &&
        arg[l] == '=') {
        *inline_value = arg + l + 1;
        return 1;
    }
    return 0;
}

static const struct ct_cli_option *in_table(const struct ct_cli_option *t, const char *arg,
                                            const char **inline_value)
{
    for (; t && t->name; t++)
        if (spells(t, arg, inline_value))
            return t;
    return NULL;
}

/* arg among the options every command takes, then every command's own. */
static const struct ct_cli_option *find_option(const char *arg, const char **inline_value)
{
    const struct ct_cli_option *o = in_table(every_command, arg, inline_value);
    for (int i = 0; !o && ct_cli_commands[i]; i++)
        o = in_table(ct_cli_commands[i]->options, arg, inline_value);
    return o;
}

/* Option o at argv[*i] into a. */
static int take(struct ct_cli_args *a, const struct ct_cli_option *o, const char *inline_value, int argc,
                char **argv, int *i)
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
        return ct_error_set(CT_EUSAGE, "option %s needs a value", o->name);
    if (o->kind == CT_CLI_SET) {
        if (a->n_sets == CT_CLI_MAX_SETS)
            return ct_error_set(CT_EUSAGE, "more than %d --set options", CT_CLI_MAX_SETS);
        a->sets[a->n_sets++] = val;
        return 0;
    }
    if (o->if_empty && !*val)
        return ct_error_set(CT_EUSAGE, "%s", o->if_empty);
    *(const char **)field = val;
    return 0;
}

/* argv[1], when it is not an option, names the command (else: train). */
static int parse_command(struct ct_cli_args *a, int argc, char **argv, int *i)
{
    a->cmd = &ct_cli_train;
    if (*i < argc && argv[*i][0] != '-') {
        const struct ct_cli_command *c = ct_cli_find_command(argv[*i]);
        if (!c) {
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

int ct_cli_parse(struct ct_cli_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    int i = 1;
    int rc = parse_command(a, argc, argv, &i);
    for (; rc == 0 && i < argc; i++) {
        const char *arg = argv[i], *inline_value;
        if (arg[0] != '-' && a->cmd->operand == CT_CLI_RUN_DIRS) {
            /* report RUN_DIR...: the run directories, before or after the options. */
            if (a->n_runs == CT_CLI_MAX_SETS)
                return ct_error_set(CT_EUSAGE, "%s: more than %d run directories", a->command,
                                    CT_CLI_MAX_SETS);
            a->runs[a->n_runs++] = arg;
            continue;
        }
        const struct ct_cli_option *o = find_option(arg, &inline_value);
        if (!o)
            return ct_error_set(CT_EUSAGE, "unknown option '%s' (see ctrain-dist --help)", arg);
        rc = take(a, o, inline_value, argc, argv, &i);
    }
    if (rc < 0 || a->help || a->version || !a->cmd->check)
        return rc;
    return a->cmd->check(a);
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
