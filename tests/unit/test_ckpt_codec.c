/* The plain-C checkpoint API of src/ckpt/codec.c: the RankRecord codec and
 * the manifest accessors.
 *
 * The codec: every field survives a round trip; the bytes are exactly those
 * protobuf-c gives for the same RankRecord (what the trainer wrote before,
 * so checkpoints do not change); truncated, garbage, oversized bytes,
 * records missing a required field, strings longer than their arrays and
 * too many streams are refused with a message naming the source; a record
 * exactly at the size cap is accepted; flipped bits never crash (ASan
 * judges). The accessors: every manifest field of a fresh checkpoint and of
 * the committed golden checkpoint of format version 1 (tests/fixtures/ckpt-v1),
 * a record at the wrong rank's place, a short data-file digest, a checkpoint
 * that is not open.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "core/sha256.h"
#include "ct_test.h"
#include "parallel/comm.h"
#include "proto/checkpoint.pb-c.h"

static char g_root[256];
static struct ct_comm g_self;

/* Does the current error message hold `phrase`? Prints it when not. */
static int msg_has(const char *phrase)
{
    const char *m = ct_error_message();
    if (strstr(m, phrase))
        return 1;
    fprintf(stderr, "\n  message '%s' lacks '%s'\n", m, phrase);
    return 0;
}

/* A record with a distinct, non-default value in every field. */
static void full_record(struct ct_rank_record *r)
{
    memset(r, 0, sizeof *r);
    r->rank = 3;
    r->world_size = 7;
    snprintf(r->host, sizeof r->host, "node-17.cluster");
    snprintf(r->binding, sizeof r->binding, "cpus 8-15; numa 1; blas threads 8; device none");
    r->n_rng = CT_RANK_RECORD_MAX_RNG;
    for (int i = 0; i < r->n_rng; i++) {
        snprintf(r->rng[i].purpose, sizeof r->rng[i].purpose, "purpose-%c", (char)('0' + i));
        r->rng[i].key0 = 0x9e3779b9u * (uint32_t)(i + 1);
        r->rng[i].key1 = 0xffffffffu - (uint32_t)i;
        r->rng[i].counter = UINT64_MAX - (uint64_t)i * 1000;
    }
    r->loader_epoch = -2;
    r->loader_step = INT64_MAX;
    r->loader_first = (uint64_t)1 << 40;
    r->loader_count = UINT64_MAX;
}

static int same_record(const struct ct_rank_record *a, const struct ct_rank_record *b)
{
    int ok = a->rank == b->rank && a->world_size == b->world_size &&
             strcmp(a->host, b->host) == 0 && strcmp(a->binding, b->binding) == 0 &&
             a->n_rng == b->n_rng && a->loader_epoch == b->loader_epoch &&
             a->loader_step == b->loader_step && a->loader_first == b->loader_first &&
             a->loader_count == b->loader_count;
    for (int i = 0; ok && i < a->n_rng; i++)
        ok = strcmp(a->rng[i].purpose, b->rng[i].purpose) == 0 && a->rng[i].key0 == b->rng[i].key0 &&
             a->rng[i].key1 == b->rng[i].key1 && a->rng[i].counter == b->rng[i].counter;
    return ok;
}

