/* libFuzzer harness: checkpoint manifest and data span verification
 * (ct_ckpt_open, src/ckpt/read.c and common.c) and, on what it accepts,
 * every accessor and the rank-record reader; optionally ct_ckpt_inspect
 * (src/ckpt/inspect.c), which prints a damaged checkpoint too.
 *
 * Input (README.md):  flags:u8  [len:u32le manifest.pb]  [len:u32le manifest.sha256]  data.bin...
 * flags:
 *   0x01  write manifest.sha256 with the right digest of manifest.pb (the
 *         input's sidecar part is then ignored): gets past the sidecar
 *         check, so mutations of the manifest reach the structure checks
 *   0x02  re-pack the manifest with fixed digests: if it parses, the config
 *         digest and every in-bounds tensor and rank digest (of 32 bytes)
 *         are set to the SHA-256 of what they cover, so mutations of
 *         offsets, lengths, shapes and dtypes reach the span checks
 *   0x04  with 0x02: set data_size to the length of data.bin
 *   0x08  no data.bin
 *   0x10  no manifest.sha256
 *   0x20  also run ct_ckpt_inspect (to /dev/null)
 * Anything ct_ckpt_open accepts must be self-consistent: every section and
 * rank record lies inside the data it read (checked here, abort otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/sha256.h"
#include "fuzz_util.h"
#include "proto/checkpoint.pb-c.h"
#include "ckpt/inspect.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *g_null;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ct_fuzz_dir();
    g_null = fopen("/dev/null", "w");
    if (!g_null)
        abort();
    return 0;
}

static void set_digest(ProtobufCBinaryData *d, const uint8_t *bytes, size_t len)
{
    if (d->len == CT_SHA256_LEN && ct_sha256_buf(bytes, len, d->data) < 0)
        abort();
}

/* Flag 0x02: the manifest with its digests made right, or NULL when it does
 * not parse (then the input's bytes are written as they are). */
static uint8_t *fix_manifest(const uint8_t *mb, size_t ml, const uint8_t *db, size_t dl, int fix_size,
                             size_t *out_len)
{
    Ctrain__Manifest *m = ctrain__manifest__unpack(NULL, ml, mb);
    if (!m)
        return NULL;
    if (fix_size)
        m->data_size = dl;
    set_digest(&m->config_sha256, (const uint8_t *)m->config, strlen(m->config));
    for (size_t i = 0; i < m->n_tensors; i++) {
        Ctrain__TensorEntry *t = m->tensors[i];
        if (t->offset <= dl && t->length <= dl - t->offset)
            set_digest(&t->sha256, db + t->offset, (size_t)t->length);
    }
    for (size_t i = 0; i < m->n_ranks; i++) {
        Ctrain__RankEntry *r = m->ranks[i];
        if (r->offset <= dl && r->length <= dl - r->offset)
            set_digest(&r->sha256, db + r->offset, (size_t)r->length);
    }
    size_t n = ctrain__manifest__get_packed_size(m);
    uint8_t *out = malloc(n ? n : 1);
    if (!out)
        abort();
    *out_len = ctrain__manifest__pack(m, out);
    ctrain__manifest__free_unpacked(m, NULL);
    return out;
}

static void check_inside(const struct ct_ckpt *ck, const void *p, size_t len, const char *what)
{
    const uint8_t *b = p;
    if (len && (b < ck->data || len > ck->data_size || b - ck->data > (ptrdiff_t)(ck->data_size - len))) {
        fprintf(stderr, "fuzz_ckpt: %s of %zu bytes lies outside data.bin (%zu bytes)\n", what, len,
                ck->data_size);
        abort();
    }
}

