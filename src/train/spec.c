/* Config -> plain parameter structs (see spec.h). */
#include "train/spec.h"

#include <string.h>

#include "core/error.h"
#include "parallel/mbcut.h"

/* The deterministic cut: the same micro-batches for every world. */
static int deterministic_batches(const struct ct_config *cfg, int world, struct ct_batch_plan *out)
{
    const int gb = cfg->train.global_batch, accum = cfg->train.accum_steps;
    const int mb = cfg->train.micro_batch > 0 ? cfg->train.micro_batch : gb / accum;
    if (mb < 1 || gb % mb != 0)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.deterministic: the micro-batch (%d) does not divide "
                            "train.global_batch = %d (set train.micro_batch to a divisor)",
                            cfg->path, mb, gb);
    if (cfg->model.bn_sync)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.deterministic = true needs model.bn_sync = local (BatchNorm "
                            "statistics per fixed micro-batch); sync mixes micro-batches by rank",
                            cfg->path);
    struct ct_mbcut cut;
    if (ct_mbcut_plan(gb, mb, world, 0, &cut) < 0)
        return ct_error_wrap(CT_ECONFIG, "%s", cfg->path);
    out->deterministic = 1;
    out->n_micro = (int)cut.n_mb;
    out->micro_batch = mb;
    out->accum_steps = (int)cut.count;
    return 0;
}

int ct_spec_batches(const struct ct_config *cfg, int world, struct ct_batch_plan *out)
{
    memset(out, 0, sizeof *out);
    const int gb = cfg->train.global_batch, accum = cfg->train.accum_steps;
    if (cfg->train.deterministic) {
        int rc = deterministic_batches(cfg, world, out);
        if (rc < 0)
            return rc;
        out->global_batch = gb;
        out->local_batch = gb / world;
        out->eval_batch = cfg->train.eval_batch > 0 ? cfg->train.eval_batch : out->micro_batch;
        out->max_batch = out->micro_batch > out->eval_batch ? out->micro_batch : out->eval_batch;
        return 0;
    }
    if (world < 1 || gb % world != 0)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.global_batch = %d is not divisible by the number of ranks (%d)",
                            cfg->path, gb, world);
    const int local = gb / world;
    if (local % accum != 0)
        return ct_error_set(CT_ECONFIG,
                            "%s: the per-rank batch (%d = train.global_batch %d / %d ranks) is not "
                            "divisible by train.accum_steps = %d",
                            cfg->path, local, gb, world, accum);
    out->global_batch = gb;
    out->local_batch = local;
    out->accum_steps = accum;
    out->micro_batch = local / accum;
    /* The arena holds activations for max(micro-batch, eval batch) rows, so
     * an evaluation batch above the micro-batch costs memory: by default
     * evaluate in micro-batch chunks. */
    out->eval_batch = cfg->train.eval_batch > 0 ? cfg->train.eval_batch : out->micro_batch;
    out->max_batch = out->micro_batch > out->eval_batch ? out->micro_batch : out->eval_batch;
    return 0;
}

void ct_spec_model(const struct ct_config *cfg, const struct ct_data_shape *in,
                   struct ct_model_spec *out)
{
    *out = ct_model_default_spec();
    out->name = cfg->model.name;
    out->in_c = in->c;
    out->in_h = in->h;
    out->in_w = in->w;
    out->n_classes = in->n_classes;
    out->n_hidden = cfg->model.n_hidden;
    for (int i = 0; i < cfg->model.n_hidden && i < CT_MODEL_MAX_HIDDEN; i++)
        out->hidden[i] = cfg->model.hidden[i];
    out->n_channels = cfg->model.n_channels;
    for (int i = 0; i < cfg->model.n_channels && i < CT_MODEL_MAX_HIDDEN; i++)
        out->channels[i] = cfg->model.channels[i];
    out->blocks = cfg->model.blocks;
    out->depth = cfg->model.depth;
    out->width = cfg->model.width;
    out->heads = cfg->model.heads;
    out->patch = cfg->model.patch;
    out->block = cfg->model.block;
    out->mlp_ratio = cfg->model.mlp_ratio;
    out->gelu_tanh = cfg->model.gelu_tanh;
    out->dropout = (float)cfg->model.dropout;
    out->bn_sync = cfg->model.bn_sync;
    out->fused = cfg->model.fused;
}

