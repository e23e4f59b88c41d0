/* Checkpoint reading against damaged files, with the single-rank "self"
 * communicator (POSIX I/O, no MPI ranks): truncated data and manifests,
 * flipped bits in the manifest, a tensor and a rank record, a wrong format
 * version, entries that lie about bounds, alignment, dtype or size, a
 * manifest over the size cap, a damaged or dangling `latest`. Each must give
 * its own error naming the file and section, and never crash (run it under
 * ASan/UBSan). Also: the committed golden checkpoint of format version 1
 * (tests/fixtures/ckpt-v1) still loads with the values it was made with.
 *
 * The golden checkpoint is made by this program:
 *     build/tests/test_ckpt_read --make-golden tests/fixtures/ckpt-v1
 * (see tests/fixtures/ckpt-v1/README.md); regenerate it only together with
 * a new format version, never to make this test pass.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "ct_test.h"
#include "parallel/comm.h"
#include "ckpt/inspect.h"
#include "proto/checkpoint.pb-c.h"

static char g_root[256];      /* this run's scratch directory */
static char g_base[512];      /* a good checkpoint: <root>/run/ckpt-1 */
static struct ct_comm g_self;

/* ---------------------------------------------------------------- files */

static void copy_file(const char *from, const char *to)
{
    size_t n;
    uint8_t *b = ct_test_read_file(from, &n);
    if (!b || ct_test_write_file(to, b, n) != 0) {
        fprintf(stderr, "copy %s -> %s failed\n", from, to);
        abort();
    }
    free(b);
}

/* A fresh copy of the good checkpoint in <root>/<name>; returns its path. */
static const char *fresh_copy(const char *name)
{
    static char dir[400];
    static const char *const files[] = {"manifest.pb", "manifest.sha256", "data.bin"};
    char a[1024], b[1024];
    snprintf(dir, sizeof dir, "%s/%s", g_root, name);
    mkdir(dir, 0755); /* or reuse it: every file is overwritten below */
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", g_base, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        copy_file(a, b);
    }
    return dir;
}

static void truncate_to(const char *dir, const char *file, off_t len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    if (truncate(p, len) != 0)
        abort();
}

static void flip_bit(const char *dir, const char *file, size_t off, int bit)
{
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    uint8_t *b = ct_test_read_file(p, &n);
    if (!b || off >= n)
        abort();
    b[off] ^= (uint8_t)(1u << bit);
    ct_test_write_file(p, b, n);
    free(b);
}

/* Write manifest.pb and a matching manifest.sha256 (a writer that is
 * consistent but says something wrong). */
static void write_manifest(const char *dir, const uint8_t *bytes, size_t len)
{
    char p[1024], line[128], hex[CT_SHA256_HEX_LEN];
    uint8_t d[CT_SHA256_LEN];
    snprintf(p, sizeof p, "%s/manifest.pb", dir);
    ct_test_write_file(p, bytes, len);
    ct_sha256_buf(bytes, len, d);
    ct_sha256_hex(d, hex);
    snprintf(line, sizeof line, "%s  manifest.pb\n", hex);
    snprintf(p, sizeof p, "%s/manifest.sha256", dir);
    ct_test_write_file(p, line, strlen(line));
}

/* Unpack dir's manifest, let `fn` change it, pack it back consistently. */
static void mutate(const char *dir, void (*fn)(Ctrain__Manifest *m))
{
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/manifest.pb", dir);
    uint8_t *b = ct_test_read_file(p, &n);
    Ctrain__Manifest *m = b ? ctrain__manifest__unpack(NULL, n, b) : NULL;
    if (!m)
        abort();
    fn(m);
    size_t len = ctrain__manifest__get_packed_size(m);
    uint8_t *out = malloc(len);
    ctrain__manifest__pack(m, out);
    write_manifest(dir, out, len);
    free(out);
    free(b);
    ctrain__manifest__free_unpacked(m, NULL);
}

