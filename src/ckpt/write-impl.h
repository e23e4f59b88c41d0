/* The checkpoint writer's pieces, one file each, put together by the commit
 * (write.c, ct_ckpt_write) in the order of the protocol in ckpt.h:
 *
 *   failpoints.c  the CT_FAILPOINT phases and what an armed one does
 *   layout.c      where each byte of data.bin goes (layout-impl.h; pure)
 *   hash.c        the section digests: a helper thread, rank 0 for spread sections
 *   data.c        data.bin through MPI-IO or pwrite, the short-write repair
 *   manifest.c    the manifest and its sidecar (rank 0)
 *   dirs.c        rank 0's directories: temporary, published, retention
 *
 * A sketch of one write as every rank makes it (errors and agreements left out):
 *
 *     ct__ckpt_fp_read();                               // CT_FAILPOINT, once per write
 *     ct__ckpt_layout_tensors(&L, ...); ...             // the plan (layout-impl.h)
 *     ct__ckpt_make_tmp(run_dir, step, &pub, id, n);    // rank 0
 *     ct__ckpt_hash_start(&h);
 *     ct__ckpt_write_data_mpi(c, mc, path, &L, ct, 0);  // or _posix
 *     ct__ckpt_hash_finish(&h);
 *     ct__ckpt_hash_spread(c, &L, ct, owner, sha);
 *     ct__ckpt_manifest_build(...); ct__ckpt_manifest_store(pub.tmp, ...);  // rank 0
 *     ct__ckpt_publish_dir(&pub, run_dir);              // rank 0
 *     ct__ckpt_retention(run_dir, step, keep_last, keep_every);  // rank 0, after `latest`
 */
#ifndef CT_CKPT_WRITE_IMPL_H
#define CT_CKPT_WRITE_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ckpt/layout-impl.h"

/* ---------------------------------------------------------------- failpoints.c */

/* The phases (ckpt.h says where each fires); CT_FAILPOINT names them by
 * their names in failpoints.c's table, in this order. */
enum ct__ckpt_phase {
    CT__FP_DATA,
    CT__FP_SYNCED,
    CT__FP_AGREED,
    CT__FP_MANIFEST,
    CT__FP_RENAMED,
    CT__FP_LATEST,
    CT__FP_CHAIN,
    CT__FP_SYNC,
    CT__FP_RETAIN,
    CT__FP_OPEN,
    CT__FP_COUNT
};

/* Read CT_FAILPOINT for this write (a getenv and a few compares, nothing
 * next to the write itself, so a test can arm and disarm failpoints in one
 * process). A malformed value fails the write (CT_EINVAL, naming the
 * variable). */
int ct__ckpt_fp_read(void);
/* Called by every rank at every phase: 0 unless the failpoint read last
 * names this phase and rank; then SIGKILL, or CT_EIO with the action's
 * message. `path` and `op` say which file and which call an injected errno
 * stands for ("DIR/data.bin: write failed: No space left on device
 * (injected: ...)"). */
int ct__ckpt_fp_at(enum ct__ckpt_phase phase, int rank, const char *path, const char *op);
/* ct__ckpt_fp_at with op "write". */
int ct__ckpt_fp(enum ct__ckpt_phase phase, int rank, const char *path);
/* Does the failpoint read last name this phase and rank? For a phase that
 * changes what a rank sees rather than failing a call (open: this rank does
 * not see the checkpoint's temporary directory). */
int ct__ckpt_fp_hit(enum ct__ckpt_phase phase, int rank);

/* ---------------------------------------------------------------- hash.c */

/* This rank's share of the section digests (owner[i] == rank), computed on
 * a helper thread while the main thread writes; without a thread, in
 * ct__ckpt_hash_finish. */
