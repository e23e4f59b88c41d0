/* ctrain-dist: the command line. This is the only place that prints errors
 * and picks exit statuses; everything below returns codes and messages.
 *
 * Exit status: 0 success; 1 a run-time error (bad data file, I/O, MPI);
 * 2 a bad command line or config. Under mpirun every rank exits with the same
 * status: errors are agreed on collectively first (ct_comm_agree), so no rank
 * is left waiting in a collective.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/simd.h"
#include "core/log.h"
#include "core/version.h"
#include "parallel/comm.h"
#include "parallel/watchdog.h"
#include "report/export.h"
#include "report/inspect.h"
#include "report/report.h"
#include "core/threads.h"
#include "cli/cli.h"
#include "train/generate.h"
#include "train/progress.h"
#include "train/predict.h"
#include "train/session.h"
#include "train/state.h"
#include "train/trainer-impl.h"

#define MAX_SETS 256

/* 3: the run was asked to stop (SIGUSR1/SIGTERM), wrote a checkpoint and
 * stopped: requeue it with --resume auto to continue exactly. */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_REQUEUE = 3, EXIT_HANG = 4 };

struct args {
    const char *command;    /* a name of commands[] */
    const char *config;
    const char *run_dir;
    const char *resume;     /* train: auto | PATH */
    const char *checkpoint; /* eval, inspect */
    const char *sets[MAX_SETS];
    int n_sets;
    const char *seeds;      /* train: "0,1,2": one run per seed, each in RUN_DIR/seed-K */
    char seed_dir[32];      /* the run's subdirectory while training one of them */
    int verbose;
    int quiet;              /* warnings and errors only: no progress, no info lines */
    int help, version;
    int explicit_command;   /* the command was named (CMD --help: that command's help) */
    int list, tsv;          /* config --list [--tsv] */
    const char *check;      /* config --check FILE */
    const char *format;     /* export: npz | safetensors */
    const char *output;     /* export, predict: -o FILE */
    const char *data;       /* predict: --data IMAGES (data.test_images) */
    const char *labels;     /* predict: --labels LABELS (data.test_labels) */
    const char *runs[MAX_SETS]; /* report: the run directories */
    int n_runs;
    /* generate: as given, parsed by cmd_generate */
    const char *prompt, *gen_n, *temperature, *top_k, *seed;
};

/* Every command: its synopsis, a one-line summary for `ctrain-dist --help`,
 * and its own help (`ctrain-dist CMD --help`). The command names the parser
 * accepts are this table's. */
struct command {
    const char *name;
    const char *synopsis; /* after "ctrain-dist " */
    const char *summary;
    const char *help;
};

#define SET_HELP "  --set S.K=V          override one config key, e.g. --set train.epochs=1 (repeatable)\n"