/* Open must fail with `code` and a message holding every phrase given. */
static int expect_open_error(const char *dir, int code, const char *phrase1, const char *phrase2)
{
    struct ct_ckpt ck;
    int rc = ct_ckpt_open(&ck, dir);
    const char *msg = ct_error_message();
    int ok = rc == code && (!phrase1 || strstr(msg, phrase1)) && (!phrase2 || strstr(msg, phrase2));
    if (!ok)
        fprintf(stderr, "\n  %s: rc %d (want %d), message '%s' (want '%s', '%s')\n", dir, rc, code, msg,
                phrase1 ? phrase1 : "", phrase2 ? phrase2 : "");
    ct_ckpt_close(&ck);
    return ok;
}

/* ---------------------------------------------------------------- content */

#define W_ROWS 64
#define W_COLS 33

static float g_w[W_ROWS * W_COLS];
static uint8_t g_odd[13];
static double g_d[3];

static size_t make_record(uint8_t *out, size_t cap, const char *host, int64_t step)
{
    Ctrain__RngStream s = CTRAIN__RNG_STREAM__INIT;
    s.purpose = "dropout";
    s.key0 = 1;
    s.key1 = 2;
    s.counter = 99;
    Ctrain__RngStream *sp = &s;
    Ctrain__RankRecord r = CTRAIN__RANK_RECORD__INIT;
    r.rank = 0;
    r.world_size = 1;
    r.host = (char *)host;
    r.binding = "cores 0-3";
    r.n_rng = 1;
    r.rng = &sp;
    r.loader_epoch = 3;
    r.loader_step = step;
    r.loader_first = 0;
    r.loader_count = 32;
    size_t n = ctrain__rank_record__get_packed_size(&r);
    if (n > cap)
        abort();
    ctrain__rank_record__pack(&r, out);
    return n;
}

static int write_base(const char *run, int64_t step)
{
    for (int i = 0; i < W_ROWS * W_COLS; i++)
        g_w[i] = (float)i * 0.25f - 100.0f + (float)step;
    for (int i = 0; i < 13; i++)
        g_odd[i] = (uint8_t)(i * 19 + 3);
    for (int i = 0; i < 3; i++)
        g_d[i] = 1.0 / (i + 3.0);
    struct ct_ckpt_tensor t[3];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "params/w");
    t[0].dtype = CT_DTYPE_F32;
    t[0].ndim = 2;
    t[0].shape[0] = W_ROWS;
    t[0].shape[1] = W_COLS;
    t[0].data = g_w;
    snprintf(t[1].name, sizeof t[1].name, "buffers/odd");
    t[1].dtype = CT_DTYPE_U8;
    t[1].ndim = 1;
    t[1].shape[0] = 13;
    t[1].data = g_odd;
    snprintf(t[2].name, sizeof t[2].name, "optim/d");
    t[2].dtype = CT_DTYPE_F64;
    t[2].ndim = 1;
    t[2].shape[0] = 3;
    t[2].data = g_d;
    uint8_t rec[512];
    size_t rl = make_record(rec, sizeof rec, "unit", step);
    struct ct_ckpt_kv sc[1] = {{"optim.step", "1"}};
    struct ct_ckpt_content c = {
        .step = step, .config_text = "[model]\nkind = mlp\n", .code_version = "test",
        .scalars = sc, .n_scalars = 1, .tensors = t, .n_tensors = 3, .record = rec, .record_len = rl,
    };
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    return ct_ckpt_write(&g_self, &wp, &c, d, NULL, 0);
}

/* ---------------------------------------------------------------- tests */

static void test_clean_checkpoint_opens(void)
{
    struct ct_ckpt ck;
    int rc = ct_ckpt_open(&ck, g_base);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        float w[W_ROWS * W_COLS];
        int64_t shape[2] = {W_ROWS, W_COLS};
        CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "params/w", CT_DTYPE_F32, 2, shape, w), 0);
        CU_ASSERT_EQUAL(memcmp(w, g_w, sizeof w), 0);
        CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "params/nope", CT_DTYPE_F32, 2, shape, w), CT_ENOENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "no section params/nope"));
    }
    ct_ckpt_close(&ck);
    /* The sidecar is in sha256sum's format. */
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/manifest.sha256", g_base);
    uint8_t *b = ct_test_read_file(p, &n);
    CU_ASSERT_TRUE(b && n == 64 + 2 + 11 + 1 && memcmp(b + 64, "  manifest.pb\n", 14) == 0);
    free(b);
}

