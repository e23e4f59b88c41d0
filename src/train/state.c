/* Trainer state <-> checkpoint sections (see state.h). */
#include "train/state.h"

#include <inttypes.h>
#include <stdarg.h>
#include <mpi.h>
#include <openssl/crypto.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <hwloc.h>

#include "core/error.h"
#include "core/gemm.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/version.h"
#include "core/threads.h"
#include "proto/checkpoint.pb-c.h"

/* ---------------------------------------------------------------- sections */

struct section_list {
    struct ct_ckpt_tensor *t;
    int n, cap;
};

static int add_views(struct section_list *sl, const char *prefix, const struct ct_flat *flat)
{
    const struct ct_layout *lay = flat->layout;
    if (sl->n + lay->n > sl->cap) {
        int cap = sl->cap + lay->n + 16;
        struct ct_ckpt_tensor *t = realloc(sl->t, (size_t)cap * sizeof *t);
        if (!t)
            return ct_error_set(CT_ENOMEM, "checkpoint: out of memory");
        sl->t = t;
        sl->cap = cap;
    }
    for (int i = 0; i < lay->n; i++) {
        struct ct_ckpt_tensor *t = &sl->t[sl->n++];
        memset(t, 0, sizeof *t);
        snprintf(t->name, sizeof t->name, "%s%s", prefix, lay->views[i].name);
        t->dtype = CT_DTYPE_F32;
        t->ndim = lay->views[i].ndim;
        for (int d = 0; d < t->ndim; d++)
            t->shape[d] = lay->views[i].shape[d];
        t->data = ct_flat_view(flat, i);
    }
    return 0;
}

/* Every tensor section of the trainer, in a fixed order. */
static int collect_sections(struct ct_trainer *tr, struct section_list *sl)
{
    int rc = add_views(sl, "params/", &tr->model.params);
    if (rc == 0 && tr->model.buffer_layout.n)
        rc = add_views(sl, "buffers/", &tr->model.buffers);
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    int ns = ct_optimizer_state(&tr->opt, bufs, names);
    for (int i = 0; i < ns && rc == 0; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optim/%s/", names[i]);
        rc = add_views(sl, prefix, bufs[i]);
    }
    return rc;
}

/* ---------------------------------------------------------------- provenance */

#define N_LIBS 7

static void library_versions(struct ct_ckpt_kv *kv, char store[N_LIBS][256])
{
    int len = 0;
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(mpi, &len);
    char *nl = strchr(mpi, '\n');
    if (nl)
        *nl = '\0';
    snprintf(store[0], 256, "%s", mpi);
    unsigned hv = hwloc_get_api_version();
    snprintf(store[1], 256, "%u.%u.%u", hv >> 16, (hv >> 8) & 0xff, hv & 0xff);
    snprintf(store[2], 256, "%s", ct_blas_config());
    snprintf(store[3], 256, "%s", protobuf_c_version());
    snprintf(store[4], 256, "%s", zlibVersion());
    snprintf(store[5], 256, "%s", OpenSSL_version(OPENSSL_VERSION));
    /* Which matrix products the convolutions ran (core/gemm.h): they round
     * differently, so an audit replaying a checkpoint needs the same one. */
    snprintf(store[6], 256, "%s", ct_sgemm_impl());
    static const char *const names[N_LIBS] = {"mpi",  "hwloc",   "openblas", "protobuf-c",
                                              "zlib", "openssl", "gemm"};
    for (int i = 0; i < N_LIBS; i++) {
        kv[i].key = names[i];
        kv[i].value = store[i];
    }
}

static const char *const purpose_names[] = {"init", "shuffle", "dropout", "augment"};
static const uint32_t purposes[] = {CT_RNG_INIT, CT_RNG_SHUFFLE, CT_RNG_DROPOUT, CT_RNG_AUGMENT};

