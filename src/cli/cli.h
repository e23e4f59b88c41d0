/* The ctrain-dist command line, one command per file (src/cli/cmd_*.c).
 *
 * Each command file defines one `struct ct_cli_command`: its name, its help
 * texts, the options it owns and the function that runs it. main.c's one
 * table of them drives dispatch and `--help`; nothing else names a command.
 * args.c reads every command line into a struct ct_cli_args through these
 * tables; the command's `check` refuses what does not go together, then
 * `run` runs it (a subcommand's own, when the command has subcommands).
 *
 * Two scopes of options:
 *   - shared (train, eval, predict, generate, inspect, export, config,
 *     report): every option of every shared command is recognised whatever
 *     the command, so that an option given to the wrong command is refused
 *     by name ("--data and --labels belong to the predict command") rather
 *     than as unknown; --set, -q, -v, --help and --version go with all;
 *   - own (audit, summary, data: `own_options`): only the command's (or its
 *     subcommand's) options; anything else is unknown, in the command's own
 *     words (`prefix`, `unknown_hint`), and a command-line error is followed
 *     (or preceded) by the command's `usage`.
 *
 * Each returns the process's exit status, the same on every rank: errors are
 * agreed on collectively first (ct_comm_agree), so no rank is left waiting
 * in a collective. Only src/cli prints errors and picks exit statuses.
 * This header is the program's own (not installed).
 */
#ifndef CT_CLI_CLI_H
#define CT_CLI_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "ckpt/ckpt.h"
#include "config/config.h"
#include "parallel/comm.h"

/* 3: the run was asked to stop (SIGUSR1/SIGTERM), wrote a checkpoint and
 * stopped: requeue it with --resume auto to continue exactly. 4: the hang
 * watchdog ended the job. */
enum { CT_EXIT_OK = 0, CT_EXIT_RUNTIME = 1, CT_EXIT_USAGE = 2, CT_EXIT_REQUEUE = 3, CT_EXIT_HANG = 4 };

#define CT_CLI_MAX_SETS 256

/* What a parsed command line said: the options of every parsed command, as
 * given (NULL / 0: not given). */
struct ct_cli_args {
    const struct ct_cli_command *cmd;
    const char *command;    /* cmd->name */
    int explicit_command;   /* the command was named (CMD --help: that command's help) */
    const char *config;     /* train, config: --config FILE */
    const char *run_dir;    /* train */
    const char *resume;     /* train: auto | PATH */
    const char *checkpoint; /* eval, predict, generate, inspect, export */
    const char *sets[CT_CLI_MAX_SETS];
    int n_sets;
    const char *seeds;      /* train: "0,1,2": one run per seed, each in RUN_DIR/seed-K */
    char seed_dir[32];      /* the run's subdirectory while training one of them */
    int verbose;
    int quiet;              /* warnings and errors only: no progress, no info lines */
    int help, version;
    int own_help;           /* the command's print_help (audit, data: -h beyond `CMD --help`) */
    int list, tsv;          /* config --list [--tsv] */
    const char *check;      /* config --check FILE */
    const char *format;     /* export: npz | safetensors; report: html | csv */
    const char *output;     /* export, predict, report: -o FILE */
    const char *data;       /* predict: --data IMAGES (data.test_images) */
    const char *labels;     /* predict: --labels LABELS (data.test_labels) */
    /* The operands (arguments that are not options), in order: report's
     * run directories, data's files, audit's run directory or checkpoints,
     * summary's run directories. calloc'd by ct_cli_parse. */
    const char **operands;
    int n_operands;
    /* generate: as given, parsed by its run function */
    const char *prompt, *gen_n, *temperature, *top_k, *seed;
    /* The commands with options of their own. */
    const struct ct_cli_command *sub; /* the subcommand (audit, data) */
    int data_format, data_layout;     /* data: --format, --layout (enum ct_data_format, layout) */
    int window, vocab;                /* data: --window W, --vocab V; 0: not given */
    int bytes;                        /* data tokenize --bytes */
    const char *gpt2;                 /* data tokenize --gpt2 DIR (encoder.json, vocab.bpe) */
    const char *out_dir;              /* audit replay --out DIR */
    int gemm;                         /* audit replay --gemm: 0 auto, 1 openblas, 2 own */
};

enum ct_cli_option_kind {
    CT_CLI_FLAG,   /* sets an int field to 1; spelled exactly */
    CT_CLI_VALUE,  /* a const char * field: NAME VALUE, or NAME=VALUE for a --long NAME */
    CT_CLI_SET,    /* --set S.K=V, appended to sets[] */
    CT_CLI_INT,    /* an int field: a whole number in [lo, hi] (strtol, base 10) */
    CT_CLI_CHOICE, /* an int field: the value's index in names[] */
};

