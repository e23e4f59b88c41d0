/* libFuzzer harness: the IDX reader (src/data/idx.c), raw and gzip.
 *
 * Input (README.md):  flags:u8  file...
 * flags:
 *   0x01  gzip the file bytes before writing them (the fuzzer mutates the
 *         IDX content, the reader still goes through inflate); without it
 *         the bytes are written as they are, so a raw IDX file, or gzip
 *         bytes the fuzzer mangled (corrupt, truncated, trailing junk)
 *   0x02  with 0x01: two gzip members (split in the middle), as cat a.gz b.gz
 *   0x04  also the two-pass path of the shared loader: ct_idx_read_header,
 *         then ct_idx_load_into a buffer of that size (when at most 16 MiB)
 * What ct_idx_load accepts must be what ct_idx_load_into reads (checked
 * here, abort otherwise). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "data/idx.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LOAD_INTO_MAX ((size_t)16 << 20)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ct_fuzz_dir();
    return 0;
}

/* Append one gzip member of `len` bytes to out (at *used, capacity cap). */
static void gzip_member(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *used)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = out + *used;
    zs.avail_out = (uInt)(cap - *used);
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
        abort();
    *used = cap - zs.avail_out;
    deflateEnd(&zs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    if (flags & 0x01) {
        /* Two members each bounded by deflateBound of the whole. */
        size_t cap = 2 * (size_t)compressBound((uLong)n) + 64;
        uint8_t *gz = malloc(cap);
        if (!gz)
            abort();
        size_t used = 0;
        if (flags & 0x02) {
            gzip_member(b, n / 2, gz, cap, &used);
            gzip_member(b + n / 2, n - n / 2, gz, cap, &used);
        } else {
            gzip_member(b, n, gz, cap, &used);
        }
        ct_fuzz_write("in.idx", gz, used);
        free(gz);
    } else {
        ct_fuzz_write("in.idx", b, n);
    }
    char path[512];
    ct_fuzz_path(path, sizeof path, "in.idx");

    struct ct_idx idx;
    int rc = ct_idx_load(&idx, path);
    ct_fuzz_verbose("ct_idx_load", rc);
    if (flags & 0x04) {
        struct ct_idx hdr;
        if (ct_idx_read_header(&hdr, path) == 0 && hdr.numel <= LOAD_INTO_MAX) {
            uint8_t *buf = malloc(hdr.numel);
            if (!buf)
                abort();
            int rc2 = ct_idx_load_into(path, &hdr, buf);
            if ((rc == 0) != (rc2 == 0) ||
                (rc == 0 && (idx.numel != hdr.numel || memcmp(idx.data, buf, idx.numel) != 0))) {
                fprintf(stderr, "fuzz_idx: ct_idx_load (%d) and ct_idx_load_into (%d) disagree\n", rc,
                        rc2);
                abort();
            }
            free(buf);
        } else if (rc == 0) {
            /* A file that loads has a header that reads. */
            if (ct_idx_read_header(&hdr, path) != 0)
                abort();
        }
    }
    if (rc == 0)
        ct_idx_free(&idx);
    return 0;
}