/* This rank's record, serialized (malloc'd). */
static int pack_record(struct ct_trainer *tr, uint8_t **out, size_t *len)
{
    Ctrain__RankRecord rec = CTRAIN__RANK_RECORD__INIT;
    Ctrain__RngStream streams[4];
    Ctrain__RngStream *sp[4];
    char binding[800];
    snprintf(binding, sizeof binding, "cpus %s; numa %s; blas threads %d; device %s; bound by %s",
             tr->placement.cpus, tr->placement.numa, tr->placement.threads, tr->placement.device,
             tr->placement.bound_by);
    rec.rank = tr->comm->rank;
    rec.world_size = tr->comm->world;
    rec.host = tr->comm->host;
    rec.binding = binding;
    for (int i = 0; i < 4; i++) {
        ctrain__rng_stream__init(&streams[i]);
        struct ct_rng_key k = ct_rng_key(tr->cfg->train.seed, purposes[i]);
        streams[i].purpose = (char *)purpose_names[i];
        streams[i].key0 = k.k[0];
        streams[i].key1 = k.k[1];
        /* The next counter each stream would use: shuffling is keyed by the
         * epoch, dropout and augmentation by (epoch, sample), init is done. */
        streams[i].counter = purposes[i] == CT_RNG_INIT ? 0 : (uint64_t)tr->sampler.epoch;
        sp[i] = &streams[i];
    }
    rec.n_rng = 4;
    rec.rng = sp;
    rec.loader_epoch = tr->sampler.epoch;
    rec.loader_step = tr->sampler.step;
    size_t first, count;
    ct_shard_range((size_t)tr->cfg->train.global_batch, tr->comm->world, tr->comm->rank, &first, &count);
    rec.loader_first = first;
    rec.loader_count = count;
    *len = ctrain__rank_record__get_packed_size(&rec);
    *out = malloc(*len ? *len : 1);
    if (!*out)
        return ct_error_set(CT_ENOMEM, "checkpoint: out of memory");
    ctrain__rank_record__pack(&rec, *out);
    return 0;
}

static int config_text(const struct ct_config *cfg, char **text)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    if (!f)
        return ct_error_set(CT_ENOMEM, "checkpoint: cannot hold the config text");
    int rc = ct_config_write(cfg, f);
    if (fclose(f) != 0 && rc == 0)
        rc = ct_error_set(CT_ENOMEM, "checkpoint: cannot hold the config text");
    return rc;
}

/* After a failed write (every rank got the same error): a failure at the
 * last phase comes after the commit, so this step's checkpoint may be the
 * newest one all the same. If `latest` names it, it is the parent of the
 * next one (a run going on with checkpoint.on_error = continue must not
 * break the hash chain). Collective; keeps the failure's message. */
static void note_committed(struct ct_trainer *tr)
{
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", ct_error_message());
    int64_t committed = 0;
    uint8_t digest[CT_SHA256_LEN] = {0};
    if (tr->comm->rank == 0) {
        char path[1200], want[64];
        snprintf(want, sizeof want, "/ckpt-%" PRId64, tr->step);
        size_t lw = strlen(want), lp;
        static struct ct_ckpt ck;
        if (ct_ckpt_find_latest(tr->run_dir, path, sizeof path) == 0 && (lp = strlen(path)) >= lw &&
            strcmp(path + lp - lw, want) == 0 && ct_ckpt_open(&ck, path) == 0) {
            memcpy(digest, ck.digest, sizeof digest);
            committed = 1;
            ct_ckpt_close(&ck);
        }
    }
    if (ct_comm_bcast(tr->comm, &committed, sizeof committed, 0) == 0 &&
        ct_comm_bcast(tr->comm, digest, sizeof digest, 0) == 0 && committed) {
        memcpy(tr->parent_sha256, digest, sizeof digest);
        tr->have_parent = 1;
        tr->last_ckpt_step = tr->step;
        tr->n_changes = 0;
    }
    ct_error_set(CT_EIO, "%s", saved);
}

