/* `ctrain-dist inspect`: a human-readable account of one checkpoint, with
 * every digest verified. Unlike ct_ckpt_open it does not stop at the first
 * bad section: it reports each section OK or BAD and ends with a verdict
 * line, so a damaged checkpoint can still be examined. It prints to the
 * stream it is given (the CLI passes stdout); it never exits.
 *
 * It reads the checkpoint through ckpt-impl.h (the raw manifest and the
 * per-section verifiers), not the public reader: a damaged checkpoint,
 * which ct_ckpt_open refuses as a whole, is what it is for. */
#include "ckpt/inspect.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"

static void print_hex(FILE *out, const ProtobufCBinaryData *b)
{
    char hex[CT_SHA256_HEX_LEN];
    if (b->len == CT_SHA256_LEN) {
        ct_sha256_hex(b->data, hex);
        fputs(hex, out);
    } else {
        fprintf(out, "(%zu-byte digest)", b->len);
    }
}

/* A multi-line text, indented. */
static void print_block(FILE *out, const char *label, const char *text)
{
    fprintf(out, "  %-13s", label);
    int first = 1;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(out, "%s%.*s\n", first ? "" : "                ", (int)n, p);
        first = 0;
        p += n + (nl ? 1 : 0);
    }
    if (first)
        fputc('\n', out);
}

static void print_record(FILE *out, const uint8_t *bytes, size_t len)
{
    Ctrain__RankRecord *r = ctrain__rank_record__unpack(NULL, len, bytes);
    if (!r) {
        fprintf(out, "      (not a valid RankRecord, %zu bytes)\n", len);
        return;
    }
    fprintf(out, "      rank %d of %d on %s, binding %s\n", (int)r->rank, (int)r->world_size, r->host,
            r->binding[0] ? r->binding : "-");
    fprintf(out, "      loader: epoch %" PRId64 ", next step %" PRId64 ", slice [%" PRIu64 ", +%" PRIu64 ")\n",
            r->loader_epoch, r->loader_step, r->loader_first, r->loader_count);
    for (size_t i = 0; i < r->n_rng; i++)
        fprintf(out, "      rng %-8s key (0x%08x, 0x%08x) counter %" PRIu64 "\n", r->rng[i]->purpose,
                (unsigned)r->rng[i]->key0, (unsigned)r->rng[i]->key1, r->rng[i]->counter);
    ctrain__rank_record__free_unpacked(r, NULL);
}

/* The manifest's facts, one per line: digest, format, step, world, time,
 * code, libraries, data files, parent, config, placement, changes, scalars. */
static void print_manifest(FILE *out, const Ctrain__Manifest *m, const uint8_t digest[CT_SHA256_LEN])
{
    char hex[CT_SHA256_HEX_LEN];
    ct_sha256_hex(digest, hex);
    fprintf(out, "  %-13s%s\n", "digest", hex);
    fprintf(out, "  %-13s%u\n", "format", (unsigned)m->format_version);
    fprintf(out, "  %-13s%" PRId64 " (epoch %" PRId64 ", step %" PRId64 " of it)\n", "step", m->step,
            m->epoch, m->epoch_step);
    fprintf(out, "  %-13s%d\n", "world size", (int)m->world_size);
    if (m->has_created_unix) {
        time_t t = (time_t)m->created_unix;
        struct tm tm;
        char ts[64] = "?";
        if (gmtime_r(&t, &tm))
            strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S UTC", &tm);
        fprintf(out, "  %-13s%s\n", "created", ts);
    }
    fprintf(out, "  %-13s%s\n", "code", m->code_version);
    for (size_t i = 0; i < m->n_libraries; i++)
        fprintf(out, "  %-13s%s %s\n", i ? "" : "libraries", m->libraries[i]->key,
                m->libraries[i]->value);
    for (size_t i = 0; i < m->n_data_files; i++) {
        fprintf(out, "  %-13s%s (%" PRIu64 " bytes, sha256 ", i ? "" : "data files",
                m->data_files[i]->path, m->data_files[i]->size);
        print_hex(out, &m->data_files[i]->sha256);
        if (m->data_files[i]->format)
            fprintf(out, ", %s", m->data_files[i]->format);
        fputs(")\n", out);
    }
    fprintf(out, "  %-13s", "parent");
    if (m->has_parent_sha256)
        print_hex(out, &m->parent_sha256);
    else
        fputs("none (first of its chain)", out);
    fprintf(out, "\n  %-13s", "config");
    print_hex(out, &m->config_sha256);
    fprintf(out, " (%zu bytes)\n", strlen(m->config));
    if (m->placement && m->placement[0])
        print_block(out, "placement", m->placement);
    for (size_t i = 0; i < m->n_changes; i++)
        fprintf(out, "  %-13s%s\n", i ? "" : "changes", m->changes[i]);
    for (size_t i = 0; i < m->n_scalars; i++)
        fprintf(out, "  %-13s%s = %s\n", i ? "" : "scalars", m->scalars[i]->key, m->scalars[i]->value);
    for (size_t i = 0; i < m->n_transport; i++)
        fprintf(out, "  %-13s%s = %s\n", i ? "" : "transport", m->transport[i]->key,
                m->transport[i]->value);
}

