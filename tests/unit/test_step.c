/* Unit tests for one global training step (src/train/step.c) on a real
 * session (src/train/session.c) over the in-process "self" communicator.
 *
 * Dims legend: N = 64 training samples (16 test), 1x4x4 pixels, 3 classes;
 * B = 8 = the global batch (one rank); K = 1 target per sample.
 *
 * The data set is synthetic: made here, deterministically, and written as
 * raw IDX files into a temporary directory that the session opens like any
 * other (no MPI rank beyond the singleton, no fixture). The model is a tiny
 * mlp (16 -> 8 -> 3), plain SGD at a constant learning rate. Checked:
 * - the step's loss is finite and is the cross-entropy of a forward pass of
 *   the batch at the step's starting parameters, recomputed here;
 * - the step's gradient is a backward of that batch, recomputed here, and
 *   the new parameters are p - lr * g from it, bit for bit;
 * - lr = 0 leaves every parameter bit unchanged (while the gradient is not
 *   zero);
 * - two runs with one seed give identical parameter bits, another seed
 *   does not; dist.shard_optimizer (one rank: one slice) gives the bits of
 *   the unsharded step;
 * - a non-finite value (the test hook CT_INJECT_NONFINITE, or a NaN in the
 *   batch) drops the step as step.h documents: r.nonfinite = 1, the rank
 *   named, no parameter or optimizer state changed; the next finite step
 *   updates again; a malformed hook value fails the stepper's init.
 */
#include "config/config.h"
#include "core/error.h"
#include "nn/loss.h"
#include "train/session.h"
#include "train/step.h"

#include "ct_test.h"

#include <math.h>
#include <stdint.h>

enum { N_TRAIN = 64, N_TEST = 16, SIDE = 4, PIX = SIDE * SIDE, CLASSES = 3, BATCH = 8 };

static struct ct_comm g_self;
static char g_dir[256];

/* Pixels and labels that a small mlp can learn something from: the label
 * picks which quarter of the image is bright. */
static int write_split(const char *images, const char *labels, int n, uint32_t salt)
{
    uint8_t *x = malloc((size_t)n * PIX), y[N_TRAIN];
    if (!x)
        return -1;
    for (int i = 0; i < n; i++) {
        y[i] = (uint8_t)((i * 7 + salt) % CLASSES);
        for (int k = 0; k < PIX; k++) {
            const uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(k * 40503u) ^ salt;
            x[(size_t)i * PIX + k] = (uint8_t)((h >> 7) % 64 + (k / 4 == y[i] ? 160 : 0));
        }
    }
    char path[512];
    const uint32_t xdims[3] = {(uint32_t)n, SIDE, SIDE}, ydims[1] = {(uint32_t)n};
    snprintf(path, sizeof path, "%s/%s", g_dir, images);
    int rc = ct_test_write_idx(path, 3, xdims, x, (size_t)n * PIX);
    snprintf(path, sizeof path, "%s/%s", g_dir, labels);
    if (rc == 0)
        rc = ct_test_write_idx(path, 1, ydims, y, (size_t)n);
    free(x);
    return rc;
}

static void config(struct ct_config *cfg, uint64_t seed, double lr)
{
    ct_config_defaults(cfg);
    snprintf(cfg->path, sizeof cfg->path, "test_step.ini");
    snprintf(cfg->name, sizeof cfg->name, "test_step");
    snprintf(cfg->data.dir, sizeof cfg->data.dir, "%s", g_dir);
    snprintf(cfg->data.format, sizeof cfg->data.format, "idx");
    snprintf(cfg->data.train_images, sizeof cfg->data.train_images, "train-images");
    snprintf(cfg->data.train_labels, sizeof cfg->data.train_labels, "train-labels");
    snprintf(cfg->data.test_images, sizeof cfg->data.test_images, "test-images");
    snprintf(cfg->data.test_labels, sizeof cfg->data.test_labels, "test-labels");
    cfg->data.shared = 0;
    cfg->data.prefetch = 0;
    snprintf(cfg->model.name, sizeof cfg->model.name, "mlp");
    cfg->model.hidden[0] = 8;
    cfg->model.n_hidden = 1;
    cfg->model.dropout = 0.0;
    snprintf(cfg->optim.name, sizeof cfg->optim.name, "sgd");
    cfg->optim.lr = lr;
    cfg->optim.momentum = 0.0;
    cfg->optim.weight_decay = 0.0;
    cfg->optim.clip_norm = 0.0;
    cfg->schedule.kind = CT_SCHED_CONSTANT;
    cfg->schedule.warmup_steps = 0;
    cfg->train.epochs = 1;
    cfg->train.global_batch = BATCH;
    cfg->train.seed = seed;
    cfg->dist.threads = 1;
    cfg->dist.placement = CT_PLACEMENT_MODE_NONE;
    cfg->log.every_steps = 0;
}