struct ct_optimizer_params ct_spec_optimizer(const struct ct_config *cfg)
{
    enum ct_optim_kind kind = CT_OPTIM_SGD;
    for (int k = 0; k < CT_OPTIM_COUNT; k++)
        if (strcmp(cfg->optim.name, ct_optim_kind_names[k]) == 0)
            kind = (enum ct_optim_kind)k;
    return (struct ct_optimizer_params){
        .kind = kind,
        .sgd = {.momentum = cfg->optim.momentum,
                .dampening = cfg->optim.dampening,
                .weight_decay = cfg->optim.weight_decay,
                .nesterov = cfg->optim.nesterov},
        .adamw = {.beta1 = cfg->optim.beta1,
                  .beta2 = cfg->optim.beta2,
                  .eps = cfg->optim.eps,
                  .weight_decay = cfg->optim.weight_decay},
    };
}

double ct_spec_clip_norm(const struct ct_config *cfg)
{
    return cfg->optim.clip_norm;
}

struct ct_schedule ct_spec_schedule(const struct ct_config *cfg, int64_t total_steps)
{
    return (struct ct_schedule){.kind = (enum ct_sched_kind)cfg->schedule.kind,
                                .base_lr = cfg->optim.lr,
                                .total_steps = total_steps,
                                .warmup_steps = cfg->schedule.warmup_steps,
                                .step_size = cfg->schedule.step_size,
                                .gamma = cfg->schedule.gamma,
                                .min_lr = cfg->schedule.min_lr};
}

struct ct_placement_params ct_spec_placement(const struct ct_config *cfg)
{
    struct ct_placement_params p = ct_placement_default_params();
    p.mode = (enum ct_placement_mode)cfg->dist.placement;
    p.threads = cfg->dist.threads;
    p.use_hyperthreads = cfg->dist.use_hyperthreads;
    return p;
}

struct ct_gradsync_params ct_spec_gradsync(const struct ct_config *cfg)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    const size_t bucket = (size_t)(cfg->dist.bucket_mb * 1024.0 * 1024.0);
    p.bucket_bytes = bucket > 0 ? bucket : 1;
    /* The first bucket is the one the optimizer waits for last-but-all:
     * small, so communication starts early in backward (as DDP's 1 MiB). */
    if (p.first_bucket_bytes > p.bucket_bytes / 4)
        p.first_bucket_bytes = p.bucket_bytes / 4 > 0 ? p.bucket_bytes / 4 : 1;
    p.overlap = !cfg->dist.grad_sync_blocking;
    p.compress = (enum ct_grad_compress)cfg->dist.grad_compress;
    p.feedback = cfg->dist.grad_compress_feedback;
    return p;
}

struct ct_loader_params ct_spec_loader(const struct ct_config *cfg)
{
    return (struct ct_loader_params){.prefetch = cfg->data.prefetch};
}

struct ct_dataset_params ct_spec_dataset(const struct ct_config *cfg, int train)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    /* The config checked the names against the same tables. */
    p.format = (enum ct_data_format)ct_data_format_parse(cfg->data.format);
    p.layout = (enum ct_data_layout)ct_data_layout_parse(cfg->data.layout);
    p.dir = cfg->data.dir;
    p.images = train ? cfg->data.train_images : cfg->data.test_images;
    p.labels = train ? cfg->data.train_labels : cfg->data.test_labels;
    /* One value or one per channel each; a mean and a std list of other
     * lengths is refused at open (naming both keys), as is a length other
     * than the channels. */
    p.n_mean = cfg->data.n_mean == cfg->data.n_std ? cfg->data.n_mean : -1;
    for (int c = 0; c < CT_DATA_MAX_CHANNELS; c++) {
        p.mean[c] = cfg->data.mean[c < cfg->data.n_mean ? c : 0];
        p.std[c] = cfg->data.std[c < cfg->data.n_std ? c : 0];
    }
    p.augment = train ? (enum ct_data_augment)ct_data_augment_parse(cfg->data.augment)
                      : CT_DATA_AUGMENT_NONE;
    p.crop_pad = cfg->data.crop_pad;
    p.seed = cfg->train.seed;
    p.window = cfg->model.block + 1;
    p.vocab = cfg->data.vocab;
    return p;
}
