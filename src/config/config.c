/* Run configuration: the schema table, INI parsing (inih), `--set` overrides,
 * validation and the resolved-config writer (see config.h).
 *
 * Every key is declared once, in `keys[]` below; parsing, defaults, the
 * required-key check and the writer all walk that table, so adding a key is
 * one line here plus its field in struct ct_config. This file deliberately
 * knows nothing about what the values mean beyond their types, ranges and a
 * few cross-key rules (validate()); the modules that use them do the rest.
 *
 * Line numbers: Debian's inih is built without INI_HANDLER_LINENO, so we feed
 * inih through our own line reader (read_line) and the handler reads the
 * current line number from the shared parse state. The reader hands inih
 * exactly one physical line per call, so its count and ours agree, and the
 * line numbers inih returns for its own syntax errors match too.
 */
#include "config/config.h"

#include "core/error.h"
#include "core/gemm.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "parallel/compress.h"
#include "parallel/placement.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include <ini.h>

/* ------------------------------------------------------------------------ */
/* Schema                                                                   */
/* ------------------------------------------------------------------------ */

enum key_type {
    KT_INT,      /* int, range [imin, imax] */
    KT_INT64,    /* int64_t, range [imin, imax] */
    KT_UINT64,   /* uint64_t, full range */
    KT_DOUBLE,   /* finite double, range dmin..dmax, ends open per flags */
    KT_BOOL,     /* int 0/1 */
    KT_STRING,   /* char[size], non-empty; restricted to the key's choices if it has any */
    KT_ENUM,     /* enum stored as int: index into `choices` */
    KT_INT_LIST, /* int[size/sizeof(int)] plus a count at count_off */
    KT_DOUBLE_LIST, /* double[size/sizeof(double)] plus a count at count_off; each as KT_DOUBLE */
};

enum {
    KF_REQUIRED = 1u << 0, /* the file or an override must name it */
    KF_LO_OPEN = 1u << 1,  /* doubles: the lower bound itself is excluded */
    KF_HI_OPEN = 1u << 2,  /* doubles: the upper bound itself is excluded */
    KF_AUTO = 1u << 3,     /* ints: the word "auto" stands for 0 */
    KF_RUNTIME = 1u << 4,  /* does not change the experiment's state: may differ on resume */
    KF_EMPTY = 1u << 5,    /* strings: may be empty */
};

struct key {
    const char *section;
    const char *name;
    enum key_type type;
    size_t off, size;         /* the field in struct ct_config */
    size_t count_off;         /* int lists: where the number of entries goes */
    const char *def;          /* default as text; NULL: none */
    int64_t imin, imax;       /* integer types and list entries, inclusive */
    double dmin, dmax;        /* doubles */
    unsigned flags;
    const char *const *choices; /* NULL-terminated */
    /* Choices that grow at run time (the model registry): asked for at each
     * use instead of `choices`. KT_STRING only: an enum's indices must not
     * depend on what a program registered. */
    const char *const *(*choices_fn)(void);
    const char *help;
};

#define FIELD(m) .off = offsetof(struct ct_config, m), .size = sizeof(((struct ct_config *)0)->m)

/* Allowed values. Models, optimizers, schedules and placement modes parse
 * through the name tables their own modules own (a model is known once it is
 * in the registry of src/models, the zoo's or one a program registered, and
 * nowhere else); the small choices below are the config's. */
static const char *const bn_sync_names[] = {"local", "sync", NULL};
static const char *const gelu_names[] = {"exact", "tanh", NULL};
static const char *const on_error_names[] = {"stop", "continue", NULL};
static const char *const on_nonfinite_names[] = {"stop", "skip", NULL};
/* The data layer's names (data/dataset.h), in its enums' order. */
static const char *const data_format_names[] = {"auto", "idx", "npy", "cifar10", "tokens", NULL};
static const char *const data_layout_names[] = {"auto", "nchw", "nhwc", NULL};
static const char *const data_augment_names[] = {"none", "crop_flip", NULL};
static const char *const grad_sync_names[] = {"overlap", "blocking", NULL};

