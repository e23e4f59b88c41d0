/* The data.bin layout planner (layout-impl.h): offsets, runs, each rank's
 * byte ranges and the hashing owners, computed alike on every rank from the
 * same tensor list. Pure: no MPI, no I/O, nothing but the arrays of the
 * layout allocated; what the ranks must tell each other (the sharded
 * sections' parts, the records' lengths) comes in through L->parts and
 * L->rec, filled by the writer (write.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/layout-impl.h"
#include "core/error.h"

static const uint8_t g_zeros[CT__CKPT_ALIGN];

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void ct__ckpt_layout_free(struct ct__ckpt_layout *L)
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

int ct__ckpt_layout_tensors(struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *tensors, int n)
{
    L->n = n;
    L->off = calloc((size_t)n + 1, sizeof *L->off);
    L->len = calloc((size_t)n + 1, sizeof *L->len);
    L->pieces = calloc(2 * (size_t)n + 1, sizeof *L->pieces);
    L->runs = calloc((size_t)n + 1, sizeof *L->runs);
    if (!L->off || !L->len || !L->pieces || !L->runs)
        return ct_error_set(CT_ENOMEM, "checkpoint layout: out of memory");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const struct ct_ckpt_tensor *t = &tensors[i];
        int rc = tensor_bytes(t, &L->len[i]);
        if (rc < 0)
            return rc;
        L->off[i] = off;
        /* A sharded section's piece is what this rank holds of it. */
        uint64_t a = t->sharded ? t->part_begin : 0, b = t->sharded ? t->part_end : L->len[i];
        if (b > a)
            L->pieces[L->n_pieces++] = (struct ct__ckpt_piece){t->data, off + a, b - a};
        uint64_t end = align_up(off + L->len[i], CT__CKPT_ALIGN);
        if (end > off + L->len[i])
            L->pieces[L->n_pieces++] =
                (struct ct__ckpt_piece){g_zeros, off + L->len[i], end - off - L->len[i]};
        off = end;
    }
    L->off[n] = off;
    L->tensor_end = off;
    return 0;
}