struct ct_cli_option {
    const char *name;     /* "--output"; its value's error messages say this name */
    const char *alias;    /* "-o"; NULL: none (spelled exactly, no "=VALUE" form) */
    enum ct_cli_option_kind kind;
    size_t field;         /* offsetof(struct ct_cli_args, ...) */
    const char *if_empty; /* the message for an empty value; NULL: an empty value is taken */
    long lo, hi;                    /* CT_CLI_INT */
    const char *const *names;       /* CT_CLI_CHOICE: NULL-terminated */
};
#define CT_CLI_OPTION(name, alias, kind, field, if_empty) \
    {name, alias, kind, offsetof(struct ct_cli_args, field), if_empty, 0, 0, NULL}
#define CT_CLI_INT_OPTION(name, field, lo, hi) \
    {name, NULL, CT_CLI_INT, offsetof(struct ct_cli_args, field), NULL, lo, hi, NULL}
#define CT_CLI_CHOICE_OPTION(name, field, names) \
    {name, NULL, CT_CLI_CHOICE, offsetof(struct ct_cli_args, field), NULL, 0, 0, names}
#define CT_CLI_END {NULL, NULL, 0, 0, NULL, 0, 0, NULL}

/* A shared command's operands (arguments that are not options); a command
 * with options of its own takes them as min_operands .. max_operands say. */
enum ct_cli_operand {
    CT_CLI_NO_OPERAND,
    CT_CLI_CHECKPOINT_FIRST, /* `inspect CKPT`: the checkpoint, right after the name */
    CT_CLI_OPERANDS,         /* `report RUN_DIR...`: operands[], anywhere among the options */
};

/* Every argument after the (sub)command's name is an operand, whatever it
 * looks like (`audit verify RUN_DIR`): leading_operands's value. */
#define CT_CLI_ALL_OPERANDS (1 << 30)

struct ct_cli_command {
    const char *name;
    const char *synopsis; /* after "ctrain-dist " */
    const char *summary;  /* one line for `ctrain-dist --help` */
    const char *help;     /* its options, for `ctrain-dist NAME --help` */
    const struct ct_cli_option *options; /* those it owns, ended by CT_CLI_END */
    enum ct_cli_operand operand;
    int (*check)(const struct ct_cli_args *a);  /* 0, or CT_EUSAGE with the message set */
    int (*run)(struct ct_comm *comm, struct ct_cli_args *a);
    int train; /* SIGUSR1/SIGTERM ask it to checkpoint and stop (signals.c) */

    /* Commands with options of their own (see the top of this file); all
     * zero for a shared one. A subcommand is a struct ct_cli_command too:
     * its name, options, operands and messages below, its check and run. */
    int own_options;
    const struct ct_cli_command *const *subcommands; /* NULL-terminated; NULL: none */
    const char *no_subcommand;      /* the message when none is given */
    const char *unknown_subcommand; /* its format: %s the argument */
    int help_anywhere;        /* -h / --help anywhere (even as a value) asks for help */
    void (*print_help)(FILE *out); /* the help of `CMD -h ...`, other than `CMD --help` alone */
    const char *usage;        /* printed to stderr with a command-line error */
    int usage_first;          /* before the error line (audit), not after it (data) */
    /* A (sub)command's options and operands (shared commands: the
     * defaults, as documented at each): */
    const char *prefix;       /* before every message about its options ("data stats: "); "" */
    const char *unknown_hint; /* after "unknown option 'X'"; NULL: " (see ctrain-dist --help)" */
    int dash_operand;         /* "-" alone is an operand, not an unknown option */
    int short_equals;         /* -o=VALUE too (--long=VALUE always) */
    int leading_operands;     /* the first n arguments are operands whatever they look like */
    int pairs;                /* every later argument is NAME VALUE: a NAME with no VALUE
                               * after it is refused before it is looked up; no NAME=VALUE */
    int min_operands;         /* fewer: too_few */
    int max_operands;         /* 0: no limit; more: too_many */
    const char *too_few;      /* the message */
    const char *too_many;     /* its format: %s the argument one too many */
    const char *empty_operand; /* the message for an empty operand; NULL: taken */
    int max_sets;             /* --set's limit: 0 CT_CLI_MAX_SETS */
};

/* The commands, in --help order (main.c), ended by NULL. */
extern const struct ct_cli_command *const ct_cli_commands[];
const struct ct_cli_command *ct_cli_find_command(const char *name);

extern const struct ct_cli_command ct_cli_train, ct_cli_eval, ct_cli_predict, ct_cli_generate,
    ct_cli_inspect, ct_cli_export, ct_cli_config, ct_cli_audit, ct_cli_data, ct_cli_summary,
    ct_cli_report;