/* The same record packed by protobuf-c directly, as state.c did. */
static uint8_t *pack_direct(const struct ct_rank_record *r, const char *host, const char *binding,
                            const char *purpose0, int n_rng, size_t *len)
{
    Ctrain__RankRecord rec = CTRAIN__RANK_RECORD__INIT;
    Ctrain__RngStream s[16], *sp[16];
    for (int i = 0; i < n_rng; i++) {
        ctrain__rng_stream__init(&s[i]);
        int j = i % CT_RANK_RECORD_MAX_RNG;
        s[i].purpose = (char *)(i == 0 && purpose0 ? purpose0 : r->rng[j].purpose);
        s[i].key0 = r->rng[j].key0;
        s[i].key1 = r->rng[j].key1;
        s[i].counter = r->rng[j].counter;
        sp[i] = &s[i];
    }
    rec.rank = r->rank;
    rec.world_size = r->world_size;
    rec.host = (char *)(host ? host : r->host);
    rec.binding = (char *)(binding ? binding : r->binding);
    rec.n_rng = (size_t)n_rng;
    rec.rng = sp;
    rec.loader_epoch = r->loader_epoch;
    rec.loader_step = r->loader_step;
    rec.loader_first = r->loader_first;
    rec.loader_count = r->loader_count;
    *len = ctrain__rank_record__get_packed_size(&rec);
    uint8_t *b = malloc(*len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    ctrain__rank_record__pack(&rec, b);
    return b;
}

/* ---------------------------------------------------------------- codec */

static void test_round_trip(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    uint8_t *b = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    CU_ASSERT_TRUE(n > 0);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "rt", &back), 0);
    CU_ASSERT_TRUE(same_record(&r, &back));
    CU_ASSERT_EQUAL(back.rng[7].counter, UINT64_MAX - 7000);
    CU_ASSERT_EQUAL(back.loader_epoch, -2);
    free(b);
    /* No streams and empty strings are a valid record too. */
    memset(&r, 0, sizeof r);
    r.world_size = 1;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "rt", &back), 0);
    CU_ASSERT_TRUE(same_record(&r, &back));
    CU_ASSERT_EQUAL(back.n_rng, 0);
    free(b);
}

static void test_bytes_unchanged(void)
{
    struct ct_rank_record r;
    full_record(&r);
    r.n_rng = 4;
    uint8_t *ours, *theirs;
    size_t n1, n2;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &ours, &n1), 0);
    theirs = pack_direct(&r, NULL, NULL, NULL, 4, &n2);
    CU_ASSERT_TRUE(n1 == n2 && memcmp(ours, theirs, n1) == 0);
    free(ours);
    free(theirs);
}

static void test_truncated_and_garbage(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    uint8_t *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    /* The last field (loader_count) is required, so every proper prefix lacks
     * it or cuts a field: none may parse. */
    int all = 1;
    for (size_t len = 0; len < n; len++) {
        int rc = ct_rank_record_unpack(b, len, "ckpt-9/data.bin: rank record 3", &back);
        all &= rc == CT_EFORMAT && msg_has("ckpt-9/data.bin: rank record 3: ");
        all &= back.n_rng == 0 && back.host[0] == '\0'; /* nothing half-read */
    }
    CU_ASSERT_TRUE(all);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, 0, "empty-src", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("empty-src: empty"));
    CU_ASSERT_EQUAL(ct_rank_record_unpack(NULL, 0, NULL, &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("rank record: empty"));
    free(b);

    static const uint8_t ff[64] = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    };
    CU_ASSERT_EQUAL(ct_rank_record_unpack(ff, sizeof ff, "garbage-ff", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("garbage-ff: not a valid RankRecord (64 bytes"));
    const char *text = "this is not a protobuf message at all";
    CU_ASSERT_EQUAL(ct_rank_record_unpack((const uint8_t *)text, strlen(text), "garbage-text", &back),
                    CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("garbage-text: "));
    /* Only rank (1) and world_size (2): the other required fields missing. */
    static const uint8_t partial[] = {0x08, 0x01, 0x10, 0x02};
    CU_ASSERT_EQUAL(ct_rank_record_unpack(partial, sizeof partial, "missing", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("missing: not a valid RankRecord"));
}

/* Flip each bit of a valid record: any verdict, but never a crash, and an
 * accepted record always satisfies the struct's invariants. */
static void test_flips_no_crash(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    uint8_t *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    int refused = 0, sane = 1;
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            if (ct_rank_record_unpack(b, n, "flip", &back) == 0)
                sane &= back.n_rng >= 0 && back.n_rng <= CT_RANK_RECORD_MAX_RNG &&
                        memchr(back.host, 0, sizeof back.host) && memchr(back.binding, 0, sizeof back.binding);
            else
                refused++;
            b[i] ^= (uint8_t)(1u << bit);
        }
    CU_ASSERT_TRUE(sane);
    CU_ASSERT_TRUE(refused > 0);
    free(b);
}