int64_t ct__ckpt_layout_fingerprint(const struct ct_ckpt_tensor *tensors, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        const struct ct_ckpt_tensor *t = &tensors[i];
        for (const char *p = t->name; *p && p < t->name + sizeof t->name; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        int64_t v[6] = {t->dtype, t->ndim, t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
        for (int k = 0; k < 6; k++)
            h = (h ^ (uint64_t)(k < 2 || k - 2 < t->ndim ? v[k] : 0)) * 1099511628211ull;
        h = (h ^ (uint64_t)!!t->sharded) * 1099511628211ull;
    }
    return (int64_t)(h >> 1); /* non-negative, so that -h cannot overflow */
}

void ct__ckpt_layout_my_parts(const struct ct_ckpt_tensor *t, int n, uint64_t *mine)
{
    for (int i = 0; i < n; i++) {
        mine[2 * i] = t[i].sharded ? t[i].part_begin : 0;
        mine[2 * i + 1] = t[i].sharded ? t[i].part_end : 0;
    }
}

const uint64_t *ct__ckpt_part_of(const struct ct__ckpt_layout *L, int r, int i)
{
    return &L->parts[((size_t)r * (size_t)L->n + (size_t)i) * 2];
}

int ct__ckpt_layout_check_parts(const struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t,
                                int world)
{
    for (int i = 0; i < L->n; i++) {
        if (!t[i].sharded)
            continue;
        uint64_t next = 0;
        for (int r = 0; r < world; r++) {
            const uint64_t *p = ct__ckpt_part_of(L, r, i);
            if (p[1] == p[0])
                continue;
            if (p[0] != next)
                return ct_error_set(CT_EINVAL, "checkpoint section %s: rank %d's part starts at byte "
                                    "%" PRIu64 ", expected %" PRIu64 " (the parts must tile it in "
                                    "rank order)", t[i].name, r, p[0], next);
            next = p[1];
        }
        if (next != L->len[i])
            return ct_error_set(CT_EINVAL, "checkpoint section %s: the ranks' parts cover %" PRIu64
                                " of its %" PRIu64 " bytes", t[i].name, next, L->len[i]);
    }
    return 0;
}

/* A sharded run also ends where the ranks' order starts again (the next
 * optimizer state buffer: its first part is held by a lower rank than the
 * last part before it). */
void ct__ckpt_plan_runs(struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t, int world)
{
    L->n_runs = 0;
    int prev_last = -1; /* the rank holding the sharded run's last byte so far */
    for (int i = 0; i < L->n; i++) {
        const int sharded = !!t[i].sharded;
        int first = -1, last = -1;
        for (int r = 0; sharded && r < world; r++)
            if (ct__ckpt_part_of(L, r, i)[1] > ct__ckpt_part_of(L, r, i)[0]) {
                first = first < 0 ? r : first;
                last = r;
            }
        if (i == 0 || L->runs[L->n_runs - 1].sharded != sharded ||
            (first >= 0 && first < prev_last)) {
            L->runs[L->n_runs++] = (struct ct__ckpt_run){.first = i, .sharded = sharded, .lo = L->off[i]};
            prev_last = -1;
        }
        L->runs[L->n_runs - 1].last = i;
        L->runs[L->n_runs - 1].hi = L->off[i + 1];
        if (last >= 0)
            prev_last = last;
    }
}

/* An equal share of a replicated run; of a sharded run, from the rank's
 * first part to its last (whole sections and pads between, and the pad
 * after a section whose last byte it holds). */
void ct__ckpt_range_of(const struct ct__ckpt_layout *L, int k, int r, int world, uint64_t *lo,
                       uint64_t *hi)
{
    const struct ct__ckpt_run *u = &L->runs[k];
    if (!u->sharded) {
        uint64_t len = u->hi - u->lo;
        uint64_t share = align_up((len + (uint64_t)world - 1) / (uint64_t)world, CT__CKPT_SHARE_ALIGN);
        uint64_t a = share * (uint64_t)r < len ? share * (uint64_t)r : len;
        *lo = u->lo + a;
        *hi = u->lo + (a + share < len ? a + share : len);
        return;
    }
    *lo = *hi = u->lo;
    int found = 0;
    for (int i = u->first; i <= u->last; i++) {
        const uint64_t *p = ct__ckpt_part_of(L, r, i);
        if (p[1] == p[0])
            continue;
        if (!found)
            *lo = L->off[i] + p[0];
        found = 1;
        *hi = p[1] == L->len[i] ? L->off[i + 1] : L->off[i] + p[1];
    }
}

uint64_t ct__ckpt_rounds_of(const struct ct__ckpt_layout *L, int k, int world, uint64_t chunk)
{
    uint64_t most = 0;
    for (int r = 0; r < world; r++) {
        uint64_t lo, hi;
        ct__ckpt_range_of(L, k, r, world, &lo, &hi);
        uint64_t n = (hi - lo + chunk - 1) / chunk;
        most = n > most ? n : most;
        if (!L->runs[k].sharded)
            break; /* rank 0's share is the largest */
    }
    return most;
}

/* Replicated tensor i goes to owner[i], largest first to the least loaded
 * rank; a sharded one to the rank that holds all of it (rank 0 for an empty
 * one), or -1 when it is spread over several ranks. */
int ct__ckpt_hash_owners(const struct ct__ckpt_layout *L, const struct ct_ckpt_tensor *t, int world,
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
        if (t[i].sharded) {
            int holders = 0;
            owner[i] = 0;
            for (int r = 0; r < world; r++)
                if (ct__ckpt_part_of(L, r, i)[1] > ct__ckpt_part_of(L, r, i)[0]) {
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

void ct__ckpt_layout_place_records(struct ct__ckpt_layout *L, int world)
{
    uint64_t off = L->tensor_end;
    for (int r = 0; r < world; r++) {
        L->rec_off[r] = off;
        off += L->rec[r].len;
    }
    L->data_size = off;
}
