/* Unit tests for the multi-file sample table (src/data/filetable.c), which
 * the cifar10 and tokens formats use to find the file of a global sample.
 *
 * Checked: the totals and prefix counts as files are added; that find()
 * agrees with a linear scan for every sample of tables of 1 to 16 files of
 * uneven sizes (one sample, thousands); the refusals past 2^32 - 1 samples
 * and past CT_FILETABLE_MAX_FILES files, each by code and message. The formats'
 * own use is tested through them (test_cifar.c, test_tokens.c).
 */
#include "core/error.h"
#include "data/filetable.h"

#include "ct_test.h"

#include <stdint.h>

/* The file of sample i by walking the prefix counts. */
static int linear_find(const struct ct_filetable *t, size_t i)
{
    int f = 0;
    while (f + 1 < t->n && t->first[f + 1] <= i)
        f++;
    return f;
}

static void test_add_counts(void)
{
    struct ct_filetable t = {0};
    CU_ASSERT_EQUAL(ct_filetable_total(&t), 0);
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "a", 5, "records"), 0);
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "b", 1, "records"), 0);
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "c", 10000, "records"), 0);
    CU_ASSERT_EQUAL(t.n, 3);
    CU_ASSERT_EQUAL(t.first[0], 0);
    CU_ASSERT_EQUAL(t.first[1], 5);
    CU_ASSERT_EQUAL(t.first[2], 6);
    CU_ASSERT_EQUAL(t.first[3], 10006);
    CU_ASSERT_EQUAL(ct_filetable_total(&t), 10006);
    /* The edges: each file's first and last sample. */
    CU_ASSERT_EQUAL(ct_filetable_find(&t, 0), 0);
    CU_ASSERT_EQUAL(ct_filetable_find(&t, 4), 0);
    CU_ASSERT_EQUAL(ct_filetable_find(&t, 5), 1);
    CU_ASSERT_EQUAL(ct_filetable_find(&t, 6), 2);
    CU_ASSERT_EQUAL(ct_filetable_find(&t, 10005), 2);
}

static void test_find_matches_scan(void)
{
    for (int n = 1; n <= CT_FILETABLE_MAX_FILES; n++) {
        struct ct_filetable t = {0};
        for (int f = 0; f < n; f++)
            /* 1, 38, 75, ... and a large one every fifth file */
            CU_ASSERT_EQUAL_FATAL(ct_filetable_add(&t, "f", f % 5 == 3 ? 4099 : 1 + 37 * (size_t)f,
                                                   "windows"), 0);
        size_t bad = 0;
        for (size_t i = 0; i < ct_filetable_total(&t); i++) {
            const int f = ct_filetable_find(&t, i);
            if (f != linear_find(&t, i) || i < t.first[f] || i >= t.first[f + 1])
                bad++;
        }
        if (bad)
            fprintf(stderr, "  %d files: %zu samples found in the wrong file\n", n, bad);
        CU_ASSERT_EQUAL(bad, 0);
    }
}

static void test_too_many_samples(void)
{
    struct ct_filetable t = {0};
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "x/a.bin", UINT32_MAX - 3, "records"), 0);
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "x/b.bin", 3, "records"), 0); /* exactly 2^32 - 1 */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "x/c.bin", 1, "records"), CT_EFORMAT);
    CU_ASSERT_STRING_EQUAL(ct_error_message(),
                           "x/c.bin: more than 4294967295 records in the data set");
    struct ct_filetable u = {0};
    CU_ASSERT_EQUAL(ct_filetable_add(&u, "s.bin", (size_t)UINT32_MAX + 1, "windows"), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "s.bin: more than 4294967295 windows"));
}

static void test_too_many_files(void)
{
    struct ct_filetable t = {0};
    for (int f = 0; f < CT_FILETABLE_MAX_FILES; f++)
        CU_ASSERT_EQUAL_FATAL(ct_filetable_add(&t, "f", 1, "records"), 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_filetable_add(&t, "g.bin", 1, "records"), CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "g.bin: more than 16 files"));
    CU_ASSERT_EQUAL(t.n, CT_FILETABLE_MAX_FILES);
    CU_ASSERT_EQUAL(ct_filetable_total(&t), CT_FILETABLE_MAX_FILES);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"add: prefix counts and totals", test_add_counts},
        {"find agrees with a scan, 1 to 16 files", test_find_matches_scan},
        {"refused past 2^32 - 1 samples", test_too_many_samples},
        {"refused past CT_FILETABLE_MAX_FILES files", test_too_many_files},
        {NULL, NULL},
    };
    return ct_test_run("filetable", cases);
}