static const struct command commands[] = {
    {"train",
     "[train] --config FILE [--set S.K=V]... [--run-dir DIR] [--resume auto|CHECKPOINT]\n"
     "                   [--seeds S1,S2,...] [-v|-q]",
     "train the model FILE describes, data-parallel over the ranks mpirun started",
     "  --config FILE        INI file (see configs/ and `ctrain-dist config --list`)\n" SET_HELP
     "  --run-dir DIR        where metrics, checkpoints and the run record go\n"
     "                       (default runs/<config name>)\n"
     "  --resume auto        continue from the newest checkpoint in the run directory,\n"
     "                       or start from scratch if there is none (for requeued jobs)\n"
     "  --resume CHECKPOINT  continue from that checkpoint directory\n"
     "  --seeds 0,1,2        one run per seed, one after the other, each in RUN_DIR/seed-K\n"
     "                       (then `ctrain-dist summary RUN_DIR/seed-*`)\n"
     "  -v, --verbose        also the global mean loss every log.every_steps steps\n"
     "  -q, --quiet          warnings and errors only (no progress, no epoch lines)\n"
     "\n"
     "Progress: a line every log.every_steps steps or 30 s; on a terminal, a bar redrawn\n"
     "in place (stderr). CT_PROGRESS=auto|bar|lines|off (under mpirun auto means lines:\n"
     "launch/ctrain-run sets bar on a terminal); NO_COLOR: no colours.\n"
     "\n"
     "SIGUSR1 or SIGTERM: checkpoint at the next step on every rank, then exit 3.\n"},
    {"eval", "eval --checkpoint CHECKPOINT [--set S.K=V]...",
     "evaluate a checkpoint on the test set: loss, accuracy, per class, confusion matrix",
     "  --checkpoint DIR     the checkpoint (its recorded config is used)\n" SET_HELP},
    {"predict", "predict --checkpoint CHECKPOINT [--data IMAGES --labels LABELS] -o FILE",
     "write every test sample's label, predicted class and probabilities as CSV",
     "  --checkpoint DIR     the checkpoint (its recorded config is used)\n"
     "  --data IMAGES        an IDX image file instead of the config's test images ...\n"
     "  --labels LABELS      ... with its IDX label file\n"
     "  -o, --output FILE    the CSV: index,label,predicted,p0,...\n" SET_HELP},
    {"generate",
     "generate --checkpoint CHECKPOINT [--prompt TEXT] [-n N] [--temperature T] [--top-k K]\n"
     "                   [--seed S]",
     "sample text from a language-model checkpoint (a gpt)",
     "  --checkpoint DIR     the checkpoint (its recorded config is used; no data files needed)\n"
     "  --prompt TEXT        the text to continue, one token per byte (default: none; the\n"
     "                       text starts after a newline, which is not printed)\n"
     "  -n N                 tokens to generate (default 500)\n"
     "  --temperature T      logits / T before the softmax; 0 = always the likeliest (default 0.8)\n"
     "  --top-k K            sample among the K likeliest tokens only; 0 = all (default 40)\n"
     "  --seed S             the sampling seed: the same seed, the same text (default 0)\n"
     "\n"
     "Prints the prompt, then the tokens as they come, as UTF-8 (bytes that are not valid\n"
     "UTF-8 as U+FFFD), exactly that text: no newline is added. Runs on one rank (under\n"
     "mpirun, rank 0 generates).\n"},
    {"inspect", "inspect CHECKPOINT",
     "print a checkpoint's manifest and verify every digest", ""},
    {"export", "export CHECKPOINT --format npz|safetensors -o FILE",
     "write a checkpoint's parameters and buffers for NumPy / PyTorch users",
     "  --format npz         a ZIP of .npy files, numpy.load(FILE)[name]\n"
     "  --format safetensors the safetensors format (JSON header, raw float32)\n"
     "  -o, --output FILE    the file to write (atomically)\n"
     "\n"
     "Names and shapes are the state_dict's (an nn.Sequential called `layers`); a gpt's\n"
     "are nanoGPT's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...,\n"
     "lm_head.weight: the tied head, wte's values).\n"},
    {"config", "config --list [--tsv] [--config FILE [--set S.K=V]...] | --check FILE [--set S.K=V]...",
     "list every config key, or check a config as training would",
     "  --list               every key: type, allowed values, default, whether it changes\n"
     "                       the experiment, help\n"
     "  --config FILE        with --list: also FILE's resolved values ('*': not the default)\n"
     "  --tsv                with --list: tab-separated, one line per key\n"
     "  --check FILE         check the config, the data files, the model and the batch\n"
     "                       split over the ranks (run it under mpirun with your N)\n" SET_HELP},
    {"audit",
     "audit verify RUN_DIR | diff CKPT_A CKPT_B | replay CKPT_A CKPT_B [--out DIR] [--set S.K=V]...\n"
     "                   [--gemm auto|openblas|own]",
     "verify a run's hash chain, diff two checkpoints, or replay an interval bit for bit",
     "  verify RUN_DIR       every checkpoint of chain.jsonl and every link; the provenance\n"
     "                       table; exit 1 naming the checkpoint on any break\n"
     "  diff CKPT_A CKPT_B   config, provenance and per-tensor differences\n"
     "  replay CKPT_A CKPT_B under mpirun with any N: restore A, train to B's step with B's\n"
     "                       config, compare every tensor and rank record with B, write the\n"
     "                       certificate audit-<A>-<B>.json (in --out DIR, default .)\n"
     "  --set S.K=V          replay: runtime keys only\n"
     "  --gemm IMPL          replay: force the convolutions' matrix products\n"},
    {"data", ct_cli_data_synopsis, ct_cli_data_summary, ct_cli_data_help},
    {"summary", "summary RUN_DIR...",
     "mean +- std of the final metrics of several runs (e.g. train --seeds)", ""},
    {"report", "report RUN_DIR... [-o FILE] [--format html|csv]",
     "a self-contained HTML page of one or more runs (curves, phases, checkpoints, provenance)",
     "  RUN_DIR              a run directory, or a directory of seed-* runs (train --seeds);\n"
     "                       several runs are overlaid with their mean +- std\n"
     "  -o, --output FILE    where to write it, atomically (html: default report.html;\n"
     "                       csv: default standard output; '-': standard output)\n"
     "  --format html        curves per epoch and per step, throughput, each rank's phase\n"
     "                       split, the checkpoint timeline, provenance; no script, nothing\n"
     "                       fetched: open it anywhere, attach it to a ticket\n"
     "  --format csv         the metrics, one row per epoch of each run, with a run column\n"},
};

#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static const char exit_text[] =
    "Exit status: 0 success, 1 run-time error, 2 bad command line or config,\n"
    "3 checkpointed on request (requeue with --resume auto), 4 ended by the hang watchdog.\n";