/* A session and its stepper on cfg; 0, or the failing code with its message
 * printed. */
static int open_all(struct ct_session *s, struct ct_stepper *st, const struct ct_config *cfg)
{
    const struct ct_session_params sp = {.train = 1, .digests = 0};
    int rc = ct_session_init(s, cfg, &g_self, &sp);
    if (rc < 0) {
        fprintf(stderr, "  session: %s\n", ct_error_message());
        return rc;
    }
    if ((rc = ct_stepper_init(st, s)) < 0) {
        fprintf(stderr, "  stepper: %s\n", ct_error_message());
        ct_stepper_free(st);
        ct_session_free(s);
    }
    return rc;
}

static void close_all(struct ct_session *s, struct ct_stepper *st)
{
    ct_stepper_free(st);
    ct_session_free(s);
}

static float *copy_floats(const float *x, size_t n)
{
    float *c = ct_test_floats(n);
    memcpy(c, x, n * sizeof *c);
    return c;
}

/* The sum over the batch of -log softmax(logits)[y], in double. */
static double xent_sum(const float *logits, const int32_t *y, int B, int C)
{
    double sum = 0.0;
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * C;
        double mx = l[0], z = 0.0;
        for (int c = 1; c < C; c++)
            mx = l[c] > mx ? l[c] : mx;
        for (int c = 0; c < C; c++)
            z += exp((double)l[c] - mx);
        sum += mx + log(z) - l[y[b]];
    }
    return sum;
}

/* One step from the loader's first batch, checked against a forward and a
 * backward of that batch recomputed here, and against p - lr * g. */
static void test_step_is_one_sgd_update(void)
{
    struct ct_config cfg;
    config(&cfg, 11, 0.25);
    struct ct_session s;
    struct ct_stepper st;
    CU_ASSERT_EQUAL_FATAL(open_all(&s, &st, &cfg), 0);
    CU_ASSERT_EQUAL(s.targets, 1);
    CU_ASSERT_EQUAL(s.n_classes, CLASSES);
    struct ct_model *m = &s.model;
    const size_t P = m->params.numel;
    struct ct_batch b;
    CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
    CU_ASSERT_EQUAL_FATAL(b.n, BATCH);
    float *p0 = copy_floats(m->params.data, P);

    struct ct_step_result r;
    CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, 0, 0, &r), 0);
    CU_ASSERT_EQUAL(r.nonfinite, 0);
    CU_ASSERT_EQUAL(r.stop, 0);
    CU_ASSERT(isfinite(r.loss_sum) && r.loss_sum > 0.0);
    float *p1 = copy_floats(m->params.data, P), *g = copy_floats(m->grads.data, P);

    /* The forward pass at p0, and its loss. */
    memcpy(m->params.data, p0, P * sizeof(float));
    ct_model_zero_grad(m);
    memcpy(ct_model_input(m), b.x, (size_t)BATCH * m->in_numel * sizeof(float));
    const float *logits = ct_model_forward(m, BATCH);
    const double want = xent_sum(logits, b.y, BATCH, CLASSES);
    if (!(fabs(r.loss_sum - want) <= 1e-5 * want))
        fprintf(stderr, "  loss_sum %.9g, forward pass %.9g\n", r.loss_sum, want);
    CU_ASSERT(fabs(r.loss_sum - want) <= 1e-5 * want);
    /* Its gradient (the loss of the global batch's mean): the step's. */
    ct_xent_forward_backward(ct_model_output_grad(m), logits, b.y, BATCH, CLASSES,
                             1.0f / BATCH, NULL);
    ct_model_backward(m, BATCH, NULL, NULL);
    CT_ASSERT_CLOSE("gradient", g, m->grads.data, P, 1e-7, 1e-5);
    size_t nonzero = 0, bad = 0;
    const float lr = 0.25f;
    for (size_t i = 0; i < P; i++) {
        nonzero += g[i] != 0.0f;
        const float want_p = p0[i] - lr * g[i];
        bad += memcmp(&p1[i], &want_p, sizeof want_p) != 0;
    }
    CU_ASSERT(nonzero > P / 2);
    if (bad)
        fprintf(stderr, "  %zu of %zu parameters are not p - lr g\n", bad, P);
    CU_ASSERT_EQUAL(bad, 0);
    free(p0);
    free(p1);
    free(g);
    close_all(&s, &st);
}

