/* ct_ckpt_write: the commit protocol of ckpt.h, phase by phase. Each rank
 * runs the same phases in the same order; the pieces they use are in
 * write-impl.h (the plan of data.bin, the hashing, the writers, the
 * manifest, rank 0's directories, the failpoints).
 *
 * Every rank computes the same layout of data.bin from the same tensor list
 * (checked by a fingerprint), learns the sharded sections' parts and the
 * records' lengths from the others, writes its share of data.bin while a
 * helper thread hashes its share of the sections, and the digests are
 * gathered on rank 0, which alone writes the manifest and touches the
 * directory tree.
 *
 * Agreement points (ct_comm_agree) make a failure on any rank a failure of
 * every rank: A0 after set-up, A1 after the data is synced (the issue's
 * "allreduce of status"), A2 after rank 0 has written the manifest and
 * renamed the directory (rolled back on failure), A3 after `latest`. The
 * commit point is the rename of `latest`; before it, any failure leaves
 * nothing published.
 *
 * Not here: what goes into the state (src/train), reading (read.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/write-impl.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/trace.h"

/* Sharded sections: every rank learns every rank's part (a gather and a
 * broadcast of two numbers per section), and checks that the parts tile
 * each section in rank order. Collective when any section is sharded (the
 * flags are in the fingerprint, so every rank agrees on that). rc: this
 * rank's failure so far, reported after taking part. */
static int exchange_parts(struct ct_comm *c, struct ct__ckpt_layout *L,
                          const struct ct_ckpt_content *ct, int rc)
{
    int any = 0;
    for (int i = 0; i < L->n; i++)
        any |= ct->tensors[i].sharded;
    if (!any)
        return rc;
    const size_t n = (size_t)L->n, world = (size_t)c->world;
    uint64_t *mine = calloc(2 * n, sizeof *mine);
    L->parts = calloc(2 * n * world, sizeof *L->parts);
    if (rc == 0 && (!mine || !L->parts))
        rc = ct_error_set(CT_ENOMEM, "checkpoint: out of memory for the sharded sections' parts");
    int e = ct_comm_agree(c, rc);
    if (e < 0) {
        free(mine);
        return e;
    }
    ct__ckpt_layout_my_parts(ct->tensors, L->n, mine);
    e = ct_comm_gather(c, mine, 2 * n * sizeof *mine, L->parts, 0);
    if (e == 0)
        e = ct_comm_bcast(c, L->parts, 2 * n * world * sizeof *L->parts, 0);
    free(mine);
    if (e < 0)
        return e;
    return ct__ckpt_layout_check_parts(L, ct->tensors, c->world);
}

/* What one write carries from phase to phase. The phases below are the
 * agreement points of the top comment; each returns 0 to go on, or the
 * failure every rank agreed on (already rolled back where the protocol says
 * so), which ends the write. */
struct ckw {
    struct ct__ckpt_layout L;
    struct ct__ckpt_publish pub; /* rank 0's temporary and final directories (names on every rank) */
    int tmp_made;        /* rank 0: pub.tmp exists and is ours to remove on failure */
    int use_mpi;
    MPI_Comm mc;
    int *owner;          /* (n_tensors) which rank hashes each tensor (ct__ckpt_hash_owners) */
    uint8_t *sha_mine;   /* (n_tensors + 1, 32) this rank's digests; on rank 0, then all of them */
    uint8_t *sha_all;    /* rank 0: (world, n_tensors + 1, 32) every rank's sha_mine */
    uint8_t *manifest;   /* rank 0: the packed manifest */
    size_t manifest_len;
    uint8_t digest[CT_SHA256_LEN]; /* rank 0: SHA-256 of manifest.pb */
};

static void ckw_free(struct ckw *s)
{
    free(s->manifest);
    free(s->owner);
    free(s->sha_mine);
    free(s->sha_all);
    ct__ckpt_layout_free(&s->L);
}

/* A failure every rank agreed on: rank 0 removes what it made; the barrier
 * makes "nothing published" true on every rank on return. */
static int ckw_abandon(struct ct_comm *c, const struct ct_ckpt_write_params *wp, struct ckw *s,
                       int rc)
{
    if (c->rank == 0 && s->tmp_made)
        ct__ckpt_unpublish_dir(&s->pub, wp->run_dir);
    ct_comm_barrier(c);
    return rc;
}

