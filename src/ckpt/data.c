/* data.bin written by the ranks together: through MPI-IO
 * (MPI_File_write_at_all) for an MPI communicator, each rank writing its
 * ranges of the plan (layout-impl.h) in rounds of at most
 * ct__ckpt_write_chunk bytes (no count exceeds INT_MAX, and each round is a
 * liveness mark for the hang watchdog), then its own record; through pwrite
 * for the single-rank "self" communicator. Failpoints "data" and "sync"
 * fire here.
 *
 * MPI-IO loses the errno of a write the file system refused (ENOSPC): Open
 * MPI's OMPIO reports a short count, MPICH's ROMIO the generic MPI_ERR_IO.
 * This rank's bytes are then written again with pwrite, to name the errno,
 * and the checkpoint fails either way (the short-write repair below).
 * Not here: what the bytes are (layout.c), hashing them (hash.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/write-impl.h"
#include "core/error.h"
#include "core/liveness.h"
#include "core/path.h"

/* One MPI-IO call moves at most this many bytes (an int count of MPI_BYTE);
 * a variable so tests can make it small and exercise many rounds. */
uint64_t ct__ckpt_write_chunk = (uint64_t)256 << 20;
#define WRITE_CHUNK ct__ckpt_write_chunk

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
static int rewrite_range(int fd, const char *path, const struct ct__ckpt_layout *L,
                         const uint8_t *rec, uint64_t a0, uint64_t a, uint64_t b)
{
    if (rec)
        return ct_pwrite_all(fd, rec + (a - a0), b - a, a, path);
    int rc = 0;
    for (int i = 0; i < L->n_pieces && rc == 0; i++) {
        const struct ct__ckpt_piece *pc = &L->pieces[i];
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
static int finish_short_write(const char *path, const struct ct__ckpt_layout *L,
                              const uint8_t *rec, uint64_t a, uint64_t b, uint64_t done)
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
static int failed_write(int err, const char *path, const char *what,
                        const struct ct__ckpt_layout *L, const uint8_t *rec, uint64_t a, uint64_t b)
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
static int write_range_mpi(MPI_File fh, const struct ct__ckpt_layout *L, uint64_t a, uint64_t b,
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
        const struct ct__ckpt_piece *pc = &L->pieces[i];
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

/* Can this rank open data.bin for writing, as plain POSIX sees it? Rank 0
 * creates it (in the temporary directory it has just made); the others only
 * open what rank 0 made, so that a rank on a host that does not share the
 * run directory creates nothing in its own copy of it. */
static int can_open(const struct ct_comm *c, const char *path)
{
    int fd = open(path, c->rank == 0 ? O_WRONLY | O_CREAT | O_CLOEXEC : O_WRONLY | O_CLOEXEC, 0666);
    if (fd >= 0)
        return close(fd) == 0 ? 0 : ct_error_set(CT_EIO, "%s: close failed: %s", path, strerror(errno));
    if (c->rank == 0)
        return ct_error_set(CT_EIO, "%s: cannot create: %s", path, strerror(errno));
    return ct_error_set(CT_EIO, "%s: rank %d on host %s cannot open the file rank 0 created: %s "
                        "(every rank writes its part of data.bin: the run directory must be on "
                        "a file system every host shares)", path, c->rank, c->host, strerror(errno));
}

/* Is the open of data.bin, as far as this rank can tell, going to succeed
 * on every rank? MPI_File_open is collective, and a failure on some ranks
 * only is not reported: under Open MPI's OMPIO the rank that failed runs
 * its error path (a file close, with a barrier) while the others go on with
 * the open's own collectives (its shared-file-pointer set-up, a barrier),
 * and every rank blocks inside MPI_File_open for ever (seen with Open MPI
 * 4.1 when one rank's directory does not exist; MPICH's ROMIO agrees on the
 * error itself and returns it on every rank). So every rank first opens
 * it with POSIX, rank 0 before the others, and agrees on that: 1 when some
 * rank cannot (every rank then skips the collective open; this rank's own
 * failure is in *rc), 0 to go on. */
static int open_refused(struct ct_comm *c, const char *path, int *rc)
{
    int64_t bad = 0;
    for (int turn = 0; turn < 2 && !bad; turn++) { /* 0: rank 0 creates it; 1: the others open it */
        int r = (turn == 0) == (c->rank == 0) ? can_open(c, path) : 0;
        bad = r < 0;
        if (r < 0 && *rc == 0)
            *rc = r;
        int e = ct_comm_allreduce_i64(c, &bad, 1, CT_REDUCE_MAX);
        if (e < 0) {
            if (*rc == 0)
                *rc = e;
            return 1;
        }
    }
    return bad != 0;
}

int ct__ckpt_write_data_mpi(struct ct_comm *c, MPI_Comm mc, const char *path,
                            const struct ct__ckpt_layout *L, const struct ct_ckpt_content *ct, int rc)
{
    /* A rank that is to write its share of the temporary directory but does
     * not see it (failpoint "open"): as on a host that does not share the
     * run directory, the path it opens does not exist. */
    char hidden[1300];
    const char *slash = strrchr(path, '/');
    if (ct__ckpt_fp_hit(CT__FP_OPEN, c->rank) && slash) {
        snprintf(hidden, sizeof hidden, "%.*s.not-on-this-host%s", (int)(slash - path), path, slash);
        path = hidden;
    }
    /* A rank that cannot open it returns that failure; the others return
     * their own status and the agreement after the data (A1 in write.c)
     * reports it on every rank. */
    if (open_refused(c, path, &rc))
        return rc;
    MPI_File fh;
    int err = MPI_File_open(mc, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
    int64_t open_failed = err != MPI_SUCCESS;
    if (open_failed)
        rc = mpi_err(err, path, "MPI_File_open");
    /* If the open still failed on some ranks only, the others cannot close
     * collectively without hanging; they leak the handle instead, and every
     * rank reports the failure. */
    int e2 = ct_comm_allreduce_i64(c, &open_failed, 1, CT_REDUCE_MAX);
    if (e2 < 0)
        return e2;
    if (open_failed)
        return rc < 0 ? rc : ct_error_set(CT_EIO, "%s: MPI_File_open failed on another rank", path);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);

    if (rc == 0)
        rc = ct__ckpt_fp(CT__FP_DATA, c->rank, path);

    int *blocklens = malloc(((size_t)L->n_pieces + 1) * sizeof *blocklens);
    MPI_Aint *displs = malloc(((size_t)L->n_pieces + 1) * sizeof *displs);
    if ((!blocklens || !displs) && rc == 0)
        rc = ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    for (int run = 0; run < L->n_runs; run++) {
        uint64_t lo, hi, rounds = ct__ckpt_rounds_of(L, run, c->world, WRITE_CHUNK);
        ct__ckpt_range_of(L, run, c->rank, c->world, &lo, &hi);
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
        rc = ct__ckpt_fp_at(CT__FP_SYNC, c->rank, path, "MPI_File_sync");
    if ((err = MPI_File_close(&fh)) != MPI_SUCCESS && rc == 0)
        rc = mpi_err(err, path, "MPI_File_close");
    return rc;
}

int ct__ckpt_write_data_posix(const char *path, const struct ct__ckpt_layout *L,
                              const struct ct_ckpt_content *ct, int rank, int rc)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return rc < 0 ? rc : ct_error_set(CT_EIO, "%s: cannot create: %s", path, strerror(errno));
    if (rc == 0)
        rc = ct__ckpt_fp(CT__FP_DATA, rank, path);
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
        rc = ct__ckpt_fp_at(CT__FP_SYNC, rank, path, "fsync");
    if (close(fd) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}