int ct__trainer_save(struct ct_trainer *tr)
{
    const struct ct_config *cfg = tr->cfg;
    /* Buffers follow DDP's policy: rank 0's are the model's (see evaluate). */
    int rc = 0;
    if (tr->model.buffers.numel > 0)
        rc = ct_comm_bcast(tr->comm, tr->model.buffers.data, tr->model.buffers.numel * sizeof(float), 0);
    if (rc < 0)
        return rc;
    struct section_list sl = {0};
    char *cfg_text = NULL;
    uint8_t *record = NULL;
    size_t record_len = 0;
    rc = collect_sections(tr, &sl);
    if (rc == 0)
        rc = config_text(cfg, &cfg_text);
    if (rc == 0)
        rc = pack_record(tr, &record, &record_len);
    rc = ct_comm_agree(tr->comm, rc);
    if (rc < 0)
        goto out;

    struct ct_ckpt_kv libs[N_LIBS];
    char lib_store[N_LIBS][256];
    library_versions(libs, lib_store);

    char sc_store[8][64];
    struct ct_ckpt_kv scalars[8];
    int ns = 0;
#define SCALAR(k, fmt, v)                                                  \
    do {                                                                   \
        snprintf(sc_store[ns], sizeof sc_store[ns], fmt, v);               \
        scalars[ns].key = (k);                                             \
        scalars[ns].value = sc_store[ns];                                  \
        ns++;                                                              \
    } while (0)
    SCALAR("train.step", "%" PRId64, tr->step);
    SCALAR("optim.kind", "%s", ct_optim_kind_name(tr->opt.kind));
    SCALAR("optim.steps", "%" PRId64, *ct_optimizer_steps(&tr->opt));
    SCALAR("sampler.epoch", "%" PRId64, tr->sampler.epoch);
    SCALAR("sampler.step", "%" PRId64, tr->sampler.step);
    SCALAR("schedule.total_steps", "%" PRId64, tr->sched.total_steps);
    SCALAR("schedule.kind", "%d", (int)tr->sched.kind);
#undef SCALAR

    struct ct_ckpt_content content = {
        .step = tr->step,
        .epoch = tr->sampler.epoch,
        .epoch_step = tr->sampler.step,
        .config_text = cfg_text,
        .code_version = CT_VERSION " (" CT_GIT_DESCRIBE ")",
        .libraries = libs,
        .n_libraries = N_LIBS,
        .data_files = tr->data_files,
        .n_data_files = tr->n_data_files,
        .parent_sha256 = tr->have_parent ? tr->parent_sha256 : NULL,
        .placement = tr->placement_table ? tr->placement_table : "",
        .changes = (const char *const *)tr->changes,
        .n_changes = tr->n_changes,
        .scalars = scalars,
        .n_scalars = ns,
        .tensors = sl.t,
        .n_tensors = sl.n,
        .record = record,
        .record_len = record_len,
    };
    struct ct_ckpt_write_params wp = {
        .run_dir = tr->run_dir,
        .keep_last = cfg->checkpoint.keep_last,
        .keep_every = (int)cfg->checkpoint.keep_every,
    };
    char path[1200];
    double t0 = MPI_Wtime();
    rc = ct_ckpt_write(tr->comm, &wp, &content, tr->parent_sha256, path, sizeof path);
    if (rc == 0) {
        tr->have_parent = 1;
        tr->last_ckpt_step = tr->step;
        /* The changes are recorded once, in the first checkpoint after them. */
        tr->n_changes = 0;
        ct_log_info("checkpoint %s written in %.2f s", path, MPI_Wtime() - t0);
    } else {
        note_committed(tr);
    }
out:
    free(sl.t);
    free(cfg_text);
    free(record);
    return rc;
}

/* ---------------------------------------------------------------- restore */