static void test_truncated_data(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/data.bin", g_base);
    struct stat st;
    stat(p, &st);
    off_t lens[] = {0, 1, 63, 64, st.st_size / 2, st.st_size - 1};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        const char *d = fresh_copy("trunc-data");
        truncate_to(d, "data.bin", lens[i]);
        CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/data.bin: ", "the manifest says"));
    }
    /* Longer than promised is as wrong as shorter. */
    const char *d = fresh_copy("long-data");
    truncate_to(d, "data.bin", st.st_size + 1);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/data.bin: ", "the manifest says"));
    d = fresh_copy("no-data");
    snprintf(p, sizeof p, "%s/data.bin", d);
    unlink(p);
    CU_ASSERT_TRUE(expect_open_error(d, CT_ENOENT, "/data.bin: ", NULL));
}

static void test_truncated_manifest(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/manifest.pb", g_base);
    struct stat st;
    stat(p, &st);
    const char *d = fresh_copy("trunc-manifest");
    truncate_to(d, "manifest.pb", 0);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/manifest.pb: ", "empty"));
    /* Cut anywhere: either it no longer parses, or (cut at a field boundary)
     * its digest no longer matches manifest.sha256. */
    int all = 1;
    for (off_t len = 1; len < st.st_size; len += (len < 40 ? 1 : 13)) {
        d = fresh_copy("trunc-manifest");
        truncate_to(d, "manifest.pb", len);
        all &= expect_open_error(d, CT_EFORMAT, "/manifest.pb: ", NULL);
    }
    CU_ASSERT_TRUE(all);
    d = fresh_copy("trunc-manifest");
    truncate_to(d, "manifest.pb", st.st_size - 1);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/manifest.pb: ", NULL));
    d = fresh_copy("no-manifest");
    snprintf(p, sizeof p, "%s/manifest.pb", d);
    unlink(p);
    CU_ASSERT_TRUE(expect_open_error(d, CT_ENOENT, "no manifest", NULL));
    d = fresh_copy("no-sidecar");
    snprintf(p, sizeof p, "%s/manifest.sha256", d);
    unlink(p);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "manifest.sha256: missing", NULL));
}

static void test_flipped_manifest_bits(void)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/manifest.pb", g_base);
    struct stat st;
    stat(p, &st);
    /* Every byte, one bit each (rotating): always refused. */
    int all = 1;
    for (off_t i = 0; i < st.st_size; i++) {
        const char *d = fresh_copy("flip-manifest");
        flip_bit(d, "manifest.pb", (size_t)i, (int)(i % 8));
        all &= expect_open_error(d, CT_EFORMAT, "/manifest.pb: ", NULL);
    }
    CU_ASSERT_TRUE(all);
    /* A flip that still parses is caught by the digest, and said so. */
    const char *d = fresh_copy("flip-manifest");
    flip_bit(d, "manifest.pb", (size_t)st.st_size - 1, 0); /* last scalar value */
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/manifest.pb: sha256 mismatch (expected ", NULL));
    /* A sidecar digit changed to another hex digit: still hex, so the
     * digest comparison must catch it. (Flipping a bit of the digit, as
     * this test once did, turns 'a' into '`' and 'f' into 'g' -- not hex,
     * another error -- in 2 of 16 checkpoints, depending on the digest.) */
    d = fresh_copy("flip-sidecar");
    char sc[1024];
    snprintf(sc, sizeof sc, "%s/manifest.sha256", d);
    size_t n;
    uint8_t *b = ct_test_read_file(sc, &n);
    CU_ASSERT_FATAL(b != NULL && n > 3);
    b[3] = b[3] == '0' ? '1' : '0';
    ct_test_write_file(sc, b, n);
    free(b);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "sha256 mismatch", NULL));
}

/* The same flips with a consistent sidecar, as a writer with a bug would
 * leave them: the parser and the checks behind it must never crash or
 * read out of bounds (any verdict is allowed; ASan judges). */
