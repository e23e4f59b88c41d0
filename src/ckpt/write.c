/* Collective checkpoint writing and the commit protocol (see ckpt.h).
 *
 * Every rank computes the same layout of data.bin from the same tensor list:
 * tensors in the given order at 64-byte aligned offsets, padding zeroed, then
 * the ranks' records back to back in rank order (offsets from the table of
 * record lengths that rank 0 gathers and broadcasts). The tensor region is
 * cut into one contiguous share per rank; each rank writes its share from its
 * own (identical) copy with MPI_File_write_at_all, in rounds of at most
 * 256 MiB (no count exceeds INT_MAX, and each round is a liveness mark for
 * the hang watchdog), then its own record, so the write is parallel.
 * The SHA-256 of the tensors is likewise shared out (greedy by size), computed
 * on a helper thread while the data is written, and the digests gathered on
 * rank 0, which alone writes the manifest and touches the
 * directory tree. With the "self" communicator the same layout is written
 * with pwrite.
 *
 * Agreement points (ct_comm_agree) make a failure on any rank a failure of
 * every rank: A0 after set-up, A1 after the data is synced (the issue's
 * "allreduce of status"), A2 after rank 0 has written the manifest and
 * renamed the directory (rolled back on failure), A3 after `latest`. The
 * commit point is the rename of `latest`; before it, any failure leaves
 * nothing published.
 *
 * An existing ckpt-<step> (a run resumed from an older checkpoint reaching
 * the same step again) is replaced atomically with renameat2(RENAME_EXCHANGE)
 * and the old one removed after `latest` is replaced; where the file system
 * cannot exchange directories the write fails with a message saying so.
 *
 * Not here: what goes into the state (src/train), reading (read.c).
 */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "core/liveness.h"
#include "core/log.h"
#include "core/path.h"

/* One MPI-IO call moves at most this many bytes (an int count of MPI_BYTE);
 * a variable so tests can make it small and exercise many rounds. */
uint64_t ct__ckpt_write_chunk = (uint64_t)256 << 20;
#define WRITE_CHUNK ct__ckpt_write_chunk
/* Shares of the tensor region start at multiples of this (file system blocks). */
#define SHARE_ALIGN ((uint64_t)4096)

/* ---------------------------------------------------------------- failpoints */

enum fp_phase { FP_DATA, FP_SYNCED, FP_AGREED, FP_MANIFEST, FP_RENAMED, FP_LATEST, FP_CHAIN,
                FP_SYNC, FP_RETAIN, FP_COUNT };

/* What an armed failpoint does: die (no action), fail with a generic
 * message (":fail"), or fail as the system call at that point would with an
 * errno (a full disk on one rank only, a failing fsync), so the message is
 * the one a user would see. The syntax and the parser: core/failpoint.h. */
static const char *const fp_actions[] = {"fail", "enospc", "eio", "erofs", "edquot", NULL};
static const int fp_errnos[] = {0, ENOSPC, EIO, EROFS, EDQUOT}; /* by action */
static const char *const fp_phases[FP_COUNT + 1] = {"data",   "synced", "agreed", "manifest", "renamed",
                                                    "latest", "chain",  "sync",   "retain",   NULL};
static const struct ct_failpoint_spec fp_spec = {"CT_FAILPOINT", fp_phases, fp_actions};

static struct ct_failpoint g_fp;

/* Read at every write (a getenv and a few compares, nothing next to the
 * write itself), so a test can arm and disarm failpoints in one process. A
 * malformed value fails the write (CT_EINVAL, naming the variable). */
static int fp_parse(void) { return ct_failpoint_get(&g_fp, &fp_spec); }

/* Called by every rank at every phase; `path` and `op` say which file and
 * which call an injected errno stands for. Cheap when CT_FAILPOINT is unset. */
static int failpoint_at(int phase, int rank, const char *path, const char *op)
{
    if (!ct_failpoint_hit(&g_fp, phase, rank))
        return 0;
    if (g_fp.action < 0)
        raise(SIGKILL);
    if (g_fp.action > 0)
        return ct_error_set(CT_EIO, "%s: %s failed: %s (injected: CT_FAILPOINT=%s)", path, op,
                            strerror(fp_errnos[g_fp.action]), g_fp.text);
    return ct_error_set(CT_EIO, "failpoint %s on rank %d (CT_FAILPOINT=%s)", fp_phases[phase], rank,
                        g_fp.text);
}

static int failpoint(int phase, int rank, const char *path) { return failpoint_at(phase, rank, path, "write"); }

int ct__ckpt_failpoint_armed(const char *phase, int rank)
{
    struct ct_failpoint fp;
    int p = -1;
    for (int i = 0; i < FP_COUNT; i++)
        if (strcmp(phase, fp_phases[i]) == 0)
            p = i;
    return ct_failpoint_get(&fp, &fp_spec) == 0 && ct_failpoint_hit(&fp, p, rank);
}

int ct__ckpt_failpoint(const char *phase, int rank)
{
    int rc = fp_parse();
    if (rc < 0)
        return rc;
    if (strcmp(phase, fp_phases[FP_CHAIN]) == 0)
        return failpoint_at(FP_CHAIN, rank, "chain.jsonl", "write");
    return 0;
}

/* ---------------------------------------------------------------- layout */

struct piece {
    const uint8_t *p; /* source bytes */
    uint64_t off, len; /* in data.bin */
};

struct record_info {
    uint64_t len;
    uint8_t sha[CT_SHA256_LEN];
};

/* Consecutive sections that are all replicated (striped over the ranks in
 * equal shares) or all sharded (each rank writes what it holds). */
struct run {
    int first, last;     /* sections */
    int sharded;
    uint64_t lo, hi;     /* file bytes, the pad after the last section included */
};

struct layout {
    int n;               /* tensors */
    uint64_t *off, *len; /* per tensor; off[n] = tensor_end */
    uint64_t *parts;     /* (world, n, 2) every rank's [begin, end) of each sharded section; NULL: none */
    struct run *runs;
    int n_runs;
    uint64_t tensor_end; /* aligned end of the tensor region = first record */
    uint64_t *rec_off;   /* per rank */
    struct record_info *rec; /* per rank */
    uint64_t data_size;
    struct piece *pieces; /* the tensor region as tensors and zero pads, in order */
    int n_pieces;
};

