/* The manifest of a checkpoint, built by rank 0 from the content, the
 * layout and the section digests (proto/checkpoint.proto), and stored in
 * the temporary directory with its sidecar manifest.sha256 ("HEX
 * manifest.pb\n", what sha256sum -c reads). The SHA-256 of the packed
 * manifest is the checkpoint's digest. Not here: reading it back
 * (common.c's ct__ckpt_load_manifest checks what this writes). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/write-impl.h"
#include "core/error.h"

/* The manifest's repeated fields, allocated together. */
struct manifest_parts {
    Ctrain__TensorEntry *te, **tp;
    int64_t *shapes; /* 4 per tensor */
    Ctrain__RankEntry *re, **rp;
    Ctrain__KeyValue *kv, **lp, **sp, **xp; /* libraries, then scalars, then transport */
    Ctrain__DataFile *df, **dp;
    uint8_t config_sha[CT_SHA256_LEN];
};

static void parts_free(struct manifest_parts *p)
{
    free(p->te);
    free(p->tp);
    free(p->shapes);
    free(p->re);
    free(p->rp);
    free(p->kv);
    free(p->lp);
    free(p->sp);
    free(p->xp);
    free(p->df);
    free(p->dp);
}

static int parts_alloc(struct manifest_parts *p, size_t nt, size_t nw, size_t nl, size_t ns,
                       size_t nd, size_t nx)
{
    memset(p, 0, sizeof *p);
    p->te = calloc(nt + 1, sizeof *p->te);
    p->tp = calloc(nt + 1, sizeof *p->tp);
    p->shapes = calloc(4 * nt + 1, sizeof *p->shapes);
    p->re = calloc(nw, sizeof *p->re);
    p->rp = calloc(nw, sizeof *p->rp);
    p->kv = calloc(nl + ns + nx + 1, sizeof *p->kv);
    p->lp = calloc(nl + 1, sizeof *p->lp);
    p->sp = calloc(ns + 1, sizeof *p->sp);
    p->xp = calloc(nx + 1, sizeof *p->xp);
    p->df = calloc(nd + 1, sizeof *p->df);
    p->dp = calloc(nd + 1, sizeof *p->dp);
    if (!p->te || !p->tp || !p->shapes || !p->re || !p->rp || !p->kv || !p->lp || !p->sp || !p->xp ||
        !p->df || !p->dp) {
        parts_free(p);
        return ct_error_set(CT_ENOMEM, "checkpoint manifest: out of memory");
    }
    return 0;
}

/* What produced the state: libraries, data files, the parent checkpoint,
 * placement, config changes, creation time and scalars. */
static void manifest_provenance(Ctrain__Manifest *m, const struct ct_ckpt_content *ct,
                                struct manifest_parts *p)
{
    size_t nl = (size_t)ct->n_libraries, nd = (size_t)ct->n_data_files, ns = (size_t)ct->n_scalars;
    for (size_t i = 0; i < nl; i++) {
        ctrain__key_value__init(&p->kv[i]);
        p->kv[i].key = (char *)(ct->libraries[i].key ? ct->libraries[i].key : "");
        p->kv[i].value = (char *)(ct->libraries[i].value ? ct->libraries[i].value : "");
        p->lp[i] = &p->kv[i];
    }
    m->n_libraries = nl;
    m->libraries = p->lp;
    for (size_t i = 0; i < nd; i++) {
        Ctrain__DataFile *df = &p->df[i];
        ctrain__data_file__init(df);
        df->path = (char *)(ct->data_files[i].path ? ct->data_files[i].path : "");
        df->size = ct->data_files[i].size;
        df->sha256 = (ProtobufCBinaryData){CT_SHA256_LEN, (uint8_t *)ct->data_files[i].sha256};
        df->format = (char *)ct->data_files[i].format;
        p->dp[i] = df;
    }
    m->n_data_files = nd;
    m->data_files = p->dp;
    if (ct->parent_sha256) {
        m->has_parent_sha256 = 1;
        m->parent_sha256 = (ProtobufCBinaryData){CT_SHA256_LEN, (uint8_t *)ct->parent_sha256};
    }
    m->placement = (char *)ct->placement;
    m->n_changes = (size_t)(ct->changes ? ct->n_changes : 0);
    m->changes = (char **)ct->changes;
    /* SOURCE_DATE_EPOCH makes a manifest reproducible byte for byte. */
    const char *sde = getenv("SOURCE_DATE_EPOCH");
    m->has_created_unix = 1;
    m->created_unix = sde && *sde ? strtoll(sde, NULL, 10) : (int64_t)time(NULL);
    for (size_t i = 0; i < ns; i++) {
        Ctrain__KeyValue *s = &p->kv[nl + i];
        ctrain__key_value__init(s);
        s->key = (char *)(ct->scalars[i].key ? ct->scalars[i].key : "");
        s->value = (char *)(ct->scalars[i].value ? ct->scalars[i].value : "");
        p->sp[i] = s;
    }
    m->n_scalars = ns;
    m->scalars = p->sp;
    const size_t nx = (size_t)(ct->transport ? ct->n_transport : 0);
    for (size_t i = 0; i < nx; i++) {
        Ctrain__KeyValue *x = &p->kv[nl + ns + i];
        ctrain__key_value__init(x);
        x->key = (char *)(ct->transport[i].key ? ct->transport[i].key : "");
        x->value = (char *)(ct->transport[i].value ? ct->transport[i].value : "");
        p->xp[i] = x;
    }
    m->n_transport = nx;
    m->transport = p->xp;
}

