/* The trainer under real mpirun, on the real Fashion-MNIST files:
 * - after steps, every rank holds bit-identical parameters;
 * - N ranks and one rank at the same global batch agree to float tolerance
 *   after 20 steps (the gradient of the global-batch mean is the same sum,
 *   only the order of additions differs);
 * - a global batch that N does not divide, and a bad data directory, are
 *   errors reported on every rank, with nobody left hanging. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "core/sha256.h"
#include "ct_mpi_test.h"
#include "ct_train_test.h"
#include "train/trainer-impl.h"

static void small_config(struct ct_config *cfg)
{
    ct_test_mlp_config(cfg, "test_train");
    cfg->optim.weight_decay = 5e-4;
    cfg->train.epochs = 2;
    cfg->train.seed = 7;
    cfg->train.max_steps = 20;
    cfg->train.eval_batch = 500;
}

static void test_replicas_and_single_rank(void)
{
    static struct ct_config cfg;
    small_config(&cfg);
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    static struct ct_trainer tr;
    struct ct_train_summary sum;
    CU_ASSERT_EQUAL_FATAL(ct_test_train(&tr, &cfg, &g_comm, dir, NULL, &sum), 0);
    CU_ASSERT_EQUAL(sum.steps, 20);
    CU_ASSERT(sum.last.partial);
    CU_ASSERT(sum.last.test_acc > 0.5); /* 20 steps of batch 64 already learn something */

    /* Bit-identical replicas: every rank's digest equals rank 0's. */
    uint8_t mine[CT_SHA256_LEN], root[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_flat_sha256(&tr.s.model.params, mine), 0);
    memcpy(root, mine, sizeof root);
    ct_comm_bcast(&g_comm, root, sizeof root, 0);
    CU_ASSERT(memcmp(mine, root, sizeof mine) == 0);
    char hex[CT_SHA256_HEX_LEN];
    ct_sha256_hex(mine, hex);
    CU_ASSERT_STRING_EQUAL(hex, sum.last.param_sha256);

    /* The same run on one rank (in-process communicator), on every rank. */
    struct ct_comm self;
    ct_comm_init_self(&self);
    char dir1[300];
    snprintf(dir1, sizeof dir1, "%s/single-%d", dir, g_comm.rank);
    static struct ct_trainer one;
    struct ct_train_summary sum1;
    CU_ASSERT_EQUAL_FATAL(ct_test_train(&one, &cfg, &self, dir1, NULL, &sum1), 0);
    CU_ASSERT_EQUAL(sum1.steps, 20);
    /* 20 SGD steps with momentum amplify rounding differences of ~1e-7 in
     * the gradient sums; 1e-4 absolute on weights of magnitude ~0.05 is far
     * tighter than any real divergence (a wrong slice, a missing 1/N) would
     * give: those change weights by 1e-2 and more. */
    CT_ASSERT_CLOSE("params N vs 1", tr.s.model.params.data, one.s.model.params.data,
                    tr.s.model.params.numel, 1e-4, 1e-3);
    CU_ASSERT(fabs(sum.last.train_loss - sum1.last.train_loss) < 1e-4);
    CU_ASSERT(fabs(sum.last.test_acc - sum1.last.test_acc) < 2e-3);
    if (g_comm.world == 1)
        CU_ASSERT_STRING_EQUAL(sum.last.param_sha256, sum1.last.param_sha256);
    ct_trainer_free(&one);
    ct_comm_free(&self);
    ct_trainer_free(&tr);

    /* The run directory holds the resolved config and one metrics line.
     * Rank 0 removes it: only once every rank's own single-rank run (in
     * dir/single-RANK) is over, or a slower rank loses its files. */
    ct_comm_barrier(&g_comm);
    if (g_comm.rank == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
        FILE *f = fopen(path, "r");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        char line[2048];
        CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, f));
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "\"step\": 20"));
        CU_ASSERT_PTR_NOT_NULL(strstr(line, hex));
        CU_ASSERT_PTR_NULL(fgets(line, sizeof line, f));
        fclose(f);
        snprintf(path, sizeof path, "%s/config.ini", dir);
        static struct ct_config back;
        CU_ASSERT_EQUAL(ct_config_load(&back, path, NULL, 0), 0);
        CU_ASSERT_EQUAL(back.train.seed, 7);
        CU_ASSERT_EQUAL(back.model.hidden[0], 64);
        ct_test_rmtree(dir);
    }
}

static void test_indivisible_batch(void)
{
    if (g_comm.world == 1)
        return;
    static struct ct_config cfg;
    small_config(&cfg);
    cfg.train.global_batch = 2 * g_comm.world + 1;
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    static struct ct_trainer tr;
    int rc = ct_trainer_init(&tr, &cfg, &g_comm, dir, NULL);
    CU_ASSERT_EQUAL(rc, CT_ECONFIG); /* on every rank */
    if (g_comm.rank == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "not divisible by the number of ranks"));
    ct_comm_barrier(&g_comm); /* nobody is still writing below dir */
    if (g_comm.rank == 0)
        ct_test_rmtree(dir);
}

static void test_bad_data_dir(void)
{
    static struct ct_config cfg;
    small_config(&cfg);
    snprintf(cfg.data.dir, sizeof cfg.data.dir, "/nonexistent/fmnist");
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    static struct ct_trainer tr;
    int rc = ct_trainer_init(&tr, &cfg, &g_comm, dir, NULL);
    CU_ASSERT_EQUAL(rc, CT_ENOENT); /* on every rank */
    ct_comm_barrier(&g_comm);
    if (g_comm.rank == 0) {
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "/nonexistent/fmnist/train-images-idx3-ubyte.gz"));
        ct_test_rmtree(dir);
    }
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"replicas identical; N ranks == 1 rank after 20 steps", test_replicas_and_single_rank},
        {"global batch not divisible by N", test_indivisible_batch},
        {"bad data directory", test_bad_data_dir},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "train", cases);
}
