/* Unit tests for audit verify's lineage checks (src/report/audit.c) on
 * checkpoints written here through the real writer (in-process
 * communicator) with real resolved configs: a config change in a runtime key
 * passes and is listed; one in a key that changes the experiment (which the
 * trainer itself refuses, so only a forger can make it) is a break naming
 * the checkpoint and the key; a changed data digest without a recorded
 * change is a break. The e2e test covers whole runs. */
#include "ckpt/ckpt.h"
#include "config/config.h"
#include "core/error.h"
#include "ct_test.h"
#include "report/audit.h"
#include "ckpt/chain.h"

#include <stdlib.h>

static struct ct_comm g_self;
static char g_root[256];

/* The resolved text of configs/fmnist-mlp.ini with one override. */
static char *config_text(const char *set)
{
    static struct ct_config cfg;
    const char *sets[1] = {set};
    if (ct_config_load(&cfg, CT_FIXTURE_DIR "/../../configs/fmnist-mlp.ini", sets, set ? 1 : 0) < 0) {
        fprintf(stderr, "config: %s\n", ct_error_message());
        return NULL;
    }
    char *text = NULL;
    return ct_config_text(&cfg, &text) == 0 ? text : NULL;
}

/* One checkpoint of `step` with that config and data digest, committed and
 * chained like the trainer does. */
static int write_ckpt(const char *run, int64_t step, const char *cfg, uint8_t data_byte,
                      const uint8_t *parent, uint8_t digest[CT_SHA256_LEN])
{
    float w[6] = {1, 2, 3, 4, 5, (float)step};
    struct ct_ckpt_tensor t = {.name = "params/w", .dtype = CT_DTYPE_F32, .ndim = 1, .shape = {6}, .data = w};
    struct ct_rank_record r = {.rank = 0, .world_size = 1, .loader_epoch = 0, .loader_step = step};
    snprintf(r.host, sizeof r.host, "unit");
    uint8_t *rec;
    size_t rec_len;
    if (ct_rank_record_pack(&r, &rec, &rec_len) < 0)
        return -1;
    struct ct_ckpt_data_file df = {"/data/train.gz", 10, {data_byte}, "idx"};
    struct ct_ckpt_kv libs[1] = {{"gemm", "openblas"}};
    struct ct_ckpt_content c = {
        .step = step, .epoch = 0, .epoch_step = step, .config_text = cfg, .code_version = "test",
        .libraries = libs, .n_libraries = 1, .data_files = &df, .n_data_files = 1,
        .parent_sha256 = parent, .tensors = &t, .n_tensors = 1, .record = rec, .record_len = rec_len,
    };
    struct ct_ckpt_write_params wp = {.run_dir = run};
    char path[1200];
    int rc = ct_ckpt_write(&g_self, &wp, &c, digest, path, sizeof path);
    free(rec);
    return rc < 0 ? rc : ct__chain_commit(run, path);
}

/* verify's report and code. */
static int verify(const char *run, char **text)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    int rc = ct_audit_verify(run, f);
    fclose(f);
    return rc;
}

/* ckpt-1 with config a, ckpt-2 with config b (and data byte d2). */
static int two_ckpts(const char *name, const char *set_b, uint8_t d2, char *run, size_t cap)
{
    snprintf(run, cap, "%s/%s", g_root, name);
    char *a = config_text(NULL), *b = config_text(set_b);
    uint8_t d[CT_SHA256_LEN];
    int rc = a && b ? write_ckpt(run, 1, a, 7, NULL, d) : -1;
    if (rc == 0)
        rc = write_ckpt(run, 2, b, d2, d, d);
    free(a);
    free(b);
    return rc;
}

static void test_runtime_change_passes(void)
{
    char run[512], *text = NULL;
    CU_ASSERT_EQUAL_FATAL(two_ckpts("runtime", "train.max_steps=99", 7, run, sizeof run), 0);
    CU_ASSERT_EQUAL(verify(run, &text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "verdict: OK (2 checkpoints, 0 absent)"));
    free(text);
}

static void test_state_change_breaks(void)
{
    char run[512], *text = NULL;
    CU_ASSERT_EQUAL_FATAL(two_ckpts("state", "optim.lr=0.5", 7, run, sizeof run), 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(verify(run, &text), CT_EMISMATCH);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "BROKEN ckpt-2 (step 2): config changed outside runtime keys since ckpt-1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "optim.lr"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "1 break; first: ckpt-2: config changed"));
    free(text);
}

static void test_data_change_breaks(void)
{
    char run[512], *text = NULL;
    CU_ASSERT_EQUAL_FATAL(two_ckpts("data", NULL, 8, run, sizeof run), 0);
    CU_ASSERT_EQUAL(verify(run, &text), CT_EMISMATCH);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "BROKEN ckpt-2 (step 2): data file /data/train.gz has another SHA-256"));
    free(text);
}

int main(void)
{
    ct_comm_init_self(&g_self);
    snprintf(g_root, sizeof g_root, "%s", ct_test_tmpdir());
    static const struct ct_test_case cases[] = {
        {"runtime key change passes", test_runtime_change_passes},
        {"state key change breaks", test_state_change_breaks},
        {"data change breaks", test_data_change_breaks},
        {NULL, NULL},
    };
    int rc = ct_test_run("audit", cases);
    ct_test_rmtree(g_root);
    return rc;
}