static void test_manifest_fuzz_no_crash(void)
{
    char p[1024];
    size_t n;
    snprintf(p, sizeof p, "%s/manifest.pb", g_base);
    uint8_t *orig = ct_test_read_file(p, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(orig);
    int opened = 0;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            const char *d = fresh_copy("fuzz-manifest");
            orig[i] ^= (uint8_t)(1u << bit);
            write_manifest(d, orig, n);
            orig[i] ^= (uint8_t)(1u << bit);
            struct ct_ckpt ck;
            if (ct_ckpt_open(&ck, d) == 0) {
                opened++;
                FILE *f = fopen("/dev/null", "w");
                ct_ckpt_inspect(d, f);
                fclose(f);
            }
            ct_ckpt_close(&ck);
        }
    }
    free(orig);
    CU_ASSERT_TRUE(opened < (int)n * 3); /* most flips are caught */
}

static const Ctrain__TensorEntry *base_entry(const char *name, uint64_t *rec_off)
{
    static struct ct_ckpt ck;
    static int opened;
    if (!opened && ct_ckpt_open(&ck, g_base) == 0)
        opened = 1;
    if (!opened)
        return NULL;
    const Ctrain__Manifest *m = ck.manifest;
    *rec_off = m->ranks[0]->offset;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->name, name) == 0)
            return m->tensors[i];
    return NULL;
}

static void test_flipped_tensor_and_record(void)
{
    uint64_t rec_off = 0;
    const Ctrain__TensorEntry *w = base_entry("params/w", &rec_off);
    const Ctrain__TensorEntry *odd = base_entry("buffers/odd", &rec_off);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    CU_ASSERT_PTR_NOT_NULL_FATAL(odd);
    const char *d = fresh_copy("flip-tensor");
    flip_bit(d, "data.bin", (size_t)(w->offset + w->length / 2), 5);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/data.bin: section params/w: sha256 mismatch (expected ",
                                     ", found "));
    d = fresh_copy("flip-odd");
    flip_bit(d, "data.bin", (size_t)(odd->offset + odd->length - 1), 7);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section buffers/odd: sha256 mismatch", NULL));
    d = fresh_copy("flip-record");
    flip_bit(d, "data.bin", (size_t)rec_off + 2, 1);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/data.bin: rank record 0: sha256 mismatch", NULL));

    /* inspect reports the bad section and a BAD verdict, and keeps going. */
    d = fresh_copy("flip-tensor");
    flip_bit(d, "data.bin", (size_t)w->offset, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    int rc = ct_ckpt_inspect(d, f);
    fclose(f);
    CU_ASSERT_EQUAL(rc, CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "BAD params/w"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "OK  buffers/odd"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "verdict: BAD (1 of 4 sections failed verification)"));
    free(text);
}

/* ct_ckpt_open_records: the manifest and every rank record, as ct_ckpt_open
 * gives them, read and verified; no section readable; a flipped record bit
 * refused; a flipped section bit not seen (its bytes are not read), a
 * truncated data.bin still refused. */