/* lr = 0: the gradient is there, the parameters do not move a bit. */
static void test_zero_lr_changes_nothing(void)
{
    struct ct_config cfg;
    config(&cfg, 11, 0.0);
    struct ct_session s;
    struct ct_stepper st;
    CU_ASSERT_EQUAL_FATAL(open_all(&s, &st, &cfg), 0);
    const size_t P = s.model.params.numel;
    float *p0 = copy_floats(s.model.params.data, P);
    for (int k = 0; k < 3; k++) {
        struct ct_batch b;
        struct ct_step_result r;
        CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
        CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, k, 0, &r), 0);
        CU_ASSERT_EQUAL(r.nonfinite, 0);
        CU_ASSERT(ct_first_nonfinite(s.model.grads.data, P) == P);
        size_t nonzero = 0;
        for (size_t i = 0; i < P; i++)
            nonzero += s.model.grads.data[i] != 0.0f;
        CU_ASSERT(nonzero > 0);
    }
    CU_ASSERT_EQUAL(memcmp(p0, s.model.params.data, P * sizeof(float)), 0);
    free(p0);
    close_all(&s, &st);
}

/* The parameters after `steps` steps of a fresh session on cfg (malloc'd),
 * and the losses' sum into *loss. */
static float *train_steps(const struct ct_config *cfg, int steps, size_t *numel, double *loss)
{
    struct ct_session s;
    struct ct_stepper st;
    CU_ASSERT_EQUAL_FATAL(open_all(&s, &st, cfg), 0);
    *loss = 0.0;
    for (int k = 0; k < steps; k++) {
        struct ct_batch b;
        struct ct_step_result r;
        CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
        CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, k, 0, &r), 0);
        CU_ASSERT_EQUAL(r.nonfinite, 0);
        *loss += r.loss_sum;
    }
    *numel = s.model.params.numel;
    float *p = copy_floats(s.model.params.data, *numel);
    close_all(&s, &st);
    return p;
}

