/* Trainer state <-> checkpoint sections (see state.h). */
#include "train/state.h"
#include "train/trainer-impl.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/sampler.h"
#include "run/owner.h"
#include "run/provenance.h"
#include "ckpt/chain.h"

/* ---------------------------------------------------------------- sections */

struct section_list {
    struct ct_ckpt_tensor *t;
    int n, cap;
};

static int grow(struct section_list *sl, int more)
{
    if (sl->n + more > sl->cap) {
        int cap = sl->cap + more + 16;
        struct ct_ckpt_tensor *t = realloc(sl->t, (size_t)cap * sizeof *t);
        if (!t)
            return ct_error_set(CT_ENOMEM, "checkpoint: out of memory");
        sl->t = t;
        sl->cap = cap;
    }
    return 0;
}

/* A float32 section named prefix + the view's name, of the view's shape. */
static int name_view(struct ct_ckpt_tensor *t, const char *prefix, const struct ct_view *v)
{
    memset(t, 0, sizeof *t);
    if ((size_t)snprintf(t->name, sizeof t->name, "%s%s", prefix, v->name) >= sizeof t->name)
        return ct_error_set(CT_EINVAL, "checkpoint section %s%s: the name is too long", prefix,
                            v->name);
    t->dtype = CT_DTYPE_F32;
    t->ndim = v->ndim;
    for (int d = 0; d < t->ndim; d++)
        t->shape[d] = v->shape[d];
    return 0;
}

/* Elements [*a, *b) of view v that fall in the flat slice [lo, hi); when
 * none does, a == b == lo (an empty part at the slice's start, whose byte
 * range in the view is [0, 0)). */
static void view_in_slice(const struct ct_view *v, size_t lo, size_t hi, size_t *a, size_t *b)
{
    *a = v->offset > lo ? v->offset : lo;
    *b = v->offset + v->numel < hi ? v->offset + v->numel : hi;
    if (*b <= *a)
        *a = *b = lo;
}

/* That part in bytes of the view's section. */
static void part_bytes(const struct ct_view *v, size_t a, size_t b, uint64_t *begin, uint64_t *end)
{
    *begin = b > a ? (uint64_t)(a - v->offset) * sizeof(float) : 0;
    *end = b > a ? (uint64_t)(b - v->offset) * sizeof(float) : 0;
}

/* A sharded optimizer's state buffer (`state` holds flat elements [lo, hi)
 * of the parameters' layout): one sharded section per view, this rank's
 * part of it in bytes; the file gets the same bytes as an unsharded run's. */
static int add_sharded_views(struct section_list *sl, const char *prefix, const float *state,
                             const struct ct_layout *lay, size_t lo, size_t hi)
{
    int rc = grow(sl, lay->n);
    for (int i = 0; i < lay->n && rc == 0; i++) {
        const struct ct_view *v = &lay->views[i];
        struct ct_ckpt_tensor *t = &sl->t[sl->n++];
        if ((rc = name_view(t, prefix, v)) < 0)
            break;
        size_t a, b;
        view_in_slice(v, lo, hi, &a, &b);
        t->sharded = 1;
        part_bytes(v, a, b, &t->part_begin, &t->part_end);
        t->data = b > a ? state + (a - lo) : NULL;
    }
    return rc;
}

static int add_views(struct section_list *sl, const char *prefix, const struct ct_flat *flat)
{
    const struct ct_layout *lay = flat->layout;
    int rc = grow(sl, lay->n);
    for (int i = 0; i < lay->n && rc == 0; i++) {
        struct ct_ckpt_tensor *t = &sl->t[sl->n++];
        if ((rc = name_view(t, prefix, &lay->views[i])) == 0)
            t->data = ct_flat_view(flat, i);
    }
    return rc;
}