static void test_open_records(void)
{
    struct ct_ckpt full, rec;
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open(&full, g_base), 0);
    CU_ASSERT_EQUAL_FATAL(ct_ckpt_open_records(&rec, g_base), 0);
    CU_ASSERT_EQUAL(memcmp(full.digest, rec.digest, sizeof rec.digest), 0);
    CU_ASSERT_EQUAL(ct_ckpt_step(&rec), ct_ckpt_step(&full));
    CU_ASSERT_EQUAL(ct_ckpt_world_size(&rec), ct_ckpt_world_size(&full));
    CU_ASSERT_STRING_EQUAL(ct_ckpt_config_text(&rec), ct_ckpt_config_text(&full));
    CU_ASSERT(rec.data_size < full.data_size);
    const uint8_t *a, *b;
    size_t la, lb;
    CU_ASSERT_EQUAL(ct_ckpt_rank_record(&full, 0, &a, &la), 0);
    CU_ASSERT_EQUAL(ct_ckpt_rank_record(&rec, 0, &b, &lb), 0);
    CU_ASSERT_TRUE(la == lb && la > 0 && memcmp(a, b, la) == 0);
    float w[W_ROWS * W_COLS];
    int64_t shape[2] = {W_ROWS, W_COLS};
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&rec, "params/w", CT_DTYPE_F32, 2, shape, w), CT_ESTATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "rank records only"));
    struct ct_ckpt_section sec;
    CU_ASSERT_EQUAL(ct_ckpt_section_at(&rec, 0, &sec), CT_ESTATE);
    ct_ckpt_close(&full);
    ct_ckpt_close(&rec);

    uint64_t rec_off = 0;
    const Ctrain__TensorEntry *t = base_entry("params/w", &rec_off);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    const char *d = fresh_copy("records-flip-tensor");
    flip_bit(d, "data.bin", (size_t)(t->offset + 4), 3);
    CU_ASSERT_EQUAL(ct_ckpt_open_records(&rec, d), 0);
    ct_ckpt_close(&rec);
    d = fresh_copy("records-flip-record");
    flip_bit(d, "data.bin", (size_t)rec_off + 2, 1);
    CU_ASSERT_EQUAL(ct_ckpt_open_records(&rec, d), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "rank record 0: sha256 mismatch"));
    ct_ckpt_close(&rec);
    d = fresh_copy("records-trunc");
    truncate_to(d, "data.bin", 64);
    CU_ASSERT_EQUAL(ct_ckpt_open_records(&rec, d), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "the manifest says"));
    ct_ckpt_close(&rec);
}

static void set_version_2(Ctrain__Manifest *m) { m->format_version = 2; }
static void misalign(Ctrain__Manifest *m) { m->tensors[1]->offset += 1; }
static void out_of_bounds(Ctrain__Manifest *m) { m->tensors[0]->offset = m->data_size / 64 * 64; }
/* Strings in an unpacked message belong to it (freed with it). */
static void replace_str(char **field, const char *value)
{
    free(*field);
    *field = strdup(value);
}
static void huge_offset(Ctrain__Manifest *m) { m->tensors[0]->offset = UINT64_MAX - 63; }
static void bad_dtype(Ctrain__Manifest *m) { replace_str(&m->tensors[2]->dtype, "f16"); }
static void bad_length(Ctrain__Manifest *m) { m->tensors[0]->length -= 4; }
static void big_record(Ctrain__Manifest *m) { m->ranks[0]->length = CT_CKPT_MAX_RECORD_BYTES + 1; }
static void bad_rank_order(Ctrain__Manifest *m) { m->ranks[0]->rank = 1; }
static void short_digest(Ctrain__Manifest *m) { m->tensors[0]->sha256.len = 31; }
static void dup_name(Ctrain__Manifest *m) { replace_str(&m->tensors[2]->name, m->tensors[1]->name); }
static void other_config(Ctrain__Manifest *m) { replace_str(&m->config, "[model]\nkind = cnn\n"); }

static void test_lying_entries(void)
{
    const char *d = fresh_copy("v2");
    mutate(d, set_version_2);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/manifest.pb: format version 2, this build reads version 1", NULL));
    d = fresh_copy("misalign");
    mutate(d, misalign);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section buffers/odd: offset", "not 64-byte aligned"));
    d = fresh_copy("oob");
    mutate(d, out_of_bounds);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section params/w: bytes [", "lie outside"));
    d = fresh_copy("huge-offset");
    mutate(d, huge_offset);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "lie outside", NULL));
    d = fresh_copy("dtype");
    mutate(d, bad_dtype);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section optim/d: unknown dtype 'f16'", NULL));
    d = fresh_copy("length");
    mutate(d, bad_length);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section params/w: its shape and dtype f32 need 8448 bytes", NULL));
    d = fresh_copy("big-record");
    mutate(d, big_record);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "rank record 0: 1048577 bytes, larger than", NULL));
    d = fresh_copy("rank-order");
    mutate(d, bad_rank_order);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "rank entry 0 is for rank 1", NULL));
    d = fresh_copy("short-digest");
    mutate(d, short_digest);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "digest of 31 bytes", NULL));
    d = fresh_copy("dup-name");
    mutate(d, dup_name);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "section buffers/odd appears twice", NULL));
    d = fresh_copy("config");
    mutate(d, other_config);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "config: sha256 mismatch", NULL));
}