static const uint8_t g_zeros[CT__CKPT_ALIGN];

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static void layout_free(struct layout *L)
{
    free(L->off);
    free(L->len);
    free(L->rec_off);
    free(L->rec);
    free(L->pieces);
    free(L->parts);
    free(L->runs);
    memset(L, 0, sizeof *L);
}

static int tensor_bytes(const struct ct_ckpt_tensor *t, uint64_t *out)
{
    if ((unsigned)t->dtype >= CT_DTYPE_COUNT)
        return ct_error_set(CT_EINVAL, "checkpoint section %s: unknown dtype %d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > 4)
        return ct_error_set(CT_EINVAL, "checkpoint section %s: %d dimensions (0..4)", t->name, t->ndim);
    if (!t->name[0] || !memchr(t->name, '\0', sizeof t->name))
        return ct_error_set(CT_EINVAL, "checkpoint section without a valid name");
    uint64_t b = ct_dtype_size(t->dtype);
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] < 0 || (t->shape[k] > 0 && b > UINT64_MAX / (uint64_t)t->shape[k]))
            return ct_error_set(CT_EINVAL, "checkpoint section %s: bad dimension %" PRId64, t->name,
                                t->shape[k]);
        b *= (uint64_t)t->shape[k];
    }
    if (t->sharded && (t->part_begin > t->part_end || t->part_end > b))
        return ct_error_set(CT_EINVAL, "checkpoint section %s: this rank's part [%" PRIu64 ", %" PRIu64
                            ") is not inside its %" PRIu64 " bytes", t->name, t->part_begin,
                            t->part_end, b);
    uint64_t held = t->sharded ? t->part_end - t->part_begin : b;
    if (held > 0 && !t->data)
        return ct_error_set(CT_EINVAL, "checkpoint section %s: no data", t->name);
    *out = b;
    return 0;
}

/* The tensor part of the layout: identical on every rank by construction. */
static int layout_tensors(struct layout *L, const struct ct_ckpt_content *ct)
{
    int n = ct->n_tensors;
    L->n = n;
    L->off = calloc((size_t)n + 1, sizeof *L->off);
    L->len = calloc((size_t)n + 1, sizeof *L->len);
    L->pieces = calloc(2 * (size_t)n + 1, sizeof *L->pieces);
    L->runs = calloc((size_t)n + 1, sizeof *L->runs);
    if (!L->off || !L->len || !L->pieces || !L->runs)
        return ct_error_set(CT_ENOMEM, "checkpoint layout: out of memory");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct ct_ckpt_tensor *t = &ct->tensors[i];
        int rc = tensor_bytes(t, &L->len[i]);
        if (rc < 0)
            return rc;
        L->off[i] = off;
        /* A sharded section's piece is what this rank holds of it. */
        uint64_t a = t->sharded ? t->part_begin : 0, b = t->sharded ? t->part_end : L->len[i];
        if (b > a)
            L->pieces[L->n_pieces++] = (struct piece){t->data, off + a, b - a};
        uint64_t end = align_up(off + L->len[i], CT__CKPT_ALIGN);
        if (end > off + L->len[i])
            L->pieces[L->n_pieces++] = (struct piece){g_zeros, off + L->len[i], end - off - L->len[i]};
        off = end;
    }
    L->off[n] = off;
    L->tensor_end = off;
    return 0;
}

/* Sharded sections: every rank learns every rank's part (a gather and a
 * broadcast of two numbers per section), and checks that the parts tile
 * each section in rank order. Collective when any section is sharded (the
 * flags are in the fingerprint, so every rank agrees on that). rc: this
 * rank's failure so far, reported after taking part. */
static int exchange_parts(struct ct_comm *c, struct layout *L, const struct ct_ckpt_content *ct,
                          int rc)
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
    for (size_t i = 0; i < n; i++)
        if (ct->tensors[i].sharded) {
            mine[2 * i] = ct->tensors[i].part_begin;
            mine[2 * i + 1] = ct->tensors[i].part_end;
        }
    e = c->ops->gather(c, mine, 2 * n * sizeof *mine, L->parts, 0);
    if (e == 0)
        e = ct_comm_bcast(c, L->parts, 2 * n * world * sizeof *L->parts, 0);
    free(mine);
    if (e < 0)
        return e;
    for (size_t i = 0; i < n; i++) {
        if (!ct->tensors[i].sharded)
            continue;
        uint64_t next = 0;
        for (size_t r = 0; r < world; r++) {
            const uint64_t *p = &L->parts[(r * n + i) * 2];
            if (p[1] == p[0])
                continue;
            if (p[0] != next)
                return ct_error_set(CT_EINVAL, "checkpoint section %s: rank %zu's part starts at byte "
                                    "%" PRIu64 ", expected %" PRIu64 " (the parts must tile it in "
                                    "rank order)", ct->tensors[i].name, r, p[0], next);
            next = p[1];
        }
        if (next != L->len[i])
            return ct_error_set(CT_EINVAL, "checkpoint section %s: the ranks' parts cover %" PRIu64
                                " of its %" PRIu64 " bytes", ct->tensors[i].name, next, L->len[i]);
    }
    return 0;
}

/* Rank r's part of section i (sharded sections only). */
static const uint64_t *part_of(const struct layout *L, int r, int i)
{
    return &L->parts[((size_t)r * (size_t)L->n + (size_t)i) * 2];
}

/* The runs, after exchange_parts. A sharded run also ends where the ranks'
 * order starts again (the next optimizer state buffer: its first part is
 * held by a lower rank than the last part before it), so that within a run
 * every rank's parts are consecutive and its bytes one range. */