static void test_same_seed_same_bits(void)
{
    struct ct_config cfg;
    config(&cfg, 5, 0.1);
    cfg.optim.momentum = 0.9;
    size_t n1, n2, n3, n4;
    double l1, l2, l3, l4;
    float *a = train_steps(&cfg, 4, &n1, &l1);
    float *b = train_steps(&cfg, 4, &n2, &l2);
    CU_ASSERT_EQUAL_FATAL(n1, n2);
    CU_ASSERT_EQUAL(memcmp(a, b, n1 * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(&l1, &l2, sizeof l1), 0);
    /* One rank's slice is the whole vector: sharding changes no bit. */
    cfg.dist.shard_optimizer = 1;
    float *c = train_steps(&cfg, 4, &n3, &l3);
    CU_ASSERT_EQUAL_FATAL(n3, n1);
    CU_ASSERT_EQUAL(memcmp(a, c, n1 * sizeof(float)), 0);
    /* Another seed: other initial parameters, other batches. */
    cfg.dist.shard_optimizer = 0;
    cfg.train.seed = 6;
    float *d = train_steps(&cfg, 4, &n4, &l4);
    CU_ASSERT_NOT_EQUAL(memcmp(a, d, n1 * sizeof(float)), 0);
    free(a);
    free(b);
    free(c);
    free(d);
}

/* A dropped step: no parameter and no optimizer state changed. */
static void check_dropped(struct ct_session *s, const struct ct_step_result *r, const float *p0,
                          const float *mom0)
{
    const size_t P = s->model.params.numel;
    CU_ASSERT_EQUAL(r->nonfinite, 1);
    CU_ASSERT_EQUAL(r->nonfinite_rank, 0);
    CU_ASSERT_EQUAL(memcmp(p0, s->model.params.data, P * sizeof(float)), 0);
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    CU_ASSERT_EQUAL_FATAL(ct_optimizer_state(&s->opt, bufs, names), 1);
    CU_ASSERT_EQUAL(memcmp(mom0, bufs[0]->data, P * sizeof(float)), 0);
}

static void test_nonfinite_dropped(void)
{
    struct ct_config cfg;
    config(&cfg, 3, 0.1);
    cfg.optim.momentum = 0.9; /* a state that a dropped step must not touch */
    struct ct_session s;
    struct ct_stepper st;
    setenv("CT_INJECT_NONFINITE", "2:0", 1); /* global step 2, counted from 1 */
    int rc = open_all(&s, &st, &cfg);
    unsetenv("CT_INJECT_NONFINITE");
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const size_t P = s.model.params.numel;
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    CU_ASSERT_EQUAL_FATAL(ct_optimizer_state(&s.opt, bufs, names), 1);
    struct ct_batch b;
    struct ct_step_result r;
    /* Step 0 (global step 1) is finite and updates. */
    CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
    float *p0 = copy_floats(s.model.params.data, P);
    CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, 0, 0, &r), 0);
    CU_ASSERT_EQUAL(r.nonfinite, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(p0, s.model.params.data, P * sizeof(float)), 0);
    /* Step 1 (global step 2): the injected NaN gradient drops it. */
    memcpy(p0, s.model.params.data, P * sizeof(float));
    float *mom0 = copy_floats(bufs[0]->data, P);
    CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
    CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, 1, 0, &r), 0);
    check_dropped(&s, &r, p0, mom0);
    /* A NaN in the batch's input: dropped alike. (The loss may stay finite,
     * as ReLU maps NaN to 0; the first layer's weight gradient does not.) */
    CU_ASSERT_EQUAL_FATAL(ct_loader_next(&s.loader, &b), 1);
    const size_t D = s.model.in_numel;
    float *x = copy_floats(b.x, (size_t)b.n * D);
    x[3 * D + 5] = NAN;
    struct ct_batch bad = b;
    bad.x = x;
    CU_ASSERT_EQUAL_FATAL(ct_step(&st, &bad, 2, 0, &r), 0);
    check_dropped(&s, &r, p0, mom0);
    /* The same batch without the NaN: finite, and it updates again. */
    CU_ASSERT_EQUAL_FATAL(ct_step(&st, &b, 2, 0, &r), 0);
    CU_ASSERT_EQUAL(r.nonfinite, 0);
    CU_ASSERT(isfinite(r.loss_sum));
    CU_ASSERT_NOT_EQUAL(memcmp(p0, s.model.params.data, P * sizeof(float)), 0);
    CU_ASSERT_EQUAL(ct_first_nonfinite(s.model.params.data, P), P);
    free(x);
    free(p0);
    free(mom0);
    close_all(&s, &st);
}

static void test_bad_hook_refused(void)
{
    struct ct_config cfg;
    config(&cfg, 3, 0.1);
    struct ct_session s;
    struct ct_stepper st;
    const struct ct_session_params sp = {.train = 1, .digests = 0};
    CU_ASSERT_EQUAL_FATAL(ct_session_init(&s, &cfg, &g_self, &sp), 0);
    setenv("CT_INJECT_NONFINITE", "two:0", 1);
    ct_error_clear();
    const int rc = ct_stepper_init(&st, &s);
    unsetenv("CT_INJECT_NONFINITE");
    CU_ASSERT_EQUAL(rc, CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "CT_INJECT_NONFINITE"));
    close_all(&s, &st);
}

int main(void)
{
    ct_comm_init_self(&g_self);
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    if (write_split("train-images", "train-labels", N_TRAIN, 1) != 0 ||
        write_split("test-images", "test-labels", N_TEST, 2) != 0) {
        fprintf(stderr, "cannot write the data set into %s\n", g_dir);
        return 2;
    }
    unsetenv("CT_INJECT_NONFINITE");
    unsetenv("CT_DIVERGE");
    static const struct ct_test_case cases[] = {
        {"one step is one SGD update from the batch's gradient", test_step_is_one_sgd_update},
        {"lr = 0 changes no parameter", test_zero_lr_changes_nothing},
        {"one seed, one result; sharding changes no bit", test_same_seed_same_bits},
        {"a non-finite gradient or input drops the step", test_nonfinite_dropped},
        {"a malformed CT_INJECT_NONFINITE is refused", test_bad_hook_refused},
        {NULL, NULL},
    };
    int rc = ct_test_run("step", cases);
    ct_test_rmtree(g_dir);
    ct_comm_free(&g_self);
    return rc;
}