static const struct key keys[] = {
    {.section = "data", .name = "dir", .type = KT_STRING, FIELD(data.dir),
     .def = "/usr/share/datasets/fashion-mnist", .flags = KF_REQUIRED,
     .help = "directory that holds the data files"},
    {.section = "data", .name = "train_images", .type = KT_STRING, FIELD(data.train_images),
     .def = "train-images-idx3-ubyte.gz",
     .help = "training images (IDX or .npy; cifar10: a comma list of batches), relative to dir"},
    {.section = "data", .name = "train_labels", .type = KT_STRING, FIELD(data.train_labels),
     .def = "train-labels-idx1-ubyte.gz", .flags = KF_EMPTY,
     .help = "training labels (IDX or .npy), relative to dir; empty for cifar10"},
    {.section = "data", .name = "test_images", .type = KT_STRING, FIELD(data.test_images),
     .def = "t10k-images-idx3-ubyte.gz",
     .help = "test images (IDX or .npy; cifar10: a comma list of batches), relative to dir"},
    {.section = "data", .name = "test_labels", .type = KT_STRING, FIELD(data.test_labels),
     .def = "t10k-labels-idx1-ubyte.gz", .flags = KF_EMPTY,
     .help = "test labels (IDX or .npy), relative to dir; empty for cifar10"},
    {.section = "data", .name = "format", .type = KT_STRING, FIELD(data.format), .def = "auto",
     .choices = data_format_names,
     .help = "file format: auto (by the images file's first bytes), idx, npy, cifar10, or tokens "
             "(llm.c-layout token shards: a comma list each)"},
    {.section = "data", .name = "vocab", .type = KT_INT, FIELD(data.vocab), .def = "0",
     .imin = 0, .imax = 65536,
     .help = "tokens: vocabulary size, every token below it (256: bytes, 50257: GPT-2); "
             "0 = 1 + the largest token of the data"},
    {.section = "data", .name = "layout", .type = KT_STRING, FIELD(data.layout), .def = "auto",
     .choices = data_layout_names,
     .help = ".npy images of rank 4: nchw, nhwc, or auto (a last axis of 1, 3 or 4 is channels)"},
    {.section = "data", .name = "mean", .type = KT_DOUBLE_LIST, FIELD(data.mean),
     .count_off = offsetof(struct ct_config, data.n_mean), .def = "0.2860",
     .dmin = -INFINITY, .dmax = INFINITY, .flags = KF_LO_OPEN | KF_HI_OPEN,
     .help = "pixel mean after scaling to [0,1]: one value, or one per channel"},
    {.section = "data", .name = "std", .type = KT_DOUBLE_LIST, FIELD(data.std),
     .count_off = offsetof(struct ct_config, data.n_std), .def = "0.3530",
     .dmin = 0, .dmax = INFINITY, .flags = KF_LO_OPEN | KF_HI_OPEN,
     .help = "pixel standard deviation after scaling to [0,1]: one value, or one per channel"},
    {.section = "data", .name = "augment", .type = KT_STRING, FIELD(data.augment), .def = "none",
     .choices = data_augment_names,
     .help = "training augmentation: none, or crop_flip (random crop of the padded image and "
             "horizontal flip, drawn per (seed, epoch, sample))"},
    {.section = "data", .name = "crop_pad", .type = KT_INT, FIELD(data.crop_pad), .def = "4",
     .imin = 0, .imax = 64, .help = "crop_flip: zero padding on each side before the crop"},
    {.section = "data", .name = "prefetch", .type = KT_INT, FIELD(data.prefetch), .def = "2",
     .imin = 0, .imax = 64, .flags = KF_RUNTIME,
     .help = "batches a loader thread prepares while the step computes; 0 = gather in the step"},
    {.section = "data", .name = "shared", .type = KT_BOOL, FIELD(data.shared), .def = "true",
     .flags = KF_RUNTIME,
     .help = "ranks of one node map one copy of the training images (MPI shared memory)"},

    {.section = "model", .name = "name", .type = KT_STRING, FIELD(model.name),
     .flags = KF_REQUIRED, .choices_fn = ct_model_names,
     .help = "model architecture: a zoo model or one the program registered"},
    {.section = "model", .name = "hidden", .type = KT_INT_LIST, FIELD(model.hidden),
     .count_off = offsetof(struct ct_config, model.n_hidden), .def = "256,128", .imin = 1,
     .imax = 65536, .help = "hidden layer widths, comma separated (cnn: its fully connected layer)"},
    {.section = "model", .name = "channels", .type = KT_INT_LIST, FIELD(model.channels),
     .count_off = offsetof(struct ct_config, model.n_channels), .def = "32,64", .imin = 1,
     .imax = 4096, .help = "cnn: conv channels per stage; resnet: widths of its stages"},
    {.section = "model", .name = "blocks", .type = KT_INT, FIELD(model.blocks), .def = "2",
     .imin = 1, .imax = 64, .help = "resnet: basic blocks per stage"},
    {.section = "model", .name = "depth", .type = KT_INT, FIELD(model.depth), .def = "4",
     .imin = 1, .imax = 128, .help = "vit, gpt: transformer blocks"},
    {.section = "model", .name = "width", .type = KT_INT, FIELD(model.width), .def = "64",
     .imin = 1, .imax = 65536, .help = "vit, gpt: token width"},
    {.section = "model", .name = "heads", .type = KT_INT, FIELD(model.heads), .def = "4",
     .imin = 1, .imax = 1024, .help = "vit, gpt: attention heads (must divide width)"},
    {.section = "model", .name = "block", .type = KT_INT, FIELD(model.block), .def = "128",
     .imin = 1, .imax = 65535, .help = "gpt: context length in tokens (a sample is block + 1 tokens)"},
    {.section = "model", .name = "patch", .type = KT_INT, FIELD(model.patch), .def = "7",
     .imin = 1, .imax = 1024, .help = "vit: patch size (must divide the image size)"},
    {.section = "model", .name = "mlp_ratio", .type = KT_INT, FIELD(model.mlp_ratio), .def = "2",
     .imin = 1, .imax = 64, .help = "vit, gpt: MLP hidden width = mlp_ratio * width"},
    {.section = "model", .name = "gelu", .type = KT_ENUM, FIELD(model.gelu_tanh), .def = "exact",
     .choices = gelu_names, .help = "GELU form: exact (erf) or tanh"},
    {.section = "model", .name = "dropout", .type = KT_DOUBLE, FIELD(model.dropout), .def = "0",
     .dmin = 0, .dmax = 1, .flags = KF_HI_OPEN, .help = "dropout probability (models with dropout)"},
    {.section = "model", .name = "bn_sync", .type = KT_ENUM, FIELD(model.bn_sync), .def = "local",
     .choices = bn_sync_names,
     .help = "BatchNorm statistics: local (per rank, as DDP) or sync (global batch)"},
    {.section = "model", .name = "fused", .type = KT_BOOL, FIELD(model.fused), .def = "true",
     .flags = KF_RUNTIME,
     .help = "cnn: run each Conv-BN-ReLU-MaxPool as one fused block (same function and "
             "checkpoint names, less memory traffic); false: four separate modules"},

    {.section = "optim", .name = "name", .type = KT_STRING, FIELD(optim.name), .def = "sgd",
     .choices = ct_optim_kind_names, .help = "optimizer"},
    {.section = "optim", .name = "lr", .type = KT_DOUBLE, FIELD(optim.lr), .dmin = 0,
     .dmax = 100, .flags = KF_REQUIRED | KF_LO_OPEN, .help = "base learning rate"},
    {.section = "optim", .name = "momentum", .type = KT_DOUBLE, FIELD(optim.momentum),
     .def = "0", .dmin = 0, .dmax = 1, .flags = KF_HI_OPEN, .help = "SGD momentum factor"},
    {.section = "optim", .name = "dampening", .type = KT_DOUBLE, FIELD(optim.dampening),
     .def = "0", .dmin = 0, .dmax = 1, .help = "dampening of the momentum update"},
    {.section = "optim", .name = "weight_decay", .type = KT_DOUBLE, FIELD(optim.weight_decay),
     .def = "0", .dmin = 0, .dmax = INFINITY, .flags = KF_HI_OPEN,
     .help = "L2 penalty added to the gradient"},
    {.section = "optim", .name = "nesterov", .type = KT_BOOL, FIELD(optim.nesterov),
     .def = "false", .help = "Nesterov momentum (needs momentum > 0, dampening 0)"},
    {.section = "optim", .name = "beta1", .type = KT_DOUBLE, FIELD(optim.beta1), .def = "0.9",
     .dmin = 0, .dmax = 1, .flags = KF_HI_OPEN, .help = "adamw: first-moment decay"},
    {.section = "optim", .name = "beta2", .type = KT_DOUBLE, FIELD(optim.beta2), .def = "0.999",
     .dmin = 0, .dmax = 1, .flags = KF_HI_OPEN, .help = "adamw: second-moment decay"},
    {.section = "optim", .name = "eps", .type = KT_DOUBLE, FIELD(optim.eps), .def = "1e-8",
     .dmin = 0, .dmax = 1, .flags = KF_LO_OPEN, .help = "adamw: denominator epsilon"},
    {.section = "optim", .name = "clip_norm", .type = KT_DOUBLE, FIELD(optim.clip_norm),
     .def = "0", .dmin = 0, .dmax = INFINITY, .flags = KF_HI_OPEN,
     .help = "clip the global gradient norm to this (after the allreduce); 0 = off"},

    {.section = "schedule", .name = "name", .type = KT_ENUM, FIELD(schedule.kind),
     .def = "constant", .choices = ct_sched_kind_names, .help = "learning-rate schedule"},
    {.section = "schedule", .name = "warmup_steps", .type = KT_INT64, FIELD(schedule.warmup_steps),
     .def = "0", .imin = 0, .imax = INT64_MAX, .help = "linear warmup length in steps"},
    {.section = "schedule", .name = "step_size", .type = KT_INT64, FIELD(schedule.step_size),
     .def = "1000", .imin = 1, .imax = INT64_MAX, .help = "step: decay every this many steps"},
    {.section = "schedule", .name = "gamma", .type = KT_DOUBLE, FIELD(schedule.gamma),
     .def = "0.1", .dmin = 0, .dmax = 1, .flags = KF_LO_OPEN, .help = "step: decay factor"},
    {.section = "schedule", .name = "min_lr", .type = KT_DOUBLE, FIELD(schedule.min_lr),
     .def = "0", .dmin = 0, .dmax = INFINITY, .flags = KF_HI_OPEN,
     .help = "cosine: final learning rate"},

    {.section = "train", .name = "epochs", .type = KT_INT, FIELD(train.epochs), .imin = 1,
     .imax = 100000, .flags = KF_REQUIRED, .help = "passes over the training set"},
    {.section = "train", .name = "global_batch", .type = KT_INT, FIELD(train.global_batch),
     .imin = 1, .imax = 1048576, .flags = KF_REQUIRED,
     .help = "samples per step, summed over all ranks"},
    {.section = "train", .name = "seed", .type = KT_UINT64, FIELD(train.seed),
     .flags = KF_REQUIRED, .help = "seed for initialization and shuffling"},
    {.section = "train", .name = "max_steps", .type = KT_INT64, FIELD(train.max_steps),
     .imin = 0, .imax = INT64_MAX, .flags = KF_REQUIRED | KF_RUNTIME,
     .help = "stop after this many steps; 0 = no limit"},
    {.section = "train", .name = "eval_batch", .type = KT_INT, FIELD(train.eval_batch),
     .def = "auto", .imin = 1, .imax = 1048576, .flags = KF_AUTO | KF_RUNTIME,
     .help = "per-rank evaluation batch; auto = the training micro-batch (no extra activation memory)"},
    {.section = "train", .name = "eval_every", .type = KT_INT, FIELD(train.eval_every),
     .def = "1", .imin = 1, .imax = INT_MAX, .flags = KF_RUNTIME, .help = "evaluate every this many epochs"},
    {.section = "train", .name = "accum_steps", .type = KT_INT, FIELD(train.accum_steps),
     .def = "1", .imin = 1, .imax = 65536,
     .help = "micro-batches per step; gradients are allreduced once per step"},
    {.section = "train", .name = "deterministic", .type = KT_BOOL, FIELD(train.deterministic),
     .def = "false",
     .help = "same weights bit for bit for any rank count dividing the micro-batches, thread count, sync mode"},
    {.section = "train", .name = "micro_batch", .type = KT_INT, FIELD(train.micro_batch),
     .def = "auto", .imin = 1, .imax = 1048576, .flags = KF_AUTO,
     .help = "deterministic mode: samples per fixed micro-batch (auto = global_batch / accum_steps)"},
    {.section = "train", .name = "precision", .type = KT_ENUM, FIELD(train.precision),
     .def = "fp32", .choices = ct_precision_names,
     .help = "matrix products (linear, convolutions, attention, tied head; forward and backward): "
             "fp32, or bf16 (operands rounded to bfloat16, sums in fp32; parameters, gradients, "
             "optimizer state, norms, softmax and the loss stay fp32)"},
    /* Runtime, like max_steps: the policy changes no update that either
     * policy makes (stop ends the run where skip would drop a step), and
     * every dropped step is counted in the manifest (nonfinite_skipped). */
    {.section = "train", .name = "on_nonfinite", .type = KT_ENUM, FIELD(train.on_nonfinite_skip),
     .def = "stop", .choices = on_nonfinite_names, .flags = KF_RUNTIME,
     .help = "a non-finite loss or gradient: stop every rank (exit 1), or skip the step on every rank"},

    {.section = "dist", .name = "threads", .type = KT_INT, FIELD(dist.threads), .def = "auto",
     .imin = 1, .imax = 1024, .flags = KF_AUTO | KF_RUNTIME, .help = "BLAS threads per rank, or auto"},
    {.section = "dist", .name = "placement", .type = KT_ENUM, FIELD(dist.placement),
     .def = "auto", .choices = ct_placement_mode_names,
     .flags = KF_RUNTIME, .help = "pin ranks: auto (keep a launcher's binding, else core), none, core, numa, package"},
    {.section = "dist", .name = "use_hyperthreads", .type = KT_BOOL, FIELD(dist.use_hyperthreads),
     .def = "false", .flags = KF_RUNTIME, .help = "give ranks the extra hardware threads of their cores"},
    {.section = "dist", .name = "grad_sync", .type = KT_ENUM, FIELD(dist.grad_sync_blocking),
     .def = "overlap", .choices = grad_sync_names, .flags = KF_RUNTIME,
     .help = "gradient sync: overlap (buckets start during backward) or blocking (after it); same bits"},
    {.section = "dist", .name = "bucket_mb", .type = KT_DOUBLE, FIELD(dist.bucket_mb), .def = "4",
     .dmin = 0, .dmax = 1024, .flags = KF_LO_OPEN | KF_RUNTIME,
     .help = "gradient sync bucket size in MiB (the first bucket is at most a quarter of it)"},
    /* Experiment keys, unlike grad_sync and bucket_mb (same bits): bf16
     * changes every summed gradient, feedback adds per-rank state that a
     * checkpoint carries; a resume must not switch either silently. */
    {.section = "dist", .name = "grad_compress", .type = KT_ENUM, FIELD(dist.grad_compress),
     .def = "none", .choices = ct_grad_compress_names,
     .help = "gradients on the wire: none (float32) or bf16 (rounded to bfloat16, summed in float32 "
             "and rounded at each step of the allreduce: half the bytes)"},
    {.section = "dist", .name = "grad_compress_feedback", .type = KT_BOOL,
     FIELD(dist.grad_compress_feedback), .def = "false",
     .help = "bf16: each rank adds its last rounding residual to its next gradient (error feedback; "
             "checkpointed per rank)"},
    /* Runtime: the checkpoint's optimizer sections are the same bytes with
     * and without it (each rank writes its slice at its global offset), and
     * deterministic mode gives the same bits either way. */
    {.section = "dist", .name = "shard_optimizer", .type = KT_BOOL, FIELD(dist.shard_optimizer),
     .def = "false", .flags = KF_RUNTIME,
     .help = "ZeRO-1: each rank keeps 1/N of the optimizer state; gradients are reduce-scattered, "
             "each rank updates its slice of the parameters, then all-gathers them"},
    {.section = "dist", .name = "watchdog_s", .type = KT_INT, FIELD(dist.watchdog_s), .def = "300",
     .imin = 0, .imax = 86400, .flags = KF_RUNTIME,
     .help = "end the job (naming the ranks behind) when no rank made progress for this long; 0 = off"},
    {.section = "dist", .name = "check_every", .type = KT_INT64, FIELD(dist.check_every),
     .def = "100", .imin = 0, .imax = INT64_MAX, .flags = KF_RUNTIME,
     .help = "compare the replicas' parameter digests every this many steps (and at every epoch's end); 0 = epochs only"},
    {.section = "dist", .name = "peak_gflops", .type = KT_DOUBLE, FIELD(dist.peak_gflops),
     .def = "0", .dmin = 0, .dmax = 1e9, .flags = KF_RUNTIME,
     .help = "one rank's peak GFLOP/s that MFU is measured against; 0 = measure it (a short gemm probe at start)"},

    {.section = "checkpoint", .name = "every_steps", .type = KT_INT64, FIELD(checkpoint.every_steps),
     .def = "0", .imin = 0, .imax = INT64_MAX, .flags = KF_RUNTIME,
     .help = "checkpoint every this many steps; 0 = off"},
    {.section = "checkpoint", .name = "every_epochs", .type = KT_INT, FIELD(checkpoint.every_epochs),
     .def = "1", .imin = 0, .imax = INT_MAX, .flags = KF_RUNTIME,
     .help = "checkpoint every this many epochs; 0 = off (the end of the run always is)"},
    {.section = "checkpoint", .name = "keep_last", .type = KT_INT, FIELD(checkpoint.keep_last),
     .def = "3", .imin = 0, .imax = INT_MAX, .flags = KF_RUNTIME,
     .help = "keep the newest this many checkpoints; 0 = keep all"},
    {.section = "checkpoint", .name = "keep_every", .type = KT_INT64, FIELD(checkpoint.keep_every),
     .def = "0", .imin = 0, .imax = INT_MAX, .flags = KF_RUNTIME,
     .help = "also keep every checkpoint whose step is a multiple of this; 0 = none"},
    {.section = "checkpoint", .name = "on_error", .type = KT_ENUM, FIELD(checkpoint.on_error_continue),
     .def = "stop", .choices = on_error_names, .flags = KF_RUNTIME,
     .help = "when a checkpoint cannot be written: stop the run, or continue training"},

    {.section = "log", .name = "every_steps", .type = KT_INT, FIELD(log.every_steps),
     .def = "50", .imin = 0, .imax = INT_MAX, .flags = KF_RUNTIME, .help = "progress line every this many steps; 0 = off"},
};