static void plan_runs(struct layout *L, const struct ct_ckpt_content *ct, int world)
{
    L->n_runs = 0;
    int prev_last = -1; /* the rank holding the sharded run's last byte so far */
    for (int i = 0; i < L->n; i++) {
        const int sharded = !!ct->tensors[i].sharded;
        int first = -1, last = -1;
        for (int r = 0; sharded && r < world; r++)
            if (part_of(L, r, i)[1] > part_of(L, r, i)[0]) {
                first = first < 0 ? r : first;
                last = r;
            }
        if (i == 0 || L->runs[L->n_runs - 1].sharded != sharded ||
            (first >= 0 && first < prev_last)) {
            L->runs[L->n_runs++] = (struct run){.first = i, .sharded = sharded, .lo = L->off[i]};
            prev_last = -1;
        }
        L->runs[L->n_runs - 1].last = i;
        L->runs[L->n_runs - 1].hi = L->off[i + 1];
        if (last >= 0)
            prev_last = last;
    }
}

/* FNV-1a over the section list (names, dtypes, shapes, sharded or not): every rank must
 * pass the same one, or the shares they write would not fit together. */
static int64_t layout_fingerprint(const struct ct_ckpt_content *ct)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ct->n_tensors; i++) {
        const struct ct_ckpt_tensor *t = &ct->tensors[i];
        for (const char *p = t->name; *p && p < t->name + sizeof t->name; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        int64_t v[6] = {t->dtype, t->ndim, t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
        for (int k = 0; k < 6; k++)
            h = (h ^ (uint64_t)(k < 2 || k - 2 < t->ndim ? v[k] : 0)) * 1099511628211ull;
        h = (h ^ (uint64_t)!!t->sharded) * 1099511628211ull;
    }
    return (int64_t)(h >> 1); /* non-negative, so that -h cannot overflow */
}

/* The bytes of run k that rank r writes: an equal share of a replicated
 * run; of a sharded run, from its first part to its last (whole sections
 * and pads between, and the pad after a section whose last byte it holds),
 * so the ranks' ranges tile the run. */
static void range_of(const struct layout *L, int k, int r, int world, uint64_t *lo, uint64_t *hi)
{
    const struct run *u = &L->runs[k];
    if (!u->sharded) {
        uint64_t len = u->hi - u->lo;
        uint64_t share = align_up((len + (uint64_t)world - 1) / (uint64_t)world, SHARE_ALIGN);
        uint64_t a = share * (uint64_t)r < len ? share * (uint64_t)r : len;
        *lo = u->lo + a;
        *hi = u->lo + (a + share < len ? a + share : len);
        return;
    }
    *lo = *hi = u->lo;
    int found = 0;
    for (int i = u->first; i <= u->last; i++) {
        const uint64_t *p = part_of(L, r, i);
        if (p[1] == p[0])
            continue;
        if (!found)
            *lo = L->off[i] + p[0];
        found = 1;
        *hi = p[1] == L->len[i] ? L->off[i + 1] : L->off[i] + p[1];
    }
}

/* Collective write calls for run k: the most any rank needs. */
static uint64_t rounds_of(const struct layout *L, int k, int world)
{
    uint64_t most = 0;
    for (int r = 0; r < world; r++) {
        uint64_t lo, hi;
        range_of(L, k, r, world, &lo, &hi);
        uint64_t n = (hi - lo + WRITE_CHUNK - 1) / WRITE_CHUNK;
        most = n > most ? n : most;
        if (!L->runs[k].sharded)
            break; /* rank 0's share is the largest */
    }
    return most;
}

/* Hashing work: replicated tensor i goes to owner[i], largest first to the
 * least loaded rank; a sharded one to the rank that holds all of it (rank 0
 * for an empty one), or -1 when it is spread over several ranks (rank 0
 * hashes it after gathering it: hash_spread). Deterministic, so every rank
 * knows who hashes what. */
static int hash_owners(const struct layout *L, const struct ct_ckpt_content *ct, int world,
                       int *owner)
{
    int n = L->n;
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    uint64_t *load = calloc((size_t)world, sizeof *load);
    if (!order || !load) {
        free(order);
        free(load);
        return ct_error_set(CT_ENOMEM, "checkpoint hashing: out of memory");
    }
    for (int i = 0; i < n; i++)
        order[i] = i;
    /* Insertion sort by size, descending (stable): tensor counts are small. */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;
        while (j > 0 && L->len[order[j - 1]] < L->len[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        if (ct->tensors[i].sharded) {
            int holders = 0;
            owner[i] = 0;
            for (int r = 0; r < world; r++)
                if (part_of(L, r, i)[1] > part_of(L, r, i)[0]) {
                    owner[i] = holders++ ? -1 : r;
                }
            continue;
        }
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best])
                best = r;
        owner[i] = best;
        load[best] += L->len[i] + 1;
    }
    free(order);
    free(load);
    return 0;
}

/* The sharded sections spread over several ranks (owner -1): each one's
 * parts gathered to rank 0, which hashes it into sha[i] and becomes its
 * owner. Collective; called by every rank after the data is written and
 * agreed good, in section order. One section at a time, so rank 0 holds at
 * most the largest of them. */
static int hash_spread(struct ct_comm *c, const struct layout *L, const struct ct_ckpt_content *ct,
                       int *owner, uint8_t *sha)
{
    const int world = c->world;
    uint64_t most = 0;
    for (int i = 0; i < L->n; i++)
        if (owner[i] < 0 && L->len[i] > most)
            most = L->len[i];
    if (most == 0)
        return 0;
    int rc = 0;
    if (most > (uint64_t)INT_MAX)
        rc = ct_error_set(CT_ERANGE, "checkpoint: a sharded section of %" PRIu64 " bytes spread over "
                          "several ranks (at most %d can be gathered to be hashed)", most, INT_MAX);
    int *counts = malloc(2 * (size_t)world * sizeof *counts);
    uint8_t *buf = c->rank == 0 ? malloc((size_t)most) : NULL;
    if (rc == 0 && (!counts || (c->rank == 0 && !buf)))
        rc = ct_error_set(CT_ENOMEM, "checkpoint: out of memory for a section of %" PRIu64
                          " bytes", most);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto out;
    for (int i = 0; i < L->n && rc == 0; i++) {
        if (owner[i] >= 0)
            continue;
        for (int r = 0; r < world; r++) {
            const uint64_t *p = part_of(L, r, i);
            counts[r] = (int)(p[1] - p[0]);
            counts[world + r] = (int)p[0];
        }
        const struct ct_ckpt_tensor *t = &ct->tensors[i];
        rc = c->ops->gatherv(c, t->data, (int)(t->part_end - t->part_begin), buf, counts,
                             counts + world, CT_ELEM_BYTE, 0);
        if (rc == 0 && c->rank == 0)
            rc = ct_sha256_buf(buf, L->len[i], &sha[(size_t)i * CT_SHA256_LEN]);
        owner[i] = 0;
    }
out:
    free(counts);
    free(buf);
    return rc;
}