/* Each tensor, verified against its digest (BAD for all when data is NULL:
 * data.bin unreadable). Returns the number that failed; their bytes to *bytes. */
static size_t print_tensors(FILE *out, const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                            uint64_t *bytes)
{
    size_t bad = 0;
    *bytes = 0;
    fprintf(out, "tensors (%zu):\n", m->n_tensors);
    for (size_t i = 0; i < m->n_tensors; i++) {
        const Ctrain__TensorEntry *t = m->tensors[i];
        int r = data ? ct__ckpt_verify_tensor(dir, m, data, i) : CT_EIO;
        char shape[160], pre[40];
        size_t k = (size_t)snprintf(shape, sizeof shape, "[");
        for (size_t j = 0; j < t->n_shape && k < sizeof shape; j++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%" PRId64, j ? ", " : "", t->shape[j]);
        if (k < sizeof shape)
            snprintf(shape + k, sizeof shape - k, "]");
        ct__ckpt_hex_prefix(t->sha256.data, t->sha256.len, pre, sizeof pre);
        fprintf(out, "  %-3s %-40s %-3s %-20s %12" PRIu64 " B  sha256 %s\n", r == 0 ? "OK" : "BAD",
                t->name, t->dtype, shape, t->length, pre);
        if (r < 0 && data)
            fprintf(out, "      %s\n", ct_error_message());
        bad += r != 0;
        *bytes += t->length;
    }
    return bad;
}

/* Each rank record, verified, and decoded when it verifies. Returns the
 * number that failed. */
static size_t print_ranks(FILE *out, const char *dir, const Ctrain__Manifest *m, const uint8_t *data)
{
    size_t bad = 0;
    fprintf(out, "ranks (%zu):\n", m->n_ranks);
    for (size_t i = 0; i < m->n_ranks; i++) {
        const Ctrain__RankEntry *e = m->ranks[i];
        int r = data ? ct__ckpt_verify_rank(dir, m, data, i) : CT_EIO;
        char pre[40];
        ct__ckpt_hex_prefix(e->sha256.data, e->sha256.len, pre, sizeof pre);
        fprintf(out, "  %-3s rank %zu: %" PRIu64 " B at %" PRIu64 ", sha256 %s\n", r == 0 ? "OK" : "BAD",
                i, e->length, e->offset, pre);
        if (r == 0)
            print_record(out, data + e->offset, (size_t)e->length);
        else if (data)
            fprintf(out, "      %s\n", ct_error_message());
        bad += r != 0;
    }
    return bad;
}

int ct_ckpt_inspect(const char *dir, FILE *out)
{
    Ctrain__Manifest *m;
    uint8_t digest[CT_SHA256_LEN];
    fprintf(out, "checkpoint %s\n", dir);
    int rc = ct__ckpt_load_manifest(dir, &m, digest);
    if (rc < 0) {
        fprintf(out, "  %s\nverdict: BAD (%s)\n", ct_error_message(), ct_strerror(rc));
        return rc;
    }
    print_manifest(out, m, digest);
    uint8_t *data = NULL;
    int data_rc = ct__ckpt_load_data(dir, m, &data);
    if (data_rc < 0)
        fprintf(out, "  %s\n", ct_error_message());
    fprintf(out, "  %-13s%" PRIu64 " bytes\n", "data.bin", m->data_size);

    uint64_t bytes;
    size_t bad = print_tensors(out, dir, m, data, &bytes);
    bad += print_ranks(out, dir, m, data);
    size_t total = m->n_tensors + m->n_ranks;
    if (data_rc < 0) {
        fprintf(out, "verdict: BAD (data.bin unreadable: nothing verified)\n");
        rc = data_rc;
    } else if (bad) {
        fprintf(out, "verdict: BAD (%zu of %zu sections failed verification)\n", bad, total);
        rc = ct_error_set(CT_EFORMAT, "%s: %zu of %zu sections failed verification", dir, bad, total);
    } else {
        fprintf(out, "verdict: OK (%zu tensors, %" PRIu64 " bytes, and %zu rank record%s verified)\n",
                m->n_tensors, bytes, m->n_ranks, m->n_ranks == 1 ? "" : "s");
    }
    free(data);
    ctrain__manifest__free_unpacked(m, NULL);
    return rc;
}