/* Every tensor section of the trainer, in a fixed order. */
static int collect_sections(struct ct_session *s, struct section_list *sl)
{
    int rc = add_views(sl, "params/", &s->model.params);
    if (rc == 0 && s->model.buffer_layout.n)
        rc = add_views(sl, "buffers/", &s->model.buffers);
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    int ns = ct_optimizer_state(&s->opt, bufs, names);
    for (int i = 0; i < ns && rc == 0; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optim/%s/", names[i]);
        if (s->sharded) {
            rc = add_sharded_views(sl, prefix, bufs[i]->data, s->model.params.layout, s->shard.lo,
                                   s->shard.hi);
        } else {
            struct ct_flat f = {bufs[i]->data, bufs[i]->numel, s->model.params.layout};
            rc = add_views(sl, prefix, &f);
        }
    }
    return rc;
}

/* Error feedback (dist.grad_compress_feedback): every rank's residual, as
 * sections "grad_residual/rank<R>/<name>" in the gradient layout. The rank
 * records are protobuf, capped at CT_CKPT_MAX_RECORD_BYTES (1 MiB, against
 * the parser's past memory-safety bugs) and a residual is a float per
 * parameter (0.9 MiB for the mlp, far more for others), so the residuals
 * travel as tensors instead: raw, digested, checked for shape like the
 * parameters. Sections must be the same bytes on every rank (the writer
 * stripes them), so the residuals are gathered to rank 0 and broadcast:
 * world * params floats per rank for the time of the write. Padding
 * between views is not saved: its gradient, hence its residual, is zero.
 * Collective (every rank with the same config calls it); *all is the
 * gathered buffer the sections point into, for the caller to free. */
static int add_residuals(struct ct_trainer *tr, struct section_list *sl, float **all)
{
    *all = NULL;
    const float *mine = ct_gradsync_residual(&tr->st.gs);
    if (!tr->st.have_gs || !mine)
        return 0;
    const struct ct_flat *g = &tr->s.model.grads;
    const size_t numel = g->numel, world = (size_t)tr->comm->world;
    float *buf = malloc((numel ? numel : 1) * world * sizeof *buf);
    int rc = ct_comm_agree(tr->comm, buf ? 0 : ct_error_set(CT_ENOMEM,
                                                            "checkpoint: out of memory for %zu "
                                                            "ranks' gradient residuals",
                                                            world));
    if (rc == 0)
        rc = ct_comm_gather(tr->comm, mine, numel * sizeof *buf, buf, 0);
    if (rc == 0)
        rc = ct_comm_bcast(tr->comm, buf, numel * world * sizeof *buf, 0);
    for (size_t r = 0; r < world && rc == 0; r++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "grad_residual/rank%zu/", r);
        struct ct_flat f = {.data = buf + r * numel, .numel = numel, .layout = g->layout};
        rc = add_views(sl, prefix, &f);
    }
    *all = buf;
    return rc;
}

/* ---------------------------------------------------------------- provenance */

/* The libraries as manifest key/values (names static, values in `libs`). */
static int library_versions(struct ct_ckpt_kv *kv, struct ct_library_version *libs)
{
    int n = ct_provenance_libraries(libs, CT_PROVENANCE_MAX_LIBS);
    for (int i = 0; i < n; i++) {
        kv[i].key = libs[i].name;
        kv[i].value = libs[i].version;
    }
    return n;
}

static const char *const purpose_names[] = {"init", "shuffle", "dropout", "augment"};
static const uint32_t purposes[] = {CT_RNG_INIT, CT_RNG_SHUFFLE, CT_RNG_DROPOUT, CT_RNG_AUGMENT};

