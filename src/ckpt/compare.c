/* Two checkpoints compared section by section (see compare.h). Everything
 * is read through the checkpoint reader, which has verified every digest
 * before a byte is compared. */
#include "ckpt/compare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ct_ckpt_open_pair(struct ct_ckpt **a, struct ct_ckpt **b, const char *pa, const char *pb)
{
    *a = calloc(1, sizeof **a);
    *b = calloc(1, sizeof **b);
    if (!*a || !*b)
        return ct_error_set(CT_ENOMEM, "out of memory");
    int rc = ct_ckpt_open(*a, pa);
    if (rc == 0)
        rc = ct_ckpt_open(*b, pb);
    return rc;
}

void ct_ckpt_close_pair(struct ct_ckpt *a, struct ct_ckpt *b)
{
    if (a)
        ct_ckpt_close(a);
    if (b)
        ct_ckpt_close(b);
    free(a);
    free(b);
}

/* Largest |a-b| and |a-b|/max(|a|,|b|) of two f32 sections of equal shape;
 * *first gets the first differing element (-1: identical bits). */
static void f32_diff(const float *a, const float *b, size_t n, double *max_abs, double *max_rel,
                     long long *first)
{
    *max_abs = *max_rel = 0;
    *first = -1;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof *a) == 0)
            continue;
        if (*first < 0)
            *first = (long long)i;
        double d = fabs((double)a[i] - (double)b[i]);
        double m = fmax(fabs((double)a[i]), fabs((double)b[i]));
        if (isnan(d))
            d = INFINITY;
        if (d > *max_abs)
            *max_abs = d;
        if (m > 0 && d / m > *max_rel)
            *max_rel = d / m;
    }
}

static int same_shape(const struct ct_ckpt_section *x, const struct ct_ckpt_section *y)
{
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->length != y->length)
        return 0;
    for (int k = 0; k < x->ndim; k++)
        if (x->shape[k] != y->shape[k])
            return 0;
    return 1;
}

int ct_ckpt_compare(const struct ct_ckpt *a, const struct ct_ckpt *b, FILE *out, int all,
                    struct ct_ckpt_cmp *tc)
{
    memset(tc, 0, sizeof *tc);
    for (int i = 0; i < ct_ckpt_n_sections(b); i++) {
        struct ct_ckpt_section y, x;
        int rc = ct_ckpt_section_at(b, i, &y);
        if (rc < 0)
            return rc;
        int found = -1;
        for (int j = 0; j < ct_ckpt_n_sections(a) && found < 0; j++)
            if (ct_ckpt_section_at(a, j, &x) == 0 && strcmp(x.name, y.name) == 0)
                found = j;
        if (found < 0 || !same_shape(&x, &y)) {
            tc->n_missing++;
            fprintf(out, "  %-48s %s\n", y.name, found < 0 ? "only in the second" : "dtype or shape differ");
            if (!tc->first[0])
                snprintf(tc->first, sizeof tc->first, "%.190s", y.name);
            continue;
        }
        int same = memcmp(x.sha256, y.sha256, CT_SHA256_LEN) == 0 && x.length == y.length &&
                   memcmp(x.data, y.data, x.length) == 0;
        double ma = 0, mr = 0;
        long long first = -1;
        if (!same && y.dtype == CT_DTYPE_F32)
            f32_diff(x.data, y.data, y.length / 4, &ma, &mr, &first);
        if (!same) {
            if (tc->n_differ++ == 0 && !tc->first[0]) {
                snprintf(tc->first, sizeof tc->first, "%.190s", y.name);
                tc->first_abs = ma;
            }
        }
        if (all || !same)
            fprintf(out, "  %-48s %s max_abs %.6g max_rel %.6g%s\n", y.name, same ? "identical" : "differs",
                    ma, mr, first >= 0 ? "" : "");
    }
    return 0;
}
