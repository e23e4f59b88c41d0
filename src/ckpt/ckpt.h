/* Checkpoints: collective, atomic, verified. The format, the layout of
 * data.bin, the protocol and its tests in full: docs/checkpoints.md; the
 * schema: proto/checkpoint.proto.
 *
 * A checkpoint is a directory <run_dir>/ckpt-<step>/: data.bin (the sections
 * as raw little-endian tensors at 64-byte aligned offsets, then one
 * RankRecord per rank), manifest.pb (every section's name, dtype, shape,
 * offset, length and SHA-256, and the provenance) and manifest.sha256 (the
 * SHA-256 of manifest.pb, which is the checkpoint's digest, as sha256sum -c
 * reads it).
 *
 *     struct ct_ckpt_write_params wp = {.run_dir = "runs/x", .keep_last = 3};
 *     rc = ct_ckpt_write(comm, &wp, &content, digest, path, sizeof path); // every rank
 *     ...
 *     rc = ct_ckpt_find_latest("runs/x", path, sizeof path);
 *     rc = ct_ckpt_open(&ck, path);                 // every size and digest checked
 *     rc = ct_ckpt_read_tensor(&ck, "params/fc.weight", CT_DTYPE_F32, 2, shape, dst);
 *     ct_ckpt_close(&ck);
 *
 * The commit protocol, with the test-only failpoint of each phase in [ ]:
 * CT_FAILPOINT="<phase>:<rank>[:<action>]" kills that rank with SIGKILL
 * there or, with an action, fails there: ":fail" as an I/O error
 * ("failpoint PHASE on rank R"), ":enospc", ":eio", ":erofs", ":edquot" as
 * the system call at that point would, naming the file. Every rank passes
 * every phase (ranks other than 0 wait for rank 0 in 3 and 4).
 *   1. every rank writes its share of <run_dir>/ckpt-<step>.tmp-<id>/data.bin
 *      [data: opened, nothing of this rank written] and syncs it [sync: the
 *      sync's result replaced] [synced: closed, before the agreement];
 *   2. all ranks agree that every write succeeded [agreed];
 *   3. rank 0 writes and fsyncs manifest.sha256 and manifest.pb, fsyncs the
 *      directory [manifest], renames it to ckpt-<step>, fsyncs run_dir
 *      [renamed]; all ranks agree again (a failure renames it back);
 *   4. rank 0 replaces <run_dir>/latest (temporary, fsync, rename, fsync the
 *      directory): the commit point [latest: committed, before retention];
 *   5. rank 0 applies retention (keep_last, keep_every), deleting only
 *      directories that are ours, each one's manifest first [retain: a
 *      manifest removed, its data not yet]; failures here are warnings;
 *   6. (ckpt/chain.c, after ct_ckpt_write) rank 0 appends the checkpoint's
 *      chain.jsonl line [chain: half of it written, a torn line].
 * A failure on any rank before 4 is reported on every rank (which rank,
 * what) and publishes nothing; ":fail" at `latest` is reported by every rank
 * although the checkpoint is committed. A crash at any moment leaves at
 * worst a stale .tmp-* directory, removed by the next writer. An existing
 * ckpt-<step> of ours is swapped out atomically (renameat2 RENAME_EXCHANGE)
 * and removed after 4; one that is not ours is refused, naming it.
 *
 * Reading verifies before trusting: sizes are capped before allocating, the
 * manifest must parse, have a known version and match manifest.sha256,
 * data.bin must have the promised size, every section's SHA-256 must match.
 * Errors name the file, the section, the expected and the found value.
 */
#ifndef CT_CKPT_CKPT_H
#define CT_CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/sha256.h"
#include "core/tensor.h"
#include "parallel/comm.h"

#define CT_CKPT_FORMAT_VERSION 1
/* Bounds a reader trusts before allocating. */
#define CT_CKPT_MAX_MANIFEST_BYTES ((size_t)64 << 20)
#define CT_CKPT_MAX_RECORD_BYTES ((size_t)1 << 20)