/* This rank's record, serialized (malloc'd). */
static int pack_record(struct ct_trainer *tr, uint8_t **out, size_t *len)
{
    const struct ct_session *s = &tr->s;
    struct ct_rank_record rec;
    memset(&rec, 0, sizeof rec);
    rec.rank = tr->comm->rank;
    rec.world_size = tr->comm->world;
    snprintf(rec.host, sizeof rec.host, "%s", tr->comm->host);
    snprintf(rec.binding, sizeof rec.binding, "cpus %s; numa %s; blas threads %d; device %s; bound by %s",
             s->placement.cpus, s->placement.numa, s->placement.threads, s->placement.device,
             s->placement.bound_by);
    const int64_t epoch = ct_loader_epoch(&s->loader);
    rec.n_rng = 4;
    for (int i = 0; i < 4; i++) {
        struct ct_rng_key k = ct_rng_key(tr->cfg->train.seed, purposes[i]);
        snprintf(rec.rng[i].purpose, sizeof rec.rng[i].purpose, "%s", purpose_names[i]);
        rec.rng[i].key0 = k.k[0];
        rec.rng[i].key1 = k.k[1];
        /* The next counter each stream would use: shuffling is keyed by the
         * epoch, dropout and augmentation by (epoch, sample), init is done. */
        rec.rng[i].counter = purposes[i] == CT_RNG_INIT ? 0 : (uint64_t)epoch;
    }
    rec.loader_epoch = epoch;
    rec.loader_step = ct_loader_step(&s->loader);
    size_t first, count;
    ct_shard_range((size_t)tr->cfg->train.global_batch, tr->comm->world, tr->comm->rank, &first, &count);
    rec.loader_first = first;
    rec.loader_count = count;
    return ct_rank_record_pack(&rec, out, len);
}

/* The changes are recorded once, in the first checkpoint after them. */
static void clear_changes(struct ct_trainer *tr)
{
    for (int i = 0; i < tr->n_changes; i++)
        free(tr->changes[i]);
    tr->n_changes = 0;
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
        struct ct_ckpt *ck = calloc(1, sizeof *ck);
        if (ck && ct_ckpt_find_latest(tr->run_dir, path, sizeof path) == 0 && (lp = strlen(path)) >= lw &&
            strcmp(path + lp - lw, want) == 0 && ct_ckpt_open(ck, path) == 0) {
            memcpy(digest, ck->digest, sizeof digest);
            committed = 1;
            ct_ckpt_close(ck);
        }
        free(ck);
    }
    if (ct_comm_bcast(tr->comm, &committed, sizeof committed, 0) == 0 &&
        ct_comm_bcast(tr->comm, digest, sizeof digest, 0) == 0 && committed) {
        memcpy(tr->parent_sha256, digest, sizeof digest);
        tr->have_parent = 1;
        tr->last_ckpt_step = tr->step;
        clear_changes(tr);
    }
    ct_error_set(CT_EIO, "%s", saved);
}

/* The scalars of the state (positions, counts, kinds), as text. */
#define N_SCALARS 8
struct scalars {
    char store[N_SCALARS][64];
    struct ct_ckpt_kv kv[N_SCALARS];
};

static void fill_scalars(struct ct_trainer *tr, struct scalars *sc)
{
    const struct ct_session *s = &tr->s;
    const char *keys[N_SCALARS] = {"train.step",    "optim.kind",           "optim.steps",
                                   "sampler.epoch", "sampler.step",         "schedule.total_steps",
                                   "schedule.kind", "train.nonfinite_skipped"};
    snprintf(sc->store[0], 64, "%" PRId64, tr->step);
    snprintf(sc->store[1], 64, "%s", ct_optim_kind_name(s->opt.kind));
    snprintf(sc->store[2], 64, "%" PRId64, *ct_optimizer_steps(&tr->s.opt));
    snprintf(sc->store[3], 64, "%" PRId64, ct_loader_epoch(&s->loader));
    snprintf(sc->store[4], 64, "%" PRId64, ct_loader_step(&s->loader));
    snprintf(sc->store[5], 64, "%" PRId64, s->sched.total_steps);
    snprintf(sc->store[6], 64, "%d", (int)s->sched.kind);
    snprintf(sc->store[7], 64, "%" PRId64, tr->nonfinite_skipped);
    for (int i = 0; i < N_SCALARS; i++)
        sc->kv[i] = (struct ct_ckpt_kv){.key = keys[i], .value = sc->store[i]};
}