static void test_size_cap(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    uint8_t *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    /* The valid record followed by an unknown length-delimited field 100
     * (tag 0xa2 0x06, a 3-byte length) that fills it to exactly the cap:
     * accepted (unknown fields are how the schema grows); one byte more is
     * refused before parsing. */
    size_t cap = CT_CKPT_MAX_RECORD_BYTES;
    uint8_t *big = calloc(cap + 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    memcpy(big, b, n);
    size_t payload = cap - n - 2 - 3;
    CU_ASSERT_FATAL(payload >= (1u << 14) && payload < (1u << 21));
    big[n] = 0xa2;
    big[n + 1] = 0x06;
    big[n + 2] = (uint8_t)(0x80 | (payload & 0x7f));
    big[n + 3] = (uint8_t)(0x80 | ((payload >> 7) & 0x7f));
    big[n + 4] = (uint8_t)(payload >> 14);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(big, cap, "at-cap", &back), 0);
    CU_ASSERT_TRUE(same_record(&r, &back));
    CU_ASSERT_EQUAL(ct_rank_record_unpack(big, cap + 1, "over-cap", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("over-cap: 1048577 bytes, larger than the 1048576"));
    free(big);
    free(b);
}

static void test_string_limits(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    char host[300], binding[900], purpose[32];
    /* At the limits: 255, 799 and 15 characters fit, through both paths. */
    memset(r.host, 'h', sizeof r.host - 1);
    r.host[sizeof r.host - 1] = '\0';
    memset(r.binding, 'b', sizeof r.binding - 1);
    r.binding[sizeof r.binding - 1] = '\0';
    memset(r.rng[0].purpose, 'p', sizeof r.rng[0].purpose - 1);
    r.rng[0].purpose[sizeof r.rng[0].purpose - 1] = '\0';
    uint8_t *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(ct_rank_record_pack(&r, &b, &n), 0);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "limits", &back), 0);
    CU_ASSERT_TRUE(same_record(&r, &back));
    CU_ASSERT_EQUAL(strlen(back.host), 255);
    CU_ASSERT_EQUAL(strlen(back.binding), 799);
    CU_ASSERT_EQUAL(strlen(back.rng[0].purpose), 15);
    free(b);

    /* One over, written by another writer: refused, naming the field. */
    memset(host, 'h', 256);
    host[256] = '\0';
    b = pack_direct(&r, host, NULL, NULL, 8, &n);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "long-host", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("long-host: host of 256 bytes, at most 255 allowed"));
    CU_ASSERT_EQUAL(back.rank, 0);
    free(b);
    memset(binding, 'b', 800);
    binding[800] = '\0';
    b = pack_direct(&r, NULL, binding, NULL, 8, &n);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "long-binding", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("long-binding: binding of 800 bytes, at most 799 allowed"));
    free(b);
    memset(purpose, 'p', 16);
    purpose[16] = '\0';
    b = pack_direct(&r, NULL, NULL, purpose, 8, &n);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "long-purpose", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("long-purpose: stream 0's purpose of 16 bytes, at most 15 allowed"));
    free(b);

    /* Our own struct with an unterminated array is the caller's bug. */
    memset(r.host, 'h', sizeof r.host);
    CU_ASSERT_EQUAL(ct_rank_record_pack(&r, &b, &n), CT_EINVAL);
    CU_ASSERT_PTR_NULL(b);
    full_record(&r);
    memset(r.rng[5].purpose, 'p', sizeof r.rng[5].purpose);
    CU_ASSERT_EQUAL(ct_rank_record_pack(&r, &b, &n), CT_EINVAL);
    CU_ASSERT_TRUE(msg_has("stream 5's purpose not terminated"));
}