/* This rank's share of the tensor digests, computed on a helper thread
 * while the main thread writes (hashing costs about as much as the write on
 * a fast disk; overlapped, the pair costs the larger of the two). The
 * thread makes no MPI calls. */
struct hash_job {
    const struct layout *L;
    const struct ct_ckpt_content *ct;
    const int *owner;
    int rank, rc;
    uint8_t *out; /* (n_tensors, 32) */
};

static void *hash_main(void *arg)
{
    struct hash_job *j = arg;
    for (int i = 0; i < j->L->n && j->rc == 0; i++)
        if (j->owner[i] == j->rank)
            j->rc = ct_sha256_buf(j->ct->tensors[i].data, j->L->len[i],
                                  &j->out[(size_t)i * CT_SHA256_LEN]);
    return NULL;
}

/* ---------------------------------------------------------------- data.bin */

/* MPI error classes that stand for an errno: said as strerror says it, so
 * that a full disk reads "No space left on device" whichever I/O layer hit it. */
static const struct {
    int cls, err;
} mpi_errnos[] = {{MPI_ERR_NO_SPACE, ENOSPC}, {MPI_ERR_QUOTA, EDQUOT}, {MPI_ERR_READ_ONLY, EROFS},
                  {MPI_ERR_ACCESS, EACCES},   {MPI_ERR_NO_SUCH_FILE, ENOENT}};

static int mpi_err(int err, const char *path, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int n = 0, cls = -1;
    if (MPI_Error_string(err, s, &n) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", err);
    if (MPI_Error_class(err, &cls) == MPI_SUCCESS)
        for (size_t i = 0; i < sizeof mpi_errnos / sizeof *mpi_errnos; i++)
            if (cls == mpi_errnos[i].cls)
                return ct_error_set(CT_EIO, "%s: %s failed: %s (%s)", path, what,
                                    strerror(mpi_errnos[i].err), s);
    return ct_error_set(CT_EIO, "%s: %s failed: %s", path, what, s);
}

/* pwrite [a, b) of this rank's bytes: the rank record rec (which starts at
 * a0) or the tensor region's pieces. */
static int rewrite_range(int fd, const char *path, const struct layout *L, const uint8_t *rec,
                         uint64_t a0, uint64_t a, uint64_t b)
{
    if (rec)
        return ct_pwrite_all(fd, rec + (a - a0), b - a, a, path);
    int rc = 0;
    for (int i = 0; i < L->n_pieces && rc == 0; i++) {
        const struct piece *pc = &L->pieces[i];
        uint64_t s = pc->off > a ? pc->off : a;
        uint64_t e = pc->off + pc->len < b ? pc->off + pc->len : b;
        if (s < e)
            rc = ct_pwrite_all(fd, pc->p + (s - pc->off), e - s, s, path);
    }
    return rc;
}

/* Open MPI's OMPIO reports a write that the file system refused (ENOSPC,
 * EDQUOT, EIO) as a success with a short count, and the errno is lost. To
 * name the cause, the bytes it did not write are written again here with
 * pwrite (this rank's own range): pwrite then fails and says why. The
 * checkpoint fails either way: MPI does not promise that the short count
 * is a prefix of this rank's range, nor that a two-phase aggregator wrote
 * the other ranks' bytes, and data.bin is not read back before it is
 * published, so a short collective write is never patched into a
 * checkpoint. */
static int finish_short_write(const char *path, const struct layout *L, const uint8_t *rec,
                              uint64_t a, uint64_t b, uint64_t done)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_error_set(CT_EIO, "%s: short write at offset %" PRIu64 " (%" PRIu64 " of %" PRIu64
                            " bytes), and it cannot be reopened: %s", path, a, done, b - a,
                            strerror(errno));
    int rc = rewrite_range(fd, path, L, rec, a, a + done, b);
    a += done;
    close(fd);
    if (rc == 0)
        rc = ct_error_set(CT_EIO, "%s: short write at offset %" PRIu64 ": MPI-IO wrote %" PRIu64
                          " of %" PRIu64 " bytes and gave no error (the file system did not say "
                          "why: retried with pwrite, which succeeded)", path, a - done, done,
                          b - (a - done));
    return rc;
}

/* ROMIO (MPICH's MPI-IO) reports a write that the file system refused as
 * MPI_ERR_IO ("Other I/O error"), the errno only in the text of its error
 * stack. As for OMPIO's short count above, this rank's range [a, b) is
 * written again with pwrite, which then fails and names the cause ("write
 * failed at offset N: No space left on device") as under Open MPI; when
 * pwrite succeeds (another rank's bytes failed, written by a two-phase
 * aggregator), the MPI error is reported as it came. The checkpoint fails
 * either way. */
static int failed_write(int err, const char *path, const char *what, const struct layout *L,
                        const uint8_t *rec, uint64_t a, uint64_t b)
{
    int cls = -1;
    if (MPI_Error_class(err, &cls) != MPI_SUCCESS || cls != MPI_ERR_IO || a >= b)
        return mpi_err(err, path, what);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int rc = fd < 0 ? 0 : rewrite_range(fd, path, L, rec, a, a, b);
    if (fd >= 0)
        close(fd);
    return rc < 0 ? rc : mpi_err(err, path, what);
}

/* One collective write of [a, b) of the tensor region from this rank's copy.
 * An empty range still takes part in the collective. */
