/* Run configuration: INI files (inih) plus `--set section.key=value` overrides,
 * validated strictly and turned into a plain struct.
 *
 * Every key the program knows is declared once in a schema table (schema.c):
 * section, key, type, default, range and a one-line help. Parsing refuses an
 * unknown section or key (with a "did you mean" when a near name exists), a
 * value of the wrong type, a value out of range and a missing required key,
 * with the file and line (or the `--set` argument) in the message. Nothing
 * below src/train reads INI keys: they read struct ct_config.
 *
 *     struct ct_config cfg;
 *     const char *sets[] = {"train.epochs=1"};
 *     if (ct_config_load(&cfg, "configs/fmnist-mlp.ini", sets, 1) < 0)
 *         fprintf(stderr, "%s\n", ct_error_message());
 *     ct_config_write(&cfg, stdout);   // the resolved config, every key
 */
#ifndef CT_CONFIG_CONFIG_H
#define CT_CONFIG_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#define CT_CONFIG_PATH_MAX 1024
#define CT_CONFIG_NAME_MAX 64
#define CT_CONFIG_MAX_HIDDEN 16

struct ct_config {
    /* Where the file came from (for messages) and its base name without
     * directory and ".ini" (the default run directory is runs/<name>). */
    char path[CT_CONFIG_PATH_MAX];
    char name[CT_CONFIG_NAME_MAX];

    struct {
        char dir[CT_CONFIG_PATH_MAX];          /* default /usr/share/datasets/fashion-mnist */
        char train_images[CT_CONFIG_PATH_MAX]; /* file names, relative to dir unless absolute */
        char train_labels[CT_CONFIG_PATH_MAX];
        char test_images[CT_CONFIG_PATH_MAX];
        char test_labels[CT_CONFIG_PATH_MAX];
        char format[16];                       /* auto, idx, npy, cifar10, tokens (data/dataset.h) */
        int vocab;                             /* tokens: vocabulary; 0 = 1 + the largest token */
        char tokenizer[CT_CONFIG_PATH_MAX];    /* tokens: GPT-2 BPE directory; "" = none */
        char layout[8];                        /* auto, nchw, nhwc */
        double mean[4], std[4];                /* x/255 then (x-mean)/std, per channel */
        int n_mean, n_std;                     /* 1, or one per channel */
        char augment[16];                      /* none, crop_flip */
        int crop_pad;                          /* crop_flip: padding on each side */
        int prefetch;                          /* batches the loader thread prepares ahead; 0 = none */
        int shared;                            /* ranks of a node map one copy of the images */
    } data;

    struct {
        char name[CT_CONFIG_NAME_MAX];         /* "mlp", "cnn", "resnet", "vit" */
        int hidden[CT_CONFIG_MAX_HIDDEN];      /* mlp hidden widths, e.g. 256,128; cnn: its FC width */
        int n_hidden;
        int channels[CT_CONFIG_MAX_HIDDEN];    /* cnn conv channels; resnet stage widths */
        int n_channels;
        int blocks;                            /* resnet: basic blocks per stage */
        int depth;                             /* vit: transformer blocks */
        int width;                             /* vit: token width */
        int heads;                             /* vit: attention heads */
        int patch;                             /* vit: patch size */
        int block;                             /* gpt: context length T */
        int mlp_ratio;                         /* vit: MLP hidden = mlp_ratio * width */
        int gelu_tanh;                         /* GELU: 0 exact (erf), 1 tanh approximation */
        double dropout;                        /* dropout probability where the model has dropout */
        int bn_sync;                           /* 0: per-rank BatchNorm statistics; 1: global (SyncBatchNorm) */
        int fused;                             /* cnn: fused Conv-BN-ReLU-MaxPool blocks */
    } model;

    struct {
        char name[CT_CONFIG_NAME_MAX];         /* "sgd" | "adamw" */
        double lr, momentum, dampening, weight_decay;
        int nesterov;                          /* bool */
        double beta1, beta2, eps;              /* adamw */
        double clip_norm;                      /* global gradient-norm clipping; 0 = off */
    } optim;

    struct {
        int kind;                              /* enum ct_sched_kind (optim/optim.h); key "name" */
        int64_t warmup_steps;                  /* linear warmup from lr/warmup_steps */
        int64_t step_size;                     /* step: decay every step_size steps */
        double gamma;                          /* step: factor */
        double min_lr;                         /* cosine: floor (eta_min) */
    } schedule;

