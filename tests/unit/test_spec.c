/* Unit tests for train/spec: the config -> parameter-struct mappings, each on
 * its own as spec.h promises (pure functions: a config in, a struct out):
 * - the batch plan: per-rank and micro-batches, accumulation, the evaluation
 *   batch and the arena's rows; a world or accum_steps that does not divide,
 *   refused naming the config file;
 * - the deterministic cut: fixed micro-batches for any world, their count and
 *   each rank's share; a micro-batch that does not divide the global batch, a
 *   world that does not divide the micro-batches, bn_sync = sync, refused;
 * - the model spec (image and gpt keys), the optimizer (kind from its name,
 *   its hyper-parameters), the schedule, gradient sync (bucket sizes, the
 *   small first bucket, blocking), the data sets (train augments, test never;
 *   the gpt's window = block + 1).
 * The shipped configs are the inputs, overridden with --set as a user would.
 */
#include "config/config.h"
#include "core/error.h"
#include "ct_test.h"
#include "train/spec.h"

#include <string.h>

#define CONFIGS CT_FIXTURE_DIR "/../../configs/"

static struct ct_config g_cfg;

/* configs/NAME with up to 4 overrides; fails the test on an error. */
static const struct ct_config *load(const char *name, const char *s1, const char *s2, const char *s3,
                                    const char *s4)
{
    const char *all[4] = {s1, s2, s3, s4}, *sets[4];
    int n = 0;
    for (int i = 0; i < 4; i++)
        if (all[i])
            sets[n++] = all[i];
    char path[512];
    snprintf(path, sizeof path, "%s%s", CONFIGS, name);
    int rc = ct_config_load(&g_cfg, path, sets, n);
    if (rc < 0)
        fprintf(stderr, "\n    %s: %s\n", name, ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return &g_cfg;
}

static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static void test_batches(void)
{
    struct ct_batch_plan bp;
    const struct ct_config *c = load("fmnist-mlp.ini", "train.global_batch=256", "train.eval_batch=auto",
                                     NULL, NULL);
    CU_ASSERT_EQUAL_FATAL(ct_spec_batches(c, 2, &bp), 0);
    CU_ASSERT_EQUAL(bp.global_batch, 256);
    CU_ASSERT_EQUAL(bp.local_batch, 128);
    CU_ASSERT_EQUAL(bp.accum_steps, 1);
    CU_ASSERT_EQUAL(bp.micro_batch, 128);
    CU_ASSERT_EQUAL(bp.eval_batch, 128); /* auto: the micro-batch */
    CU_ASSERT_EQUAL(bp.max_batch, 128);
    CU_ASSERT_EQUAL(bp.deterministic, 0);

    c = load("fmnist-mlp.ini", "train.global_batch=256", "train.accum_steps=4", "train.eval_batch=500",
             NULL);
    CU_ASSERT_EQUAL_FATAL(ct_spec_batches(c, 4, &bp), 0);
    CU_ASSERT_EQUAL(bp.local_batch, 64);
    CU_ASSERT_EQUAL(bp.accum_steps, 4);
    CU_ASSERT_EQUAL(bp.micro_batch, 16);
    CU_ASSERT_EQUAL(bp.eval_batch, 500);
    CU_ASSERT_EQUAL(bp.max_batch, 500); /* the arena holds the larger of the two */

    /* 3 ranks do not divide 256; 128 per rank is not a multiple of 3. */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_spec_batches(c, 3, &bp), CT_ECONFIG);
    expect_msg("fmnist-mlp.ini: train.global_batch = 256 is not divisible by the number of ranks (3)");
    c = load("fmnist-mlp.ini", "train.global_batch=256", "train.accum_steps=3", NULL, NULL);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_spec_batches(c, 2, &bp), CT_ECONFIG);
    expect_msg("the per-rank batch (128 = train.global_batch 256 / 2 ranks) is not divisible by "
               "train.accum_steps = 3");
}

static void test_batches_deterministic(void)
{
    struct ct_batch_plan bp;
    const struct ct_config *c = load("fmnist-mlp.ini", "train.deterministic=true", "train.global_batch=96",
                                     "train.micro_batch=8", "train.eval_batch=auto");
    /* 12 micro-batches of 8 at any world that divides 12: each rank's share. */
    const int worlds[] = {1, 2, 3, 4, 6, 12}, shares[] = {12, 6, 4, 3, 2, 1};
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_EQUAL_FATAL(ct_spec_batches(c, worlds[i], &bp), 0);
        CU_ASSERT_EQUAL(bp.deterministic, 1);
        CU_ASSERT_EQUAL(bp.n_micro, 12);
        CU_ASSERT_EQUAL(bp.micro_batch, 8);
        CU_ASSERT_EQUAL(bp.accum_steps, shares[i]);
        CU_ASSERT_EQUAL(bp.local_batch, 96 / worlds[i]);
        CU_ASSERT_EQUAL(bp.eval_batch, 8);
    }
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_spec_batches(c, 5, &bp), CT_ECONFIG);
    expect_msg("fmnist-mlp.ini");

    c = load("fmnist-mlp.ini", "train.deterministic=true", "train.global_batch=96", "train.micro_batch=7",
             NULL);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_spec_batches(c, 1, &bp), CT_ECONFIG);
    expect_msg("the micro-batch (7) does not divide train.global_batch = 96");

    c = load("fmnist-cnn.ini", "train.deterministic=true", "train.global_batch=96", "train.micro_batch=8",
             "model.bn_sync=sync");
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_spec_batches(c, 2, &bp), CT_ECONFIG);
    expect_msg("needs model.bn_sync = local");
}

