/* Small helpers shared by the CUnit test programs (header-only).
 *
 * ct_test_run() registers one suite and runs it with the basic interface;
 * the program's exit status is non-zero when any assertion failed, so ctest
 * and mpirun see failures. CT_ASSERT_CLOSE() compares float arrays and, on
 * failure, prints the label, the first mismatches and the max difference.
 */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"

struct ct_test_case {
    const char *name;
    void (*fn)(void);
};

static inline int ct_test_run(const char *suite_name, const struct ct_test_case *cases)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_pSuite s = CU_add_suite(suite_name, NULL, NULL);
    for (const struct ct_test_case *c = cases; c->name; c++)
        CU_add_test(s, c->name, c->fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}

/* Compare n floats; tolerance |a-b| <= atol + rtol*|b|. Prints up to 5
 * mismatches and the max difference; returns the number of mismatches. */
static inline size_t ct_test_compare(const char *label, const float *got, const float *want,
                                     size_t n, double atol, double rtol)
{
    size_t bad = 0;
    double maxdiff = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (d > maxdiff || isnan(d))
            maxdiff = isnan(d) ? INFINITY : d;
        if (!(d <= atol + rtol * fabs((double)want[i]))) {
            if (bad < 5)
                fprintf(stderr, "  %s[%zu]: got %.9g want %.9g (diff %.3g)\n", label, i,
                        (double)got[i], (double)want[i], d);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "  %s: %zu of %zu differ, max diff %.3g (atol %.3g rtol %.3g)\n", label,
                bad, n, maxdiff, atol, rtol);
    return bad;
}

#define CT_ASSERT_CLOSE(label, got, want, n, atol, rtol) \
    CU_ASSERT_EQUAL(ct_test_compare((label), (got), (want), (n), (atol), (rtol)), 0)

/* A test case `name` run with the matrix products forced to one
 * implementation (core/gemm.h, which the test file includes): 0 = OpenBLAS,
 * 1 = our AVX-512 kernel (OpenBLAS on a CPU without AVX-512F). Defines
 * name_gemm0 or name_gemm1, so that a suite checks both, whichever the
 * automatic choice would take on the machine that runs it. */
#define CT_TEST_WITH_GEMM(name, impl)                                                             \
    static void name##_gemm##impl(void)                                                           \
    {                                                                                             \
        ct_sgemm_force(impl);                                                                     \
        name();                                                                                   \
        ct_sgemm_force(-1);                                                                       \
    }

/* n zeroed floats (at least one), or the test stops; free() them. */
static inline float *ct_test_floats(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    return p;
}

/* A fresh temporary directory (mkdtemp); the caller removes it with
 * ct_test_rmtree(). Returns a static buffer. */
static inline const char *ct_test_tmpdir(void)
{
    static char buf[256];
    const char *base = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/ct-test-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        abort();
    }
    return buf;
}

/* dir/name in one of four static buffers that take turns, so that up to four
 * paths can be live at once (a message that names two files, say). */
static inline const char *ct_test_path(const char *dir, const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static inline void ct_test_rmtree(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
}

static inline int ct__test_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's entries (the first 64), dot files too when `dots`, sorted and joined
 * with commas into out ("" when dir cannot be read). */
static inline void ct_test_listing(const char *dir, int dots, char *out, size_t n)
{
    char *names[64];
    int k = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && k < 64)
        if (dots ? strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 : e->d_name[0] != '.')
            names[k++] = strdup(e->d_name);
    if (d)
        closedir(d);
    qsort(names, (size_t)k, sizeof *names, ct__test_cmp_str);
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        used += (size_t)snprintf(out + used, used < n ? n - used : 0, "%s%s", i ? "," : "", names[i]);
        free(names[i]);
    }
}

/* The whole file, malloc'd (one NUL byte beyond *len, so text can be read as
 * a string); NULL (and *len 0) when it cannot be read. */
static inline uint8_t *ct_test_read_file(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = 0;
        *len = (size_t)n;
    }
    return b;
}

/* Write `len` bytes to path; returns 0 on success. */
static inline int ct_test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

/* Write a raw (not gzipped) u8 IDX file: magic 0x0000 08 <rank>, the dims
 * big-endian, then the payload. Returns 0 on success. */
static inline int ct_test_write_idx(const char *path, int rank, const uint32_t *dims,
                                    const uint8_t *payload, size_t len)
{
    uint8_t *buf = malloc(4 + 4 * (size_t)rank + len);
    if (!buf)
        return -1;
    size_t n = 0;
    buf[n++] = 0;
    buf[n++] = 0;
    buf[n++] = 0x08;
    buf[n++] = (uint8_t)rank;
    for (int i = 0; i < rank; i++) {
        buf[n++] = (uint8_t)(dims[i] >> 24);
        buf[n++] = (uint8_t)(dims[i] >> 16);
        buf[n++] = (uint8_t)(dims[i] >> 8);
        buf[n++] = (uint8_t)dims[i];
    }
    memcpy(buf + n, payload, len);
    int rc = ct_test_write_file(path, buf, n + len);
    free(buf);
    return rc;
}

/* The IDX data set at dir/im + dir/lb through the data set interface, one
 * normalization for the channel, node-shared when sh is given. */
static inline int ct_test_open_idx(struct ct_dataset *ds, const char *dir, const char *im,
                                   const char *lb, double mean, double std,
                                   const struct ct_shared_alloc *sh)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_IDX;
    p.dir = dir;
    p.images = im;
    p.labels = lb;
    p.mean[0] = mean;
    p.std[0] = std;
    p.shared = sh;
    return ct_dataset_open(ds, &p);
}

#endif
