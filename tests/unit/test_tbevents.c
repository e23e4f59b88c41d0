/* Unit tests for core/crc32c and run/tbevents: CRC-32C against published
 * vectors (the check value of "123456789", RFC 3720's 32-byte patterns),
 * TFRecord's mask, the framing of one record, and an event file written,
 * read back through the generated protobuf-c code, trimmed to a step
 * (a torn last record too) and continued by a resumed writer.
 */
#include "core/crc32c.h"
#include "core/error.h"
#include "proto/tfevent.pb-c.h"
#include "run/tbevents.h"
#include "ct_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

static void test_crc32c_vectors(void)
{
    CU_ASSERT_EQUAL(ct_crc32c(0, "123456789", 9), 0xe3069283u);
    CU_ASSERT_EQUAL(ct_crc32c(0, "", 0), 0u);
    uint8_t b[32];
    memset(b, 0, sizeof b);
    CU_ASSERT_EQUAL(ct_crc32c(0, b, 32), 0x8a9136aau); /* RFC 3720 B.4: 32 zeros */
    memset(b, 0xff, sizeof b);
    CU_ASSERT_EQUAL(ct_crc32c(0, b, 32), 0x62a8ab43u); /* 32 bytes of 0xff */
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    CU_ASSERT_EQUAL(ct_crc32c(0, b, 32), 0x46dd794eu); /* 0x00..0x1f */
    /* Continuing a CRC is the CRC of the whole. */
    CU_ASSERT_EQUAL(ct_crc32c(ct_crc32c(0, "12345", 5), "6789", 4), 0xe3069283u);
}

static void test_mask(void)
{
    CU_ASSERT_EQUAL(ct_crc32c_mask(0), 0xa282ead8u);
    const uint32_t c = 0xe3069283u;
    CU_ASSERT_EQUAL(ct_crc32c_mask(c), (((c >> 15) | (c << 17)) + 0xa282ead8u));
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void test_frame(void)
{
    uint8_t rec[CT_TB_HEADER + 9 + CT_TB_FOOTER];
    memcpy(rec + CT_TB_HEADER, "123456789", 9);
    ct_tb_frame(rec, 9);
    const uint8_t len[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    CU_ASSERT_EQUAL(memcmp(rec, len, 8), 0);
    CU_ASSERT_EQUAL(rd32(rec + 8), ct_crc32c_mask(ct_crc32c(0, len, 8)));
    CU_ASSERT_EQUAL(rd32(rec + CT_TB_HEADER + 9), ct_crc32c_mask(0xe3069283u));
}

/* Every record of an event file, unpacked; returns how many (max n). */
static size_t read_events(const char *path, Tensorflow__Event **ev, size_t n, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static uint8_t buf[1 << 16];
    size_t size = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t off = 0, k = 0;
    while (k < n && size - off >= 16) {
        uint64_t len = 0;
        for (int i = 7; i >= 0; i--)
            len = len << 8 | buf[off + i];
        CU_ASSERT_EQUAL_FATAL(rd32(buf + off + 8), ct_crc32c_mask(ct_crc32c(0, buf + off, 8)));
        CU_ASSERT_FATAL(off + 16 + len <= size);
        CU_ASSERT_EQUAL_FATAL(rd32(buf + off + 12 + len), ct_crc32c_mask(ct_crc32c(0, buf + off + 12, len)));
        ev[k] = tensorflow__event__unpack(NULL, len, buf + off + 12);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ev[k]);
        k++;
        off += 16 + len;
    }
    CU_ASSERT_EQUAL(off, size);
    if (bytes)
        *bytes = size;
    return k;
}

static void free_events(Tensorflow__Event **ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tensorflow__event__free_unpacked(ev[i], NULL);
}

/* The event files in dir/tb, sorted by name (TensorBoard's order). */
static int list_files(const char *dir, char names[][800], int max)
{
    char tb[512];
    snprintf(tb, sizeof tb, "%s/tb", dir);
    DIR *d = opendir(tb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < max)
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0)
            snprintf(names[n++], 800, "%s/%s", tb, e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[800];
            memcpy(t, names[j], 800);
            memcpy(names[j], names[j - 1], 800);
            memcpy(names[j - 1], t, 800);
        }
    return n;
}

static void write_steps(struct ct_tb *tb, int64_t from, int64_t to)
{
    for (int64_t s = from; s <= to; s += 10) {
        struct ct_step_record r = {.step = s, .loss = 1.0 / (double)s, .acc = NAN, .lr = 0.1};
        ct_tb_steps(tb, &r);
    }
}

