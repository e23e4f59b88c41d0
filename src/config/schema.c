/* The config schema: every key the program knows, one line each (section,
 * key, type, default, range, whether it changes the experiment, help), and
 * lookups in the table ("did you mean" included). Parsing, defaults, the
 * required-key check, the writer, diffs, resume compatibility and
 * `config --list` all walk this table, so adding a key is one line here plus
 * its field in struct ct_config. The table knows nothing about what the values
 * mean beyond their types and ranges; the modules that use them do the rest.
 */
#include "config/config-impl.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/gemm.h"
#include "core/trace.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "parallel/allreduce.h"
#include "parallel/compress.h"
#include "parallel/placement.h"

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

/* log.trace's text, parsed by the recorder's own parser (core/trace.h). */
static int trace_window_check(const char *text, char *why, size_t n)
{
    int64_t first, last;
    return ct_trace_parse_window(text, &first, &last, why, n);
}

const struct ct__config_key ct__config_keys[] = {
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
    {.section = "data", .name = "tokenizer", .type = KT_STRING, FIELD(data.tokenizer), .def = "",
     .flags = KF_EMPTY,
     .help = "tokens: the directory of the GPT-2 BPE vocabulary (encoder.json, vocab.bpe) the "
             "shards were made with; its files' digests go into every checkpoint and generate "
             "speaks it; empty: none (bytes, or ids)"},
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
    {.section = "train", .name = "init_from", .type = KT_STRING, FIELD(train.init_from), .def = "",
     .flags = KF_EMPTY,
     .help = "start from these weights (npz or safetensors under export's names: nanoGPT's for a "
             "gpt), not the seed's draw; their SHA-256 goes into run.json and every checkpoint; "
             "empty: none"},
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
    /* Runtime, like placement: a choice of speed. Integer sums (the
     * deterministic mode's) are the same bits either way, as are float sums
     * at 2 ranks; at more, float sums may round differently, as they may
     * when MPI picks another algorithm. */
    {.section = "dist", .name = "allreduce", .type = KT_ENUM, FIELD(dist.allreduce), .def = "auto",
     .choices = ct_allreduce_names, .flags = KF_RUNTIME,
     .help = "allreduce algorithm: auto (our ring for allreduces >= 64 KiB when the ranks span "
             "hosts and for ZeRO-1's reduce-scatters >= 64 KiB, else MPI's), mpi (MPI's "
             "collectives), ring (always ours)"},
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
    {.section = "log", .name = "tensorboard", .type = KT_BOOL, FIELD(log.tensorboard), .def = "false",
     .flags = KF_RUNTIME, .help = "rank 0 also writes the metrics as TensorBoard event files in RUN_DIR/tb"},
    {.section = "log", .name = "trace", .type = KT_STRING, FIELD(log.trace), .def = "off",
     .check = trace_window_check, .flags = KF_RUNTIME,
     .help = "off, or steps:A-B: every rank's timeline of global steps A..B (from 1) in "
             "RUN_DIR/trace.json, for Perfetto or chrome://tracing"},
    {.section = "log", .name = "trace_max_mb", .type = KT_INT, FIELD(log.trace_max_mb), .def = "64",
     .imin = 1, .imax = 65536, .flags = KF_RUNTIME,
     .help = "the trace's span buffer per rank, MiB; spans past it are dropped (and counted)"},
};

const size_t ct__config_n_keys = sizeof ct__config_keys / sizeof ct__config_keys[0];
_Static_assert(sizeof ct__config_keys / sizeof ct__config_keys[0] <= CT__CONFIG_KEYS_MAX,
               "CT__CONFIG_KEYS_MAX holds every key");
_Static_assert(CT_MODEL_NAME_MAX <= CT_CONFIG_NAME_MAX,
               "every name the model registry accepts fits model.name");

/* ------------------------------------------------------------------------ */
/* Lookup and "did you mean"                                                */
/* ------------------------------------------------------------------------ */

int ct__config_section_known(const char *section)
{
    for (size_t i = 0; i < ct__config_n_keys; i++)
        if (strcmp(ct__config_keys[i].section, section) == 0)
            return 1;
    return 0;
}

int ct__config_find_key(const char *section, const char *name)
{
    for (size_t i = 0; i < ct__config_n_keys; i++)
        if (strcmp(ct__config_keys[i].section, section) == 0 &&
            strcmp(ct__config_keys[i].name, name) == 0)
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
void ct__config_suggest_section(const char *typed, char *out, size_t n)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        int d = near_distance(typed, ct__config_keys[i].section);
        if (d >= 0 && d < best_d) {
            best = ct__config_keys[i].section;
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
void ct__config_suggest_key(const char *section, const char *typed, char *out, size_t n)
{
    int best = -1, best_d = INT_MAX;
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        if (strcmp(ct__config_keys[i].section, section) != 0)
            continue;
        int d = near_distance(typed, ct__config_keys[i].name);
        if (d >= 0 && d < best_d) {
            best = (int)i;
            best_d = d;
        }
    }
    if (best >= 0) {
        snprintf(out, n, " (did you mean '%s'?)", ct__config_keys[best].name);
        return;
    }
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        int d = near_distance(typed, ct__config_keys[i].name);
        if (d >= 0 && d < best_d) {
            best = (int)i;
            best_d = d;
        }
    }
    if (best >= 0)
        snprintf(out, n, " (did you mean [%s] %s?)", ct__config_keys[best].section,
                 ct__config_keys[best].name);
    else if (n)
        out[0] = '\0';
}

/* The key's allowed values, NULL-terminated, or NULL: any value. */
const char *const *ct__config_key_choices(const struct ct__config_key *k)
{
    return k->choices_fn ? k->choices_fn() : k->choices;
}

/* "; did you mean 'adamw'?" for the nearest choice, or "". */
void ct__config_suggest_choice(const char *const *choices, const char *typed, char *out, size_t n)
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