static void test_model_and_data(void)
{
    struct ct_model_spec ms;
    const struct ct_config *c = load("fmnist-cnn.ini", "model.channels=4,8", "model.hidden=16", NULL, NULL);
    ct_spec_model(c, &(struct ct_data_shape){1, 28, 28, 10}, &ms);
    CU_ASSERT_STRING_EQUAL(ms.name, "cnn");
    CU_ASSERT_EQUAL(ms.in_c, 1);
    CU_ASSERT_EQUAL(ms.in_h, 28);
    CU_ASSERT_EQUAL(ms.n_classes, 10);
    CU_ASSERT_EQUAL(ms.n_channels, 2);
    CU_ASSERT_EQUAL(ms.channels[0], 4);
    CU_ASSERT_EQUAL(ms.channels[1], 8);
    CU_ASSERT_EQUAL(ms.n_hidden, 1);
    CU_ASSERT_EQUAL(ms.hidden[0], 16);

    c = load("moby-gpt.ini", "model.block=64", "data.vocab=300", NULL, NULL);
    ct_spec_model(c, &(struct ct_data_shape){1, 1, 64, 300}, &ms);
    CU_ASSERT_STRING_EQUAL(ms.name, "gpt");
    CU_ASSERT_EQUAL(ms.block, 64);
    CU_ASSERT_EQUAL(ms.depth, c->model.depth);
    CU_ASSERT_EQUAL(ms.width, c->model.width);
    CU_ASSERT_EQUAL(ms.heads, c->model.heads);
    CU_ASSERT_EQUAL(ms.gelu_tanh, c->model.gelu_tanh);
    struct ct_dataset_params dp = ct_spec_dataset(c, 1);
    CU_ASSERT_EQUAL(dp.window, 65); /* a window of block + 1 tokens: inputs and targets */
    CU_ASSERT_EQUAL(dp.vocab, 300);
    CU_ASSERT_STRING_EQUAL(dp.images, c->data.train_images);
    dp = ct_spec_dataset(c, 0);
    CU_ASSERT_STRING_EQUAL(dp.images, c->data.test_images);

    /* CIFAR-10: per-channel mean/std, crop+flip for training, never for the test set. */
    c = load("cifar10-resnet.ini", NULL, NULL, NULL, NULL);
    dp = ct_spec_dataset(c, 1);
    CU_ASSERT_EQUAL(dp.format, CT_DATA_FORMAT_CIFAR10);
    CU_ASSERT_EQUAL(dp.augment, CT_DATA_AUGMENT_CROP_FLIP);
    CU_ASSERT_EQUAL(dp.crop_pad, 4);
    CU_ASSERT_EQUAL(dp.n_mean, 3);
    CU_ASSERT_DOUBLE_EQUAL(dp.mean[1], c->data.mean[1], 0);
    CU_ASSERT_DOUBLE_EQUAL(dp.std[2], c->data.std[2], 0);
    CU_ASSERT_EQUAL(dp.seed, c->train.seed);
    dp = ct_spec_dataset(c, 0);
    CU_ASSERT_EQUAL(dp.augment, CT_DATA_AUGMENT_NONE);
}

static void test_optim_schedule_sync(void)
{
    const struct ct_config *c = load("moby-gpt.ini", "optim.weight_decay=0.05", NULL, NULL, NULL);
    struct ct_optimizer_params op = ct_spec_optimizer(c);
    CU_ASSERT_EQUAL(op.kind, CT_OPTIM_ADAMW);
    CU_ASSERT_DOUBLE_EQUAL(op.adamw.beta1, c->optim.beta1, 0);
    CU_ASSERT_DOUBLE_EQUAL(op.adamw.beta2, c->optim.beta2, 0);
    CU_ASSERT_DOUBLE_EQUAL(op.adamw.weight_decay, 0.05, 1e-12);
    struct ct_schedule s = ct_spec_schedule(c, 1048);
    CU_ASSERT_EQUAL(s.total_steps, 1048);
    CU_ASSERT_EQUAL(s.warmup_steps, c->schedule.warmup_steps);
    CU_ASSERT_DOUBLE_EQUAL(s.base_lr, c->optim.lr, 0);
    CU_ASSERT_DOUBLE_EQUAL(s.min_lr, c->schedule.min_lr, 0);

    c = load("fmnist-mlp.ini", "optim.momentum=0.8", "dist.bucket_mb=4", NULL, NULL);
    op = ct_spec_optimizer(c);
    CU_ASSERT_EQUAL(op.kind, CT_OPTIM_SGD);
    CU_ASSERT_DOUBLE_EQUAL(op.sgd.momentum, 0.8, 1e-12);
    struct ct_gradsync_params g = ct_spec_gradsync(c);
    CU_ASSERT_EQUAL(g.bucket_bytes, (size_t)4 << 20);
    CU_ASSERT(g.first_bucket_bytes >= 1 && g.first_bucket_bytes <= g.bucket_bytes / 4);
    CU_ASSERT_EQUAL(g.overlap, 1);
    /* Tiny buckets (every layer its own): never 0 bytes, the first no larger. */
    c = load("fmnist-mlp.ini", "dist.bucket_mb=0.000001", "dist.grad_sync=blocking", NULL, NULL);
    g = ct_spec_gradsync(c);
    CU_ASSERT_EQUAL(g.bucket_bytes, 1);
    CU_ASSERT_EQUAL(g.first_bucket_bytes, 1);
    CU_ASSERT_EQUAL(g.overlap, 0);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"batches", test_batches},
        {"batches: deterministic", test_batches_deterministic},
        {"model and data sets", test_model_and_data},
        {"optimizer, schedule, gradient sync", test_optim_schedule_sync},
        {NULL, NULL},
    };
    return ct_test_run("spec", cases);
}
