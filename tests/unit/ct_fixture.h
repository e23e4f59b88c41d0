/* Golden fixtures for tests (header-only): the reader of the .ctfx files that
 * tests/fixtures/make_fixtures.py writes from PyTorch, and comparison helpers.
 *
 * A .ctfx file: "CTFX", u32 version, u32 n_records, then per record
 * u32 name_len, name, u32 ndim, u32 dims[ndim], float32 data[prod(dims)];
 * everything little-endian. Every length is checked against the bytes that
 * remain before it is used.
 *
 *     struct fx_file f;
 *     if (fx_open(&f, "linear.ctfx") == 0) {
 *         const float *w = fx_get(&f, "weight", OC * C);
 *         ...
 *         fx_free(&f);
 *     }
 */
#ifndef CT_FIXTURE_H
#define CT_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"

#ifndef CT_FIXTURE_DIR
#define CT_FIXTURE_DIR "tests/fixtures"
#endif

#define FX_VERSION 1
#define FX_NAME_MAX 64
#define FX_MAX_DIMS 4
#define FX_MAX_BYTES (16u << 20)
#define FX_MAX_RECORDS 4096u

struct fx_tensor {
    char name[FX_NAME_MAX];
    int ndim;
    uint32_t dims[FX_MAX_DIMS];
    size_t numel;
    float *data; /* (dims) */
};

struct fx_file {
    char path[512];
    int n;
    struct fx_tensor *t;
};

static inline void fx_free(struct fx_file *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->t[i].data);
    free(f->t);
    f->t = NULL;
    f->n = 0;
}

static inline int fx_u32(const uint8_t *buf, size_t len, size_t *off, uint32_t *v)
{
    if (len - *off < 4)
        return -1;
    const uint8_t *p = buf + *off;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    *off += 4;
    return 0;
}

static inline int fx_bad(const struct fx_file *f, size_t off, const char *what)
{
    fprintf(stderr, "\n  fixture %s: offset %zu: %s\n", f->path, off, what);
    return -1;
}

static inline int fx_parse(struct fx_file *f, const uint8_t *buf, size_t len)
{
    size_t off = 0;
    uint32_t version, n;
    if (len < 4 || memcmp(buf, "CTFX", 4) != 0)
        return fx_bad(f, 0, "expected magic CTFX");
    off = 4;
    if (fx_u32(buf, len, &off, &version) || fx_u32(buf, len, &off, &n))
        return fx_bad(f, off, "truncated header");
    if (version != FX_VERSION)
        return fx_bad(f, 4, "unsupported version");
    if (n == 0 || n > FX_MAX_RECORDS)
        return fx_bad(f, 8, "record count out of range");
    f->t = calloc(n, sizeof *f->t);
    if (!f->t)
        return fx_bad(f, off, "out of memory");
    for (uint32_t r = 0; r < n; r++) {
        struct fx_tensor *t = &f->t[f->n];
        uint32_t name_len, ndim;
        if (fx_u32(buf, len, &off, &name_len))
            return fx_bad(f, off, "truncated record header");
        if (name_len == 0 || name_len >= FX_NAME_MAX || len - off < name_len)
            return fx_bad(f, off, "bad or truncated record name");
        memcpy(t->name, buf + off, name_len);
        t->name[name_len] = '\0';
        off += name_len;
        if (fx_u32(buf, len, &off, &ndim) || ndim < 1 || ndim > FX_MAX_DIMS)
            return fx_bad(f, off, "bad or truncated ndim");
        t->ndim = (int)ndim;
        t->numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            if (fx_u32(buf, len, &off, &t->dims[d]) || t->dims[d] == 0)
                return fx_bad(f, off, "bad or truncated dimension");
            /* Bounded by the file size, so the product cannot overflow. */
            if (t->dims[d] > (len - off) / 4 / t->numel)
                return fx_bad(f, off, "dimensions larger than the rest of the file");
            t->numel *= t->dims[d];
        }
        if ((len - off) / 4 < t->numel)
            return fx_bad(f, off, "truncated data");
        t->data = malloc(t->numel * sizeof(float));
        if (!t->data)
            return fx_bad(f, off, "out of memory");
        f->n++;
        for (size_t i = 0; i < t->numel; i++) {
            uint32_t u = 0;
            fx_u32(buf, len, &off, &u); /* cannot fail: checked above */
            memcpy(&t->data[i], &u, sizeof u);
        }
    }
    if (off != len)
        return fx_bad(f, off, "trailing bytes after the last record");
    return 0;
}

/* Loads CT_FIXTURE_DIR/<file>; on failure prints why, records a CUnit
 * failure and leaves *f empty. */