static int write_range_mpi(MPI_File fh, const struct layout *L, uint64_t a, uint64_t b,
                           const char *path, int *blocklens, MPI_Aint *displs)
{
    MPI_Status st;
    int err;
    if (a >= b) {
        err = MPI_File_write_at_all(fh, 0, NULL, 0, MPI_BYTE, &st);
        return err == MPI_SUCCESS ? 0 : mpi_err(err, path, "MPI_File_write_at_all");
    }
    /* The pieces that cover [a, b): tensors and zero pads, in file order. */
    int np = 0;
    const uint8_t *single = NULL;
    for (int i = 0; i < L->n_pieces; i++) {
        const struct piece *pc = &L->pieces[i];
        uint64_t s = pc->off > a ? pc->off : a;
        uint64_t e = pc->off + pc->len < b ? pc->off + pc->len : b;
        if (s >= e)
            continue;
        single = pc->p + (s - pc->off);
        MPI_Get_address(single, &displs[np]);
        blocklens[np++] = (int)(e - s);
    }
    MPI_Datatype t = MPI_BYTE;
    const void *buf = single;
    int count = (int)(b - a);
    if (np > 1) {
        err = MPI_Type_create_hindexed(np, blocklens, displs, MPI_BYTE, &t);
        if (err == MPI_SUCCESS)
            err = MPI_Type_commit(&t);
        if (err != MPI_SUCCESS) {
            /* Still take part in the collective, then report. */
            MPI_File_write_at_all(fh, 0, NULL, 0, MPI_BYTE, &st);
            return mpi_err(err, path, "MPI_Type_create_hindexed");
        }
        buf = MPI_BOTTOM;
        count = 1;
    }
    err = MPI_File_write_at_all(fh, (MPI_Offset)a, buf, count, t, &st);
    int rc = 0;
    if (err != MPI_SUCCESS) {
        rc = failed_write(err, path, "MPI_File_write_at_all", L, NULL, a, b);
    } else {
        MPI_Count done = 0;
        MPI_Get_elements_x(&st, MPI_BYTE, &done);
        if (done < 0 || (uint64_t)done > b - a)
            rc = ct_error_set(CT_EIO, "%s: write at offset %" PRIu64 " reports %lld of %" PRIu64
                              " bytes", path, a, (long long)done, b - a);
        else if ((uint64_t)done != b - a)
            rc = finish_short_write(path, L, NULL, a, b, (uint64_t)done);
    }
    if (np > 1)
        MPI_Type_free(&t);
    return rc;
}

static int write_data_mpi(struct ct_comm *c, MPI_Comm mc, const char *path, const struct layout *L,
                          const struct ct_ckpt_content *ct, int rc)
{
    MPI_File fh;
    int err = MPI_File_open(mc, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    int64_t open_failed = err != MPI_SUCCESS;
    if (open_failed)
        rc = mpi_err(err, path, "MPI_File_open");
    /* If the open failed on some ranks only (a directory not shared between
     * nodes), the others cannot close collectively without hanging; they
     * leak the handle instead, and every rank reports the failure. */
    int e2 = ct_comm_allreduce_i64(c, &open_failed, 1, CT_REDUCE_MAX);
    if (e2 < 0)
        return e2;
    if (open_failed)
        return rc < 0 ? rc : ct_error_set(CT_EIO, "%s: MPI_File_open failed on another rank", path);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);

    if (rc == 0)
        rc = failpoint(FP_DATA, c->rank, path);

    int *blocklens = malloc(((size_t)L->n_pieces + 1) * sizeof *blocklens);
    MPI_Aint *displs = malloc(((size_t)L->n_pieces + 1) * sizeof *displs);
    if ((!blocklens || !displs) && rc == 0)
        rc = ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    for (int run = 0; run < L->n_runs; run++) {
        uint64_t lo, hi, rounds = rounds_of(L, run, c->world);
        range_of(L, run, c->rank, c->world, &lo, &hi);
        for (uint64_t k = 0; k < rounds; k++) {
            uint64_t a = lo + k * WRITE_CHUNK < hi ? lo + k * WRITE_CHUNK : hi;
            uint64_t b = a + WRITE_CHUNK < hi ? a + WRITE_CHUNK : hi;
            /* A rank that has failed writes nothing but still takes part. */
            int r2 = write_range_mpi(fh, L, rc == 0 ? a : 0, rc == 0 ? b : 0, path, blocklens,
                                     displs);
            if (rc == 0)
                rc = r2;
            ct_liveness_mark(-1);
        }
    }
    free(blocklens);
    free(displs);

    MPI_Status st;
    int mine = rc == 0 && ct->record_len > 0;
    uint64_t r0 = L->rec_off[c->rank], r1 = r0 + ct->record_len;
    err = MPI_File_write_at_all(fh, mine ? (MPI_Offset)r0 : 0, mine ? ct->record : NULL,
                                mine ? (int)ct->record_len : 0, MPI_BYTE, &st);
    if (err != MPI_SUCCESS && rc == 0)
        rc = failed_write(err, path, "MPI_File_write_at_all (rank record)", L, ct->record, r0,
                          mine ? r1 : r0);
    MPI_Count done = 0;
    if (err == MPI_SUCCESS && mine && MPI_Get_elements_x(&st, MPI_BYTE, &done) == MPI_SUCCESS &&
        (uint64_t)done != ct->record_len)
        rc = done < 0 || (uint64_t)done > ct->record_len
                 ? ct_error_set(CT_EIO, "%s: rank record write reports %lld of %zu bytes", path,
                                (long long)done, ct->record_len)
                 : finish_short_write(path, L, ct->record, r0, r1, (uint64_t)done);
    /* Every rank syncs (a collective), whatever happened before. */
    if ((err = MPI_File_sync(fh)) != MPI_SUCCESS && rc == 0)
        rc = mpi_err(err, path, "MPI_File_sync");
    if (rc == 0)
        rc = failpoint_at(FP_SYNC, c->rank, path, "MPI_File_sync");
    if ((err = MPI_File_close(&fh)) != MPI_SUCCESS && rc == 0)
        rc = mpi_err(err, path, "MPI_File_close");
    return rc;
}