#define N_KEYS (sizeof keys / sizeof keys[0])
_Static_assert(CT_MODEL_NAME_MAX <= CT_CONFIG_NAME_MAX,
               "every name the model registry accepts fits model.name");


/* ------------------------------------------------------------------------ */
/* Lookup and "did you mean"                                                */
/* ------------------------------------------------------------------------ */

static int section_known(const char *section)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].section, section) == 0)
            return 1;
    return 0;
}

static int find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].section, section) == 0 && strcmp(keys[i].name, name) == 0)
            return (int)i;
    return -1;
}

#define LEV_MAX 64

/* Case-insensitive edit distance; names longer than LEV_MAX are never near
 * anything we know, so they get a distance no threshold accepts. */
static int levenshtein(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > LEV_MAX || lb > LEV_MAX)
        return INT_MAX;
    int prev[LEV_MAX + 1], cur[LEV_MAX + 1];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = prev[j - 1] + sub;
            if (prev[j] + 1 < best)
                best = prev[j] + 1;
            if (cur[j - 1] + 1 < best)
                best = cur[j - 1] + 1;
            cur[j] = best;
        }
        memcpy(prev, cur, sizeof(int) * (lb + 1));
    }
    return prev[lb];
}

/* Distance if `known` is close enough to `typed` to suggest, else -1: within
 * 2 edits, or a third of the known name's length for long names. */
