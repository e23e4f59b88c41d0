/* libFuzzer harness: token shards (src/data/tokens.c): the header check in
 * memory, and the tokens format of the data set interface.
 *
 * Input (README.md):  flags:u8  len:u32le A  B (the rest)
 * A always goes to ct_tokens_check_header in memory (its length as the file
 * size). flags:
 *   0x01  also write A as a.bin and open it with ct_dataset_open (format
 *         tokens), window 2 + (flags >> 4) (2 .. 17 tokens)
 *   0x02  with 0x01: B as a second shard b.bin
 *   0x04  with 0x01: format auto (detection by the magic; one shard; a
 *         header of another format may open as that format, unchecked here)
 *   0x08  with 0x01: data.vocab = 256 (byte tokens), else 0
 * Invariants (abort otherwise): an accepted header says magic 20240520,
 * version 1 and a count the length holds exactly; an opened set has N = the
 * sum of floor(count / W) over its shards, the shape 1 x 1 x T, every token
 * below n_classes (and below 256 with vocab 256), and its evaluation and
 * training gathers give every window from the shard's tokens at the offset
 * dataset.h's rule gives (computed here from Philox), inside the shard, end
 * to end, the targets the inputs shifted by one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/tokens.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ct_fuzz_dir();
    return 0;
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_tokens: %s\n", what);
    abort();
}

static uint16_t token(const uint8_t *shard, size_t k)
{
    return (uint16_t)(shard[1024 + 2 * k] | shard[1024 + 2 * k + 1] << 8);
}

/* x, y (n, T) of the windows 0..n-1 against the shards' bytes: window i
 * of shard s starts at o_s + i W, o_s = 0 for evaluation (epoch < 0), else
 * Philox (seed, CT_RNG_WINDOW) at counter (epoch lo, hi, 0, 0), word 0,
 * modulo the slack + 1: dataset.h's rule, computed here. */
static void check_windows(const struct ct_dataset *ds, const uint8_t *const *shards,
                          const size_t *count, int nshards, size_t W, const float *x,
                          const int32_t *y, uint64_t seed, int64_t epoch)
{
    const size_t T = W - 1;
    uint32_t r[4] = {0, 0, 0, 0};
    if (epoch >= 0)
        ct_rng_block(ct_rng_key(seed, CT_RNG_WINDOW),
                     (const uint32_t[4]){(uint32_t)epoch, (uint32_t)((uint64_t)epoch >> 32), 0, 0}, r);
    size_t i = 0;
    for (int s = 0; s < nshards; s++) {
        const size_t nwin = count[s] / W, slack = count[s] - nwin * W;
        const size_t off = epoch >= 0 ? r[0] % (slack + 1) : 0;
        for (size_t w = 0; w < nwin; w++, i++)
            for (size_t t = 0; t < T; t++) {
                const size_t at = off + w * W + t;
                if (at + 1 >= count[s])
                    fail("a window reaches past its shard");
                if (x[i * T + t] != (float)token(shards[s], at) || y[i * T + t] != token(shards[s], at + 1))
                    fail("a window is not the shard's tokens, end to end from the epoch's offset");
                if (y[i * T + t] < 0 || y[i * T + t] >= ds->n_classes)
                    fail("a target at or above n_classes");
            }
    }
    if (i != ds->n)
        fail("N is not the sum of the shards' windows");
}

static void check_open(const struct ct_dataset *ds, const uint8_t *const *shards, const size_t *len,
                       int nshards, size_t W, int vocab, uint64_t seed, int64_t epoch)
{
    size_t count[2];
    size_t n = 0;
    int max = 0;
    for (int s = 0; s < nshards; s++) {
        struct ct_tokens_header h;
        if (ct_tokens_check_header("shard", shards[s], len[s], len[s], &h) != 0)
            fail("an opened shard has a header the check refuses");
        count[s] = (size_t)h.count;
        if (count[s] < W)
            fail("a shard shorter than one window was opened");
        n += count[s] / W;
        for (size_t k = 0; k < count[s]; k++)
            max = token(shards[s], k) > max ? token(shards[s], k) : max;
    }
    if (ds->n != n || ds->c != 1 || ds->h != 1 || (size_t)ds->w != W - 1 ||
        ds->sample_numel != W - 1 || (size_t)ds->targets != W - 1 || ds->y ||
        ds->dtype != CT_DATA_U16 || ds->n_files != nshards)
        fail("shape, count or targets");
    if (vocab ? (ds->n_classes != vocab || max >= vocab) : ds->n_classes != max + 1)
        fail("n_classes");
    const size_t T = W - 1;
    float *x = malloc(n * T * sizeof *x);
    int32_t *y = malloc(n * T * sizeof *y);
    uint32_t *idx = malloc(n * sizeof *idx);
    if (!x || !y || !idx)
        abort();
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)i;
    ct_dataset_gather_range(ds, 0, n, x, y);
    check_windows(ds, shards, count, nshards, W, x, y, seed, -1);
    ct_dataset_gather(ds, idx, n, epoch, x, y);
    check_windows(ds, shards, count, nshards, W, x, y, seed, epoch);
    free(x);
    free(y);
    free(idx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const unsigned flags = data[0];
    const uint8_t *p = data + 1, *a, *b;
    size_t n = size - 1, alen, blen;
    ct_fuzz_take(&p, &n, &a, &alen);
    b = p;
    blen = n;

    struct ct_tokens_header h;
    int rc = ct_tokens_check_header("input", a, alen, alen, &h);
    ct_fuzz_verbose("ct_tokens_check_header", rc);
    if (rc == 0 && (h.magic != 20240520 || h.version != 1 || alen != 1024 + 2 * h.count))
        fail("an accepted header is not magic, version 1 and the count the length holds");

    if (!(flags & 0x01))
        return 0;
    const int two = (flags & 0x02) && !(flags & 0x04);
    const int vocab = flags & 0x08 ? 256 : 0;
    const size_t W = 2 + (flags >> 4);
    ct_fuzz_write("a.bin", a, alen);
    if (two)
        ct_fuzz_write("b.bin", b, blen);
    struct ct_dataset_params prm = ct_dataset_default_params();
    prm.format = flags & 0x04 ? CT_DATA_FORMAT_AUTO : CT_DATA_FORMAT_TOKENS;
    prm.dir = ct_fuzz_dir();
    prm.images = two ? "a.bin,b.bin" : "a.bin";
    prm.window = (int)W;
    prm.vocab = vocab;
    prm.seed = flags;
    struct ct_dataset ds;
    rc = ct_dataset_open(&ds, &prm);
    ct_fuzz_verbose("ct_dataset_open (tokens)", rc);
    if (rc == 0 && ds.format != CT_DATA_FORMAT_TOKENS) {
        /* Format auto may find another format's magic (an IDX header, say:
         * regress/tokens/auto-idx-magic); never one past the tokens magic. */
        uint32_t magic = 0;
        if (alen >= 4)
            memcpy(&magic, a, 4);
        if (!(flags & 0x04) || magic == CT_TOKENS_MAGIC)
            fail("a tokens open made another format");
        ct_dataset_close(&ds);
        return 0;
    }
    if (rc == 0) {
        const uint8_t *shards[2] = {a, b};
        const size_t len[2] = {alen, blen};
        check_open(&ds, shards, len, two ? 2 : 1, W, vocab, prm.seed, (int64_t)(flags & 0x0f));
        ct_dataset_close(&ds);
    }
    return 0;
}