/* Where each tensor and each rank record lies in the data file, and its digest. */
static void manifest_sections(Ctrain__Manifest *m, const struct ct_ckpt_content *ct,
                              const struct ct__ckpt_layout *L, int world, const uint8_t *tensor_sha,
                              struct manifest_parts *p)
{
    size_t nt = (size_t)L->n, nw = (size_t)world;
    for (size_t i = 0; i < nt; i++) {
        const struct ct_ckpt_tensor *t = &ct->tensors[i];
        Ctrain__TensorEntry *te = &p->te[i];
        ctrain__tensor_entry__init(te);
        te->name = (char *)t->name;
        te->dtype = (char *)ct_dtype_name(t->dtype);
        for (int k = 0; k < t->ndim; k++)
            p->shapes[4 * i + (size_t)k] = t->shape[k];
        te->n_shape = (size_t)t->ndim;
        te->shape = &p->shapes[4 * i];
        te->offset = L->off[i];
        te->length = L->len[i];
        te->sha256 = (ProtobufCBinaryData){CT_SHA256_LEN, (uint8_t *)&tensor_sha[i * CT_SHA256_LEN]};
        p->tp[i] = te;
    }
    m->n_tensors = nt;
    m->tensors = p->tp;
    for (size_t r = 0; r < nw; r++) {
        ctrain__rank_entry__init(&p->re[r]);
        p->re[r].rank = (int32_t)r;
        p->re[r].offset = L->rec_off[r];
        p->re[r].length = L->rec[r].len;
        p->re[r].sha256 = (ProtobufCBinaryData){CT_SHA256_LEN, (uint8_t *)L->rec[r].sha};
        p->rp[r] = &p->re[r];
    }
    m->n_ranks = nw;
    m->ranks = p->rp;
    m->data_size = L->data_size;
}

/* The packed manifest in *out (malloc'd), refused above the reader's cap. */
static int manifest_pack(const Ctrain__Manifest *m, uint8_t **out, size_t *out_len)
{
    size_t len = ctrain__manifest__get_packed_size(m);
    if (len > CT_CKPT_MAX_MANIFEST_BYTES)
        return ct_error_set(CT_ERANGE, "checkpoint manifest of %zu bytes exceeds the %zu-byte cap",
                            len, CT_CKPT_MAX_MANIFEST_BYTES);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return ct_error_set(CT_ENOMEM, "checkpoint manifest: out of memory");
    ctrain__manifest__pack(m, buf);
    *out = buf;
    *out_len = len;
    return 0;
}

int ct__ckpt_manifest_build(const struct ct_ckpt_content *ct, const struct ct__ckpt_layout *L,
                            int world, const uint8_t *tensor_sha, uint8_t **out, size_t *out_len)
{
    struct manifest_parts parts;
    int rc = parts_alloc(&parts, (size_t)L->n, (size_t)world, (size_t)ct->n_libraries,
                         (size_t)ct->n_scalars, (size_t)ct->n_data_files,
                         (size_t)(ct->transport ? ct->n_transport : 0));
    if (rc < 0)
        return rc;
    Ctrain__Manifest m = CTRAIN__MANIFEST__INIT;
    const char *config = ct->config_text ? ct->config_text : "";
    if ((rc = ct_sha256_buf(config, strlen(config), parts.config_sha)) == 0) {
        m.format_version = CT_CKPT_FORMAT_VERSION;
        m.step = ct->step;
        m.epoch = ct->epoch;
        m.epoch_step = ct->epoch_step;
        m.world_size = world;
        m.config = (char *)config;
        m.config_sha256 = (ProtobufCBinaryData){CT_SHA256_LEN, parts.config_sha};
        m.code_version = (char *)(ct->code_version ? ct->code_version : "unknown");
        manifest_provenance(&m, ct, &parts);
        manifest_sections(&m, ct, L, world, tensor_sha, &parts);
        rc = manifest_pack(&m, out, out_len);
    }
    parts_free(&parts);
    return rc;
}

int ct__ckpt_manifest_store(const char *dir, const uint8_t *manifest, size_t len,
                            uint8_t digest[CT_SHA256_LEN])
{
    int rc = ct_sha256_buf(manifest, len, digest);
    if (rc == 0) {
        char line[CT_SHA256_HEX_LEN + 16];
        ct_sha256_hex(digest, line);
        strcat(line, "  manifest.pb\n");
        rc = ct__ckpt_write_file(dir, "manifest.sha256", line, strlen(line));
    }
    /* Written in place: the temporary directory is invisible to readers
     * until its rename, which is what makes the whole atomic. */
    if (rc == 0)
        rc = ct__ckpt_write_file(dir, "manifest.pb", manifest, len);
    if (rc == 0)
        rc = ct__ckpt_fsync_dir(dir);
    return rc;
}