enum ct_dtype {
    CT_DTYPE_F32,
    CT_DTYPE_F64,
    CT_DTYPE_I64,
    CT_DTYPE_U8,
    CT_DTYPE_COUNT
};
const char *ct_dtype_name(enum ct_dtype t); /* "f32", ... */
size_t ct_dtype_size(enum ct_dtype t);

/* One section: replicated (the same bytes on every rank) or sharded. */
struct ct_ckpt_tensor {
    char name[128];          /* "params/layers.0.weight" */
    enum ct_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data;        /* prod(shape) * dtype size bytes; sharded: this rank's part */
    /* Sharded (the optimizer state of dist.shard_optimizer): this rank holds
     * bytes [part_begin, part_end) of the section, at `data`; the ranks'
     * parts tile the section in rank order (a rank may hold none: begin ==
     * end). Each rank writes its part at its offset, so the file holds the
     * same bytes as a replicated write of the whole section would; its
     * digest is computed by the one rank holding it all, or by rank 0 from
     * the parts gathered. The flag must be the same on every rank. */
    int sharded;
    uint64_t part_begin, part_end;
};

struct ct_ckpt_kv {
    const char *key, *value;
};

struct ct_ckpt_data_file {
    const char *path;
    uint64_t size;
    uint8_t sha256[CT_SHA256_LEN];
    const char *format; /* "idx", "npy", "cifar10"; NULL: not recorded (before stop 19) */
};

/* What one checkpoint holds. Everything but `record` must be identical on
 * all ranks. */
struct ct_ckpt_content {
    int64_t step, epoch, epoch_step;
    const char *config_text;                  /* resolved INI */
    const char *code_version;
    const struct ct_ckpt_kv *libraries;
    int n_libraries;
    const struct ct_ckpt_data_file *data_files;
    int n_data_files;
    const uint8_t *parent_sha256;             /* NULL: the first checkpoint of the chain */
    const char *placement;                    /* binding table, may be NULL */
    const char *const *changes;               /* may be NULL */
    int n_changes;
    const struct ct_ckpt_kv *scalars;         /* optimizer step count, schedule, counters */
    int n_scalars;
    const struct ct_ckpt_kv *transport;       /* what carried the traffic; may be NULL */
    int n_transport;
    const struct ct_ckpt_tensor *tensors;
    int n_tensors;
    const void *record;                       /* this rank's serialized RankRecord */
    size_t record_len;
};

struct ct_ckpt_write_params {
    const char *run_dir;
    int keep_last;     /* retention: keep the newest keep_last (0: keep all) ... */
    int keep_every;    /* ... and every checkpoint whose step is a multiple of this (0: none) */
    /* NULL, or called on rank 0 before it touches the run directory (A0,
     * before stale temporary directories are removed) and again before it
     * publishes the checkpoint (A2, before the rename): a failure there is
     * the write's failure on every rank, and nothing is published. The
     * trainer passes "the run directory is still this job's" (run/owner.h). */
    int (*guard)(void *ctx);
    void *guard_ctx;
};

/* Collective. On success every rank gets the new checkpoint's digest (and
 * path in `path_out` if not NULL). On failure every rank returns the same
 * error, rank 0's message says which rank failed and why, and nothing was
 * published. digest_out is written only on success, at the very end, so it
 * may be the buffer content->parent_sha256 points to. */
int ct_ckpt_write(struct ct_comm *c, const struct ct_ckpt_write_params *wp,
                  const struct ct_ckpt_content *content, uint8_t digest_out[CT_SHA256_LEN],
                  char *path_out, size_t path_len);

/* An opened, verified checkpoint. */
struct ct_ckpt {
    char dir[1024];
    uint8_t digest[CT_SHA256_LEN];  /* SHA-256 of manifest.pb */
    void *manifest;                 /* Ctrain__Manifest * (checkpoint.pb-c.h) */
    uint8_t *data;                  /* data.bin from byte data_base on, verified */
    size_t data_size;               /* bytes at data */
    size_t data_base;               /* 0, or (ct_ckpt_open_records) where the rank records start */
    int records_only;               /* ct_ckpt_open_records: no section can be read */
};