/* A collective itself failed: still try to agree, so no rank hangs. */
static int ckw_abandon_agree(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                             struct ckw *s, int rc)
{
    return ckw_abandon(c, wp, s, ct_comm_agree(c, rc));
}

/* The checks a rank makes on its own arguments. */
static int ckw_check_args(const struct ct_ckpt_write_params *wp, const struct ct_ckpt_content *ct)
{
    int rc = ct__ckpt_fp_read();
    if (rc < 0)
        return rc;
    if (!wp || !wp->run_dir || !ct || (ct->n_tensors > 0 && !ct->tensors) || ct->n_tensors < 0)
        return ct_error_set(CT_EINVAL, "ct_ckpt_write: missing arguments");
    if (ct->record_len > CT_CKPT_MAX_RECORD_BYTES || (ct->record_len > 0 && !ct->record))
        return ct_error_set(CT_EINVAL, "rank record of %zu bytes (at most %zu)", ct->record_len,
                            CT_CKPT_MAX_RECORD_BYTES);
    if (ct->step < 0)
        return ct_error_set(CT_EINVAL, "checkpoint step %" PRId64 " is negative", ct->step);
    return 0;
}

/* A0: local checks, the same sections on every rank, then rank 0 prepares
 * the directories; every rank learns their names. */