/* The same layout through POSIX I/O, for the single-rank "self" communicator. */
static int write_data_posix(const char *path, const struct layout *L,
                            const struct ct_ckpt_content *ct, int rank, int rc)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rc < 0 ? rc : ct_error_set(CT_EIO, "%s: cannot create: %s", path, strerror(errno));
    if (rc == 0)
        rc = failpoint(FP_DATA, rank, path);
    for (int i = 0; i < L->n_pieces + 1 && rc == 0; i++) {
        const uint8_t *p = i < L->n_pieces ? L->pieces[i].p : ct->record;
        uint64_t off = i < L->n_pieces ? L->pieces[i].off : L->rec_off[0];
        uint64_t len = i < L->n_pieces ? L->pieces[i].len : ct->record_len;
        rc = ct_pwrite_all(fd, p, len, off, path);
    }
    if (rc == 0 && ftruncate(fd, (off_t)L->data_size) != 0)
        rc = ct_error_set(CT_EIO, "%s: ftruncate failed: %s", path, strerror(errno));
    if (rc == 0)
        rc = ct_fsync_file(fd, path);
    if (rc == 0)
        rc = failpoint_at(FP_SYNC, rank, path, "fsync");
    if (close(fd) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}

/* ---------------------------------------------------------------- rank 0: directories */

/* Remove the temporary directories that crashed writes left behind; one
 * that holds anything a writer does not make is left alone (with a warning):
 * a name like ours is no proof that the contents are. */
static int clean_stale(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", run_dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ct__ckpt_is_tmp_name(e->d_name))
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        int r = ct__ckpt_dir_is_ours(p);
        if (r == CT_ESTATE) {
            ct_log_warn("leaving %s in place: %s", p, ct_error_message());
            ct_error_clear();
            continue;
        }
        if (r == 0)
            r = ct__ckpt_remove_dir(p, NULL);
        if (r < 0 && r != CT_ENOENT && rc == 0)
            rc = r;
    }
    closedir(d);
    return rc;
}

struct step_dir {
    int64_t step;
    int has_manifest;
    char name[32]; /* "ckpt-<step>", as read from the directory */
};

static int cmp_step_desc(const void *a, const void *b)
{
    int64_t x = ((const struct step_dir *)a)->step, y = ((const struct step_dir *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The checkpoint directories of run_dir that are ours (ct__ckpt_dir_is_ours),
 * newest first; the others are named in a warning and left out, so nothing
 * below can count or delete them. */
static int list_step_dirs(const char *run_dir, struct step_dir **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", run_dir, strerror(errno));
    struct step_dir *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!ct__ckpt_parse_name(e->d_name, &s) || strlen(e->d_name) >= sizeof v->name)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        int r = ct__ckpt_dir_is_ours(p);
        if (r < 0) {
            if (r != CT_ENOENT)
                ct_log_warn("checkpoint retention leaves %s alone: %s", p, ct_error_message());
            ct_error_clear();
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct step_dir *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = ct_error_set(CT_ENOMEM, "retention: out of memory");
                break;
            }
            v = nv;
        }
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/manifest.pb", run_dir, e->d_name);
        v[n].step = s;
        v[n].has_manifest = lstat(p, &st) == 0;
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_step_desc);
    *out = v;
    *out_n = n;
    return 0;
}

/* Delete one checkpoint: its manifest first, made durable, so that a crash
 * from here on leaves a directory that no reader takes for a checkpoint and
 * that the next retention finishes off; failpoint "retain" sits in between. */
static int delete_step_dir(const char *dir)
{
    char p[1500];
    snprintf(p, sizeof p, "%s/manifest.pb", dir);
    if (unlink(p) != 0 && errno != ENOENT)
        return ct_error_set(CT_EIO, "%s: cannot remove: %s", p, strerror(errno));
    int rc = ct__ckpt_fsync_dir(dir);
    if (rc == 0)
        rc = failpoint_at(FP_RETAIN, 0, p, "unlink");
    return rc < 0 ? rc : ct__ckpt_remove_dir(dir, NULL);
}

/* Keep the newest keep_last and every step that is a multiple of keep_every;
 * never the one just written nor the newest. Directories named ckpt-<step>
 * without a manifest are the remains of an interrupted deletion (the
 * manifest goes first) and are finished off. Only directories that are ours
 * are counted or touched (list_step_dirs). */
static int retention(const char *run_dir, int64_t current, int keep_last, int keep_every)
{
    if (keep_last <= 0)
        return 0;
    struct step_dir *v;
    size_t n;
    int rc = list_step_dirs(run_dir, &v, &n);
    if (rc < 0)
        return rc;
    int kept = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int keep;
        if (!v[i].has_manifest)
            keep = v[i].step == current;
        else
            keep = v[i].step == current || kept < keep_last || i == 0 ||
                   (keep_every > 0 && v[i].step % keep_every == 0);
        if (v[i].has_manifest && kept < keep_last)
            kept++;
        if (keep)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, v[i].name);
        rc = delete_step_dir(p);
    }
    free(v);
    if (rc == 0)
        rc = ct__ckpt_fsync_dir(run_dir);
    return rc;
}

/* ---------------------------------------------------------------- manifest */

/* The manifest's repeated fields, allocated together. */
struct manifest_parts {
    Ctrain__TensorEntry *te, **tp;
    int64_t *shapes; /* 4 per tensor */
    Ctrain__RankEntry *re, **rp;
    Ctrain__KeyValue *kv, **lp, **sp; /* libraries, then scalars */
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
    free(p->df);
    free(p->dp);
}