static int near_distance(const char *typed, const char *known)
{
    int d = levenshtein(typed, known);
    int limit = (int)strlen(known) / 3;
    if (limit < 2)
        limit = 2;
    return d <= limit ? d : -1;
}

/* " (did you mean [train]?)" or "" */
static void suggest_section(const char *typed, char *out, size_t n)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (size_t i = 0; i < N_KEYS; i++) {
        int d = near_distance(typed, keys[i].section);
        if (d >= 0 && d < best_d) {
            best = keys[i].section;
            best_d = d;
        }
    }
    if (best)
        snprintf(out, n, " (did you mean [%s]?)", best);
    else if (n)
        out[0] = '\0';
}

/* " (did you mean 'lr'?)" for a near key of the same section, else
 * " (did you mean [train] epochs?)" for a near key elsewhere, else "". */
static void suggest_key(const char *section, const char *typed, char *out, size_t n)
{
    int best = -1, best_d = INT_MAX;
    for (size_t i = 0; i < N_KEYS; i++) {
        if (strcmp(keys[i].section, section) != 0)
            continue;
        int d = near_distance(typed, keys[i].name);
        if (d >= 0 && d < best_d) {
            best = (int)i;
            best_d = d;
        }
    }
    if (best >= 0) {
        snprintf(out, n, " (did you mean '%s'?)", keys[best].name);
        return;
    }
    for (size_t i = 0; i < N_KEYS; i++) {
        int d = near_distance(typed, keys[i].name);
        if (d >= 0 && d < best_d) {
            best = (int)i;
            best_d = d;
        }
    }
    if (best >= 0)
        snprintf(out, n, " (did you mean [%s] %s?)", keys[best].section, keys[best].name);
    else if (n)
        out[0] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

/* Values are quoted back to the user; this keeps a pasted novel from pushing
 * the rest of the message out of the error buffer. */
#define QUOTE_MAX 200
/* The longest line the reader takes (read_line: inih's buffer less the
 * newline and the NUL). */
#define LINE_TEXT_MAX ((size_t)INI_MAX_LINE - 2)

/* Parse a whole string as a base-10 signed integer. Returns 0, -1 when it is
 * not an integer at all, -2 when it is one but does not fit in 64 bits.
 * Base 10 on purpose: base 0 would read "010" as octal. */
static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || isspace((unsigned char)*s))
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (int64_t)v;
    return 0;
}

/* As parse_i64 for unsigned; strtoull would quietly wrap "-1" to 2^64-1. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s == '-' || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)v;
    return 0;
}

static void format_choices(const char *const *choices, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *const *c = choices; *c && used < n; c++) {
        int w = snprintf(out + used, n - used, "%s%s", c == choices ? "" : ", ", *c);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* The key's allowed values, NULL-terminated, or NULL: any value. */
static const char *const *key_choices(const struct key *k)
{
    return k->choices_fn ? k->choices_fn() : k->choices;
}

/* "; did you mean 'adamw'?" for the nearest choice, or "". */
static void suggest_choice(const char *const *choices, const char *typed, char *out, size_t n)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (int i = 0; choices[i]; i++) {
        int d = near_distance(typed, choices[i]);
        if (d >= 0 && d < best_d) {
            best = choices[i];
            best_d = d;
        }
    }
    if (best)
        snprintf(out, n, "; did you mean '%s'?", best);
    else if (n)
        out[0] = '\0';
}

static int choice_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], s) == 0)
            return i;
    return -1;
}

static int set_why(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_why(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_int_list(const struct key *k, const char *text, struct ct_config *cfg, char *why,
                          size_t n)
{
    int vals[CT_CONFIG_MAX_HIDDEN];
    size_t cap = k->size / sizeof(int);
    size_t count = 0;
    const char *p = text;
    if (cap > CT_CONFIG_MAX_HIDDEN)
        cap = CT_CONFIG_MAX_HIDDEN;
    for (;;) {
        char *end;
        while (isspace((unsigned char)*p))
            p++;
        const char *tok = p;
        errno = 0;
        long long v = strtoll(tok, &end, 10);
        if (end == tok)
            return set_why(why, n, "expected a comma-separated list of integers, found '%.*s'",
                           QUOTE_MAX, text);
        int overflow = errno == ERANGE;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p != ',' && *p != '\0')
            return set_why(why, n, "expected a comma-separated list of integers, found '%.*s'",
                           QUOTE_MAX, text);
        if (overflow || v < k->imin || v > k->imax)
            return set_why(why, n, "entry %zu (%.*s) is out of range [%" PRId64 ", %" PRId64 "]",
                           count + 1, (int)(end - tok), tok, k->imin, k->imax);
        if (count == cap)
            return set_why(why, n, "too many entries in '%.*s' (at most %zu)", QUOTE_MAX, text,
                           cap);
        vals[count++] = (int)v;
        if (*p == '\0')
            break;
        p++; /* past ',' */
    }
    memset((char *)cfg + k->off, 0, k->size);
    memcpy((char *)cfg + k->off, vals, count * sizeof(int));
    int c = (int)count;
    memcpy((char *)cfg + k->count_off, &c, sizeof c);
    return 0;
}

/* One finite number of key k (KT_DOUBLE or an entry of KT_DOUBLE_LIST),
 * in its range. */
static int parse_double(const struct key *k, const char *text, double *out, char *why, size_t n)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || isspace((unsigned char)*text))
        return set_why(why, n, "expected a number, found '%.*s'", QUOTE_MAX, text);
    if (!isfinite(v))
        return set_why(why, n, "expected a finite number, found '%.*s'", QUOTE_MAX, text);
    int lo_ok = (k->flags & KF_LO_OPEN) ? v > k->dmin : v >= k->dmin;
    int hi_ok = (k->flags & KF_HI_OPEN) ? v < k->dmax : v <= k->dmax;
    if (!lo_ok || !hi_ok)
        return set_why(why, n, "%.*s is out of range %c%g, %g%c", QUOTE_MAX, text,
                       (k->flags & KF_LO_OPEN) ? '(' : '[', k->dmin, k->dmax,
                       (k->flags & KF_HI_OPEN) ? ')' : ']');
    *out = v;
    return 0;
}

#define DOUBLE_LIST_MAX 16