static const struct command *find_command(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void print_usage(const char *command)
{
    const struct command *c = command ? find_command(command) : NULL;
    if (c) {
        printf("usage: ctrain-dist %s\n\n%s.\n%s%s\n%s", c->synopsis, c->summary, *c->help ? "\n" : "",
               c->help, exit_text);
        return;
    }
    for (int i = 0; i < N_COMMANDS; i++)
        printf("%s ctrain-dist %s\n", i ? "      " : "usage:", commands[i].synopsis);
    printf("       ctrain-dist --version | --help | COMMAND --help\n\n");
    for (int i = 0; i < N_COMMANDS; i++)
        printf("  %-9s %s\n", commands[i].name, commands[i].summary);
    printf("\n`ctrain-dist COMMAND --help` tells a command's options.\n%s", exit_text);
}

static int parse_args(struct args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->command = "train";
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        if (!find_command(argv[i])) {
            char known[256] = "";
            for (int k = 0; k < N_COMMANDS; k++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", k ? ", " : "",
                         commands[k].name);
            return ct_error_set(CT_EUSAGE, "unknown command '%s' (known: %s)", argv[i], known);
        }
        a->command = argv[i++];
        a->explicit_command = 1;
        if ((strcmp(a->command, "inspect") == 0 || strcmp(a->command, "export") == 0) && i < argc &&
            argv[i][0] != '-')
            a->checkpoint = argv[i++];
    }
    for (; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
#define TAKE_VALUE(opt)                                                                      \
    do {                                                                                     \
        size_t l = strlen(opt);                                                              \
        if (strncmp(arg, opt "=", l + 1) == 0)                                               \
            val = arg + l + 1;                                                               \
        else if (i + 1 < argc)                                                               \
            val = argv[++i];                                                                 \
        else                                                                                 \
            return ct_error_set(CT_EUSAGE, "option %s needs a value", opt);                  \
    } while (0)
#define IS_OPT(opt) (strcmp(arg, opt) == 0 || strncmp(arg, opt "=", strlen(opt) + 1) == 0)
        if (arg[0] != '-' && strcmp(a->command, "report") == 0) {
            /* report RUN_DIR...: the run directories, before or after the options. */
            if (a->n_runs == MAX_SETS)
                return ct_error_set(CT_EUSAGE, "report: more than %d run directories", MAX_SETS);
            a->runs[a->n_runs++] = arg;
        } else if (IS_OPT("--config")) {
            TAKE_VALUE("--config");
            a->config = val;
        } else if (IS_OPT("--set")) {
            TAKE_VALUE("--set");
            if (a->n_sets == MAX_SETS)
                return ct_error_set(CT_EUSAGE, "more than %d --set options", MAX_SETS);
            a->sets[a->n_sets++] = val;
        } else if (IS_OPT("--run-dir")) {
            TAKE_VALUE("--run-dir");
            if (!*val)
                return ct_error_set(CT_EUSAGE, "--run-dir needs a non-empty value");
            a->run_dir = val;
        } else if (IS_OPT("--resume")) {
            TAKE_VALUE("--resume");
            if (!*val)
                return ct_error_set(CT_EUSAGE, "--resume needs 'auto' or a checkpoint directory");
            a->resume = val;
        } else if (IS_OPT("--seeds")) {
            TAKE_VALUE("--seeds");
            a->seeds = val;
        } else if (IS_OPT("--checkpoint")) {
            TAKE_VALUE("--checkpoint");
            a->checkpoint = val;
        } else if (IS_OPT("--check")) {
            TAKE_VALUE("--check");
            a->check = val;
        } else if (IS_OPT("--format")) {
            TAKE_VALUE("--format");
            a->format = val;
        } else if (strcmp(arg, "-o") == 0 || IS_OPT("--output")) {
            TAKE_VALUE("--output");
            a->output = val;
        } else if (IS_OPT("--data")) {
            TAKE_VALUE("--data");
            a->data = val;
        } else if (IS_OPT("--labels")) {
            TAKE_VALUE("--labels");
            a->labels = val;
        } else if (IS_OPT("--prompt")) {
            TAKE_VALUE("--prompt");
            a->prompt = val;
        } else if (strcmp(arg, "-n") == 0) {
            TAKE_VALUE("-n");
            a->gen_n = val;
        } else if (IS_OPT("--temperature")) {
            TAKE_VALUE("--temperature");
            a->temperature = val;
        } else if (IS_OPT("--top-k")) {
            TAKE_VALUE("--top-k");
            a->top_k = val;
        } else if (IS_OPT("--seed")) {
            TAKE_VALUE("--seed");
            a->seed = val;
        } else if (strcmp(arg, "--list") == 0) {
            a->list = 1;
        } else if (strcmp(arg, "--tsv") == 0) {
            a->tsv = 1;
        } else if (strcmp(arg, "-q") == 0 || strcmp(arg, "--quiet") == 0) {
            a->quiet = 1;
        } else if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
            a->verbose = 1;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = 1;
        } else if (strcmp(arg, "--version") == 0) {
            a->version = 1;
        } else {
            return ct_error_set(CT_EUSAGE, "unknown option '%s' (see ctrain-dist --help)", arg);
        }
#undef TAKE_VALUE
#undef IS_OPT
    }
    if (a->help || a->version)
        return 0;
    const int is_config = strcmp(a->command, "config") == 0;
    const int is_export = strcmp(a->command, "export") == 0;
    const int is_predict = strcmp(a->command, "predict") == 0;
    const int is_report = strcmp(a->command, "report") == 0;
    if (!is_export && !is_report && a->format)
        return ct_error_set(CT_EUSAGE, "--format belongs to the export and report commands");
    if (!is_export && !is_predict && !is_report && a->output)
        return ct_error_set(CT_EUSAGE, "-o belongs to the export, predict and report commands");
    if (is_report) {
        if (a->n_runs == 0)
            return ct_error_set(CT_EUSAGE, "report needs one or more run directories (see ctrain-dist "
                                "report --help)");
        if (a->config || a->n_sets || a->run_dir || a->resume || a->checkpoint || a->seeds || a->data ||
            a->labels || a->list || a->tsv || a->check)
            return ct_error_set(CT_EUSAGE, "report takes run directories, -o FILE and --format only");
        if (a->output && !*a->output)
            return ct_error_set(CT_EUSAGE, "report: -o needs a file name");
        return 0;
    }
    if (strcmp(a->command, "generate") != 0 &&
        (a->prompt || a->gen_n || a->temperature || a->top_k || a->seed))
        return ct_error_set(CT_EUSAGE, "--prompt, -n, --temperature, --top-k and --seed belong to the "
                            "generate command");
    if (!is_predict && (a->data || a->labels))
        return ct_error_set(CT_EUSAGE, "--data and --labels belong to the predict command");
    if (is_predict && (!a->output || !*a->output))
        return ct_error_set(CT_EUSAGE, "predict needs -o FILE (the CSV to write)");
    if (is_predict && !a->data != !a->labels)
        return ct_error_set(CT_EUSAGE, "predict: --data IMAGES and --labels LABELS go together");
    if (is_export && (!a->format || !a->output || !*a->output))
        return ct_error_set(CT_EUSAGE, "export needs --format npz|safetensors and -o FILE");
    if (!is_config && (a->list || a->tsv || a->check))
        return ct_error_set(CT_EUSAGE, "--list, --tsv and --check belong to the config command");
    if (is_config) {
        if (a->list == !!a->check)
            return ct_error_set(CT_EUSAGE, "config needs exactly one of --list or --check FILE");
        if (a->check && (a->config || a->tsv))
            return ct_error_set(CT_EUSAGE, "config --check takes the file itself: no --config or --tsv");
        if (a->run_dir || a->resume || a->checkpoint)
            return ct_error_set(CT_EUSAGE, "config takes no --run-dir, --resume or --checkpoint");
        return 0;
    }
    if (strcmp(a->command, "train") == 0 && !a->config)
        return ct_error_set(CT_EUSAGE, "--config FILE is required (see ctrain-dist --help)");
    if (strcmp(a->command, "train") != 0 && !a->checkpoint)
        return ct_error_set(CT_EUSAGE, "%s needs a checkpoint (see ctrain-dist --help)", a->command);
    if (a->seeds && strcmp(a->command, "train") != 0)
        return ct_error_set(CT_EUSAGE, "--seeds is an option of train");
    if (strcmp(a->command, "train") != 0 && (a->config || a->resume))
        return ct_error_set(CT_EUSAGE, "%s takes its config from the checkpoint: no --config or --resume",
                            a->command);
    return 0;
}