static int restore_views(const struct ct_ckpt *ck, const char *prefix, struct ct_flat *flat)
{
    const struct ct_layout *lay = flat->layout;
    for (int i = 0; i < lay->n; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, lay->views[i].name);
        int rc = ct_ckpt_read_tensor(ck, name, CT_DTYPE_F32, lay->views[i].ndim,
                                     lay->views[i].shape, ct_flat_view(flat, i));
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ct__model_restore(struct ct_model *m, const struct ct_ckpt *ck)
{
    int rc = restore_views(ck, "params/", &m->params);
    if (rc == 0 && m->buffer_layout.n)
        rc = restore_views(ck, "buffers/", &m->buffers);
    return rc;
}

static int scalar_i64(const struct ct_ckpt *ck, const char *key, int64_t *v)
{
    const char *s;
    int rc = ct_ckpt_scalar(ck, key, &s);
    if (rc < 0)
        return ct_error_set(CT_EFORMAT, "%s: scalar %s missing", ck->dir, key);
    char *end;
    long long x = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0')
        return ct_error_set(CT_EFORMAT, "%s: scalar %s = '%s' is not an integer", ck->dir, key, s);
    *v = x;
    return 0;
}

static int add_change(struct ct_trainer *tr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add_change(struct ct_trainer *tr, const char *fmt, ...)
{
    if (tr->n_changes >= CT_TRAINER_MAX_CHANGES)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tr->changes[tr->n_changes] = strdup(buf);
    if (!tr->changes[tr->n_changes])
        return ct_error_set(CT_ENOMEM, "out of memory");
    tr->n_changes++;
    return 0;
}

int ct__trainer_restore(struct ct_trainer *tr, const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *man = ck->manifest;
    const struct ct_config *cfg = tr->cfg;

    /* Same experiment? Compare the recorded config with ours. */
    static struct ct_config old;
    int rc = ct_config_load_text(&old, man->config, cfg->path, NULL, 0);
    if (rc < 0)
        return ct_error_wrap(CT_EFORMAT, "%s: the recorded config does not load", ck->dir);
    char diff[4096];
    int n_runtime = 0;
    int n_state = ct_config_diff(&old, cfg, diff, sizeof diff, &n_runtime);
    if (n_state > 0)
        return ct_error_set(CT_EMISMATCH,
                            "%s was written by a different experiment; refusing to resume it "
                            "with %s:\n%s",
                            ck->dir, cfg->path, diff);
    /* The same data: the files' digests must match what the checkpoint saw. */
    for (size_t i = 0; i < man->n_data_files; i++)
        for (int j = 0; j < tr->n_data_files; j++)
            if (strcmp(man->data_files[i]->path, tr->data_files[j].path) == 0 &&
                (man->data_files[i]->sha256.len != CT_SHA256_LEN ||
                 memcmp(man->data_files[i]->sha256.data, tr->data_files[j].sha256, CT_SHA256_LEN) != 0))
                return ct_error_set(CT_EMISMATCH,
                                    "%s: data file %s has changed since the checkpoint was written "
                                    "(its SHA-256 differs)",
                                    ck->dir, tr->data_files[j].path);
    if (n_runtime > 0) {
        char *line = diff;
        while (line && *line) {
            char *nl = strchr(line, '\n');
            if (nl)
                *nl = '\0';
            if ((rc = add_change(tr, "%s", line)) < 0)
                return rc;
            line = nl ? nl + 1 : NULL;
        }
    }
    if (man->world_size != tr->comm->world &&
        (rc = add_change(tr, "world_size: %d -> %d (rank records re-derived)", man->world_size,
                         tr->comm->world)) < 0)
        return rc;

    /* The state. */
    if ((rc = ct__model_restore(&tr->model, ck)) < 0)
        return rc;
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    int ns = ct_optimizer_state(&tr->opt, bufs, names);
    for (int i = 0; i < ns; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optim/%s/", names[i]);
        if ((rc = restore_views(ck, prefix, bufs[i])) < 0)
            return rc;
    }
    int64_t step, osteps, sepoch, sstep;
    if ((rc = scalar_i64(ck, "train.step", &step)) < 0 ||
        (rc = scalar_i64(ck, "optim.steps", &osteps)) < 0 ||
        (rc = scalar_i64(ck, "sampler.epoch", &sepoch)) < 0 ||
        (rc = scalar_i64(ck, "sampler.step", &sstep)) < 0)
        return rc;
    if (step != man->step || sepoch != man->epoch || sstep != man->epoch_step)
        return ct_error_set(CT_EFORMAT, "%s: manifest and scalars disagree on the position", ck->dir);
    if (sstep > tr->steps_per_epoch || sepoch < 0 || sstep < 0)
        return ct_error_set(CT_EFORMAT, "%s: sampler position (epoch %" PRId64 ", step %" PRId64
                            ") out of range", ck->dir, sepoch, sstep);
    tr->step = step;
    *ct_optimizer_steps(&tr->opt) = osteps;
    /* A checkpoint taken after an epoch's last step (a step cadence or a
     * stop request that fell there) continues with the next epoch. */
    if (sstep == tr->steps_per_epoch)
        ct_sampler_seek(&tr->sampler, sepoch + 1, 0);
    else
        ct_sampler_seek(&tr->sampler, sepoch, sstep);

    /* This rank's record, when the checkpoint has one for this rank: its
     * random streams must be the ones the seed gives (they are derived, not
     * drawn, so a mismatch means the record belongs to another run). With a
     * different world size the records are re-derived (noted above). */
    if (tr->comm->rank < (int)man->n_ranks) {
        const uint8_t *bytes;
        size_t len;
        if ((rc = ct_ckpt_rank_record(ck, tr->comm->rank, &bytes, &len)) < 0)
            return rc;
        Ctrain__RankRecord *rec = ctrain__rank_record__unpack(NULL, len, bytes);
        if (!rec)
            return ct_error_set(CT_EFORMAT, "%s: rank record %d does not parse", ck->dir, tr->comm->rank);
        rc = 0;
        if (rec->rank != tr->comm->rank)
            rc = ct_error_set(CT_EFORMAT, "%s: rank record %d says it is rank %d", ck->dir,
                              tr->comm->rank, rec->rank);
        for (size_t i = 0; i < rec->n_rng && rc == 0; i++)
            for (int j = 0; j < 4; j++)
                if (strcmp(rec->rng[i]->purpose, purpose_names[j]) == 0) {
                    struct ct_rng_key k = ct_rng_key(cfg->train.seed, purposes[j]);
                    if (rec->rng[i]->key0 != k.k[0] || rec->rng[i]->key1 != k.k[1])
                        rc = ct_error_set(CT_EMISMATCH, "%s: rank %d's %s stream has another key than seed %" PRIu64 " gives",
                                          ck->dir, tr->comm->rank, purpose_names[j], cfg->train.seed);
                }
        if (rc == 0 && (rec->loader_epoch != sepoch || rec->loader_step != sstep))
            rc = ct_error_set(CT_EFORMAT, "%s: rank %d's loader position disagrees with the manifest",
                              ck->dir, tr->comm->rank);
        ctrain__rank_record__free_unpacked(rec, NULL);
        if (rc < 0)
            return rc;
    }
    memcpy(tr->parent_sha256, ck->digest, CT_SHA256_LEN);
    tr->have_parent = 1;
    tr->last_ckpt_step = step;
    return 0;
}

const char *ct__ckpt_config_text(const struct ct_ckpt *ck)
{
    return ((const Ctrain__Manifest *)ck->manifest)->config;
}

int64_t ct__ckpt_step(const struct ct_ckpt *ck) { return ((const Ctrain__Manifest *)ck->manifest)->step; }