static int ckw_prepare(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                       const struct ct_ckpt_content *ct, struct ckw *s)
{
    int rc = ckw_check_args(wp, ct);
    if (rc == 0)
        rc = ct__ckpt_layout_tensors(&s->L, ct->tensors, ct->n_tensors);
    /* A rank that failed already stays out of the comparison (its failure
     * is what A0 reports). */
    int64_t fp = rc == 0 ? ct__ckpt_layout_fingerprint(ct->tensors, ct->n_tensors) : -1;
    int64_t fpr[2] = {fp >= 0 ? fp : INT64_MIN, fp >= 0 ? -fp : INT64_MIN};
    int e0 = ct_comm_allreduce_i64(c, fpr, 2, CT_REDUCE_MAX);
    if (e0 < 0)
        return e0; /* nothing made yet, and no collective to roll back with */
    if (rc == 0 && fp >= 0 && (fpr[0] != fp || -fpr[1] != fp))
        rc = ct_error_set(CT_EMISMATCH, "ranks passed different checkpoint sections (names, dtypes "
                          "or shapes differ; %d sections here)", ct->n_tensors);
    char id[64];
    memset(id, 0, sizeof id);
    if (c->rank == 0 && rc == 0 && wp->guard)
        rc = wp->guard(wp->guard_ctx);
    if (c->rank == 0 && rc == 0)
        s->tmp_made = (rc = ct__ckpt_make_tmp(wp->run_dir, ct->step, &s->pub, id, sizeof id)) == 0;
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return ckw_abandon(c, wp, s, rc);
    if ((rc = ct_comm_bcast(c, id, sizeof id, 0)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    snprintf(s->pub.tmp, sizeof s->pub.tmp, "%s/ckpt-%" PRId64 ".tmp-%s", wp->run_dir, ct->step, id);
    snprintf(s->pub.final, sizeof s->pub.final, "%s/ckpt-%" PRId64, wp->run_dir, ct->step);
    return 0;
}

/* Everyone learns every record's length (and rank 0 its digest), hence the
 * records' offsets and the size of data.bin. */
static int ckw_share_records(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                             const struct ct_ckpt_content *ct, struct ckw *s)
{
    const int world = c->world;
    struct ct__ckpt_layout *L = &s->L;
    int rc = 0;
    L->rec = calloc((size_t)world, sizeof *L->rec);
    L->rec_off = calloc((size_t)world, sizeof *L->rec_off);
    s->owner = calloc((size_t)L->n + 1, sizeof *s->owner);
    s->sha_mine = calloc((size_t)L->n + 1, CT_SHA256_LEN);
    if (c->rank == 0)
        s->sha_all = calloc(((size_t)L->n + 1) * (size_t)world, CT_SHA256_LEN);
    if (!L->rec || !L->rec_off || !s->owner || !s->sha_mine || (c->rank == 0 && !s->sha_all))
        rc = ct_error_set(CT_ENOMEM, "checkpoint write: out of memory");
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return ckw_abandon(c, wp, s, rc);
    struct ct__ckpt_record_info mine = {ct->record_len, {0}};
    if ((rc = ct_sha256_buf(ct->record, ct->record_len, mine.sha)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    if ((rc = ct_comm_gather(c, &mine, sizeof mine, L->rec, 0)) < 0 ||
        (rc = ct_comm_bcast(c, L->rec, (size_t)world * sizeof *L->rec, 0)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    ct__ckpt_layout_place_records(L, world);
    return 0;
}

/* A1: data.bin, with this rank's tensor digests computed alongside on a
 * helper thread, synced; then the digests of the sections spread over
 * several ranks. */
static int ckw_data(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                    const struct ct_ckpt_content *ct, struct ckw *s)
{
    const int rank = c->rank, world = c->world;
    int rc;
    if ((rc = exchange_parts(c, &s->L, ct, 0)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    ct__ckpt_plan_runs(&s->L, ct->tensors, world);
    int r2 = ct__ckpt_hash_owners(&s->L, ct->tensors, world, s->owner);
    struct ct__ckpt_hasher hasher = {.L = &s->L, .ct = ct, .owner = s->owner, .rank = rank,
                                     .out = s->sha_mine};
    if (r2 == 0)
        ct__ckpt_hash_start(&hasher);
    char data_path[1200];
    snprintf(data_path, sizeof data_path, "%s/data.bin", s->pub.tmp);
    rc = s->use_mpi ? ct__ckpt_write_data_mpi(c, s->mc, data_path, &s->L, ct, rc)
                    : ct__ckpt_write_data_posix(data_path, &s->L, ct, rank, rc);
    if (r2 == 0)
        r2 = ct__ckpt_hash_finish(&hasher);
    if (rc == 0)
        rc = r2;
    if (rc == 0)
        rc = ct__ckpt_fp(CT__FP_SYNCED, rank, data_path);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return ckw_abandon(c, wp, s, rc);
    if ((rc = ct_comm_agree(c, ct__ckpt_hash_spread(c, &s->L, ct, s->owner, s->sha_mine))) < 0)
        return ckw_abandon(c, wp, s, rc);
    return 0;
}

/* Rank 0: the tensor digests from their owners, the manifest and its
 * sidecar, written into the temporary directory and synced. */
static int ckw_write_manifest(const struct ct_ckpt_content *ct, int world, struct ckw *s)
{
    const size_t n = (size_t)s->L.n;
    for (size_t i = 0; i < n; i++)
        memcpy(&s->sha_mine[i * CT_SHA256_LEN],
               &s->sha_all[((size_t)s->owner[i] * (n + 1) + i) * CT_SHA256_LEN], CT_SHA256_LEN);
    int rc = ct__ckpt_manifest_build(ct, &s->L, world, s->sha_mine, &s->manifest, &s->manifest_len);
    return rc < 0 ? rc : ct__ckpt_manifest_store(s->pub.tmp, s->manifest, s->manifest_len, s->digest);
}

/* A2: the digests gathered on rank 0, which writes the manifest and renames
 * the directory to its final name (rolled back on failure). */
static int ckw_publish(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                       const struct ct_ckpt_content *ct, struct ckw *s)
{
    const int rank = c->rank;
    char path[1200];
    snprintf(path, sizeof path, "%s/data.bin", s->pub.tmp);
    int rc = ct__ckpt_fp(CT__FP_AGREED, rank, path);
    int r2 = ct_comm_gather(c, s->sha_mine, ((size_t)s->L.n + 1) * CT_SHA256_LEN, s->sha_all, 0);
    if (r2 < 0)
        return ckw_abandon_agree(c, wp, s, r2);
    if (rank == 0 && rc == 0)
        rc = ckw_write_manifest(ct, c->world, s);
    snprintf(path, sizeof path, "%s/manifest.pb", s->pub.tmp);
    if (rc == 0)
        rc = ct__ckpt_fp(CT__FP_MANIFEST, rank, path);
    if (rank == 0 && rc == 0 && wp->guard)
        rc = wp->guard(wp->guard_ctx);
    if (rank == 0 && rc == 0)
        rc = ct__ckpt_publish_dir(&s->pub, wp->run_dir);
    if (rc == 0)
        rc = ct__ckpt_fp_at(CT__FP_RENAMED, rank, s->pub.final, "rename");
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return ckw_abandon(c, wp, s, rc);
    return 0;
}

/* A3: rank 0 replaces `latest` (the commit point), then removes the old
 * checkpoint of the same step, if any, and applies retention. A failure
 * here is reported but not rolled back past what rank 0 undid itself. */
static int ckw_commit(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                      const struct ct_ckpt_content *ct, struct ckw *s)
{
    int rc = 0;
    if (c->rank == 0) {
        char latest[64];
        int n = snprintf(latest, sizeof latest, "ckpt-%" PRId64 "\n", ct->step);
        int replaced = 0;
        rc = ct__ckpt_write_atomic(wp->run_dir, "latest", latest, (size_t)n, &replaced);
        if (rc < 0 && !replaced) {
            ct__ckpt_unpublish_dir(&s->pub, wp->run_dir);
            s->tmp_made = 0;
        } else {
            /* Committed (even if the final directory sync failed, which is
             * reported). The old checkpoint of the same step, if any, goes. */
            if (s->pub.exchanged)
                ct__ckpt_remove_dir(s->pub.tmp, "manifest.pb");
            s->tmp_made = 0;
            int r3 = ct__ckpt_retention(wp->run_dir, ct->step, wp->keep_last, wp->keep_every);
            if (r3 < 0)
                ct_log_warn("checkpoint retention in %s: %s", wp->run_dir, ct_error_message());
        }
    }
    char lpath[1200];
    snprintf(lpath, sizeof lpath, "%s/latest", wp->run_dir);
    if (rc == 0)
        rc = ct__ckpt_fp(CT__FP_LATEST, c->rank, lpath);
    return ct_comm_agree(c, rc);
}

/* Every rank returns rank 0's manifest digest and the checkpoint's path. */
static int ckw_result(struct ct_comm *c, const struct ckw *s, uint8_t digest_user[CT_SHA256_LEN],
                      char *path_out, size_t path_len)
{
    uint8_t result[CT_SHA256_LEN + 1100];
    if (c->rank == 0) {
        memcpy(result, s->digest, CT_SHA256_LEN);
        memcpy(result + CT_SHA256_LEN, s->pub.final, sizeof s->pub.final);
    }
    int rc = ct_comm_bcast(c, result, sizeof result, 0);
    if (rc < 0)
        return rc;
    if (digest_user)
        memcpy(digest_user, result, CT_SHA256_LEN);
    if (path_out && path_len) {
        if (strlen(s->pub.final) >= path_len)
            return ct_error_set(CT_EINVAL, "checkpoint path %s does not fit in %zu bytes",
                                s->pub.final, path_len);
        memcpy(path_out, s->pub.final, strlen(s->pub.final) + 1);
    }
    return 0;
}

/* log.trace: the phase that began at t0 as a span inside "checkpoint";
 * returns now, the next phase's begin. */
static double ckw_phase(const char *name, double t0)
{
    if (!ct_trace_on())
        return t0;
    const double t1 = ct_now_s();
    ct_trace_span(CT_TRACE_MAIN, "checkpoint", name, t0, t1);
    return t1;
}

int ct_ckpt_write(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                  const struct ct_ckpt_content *ct, uint8_t digest_user[CT_SHA256_LEN],
                  char *path_out, size_t path_len)
{
    struct ckw s;
    memset(&s, 0, sizeof s);
    s.use_mpi = ct_comm_mpi_handle(c, &s.mc) == 0;
    ct_error_clear();
    double t = ct_trace_on() ? ct_now_s() : 0.0;
    int rc = ckw_prepare(c, wp, ct, &s); /* A0 */
    if (rc == 0)
        rc = ckw_share_records(c, wp, ct, &s);
    t = ckw_phase("prepare", t);
    if (rc == 0)
        rc = ckw_data(c, wp, ct, &s); /* A1 */
    t = ckw_phase("data", t);
    if (rc == 0)
        rc = ckw_publish(c, wp, ct, &s); /* A2 */
    t = ckw_phase("publish", t);
    if (rc == 0)
        rc = ckw_commit(c, wp, ct, &s); /* A3 */
    ckw_phase("commit", t);
    if (rc == 0)
        rc = ckw_result(c, &s, digest_user, path_out, path_len);
    ckw_free(&s);
    return rc;
}
