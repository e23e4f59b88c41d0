/* Unit tests for audit verify's lineage checks (src/report/audit.c) on
 * checkpoints written here through the real writer (in-process
 * communicator) with real resolved configs: a config change in a runtime key
 * passes and is listed; one in a key that changes the experiment (which the
 * trainer itself refuses, so only a forger can make it) is a break naming
 * the checkpoint and the key; a changed data digest without a recorded
 * change is a break; two lineages mixed in one chain.jsonl (two jobs in one
 * run directory) are a break naming the step and both lines. The e2e test
 * covers whole runs. */
#include "ckpt/ckpt.h"
#include "config/config.h"
#include "core/error.h"
#include "ct_test.h"
#include "report/audit.h"
#include "ckpt/chain.h"

#include <stdlib.h>
#include <unistd.h>

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

/* One checkpoint of `step` with that config and data digest, committed;
 * its chain line appended like the trainer does when `chain`. */
static int write_ckpt_chain(const char *run, int64_t step, const char *cfg, uint8_t data_byte,
                            const uint8_t *parent, uint8_t digest[CT_SHA256_LEN], int chain)
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
    return rc < 0 || !chain ? rc : ct__chain_commit(run, path);
}

static int write_ckpt(const char *run, int64_t step, const char *cfg, uint8_t data_byte,
                      const uint8_t *parent, uint8_t digest[CT_SHA256_LEN])
{
    return write_ckpt_chain(run, step, cfg, data_byte, parent, digest, 1);
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

/* chain.jsonl rewritten as lines v[order[0]], v[order[1]], ... (a forged
 * line where order is -1: step `fstep`, digest cd..., parent of v[fparent]). */
static int rewrite_chain(const char *run, const int *order, int n, int64_t fstep, int fparent)
{
    char path[600];
    snprintf(path, sizeof path, "%s/chain.jsonl", run);
    struct ct_chain_entry *v = NULL;
    size_t nv = 0;
    int rc = ct_chain_read(path, &v, &nv, NULL);
    if (rc == 0 && unlink(path) != 0)
        rc = -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        struct ct_chain_entry e = order[i] >= 0 ? v[order[i]] : v[fparent];
        if (order[i] < 0) {
            e.step = fstep;
            snprintf(e.ckpt, sizeof e.ckpt, "ckpt-%d", (int)fstep);
            memset(e.digest, 'c', 64);
            snprintf(e.parent, sizeof e.parent, "%s", v[fparent].digest);
        }
        rc = ct_chain_append(path, &e);
    }
    free(v);
    return rc;
}

/* Two jobs in one run directory: a second ckpt-2 (another parent's child
 * would do as well) and then ckpt-3 continuing the first: refused, naming
 * the step and both lines. A resume from ckpt-1 that wrote ckpt-2 again and
 * went on from there is one lineage: it passes (the first ckpt-2 superseded). */
static void test_two_lineages_break(void)
{
    char run[512], *text = NULL;
    CU_ASSERT_EQUAL_FATAL(two_ckpts("lineages", NULL, 7, run, sizeof run), 0);
    uint8_t d[CT_SHA256_LEN];
    char *cfg = config_text(NULL);
    char latest[600];
    snprintf(latest, sizeof latest, "%s/ckpt-2", run);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, latest), 0);
    memcpy(d, ck.digest, sizeof d);
    ct_ckpt_close(&ck);
    CU_ASSERT_EQUAL_FATAL(write_ckpt(run, 3, cfg, 7, d, d), 0);
    free(cfg);
    const int interleaved[] = {0, 1, -1, 2}; /* ckpt-1, ckpt-2, forged ckpt-2, ckpt-3 (child of the first) */
    CU_ASSERT_EQUAL_FATAL(rewrite_chain(run, interleaved, 4, 2, 0), 0);
    CU_ASSERT_EQUAL(verify(run, &text), CT_EMISMATCH);
    if (!strstr(text, "two different checkpoints of step 2 in chain.jsonl: line 2 (digest "))
        printf("\n%s\n", text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "two different checkpoints of step 2 in chain.jsonl: line 2 (digest "));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "and line 3 (digest cccccccccccccccc..."));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "line 4 continues line 2's lineage after line 3 replaced it"));
    free(text);
    text = NULL;
    /* The forged line last: a branch the chain moved to, not a mix. */
    const int branched[] = {0, 1, 2, -1};
    CU_ASSERT_EQUAL_FATAL(rewrite_chain(run, branched, 4, 2, 0), 0);
    verify(run, &text);
    CU_ASSERT_PTR_NULL(strstr(text, "two different checkpoints"));
    free(text);
}