static inline int fx_open(struct fx_file *f, const char *file)
{
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s/%s", CT_FIXTURE_DIR, file);
    int rc = -1;
    uint8_t *buf = NULL;
    FILE *fp = fopen(f->path, "rb");
    if (!fp) {
        fx_bad(f, 0, "cannot open (run tests/fixtures/make_fixtures.py?)");
        goto done;
    }
    long sz = fseek(fp, 0, SEEK_END) == 0 ? ftell(fp) : -1;
    if (sz < 0 || (unsigned long)sz > FX_MAX_BYTES || fseek(fp, 0, SEEK_SET) != 0) {
        fx_bad(f, 0, "cannot size the file, or it is too large");
        goto done;
    }
    buf = malloc(sz > 0 ? (size_t)sz : 1);
    if (!buf || fread(buf, 1, (size_t)sz, fp) != (size_t)sz) {
        fx_bad(f, 0, "read error");
        goto done;
    }
    rc = fx_parse(f, buf, (size_t)sz);
done:
    if (fp)
        fclose(fp);
    free(buf);
    if (rc != 0)
        fx_free(f);
    CU_ASSERT_EQUAL(rc, 0);
    return rc;
}

static inline const struct fx_tensor *fx_find(const struct fx_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    fprintf(stderr, "\n  fixture %s: no record '%s'\n", f->path, name);
    CU_FAIL("fixture record missing");
    return NULL;
}

/* The data of record `name`, which must hold `numel` floats; NULL (and a
 * CUnit failure) otherwise. */
static inline const float *fx_get(const struct fx_file *f, const char *name, size_t numel)
{
    const struct fx_tensor *t = fx_find(f, name);
    if (!t)
        return NULL;
    if (t->numel != numel) {
        fprintf(stderr, "\n  fixture %s: record '%s' has %zu values, expected %zu\n", f->path,
                name, t->numel, numel);
        CU_FAIL("fixture record has the wrong size");
        return NULL;
    }
    return t->data;
}

/* ------------------------------------------------------------ helpers */

/* CT_ASSERT_CLOSE, and with CT_TEST_VERBOSE set the max difference. */
static inline void check_close(const char *label, const float *got, const float *want, size_t n,
                        double atol, double rtol)
{
    if (getenv("CT_TEST_VERBOSE")) {
        double md = 0;
        for (size_t i = 0; i < n; i++)
            md = fmax(md, fabs((double)got[i] - (double)want[i]));
        printf("\n    %-28s max diff %.3g", label, md);
    }
    CT_ASSERT_CLOSE(label, got, want, n, atol, rtol);
}

/* A bf16 result (train.precision = bf16, core/bgemm.h) against torch's
 * float32 one: each product's operands are rounded to bf16, a relative
 * error of at most 2^-8 each, so a product is off by at most (2^-7 +
 * 2^-16) |a| |b| and a sum of them by that times mag = sum |a| |b| (the
 * same sum over absolute values, per element); the float sums and torch's
 * own rounding stay within the float tolerance atol + rtol |want|. So
 * |got - want| <= (2^-7 + 2^-16) mag + atol + rtol |want|. A product
 * computed in float instead is ~2^-9 mag closer; a wrong index is O(mag)
 * off. Also requires got to differ from `fp32` (the same computed in
 * float32; NULL: not checked) somewhere: the rounding happened. */
static inline void check_bf16(const char *label, const float *got, const float *want,
                              const float *mag, const float *fp32, size_t n, double atol,
                              double rtol)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        const double tol = (0x1p-7 + 0x1p-16) * mag[i] + atol + rtol * fabs((double)want[i]);
        if (tol > 0 && d / tol > worst)
            worst = d / tol;
        if (!(d <= tol) && bad++ < 5)
            fprintf(stderr, "\n  %s[%zu]: got %.9g want %.9g (diff %.3g > tol %.3g)", label, i,
                    (double)got[i], (double)want[i], d, tol);
    }
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    %-28s worst diff / tol %.3g", label, worst);
    CU_ASSERT_EQUAL(bad, 0);
    if (fp32)
        CU_ASSERT_NOT_EQUAL(memcmp(got, fp32, n * sizeof(float)), 0);
}

/* |x|, in a new buffer (free it). */
static inline float *abs_copy(const float *x, size_t n)
{
    float *a = ct_test_floats(n);
    for (size_t i = 0; i < n; i++)
        a[i] = fabsf(x[i]);
    return a;
}

static inline void check_scalar(const char *label, double got, double want, double atol, double rtol)
{
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    %-28s diff %.3g", label, fabs(got - want));
    if (!(fabs(got - want) <= atol + rtol * fabs(want)))
        fprintf(stderr, "\n  %s: got %.9g want %.9g (diff %.3g)\n", label, got, want,
                fabs(got - want));
    CU_ASSERT(fabs(got - want) <= atol + rtol * fabs(want));
}

#endif
