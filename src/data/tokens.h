/* Token shards in llm.c's layout: the header, a writer, and a reader's view
 * of an opened shard. The data set format itself is ct_dataset_tokens_ops
 * (data/dataset.h); this header holds what the CLI (`data tokenize`,
 * `data inspect|stats`), the set-up scripts' tests and the fuzz harness need
 * beside it.
 *
 * Dims legend: T = tokens of a window's inputs (model.block), window = T + 1.
 *
 * A shard is a header of 256 little-endian int32 (header[0] = magic
 * 20240520, header[1] = version 1, header[2] = token count; the rest 0),
 * then `count` little-endian uint16 tokens: exactly 1024 + 2 * count bytes.
 * llm.c's GPT-2 shards (fineweb, tinyshakespeare) are read as they are;
 * its version 2 (uint32 tokens, Llama 3) is not.
 *
 *     struct ct_tokens_writer w;
 *     if ((rc = ct_tokens_writer_open(&w, "train.bin", n)) < 0) return rc;
 *     ... ct_tokens_writer_put(&w, chunk, k) ...    // n tokens in all
 *     rc = ct_tokens_writer_commit(&w);             // atomic: tmp, fsync, rename
 */
#ifndef CT_DATA_TOKENS_H
#define CT_DATA_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "core/path.h"
#include "data/dataset.h"

/* CT_TOKENS_MAGIC (the header's first int32) is in data/dataset.h, which
 * detects formats by their first bytes. */
#define CT_TOKENS_VERSION 1
#define CT_TOKENS_HEADER_INTS 256
#define CT_TOKENS_HEADER_BYTES (4 * CT_TOKENS_HEADER_INTS) /* 1024 */
/* header[2] is an int32. */
#define CT_TOKENS_MAX_COUNT INT32_MAX

struct ct_tokens_header {
    int32_t magic, version;
    uint64_t count; /* tokens after the header */
};

/* Checks the first `len` bytes of a shard whose file holds `file_size`
 * bytes: at least the 1024-byte header, the magic, the version, a count >= 0
 * and file_size == 1024 + 2 * count. CT_EFORMAT naming `path`, the field
 * (header[0] magic, header[1] version, header[2] token count) and what was
 * expected. Reads only the first 12 bytes of b. */
int ct_tokens_check_header(const char *path, const uint8_t *b, size_t len, uint64_t file_size,
                           struct ct_tokens_header *h);
/* The header of the shard at `path`, checked as above against its size
 * (reads 1024 bytes; CT_ENOENT / CT_EIO naming the file). */
int ct_tokens_read_header(const char *path, struct ct_tokens_header *h);

/* The 1024-byte header of a shard of `count` tokens. */
void ct_tokens_header_encode(uint8_t out[CT_TOKENS_HEADER_BYTES], uint32_t count);

/* A shard being written under a temporary name beside `path` (core/path.h's
 * ct_replace), renamed over it only when all `count` tokens were put. */
struct ct_tokens_writer {
    struct ct_replace r;
    uint64_t count, written;
};
/* Writes the header; CT_ERANGE when count > CT_TOKENS_MAX_COUNT. */
int ct_tokens_writer_open(struct ct_tokens_writer *w, const char *path, uint64_t count);
/* Appends n tokens (little-endian); CT_ERANGE past the count. */
int ct_tokens_writer_put(struct ct_tokens_writer *w, const uint16_t *tok, size_t n);
/* CT_ESTATE unless exactly `count` tokens were put; then fsync, rename and
 * fsync the directory. Always releases w (the temporary file is removed on
 * failure). */
int ct_tokens_writer_commit(struct ct_tokens_writer *w);
void ct_tokens_writer_abort(struct ct_tokens_writer *w);
/* The whole shard in one call. */
int ct_tokens_write(const char *path, const uint16_t *tok, size_t n);

/* Shard s (0 .. ds->n_files - 1) of an opened tokens data set: its mapped
 * tokens (*ntok of them, little-endian uint16 in place) and its *nwin
 * windows (global samples first .. first + nwin - 1, first the sum of the
 * earlier shards' windows). NULL for another format or s out of range. */
const uint16_t *ct_tokens_shard(const struct ct_dataset *ds, int s, size_t *ntok, size_t *nwin);

#endif