static void test_manifest_over_cap(void)
{
    const char *d = fresh_copy("huge-manifest");
    char p[1024];
    snprintf(p, sizeof p, "%s/manifest.pb", d);
    int fd = open(p, O_WRONLY);
    CU_ASSERT_TRUE_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ftruncate(fd, (off_t)CT_CKPT_MAX_MANIFEST_BYTES + 1), 0); /* sparse */
    close(fd);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "/manifest.pb: 67108865 bytes, larger than", NULL));
    /* A sparse data.bin of absurd size is refused before it is read. */
    d = fresh_copy("huge-data");
    truncate_to(d, "data.bin", (off_t)1 << 40);
    CU_ASSERT_TRUE(expect_open_error(d, CT_EFORMAT, "the manifest says", NULL));
}

static void write_latest(const char *run, const char *text, size_t len)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/latest", run);
    ct_test_write_file(p, text, len);
}

static void expect_latest(const char *run, const char *want_name)
{
    char found[1024], want[1024];
    snprintf(want, sizeof want, "%s/%s", run, want_name);
    int rc = ct_ckpt_find_latest(run, found, sizeof found);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0 || strcmp(found, want) != 0) {
        fprintf(stderr, "\n  find_latest(%s): rc %d, '%s', want '%s' (%s)\n", run, rc,
                rc ? "" : found, want, ct_error_message());
        CU_FAIL("find_latest");
    }
}

static void test_find_latest(void)
{
    char run[400], p[1024], found[1024];
    snprintf(run, sizeof run, "%s/run-latest", g_root);
    CU_ASSERT_EQUAL(write_base(run, 1), 0);
    CU_ASSERT_EQUAL(write_base(run, 2), 0);
    expect_latest(run, "ckpt-2");
    /* A pointer to an older, valid checkpoint is honoured over the scan. */
    write_latest(run, "ckpt-1\n", 7);
    expect_latest(run, "ckpt-1");
    /* Pointing nowhere, garbage, a path, empty, missing: fall back to the scan. */
    write_latest(run, "ckpt-9\n", 7);
    expect_latest(run, "ckpt-2");
    write_latest(run, "\x01\xff garbage", 10);
    expect_latest(run, "ckpt-2");
    write_latest(run, "../../etc\n", 10);
    expect_latest(run, "ckpt-2");
    write_latest(run, "ckpt-2\nckpt-1\n", 14);
    expect_latest(run, "ckpt-2");
    write_latest(run, "", 0);
    expect_latest(run, "ckpt-2");
    snprintf(p, sizeof p, "%s/latest", run);
    unlink(p);
    expect_latest(run, "ckpt-2");
    /* The newest directory half-deleted (manifest gone first): the scan
     * takes the one before it. */
    write_latest(run, "ckpt-2\n", 7);
    snprintf(p, sizeof p, "%s/ckpt-2/manifest.pb", run);
    unlink(p);
    expect_latest(run, "ckpt-1");
    /* A stale temporary directory is never taken. */
    snprintf(p, sizeof p, "%s/ckpt-7.tmp-1-2", run);
    mkdir(p, 0755);
    expect_latest(run, "ckpt-1");
    /* Nothing at all. */
    snprintf(p, sizeof p, "%s/ckpt-1/data.bin", run);
    truncate(p, 10);
    CU_ASSERT_EQUAL(ct_ckpt_find_latest(run, found, sizeof found), CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "no checkpoint in"));
    snprintf(p, sizeof p, "%s/does-not-exist", g_root);
    CU_ASSERT_EQUAL(ct_ckpt_find_latest(p, found, sizeof found), CT_ENOENT);
    /* A directory without a single checkpoint-like name: the scan has
     * nothing to sort (fuzz_json found qsort called on NULL there, which
     * UBSan reports; tests/fuzz/regress/json/find-latest-empty-scan). */
    snprintf(p, sizeof p, "%s/no-checkpoints", g_root);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0755), 0);
    CU_ASSERT_EQUAL(ct_ckpt_find_latest(p, found, sizeof found), CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "no checkpoint in"));
    rmdir(p);
}