/* ct_ckpt_write's guard: the run directory is still this job's. */
static int still_owner(void *ctx)
{
    const struct ct_trainer *tr = ctx;
    return ct_owner_check(tr->run_dir, tr->owner_nonce);
}

/* Collective: the checkpoint of the current state, from its parts. */
static int write_checkpoint(struct ct_trainer *tr, const struct section_list *sl, const char *cfg_text,
                            const uint8_t *record, size_t record_len)
{
    struct ct_ckpt_kv libs[CT_PROVENANCE_MAX_LIBS];
    struct ct_library_version lib_store[CT_PROVENANCE_MAX_LIBS];
    int n_libs = library_versions(libs, lib_store);
    struct scalars sc;
    fill_scalars(tr, &sc);
    struct ct_ckpt_kv transport[CT_TRANSPORT_N_KEYS];
    for (int i = 0; i < CT_TRANSPORT_N_KEYS; i++)
        transport[i] = (struct ct_ckpt_kv){ct_transport_keys[i], tr->transport.v[i]};
    struct ct_ckpt_content content = {
        .step = tr->step,
        .epoch = ct_loader_epoch(&tr->s.loader),
        .epoch_step = ct_loader_step(&tr->s.loader),
        .config_text = cfg_text,
        .code_version = ct_code_version(),
        .libraries = libs,
        .n_libraries = n_libs,
        .data_files = tr->s.data_files,
        .n_data_files = tr->s.n_data_files,
        .parent_sha256 = tr->have_parent ? tr->parent_sha256 : NULL,
        .placement = tr->s.placement_table ? tr->s.placement_table : "",
        .changes = (const char *const *)tr->changes,
        .n_changes = tr->n_changes,
        .scalars = sc.kv,
        .n_scalars = N_SCALARS,
        .transport = transport,
        .n_transport = CT_TRANSPORT_N_KEYS,
        .tensors = sl->t,
        .n_tensors = sl->n,
        .record = record,
        .record_len = record_len,
    };
    struct ct_ckpt_write_params wp = {
        .run_dir = tr->run_dir,
        .keep_last = tr->cfg->checkpoint.keep_last,
        .keep_every = (int)tr->cfg->checkpoint.keep_every,
        .guard = tr->owner_nonce ? still_owner : NULL,
        .guard_ctx = tr,
    };
    char path[1200];
    double t0 = ct_now_s();
    int rc = ct_ckpt_write(tr->comm, &wp, &content, tr->parent_sha256, path, sizeof path);
    if (rc < 0) {
        note_committed(tr);
        return rc;
    }
    tr->have_parent = 1;
    tr->last_ckpt_step = tr->step;
    clear_changes(tr);
    /* The chain's line after the commit (chain.h says why that order and how
     * a crash between the two is repaired). A failure is the checkpoint's
     * failure for checkpoint.on_error; the checkpoint itself stays. */
    rc = ct_comm_agree(tr->comm, tr->comm->rank == 0 ? ct__chain_commit(tr->run_dir, path) : 0);
    if (rc < 0)
        return rc;
    ct_log_info("checkpoint %s written in %.2f s", path, ct_now_s() - t0);
    return 0;
}

/* A checkpoint never publishes non-finite weights (the stepper drops
 * non-finite steps, but an update can still overflow): one scan of the
 * parameters and buffers, cheap next to writing them. */