static void test_stream_count(void)
{
    struct ct_rank_record r, back;
    full_record(&r);
    uint8_t *b;
    size_t n;
    b = pack_direct(&r, NULL, NULL, NULL, CT_RANK_RECORD_MAX_RNG + 1, &n);
    CU_ASSERT_EQUAL(ct_rank_record_unpack(b, n, "many", &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("many: 9 random streams, at most 8 allowed"));
    free(b);
    r.n_rng = CT_RANK_RECORD_MAX_RNG + 1;
    CU_ASSERT_EQUAL(ct_rank_record_pack(&r, &b, &n), CT_EINVAL);
    r.n_rng = -1;
    CU_ASSERT_EQUAL(ct_rank_record_pack(&r, &b, &n), CT_EINVAL);
    CU_ASSERT_TRUE(msg_has("-1 random streams"));
}

/* ---------------------------------------------------------------- accessors */

static const float g_w[4] = {1, 2, 3, 4};

/* A checkpoint of one rank with every manifest field set; `rec` is its
 * record. Returns the checkpoint's path in `path`. */
static int write_ckpt(const char *run, const struct ct_rank_record *rec, int with_parent,
                      char *path, size_t path_len)
{
    struct ct_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "params/w");
    t.dtype = CT_DTYPE_F32;
    t.ndim = 1;
    t.shape[0] = 4;
    t.data = g_w;
    uint8_t *rb;
    size_t rn;
    int rc = ct_rank_record_pack(rec, &rb, &rn);
    if (rc < 0)
        return rc;
    uint8_t parent[CT_SHA256_LEN];
    ct_sha256_buf("the parent", 10, parent);
    struct ct_ckpt_kv libs[] = {{"mpi", "Open MPI v4.1.4"}, {"zlib", "1.2.13"}, {"gemm", "openblas"}};
    /* A format recorded for one, none (as before stop 19) for the other. */
    struct ct_ckpt_data_file df[2] = {{"/data/train.gz", 1234, {0}, "idx"}, {"/data/test.gz", 99, {0}, NULL}};
    ct_sha256_buf("train", 5, df[0].sha256);
    ct_sha256_buf("test", 4, df[1].sha256);
    const char *changes[] = {"train.max_steps: 10 -> 20", "log.every: 1 -> 5"};
    struct ct_ckpt_kv sc[] = {{"train.step", "17"}};
    struct ct_ckpt_content c = {
        .step = 17, .epoch = 2, .epoch_step = 5, .config_text = "[model]\nkind = mlp\n",
        .code_version = "0.1.0 (test)", .libraries = libs, .n_libraries = 3, .data_files = df,
        .n_data_files = 2, .parent_sha256 = with_parent ? parent : NULL,
        .placement = with_parent ? "rank 0: cpus 0-3" : NULL, .changes = changes,
        .n_changes = 2, .scalars = sc, .n_scalars = 1, .tensors = &t, .n_tensors = 1,
        .record = rb, .record_len = rn,
    };
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    rc = ct_ckpt_write(&g_self, &wp, &c, d, path, path_len);
    free(rb);
    return rc;
}

