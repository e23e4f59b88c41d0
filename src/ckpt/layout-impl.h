/* The data.bin layout planner: where each byte of a checkpoint's data file
 * goes, which rank writes it and which rank hashes each section. Pure
 * functions of the tensor list and the world size: no MPI, no I/O. Every
 * rank computes the same plan from the same list, which is what lets them
 * write one file together without telling each other more than the sharded
 * sections' parts and the records' lengths; tests build the plans of ranks
 * 0..N-1 side by side (tests/unit/test_ckpt_layout.c).
 *
 * The file: the sections in the given order at 64-byte aligned offsets
 * (pads zeroed), then one record per rank, back to back in rank order. The
 * tensor region is cut into runs of consecutive sections that are all
 * replicated (each rank writes an equal, 4 KiB-aligned share) or all sharded
 * (each rank writes from its first part to its last). Not here: the writes
 * themselves (data.c), the exchange of parts and record lengths (write.c).
 *
 *     struct ct__ckpt_layout L = {0};
 *     rc = ct__ckpt_layout_tensors(&L, tensors, n);   // offsets; this rank's pieces
 *     // if any section is sharded: L.parts = every rank's ct__ckpt_layout_my_parts
 *     rc = ct__ckpt_layout_check_parts(&L, tensors, world);
 *     ct__ckpt_plan_runs(&L, tensors, world);
 *     for (k = 0; k < L.n_runs; k++)
 *         ct__ckpt_range_of(&L, k, rank, world, &lo, &hi);  // rank writes [lo, hi)
 *     rc = ct__ckpt_hash_owners(&L, tensors, world, owner);
 *     // L.rec[r].len = rank r's record length: ct__ckpt_layout_place_records(&L, world)
 *     ct__ckpt_layout_free(&L);
 */
#ifndef CT_CKPT_LAYOUT_IMPL_H
#define CT_CKPT_LAYOUT_IMPL_H

#include <stdint.h>

#include "ckpt/ckpt-impl.h"

/* Shares of a replicated run start at multiples of this (file system blocks). */
#define CT__CKPT_SHARE_ALIGN ((uint64_t)4096)

/* A stretch of this rank's bytes: a section (what it holds of a sharded
 * one) or a zero pad. */
struct ct__ckpt_piece {
    const uint8_t *p;  /* source bytes */
    uint64_t off, len; /* in data.bin */
};

struct ct__ckpt_record_info {
    uint64_t len;
    uint8_t sha[CT_SHA256_LEN];
};

/* Consecutive sections that are all replicated (striped over the ranks in
 * equal shares) or all sharded (each rank writes what it holds). */
struct ct__ckpt_run {
    int first, last;     /* sections */
    int sharded;
    uint64_t lo, hi;     /* file bytes, the pad after the last section included */
};

struct ct__ckpt_layout {
    int n;               /* tensors */
    uint64_t *off, *len; /* per tensor; off[n] = tensor_end */
    uint64_t *parts;     /* (world, n, 2) every rank's [begin, end) of each sharded section; NULL: none */
    struct ct__ckpt_run *runs;
    int n_runs;
    uint64_t tensor_end; /* aligned end of the tensor region = first record */
    uint64_t *rec_off;   /* per rank */
    struct ct__ckpt_record_info *rec; /* per rank */
    uint64_t data_size;
    struct ct__ckpt_piece *pieces; /* the tensor region as this rank's tensors and zero pads, in order */
    int n_pieces;
};

/* Frees every array (rec and rec_off too, whoever allocated them) and
 * zeroes *L. */
void ct__ckpt_layout_free(struct ct__ckpt_layout *L);

/* The tensor part of the layout (off, len, tensor_end) and this rank's
 * pieces; identical on every rank but for the pieces. CT_EINVAL (naming
 * the section) for a bad dtype, rank, shape, part or missing data. */
int ct__ckpt_layout_tensors(struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t, int n);

/* FNV-1a over the section list (names, dtypes, shapes, sharded or not):
 * every rank must pass the same one, or the shares they write would not fit
 * together. Non-negative. */
int64_t ct__ckpt_layout_fingerprint(const struct ct_ckpt_tensor *t, int n);

/* This rank's row of L->parts: [part_begin, part_end) of each sharded
 * section, zeros for the others. mine: (n, 2). */
void ct__ckpt_layout_my_parts(const struct ct_ckpt_tensor *t, int n, uint64_t *mine);

/* Rank r's part of section i (sharded sections only; L->parts set). */
const uint64_t *ct__ckpt_part_of(const struct ct__ckpt_layout *L, int r, int i);

/* With L->parts holding every rank's row: do the parts tile each sharded
 * section in rank order? CT_EINVAL naming the section and the rank if not. */
int ct__ckpt_layout_check_parts(const struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t,
                                int world);

/* The runs (L->parts set if any section is sharded). A sharded run also
 * ends where the ranks' order starts again, so that within a run every
 * rank's parts are consecutive and its bytes one range. */
void ct__ckpt_plan_runs(struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t, int world);

/* The bytes [lo, hi) of run k that rank r writes; the ranks' ranges tile
 * the run in rank order. */
void ct__ckpt_range_of(const struct ct__ckpt_layout *L, int k, int r, int world, uint64_t *lo,
                       uint64_t *hi);

/* Collective write calls for run k, `chunk` bytes at most each: the most
 * any rank needs (every rank makes that many, some of them empty). */
uint64_t ct__ckpt_rounds_of(const struct ct__ckpt_layout *L, int k, int world, uint64_t chunk);

/* Who hashes each section: owner[i] (n entries) is a rank, or -1 for a
 * sharded section spread over several ranks (rank 0 hashes it after
 * gathering it). Deterministic. CT_ENOMEM only. */
int ct__ckpt_hash_owners(const struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t, int world,
                         int *owner);

/* With L->rec[r].len set for every rank: the records' offsets (back to back
 * after the tensor region, in rank order) and the size of data.bin. */
void ct__ckpt_layout_place_records(struct ct__ckpt_layout *L, int world);

#endif