/* ---------------------------------------------------------------- golden v1 */

static const float g_golden_w[6] = {0.5f, -1.25f, 2.0f, 3.75f, -0.125f, 1e-3f};
static const uint8_t g_golden_mask[5] = {1, 0, 255, 7, 128};
static const double g_golden_m[2] = {1.0 / 3.0, -2.5};
static const int64_t g_golden_c[3] = {-1, 0, (int64_t)1 << 40};

static int make_golden(const char *outdir)
{
    char run[400], a[1024], b[1024];
    snprintf(run, sizeof run, "%s/golden-run", g_root);
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    struct ct_ckpt_tensor t[4];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, sizeof t[0].name, "params/layers.0.weight");
    t[0].dtype = CT_DTYPE_F32, t[0].ndim = 2, t[0].shape[0] = 2, t[0].shape[1] = 3, t[0].data = g_golden_w;
    snprintf(t[1].name, sizeof t[1].name, "buffers/mask");
    t[1].dtype = CT_DTYPE_U8, t[1].ndim = 1, t[1].shape[0] = 5, t[1].data = g_golden_mask;
    snprintf(t[2].name, sizeof t[2].name, "optim/exp_avg/layers.0.bias");
    t[2].dtype = CT_DTYPE_F64, t[2].ndim = 1, t[2].shape[0] = 2, t[2].data = g_golden_m;
    snprintf(t[3].name, sizeof t[3].name, "counters/c");
    t[3].dtype = CT_DTYPE_I64, t[3].ndim = 1, t[3].shape[0] = 3, t[3].data = g_golden_c;
    uint8_t rec[512];
    size_t rl = make_record(rec, sizeof rec, "golden", 5);
    uint8_t parent[CT_SHA256_LEN];
    ct_sha256_buf("parent", 6, parent);
    struct ct_ckpt_kv libs[] = {{"Open MPI", "4.1.4"}, {"protobuf-c", "1.4.1"}};
    struct ct_ckpt_kv sc[] = {{"optim.step", "42"}, {"lr", "0.01"}};
    struct ct_ckpt_data_file df = {"train-images-idx3-ubyte.gz", 26421880, {0}, "idx"};
    ct_sha256_buf("train", 5, df.sha256);
    const char *changes[] = {"train.max_steps: 40 -> 50"};
    struct ct_ckpt_content c = {
        .step = 42, .epoch = 3, .epoch_step = 5, .config_text = "[model]\nkind = mlp\nhidden = 8\n",
        .code_version = "golden-v1", .libraries = libs, .n_libraries = 2, .data_files = &df,
        .n_data_files = 1, .parent_sha256 = parent, .placement = "rank 0: cores 0-3",
        .changes = changes, .n_changes = 1, .scalars = sc, .n_scalars = 2, .tensors = t,
        .n_tensors = 4, .record = rec, .record_len = rl,
    };
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    int rc = ct_ckpt_write(&g_self, &wp, &c, d, NULL, 0);
    if (rc < 0) {
        fprintf(stderr, "make-golden: %s\n", ct_error_message());
        return 1;
    }
    mkdir(outdir, 0755);
    static const char *const files[] = {"manifest.pb", "manifest.sha256", "data.bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/ckpt-42/%s", run, files[i]);
        snprintf(b, sizeof b, "%s/%s", outdir, files[i]);
        copy_file(a, b);
    }
    char hex[CT_SHA256_HEX_LEN];
    ct_sha256_hex(d, hex);
    printf("wrote %s (digest %s)\n", outdir, hex);
    return 0;
}