static void print_version(void)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    char *nl = strchr(mpi, '\n');
    if (nl)
        *nl = '\0';
    printf("ctrain-dist %s (%s)\n  MPI: %s\n  OpenBLAS: %s\n", CT_VERSION, CT_GIT_DESCRIBE, mpi,
           ct_blas_config());
}

/* Report an agreed error once (rank 0 holds the combined report) and pick the
 * exit status. */
static int fail(const struct ct_comm *c, int rc, int status)
{
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    (void)rc;
    return status;
}

/* OpenBLAS picks its kernels when the library is loaded, before main(), from
 * OPENBLAS_CORETYPE or its own CPU detection; on CPUs it does not know it
 * falls back to generic SSE3 kernels. When that happened on a CPU that
 * supports better ones (ct_blas_better_coretype), run this program again with
 * OPENBLAS_CORETYPE set, before MPI starts: same PID, same arguments, same
 * environment plus that variable, so mpirun does not notice. A variable that
 * is already set is never changed; CT_BLAS_CORETYPE_AUTO=0 turns this off. */
static volatile sig_atomic_t g_early_stop;
static void stop_signal_mask(int how);

static void reexec_with_better_blas(char **argv)
{
    const char *off = getenv("CT_BLAS_CORETYPE_AUTO");
    if ((off && strcmp(off, "0") == 0) || getenv("CT__BLAS_REEXEC"))
        return;
    const char *better = ct_blas_better_coretype();
    if (!better)
        return;
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv("CT__BLAS_REEXEC", better, 1);
    /* A stop signal already caught would die with this image: block them
     * and raise the caught one again, so it is pending across the exec
     * (the mask and pending signals survive it) until the new main
     * installs its handler and unblocks. */
    stop_signal_mask(SIG_BLOCK);
    if (g_early_stop)
        raise(g_early_stop);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the kernels we have (the trainer warns). */
    unsetenv("OPENBLAS_CORETYPE");
    stop_signal_mask(SIG_UNBLOCK);
}

static void on_stop_signal(int sig) { ct_trainer_request_stop(sig); }

/* SIGUSR1 (Slurm's warning before the time limit) and SIGTERM (preemption,
 * scancel) ask a training run to checkpoint at the next step and exit 3.
 * They are caught from the first instruction of main, before the command is
 * known, so that one arriving while the ranks start (MPI_Init, the BLAS
 * re-exec, loading the data) is remembered instead of killing the rank with
 * the default action. A handler, not a blocked mask: OpenBLAS starts its
 * thread pool in a library constructor, before main, and a signal sent to
 * the process goes to any thread that does not block it, so only the
 * disposition, which is process-wide, holds everywhere. `train` then takes
 * a remembered signal as its stop request; every other command gets the
 * default action back, and a remembered signal is raised again. (Between
 * exec and main, while the dynamic loader runs, nothing of ours can catch
 * it.) SA_RESTART: a signal must not fail a blocking read of a data file
 * (a pipe, a slow file system) with EINTR; the stop is taken at the next
 * step anyway. */
static void on_early_stop(int sig) { g_early_stop = sig; }

static void set_stop_handler(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = handler == SIG_DFL ? 0 : SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void stop_signal_mask(int how)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(how, &set, NULL);
}

static void route_stop_signals(int train)
{
    if (train) {
        set_stop_handler(on_stop_signal);
        if (g_early_stop)
            ct_trainer_request_stop(g_early_stop);
        return;
    }
    set_stop_handler(SIG_DFL);
    if (g_early_stop)
        raise(g_early_stop);
}

/* The watchdog found the job stalled and printed why: end every rank, with
 * a status of its own so a batch script can tell a hang from an error. */
static void on_stall(const char *message, void *ctx)
{
    (void)message;
    (void)ctx;
    MPI_Abort(MPI_COMM_WORLD, EXIT_HANG);
}

/* Collective. dist.watchdog_s > 0: start the hang watchdog over the run
 * directory with a nonce of this job (rank 0's clock), so heartbeats left by
 * an earlier job there are never taken for this one's. */
