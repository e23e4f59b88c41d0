/* The checkpoint codec: the plain-C face of what a checkpoint records, the
 * per-rank RankRecord (pack, and an unpack that trusts nothing) and the
 * manifest's fields as accessors. Everything outside src/ckpt reads
 * checkpoints through these, so protobuf-c stays an implementation detail of
 * this directory: the schema in proto/checkpoint.proto can only be misread in
 * one place. (src/run/record.c is unrelated: the run directory's JSON records.)
 *
 * The bytes are the same as those the trainer packed with protobuf-c itself
 * before this file existed (same message, same field values), so existing
 * checkpoints read and new ones do not change.
 *
 * Not here: opening and verifying checkpoints (read.c), writing (write.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"

/* ---------------------------------------------------------------- rank records */

/* A string field of the caller's struct must end inside its array. */
static int fits(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

int ct_rank_record_pack(const struct ct_rank_record *r, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (r->n_rng < 0 || r->n_rng > CT_RANK_RECORD_MAX_RNG)
        return ct_error_set(CT_EINVAL, "rank record of rank %d: %d random streams (0 to %d allowed)",
                            (int)r->rank, r->n_rng, CT_RANK_RECORD_MAX_RNG);
    if (!fits(r->host, sizeof r->host) || !fits(r->binding, sizeof r->binding))
        return ct_error_set(CT_EINVAL, "rank record of rank %d: host or binding not terminated",
                            (int)r->rank);
    Ctrain__RankRecord rec = CTRAIN__RANK_RECORD__INIT;
    Ctrain__RngStream streams[CT_RANK_RECORD_MAX_RNG];
    Ctrain__RngStream *sp[CT_RANK_RECORD_MAX_RNG];
    for (int i = 0; i < r->n_rng; i++) {
        if (!fits(r->rng[i].purpose, sizeof r->rng[i].purpose))
            return ct_error_set(CT_EINVAL, "rank record of rank %d: stream %d's purpose not terminated",
                                (int)r->rank, i);
        ctrain__rng_stream__init(&streams[i]);
        streams[i].purpose = (char *)r->rng[i].purpose;
        streams[i].key0 = r->rng[i].key0;
        streams[i].key1 = r->rng[i].key1;
        streams[i].counter = r->rng[i].counter;
        sp[i] = &streams[i];
    }
    rec.rank = r->rank;
    rec.world_size = r->world_size;
    rec.host = (char *)r->host;
    rec.binding = (char *)r->binding;
    rec.n_rng = (size_t)r->n_rng;
    rec.rng = r->n_rng ? sp : NULL;
    rec.loader_epoch = r->loader_epoch;
    rec.loader_step = r->loader_step;
    rec.loader_first = r->loader_first;
    rec.loader_count = r->loader_count;
    size_t n = ctrain__rank_record__get_packed_size(&rec);
    uint8_t *b = malloc(n ? n : 1);
    if (!b)
        return ct_error_set(CT_ENOMEM, "rank record of rank %d: out of memory", (int)r->rank);
    *len = ctrain__rank_record__pack(&rec, b);
    *out = b;
    return 0;
}

/* Copy an unpacked string into a fixed array, or say which field is too long. */
static int copy_str(char *dst, size_t cap, const char *src, const char *what, const char *field)
{
    size_t n = strlen(src);
    if (n >= cap)
        return ct_error_set(CT_EFORMAT, "%s: %s of %zu bytes, at most %zu allowed", what, field, n,
                            cap - 1);
    memcpy(dst, src, n + 1);
    return 0;
}

int ct_rank_record_unpack(const uint8_t *bytes, size_t len, const char *what,
                          struct ct_rank_record *r)
{
    memset(r, 0, sizeof *r);
    if (!what)
        what = "rank record";
    /* The size is capped before the parser sees the bytes: protobuf-c's
     * unpacker has had memory-safety bugs (CVE-2022-33070, CVE-2022-48468,
     * fixed in 1.4.1), so it gets no more than a record can need. */
    if (len > CT_CKPT_MAX_RECORD_BYTES)
        return ct_error_set(CT_EFORMAT, "%s: %zu bytes, larger than the %zu a rank record may have",
                            what, len, CT_CKPT_MAX_RECORD_BYTES);
    if (len == 0 || !bytes)
        return ct_error_set(CT_EFORMAT, "%s: empty", what);
    Ctrain__RankRecord *rec = ctrain__rank_record__unpack(NULL, len, bytes);
    if (!rec)
        return ct_error_set(CT_EFORMAT,
                            "%s: not a valid RankRecord (%zu bytes: truncated, damaged or missing a "
                            "required field)",
                            what, len);
    int rc = 0;
    if (rec->n_rng > CT_RANK_RECORD_MAX_RNG)
        rc = ct_error_set(CT_EFORMAT, "%s: %zu random streams, at most %d allowed", what, rec->n_rng,
                          CT_RANK_RECORD_MAX_RNG);
    if (rc == 0)
        rc = copy_str(r->host, sizeof r->host, rec->host, what, "host");
    if (rc == 0)
        rc = copy_str(r->binding, sizeof r->binding, rec->binding, what, "binding");
    for (size_t i = 0; rc == 0 && i < rec->n_rng; i++) {
        char field[64];
        snprintf(field, sizeof field, "stream %zu's purpose", i);
        rc = copy_str(r->rng[i].purpose, sizeof r->rng[i].purpose, rec->rng[i]->purpose, what, field);
        r->rng[i].key0 = rec->rng[i]->key0;
        r->rng[i].key1 = rec->rng[i]->key1;
        r->rng[i].counter = rec->rng[i]->counter;
    }
    if (rc == 0) {
        r->rank = rec->rank;
        r->world_size = rec->world_size;
        r->n_rng = (int)rec->n_rng;
        r->loader_epoch = rec->loader_epoch;
        r->loader_step = rec->loader_step;
        r->loader_first = rec->loader_first;
        r->loader_count = rec->loader_count;
    }
    ctrain__rank_record__free_unpacked(rec, NULL);
    if (rc < 0)
        memset(r, 0, sizeof *r);
    return rc;
}

int ct_ckpt_read_rank_record(const struct ct_ckpt *ck, int rank, struct ct_rank_record *r)
{
    memset(r, 0, sizeof *r);
    const uint8_t *bytes;
    size_t len;
    int rc = ct_ckpt_rank_record(ck, rank, &bytes, &len);
    if (rc < 0)
        return rc;
    char what[sizeof ck->dir + 64];
    snprintf(what, sizeof what, "%s/data.bin: rank record %d", ck->dir, rank);
    if ((rc = ct_rank_record_unpack(bytes, len, what, r)) < 0)
        return rc;
    /* The manifest put this record at `rank`'s place; a record that names
     * another rank was written by a confused writer and restores nothing. */
    if (r->rank != rank) {
        rc = ct_error_set(CT_EFORMAT, "%s says it is rank %d", what, (int)r->rank);
        memset(r, 0, sizeof *r);
    }
    return rc;
}

/* ---------------------------------------------------------------- manifest fields */

static const Ctrain__Manifest *man(const struct ct_ckpt *ck)
{
    return ck ? ck->manifest : NULL;
}

const char *ct_ckpt_config_text(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? m->config : NULL;
}

const char *ct_ckpt_code_version(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? m->code_version : NULL;
}

const char *ct_ckpt_placement(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return !m ? NULL : m->placement ? m->placement : "";
}

int64_t ct_ckpt_step(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? m->step : 0;
}

int64_t ct_ckpt_epoch(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? m->epoch : 0;
}

int64_t ct_ckpt_epoch_step(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? m->epoch_step : 0;
}

int64_t ct_ckpt_created_unix(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m && m->has_created_unix ? m->created_unix : 0;
}

int ct_ckpt_world_size(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? (int)m->world_size : 0;
}

int ct_ckpt_parent_digest(const struct ct_ckpt *ck, uint8_t out[CT_SHA256_LEN])
{
    const Ctrain__Manifest *m = man(ck);
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck ? ck->dir : "(null)");
    if (!m->has_parent_sha256)
        return ct_error_set(CT_ENOENT, "%s: no parent (the first checkpoint of its chain)", ck->dir);
    /* ct_ckpt_open checked its length. */
    memcpy(out, m->parent_sha256.data, CT_SHA256_LEN);
    return 0;
}