static void test_golden_v1_loads(void)
{
    struct ct_ckpt ck;
    int rc = ct_ckpt_open(&ck, CT_FIXTURE_DIR "/ckpt-v1");
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    const Ctrain__Manifest *m = ck.manifest;
    CU_ASSERT_EQUAL(m->format_version, 1);
    CU_ASSERT_EQUAL(m->step, 42);
    CU_ASSERT_EQUAL(m->epoch, 3);
    CU_ASSERT_EQUAL(m->epoch_step, 5);
    CU_ASSERT_EQUAL(m->world_size, 1);
    CU_ASSERT_STRING_EQUAL(m->code_version, "golden-v1");
    CU_ASSERT_EQUAL(m->created_unix, 1700000000);
    CU_ASSERT_TRUE(m->has_parent_sha256);
    float w[6];
    int64_t sw[2] = {2, 3};
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "params/layers.0.weight", CT_DTYPE_F32, 2, sw, w), 0);
    CU_ASSERT_EQUAL(w[1], -1.25f);
    CU_ASSERT_EQUAL(w[5], 1e-3f);
    uint8_t mask[5];
    int64_t s5 = 5, s2 = 2, s3 = 3;
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "buffers/mask", CT_DTYPE_U8, 1, &s5, mask), 0);
    CU_ASSERT_EQUAL(mask[2], 255);
    double mm[2];
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "optim/exp_avg/layers.0.bias", CT_DTYPE_F64, 1, &s2, mm), 0);
    CU_ASSERT_EQUAL(mm[1], -2.5);
    int64_t cc[3];
    CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "counters/c", CT_DTYPE_I64, 1, &s3, cc), 0);
    CU_ASSERT_EQUAL(cc[2], (int64_t)1 << 40);
    const char *v;
    CU_ASSERT_EQUAL(ct_ckpt_scalar(&ck, "lr", &v), 0);
    CU_ASSERT_STRING_EQUAL(v, "0.01");
    const uint8_t *rb;
    size_t rn;
    CU_ASSERT_EQUAL(ct_ckpt_rank_record(&ck, 0, &rb, &rn), 0);
    Ctrain__RankRecord *r = ctrain__rank_record__unpack(NULL, rn, rb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(r->host, "golden");
    CU_ASSERT_EQUAL(r->loader_step, 5);
    CU_ASSERT_EQUAL(r->n_rng, 1);
    CU_ASSERT_EQUAL(r->rng[0]->counter, 99);
    ctrain__rank_record__free_unpacked(r, NULL);
    ct_ckpt_close(&ck);

    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_EQUAL(ct_ckpt_inspect(CT_FIXTURE_DIR "/ckpt-v1", f), 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "verdict: OK (4 tensors"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "rank 0 of 1 on golden, binding cores 0-3"));
    free(text);
}

int main(int argc, char **argv)
{
    ct_comm_init_self(&g_self);
    snprintf(g_root, sizeof g_root, "%s", ct_test_tmpdir());
    if (argc == 3 && strcmp(argv[1], "--make-golden") == 0) {
        int rc = make_golden(argv[2]);
        ct_test_rmtree(g_root);
        return rc;
    }
    char run[400];
    snprintf(run, sizeof run, "%s/run", g_root);
    if (write_base(run, 1) != 0) {
        fprintf(stderr, "writing the base checkpoint failed: %s\n", ct_error_message());
        return 1;
    }
    snprintf(g_base, sizeof g_base, "%s/ckpt-1", run);
    static const struct ct_test_case cases[] = {
        {"a clean checkpoint opens", test_clean_checkpoint_opens},
        {"truncated data.bin", test_truncated_data},
        {"truncated manifest", test_truncated_manifest},
        {"flipped bits in the manifest", test_flipped_manifest_bits},
        {"consistent but corrupt manifests never crash", test_manifest_fuzz_no_crash},
        {"flipped bits in a tensor and a rank record", test_flipped_tensor_and_record},
        {"open_records: the manifest and rank records only", test_open_records},
        {"entries that lie: version, bounds, alignment, dtype, size", test_lying_entries},
        {"manifest and data over the caps", test_manifest_over_cap},
        {"find_latest: pointer, fallback scan", test_find_latest},
        {"golden checkpoint of format version 1", test_golden_v1_loads},
        {NULL, NULL},
    };
    int rc = ct_test_run("ckpt read", cases);
    ct_test_rmtree(g_root);
    ct_comm_free(&g_self);
    return rc;
}