static int start_watchdog(struct ct_watchdog *wd, struct ct_comm *comm, const struct ct_config *cfg,
                          const char *run_dir)
{
    memset(wd, 0, sizeof *wd);
    wd->fd = -1;
    if (cfg->dist.watchdog_s <= 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t nonce = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    int rc = ct_comm_bcast(comm, &nonce, sizeof nonce, 0);
    if (rc == 0)
        rc = ct_watchdog_start(wd, &(struct ct_watchdog_params){
                                       .run_dir = run_dir, .rank = comm->rank, .world = comm->world,
                                       .host = comm->host, .deadline_s = cfg->dist.watchdog_s,
                                       .nonce = nonce, .on_stall = on_stall});
    /* Started on some ranks only: stop those (safe on the others). */
    if ((rc = ct_comm_agree(comm, rc)) < 0)
        ct_watchdog_stop(wd);
    return rc;
}

static int cmd_train(struct ct_comm *comm, const struct args *a)
{
    static struct ct_config cfg;
    int rc = ct_comm_agree(comm, ct_config_load(&cfg, a->config, a->sets, a->n_sets));
    if (rc < 0)
        return fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
    char run_dir[1024];
    if (a->run_dir)
        snprintf(run_dir, sizeof run_dir, "%s", a->run_dir);
    else
        snprintf(run_dir, sizeof run_dir, "runs/%s", cfg.name);
    if (a->seed_dir[0] && strlen(run_dir) + strlen(a->seed_dir) + 2 < sizeof run_dir)
        strcat(strcat(run_dir, "/"), a->seed_dir);

    /* The watchdog watches the start-up too (loading the data, verifying
     * the checkpoint to resume from: both mark their progress), so a rank
     * stopped there does not hold the others forever. Its heartbeats live
     * in RUN_DIR/heartbeat/, which ct_trainer_init does not move aside with
     * an earlier run's files: the records carry this job's nonce. */
    static struct ct_watchdog wd;
    if ((rc = start_watchdog(&wd, comm, &cfg, run_dir)) < 0)
        return fail(comm, rc, EXIT_RUNTIME);
    static struct ct_trainer tr;
    rc = ct_trainer_init(&tr, &cfg, comm, run_dir, a->resume);
    if (rc < 0) {
        ct_watchdog_stop(&wd);
        return fail(comm, rc, rc == CT_ECONFIG || rc == CT_EMISMATCH ? EXIT_USAGE : EXIT_RUNTIME);
    }
    struct ct_train_summary sum;
    rc = ct_trainer_run(&tr, &sum);
    ct_watchdog_stop(&wd);
    if (rc < 0) {
        if (tr.error_agreed) {
            /* Every rank saw the same failure (a checkpoint that could not be
             * written with checkpoint.on_error = stop): exit cleanly. */
            ct_trainer_free(&tr);
            return fail(comm, rc, EXIT_RUNTIME);
        }
        /* A failure inside the step loop may have happened on one rank only,
         * with the others already waiting in the next collective: agreement is
         * not possible any more, so end the job. */
        ct_log_error("%s", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    }
    if (sum.stopped_by_signal) {
        ct_log_info("stopped by signal %d at step %lld after writing a checkpoint; continue with "
                    "--resume auto (exit status %d)",
                    sum.stopped_by_signal, (long long)sum.steps, EXIT_REQUEUE);
        ct_trainer_free(&tr);
        return EXIT_REQUEUE;
    }
    ct_log_info("done: %lld steps in %.2f s of training, %.0f samples/s; final test_acc %.4f "
                "test_loss %.4f; params sha256 %s",
                (long long)sum.steps, sum.train_s, sum.samples_per_s, sum.last.test_acc,
                sum.last.test_loss, sum.last.param_sha256);
    ct_trainer_free(&tr);
    return 0;
}

/* --seeds 0,1,2: the seeds, checked before anything runs (a bad list is a
 * usage error on every rank: every rank parses the same argument). */
static int parse_seeds(const char *list, unsigned long long *v, int max, int *n)
{
    *n = 0;
    for (const char *p = list; *p;) {
        char *end;
        if (*p < '0' || *p > '9')
            return ct_error_set(CT_EUSAGE, "--seeds '%s': expected non-negative integers separated "
                                "by commas", list);
        unsigned long long x = strtoull(p, &end, 10);
        if (*n == max)
            return ct_error_set(CT_EUSAGE, "--seeds: more than %d seeds", max);
        for (int i = 0; i < *n; i++)
            if (v[i] == x)
                return ct_error_set(CT_EUSAGE, "--seeds '%s': seed %llu twice", list, x);
        v[(*n)++] = x;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return ct_error_set(CT_EUSAGE, "--seeds '%s': expected non-negative integers separated "
                                "by commas", list);
        p = end;
    }
    return *n ? 0 : ct_error_set(CT_EUSAGE, "--seeds needs at least one seed");
}

/* One experiment per seed, each in its own run directory RUN_DIR/seed-K
 * with train.seed = K (recorded in its config.ini and checkpoints); the
 * first failure or stop request ends the series with its status. */
static int cmd_train_seeds(struct ct_comm *comm, struct args *a)
{
    unsigned long long seeds[64];
    int n = 0;
    int rc = ct_comm_agree(comm, parse_seeds(a->seeds, seeds, 64, &n));
    if (rc == 0 && a->n_sets == MAX_SETS)
        rc = ct_comm_agree(comm, ct_error_set(CT_EUSAGE, "more than %d --set options", MAX_SETS - 1));
    if (rc < 0)
        return fail(comm, rc, EXIT_USAGE);
    static char seed_set[64];
    for (int i = 0; i < n; i++) {
        snprintf(seed_set, sizeof seed_set, "train.seed=%llu", seeds[i]);
        snprintf(a->seed_dir, sizeof a->seed_dir, "seed-%llu", seeds[i]);
        a->sets[a->n_sets++] = seed_set; /* last: it wins over any other train.seed */
        ct_log_info("seed %llu (%d of %d)", seeds[i], i + 1, n);
        int status = cmd_train(comm, a);
        a->n_sets--;
        if (status != 0)
            return status;
    }
    return 0;
}

/* The checkpoint DIR opened and its recorded config loaded with the
 * overrides `sets` (collective: every rank gets the same status). Returns
 * < 0 with nothing open when the checkpoint cannot be opened (*opened 0);
 * otherwise the config's status, the checkpoint left open for the caller
 * to close (*opened 1). */
static int open_recorded(struct ct_comm *comm, const char *dir, const char *const *sets, int n_sets,
                         struct ct_ckpt *ck, struct ct_config *cfg, int *opened)
{
    *opened = 0;
    int rc = ct_comm_agree(comm, ct_ckpt_open(ck, dir));
    if (rc < 0)
        return rc;
    *opened = 1;
    char label[1200];
    snprintf(label, sizeof label, "%s/manifest.pb", dir);
    return ct_comm_agree(comm, ct_config_load_text(cfg, ct_ckpt_config_text(ck), label, sets, n_sets));
}

/* A whole decimal number in [lo, hi] from an option's text. */
static int parse_number(const char *opt, const char *text, double lo, double hi, int integer,
                        double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= lo && v <= hi) || (integer && v != floor(v)))
        return ct_error_set(CT_EUSAGE, "%s '%s': expected %s in [%g, %g]", opt, text,
                            integer ? "a whole number" : "a number", lo, hi);
    *out = v;
    return 0;
}