int ct_ckpt_n_data_files(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? (int)m->n_data_files : 0;
}

int ct_ckpt_data_file(const struct ct_ckpt *ck, int i, struct ct_ckpt_data_file *out)
{
    const Ctrain__Manifest *m = man(ck);
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck ? ck->dir : "(null)");
    if (i < 0 || (size_t)i >= m->n_data_files)
        return ct_error_set(CT_ENOENT, "%s: no data file %d (%zu recorded)", ck->dir, i,
                            m->n_data_files);
    const Ctrain__DataFile *f = m->data_files[i];
    /* ct_ckpt_open does not check these lengths: a short digest must not be
     * read past its end, nor compare equal to anything. */
    if (f->sha256.len != CT_SHA256_LEN)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: data file %s: digest of %zu bytes, expected %d",
                            ck->dir, f->path, f->sha256.len, CT_SHA256_LEN);
    out->path = f->path;
    out->size = f->size;
    memcpy(out->sha256, f->sha256.data, CT_SHA256_LEN);
    out->format = f->format;
    return 0;
}

int ct_ckpt_find_data_file(const struct ct_ckpt *ck, const char *path, struct ct_ckpt_data_file *out)
{
    const Ctrain__Manifest *m = man(ck);
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck ? ck->dir : "(null)");
    for (size_t i = 0; i < m->n_data_files; i++)
        if (strcmp(m->data_files[i]->path, path) == 0)
            return ct_ckpt_data_file(ck, (int)i, out);
    return ct_error_set(CT_ENOENT, "%s: no data file %s recorded", ck->dir, path);
}

int ct_ckpt_n_libraries(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? (int)m->n_libraries : 0;
}

int ct_ckpt_library(const struct ct_ckpt *ck, int i, struct ct_ckpt_kv *out)
{
    const Ctrain__Manifest *m = man(ck);
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck ? ck->dir : "(null)");
    if (i < 0 || (size_t)i >= m->n_libraries)
        return ct_error_set(CT_ENOENT, "%s: no library %d (%zu recorded)", ck->dir, i,
                            m->n_libraries);
    out->key = m->libraries[i]->key;
    out->value = m->libraries[i]->value;
    return 0;
}

int ct_ckpt_n_changes(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = man(ck);
    return m ? (int)m->n_changes : 0;
}

const char *ct_ckpt_change(const struct ct_ckpt *ck, int i)
{
    const Ctrain__Manifest *m = man(ck);
    return m && i >= 0 && (size_t)i < m->n_changes ? m->changes[i] : NULL;
}