/* ------------------------------------------------------------ args.c */

/* The whole command line (argv[1] a command's name, or an option: train).
 * 0, or CT_EUSAGE (CT_ENOMEM) with the message set; a->cmd is set even
 * then (NULL: argv[1] named no command). With --help or --version given,
 * the command's check is not run. ct_cli_args_free releases a, always. */
int ct_cli_parse(struct ct_cli_args *a, int argc, char **argv);
void ct_cli_args_free(struct ct_cli_args *a);
/* The command a->cmd's (sub)command: the one whose run runs. */
const struct ct_cli_command *ct_cli_runner(const struct ct_cli_args *a);

/* The refusals the parsed commands share, each with its one message; a
 * command's check calls them in this order, its own checks between them
 * where they always were. */
enum {
    CT_CLI_NO_FORMAT = 1 << 0,   /* --format: export and report */
    CT_CLI_NO_OUTPUT = 1 << 1,   /* -o: export, predict and report */
    CT_CLI_NO_GENERATE = 1 << 2, /* --prompt, -n, --temperature, --top-k, --seed */
    CT_CLI_NO_PREDICT = 1 << 3,  /* --data, --labels */
    CT_CLI_NO_CONFIG = 1 << 4,   /* --list, --tsv, --check */
};
int ct_cli_refuse(const struct ct_cli_args *a, unsigned which);
/* What a command that reads a checkpoint needs: the checkpoint, and no
 * --seeds, --config or --resume (its config is the recorded one). */
int ct_cli_check_checkpoint_command(const struct ct_cli_args *a);

/* ------------------------------------------------------------ common.c */

/* Print an agreed error once (rank 0 holds the combined report); returns
 * status. */
int ct_cli_fail(const struct ct_comm *c, int status);
/* CT_EXIT_USAGE for a config error, else CT_EXIT_RUNTIME. */
int ct_cli_config_status(int rc);
/* The checkpoint DIR opened and its recorded config loaded with the
 * overrides `sets` (collective: every rank gets the same status). Returns
 * < 0 with nothing open when the checkpoint cannot be opened (*opened 0);
 * otherwise the config's status, the checkpoint left open for the caller
 * to close (*opened 1). */
int ct_cli_open_recorded(struct ct_comm *comm, const char *dir, const char *const *sets, int n_sets,
                         struct ct_ckpt *ck, struct ct_config *cfg, int *opened);
/* The same with the checkpoint and config allocated here (CT_ENOMEM, agreed,
 * when they cannot be); ct_cli_recorded_close frees them, always. */
struct ct_cli_recorded {
    struct ct_ckpt *ck;
    struct ct_config *cfg;
    int opened; /* ct_cli_open_recorded's *opened */
};
int ct_cli_recorded_open(struct ct_comm *comm, struct ct_cli_recorded *r, const char *dir,
                         const char *const *sets, int n_sets);
void ct_cli_recorded_close(struct ct_cli_recorded *r);
/* The exit status of a command that ran on a recorded checkpoint with
 * result rc (printing the agreed error): a checkpoint that could not be
 * opened is a run-time error, a config that does not load a usage error. */
int ct_cli_recorded_status(const struct ct_comm *comm, const struct ct_cli_recorded *r, int rc);
/* --format's value: its index in `names` (NULL-terminated) in *format, or
 * `dflt` when value is NULL; CT_EUSAGE "--format 'X': expected A or B"
 * otherwise. */
int ct_cli_parse_format(const char *value, const char *const *names, int dflt, int *format);
/* A decimal number in [lo, hi] (a whole one with `integer`) from an
 * option's text; CT_EUSAGE naming the option otherwise. */
int ct_cli_parse_number(const char *opt, const char *text, double lo, double hi, int integer,
                        double *out);
/* eval and predict (cmd_eval.c): the test set through the checkpoint's
 * model; predict writes the CSV a->output. */
int ct_cli_evaluate(struct ct_comm *comm, const struct ct_cli_args *a, int predict);

/* ------------------------------------------------------------ signals.c */

/* From the first instruction of main: remember SIGUSR1/SIGTERM, ignore
 * SIGPIPE, unblock what a re-exec left blocked. */
void ct_cli_signals_early(void);
/* Run this program again with a better OPENBLAS_CORETYPE when OpenBLAS fell
 * back to generic kernels (returns when it does not). */
void ct_cli_reexec_with_better_blas(char **argv);
/* Once the command is known: a training command takes the stop signals as
 * checkpoint-and-stop requests; any other gets the default action back. */
void ct_cli_route_stop_signals(int train);

#endif