/* Sample text from a gpt checkpoint: rank 0 generates, the others wait. */
static int cmd_generate(struct ct_comm *comm, const struct args *a)
{
    struct ct_generate_params gp = {.prompt = a->prompt, .n = 500, .temperature = 0.8, .top_k = 40,
                                    .seed = 0, .out = stdout};
    double v;
    int rc = 0;
    if (rc == 0 && a->gen_n && (rc = parse_number("-n", a->gen_n, 0, 1e9, 1, &v)) == 0)
        gp.n = (int64_t)v;
    if (rc == 0 && a->temperature &&
        (rc = parse_number("--temperature", a->temperature, 0, 1e6, 0, &v)) == 0)
        gp.temperature = v;
    if (rc == 0 && a->top_k && (rc = parse_number("--top-k", a->top_k, 0, 65536, 1, &v)) == 0)
        gp.top_k = (int)v;
    if (rc == 0 && a->seed) { /* any uint64, as train.seed: not through a double */
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(a->seed, &end, 10);
        if (!isdigit((unsigned char)a->seed[0]) || *end || errno)
            rc = ct_error_set(CT_EUSAGE, "--seed '%s': expected a whole number in [0, %llu]", a->seed,
                              (unsigned long long)UINT64_MAX);
        gp.seed = seed;
    }
    if ((rc = ct_comm_agree(comm, rc)) < 0)
        return fail(comm, rc, EXIT_USAGE);
    static struct ct_ckpt ck;
    static struct ct_config cfg;
    int opened;
    rc = open_recorded(comm, a->checkpoint, a->sets, a->n_sets, &ck, &cfg, &opened);
    if (!opened)
        return fail(comm, rc, EXIT_RUNTIME);
    if (rc == 0 && comm->rank == 0)
        rc = ct_generate(&ck, &cfg, &gp); /* its messages name the checkpoint */
    rc = ct_comm_agree(comm, rc);
    ct_ckpt_close(&ck);
    return rc < 0 ? fail(comm, rc, rc == CT_EINVAL ? EXIT_USAGE : EXIT_RUNTIME) : 0;
}

/* Evaluate a checkpoint: its own recorded config (with --set overrides, e.g.
 * another data.dir), its parameters and buffers, the test set in eval mode. */
static int cmd_eval(struct ct_comm *comm, const struct args *a)
{
    static struct ct_ckpt ck;
    static struct ct_config cfg;
    /* predict --data/--labels: the test set's files replaced, after the
     * user's --set overrides. */
    const char *sets[MAX_SETS + 2];
    int n_sets = a->n_sets, opened;
    char set_images[CT_CONFIG_PATH_MAX + 32], set_labels[CT_CONFIG_PATH_MAX + 32];
    memcpy(sets, a->sets, sizeof(a->sets[0]) * (size_t)a->n_sets);
    if (a->data) {
        snprintf(set_images, sizeof set_images, "data.test_images=%s", a->data);
        snprintf(set_labels, sizeof set_labels, "data.test_labels=%s", a->labels);
        sets[n_sets++] = set_images;
        sets[n_sets++] = set_labels;
    }
    int rc = open_recorded(comm, a->checkpoint, sets, n_sets, &ck, &cfg, &opened);
    if (!opened)
        return fail(comm, rc, EXIT_RUNTIME);
    if (rc == 0) {
        /* No training set, no optimizer state, no run directory: the
         * session of the test set alone. */
        static struct ct_session s;
        struct ct_session_params sp = {.train = 0, .digests = 0};
        rc = ct_session_init(&s, &cfg, comm, &sp);
        if (rc == 0) {
            rc = ct_comm_agree(comm, ct__model_restore(&s.model, &ck));
            struct ct_predictions p;
            const int predict = strcmp(a->command, "predict") == 0;
            if (rc == 0)
                rc = ct_session_predict(&s, predict, &p);
            if (rc == 0) {
                int wrc = 0;
                if (comm->rank == 0) {
                    printf("checkpoint %s (step %lld): test_loss %.6f test_acc %.4f on %zu samples, "
                           "%d rank%s x %d thread%s (%s)\n",
                           a->checkpoint, (long long)ct_ckpt_step(&ck), p.loss, p.acc, s.test.n,
                           comm->world, comm->world == 1 ? "" : "s", ct_gemm_threads(),
                           ct_gemm_threads() == 1 ? "" : "s", ct_gemm_impl());
                    char bpb[48] = ""; /* byte tokens: a token is a byte */
                    if (p.targets > 1 && p.n_classes <= 256)
                        snprintf(bpb, sizeof bpb, ", val_bpb %.4f", p.loss / log(2.0));
                    if (p.targets > 1)
                        printf("val_loss %.6f nats per token%s, next-token accuracy %.4f, "
                               "%zu windows of %d tokens\n", p.loss, bpb, p.acc, p.n, p.targets);
                    else
                        wrc = predict ? ct_predictions_write_csv(&p, a->output)
                                      : ct_predictions_print_confusion(&p, stdout);
                    if (wrc == 0 && predict)
                        printf("%s: %zu predictions of %s\n", a->output, p.n, s.cfg->data.test_images);
                }
                ct_predictions_free(&p);
                rc = ct_comm_agree(comm, wrc);
            }
            ct_session_free(&s);
        }
    }
    ct_ckpt_close(&ck);
    return rc < 0 ? fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME) : 0;
}