static void test_file_trim_resume(void)
{
    char base[256], dir[512], names[4][800];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/run", base);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    struct ct_tb *tb = ct_tb_open(dir, 1, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    write_steps(tb, 10, 40);
    ct_tb_close(tb);
    CU_ASSERT_EQUAL_FATAL(list_files(dir, names, 4), 1);

    Tensorflow__Event *ev[16];
    size_t n = read_events(names[0], ev, 16, NULL);
    CU_ASSERT_EQUAL_FATAL(n, 5);
    CU_ASSERT_STRING_EQUAL(ev[0]->file_version, "brain.Event:2");
    CU_ASSERT_TRUE(ev[0]->has_wall_time && ev[0]->wall_time > 1.5e9);
    CU_ASSERT_PTR_NULL(ev[0]->summary);
    for (size_t i = 1; i < n; i++) {
        CU_ASSERT_EQUAL(ev[i]->step, (int64_t)(10 * i));
        CU_ASSERT_PTR_NOT_NULL_FATAL(ev[i]->summary);
        /* acc is NaN (null in steps.jsonl): left out; tokens_per_s 0: not written. */
        CU_ASSERT_EQUAL_FATAL(ev[i]->summary->n_value, 2);
        CU_ASSERT_STRING_EQUAL(ev[i]->summary->value[0]->tag, "train/loss");
        char want[32]; /* steps.jsonl's loss: %.9g */
        snprintf(want, sizeof want, "%.9g", 1.0 / (double)(10 * i));
        CU_ASSERT_EQUAL(ev[i]->summary->value[0]->simple_value, (float)strtod(want, NULL));
        CU_ASSERT_STRING_EQUAL(ev[i]->summary->value[1]->tag, "lr");
        CU_ASSERT_EQUAL(ev[i]->summary->value[1]->simple_value, 0.1f);
    }
    free_events(ev, n);

    /* A torn last record (half of it written) and steps past 20: cut. */
    int fd = open(names[0], O_WRONLY | O_APPEND);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(write(fd, "\x20\0\0\0\0\0\0\0\1\2", 10), 10);
    close(fd);
    uint64_t cut = 0;
    CU_ASSERT_EQUAL(ct_tb_trim(names[0], 20, &cut), 0);
    CU_ASSERT_TRUE(cut > 10);
    size_t bytes = 0;
    n = read_events(names[0], ev, 16, &bytes);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ev[n - 1]->step, 20);
    free_events(ev, n);

    /* A resumed writer at step 10: the old file ends at 10, the new one
     * (sorted after it) starts past 10. */
    tb = ct_tb_open(dir, 1, 1, 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    write_steps(tb, 20, 30);
    ct_tb_close(tb);
    CU_ASSERT_EQUAL_FATAL(list_files(dir, names, 4), 2);
    n = read_events(names[0], ev, 16, NULL);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(ev[1]->step, 10);
    free_events(ev, n);
    n = read_events(names[1], ev, 16, NULL);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_STRING_EQUAL(ev[0]->file_version, "brain.Event:2");
    CU_ASSERT_EQUAL(ev[1]->step, 20);
    CU_ASSERT_EQUAL(ev[2]->step, 30);
    free_events(ev, n);

    /* A resume without events (log.tensorboard = false) still cuts the
     * abandoned steps, and adds no file. */
    CU_ASSERT_PTR_NULL(ct_tb_open(dir, 0, 1, 20));
    CU_ASSERT_EQUAL_FATAL(list_files(dir, names, 4), 2);
    n = read_events(names[1], ev, 16, NULL);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(ev[n - 1]->step, 20);
    free_events(ev, n);

    /* A tb that is a file: a warning, no writer. */
    char tbdir[600];
    snprintf(tbdir, sizeof tbdir, "%s/other", base);
    CU_ASSERT_EQUAL_FATAL(mkdir(tbdir, 0755), 0);
    strcat(tbdir, "/tb");
    FILE *f = fopen(tbdir, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    snprintf(tbdir, sizeof tbdir, "%s/other", base);
    CU_ASSERT_PTR_NULL(ct_tb_open(tbdir, 1, 0, 0));
    ct_tb_steps(NULL, &(struct ct_step_record){.step = 1}); /* no writer: nothing */
    ct_test_rmtree(base);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"crc32c_vectors", test_crc32c_vectors},
        {"mask", test_mask},
        {"frame", test_frame},
        {"file_trim_resume", test_file_trim_resume},
        {NULL, NULL},
    };
    return ct_test_run("tbevents", cases);
}