/* Open and verify: manifest parses (size capped), version known, its digest
 * matches manifest.sha256, data.bin size matches, every tensor and rank
 * record digest matches. Reads data.bin whole. On failure *ck holds no
 * data (ct_ckpt_close on it is harmless). Not collective: each rank opens alone. */
int ct_ckpt_open(struct ct_ckpt *ck, const char *dir);
/* As ct_ckpt_open, but of data.bin only the rank records are read and
 * verified (the sections' entries are checked for bounds, dtype and shape,
 * not read): the manifest's keys and every rank record for the price of
 * a few KiB, not the whole checkpoint (the chain entry of a checkpoint just
 * written: at GPT-2 small's shape 1.5 GB read and hashed again on rank 0).
 * Reading a section of it is refused (CT_ESTATE). */
int ct_ckpt_open_records(struct ct_ckpt *ck, const char *dir);
void ct_ckpt_close(struct ct_ckpt *ck);
/* Copy section `name` into dst, checking dtype and shape; errors name the
 * checkpoint, the section, expected and found. */
int ct_ckpt_read_tensor(const struct ct_ckpt *ck, const char *name, enum ct_dtype dtype, int ndim,
                        const int64_t *shape, void *dst);
/* Bytes [begin, end) of section `name` into dst, after the same checks: a
 * sharded optimizer's slice of a state tensor, whatever the world size
 * that wrote it. */
int ct_ckpt_read_tensor_part(const struct ct_ckpt *ck, const char *name, enum ct_dtype dtype,
                             int ndim, const int64_t *shape, uint64_t begin, uint64_t end,
                             void *dst);
/* Does the checkpoint have section `name`? */
int ct_ckpt_has_tensor(const struct ct_ckpt *ck, const char *name);
/* The serialized RankRecord of `rank` (points into ck->data). */
int ct_ckpt_rank_record(const struct ct_ckpt *ck, int rank, const uint8_t **bytes, size_t *len);
/* A scalar by key (CT_ENOENT if absent). */
int ct_ckpt_scalar(const struct ct_ckpt *ck, const char *key, const char **value);

/* ---------------------------------------------------------------- rank records
 *
 * One rank's own state, as plain C (codec.c is the only code that knows it
 * is a protobuf RankRecord on disk). Typical use:
 *
 *     struct ct_rank_record r = {.rank = rank, .world_size = world, ...};
 *     uint8_t *bytes; size_t len;
 *     rc = ct_rank_record_pack(&r, &bytes, &len);   // content.record = bytes
 *     ...
 *     rc = ct_ckpt_read_rank_record(&ck, rank, &r); // after ct_ckpt_open
 */
#define CT_RANK_RECORD_MAX_RNG 8

/* One counter-based random stream: Philox key and the next counter. */
struct ct_rng_stream_state {
    char purpose[16];        /* "init", "shuffle", "dropout", "augment" */
    uint32_t key0, key1;
    uint64_t counter;        /* the next counter value this rank would use */
};

struct ct_rank_record {
    int32_t rank, world_size;
    char host[256];
    char binding[800];       /* cores, NUMA node, device */
    int n_rng;               /* 0..CT_RANK_RECORD_MAX_RNG */
    struct ct_rng_stream_state rng[CT_RANK_RECORD_MAX_RNG];
    int64_t loader_epoch, loader_step;   /* next global step of that epoch */
    uint64_t loader_first, loader_count; /* this rank's slice of each global batch */
};

/* Serialize (malloc'd bytes, free()). CT_EINVAL when a string is not
 * NUL-terminated inside its array or n_rng is out of range. */
int ct_rank_record_pack(const struct ct_rank_record *r, uint8_t **out, size_t *len);
/* Parse untrusted bytes. `what` names their source in errors ("DIR/data.bin:
 * rank record 3"). Refuses (CT_EFORMAT) more than CT_CKPT_MAX_RECORD_BYTES
 * before parsing, bytes that do not parse or lack a required field, strings
 * that do not fit their arrays, more than CT_RANK_RECORD_MAX_RNG streams.
 * *r is zeroed first, so it holds nothing half-read on failure. */
int ct_rank_record_unpack(const uint8_t *bytes, size_t len, const char *what,
                          struct ct_rank_record *r);