/* The model's parameters and buffers under their state_dict names, in
 * state_dict order (parameters first, then the running statistics). */
static int export_views(const struct ct_layout *lay, const struct ct_flat *f,
                        struct ct_export_tensor *t, int n)
{
    for (int i = 0; i < lay->n; i++)
        t[n++] = (struct ct_export_tensor){.name = lay->views[i].name, .ndim = lay->views[i].ndim,
                                           .shape = lay->views[i].shape,
                                           .data = f->data + lay->views[i].offset};
    return n;
}

/* export: the checkpoint verified and restored into its own model (the
 * session of eval: recorded config, no training set, no run directory), then
 * written by rank 0. */
static int cmd_export(struct ct_comm *comm, const struct args *a)
{
    int format = -1;
    for (int i = 0; ct_export_format_names[i]; i++)
        if (strcmp(a->format, ct_export_format_names[i]) == 0)
            format = i;
    int rc = ct_comm_agree(comm, format < 0 ? ct_error_set(CT_EUSAGE, "--format '%s': expected npz "
                                                           "or safetensors", a->format)
                                            : 0);
    if (rc < 0)
        return fail(comm, rc, EXIT_USAGE);
    static struct ct_ckpt ck;
    static struct ct_config cfg;
    int opened;
    rc = open_recorded(comm, a->checkpoint, NULL, 0, &ck, &cfg, &opened);
    if (!opened)
        return fail(comm, rc, EXIT_RUNTIME);
    static struct ct_session s;
    struct ct_session_params sp = {.train = 0, .digests = 0};
    int have_session = rc == 0 && (rc = ct_session_init(&s, &cfg, comm, &sp)) == 0;
    if (have_session)
        rc = ct_comm_agree(comm, ct__model_restore(&s.model, &ck));
    if (rc == 0) {
        const struct ct_model *m = &s.model;
        int n = m->layout.n + m->buffer_layout.n;
        struct ct_export_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
        char step[32], epoch[32];
        snprintf(step, sizeof step, "%lld", (long long)ct_ckpt_step(&ck));
        snprintf(epoch, sizeof epoch, "%lld", (long long)ct_ckpt_epoch(&ck));
        const struct ct_export_meta meta[] = {
            {"format", "ctrain-dist state_dict"}, {"checkpoint", a->checkpoint},
            {"model", cfg.model.name}, {"step", step}, {"epoch", epoch},
            {"code_version", ct_ckpt_code_version(&ck)}, {"config", ct_ckpt_config_text(&ck)},
        };
        int wrc = 0;
        if (comm->rank == 0) {
            if (!t) {
                wrc = ct_error_set(CT_ENOMEM, "export: out of memory");
            } else {
                int k = export_views(&m->layout, &m->params, t, 0);
                k = export_views(&m->buffer_layout, &m->buffers, t, k);
                wrc = ct_export_write_model(a->output, (enum ct_export_format)format,
                                            cfg.model.name, t, k, meta,
                                            (int)(sizeof meta / sizeof meta[0]));
                if (wrc >= 0) {
                    printf("%s: %d tensors (%zu parameters) of %s (step %s) as %s\n", a->output,
                           wrc, ct_model_param_count(m), a->checkpoint, step, a->format);
                    wrc = 0;
                }
            }
        }
        free(t);
        rc = ct_comm_agree(comm, wrc);
    }
    if (have_session)
        ct_session_free(&s);
    ct_ckpt_close(&ck);
    return rc < 0 ? fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME) : 0;
}

/* report: rank 0 reads the run directories and writes the page or CSV;
 * everybody learns the outcome. */
static int cmd_report(struct ct_comm *comm, const struct args *a)
{
    int format = a->format ? -1 : CT_REPORT_HTML;
    for (int i = 0; a->format && ct_report_format_names[i]; i++)
        if (strcmp(a->format, ct_report_format_names[i]) == 0)
            format = i;
    int rc = ct_comm_agree(comm, format < 0 ? ct_error_set(CT_EUSAGE, "--format '%s': expected html "
                                                           "or csv", a->format)
                                            : 0);
    if (rc < 0)
        return fail(comm, rc, EXIT_USAGE);
    const char *path = a->output ? a->output : format == CT_REPORT_HTML ? "report.html" : NULL;
    if (comm->rank == 0)
        rc = ct_report(a->runs, a->n_runs, (enum ct_report_format)format, path,
                       stdout);
    rc = ct_comm_agree(comm, rc);
    return rc < 0 ? fail(comm, rc, rc == CT_EUSAGE ? EXIT_USAGE : EXIT_RUNTIME) : 0;
}

static int cmd_inspect(struct ct_comm *comm, const struct args *a)
{
    int rc = 0;
    if (comm->rank == 0)
        rc = ct_ckpt_inspect(a->checkpoint, stdout);
    rc = ct_comm_agree(comm, rc);
    return rc < 0 ? fail(comm, rc, EXIT_RUNTIME) : 0;
}