static int parts_alloc(struct manifest_parts *p, size_t nt, size_t nw, size_t nl, size_t ns,
                       size_t nd)
{
    memset(p, 0, sizeof *p);
    p->te = calloc(nt + 1, sizeof *p->te);
    p->tp = calloc(nt + 1, sizeof *p->tp);
    p->shapes = calloc(4 * nt + 1, sizeof *p->shapes);
    p->re = calloc(nw, sizeof *p->re);
    p->rp = calloc(nw, sizeof *p->rp);
    p->kv = calloc(nl + ns + 1, sizeof *p->kv);
    p->lp = calloc(nl + 1, sizeof *p->lp);
    p->sp = calloc(ns + 1, sizeof *p->sp);
    p->df = calloc(nd + 1, sizeof *p->df);
    p->dp = calloc(nd + 1, sizeof *p->dp);
    if (!p->te || !p->tp || !p->shapes || !p->re || !p->rp || !p->kv || !p->lp || !p->sp ||
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
}

/* Where each tensor and each rank record lies in the data file, and its digest. */
static void manifest_sections(Ctrain__Manifest *m, const struct ct_ckpt_content *ct,
                              const struct layout *L, int world, const uint8_t *tensor_sha,
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

static int build_manifest(const struct ct_ckpt_content *ct, const struct layout *L, int world,
                          const uint8_t *tensor_sha, uint8_t **out, size_t *out_len)
{
    struct manifest_parts parts;
    int rc = parts_alloc(&parts, (size_t)L->n, (size_t)world, (size_t)ct->n_libraries,
                         (size_t)ct->n_scalars, (size_t)ct->n_data_files);
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

/* ---------------------------------------------------------------- the write */

struct publish {
    char tmp[1100], final[1100];
    int renamed, exchanged;
};

/* Rank 0: move the finished temporary directory to its final name. */
static int publish_dir(struct publish *p, const char *run_dir)
{
    if (rename(p->tmp, p->final) == 0) {
        p->renamed = 1;
    } else if (errno == ENOTEMPTY || errno == EEXIST) {
        /* Swapped out, it would be deleted after the commit: only ever a
         * checkpoint of ours, never a user's directory of the same name. */
        int r = ct__ckpt_dir_is_ours(p->final);
        if (r < 0)
            return ct_error_wrap(r, "%s exists already and is not a checkpoint to replace; remove it "
                                 "or move it away", p->final);
        if (renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->final, RENAME_EXCHANGE) != 0)
            return ct_error_set(CT_EIO, "%s exists already and cannot be replaced atomically (%s); "
                                "remove it or move it away", p->final, strerror(errno));
        p->renamed = p->exchanged = 1;
    } else {
        return ct_error_set(CT_EIO, "rename %s -> %s failed: %s", p->tmp, p->final, strerror(errno));
    }
    return ct__ckpt_fsync_dir(run_dir);
}

/* Rank 0: undo publish_dir after a failure (best effort; the error that
 * caused it is what gets reported). */
static void unpublish_dir(struct publish *p, const char *run_dir)
{
    if (p->renamed) {
        if (p->exchanged)
            renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->final, RENAME_EXCHANGE);
        else
            rename(p->final, p->tmp);
        p->renamed = p->exchanged = 0;
    }
    ct__ckpt_remove_dir(p->tmp, "manifest.pb");
    ct__ckpt_fsync_dir(run_dir);
}

/* What one write carries from phase to phase. The phases below are the
 * agreement points of the top comment; each returns 0 to go on, or the
 * failure every rank agreed on (already rolled back where the protocol says
 * so), which ends the write. */
struct ckw {
    struct layout L;
    struct publish pub;  /* rank 0's temporary and final directories (their names on every rank) */
    int tmp_made;        /* rank 0: pub.tmp exists and is ours to remove on failure */
    int use_mpi;
    MPI_Comm mc;
    int *owner;          /* (n_tensors) which rank hashes each tensor (hash_owners) */
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
    layout_free(&s->L);
}

/* A failure every rank agreed on: rank 0 removes what it made; the barrier
 * makes "nothing published" true on every rank on return. */
static int ckw_abandon(struct ct_comm *c, const struct ct_ckpt_write_params *wp, struct ckw *s,
                       int rc)
{
    if (c->rank == 0 && s->tmp_made)
        unpublish_dir(&s->pub, wp->run_dir);
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
    int rc = fp_parse();
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

/* Rank 0: the run directory, cleared of crashed writes' leftovers, and a
 * new temporary directory named after `id` (made here: pid and time). */
static int ckw_make_tmp(const struct ct_ckpt_write_params *wp, const struct ct_ckpt_content *ct,
                        struct ckw *s, char *id, size_t id_len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id, id_len, "%ld-%llx", (long)getpid(),
             (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    int rc = ct_mkdir_p(wp->run_dir, 0755);
    if (rc == 0)
        rc = clean_stale(wp->run_dir);
    if (rc == 0 && (size_t)snprintf(s->pub.tmp, sizeof s->pub.tmp, "%s/ckpt-%" PRId64 ".tmp-%s",
                                    wp->run_dir, ct->step, id) >= sizeof s->pub.tmp - 16)
        rc = ct_error_set(CT_EINVAL, "%s: path too long", wp->run_dir);
    if (rc == 0 && mkdir(s->pub.tmp, 0755) != 0)
        rc = ct_error_set(CT_EIO, "%s: cannot create directory: %s", s->pub.tmp, strerror(errno));
    s->tmp_made = rc == 0;
    return rc;
}

/* A0: local checks, the same sections on every rank, then rank 0 prepares
 * the directories; every rank learns their names. */
static int ckw_prepare(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                       const struct ct_ckpt_content *ct, struct ckw *s)
{
    int rc = ckw_check_args(wp, ct);
    if (rc == 0)
        rc = layout_tensors(&s->L, ct);
    /* A rank that failed already stays out of the comparison (its failure
     * is what A0 reports). */
    int64_t fp = rc == 0 ? layout_fingerprint(ct) : -1;
    int64_t fpr[2] = {fp >= 0 ? fp : INT64_MIN, fp >= 0 ? -fp : INT64_MIN};
    int e0 = ct_comm_allreduce_i64(c, fpr, 2, CT_REDUCE_MAX);
    if (e0 < 0)
        return e0; /* nothing made yet, and no collective to roll back with */
    if (rc == 0 && fp >= 0 && (fpr[0] != fp || -fpr[1] != fp))
        rc = ct_error_set(CT_EMISMATCH, "ranks passed different checkpoint sections (names, dtypes "
                          "or shapes differ; %d sections here)", ct->n_tensors);
    char id[64];
    memset(id, 0, sizeof id);
    if (c->rank == 0 && rc == 0)
        rc = ckw_make_tmp(wp, ct, s, id, sizeof id);
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
    struct layout *L = &s->L;
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
    struct record_info mine = {ct->record_len, {0}};
    if ((rc = ct_sha256_buf(ct->record, ct->record_len, mine.sha)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    if ((rc = c->ops->gather(c, &mine, sizeof mine, L->rec, 0)) < 0 ||
        (rc = ct_comm_bcast(c, L->rec, (size_t)world * sizeof *L->rec, 0)) < 0)
        return ckw_abandon_agree(c, wp, s, rc);
    uint64_t off = L->tensor_end;
    for (int r = 0; r < world; r++) {
        L->rec_off[r] = off;
        off += L->rec[r].len;
    }
    L->data_size = off;
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
    plan_runs(&s->L, ct, world);
    int r2 = hash_owners(&s->L, ct, world, s->owner);
    struct hash_job job = {&s->L, ct, s->owner, rank, 0, s->sha_mine};
    pthread_t hasher;
    int threaded = r2 == 0 && pthread_create(&hasher, NULL, hash_main, &job) == 0;
    char data_path[1200];
    snprintf(data_path, sizeof data_path, "%s/data.bin", s->pub.tmp);
    rc = s->use_mpi ? write_data_mpi(c, s->mc, data_path, &s->L, ct, rc)
                    : write_data_posix(data_path, &s->L, ct, rank, rc);
    if (threaded)
        pthread_join(hasher, NULL);
    else if (r2 == 0)
        hash_main(&job);
    if (r2 == 0 && job.rc < 0)
        r2 = ct_error_set(job.rc, "checkpoint: hashing the tensors failed");
    if (rc == 0)
        rc = r2;
    if (rc == 0)
        rc = failpoint(FP_SYNCED, rank, data_path);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return ckw_abandon(c, wp, s, rc);
    if ((rc = ct_comm_agree(c, hash_spread(c, &s->L, ct, s->owner, s->sha_mine))) < 0)
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
    int rc = build_manifest(ct, &s->L, world, s->sha_mine, &s->manifest, &s->manifest_len);
    if (rc == 0)
        rc = ct_sha256_buf(s->manifest, s->manifest_len, s->digest);
    if (rc == 0) {
        char line[CT_SHA256_HEX_LEN + 16];
        ct_sha256_hex(s->digest, line);
        strcat(line, "  manifest.pb\n");
        rc = ct__ckpt_write_file(s->pub.tmp, "manifest.sha256", line, strlen(line));
    }
    /* Written in place: the temporary directory is invisible to readers
     * until its rename, which is what makes the whole atomic. */
    if (rc == 0)
        rc = ct__ckpt_write_file(s->pub.tmp, "manifest.pb", s->manifest, s->manifest_len);
    if (rc == 0)
        rc = ct__ckpt_fsync_dir(s->pub.tmp);
    return rc;
}

/* A2: the digests gathered on rank 0, which writes the manifest and renames
 * the directory to its final name (rolled back on failure). */
static int ckw_publish(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                       const struct ct_ckpt_content *ct, struct ckw *s)
{
    const int rank = c->rank;
    char path[1200];
    snprintf(path, sizeof path, "%s/data.bin", s->pub.tmp);
    int rc = failpoint(FP_AGREED, rank, path);
    int r2 = c->ops->gather(c, s->sha_mine, ((size_t)s->L.n + 1) * CT_SHA256_LEN, s->sha_all, 0);
    if (r2 < 0)
        return ckw_abandon_agree(c, wp, s, r2);
    if (rank == 0 && rc == 0)
        rc = ckw_write_manifest(ct, c->world, s);
    snprintf(path, sizeof path, "%s/manifest.pb", s->pub.tmp);
    if (rc == 0)
        rc = failpoint(FP_MANIFEST, rank, path);
    if (rank == 0 && rc == 0)
        rc = publish_dir(&s->pub, wp->run_dir);
    if (rc == 0)
        rc = failpoint_at(FP_RENAMED, rank, s->pub.final, "rename");
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
            unpublish_dir(&s->pub, wp->run_dir);
            s->tmp_made = 0;
        } else {
            /* Committed (even if the final directory sync failed, which is
             * reported). The old checkpoint of the same step, if any, goes. */
            if (s->pub.exchanged)
                ct__ckpt_remove_dir(s->pub.tmp, "manifest.pb");
            s->tmp_made = 0;
            int r3 = retention(wp->run_dir, ct->step, wp->keep_last, wp->keep_every);
            if (r3 < 0)
                ct_log_warn("checkpoint retention in %s: %s", wp->run_dir, ct_error_message());
        }
    }
    char lpath[1200];
    snprintf(lpath, sizeof lpath, "%s/latest", wp->run_dir);
    if (rc == 0)
        rc = failpoint(FP_LATEST, c->rank, lpath);
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

int ct_ckpt_write(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                  const struct ct_ckpt_content *ct, uint8_t digest_user[CT_SHA256_LEN],
                  char *path_out, size_t path_len)
{
    struct ckw s;
    memset(&s, 0, sizeof s);
    s.use_mpi = ct_comm_mpi_handle(c, &s.mc) == 0;
    ct_error_clear();
    int rc = ckw_prepare(c, wp, ct, &s); /* A0 */
    if (rc == 0)
        rc = ckw_share_records(c, wp, ct, &s);
    if (rc == 0)
        rc = ckw_data(c, wp, ct, &s); /* A1 */
    if (rc == 0)
        rc = ckw_publish(c, wp, ct, &s); /* A2 */
    if (rc == 0)
        rc = ckw_commit(c, wp, ct, &s); /* A3 */
    if (rc == 0)
        rc = ckw_result(c, &s, digest_user, path_out, path_len);
    ckw_free(&s);
    return rc;
}
