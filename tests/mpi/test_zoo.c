/* Data-parallel behaviour of the model zoo under real mpirun, on the real
 * Fashion-MNIST files:
 * - bn_sync = sync: N ranks compute the same BatchNorm statistics as one rank
 *   over the whole global batch, so N-rank and 1-rank runs agree to float
 *   tolerance (with per-rank statistics they do not, for N > 1);
 * - gradient accumulation over k micro-batches equals one big batch;
 * - gradient clipping sees the same (allreduced) norm on every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "ct_mpi_test.h"
#include "train/trainer-impl.h"

static void base_config(struct ct_config *cfg, const char *model)
{
    ct_config_defaults(cfg);
    snprintf(cfg->path, sizeof cfg->path, "test_zoo.ini");
    snprintf(cfg->name, sizeof cfg->name, "test_zoo");
    snprintf(cfg->data.dir, sizeof cfg->data.dir, "/usr/share/datasets/fashion-mnist");
    snprintf(cfg->model.name, sizeof cfg->model.name, "%s", model);
    cfg->model.channels[0] = 4, cfg->model.channels[1] = 8, cfg->model.n_channels = 2;
    cfg->model.hidden[0] = 16, cfg->model.n_hidden = 1;
    cfg->model.width = 16, cfg->model.heads = 2, cfg->model.depth = 1, cfg->model.patch = 7;
    cfg->model.dropout = 0.0;
    cfg->optim.lr = 0.05;
    cfg->optim.momentum = 0.9;
    cfg->train.epochs = 1;
    cfg->train.global_batch = 64;
    cfg->train.seed = 3;
    cfg->train.max_steps = 8;
    cfg->train.eval_batch = 0;
    cfg->dist.threads = 1;
    cfg->dist.placement = CT_PLACEMENT_MODE_NONE;
    cfg->log.every_steps = 0;
}

/* Train `cfg` on `comm`; returns a copy of the final parameters. */
static float *train(const struct ct_config *cfg, struct ct_comm *comm, const char *dir,
                    size_t *n, double *grad_norm)
{
    static struct ct_trainer tr;
    int rc = ct_trainer_init(&tr, cfg, comm, dir, NULL);
    if (rc < 0)
        fprintf(stderr, "%s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    struct ct_train_summary sum;
    CU_ASSERT_EQUAL_FATAL(ct_trainer_run(&tr, &sum), 0);
    CU_ASSERT_EQUAL(sum.steps, cfg->train.max_steps);
    *n = tr.s.model.params.numel;
    float *p = malloc(*n * sizeof(float));
    memcpy(p, tr.s.model.params.data, *n * sizeof(float));
    if (grad_norm)
        *grad_norm = tr.st.last_grad_norm;
    ct_trainer_free(&tr);
    return p;
}

static float *train_single(const struct ct_config *cfg, const char *dir, size_t *n)
{
    struct ct_comm self;
    ct_comm_init_self(&self);
    char d[400];
    snprintf(d, sizeof d, "%s/single-%d", dir, g_comm.rank);
    float *p = train(cfg, &self, d, n, NULL);
    ct_comm_free(&self);
    return p;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_sync_bn(void)
{
    static struct ct_config cfg;
    base_config(&cfg, "cnn");
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    size_t n, n1;
    float *one = train_single(&cfg, dir, &n1);

    cfg.model.bn_sync = 1;
    float *sync = train(&cfg, &g_comm, dir, &n, NULL);
    CU_ASSERT_EQUAL_FATAL(n, n1);
    /* 8 SGD steps with momentum: float rounding of the differently ordered
     * sums stays below 1e-4; a wrong global statistic (per-rank mean or
     * variance) moves the weights by 1e-3 and more (see the local run). */
    double d_sync = max_diff(sync, one, n);
    if (d_sync > 1e-4)
        fprintf(stderr, "  sync BN vs 1 rank: max diff %.3g\n", d_sync);
    CU_ASSERT(d_sync <= 1e-4);

    if (g_comm.world > 1) {
        cfg.model.bn_sync = 0;
        float *local = train(&cfg, &g_comm, dir, &n, NULL);
        double d_local = max_diff(local, one, n);
        CU_ASSERT(d_local > 10 * d_sync && d_local > 1e-4);
        free(local);
    }
    free(sync);
    free(one);
    ct_comm_barrier(&g_comm); /* nobody is still writing below dir */
    if (g_comm.rank == 0)
        ct_test_rmtree(dir);
}

static void test_accumulation(void)
{
    static struct ct_config cfg;
    /* vit: no BatchNorm, whose statistics would (rightly) differ between a
     * micro-batch and the whole batch. SGD, not AdamW: AdamW's update of an
     * element with a near-zero gradient is ~lr whatever its sign, so it
     * turns rounding into lr-sized differences. */
    base_config(&cfg, "vit");
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    size_t n, n4;
    float *big = train(&cfg, &g_comm, dir, &n, NULL);
    cfg.train.accum_steps = 4 / (g_comm.world < 4 ? 1 : 2); /* micro-batches of >= 8 rows */
    float *acc = train(&cfg, &g_comm, dir, &n4, NULL);
    CU_ASSERT_EQUAL_FATAL(n, n4);
    /* As for sync BN: rounding of differently ordered sums, amplified by 8
     * momentum steps, stays below 1e-4; a missing micro-batch or a wrong
     * scale (1/micro instead of 1/global) is off by far more. */
    double d = max_diff(big, acc, n);
    if (d > 1e-4)
        fprintf(stderr, "  accumulation vs one batch: max diff %.3g\n", d);
    CU_ASSERT(d <= 1e-4);
    free(big);
    free(acc);
    ct_comm_barrier(&g_comm); /* nobody is still writing below dir */
    if (g_comm.rank == 0)
        ct_test_rmtree(dir);
}

static void test_clipping(void)
{
    static struct ct_config cfg;
    base_config(&cfg, "mlp");
    cfg.optim.clip_norm = 0.05; /* well below the gradient norms of early steps */
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    size_t n;
    double norm;
    float *p = train(&cfg, &g_comm, dir, &n, &norm);
    CU_ASSERT(norm > 0.05); /* clipping was active */
    double lo = norm, hi = norm;
    ct_comm_allreduce_f64(&g_comm, &lo, 1, CT_REDUCE_MIN);
    ct_comm_allreduce_f64(&g_comm, &hi, 1, CT_REDUCE_MAX);
    CU_ASSERT_EQUAL(lo, hi); /* bit-identical on every rank */
    /* And the replicas stayed identical (the trainer checks digests too). */
    float *root = malloc(n * sizeof(float));
    memcpy(root, p, n * sizeof(float));
    ct_comm_bcast(&g_comm, root, n * sizeof(float), 0);
    CU_ASSERT(memcmp(root, p, n * sizeof(float)) == 0);
    free(root);
    free(p);
    ct_comm_barrier(&g_comm); /* nobody is still writing below dir */
    if (g_comm.rank == 0)
        ct_test_rmtree(dir);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"sync BatchNorm over N ranks == one rank", test_sync_bn},
        {"accumulation over micro-batches == one batch", test_accumulation},
        {"clipping sees the same norm on every rank", test_clipping},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "zoo", cases);
}