struct ct__ckpt_hasher {
    const struct ct__ckpt_layout *L;
    const struct ct_ckpt_content *ct;
    const int *owner;
    int rank, rc;
    uint8_t *out; /* (n_tensors, 32) */
    pthread_t thread;
    int threaded;
};
void ct__ckpt_hash_start(struct ct__ckpt_hasher *h);
/* Waits for the digests; CT_E* (with a message) if hashing failed. */
int ct__ckpt_hash_finish(struct ct__ckpt_hasher *h);
/* The sharded sections spread over several ranks (owner -1): each one's
 * parts gathered to rank 0 in windows of 8 MiB, which it hashes as they
 * come into sha[i] (holding one window, not the section), and becomes its
 * owner. Collective; called by every rank after the data is written and
 * agreed good, in section order. */
int ct__ckpt_hash_spread(struct ct_comm *c, const struct ct__ckpt_layout *L,
                         const struct ct_ckpt_content *ct, int *owner, uint8_t *sha);
/* Its window in bytes (8 MiB); tests set a small one. */
extern uint64_t ct__ckpt_spread_window;

/* ---------------------------------------------------------------- data.c */

/* Bytes per MPI-IO write call (256 MiB); tests lower it to force many rounds. */
extern uint64_t ct__ckpt_write_chunk;

/* Collective: data.bin at `path` through MPI-IO on mc, this rank's ranges
 * of the plan and its record; synced and closed. rc: this rank's failure
 * so far (it then writes nothing but still takes part); the result is the
 * first failure. Failpoints "data" and "sync". */
int ct__ckpt_write_data_mpi(struct ct_comm *c, MPI_Comm mc, const char *path,
                            const struct ct__ckpt_layout *L, const struct ct_ckpt_content *ct, int rc);
/* The same layout through POSIX I/O, for the single-rank "self" communicator. */
int ct__ckpt_write_data_posix(const char *path, const struct ct__ckpt_layout *L,
                              const struct ct_ckpt_content *ct, int rank, int rc);

/* ---------------------------------------------------------------- manifest.c */

/* The packed manifest (malloc'd) of content ct laid out as L by `world`
 * ranks, with the section digests tensor_sha (n_tensors, 32); refused
 * (CT_ERANGE) above the reader's cap. */
int ct__ckpt_manifest_build(const struct ct_ckpt_content *ct, const struct ct__ckpt_layout *L,
                            int world, const uint8_t *tensor_sha, uint8_t **out, size_t *out_len);
/* Its SHA-256 in digest; DIR/manifest.sha256 then DIR/manifest.pb written
 * and fsynced, then DIR synced. */
int ct__ckpt_manifest_store(const char *dir, const uint8_t *manifest, size_t len,
                            uint8_t digest[CT_SHA256_LEN]);

/* ---------------------------------------------------------------- dirs.c (rank 0) */

/* A write's temporary and final directories (their names on every rank). */
struct ct__ckpt_publish {
    char tmp[1100], final[1100];
    int renamed, exchanged;
};

/* run_dir made if missing and cleared of crashed writes' leftovers, then
 * the new temporary directory p->tmp, named after `id` (made here: pid and
 * time). */
int ct__ckpt_make_tmp(const char *run_dir, int64_t step, struct ct__ckpt_publish *p, char *id,
                      size_t id_len);
/* Move p->tmp to p->final (swapping out an existing checkpoint of ours of
 * that name), then fsync run_dir. */
int ct__ckpt_publish_dir(struct ct__ckpt_publish *p, const char *run_dir);
/* Undo ct__ckpt_publish_dir and remove p->tmp, after a failure (best effort;
 * the error that caused it is what gets reported). */
void ct__ckpt_unpublish_dir(struct ct__ckpt_publish *p, const char *run_dir);
/* Keep the newest keep_last (0: keep all) and every step that is a multiple
 * of keep_every; never `current` nor the newest; only directories that are
 * ours are counted or touched. Failpoint "retain". */
int ct__ckpt_retention(const char *run_dir, int64_t current, int keep_last, int keep_every);

#endif