static int parse_double_list(const struct key *k, const char *text, struct ct_config *cfg,
                             char *why, size_t n)
{
    double vals[DOUBLE_LIST_MAX];
    size_t cap = k->size / sizeof(double), count = 0;
    if (cap > DOUBLE_LIST_MAX)
        cap = DOUBLE_LIST_MAX;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && isspace((unsigned char)*p))
            p++, len--;
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        char tok[64];
        if (len == 0 || len >= sizeof tok)
            return set_why(why, n, "expected a comma-separated list of numbers, found '%.*s'",
                           QUOTE_MAX, text);
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (count == cap)
            return set_why(why, n, "too many entries in '%.*s' (at most %zu)", QUOTE_MAX, text,
                           cap);
        char inner[256];
        if (parse_double(k, tok, &vals[count], inner, sizeof inner) < 0)
            return count == 0 && !comma ? set_why(why, n, "%s", inner)
                                        : set_why(why, n, "entry %zu: %s", count + 1, inner);
        count++;
        if (!comma)
            break;
        p = comma + 1;
    }
    memset((char *)cfg + k->off, 0, k->size);
    memcpy((char *)cfg + k->off, vals, count * sizeof(double));
    int c = (int)count;
    memcpy((char *)cfg + k->count_off, &c, sizeof c);
    return 0;
}

/* Parse `text` for key `k` and store it in *cfg. On failure returns -1 with
 * what was wrong in `why` (without the location or key name). `recorded`:
 * a registry's names (choices_fn) are not checked. */