/* The record of `rank` in an open checkpoint, parsed; also refused when it
 * says it is another rank's. CT_ENOENT when the checkpoint has no record for
 * that rank (written by fewer ranks). */
int ct_ckpt_read_rank_record(const struct ct_ckpt *ck, int rank, struct ct_rank_record *r);

/* ---------------------------------------------------------------- manifest fields
 *
 * What an open checkpoint's manifest records, without its protobuf types.
 * Strings point into the checkpoint and live until ct_ckpt_close. On a
 * checkpoint that is not open: NULL, 0, or CT_ESTATE. */
const char *ct_ckpt_config_text(const struct ct_ckpt *ck);  /* the resolved INI */
const char *ct_ckpt_code_version(const struct ct_ckpt *ck);
const char *ct_ckpt_placement(const struct ct_ckpt *ck);    /* "" when none was recorded */
int64_t ct_ckpt_step(const struct ct_ckpt *ck);             /* global steps completed */
int64_t ct_ckpt_epoch(const struct ct_ckpt *ck);            /* the sampler's epoch */
int64_t ct_ckpt_epoch_step(const struct ct_ckpt *ck);       /* its next step in that epoch */
int64_t ct_ckpt_created_unix(const struct ct_ckpt *ck);     /* 0 when not recorded */
/* Ranks that wrote it; also its number of rank records (one per rank). */
int ct_ckpt_world_size(const struct ct_ckpt *ck);
/* The parent checkpoint's digest; CT_ENOENT for the first of a chain. */
int ct_ckpt_parent_digest(const struct ct_ckpt *ck, uint8_t out[CT_SHA256_LEN]);
/* Data files by index (0..n-1) or by path (CT_ENOENT if not recorded);
 * out->path points into the checkpoint. CT_EFORMAT for a digest that is not
 * 32 bytes. */
int ct_ckpt_n_data_files(const struct ct_ckpt *ck);
int ct_ckpt_data_file(const struct ct_ckpt *ck, int i, struct ct_ckpt_data_file *out);
int ct_ckpt_find_data_file(const struct ct_ckpt *ck, const char *path,
                           struct ct_ckpt_data_file *out);
/* Library versions ("mpi" -> "Open MPI v4.1.4, ...") and recorded changes,
 * by index. */
int ct_ckpt_n_libraries(const struct ct_ckpt *ck);
int ct_ckpt_library(const struct ct_ckpt *ck, int i, struct ct_ckpt_kv *out);
int ct_ckpt_n_changes(const struct ct_ckpt *ck);
const char *ct_ckpt_change(const struct ct_ckpt *ck, int i); /* NULL out of range */

/* The replicated sections of an open checkpoint, by index in manifest order
 * (for audits that compare two checkpoints tensor by tensor). data points
 * into ck->data (verified at open), name into the manifest. CT_ERANGE out of
 * range, CT_EFORMAT for a dtype or shape this reader does not know. */
struct ct_ckpt_section {
    const char *name;
    enum ct_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t length;                 /* bytes */
    uint8_t sha256[CT_SHA256_LEN];
};
int ct_ckpt_n_sections(const struct ct_ckpt *ck);
int ct_ckpt_section_at(const struct ct_ckpt *ck, int i, struct ct_ckpt_section *out);
/* Scalars by index (key and value point into the manifest). */
int ct_ckpt_n_scalars(const struct ct_ckpt *ck);
int ct_ckpt_scalar_at(const struct ct_ckpt *ck, int i, struct ct_ckpt_kv *out);

/* The newest committed checkpoint of run_dir: `latest` if it names a valid
 * checkpoint, else (pointer missing or damaged) the highest ckpt-<step>
 * whose manifest verifies. "Valid" here is the cheap check (manifest parses,
 * version known, digest matches manifest.sha256, data.bin has the promised
 * size); ct_ckpt_open then checks every section, so a committed but corrupt
 * checkpoint fails loudly instead of being skipped for an older one. A
 * fallback to the scan is logged as a warning. CT_ENOENT when there is none. */
int ct_ckpt_find_latest(const char *run_dir, char *path_out, size_t path_len);

#endif