static void test_accessors(void)
{
    char run[400], path[1200];
    snprintf(run, sizeof run, "%s/run-acc", g_root);
    struct ct_rank_record r, back;
    full_record(&r);
    r.rank = 0;
    r.world_size = 1;
    int rc = write_ckpt(run, &r, 1, path, sizeof path);
    if (rc < 0)
        fprintf(stderr, "\n  write: %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, path), 0);
    CU_ASSERT_STRING_EQUAL(ct_ckpt_config_text(&ck), "[model]\nkind = mlp\n");
    CU_ASSERT_STRING_EQUAL(ct_ckpt_code_version(&ck), "0.1.0 (test)");
    CU_ASSERT_STRING_EQUAL(ct_ckpt_placement(&ck), "rank 0: cpus 0-3");
    CU_ASSERT_EQUAL(ct_ckpt_step(&ck), 17);
    CU_ASSERT_EQUAL(ct_ckpt_epoch(&ck), 2);
    CU_ASSERT_EQUAL(ct_ckpt_epoch_step(&ck), 5);
    CU_ASSERT_TRUE(ct_ckpt_created_unix(&ck) > 1600000000);
    CU_ASSERT_EQUAL(ct_ckpt_world_size(&ck), 1);
    uint8_t d[CT_SHA256_LEN], want[CT_SHA256_LEN];
    ct_sha256_buf("the parent", 10, want);
    CU_ASSERT_EQUAL(ct_ckpt_parent_digest(&ck, d), 0);
    CU_ASSERT_EQUAL(memcmp(d, want, sizeof d), 0);

    CU_ASSERT_EQUAL(ct_ckpt_n_data_files(&ck), 2);
    struct ct_ckpt_data_file f;
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, 1, &f), 0);
    ct_sha256_buf("test", 4, want);
    CU_ASSERT_STRING_EQUAL(f.path, "/data/test.gz");
    CU_ASSERT_EQUAL(f.size, 99);
    CU_ASSERT_PTR_NULL(f.format);
    CU_ASSERT_EQUAL(memcmp(f.sha256, want, sizeof want), 0);
    CU_ASSERT_EQUAL(ct_ckpt_find_data_file(&ck, "/data/train.gz", &f), 0);
    ct_sha256_buf("train", 5, want);
    CU_ASSERT_EQUAL(f.size, 1234);
    CU_ASSERT_STRING_EQUAL(f.format, "idx");
    CU_ASSERT_EQUAL(memcmp(f.sha256, want, sizeof want), 0);
    CU_ASSERT_EQUAL(ct_ckpt_find_data_file(&ck, "/data/other.gz", &f), CT_ENOENT);
    CU_ASSERT_TRUE(msg_has("no data file /data/other.gz recorded"));
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, 2, &f), CT_ENOENT);
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, -1, &f), CT_ENOENT);

    CU_ASSERT_EQUAL(ct_ckpt_n_libraries(&ck), 3);
    struct ct_ckpt_kv kv;
    CU_ASSERT_EQUAL(ct_ckpt_library(&ck, 2, &kv), 0);
    CU_ASSERT_STRING_EQUAL(kv.key, "gemm");
    CU_ASSERT_STRING_EQUAL(kv.value, "openblas");
    CU_ASSERT_EQUAL(ct_ckpt_library(&ck, 3, &kv), CT_ENOENT);
    CU_ASSERT_EQUAL(ct_ckpt_n_changes(&ck), 2);
    CU_ASSERT_STRING_EQUAL(ct_ckpt_change(&ck, 1), "log.every: 1 -> 5");
    CU_ASSERT_PTR_NULL(ct_ckpt_change(&ck, 2));

    CU_ASSERT_EQUAL(ct_ckpt_read_rank_record(&ck, 0, &back), 0);
    CU_ASSERT_TRUE(same_record(&r, &back));
    CU_ASSERT_EQUAL(ct_ckpt_read_rank_record(&ck, 1, &back), CT_ENOENT);
    CU_ASSERT_TRUE(msg_has("no rank record for rank 1 (written by 1 rank)"));
    ct_ckpt_close(&ck);

    /* Not open: nothing to read, nothing crashes. */
    CU_ASSERT_PTR_NULL(ct_ckpt_config_text(&ck));
    CU_ASSERT_PTR_NULL(ct_ckpt_placement(&ck));
    CU_ASSERT_EQUAL(ct_ckpt_step(&ck), 0);
    CU_ASSERT_EQUAL(ct_ckpt_world_size(&ck), 0);
    CU_ASSERT_EQUAL(ct_ckpt_n_data_files(&ck), 0);
    CU_ASSERT_EQUAL(ct_ckpt_parent_digest(&ck, d), CT_ESTATE);
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, 0, &f), CT_ESTATE);
    CU_ASSERT_EQUAL(ct_ckpt_read_rank_record(&ck, 0, &back), CT_ESTATE);
}