static int parse_value(const struct key *k, const char *text, int recorded, struct ct_config *cfg,
                       char *why, size_t n)
{
    void *dst = (char *)cfg + k->off;
    switch (k->type) {
    case KT_INT:
    case KT_INT64: {
        int64_t v;
        if ((k->flags & KF_AUTO) && strcasecmp(text, "auto") == 0) {
            v = 0;
        } else {
            int rc = parse_i64(text, &v);
            if (rc == -1)
                return set_why(why, n, "expected an integer%s, found '%.*s'",
                               (k->flags & KF_AUTO) ? " or 'auto'" : "", QUOTE_MAX, text);
            if (rc == -2 || v < k->imin || v > k->imax)
                return set_why(why, n, "%.*s is out of range [%" PRId64 ", %" PRId64 "]%s",
                               QUOTE_MAX, text, k->imin, k->imax,
                               (k->flags & KF_AUTO) ? " (or 'auto')" : "");
        }
        if (k->type == KT_INT) {
            int iv = (int)v;
            memcpy(dst, &iv, sizeof iv);
        } else {
            memcpy(dst, &v, sizeof v);
        }
        return 0;
    }
    case KT_UINT64: {
        uint64_t v;
        int rc = parse_u64(text, &v);
        if (rc == -1)
            return set_why(why, n, "expected a non-negative integer, found '%.*s'", QUOTE_MAX,
                           text);
        if (rc == -2)
            return set_why(why, n, "%.*s is out of range [0, %" PRIu64 "]", QUOTE_MAX, text,
                           UINT64_MAX);
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case KT_DOUBLE: {
        double v;
        if (parse_double(k, text, &v, why, n) < 0)
            return -1;
        memcpy(dst, &v, sizeof v);
        return 0;
    }
    case KT_BOOL: {
        static const char *const yes[] = {"true", "yes", "on", "1"};
        static const char *const no[] = {"false", "no", "off", "0"};
        for (int b = 0; b < 4; b++) {
            int v = -1;
            if (strcasecmp(text, yes[b]) == 0)
                v = 1;
            else if (strcasecmp(text, no[b]) == 0)
                v = 0;
            if (v >= 0) {
                memcpy(dst, &v, sizeof v);
                return 0;
            }
        }
        return set_why(why, n, "expected true or false (or yes/no, on/off, 1/0), found '%.*s'",
                       QUOTE_MAX, text);
    }
    case KT_STRING:
    case KT_ENUM: {
        if (text[0] == '\0' && (k->flags & KF_EMPTY) && k->type == KT_STRING) {
            memset(dst, 0, k->size);
            return 0;
        }
        if (text[0] == '\0')
            return set_why(why, n, "must not be empty");
        int idx = -1;
        /* A recorded config may name a model that the program which wrote
         * it registered and this one has not (see ct_config_load_recorded). */
        const char *const *choices = recorded && k->choices_fn ? NULL : key_choices(k);
        if (choices && (idx = choice_index(choices, text)) < 0) {
            char list[512], hint[CT_CONFIG_NAME_MAX + 32];
            format_choices(choices, list, sizeof list);
            suggest_choice(choices, text, hint, sizeof hint);
            return set_why(why, n, "unknown value '%.*s' (expected one of: %s)%s", QUOTE_MAX, text,
                           list, hint);
        }
        if (k->type == KT_ENUM) {
            memcpy(dst, &idx, sizeof idx);
            return 0;
        }
        size_t len = strlen(text);
        if (len >= k->size)
            return set_why(why, n, "value is too long (%zu characters, at most %zu)", len,
                           k->size - 1);
        /* The resolved config (ct_config_write: "name = value") is what a
         * checkpoint records and eval and resume parse again, so a value
         * must read back as itself: one line of at most LINE_TEXT_MAX
         * characters, without a ';' that inih would take for the start of
         * a comment (first, or after a blank). Only a --set can bring such
         * a value in (tests/fuzz/fuzz_config checks the round trip). */
        if (strlen(k->name) + 3 + len > LINE_TEXT_MAX)
            return set_why(why, n, "value is too long for one line of a config file (%zu "
                           "characters, at most %zu for %s)", len,
                           LINE_TEXT_MAX - 3 - strlen(k->name), k->name);
        for (size_t i = 0; i < len; i++) {
            if (text[i] == '\n' || text[i] == '\r')
                return set_why(why, n, "a value cannot hold a line break");
            if (text[i] == ';' && (i == 0 || isspace((unsigned char)text[i - 1])))
                return set_why(why, n, "'%.*s': a ';' %s starts a comment in a config file, so it "
                               "cannot be part of a value", QUOTE_MAX, text,
                               i == 0 ? "first" : "after a blank");
        }
        /* Zero the whole field so that equal configs are equal bytes. */
        memset(dst, 0, k->size);
        memcpy(dst, text, len);
        return 0;
    }
    case KT_INT_LIST:
        return parse_int_list(k, text, cfg, why, n);
    case KT_DOUBLE_LIST:
        return parse_double_list(k, text, cfg, why, n);
    }
    return set_why(why, n, "internal error: unknown key type");
}

/* ------------------------------------------------------------------------ */
/* Applying keys from the file and from overrides                           */
/* ------------------------------------------------------------------------ */

struct parse_state {
    struct ct_config *cfg;
    const char *path;
    const char *text; /* parse this instead of opening path */
    FILE *f;
    char *buf; /* getline buffer */
    size_t cap;
    int lineno;       /* physical line last handed to inih */
    int set_line[N_KEYS]; /* where the file set each key; 0 = not in the file */
    int given[N_KEYS];    /* set by the file or an override */
    int err;          /* first error of our own (0: none) ... */
    int err_line;     /* ... and its line, to compare with inih's */
    int recorded;     /* ct_config_load_recorded: registry names are not checked */
};

/* Where a value came from, for messages: a file line or a --set argument. */
struct origin {
    const char *path;
    int line;
    const char *set; /* the whole --set argument, or NULL */
};

static int origin_error(const struct origin *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int origin_error(const struct origin *o, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (o->set)
        return ct_error_set(CT_ECONFIG, "--set %.*s: %s", QUOTE_MAX, o->set, msg);
    return ct_error_set(CT_ECONFIG, "%s:%d: %s", o->path, o->line, msg);
}

static int apply_key(struct parse_state *st, const struct origin *o, const char *section,
                     const char *name, const char *value)
{
    char hint[128];
    if (section[0] == '\0')
        return origin_error(o, "key '%.*s' appears before any [section]", QUOTE_MAX, name);
    if (!section_known(section)) {
        suggest_section(section, hint, sizeof hint);
        return origin_error(o, "unknown section [%.*s]%s", QUOTE_MAX, section, hint);
    }
    int i = find_key(section, name);
    if (i < 0) {
        suggest_key(section, name, hint, sizeof hint);
        return origin_error(o, "unknown key '%.*s' in section [%s]%s", QUOTE_MAX, name, section,
                            hint);
    }
    const struct key *k = &keys[i];
    /* Overrides exist to replace file values, so only a file repeating
     * itself is a duplicate. */
    if (!o->set && st->set_line[i])
        return origin_error(o, "duplicate key %s.%s (first set on line %d)", k->section, k->name,
                            st->set_line[i]);
    char why[1024];
    if (parse_value(k, value, st->recorded, st->cfg, why, sizeof why) < 0) {
        /* inih only treats ';' after whitespace as a comment, not '#'. */
        int hash = strstr(value, " #") || strstr(value, "\t#");
        return origin_error(o, "%s.%s: %s%s", k->section, k->name, why,
                            hash ? " ('#' starts a comment only at the beginning of a line;"
                                   " use ';' after a value)"
                                 : "");
    }
    if (!o->set)
        st->set_line[i] = o->line;
    st->given[i] = 1;
    return 0;
}

/* inih handler: one "name = value" line of the file. */
static int on_pair(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *st = user;
    if (st->err)
        return 1; /* the reader has stopped; nothing more to say */
    if (!name)
        return 1; /* a section line, if inih was built to report them */
    struct origin o = {.path = st->path, .line = st->lineno, .set = NULL};
    int rc = apply_key(st, &o, section, name, value ? value : "");
    if (rc < 0) {
        st->err = rc;
        st->err_line = st->lineno;
        return 0;
    }
    return 1;
}

/* inih reader: one physical line per call, so that our line count is inih's.
 *
 * It also strips leading blanks: inih (built with multi-line values) takes an
 * indented line after a key for a continuation of that key's value, so an
 * indented "lr = 0.1" would silently become part of the previous value. None
 * of our values span lines, and an indented key should still be a key.
 *
 * Section headers are checked here rather than in the handler so that an
 * unknown section is reported at its own line, even when it holds no keys.
 *
 * After an error it returns NULL, which ends the parse: we report only the
 * first problem. */
static char *read_line(char *str, int num, void *stream)
{
    struct parse_state *st = stream;
    if (st->err)
        return NULL;
    errno = 0;
    ssize_t got = getline(&st->buf, &st->cap, st->f);
    if (got < 0) {
        if (ferror(st->f)) {
            st->err = ct_error_set(CT_EIO, "%s: cannot read config file: %s", st->path,
                                   strerror(errno ? errno : EIO));
            st->err_line = st->lineno + 1;
        } else if (errno == ENOMEM) {
            st->err = ct_error_set(CT_ENOMEM, "%s: out of memory reading line %d", st->path,
                                   st->lineno + 1);
            st->err_line = st->lineno + 1;
        }
        return NULL;
    }
    st->lineno++;
    char *s = st->buf;
    /* A UTF-8 byte order mark is not part of the first line's text. */
    if (st->lineno == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
        (unsigned char)s[2] == 0xBF)
        s += 3;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    size_t text_len = len && s[len - 1] == '\n' ? len - 1 : len;
    /* inih's buffer is fixed; a longer line would reach it in pieces and be
     * misparsed, so refuse it. */
    if (num < 2 || text_len > (size_t)num - 2) {
        st->err = ct_error_set(CT_ECONFIG, "%s:%d: line is too long (at most %d characters)",
                               st->path, st->lineno, num - 2);
        st->err_line = st->lineno;
        return NULL;
    }
    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (close) {
            char section[QUOTE_MAX + 1];
            size_t sl = (size_t)(close - s - 1);
            if (sl > QUOTE_MAX)
                sl = QUOTE_MAX;
            memcpy(section, s + 1, sl);
            section[sl] = '\0';
            if (!section_known(section)) {
                char hint[128];
                struct origin o = {.path = st->path, .line = st->lineno, .set = NULL};
                suggest_section(section, hint, sizeof hint);
                st->err = origin_error(&o, "unknown section [%s]%s", section, hint);
                st->err_line = st->lineno;
                return NULL;
            }
        }
        /* Without ']' inih reports a syntax error on this line. */
    }
    memcpy(str, s, len + 1);
    return str;
}

static int parse_file(struct parse_state *st)
{
    errno = 0;
    st->f = st->text ? fmemopen((void *)st->text, strlen(st->text), "r") : fopen(st->path, "r");
    if (!st->f) {
        int e = errno;
        return ct_error_set(e == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open config file: %s",
                            st->path, strerror(e));
    }
    int rc = ini_parse_stream(read_line, st, on_pair, st);
    free(st->buf);
    st->buf = NULL;
    fclose(st->f);
    st->f = NULL;
    if (rc == -2)
        return ct_error_set(CT_ENOMEM, "%s: out of memory while parsing", st->path);
    /* inih keeps going past its own syntax errors and returns the first
     * error line, ours included; whichever came first is the one to report. */
    if (rc > 0 && (!st->err || rc < st->err_line))
        return ct_error_set(CT_ECONFIG,
                            "%s:%d: syntax error (expected [section], key = value or a comment)",
                            st->path, rc);
    if (st->err)
        return st->err;
    if (rc < 0)
        return ct_error_set(CT_EIO, "%s: cannot parse config file (inih error %d)", st->path, rc);
    return 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* "section.key=value", with the same parsing and messages as a file line. */
static int apply_override(struct parse_state *st, const char *arg)
{
    if (!arg)
        return ct_error_set(CT_EINVAL, "--set: NULL override");
    struct origin o = {.path = st->path, .line = 0, .set = arg};
    char *copy = strdup(arg);
    if (!copy)
        return ct_error_set(CT_ENOMEM, "--set %.*s: out of memory", QUOTE_MAX, arg);
    int rc;
    char *eq = strchr(copy, '=');
    char *dot = strchr(copy, '.');
    if (!eq || !dot || dot > eq) {
        rc = origin_error(&o, "expected section.key=value");
        goto out;
    }
    *eq = '\0';
    *dot = '\0';
    char *section = trim(copy), *name = trim(dot + 1), *value = trim(eq + 1);
    if (!*section || !*name) {
        rc = origin_error(&o, "expected section.key=value");
        goto out;
    }
    rc = apply_key(st, &o, section, name, value);
out:
    free(copy);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Defaults, required keys, validation                                      */
/* ------------------------------------------------------------------------ */

void ct_config_defaults(struct ct_config *cfg)
{
    /* memset first: padding and unused array entries are zero, so two
     * configs with the same values compare equal with memcmp. */
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_KEYS; i++) {
        char why[256];
        if (!keys[i].def)
            continue;
        int rc = parse_value(&keys[i], keys[i].def, 0, cfg, why, sizeof why);
        /* Defaults are ours: one that does not parse is a bug in keys[]
         * (the unit test loads every default, so it cannot ship). */
        assert(rc == 0);
        (void)rc;
    }
}

static int check_required(const struct parse_state *st)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if ((keys[i].flags & KF_REQUIRED) && !st->given[i])
            return ct_error_set(CT_ECONFIG, "%s: missing required key %s.%s (%s)", st->path,
                                keys[i].section, keys[i].name, keys[i].help);
    return 0;
}

/* Rules that involve more than one key. */
static int validate(const struct ct_config *c, const char *path)
{
    /* As torch.optim.SGD: Nesterov momentum needs momentum and no dampening. */
    if (c->optim.nesterov && (c->optim.momentum <= 0 || c->optim.dampening != 0))
        return ct_error_set(CT_ECONFIG,
                            "%s: optim.nesterov = true requires optim.momentum > 0 and "
                            "optim.dampening = 0 (found momentum %g, dampening %g)",
                            path, c->optim.momentum, c->optim.dampening);
    if (strcmp(c->model.name, "vit") == 0 && c->model.width % c->model.heads != 0)
        return ct_error_set(CT_ECONFIG, "%s: model.heads (%d) must divide model.width (%d)", path,
                            c->model.heads, c->model.width);
    /* The deterministic mode's sums are exact integer sums of values on a
     * shared grid; a bf16 allreduce rounds partial sums in an order MPI
     * picks, so its bits depend on N. */
    if (c->train.deterministic && c->dist.grad_compress != CT_GRAD_COMPRESS_NONE)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.deterministic = true refuses dist.grad_compress = %s (a "
                            "compressed allreduce rounds partial sums in an order that depends on "
                            "the number of ranks); set dist.grad_compress = none or "
                            "train.deterministic = false",
                            path, ct_grad_compress_names[c->dist.grad_compress]);
    if (c->dist.grad_compress_feedback && c->dist.grad_compress == CT_GRAD_COMPRESS_NONE)
        return ct_error_set(CT_ECONFIG,
                            "%s: dist.grad_compress_feedback = true needs a compression "
                            "(dist.grad_compress = bf16): with none nothing is rounded to feed back",
                            path);
    /* A cosine "floor" above the starting rate would make the schedule rise. */
    if (c->schedule.kind == CT_SCHED_COSINE && c->schedule.min_lr > c->optim.lr)
        return ct_error_set(CT_ECONFIG,
                            "%s: schedule.min_lr (%g) must not exceed optim.lr (%g) for the "
                            "cosine schedule",
                            path, c->schedule.min_lr, c->optim.lr);
    return 0;
}

static int set_names(struct ct_config *c, const char *path)
{
    size_t plen = strlen(path);
    if (plen >= sizeof c->path)
        return ct_error_set(CT_EINVAL, "%.*s...: config path is too long (at most %zu characters)",
                            QUOTE_MAX, path, sizeof c->path - 1);
    memset(c->path, 0, sizeof c->path);
    memcpy(c->path, path, plen);

    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t blen = strlen(base);
    /* Keep ".ini" when it is the whole name, so the name is never empty. */
    if (blen > 4 && strcmp(base + blen - 4, ".ini") == 0)
        blen -= 4;
    if (blen >= sizeof c->name)
        return ct_error_set(CT_ECONFIG, "%s: config name '%.*s' is too long (at most %zu characters)",
                            path, (int)blen, base, sizeof c->name - 1);
    memset(c->name, 0, sizeof c->name);
    memcpy(c->name, base, blen);
    return 0;
}

static int load(struct ct_config *cfg, const char *path, const char *text,
                const char *const *sets, int n_sets, int recorded)
{
    if (!cfg || !path || n_sets < 0 || (n_sets > 0 && !sets))
        return ct_error_set(CT_EINVAL, "ct_config_load: invalid arguments");

    /* Work on a copy so that *cfg is untouched unless everything succeeds. */
    struct ct_config tmp;
    ct_config_defaults(&tmp);
    int rc = set_names(&tmp, path);
    if (rc < 0)
        return rc;

    struct parse_state st;
    memset(&st, 0, sizeof st);
    st.cfg = &tmp;
    st.path = path;
    st.text = text;
    st.recorded = recorded;
    if ((rc = parse_file(&st)) < 0)
        return rc;
    for (int i = 0; i < n_sets; i++)
        if ((rc = apply_override(&st, sets[i])) < 0)
            return rc;
    if ((rc = check_required(&st)) < 0)
        return rc;
    if ((rc = validate(&tmp, path)) < 0)
        return rc;
    /* memcpy rather than assignment: assignment need not copy padding. */
    memcpy(cfg, &tmp, sizeof tmp);
    return 0;
}

int ct_config_load(struct ct_config *cfg, const char *path, const char *const *sets, int n_sets)
{
    return load(cfg, path, NULL, sets, n_sets, 0);
}

int ct_config_load_text(struct ct_config *cfg, const char *text, const char *label,
                        const char *const *sets, int n_sets)
{
    if (!text)
        return ct_error_set(CT_EINVAL, "ct_config_load_text: no text");
    return load(cfg, label, text, sets, n_sets, 0);
}

int ct_config_load_recorded(struct ct_config *cfg, const char *path, const char *text)
{
    return load(cfg, path, text, NULL, 0, 1);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */
/* ------------------------------------------------------------------------ */

/* The shortest of %.15g..%.17g that reads back as the same double: exact
 * round trips, without printing 0.1 as 0.10000000000000001. */
static void format_double(double v, char *out, size_t n)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void format_value(const struct key *k, const struct ct_config *cfg, char *out, size_t n)
{
    const void *src = (const char *)cfg + k->off;
    switch (k->type) {
    case KT_INT: {
        int v;
        memcpy(&v, src, sizeof v);
        if ((k->flags & KF_AUTO) && v == 0)
            snprintf(out, n, "auto");
        else
            snprintf(out, n, "%d", v);
        return;
    }
    case KT_INT64: {
        int64_t v;
        memcpy(&v, src, sizeof v);
        snprintf(out, n, "%" PRId64, v);
        return;
    }
    case KT_UINT64: {
        uint64_t v;
        memcpy(&v, src, sizeof v);
        snprintf(out, n, "%" PRIu64, v);
        return;
    }
    case KT_DOUBLE: {
        double v;
        memcpy(&v, src, sizeof v);
        format_double(v, out, n);
        return;
    }
    case KT_BOOL: {
        int v;
        memcpy(&v, src, sizeof v);
        snprintf(out, n, "%s", v ? "true" : "false");
        return;
    }
    case KT_STRING:
        snprintf(out, n, "%.*s", (int)k->size, (const char *)src);
        return;
    case KT_ENUM: {
        int v, count = 0;
        memcpy(&v, src, sizeof v);
        while (k->choices[count])
            count++;
        snprintf(out, n, "%s", v >= 0 && v < count ? k->choices[v] : "?");
        return;
    }
    case KT_DOUBLE_LIST: {
        int count;
        size_t used = 0;
        memcpy(&count, (const char *)cfg + k->count_off, sizeof count);
        out[0] = '\0';
        for (int i = 0; i < count && used < n; i++) {
            double v;
            char one[64];
            memcpy(&v, (const char *)src + (size_t)i * sizeof(double), sizeof v);
            format_double(v, one, sizeof one);
            int w = snprintf(out + used, n - used, "%s%s", i ? "," : "", one);
            if (w < 0)
                break;
            used += (size_t)w;
        }
        return;
    }
    case KT_INT_LIST: {
        int count;
        size_t used = 0;
        memcpy(&count, (const char *)cfg + k->count_off, sizeof count);
        out[0] = '\0';
        for (int i = 0; i < count && used < n; i++) {
            int v;
            memcpy(&v, (const char *)src + (size_t)i * sizeof(int), sizeof v);
            int w = snprintf(out + used, n - used, "%s%d", i ? "," : "", v);
            if (w < 0)
                break;
            used += (size_t)w;
        }
        return;
    }
    }
    snprintf(out, n, "?");
}

int ct_config_diff(const struct ct_config *a, const struct ct_config *b, char *out, size_t n,
                   int *n_runtime)
{
    int state = 0, runtime = 0;
    size_t used = 0;
    if (out && n)
        out[0] = '\0';
    for (size_t i = 0; i < N_KEYS; i++) {
        char va[512], vb[512];
        format_value(&keys[i], a, va, sizeof va);
        format_value(&keys[i], b, vb, sizeof vb);
        if (strcmp(va, vb) == 0)
            continue;
        if (keys[i].flags & KF_RUNTIME)
            runtime++;
        else
            state++;
        if (out && used < n) {
            int w = snprintf(out + used, n - used, "%s%s.%s: %s -> %s%s", used ? "\n" : "",
                             keys[i].section, keys[i].name, va, vb,
                             (keys[i].flags & KF_RUNTIME) ? "" : " (changes the experiment)");
            if (w > 0)
                used += (size_t)w < n - used ? (size_t)w : n - used - 1;
        }
    }
    if (n_runtime)
        *n_runtime = runtime;
    return state;
}

int ct_config_text(const struct ct_config *cfg, char **text)
{
    size_t len = 0;
    *text = NULL;
    FILE *f = open_memstream(text, &len);
    if (!f)
        return ct_error_set(CT_ENOMEM, "cannot hold the config text");
    int rc = ct_config_write(cfg, f);
    if (fclose(f) != 0 && rc == 0)
        rc = ct_error_set(CT_ENOMEM, "cannot hold the config text");
    if (rc < 0) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

int ct_config_write(const struct ct_config *cfg, FILE *out)
{
    int bad = fprintf(out, "# resolved configuration of %s\n", cfg->path) < 0;
    const char *section = NULL;
    for (size_t i = 0; i < N_KEYS && !bad; i++) {
        char value[CT_CONFIG_PATH_MAX + 64];
        if (!section || strcmp(section, keys[i].section) != 0) {
            section = keys[i].section;
            bad |= fprintf(out, "\n[%s]\n", section) < 0;
        }
        format_value(&keys[i], cfg, value, sizeof value);
        bad |= fprintf(out, "%s = %s\n", keys[i].name, value) < 0;
    }
    if (bad || fflush(out) != 0 || ferror(out))
        return ct_error_set(CT_EIO, "cannot write the resolved configuration: %s",
                            strerror(errno ? errno : EIO));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The schema, listed (config --list)                                       */
/* ------------------------------------------------------------------------ */

static const char *const type_names[] = {
    [KT_INT] = "int", [KT_INT64] = "int64", [KT_UINT64] = "uint64", [KT_DOUBLE] = "float",
    [KT_BOOL] = "bool", [KT_STRING] = "string", [KT_ENUM] = "choice", [KT_INT_LIST] = "ints",
    [KT_DOUBLE_LIST] = "floats",
};

static void join_choices(const char *const *choices, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; choices[i] && used < n; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? "|" : "", choices[i]);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}

static void format_int_range(int64_t lo, int64_t hi, char *out, size_t n)
{
    if (hi == INT64_MAX || hi == INT_MAX)
        snprintf(out, n, ">= %" PRId64, lo);
    else
        snprintf(out, n, "%" PRId64 "..%" PRId64, lo, hi);
}

/* What a key accepts, as a reader would write it: 0..64, >= 1, (0, 1],
 * a|b|c, a list of 1..65536. */
static void format_allowed(const struct key *k, char *out, size_t n)
{
    char lo[64], hi[64];
    switch (k->type) {
    case KT_INT:
    case KT_INT64:
        format_int_range(k->imin, k->imax, out, n);
        if (k->flags & KF_AUTO) {
            size_t l = strlen(out);
            snprintf(out + l, n - l, " or auto");
        }
        return;
    case KT_UINT64:
        snprintf(out, n, "0..18446744073709551615");
        return;
    case KT_DOUBLE: {
        int lo_inf = isinf(k->dmin), hi_inf = isinf(k->dmax);
        format_double(k->dmin, lo, sizeof lo);
        format_double(k->dmax, hi, sizeof hi);
        const char *lo_op = (k->flags & KF_LO_OPEN) ? ">" : ">=";
        if (lo_inf && hi_inf)
            snprintf(out, n, "any finite number");
        else if (hi_inf)
            snprintf(out, n, "%s %s", lo_op, lo);
        else
            snprintf(out, n, "%s%s, %s%s", (k->flags & KF_LO_OPEN) ? "(" : "[", lo, hi,
                     (k->flags & KF_HI_OPEN) ? ")" : "]");
        return;
    }
    case KT_BOOL:
        snprintf(out, n, "true|false");
        return;
    case KT_STRING:
    case KT_ENUM:
        if (key_choices(k))
            join_choices(key_choices(k), out, n);
        else
            snprintf(out, n, "text");
        return;
    case KT_DOUBLE_LIST: {
        format_double(k->dmin, lo, sizeof lo);
        snprintf(out, n, "up to %zu numbers %s %s, comma separated", k->size / sizeof(double),
                 (k->flags & KF_LO_OPEN) ? ">" : ">=", lo);
        if (isinf(k->dmin))
            snprintf(out, n, "up to %zu finite numbers, comma separated", k->size / sizeof(double));
        return;
    }
    case KT_INT_LIST:
        format_int_range(k->imin, k->imax, lo, sizeof lo);
        snprintf(out, n, "up to %zu of %s, comma separated", k->size / sizeof(int), lo);
        return;
    }
    snprintf(out, n, "?");
}

int ct_config_list(FILE *out, const struct ct_config *cfg, int tsv)
{
    struct ct_config defaults;
    ct_config_defaults(&defaults);
    int bad = 0;
    if (tsv)
        bad |= fprintf(out, "key\ttype\tallowed\tdefault\tkind\tvalue\thelp\n") < 0;
    else if (cfg)
        bad |= fprintf(out, "# keys of %s; '*' marks a value that is not the default\n", cfg->path) < 0;
    const char *section = NULL;
    for (size_t i = 0; i < N_KEYS && !bad; i++) {
        const struct key *k = &keys[i];
        char allowed[512], value[CT_CONFIG_PATH_MAX + 64] = "", def_value[CT_CONFIG_PATH_MAX + 64];
        format_allowed(k, allowed, sizeof allowed);
        const char *def = k->def ? k->def : "(required)";
        const char *kind = (k->flags & KF_RUNTIME) ? "runtime" : "experiment";
        int differs = 0;
        if (cfg) {
            format_value(k, cfg, value, sizeof value);
            format_value(k, &defaults, def_value, sizeof def_value);
            differs = !k->def || strcmp(value, def_value) != 0;
        }
        if (tsv) {
            bad |= fprintf(out, "%s.%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k->section, k->name,
                           type_names[k->type], allowed, k->def ? k->def : "", kind, value,
                           k->help) < 0;
            continue;
        }
        if (!section || strcmp(section, k->section) != 0) {
            section = k->section;
            bad |= fprintf(out, "%s[%s]\n", i ? "\n" : "", section) < 0;
        }
        bad |= fprintf(out, "  %-16s %-8s %-34s default %s%s, %s\n", k->name, type_names[k->type],
                       allowed, def, (k->flags & KF_REQUIRED) && k->def ? " (required)" : "",
                       (k->flags & KF_RUNTIME) ? "runtime: may differ on resume"
                                               : "changes the experiment") < 0;
        if (cfg)
            bad |= fprintf(out, "  %-16s %s value %s\n", differs ? "*" : "", "", value) < 0;
        bad |= fprintf(out, "  %-16s %s\n", "", k->help) < 0;
    }
    if (bad || fflush(out) != 0 || ferror(out))
        return ct_error_set(CT_EIO, "cannot write the list of config keys: %s",
                            strerror(errno ? errno : EIO));
    return 0;
}
