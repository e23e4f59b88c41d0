/* Flat buffers and named tensor views (as in llm.c): every parameter of a
 * model lives in ONE contiguous float buffer, every gradient in another of
 * the same layout, each optimizer state in others. A layout is the size
 * table computed before anything is allocated: an ordered list of named
 * views (a state_dict key such as "layers.0.weight", a shape, an offset),
 * each 64-byte aligned (CT_TENSOR_ALIGN floats), the padding between them
 * zero. Why: docs/models.md.
 *
 *     struct ct_layout lay = {0};
 *     ct_layout_add(&lay, "layers.0.weight", 2, (int64_t[]){256, 784});
 *     struct ct_flat params;
 *     ct_flat_alloc(&params, &lay);
 *     float *w = ct_flat_view(&params, 0);    // (256, 784)
 */
#ifndef CT_CORE_TENSOR_H
#define CT_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/sha256.h"

#define CT_NAME_MAX 96
#define CT_MAX_DIMS 4
#define CT_TENSOR_ALIGN 16 /* floats: 64 bytes */

struct ct_view {
    char name[CT_NAME_MAX];
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    size_t offset; /* in floats, from the start of the buffer */
    size_t numel;
};

struct ct_layout {
    struct ct_view *views;
    int n, cap;
    size_t numel; /* total floats, padding included */
};

/* Append a view; returns its index (>= 0) or a negative error. */
int ct_layout_add(struct ct_layout *lay, const char *name, int ndim, const int64_t *shape);
/* Index of the view called `name`, or -1. */
int ct_layout_find(const struct ct_layout *lay, const char *name);
/* Number of floats that belong to views (padding excluded). */
size_t ct_layout_count(const struct ct_layout *lay);
void ct_layout_free(struct ct_layout *lay);

struct ct_flat {
    float *data; /* 64-byte aligned, layout->numel floats */
    size_t numel;
    const struct ct_layout *layout;
};

/* Allocate a zeroed buffer for `lay` (which must outlive it). */
int ct_flat_alloc(struct ct_flat *flat, const struct ct_layout *lay);
/* ... or of `numel` floats with no layout (a slice of one: the sharded
 * optimizer's state); ct_flat_view and ct_flat_sha256 need a layout. */
int ct_flat_alloc_n(struct ct_flat *flat, size_t numel);
void ct_flat_free(struct ct_flat *flat);
static inline float *ct_flat_view(const struct ct_flat *flat, int i)
{
    return flat->data + flat->layout->views[i].offset;
}
/* SHA-256 of the views' bytes concatenated in layout order (padding
 * excluded): the digest of the state_dict's tensors, as PyTorch would
 * concatenate them. */
int ct_flat_sha256(const struct ct_flat *flat, uint8_t out[CT_SHA256_LEN]);

/* Non-finite values (NaN, +-Inf): the index of the first one in x[0..n),
 * or n when every value is finite. ct_first_nonfinite tests the exponent
 * bits of blocks of 64 values with integer operations the vectorizer turns
 * into a few vector instructions per cache line (AVX-512 where the CPU has it) (a loop calling isfinite()
 * per value with an early exit stays scalar), then finds the value inside
 * the first bad block; ct_first_nonfinite_ref is the naive isfinite loop,
 * for tests. Same answer for every input. */
size_t ct_first_nonfinite(const float *x, size_t n);
size_t ct_first_nonfinite_ref(const float *x, size_t n);

/* The first non-finite value of a flat buffer: returns 1 and sets *view (its
 * index in the layout, or -1 for alignment padding) and *elem (its index
 * within the view, or within the buffer for padding); 0 when all is finite. */
int ct_flat_find_nonfinite(const struct ct_flat *flat, int *view, size_t *elem);

/* A bump allocator over one aligned block, for the per-step activations:
 * sized once at start-up, never grown, so there is no malloc in the step. */
struct ct_arena {
    char *base;
    size_t size, used;
};

int ct_arena_init(struct ct_arena *a, size_t bytes);
/* 64-byte aligned; NULL when the arena is exhausted (a sizing bug). */
void *ct_arena_alloc(struct ct_arena *a, size_t bytes);
void ct_arena_free(struct ct_arena *a);
/* Bytes an allocation of `bytes` takes in the arena (for sizing passes). */
static inline size_t ct_arena_round(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

#endif