static void test_first_of_chain(void)
{
    char run[400], path[1200];
    snprintf(run, sizeof run, "%s/run-first", g_root);
    struct ct_rank_record r;
    full_record(&r);
    r.rank = 0;
    r.world_size = 1;
    CU_ASSERT_EQUAL_FATAL(write_ckpt(run, &r, 0, path, sizeof path), 0);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, path), 0);
    uint8_t d[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_ckpt_parent_digest(&ck, d), CT_ENOENT);
    CU_ASSERT_TRUE(msg_has("no parent"));
    CU_ASSERT_STRING_EQUAL(ct_ckpt_placement(&ck), "");
    ct_ckpt_close(&ck);
}

static void test_record_of_another_rank(void)
{
    char run[400], path[1200];
    snprintf(run, sizeof run, "%s/run-other", g_root);
    struct ct_rank_record r, back;
    full_record(&r);
    r.rank = 5; /* written at rank 0's place */
    CU_ASSERT_EQUAL_FATAL(write_ckpt(run, &r, 1, path, sizeof path), 0);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, path), 0);
    CU_ASSERT_EQUAL(ct_ckpt_read_rank_record(&ck, 0, &back), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("/data.bin: rank record 0 says it is rank 5"));
    CU_ASSERT_EQUAL(back.rank, 0);
    CU_ASSERT_EQUAL(back.n_rng, 0);
    ct_ckpt_close(&ck);
}

/* A manifest whose first data file has a 31-byte digest (consistently
 * re-signed): the accessor refuses it instead of reading past its end. */
static void test_short_data_digest(void)
{
    char run[400], path[1200], p[1300];
    snprintf(run, sizeof run, "%s/run-short", g_root);
    struct ct_rank_record r;
    full_record(&r);
    r.rank = 0;
    r.world_size = 1;
    CU_ASSERT_EQUAL_FATAL(write_ckpt(run, &r, 1, path, sizeof path), 0);
    snprintf(p, sizeof p, "%s/manifest.pb", path);
    FILE *fp = fopen(p, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    Ctrain__Manifest *m = ctrain__manifest__unpack(NULL, n, buf);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    m->data_files[0]->sha256.len = 31;
    size_t len = ctrain__manifest__get_packed_size(m);
    uint8_t *out = malloc(len);
    ctrain__manifest__pack(m, out);
    ctrain__manifest__free_unpacked(m, NULL);
    ct_test_write_file(p, out, len);
    uint8_t d[CT_SHA256_LEN];
    char hex[CT_SHA256_HEX_LEN], line[128];
    ct_sha256_buf(out, len, d);
    ct_sha256_hex(d, hex);
    snprintf(line, sizeof line, "%s  manifest.pb\n", hex);
    snprintf(p, sizeof p, "%s/manifest.sha256", path);
    ct_test_write_file(p, line, strlen(line));
    free(out);

    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, path), 0);
    struct ct_ckpt_data_file f;
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, 0, &f), CT_EFORMAT);
    CU_ASSERT_TRUE(msg_has("manifest.pb: data file /data/train.gz: digest of 31 bytes, expected 32"));
    CU_ASSERT_EQUAL(ct_ckpt_find_data_file(&ck, "/data/train.gz", &f), CT_EFORMAT);
    CU_ASSERT_EQUAL(ct_ckpt_data_file(&ck, 1, &f), 0);
    ct_ckpt_close(&ck);
}

/* The committed checkpoint of format version 1 reads through the plain API
 * with the values it was made with (see test_ckpt_read.c, make_golden). */
