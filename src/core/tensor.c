/* Layouts, flat buffers and the activation arena (see tensor.h). */
#include "core/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/simd.h"

int ct_layout_add(struct ct_layout *lay, const char *name, int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > CT_MAX_DIMS)
        return ct_error_set(CT_EINVAL, "tensor %s: %d dimensions (1..%d allowed)", name, ndim,
                            CT_MAX_DIMS);
    if (strlen(name) >= CT_NAME_MAX)
        return ct_error_set(CT_EINVAL, "tensor name too long: %s", name);
    if (ct_layout_find(lay, name) >= 0)
        return ct_error_set(CT_EINVAL, "duplicate tensor name %s", name);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return ct_error_set(CT_EINVAL, "tensor %s: dimension %d is %lld", name, d,
                                (long long)shape[d]);
        numel *= (size_t)shape[d];
    }
    if (lay->n == lay->cap) {
        int cap = lay->cap ? 2 * lay->cap : 16;
        struct ct_view *v = realloc(lay->views, (size_t)cap * sizeof *v);
        if (!v)
            return ct_error_set(CT_ENOMEM, "tensor layout: out of memory");
        lay->views = v;
        lay->cap = cap;
    }
    struct ct_view *v = &lay->views[lay->n];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s", name);
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        v->shape[d] = shape[d];
    v->offset = (lay->numel + CT_TENSOR_ALIGN - 1) / CT_TENSOR_ALIGN * CT_TENSOR_ALIGN;
    v->numel = numel;
    lay->numel = v->offset + numel;
    return lay->n++;
}

int ct_layout_find(const struct ct_layout *lay, const char *name)
{
    for (int i = 0; i < lay->n; i++)
        if (strcmp(lay->views[i].name, name) == 0)
            return i;
    return -1;
}

size_t ct_layout_count(const struct ct_layout *lay)
{
    size_t n = 0;
    for (int i = 0; i < lay->n; i++)
        n += lay->views[i].numel;
    return n;
}

void ct_layout_free(struct ct_layout *lay)
{
    free(lay->views);
    memset(lay, 0, sizeof *lay);
}

int ct_flat_alloc_n(struct ct_flat *flat, size_t numel)
{
    size_t bytes = ct_arena_round((numel ? numel : 1) * sizeof(float));
    float *p = aligned_alloc(64, bytes);
    if (!p)
        return ct_error_set(CT_ENOMEM, "cannot allocate a flat buffer of %zu bytes", bytes);
    memset(p, 0, bytes);
    flat->data = p;
    flat->numel = numel;
    flat->layout = NULL;
    return 0;
}

int ct_flat_alloc(struct ct_flat *flat, const struct ct_layout *lay)
{
    int rc = ct_flat_alloc_n(flat, lay->numel);
    if (rc == 0)
        flat->layout = lay;
    return rc;
}

void ct_flat_free(struct ct_flat *flat)
{
    free(flat->data);
    memset(flat, 0, sizeof *flat);
}

int ct_flat_sha256(const struct ct_flat *flat, uint8_t out[CT_SHA256_LEN])
{
    struct ct_sha256 h = {0};
    int rc = ct_sha256_init(&h);
    if (rc < 0)
        return rc;
    for (int i = 0; i < flat->layout->n && rc == 0; i++)
        rc = ct_sha256_update(&h, ct_flat_view(flat, i), flat->layout->views[i].numel * sizeof(float));
    uint8_t tmp[CT_SHA256_LEN];
    int frc = ct_sha256_final(&h, tmp);
    if (rc < 0)
        return rc;
    if (frc == 0)
        memcpy(out, tmp, CT_SHA256_LEN);
    return frc;
}

size_t ct_first_nonfinite_ref(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return n;
}

/* A float is NaN or Inf exactly when its 8 exponent bits are all ones. The
 * inner loop has no branch, so gcc -O3 vectorizes it (16 floats an
 * instruction in the AVX-512 clone); the block of 64 (one test per 256
 * bytes) keeps the early exit cheap. */
#define NONFINITE_BLOCK 64
CT_VECTOR_CLONES size_t ct_first_nonfinite(const float *x, size_t n)
{
    size_t i = 0;
    for (; i + NONFINITE_BLOCK <= n; i += NONFINITE_BLOCK) {
        uint32_t bad = 0;
        for (size_t j = 0; j < NONFINITE_BLOCK; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad)
            break;
    }
    return i + ct_first_nonfinite_ref(x + i, n - i);
}

int ct_flat_find_nonfinite(const struct ct_flat *flat, int *view, size_t *elem)
{
    size_t at = ct_first_nonfinite(flat->data, flat->numel);
    if (at == flat->numel)
        return 0;
    *view = -1;
    *elem = at;
    const struct ct_layout *lay = flat->layout;
    for (int i = 0; i < lay->n; i++)
        if (at >= lay->views[i].offset && at < lay->views[i].offset + lay->views[i].numel) {
            *view = i;
            *elem = at - lay->views[i].offset;
        }
    return 1;
}

int ct_arena_init(struct ct_arena *a, size_t bytes)
{
    bytes = ct_arena_round(bytes ? bytes : 64);
    a->base = aligned_alloc(64, bytes);
    if (!a->base)
        return ct_error_set(CT_ENOMEM, "cannot allocate an activation arena of %zu bytes", bytes);
    memset(a->base, 0, bytes);
    a->size = bytes;
    a->used = 0;
    return 0;
}

void *ct_arena_alloc(struct ct_arena *a, size_t bytes)
{
    size_t need = ct_arena_round(bytes);
    if (need > a->size - a->used)
        return NULL;
    void *p = a->base + a->used;
    a->used += need;
    return p;
}

void ct_arena_free(struct ct_arena *a)
{
    free(a->base);
    memset(a, 0, sizeof *a);
}