/* config --list: the schema (and a file's resolved values); config --check:
 * everything training checks before its first step, without a run directory:
 * the config, the data files, the model against the data's shape, the batch
 * split over this many ranks. */
static int cmd_config(struct ct_comm *comm, const struct args *a)
{
    static struct ct_config cfg;
    const char *path = a->check ? a->check : a->config;
    int rc = 0;
    if (path) {
        rc = ct_comm_agree(comm, ct_config_load(&cfg, path, a->sets, a->n_sets));
        if (rc < 0)
            return fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
    } else if (a->n_sets) {
        return fail(comm, ct_comm_agree(comm, ct_error_set(CT_EUSAGE, "--set needs --config FILE")),
                    EXIT_USAGE);
    }
    if (a->list) {
        if (comm->rank == 0)
            rc = ct_config_list(stdout, path ? &cfg : NULL, a->tsv);
        rc = ct_comm_agree(comm, rc);
        return rc < 0 ? fail(comm, rc, EXIT_RUNTIME) : 0;
    }
    static struct ct_session s;
    struct ct_session_params sp = {.train = 1, .digests = 0};
    rc = ct_session_init(&s, &cfg, comm, &sp);
    if (rc < 0)
        return fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
    if (comm->rank == 0)
        printf("%s: ok: model %s, %zu parameters, %zu training and %zu test samples, "
               "%d rank%s x %d samples per step, %lld steps per epoch\n",
               path, cfg.model.name, s.model.params.numel, s.train.n, s.test.n, comm->world,
               comm->world == 1 ? "" : "s", s.batches.local_batch, (long long)s.steps_per_epoch);
    ct_session_free(&s);
    return 0;
}

int main(int argc, char **argv)
{
    set_stop_handler(on_early_stop);
    /* A write to a closed pipe (`ctrain-dist inspect CKPT | grep -q ...`,
     * grep gone after its match) fails with EPIPE instead of killing the
     * process with SIGPIPE (status 141: a failed pipeline under `set -o
     * pipefail`). Neither MPI changes SIGPIPE in a rank (Open MPI 4.1.4 and
     * MPICH 4.0.2 leave the default action), so whether the last write
     * comes before the reader goes is a race, seen lost under MPICH. */
    signal(SIGPIPE, SIG_IGN);
    stop_signal_mask(SIG_UNBLOCK); /* after a re-exec: a signal raised before it arrives now */
    reexec_with_better_blas(argv);
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "ctrain-dist: error: MPI_Init_thread failed\n");
        return EXIT_RUNTIME;
    }
    struct ct_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    if (ct_comm_init_mpi(&comm, &world) < 0) {
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
        return EXIT_RUNTIME;
    }

    struct args a;
    int status = 0;
    if (argc == 3 &&
        (strcmp(argv[1], "audit") == 0 || strcmp(argv[1], "summary") == 0 || strcmp(argv[1], "data") == 0) &&
        (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
        if (comm.rank == 0)
            print_usage(argv[1]);
        goto out;
    }
    if (argc > 1 && (strcmp(argv[1], "audit") == 0 || strcmp(argv[1], "summary") == 0 ||
                     strcmp(argv[1], "data") == 0)) {
        /* Subcommands with arguments of their own (src/cli/audit.c, data.c). */
        route_stop_signals(0);
        int r = ct_comm_agree(&comm, ct_simd_init());
        ct_log_init(comm.rank, comm.world, CT_LOG_LEVEL_INFO);
        if (r < 0)
            status = fail(&comm, r, EXIT_USAGE);
        else if (strcmp(argv[1], "audit") == 0)
            status = ct_cli_audit(&comm, argc - 1, argv + 1);
        else if (strcmp(argv[1], "data") == 0)
            status = ct_cli_data(&comm, argc - 1, argv + 1);
        else
            status = ct_cli_summary(&comm, argc - 1, argv + 1);
        goto out;
    }
    int rc = parse_args(&a, argc, argv);
    if (rc == 0)
        rc = ct_simd_init(); /* a bad CT_SIMD is a usage error */
    enum ct_progress_mode progress_mode;
    if (rc == 0)
        rc = ct_progress_env_mode(&progress_mode); /* and so is a bad CT_PROGRESS */
    rc = ct_comm_agree(&comm, rc);
    if (rc < 0) {
        status = fail(&comm, rc, EXIT_USAGE);
        goto out;
    }
    ct_log_init(comm.rank, comm.world,
                a.quiet     ? CT_LOG_LEVEL_WARN
                : a.verbose ? CT_LOG_LEVEL_DEBUG
                            : CT_LOG_LEVEL_INFO);
    if (a.help || a.version) {
        if (comm.rank == 0) {
            if (a.help)
                print_usage(a.explicit_command ? a.command : NULL);
            else
                print_version();
        }
        goto out;
    }

    route_stop_signals(strcmp(a.command, "train") == 0);
    if (strcmp(a.command, "export") == 0)
        status = cmd_export(&comm, &a);
    else if (strcmp(a.command, "config") == 0)
        status = cmd_config(&comm, &a);
    else if (strcmp(a.command, "inspect") == 0)
        status = cmd_inspect(&comm, &a);
    else if (strcmp(a.command, "report") == 0)
        status = cmd_report(&comm, &a);
    else if (strcmp(a.command, "eval") == 0 || strcmp(a.command, "predict") == 0)
        status = cmd_eval(&comm, &a);
    else if (strcmp(a.command, "generate") == 0)
        status = cmd_generate(&comm, &a);
    else if (a.seeds)
        status = cmd_train_seeds(&comm, &a);
    else
        status = cmd_train(&comm, &a);
out:
    ct_comm_free(&comm);
    MPI_Finalize();
    return status;
}