/* A stop between a checkpoint's rename and `latest` (ckpt-4 published, not
 * committed) after a stop between a commit and its chain line (ckpt-3
 * committed, not chained): verify calls ckpt-3 a break and says ckpt-4 is
 * not part of the run; the repair appends ckpt-3 only and removes ckpt-4;
 * verify then passes. */
static void test_repair_stops_at_latest(void)
{
    char run[512], *text = NULL;
    CU_ASSERT_EQUAL_FATAL(two_ckpts("uncommitted", NULL, 7, run, sizeof run), 0);
    char *cfg = config_text(NULL);
    uint8_t d[CT_SHA256_LEN];
    char path[600];
    snprintf(path, sizeof path, "%s/ckpt-2", run);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, path), 0);
    memcpy(d, ck.digest, sizeof d);
    ct_ckpt_close(&ck);
    for (int64_t step = 3; step <= 4; step++)
        CU_ASSERT_EQUAL_FATAL(write_ckpt_chain(run, step, cfg, 7, d, d, 0), 0);
    free(cfg);
    char latest[600];
    snprintf(latest, sizeof latest, "%s/latest", run);
    FILE *f = fopen(latest, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("ckpt-3\n", f);
    fclose(f);
    int64_t committed = 0;
    CU_ASSERT_EQUAL(ct__chain_committed_step(run, &committed), 0);
    CU_ASSERT_EQUAL(committed, 3);
    CU_ASSERT_EQUAL(verify(run, &text), CT_EMISMATCH);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "BROKEN ckpt-3: committed but not in chain.jsonl"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "note ckpt-4: published but never committed (newer than the "
                                        "committed checkpoint, step 3"));
    CU_ASSERT_PTR_NULL(strstr(text, "BROKEN ckpt-4"));
    free(text);
    text = NULL;
    ct_error_clear();
    int appended = -1;
    if (ct__chain_repair(run, &appended) < 0)
        printf("\n%s\n", ct_error_message());
    CU_ASSERT_EQUAL(appended, 1);
    snprintf(path, sizeof path, "%s/ckpt-4", run);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    appended = -1;
    CU_ASSERT_EQUAL(ct__chain_repair(run, &appended), 0); /* whole: nothing more */
    CU_ASSERT_EQUAL(appended, 0);
    CU_ASSERT_EQUAL(verify(run, &text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "verdict: OK (3 checkpoints, 0 absent)"));
    CU_ASSERT_PTR_NULL(strstr(text, "ckpt-4"));
    free(text);
}

/* A resume from an earlier checkpoint in place (a branch): the older
 * lineage's newer checkpoints are named by chain lines and stay. */
static void test_repair_keeps_branched(void)
{
    char run[512];
    CU_ASSERT_EQUAL_FATAL(two_ckpts("branch", NULL, 7, run, sizeof run), 0);
    char latest[600], path[600];
    snprintf(latest, sizeof latest, "%s/latest", run);
    FILE *f = fopen(latest, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("ckpt-1\n", f);
    fclose(f);
    int appended = -1;
    CU_ASSERT_EQUAL(ct__chain_repair(run, &appended), 0);
    CU_ASSERT_EQUAL(appended, 0);
    snprintf(path, sizeof path, "%s/ckpt-2/manifest.pb", run);
    CU_ASSERT_EQUAL(access(path, F_OK), 0);
}

int main(void)
{
    ct_comm_init_self(&g_self);
    snprintf(g_root, sizeof g_root, "%s", ct_test_tmpdir());
    static const struct ct_test_case cases[] = {
        {"runtime key change passes", test_runtime_change_passes},
        {"state key change breaks", test_state_change_breaks},
        {"data change breaks", test_data_change_breaks},
        {"two lineages in one chain break", test_two_lineages_break},
        {"chain repair stops at the committed checkpoint", test_repair_stops_at_latest},
        {"chain repair keeps an older lineage's checkpoints", test_repair_keeps_branched},
        {NULL, NULL},
    };
    int rc = ct_test_run("audit", cases);
    ct_test_rmtree(g_root);
    return rc;
}