/* Everything a caller may do with an open checkpoint. */
static void use_checkpoint(struct ct_ckpt *ck)
{
    (void)ct_ckpt_config_text(ck);
    (void)ct_ckpt_code_version(ck);
    (void)ct_ckpt_placement(ck);
    (void)ct_ckpt_step(ck);
    (void)ct_ckpt_epoch(ck);
    (void)ct_ckpt_epoch_step(ck);
    (void)ct_ckpt_created_unix(ck);
    uint8_t parent[CT_SHA256_LEN];
    (void)ct_ckpt_parent_digest(ck, parent);
    for (int i = 0; i < ct_ckpt_n_data_files(ck); i++) {
        struct ct_ckpt_data_file f;
        if (ct_ckpt_data_file(ck, i, &f) == 0)
            (void)ct_ckpt_find_data_file(ck, f.path, &f);
    }
    for (int i = 0; i < ct_ckpt_n_libraries(ck); i++) {
        struct ct_ckpt_kv kv;
        (void)ct_ckpt_library(ck, i, &kv);
    }
    for (int i = 0; i < ct_ckpt_n_changes(ck); i++)
        (void)ct_ckpt_change(ck, i);
    for (int i = 0; i < ct_ckpt_n_scalars(ck); i++) {
        struct ct_ckpt_kv kv;
        const char *v;
        if (ct_ckpt_scalar_at(ck, i, &kv) == 0)
            (void)ct_ckpt_scalar(ck, kv.key, &v);
    }
    for (int i = 0; i < ct_ckpt_n_sections(ck); i++) {
        struct ct_ckpt_section s;
        if (ct_ckpt_section_at(ck, i, &s) < 0)
            continue;
        check_inside(ck, s.data, s.length, s.name);
        if (!ct_ckpt_has_tensor(ck, s.name))
            abort();
        void *dst = malloc(s.length ? s.length : 1);
        if (!dst)
            abort();
        if (ct_ckpt_read_tensor(ck, s.name, s.dtype, s.ndim, s.shape, dst) < 0)
            abort(); /* what section_at describes must read */
        /* The refusals: another dtype, one dimension more (with a shape
         * that does not match), a name that is not there. */
        int64_t other[5] = {0};
        memcpy(other, s.shape, sizeof s.shape);
        other[s.ndim] = -1;
        (void)ct_ckpt_read_tensor(ck, s.name, (enum ct_dtype)((s.dtype + 1) % CT_DTYPE_COUNT), s.ndim,
                                  s.shape, dst);
        (void)ct_ckpt_read_tensor(ck, s.name, s.dtype, s.ndim + 1, other, dst);
        (void)ct_ckpt_read_tensor(ck, "", s.dtype, s.ndim, s.shape, dst);
        free(dst);
    }
    for (int r = 0; r < ct_ckpt_world_size(ck); r++) {
        const uint8_t *b;
        size_t len;
        if (ct_ckpt_rank_record(ck, r, &b, &len) == 0)
            check_inside(ck, b, len, "rank record");
        struct ct_rank_record rec;
        (void)ct_ckpt_read_rank_record(ck, r, &rec);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    const uint8_t *mb, *sb;
    size_t ml, sl;
    ct_fuzz_take(&p, &n, &mb, &ml);
    ct_fuzz_take(&p, &n, &sb, &sl);
    const uint8_t *db = p;
    size_t dl = n;

    uint8_t *fixed = NULL;
    size_t fl = 0;
    if (flags & 0x02)
        fixed = fix_manifest(mb, ml, db, dl, (flags & 0x04) != 0, &fl);
    if (fixed) {
        mb = fixed;
        ml = fl;
    }
    ct_fuzz_write("manifest.pb", mb, ml);
    if (flags & 0x10) {
        ct_fuzz_remove("manifest.sha256");
    } else if (flags & 0x01) {
        uint8_t d[CT_SHA256_LEN];
        char line[CT_SHA256_HEX_LEN + 16];
        if (ct_sha256_buf(mb, ml, d) < 0)
            abort();
        ct_sha256_hex(d, line);
        strcat(line, "  manifest.pb\n");
        ct_fuzz_write("manifest.sha256", line, strlen(line));
    } else {
        ct_fuzz_write("manifest.sha256", sb, sl);
    }
    if (flags & 0x08)
        ct_fuzz_remove("data.bin");
    else
        ct_fuzz_write("data.bin", db, dl);
    free(fixed);

    struct ct_ckpt ck;
    int rc = ct_ckpt_open(&ck, ct_fuzz_dir());
    ct_fuzz_verbose("ct_ckpt_open", rc);
    if (rc == 0)
        use_checkpoint(&ck);
    ct_ckpt_close(&ck);
    if (flags & 0x20)
        (void)ct_ckpt_inspect(ct_fuzz_dir(), g_null);
    return 0;
}