static void test_golden_v1(void)
{
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&ck, CT_FIXTURE_DIR "/ckpt-v1"), 0);
    CU_ASSERT_STRING_EQUAL(ct_ckpt_config_text(&ck), "[model]\nkind = mlp\nhidden = 8\n");
    CU_ASSERT_STRING_EQUAL(ct_ckpt_code_version(&ck), "golden-v1");
    CU_ASSERT_STRING_EQUAL(ct_ckpt_placement(&ck), "rank 0: cores 0-3");
    CU_ASSERT_EQUAL(ct_ckpt_step(&ck), 42);
    CU_ASSERT_EQUAL(ct_ckpt_epoch(&ck), 3);
    CU_ASSERT_EQUAL(ct_ckpt_epoch_step(&ck), 5);
    CU_ASSERT_EQUAL(ct_ckpt_created_unix(&ck), 1700000000);
    CU_ASSERT_EQUAL(ct_ckpt_world_size(&ck), 1);
    uint8_t d[CT_SHA256_LEN], want[CT_SHA256_LEN];
    ct_sha256_buf("parent", 6, want);
    CU_ASSERT_EQUAL(ct_ckpt_parent_digest(&ck, d), 0);
    CU_ASSERT_EQUAL(memcmp(d, want, sizeof d), 0);
    struct ct_ckpt_data_file f;
    CU_ASSERT_EQUAL(ct_ckpt_n_data_files(&ck), 1);
    CU_ASSERT_EQUAL(ct_ckpt_find_data_file(&ck, "train-images-idx3-ubyte.gz", &f), 0);
    ct_sha256_buf("train", 5, want);
    CU_ASSERT_EQUAL(f.size, 26421880);
    CU_ASSERT_EQUAL(memcmp(f.sha256, want, sizeof want), 0);
    struct ct_ckpt_kv kv;
    CU_ASSERT_EQUAL(ct_ckpt_n_libraries(&ck), 2);
    CU_ASSERT_EQUAL(ct_ckpt_library(&ck, 1, &kv), 0);
    CU_ASSERT_STRING_EQUAL(kv.key, "protobuf-c");
    CU_ASSERT_STRING_EQUAL(kv.value, "1.4.1");
    CU_ASSERT_EQUAL(ct_ckpt_n_changes(&ck), 1);
    CU_ASSERT_STRING_EQUAL(ct_ckpt_change(&ck, 0), "train.max_steps: 40 -> 50");
    struct ct_rank_record r;
    CU_ASSERT_EQUAL(ct_ckpt_read_rank_record(&ck, 0, &r), 0);
    CU_ASSERT_EQUAL(r.rank, 0);
    CU_ASSERT_EQUAL(r.world_size, 1);
    CU_ASSERT_STRING_EQUAL(r.host, "golden");
    CU_ASSERT_STRING_EQUAL(r.binding, "cores 0-3");
    CU_ASSERT_EQUAL(r.n_rng, 1);
    CU_ASSERT_STRING_EQUAL(r.rng[0].purpose, "dropout");
    CU_ASSERT_EQUAL(r.rng[0].key0, 1);
    CU_ASSERT_EQUAL(r.rng[0].key1, 2);
    CU_ASSERT_EQUAL(r.rng[0].counter, 99);
    CU_ASSERT_EQUAL(r.loader_epoch, 3);
    CU_ASSERT_EQUAL(r.loader_step, 5);
    CU_ASSERT_EQUAL(r.loader_first, 0);
    CU_ASSERT_EQUAL(r.loader_count, 32);
    ct_ckpt_close(&ck);
}

int main(void)
{
    ct_comm_init_self(&g_self);
    snprintf(g_root, sizeof g_root, "%s", ct_test_tmpdir());
    static const struct ct_test_case cases[] = {
        {"round trip of every field", test_round_trip},
        {"bytes identical to protobuf-c's", test_bytes_unchanged},
        {"truncated, garbage, missing fields refused", test_truncated_and_garbage},
        {"flipped bits never crash", test_flips_no_crash},
        {"size cap: at the cap accepted, over refused", test_size_cap},
        {"strings at and over the limits", test_string_limits},
        {"too many random streams", test_stream_count},
        {"manifest accessors on a fresh checkpoint", test_accessors},
        {"first checkpoint of a chain", test_first_of_chain},
        {"record at another rank's place", test_record_of_another_rank},
        {"short data-file digest", test_short_data_digest},
        {"golden checkpoint of format version 1", test_golden_v1},
        {NULL, NULL},
    };
    int rc = ct_test_run("ckpt codec", cases);
    ct_test_rmtree(g_root);
    ct_comm_free(&g_self);
    return rc;
}