static int check_finite(const struct ct_trainer *tr)
{
    const struct ct_flat *flats[2] = {&tr->s.model.params, &tr->s.model.buffers};
    const char *kinds[2] = {"params", "buffers"};
    for (int k = 0; k < 2; k++) {
        int view;
        size_t elem;
        if (!flats[k]->layout || !ct_flat_find_nonfinite(flats[k], &view, &elem))
            continue;
        float v = view >= 0 ? ct_flat_view(flats[k], view)[elem] : flats[k]->data[elem];
        return ct_error_set(CT_ERANGE,
                            "refusing to write a checkpoint of non-finite weights at step %" PRId64
                            ": %s/%s element %zu is %f",
                            tr->step, kinds[k],
                            view >= 0 ? flats[k]->layout->views[view].name : "(padding)", elem,
                            (double)v);
    }
    return 0;
}

int ct__trainer_save(struct ct_trainer *tr)
{
    /* Buffers follow DDP's policy: rank 0's are the model's (see evaluate). */
    int rc = 0;
    struct ct_model *m = &tr->s.model;
    if (m->buffers.numel > 0)
        rc = ct_comm_bcast(tr->comm, m->buffers.data, m->buffers.numel * sizeof(float), 0);
    if (rc < 0)
        return rc;
    struct section_list sl = {0};
    char *cfg_text = NULL;
    uint8_t *record = NULL;
    size_t record_len = 0;
    rc = check_finite(tr);
    if (rc == 0)
        rc = collect_sections(&tr->s, &sl);
    if (rc == 0)
        rc = ct_config_text(tr->cfg, &cfg_text);
    if (rc == 0)
        rc = pack_record(tr, &record, &record_len);
    rc = ct_comm_agree(tr->comm, rc);
    float *residuals = NULL;
    if (rc == 0)
        rc = ct_comm_agree(tr->comm, add_residuals(tr, &sl, &residuals));
    if (rc == 0)
        rc = write_checkpoint(tr, &sl, cfg_text, record, record_len);
    free(residuals);
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

/* A sharded optimizer's slice of a state buffer from the whole sections
 * (written at any world size, sharded or not). */
static int restore_sharded_views(const struct ct_ckpt *ck, const char *prefix, float *state,
                                 const struct ct_layout *lay, size_t lo, size_t hi)
{
    for (int i = 0; i < lay->n; i++) {
        const struct ct_view *v = &lay->views[i];
        size_t a, b;
        view_in_slice(v, lo, hi, &a, &b);
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, v->name);
        uint64_t begin, end;
        part_bytes(v, a, b, &begin, &end);
        int rc = ct_ckpt_read_tensor_part(ck, name, CT_DTYPE_F32, v->ndim, v->shape, begin, end,
                                          state + (a - lo));
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

/* Same experiment? The recorded config against ours: state keys must be
 * equal, runtime keys may differ (recorded as changes for the next
 * manifest); the data files must have the digests the checkpoint saw. */
static int check_experiment(struct ct_trainer *tr, const struct ct_ckpt *ck)
{
    const struct ct_config *cfg = tr->cfg;
    struct ct_config *old = malloc(sizeof *old);
    if (!old)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", ck->dir);
    int rc = ct_config_load_text(old, ct_ckpt_config_text(ck), cfg->path, NULL, 0);
    if (rc < 0) {
        free(old);
        return ct_error_wrap(CT_EFORMAT, "%s: the recorded config does not load", ck->dir);
    }
    char diff[4096];
    int n_runtime = 0;
    int n_state = ct_config_diff(old, cfg, diff, sizeof diff, &n_runtime);
    free(old);
    if (n_state > 0)
        return ct_error_set(CT_EMISMATCH,
                            "%s was written by a different experiment; refusing to resume it "
                            "with %s:\n%s",
                            ck->dir, cfg->path, diff);
    for (int j = 0; j < tr->s.n_data_files; j++) {
        struct ct_ckpt_data_file rec;
        rc = ct_ckpt_find_data_file(ck, tr->s.data_files[j].path, &rec);
        if (rc == CT_ENOENT)
            continue;
        if (rc < 0)
            return rc;
        if (memcmp(rec.sha256, tr->s.data_files[j].sha256, CT_SHA256_LEN) != 0)
            return ct_error_set(CT_EMISMATCH,
                                "%s: data file %s has changed since the checkpoint was written "
                                "(its SHA-256 differs)",
                                ck->dir, tr->s.data_files[j].path);
    }
    for (char *line = n_runtime > 0 ? diff : NULL; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if ((rc = add_change(tr, "%s", line)) < 0)
            return rc;
        line = nl ? nl + 1 : NULL;
    }
    if (ct_ckpt_world_size(ck) != tr->comm->world &&
        (rc = add_change(tr, "world_size: %d -> %d (rank records re-derived)", ct_ckpt_world_size(ck),
                         tr->comm->world)) < 0)
        return rc;
    return 0;
}

/* This rank's record, when the checkpoint has one for this rank: its random
 * streams must be the ones the seed gives (they are derived, not drawn, so a
 * mismatch means the record belongs to another run). With a different world
 * size the records are re-derived (a recorded change). */
static int check_rank_record(const struct ct_trainer *tr, const struct ct_ckpt *ck, int64_t epoch,
                             int64_t epoch_step)
{
    const int rank = tr->comm->rank;
    if (rank >= ct_ckpt_world_size(ck))
        return 0;
    struct ct_rank_record rec;
    int rc = ct_ckpt_read_rank_record(ck, rank, &rec);
    if (rc < 0)
        return rc;
    if (rec.rank != rank)
        return ct_error_set(CT_EFORMAT, "%s: rank record %d says it is rank %d", ck->dir, rank, rec.rank);
    for (int i = 0; i < rec.n_rng; i++)
        for (int j = 0; j < 4; j++) {
            if (strcmp(rec.rng[i].purpose, purpose_names[j]) != 0)
                continue;
            struct ct_rng_key k = ct_rng_key(tr->cfg->train.seed, purposes[j]);
            if (rec.rng[i].key0 != k.k[0] || rec.rng[i].key1 != k.k[1])
                return ct_error_set(CT_EMISMATCH,
                                    "%s: rank %d's %s stream has another key than seed %" PRIu64 " gives",
                                    ck->dir, rank, purpose_names[j], tr->cfg->train.seed);
        }
    if (rec.loader_epoch != epoch || rec.loader_step != epoch_step)
        return ct_error_set(CT_EFORMAT, "%s: rank %d's loader position disagrees with the manifest",
                            ck->dir, rank);
    return 0;
}

/* Parameters, buffers, optimizer state, the step and the loader position. */
static int restore_state(struct ct_trainer *tr, const struct ct_ckpt *ck, int64_t *epoch,
                         int64_t *epoch_step)
{
    struct ct_session *s = &tr->s;
    int rc = ct__model_restore(&s->model, ck);
    if (rc < 0)
        return rc;
    struct ct_flat *bufs[CT_OPTIM_MAX_STATE];
    const char *names[CT_OPTIM_MAX_STATE];
    int ns = ct_optimizer_state(&s->opt, bufs, names);
    for (int i = 0; i < ns; i++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "optim/%s/", names[i]);
        if (s->sharded) {
            rc = restore_sharded_views(ck, prefix, bufs[i]->data, s->model.params.layout,
                                       s->shard.lo, s->shard.hi);
        } else {
            struct ct_flat f = {bufs[i]->data, bufs[i]->numel, s->model.params.layout};
            rc = restore_views(ck, prefix, &f);
        }
        if (rc < 0)
            return rc;
    }
    int64_t step, osteps, sepoch, sstep;
    if ((rc = scalar_i64(ck, "train.step", &step)) < 0 ||
        (rc = scalar_i64(ck, "optim.steps", &osteps)) < 0 ||
        (rc = scalar_i64(ck, "sampler.epoch", &sepoch)) < 0 ||
        (rc = scalar_i64(ck, "sampler.step", &sstep)) < 0)
        return rc;
    if (step != ct_ckpt_step(ck) || sepoch != ct_ckpt_epoch(ck) || sstep != ct_ckpt_epoch_step(ck))
        return ct_error_set(CT_EFORMAT, "%s: manifest and scalars disagree on the position", ck->dir);
    if (sstep > s->steps_per_epoch || sepoch < 0 || sstep < 0)
        return ct_error_set(CT_EFORMAT, "%s: sampler position (epoch %" PRId64 ", step %" PRId64
                            ") out of range", ck->dir, sepoch, sstep);
    /* Absent in checkpoints written before train.on_nonfinite: none skipped. */
    int64_t skipped = 0;
    const char *sv;
    if (ct_ckpt_scalar(ck, "train.nonfinite_skipped", &sv) == 0 &&
        (rc = scalar_i64(ck, "train.nonfinite_skipped", &skipped)) < 0)
        return rc;
    if (skipped < 0 || skipped > step)
        return ct_error_set(CT_EFORMAT, "%s: scalar train.nonfinite_skipped = %" PRId64
                            " is outside 0..%" PRId64 " (the steps taken)", ck->dir, skipped, step);
    tr->step = step;
    tr->nonfinite_skipped = skipped;
    *ct_optimizer_steps(&s->opt) = osteps;
    /* A checkpoint taken after an epoch's last step (a step cadence or a
     * stop request that fell there) continues with the next epoch. */
    if (sstep == s->steps_per_epoch)
        rc = ct_loader_seek(&s->loader, sepoch + 1, 0);
    else
        rc = ct_loader_seek(&s->loader, sepoch, sstep);
    *epoch = sepoch;
    *epoch_step = sstep;
    return rc;
}

/* Error feedback: this rank's residual from its sections. A checkpoint of
 * another world size has residuals of other ranks, which belong to no rank
 * here (a rank's residual is what its own rounding dropped of its own
 * slice of the batch): they are dropped, every rank starts from zero, and
 * the change is recorded. What is lost is at most one step's rounding
 * error (at most 2^-8 of each element, relative), as at the start of a run. */
static int restore_residual(struct ct_trainer *tr, const struct ct_ckpt *ck)
{
    float *res = tr->st.have_gs ? ct_gradsync_residual(&tr->st.gs) : NULL;
    if (!res)
        return 0;
    const int old_world = ct_ckpt_world_size(ck);
    if (old_world != tr->comm->world) {
        ct_log_warn("%s: dist.grad_compress_feedback: the gradient residuals of %d rank%s are "
                    "dropped (world size %d -> %d); every rank starts from zero",
                    ck->dir, old_world, old_world == 1 ? "" : "s", old_world, tr->comm->world);
        return add_change(tr, "grad_compress_feedback: residuals of %d ranks dropped (world size "
                          "%d -> %d)", old_world, old_world, tr->comm->world);
    }
    char prefix[64];
    snprintf(prefix, sizeof prefix, "grad_residual/rank%d/", tr->comm->rank);
    struct ct_flat f = {.data = res, .numel = tr->s.model.grads.numel,
                        .layout = tr->s.model.grads.layout};
    return restore_views(ck, prefix, &f);
}

int ct__trainer_restore(struct ct_trainer *tr, const struct ct_ckpt *ck)
{
    int64_t epoch = 0, epoch_step = 0;
    int rc = check_experiment(tr, ck);
    if (rc == 0)
        rc = restore_state(tr, ck, &epoch, &epoch_step);
    if (rc == 0)
        rc = restore_residual(tr, ck);
    if (rc == 0)
        rc = check_rank_record(tr, ck, epoch, epoch_step);
    if (rc < 0)
        return rc;
    memcpy(tr->parent_sha256, ck->digest, CT_SHA256_LEN);
    tr->have_parent = 1;
    tr->last_ckpt_step = tr->step;
    return 0;
}