    struct {
        int epochs;
        int global_batch;
        uint64_t seed;
        int64_t max_steps;                     /* 0: no limit; else stop after this many global steps */
        int eval_batch;                        /* per-rank evaluation batch; 0 = the micro-batch */
        int eval_every;                        /* validate every K epochs (and always at the end) */
        int accum_steps;                       /* micro-batches per step (one allreduce per step) */
        int deterministic;                     /* bool: bits independent of ranks, threads, sync mode */
        int micro_batch;                       /* deterministic mode's fixed micro-batch; 0 = auto */
        int on_nonfinite_skip;                 /* 0: stop on a non-finite loss or gradient; 1: skip the step */
        int precision;                         /* enum ct_precision (core/gemm.h): 0 fp32, 1 bf16 */
        char init_from[CT_CONFIG_PATH_MAX];    /* npz / safetensors weights to start from; "" = the seed's */
    } train;

    struct {
        int threads;                           /* BLAS threads per rank; 0 = auto */
        int placement;                         /* enum ct_placement_mode: auto none core numa package */
        int use_hyperthreads;                  /* bool */
        int grad_sync_blocking;                /* 0: overlap the gradient sync with backward; 1: after it */
        int64_t check_every;                   /* replica digest check every this many steps; 0 = epochs only */
        double bucket_mb;                      /* gradient sync bucket size, MiB */
        double peak_gflops;                    /* per rank, for MFU; 0 = measure (a gemm probe) */
        int watchdog_s;                        /* hang watchdog deadline, s; 0 = off */
        int grad_compress;                     /* enum ct_grad_compress: none, bf16 */
        int grad_compress_feedback;            /* bool: error feedback of the bf16 rounding */
        int shard_optimizer;                   /* bool: ZeRO-1, 1/N of the optimizer state per rank */
        int allreduce;                         /* enum ct_allreduce: auto, mpi, ring */
    } dist;

    struct {
        int every_steps;                       /* rank 0 prints a progress line every K steps; 0 = off */
        int tensorboard;                       /* bool: rank 0 writes RUN_DIR/tb event files */
        char trace[32];                        /* "off" or "steps:A-B": RUN_DIR/trace.json (core/trace.h) */
        int trace_max_mb;                      /* the trace's span buffer per rank, MiB */
    } log;

    struct {
        int64_t every_steps;                   /* 0 = off */
        int every_epochs;                      /* 0 = off; the end of the run always checkpoints */
        int keep_last;                         /* 0 = keep all */
        int64_t keep_every;                    /* also keep steps that are multiples; 0 = none */
        int on_error_continue;                 /* 0: stop the run; 1: warn and keep training */
    } checkpoint;
};

/* Fill *cfg with every default (required keys are left unset). */
void ct_config_defaults(struct ct_config *cfg);

/* Parse `path`, apply the `n_sets` overrides ("section.key=value") in order,
 * check that every required key was given, and validate. On failure returns
 * CT_ECONFIG (CT_ENOENT/CT_EIO if the file cannot be read) with a message that
 * names the file and line or the override. */
int ct_config_load(struct ct_config *cfg, const char *path, const char *const *sets, int n_sets);

/* The same from text held in memory (a checkpoint's recorded config);
 * `label` stands for the file name in messages and names the config. */
int ct_config_load_text(struct ct_config *cfg, const char *text, const char *label,
                        const char *const *sets, int n_sets);

/* A recorded config (a checkpoint's text, or with text NULL the file at
 * path, such as a run directory's config.ini) read to be compared or shown,
 * not to build from: checked like ct_config_load_text, except that
 * model.name may be a model this program has not registered (the program
 * that trained it had; tools like `audit verify` must not need its code).
 * What builds a model from the result still fails on an unknown name. */
int ct_config_load_recorded(struct ct_config *cfg, const char *path, const char *text);

/* Compare two configs key by key: writes "section.key: A -> B" lines for
 * every difference into out (may be NULL), and returns the number of
 * differing keys that change the experiment's state (model, optimizer,
 * schedule, data, batch, seed, epochs...); *n_runtime gets the number of
 * differing keys that do not (max_steps, logging, placement, checkpoint
 * cadence). */
int ct_config_diff(const struct ct_config *a, const struct ct_config *b, char *out, size_t n,
                   int *n_runtime);

/* Write the resolved config (every key, defaults included) as INI. */
int ct_config_write(const struct ct_config *cfg, FILE *out);
/* The schema, for people: every key with its type, allowed values or range,
 * default, whether it changes the experiment (a resume refuses a change) or
 * is a runtime setting, and its help text. With cfg (may be NULL) each key's
 * resolved value is shown too, marked when it is not the default. `tsv`: one
 * tab-separated line per key (key, type, allowed, default, kind, value, help)
 * under a header line, for scripts. Returns CT_EIO when out cannot be
 * written. */
int ct_config_list(FILE *out, const struct ct_config *cfg, int tsv);
/* The same as a malloc'd string in *text (the caller frees it). */
int ct_config_text(const struct ct_config *cfg, char **text);


#endif
