/* Token shards (see tokens.h): the header check, the writer, and the tokens
 * format of the data set interface (ct_dataset_tokens_ops, data/dataset.h).
 *
 * Dims legend: N = windows (samples) over all shards, T = model.block,
 * W = window = T + 1 tokens, S = K = T (inputs and targets per sample),
 * B = samples in one gather.
 *
 * The shards of one data set (a comma list, at most CT_DATA_MAX_FILES) are
 * each memory-mapped read-only and used in place: the page cache is the
 * node's one shared copy, so a node-shared open needs nothing more than the
 * agreed status. Shard s of ntok_s tokens holds n_s = floor(ntok_s / W)
 * windows laid end to end from an offset o_s in [0, ntok_s - n_s W]: 0 for
 * evaluation (epoch < 0), and for a training epoch one Philox word keyed by
 * (seed, CT_RNG_WINDOW) with counter (epoch low, epoch high, 0, 0), taken
 * modulo the slack + 1 (the slack is below W, so the word's bias is below
 * W / 2^32). So the windows move between epochs while N stays fixed, and
 * the draw depends on nothing but (seed, epoch): not the rank, the prefetch
 * depth or the order of gathering. Window i of shard s starts at token
 * o_s + i W; its inputs are its first T tokens (as floats, exact below
 * 2^24), its targets its last T. The open scans every token once: that
 * finds the vocabulary (1 + the largest token, unless data.vocab says it)
 * and refuses a token at or above data.vocab, naming it.
 *
 * It deliberately is not a tokenizer (data/tokenize.c, `data tokenize --bytes`,
 * makes byte-level shards; llm.c's scripts make GPT-2 ones), nor a reader of
 * llm.c's version 2 (uint32 tokens).
 */
#include "data/tokens.h"

#include "core/error.h"
#include "core/path.h"
#include "core/liveness.h"
#include "core/rng.h"
#include "data/dataset-impl.h"
#include "data/filetable.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The tokens are read in place from the mapping as the host's uint16. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "tokens.c uses little-endian uint16 tokens in place: a big-endian host needs a swap");

/* ------------------------------------------------------------ the header */

static int32_t le32(const uint8_t *b)
{
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24);
}

int ct_tokens_check_header(const char *path, const uint8_t *b, size_t len, uint64_t file_size,
                           struct ct_tokens_header *h)
{
    memset(h, 0, sizeof *h);
    if (len < CT_TOKENS_HEADER_BYTES || file_size < CT_TOKENS_HEADER_BYTES)
        return ct_error_set(CT_EFORMAT,
                            "%s: %llu bytes, shorter than the %d-byte header of a token shard "
                            "(%d little-endian int32: magic %d, version %d, token count)",
                            path, (unsigned long long)(len < file_size ? len : file_size),
                            CT_TOKENS_HEADER_BYTES, CT_TOKENS_HEADER_INTS, CT_TOKENS_MAGIC,
                            CT_TOKENS_VERSION);
    h->magic = le32(b);
    h->version = le32(b + 4);
    const int32_t count = le32(b + 8);
    if (h->magic != CT_TOKENS_MAGIC)
        return ct_error_set(CT_EFORMAT,
                            "%s: not a token shard: header[0] (magic) is %d (bytes %02X %02X %02X "
                            "%02X), expected %d (llm.c's shard layout)",
                            path, h->magic, b[0], b[1], b[2], b[3], CT_TOKENS_MAGIC);
    if (h->version != CT_TOKENS_VERSION)
        return ct_error_set(CT_EFORMAT,
                            "%s: token shard header[1] (version) is %d, expected %d (uint16 "
                            "tokens%s)",
                            path, h->version, CT_TOKENS_VERSION,
                            h->version == 2 ? "; version 2, llm.c's uint32 tokens, is not read" : "");
    const uint64_t payload = file_size - CT_TOKENS_HEADER_BYTES;
    if (count < 0 || payload != 2 * (uint64_t)count)
        return ct_error_set(CT_EFORMAT,
                            "%s: token shard header[2] (token count) is %d, but the file has "
                            "%llu bytes: expected %d + 2 x count = %lld bytes (the file holds "
                            "%llu whole tokens after the header%s)",
                            path, count, (unsigned long long)file_size, CT_TOKENS_HEADER_BYTES,
                            CT_TOKENS_HEADER_BYTES + 2 * (long long)count,
                            (unsigned long long)(payload / 2), payload % 2 ? " and an odd byte" : "");
    h->count = (uint64_t)count;
    return 0;
}

int ct_tokens_read_header(const char *path, struct ct_tokens_header *h)
{
    memset(h, 0, sizeof *h);
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    uint8_t b[CT_TOKENS_HEADER_BYTES];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t r = read(fd, b + got, sizeof b - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return ct_error_set(CT_EIO, "%s: read error: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return ct_tokens_check_header(path, b, got, size, h);
}

void ct_tokens_header_encode(uint8_t out[CT_TOKENS_HEADER_BYTES], uint32_t count)
{
    memset(out, 0, CT_TOKENS_HEADER_BYTES);
    const uint32_t v[3] = {CT_TOKENS_MAGIC, CT_TOKENS_VERSION, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = (uint8_t)(v[i] >> (8 * k));
}

/* ------------------------------------------------------------ the writer */

int ct_tokens_writer_open(struct ct_tokens_writer *w, const char *path, uint64_t count)
{
    memset(w, 0, sizeof *w);
    if (count > CT_TOKENS_MAX_COUNT)
        return ct_error_set(CT_ERANGE,
                            "%s: %llu tokens: a token shard holds at most %d (header[2] is an int32)",
                            path, (unsigned long long)count, CT_TOKENS_MAX_COUNT);
    int rc = ct_replace_open(&w->r, path);
    if (rc < 0)
        return rc;
    uint8_t hdr[CT_TOKENS_HEADER_BYTES];
    ct_tokens_header_encode(hdr, (uint32_t)count);
    /* A failed write is seen by the commit (ferror). */
    (void)fwrite(hdr, 1, sizeof hdr, w->r.f);
    w->count = count;
    return 0;
}

int ct_tokens_writer_put(struct ct_tokens_writer *w, const uint16_t *tok, size_t n)
{
    if (!w->r.f)
        return ct_error_set(CT_ESTATE, "ct_tokens_writer_put on a closed writer");
    if (n > w->count - w->written)
        return ct_error_set(CT_ERANGE, "%s: more tokens than the %llu the header promises",
                            w->r.path, (unsigned long long)w->count);
    if (n && fwrite(tok, sizeof *tok, n, w->r.f) != n)
        return ct_error_set(CT_EIO, "%s: write failed: %s", w->r.path, strerror(errno));
    w->written += n;
    return 0;
}

int ct_tokens_writer_commit(struct ct_tokens_writer *w)
{
    if (!w->r.f)
        return ct_error_set(CT_ESTATE, "ct_tokens_writer_commit on a closed writer");
    if (w->written != w->count) {
        int rc = ct_error_set(CT_ESTATE, "%s: %llu tokens written, but the header promises %llu",
                              w->r.path, (unsigned long long)w->written,
                              (unsigned long long)w->count);
        ct_tokens_writer_abort(w);
        return rc;
    }
    /* The directory to fsync after the rename (ct_replace_commit frees r). */
    char *dir = strdup(w->r.path);
    if (!dir) {
        ct_tokens_writer_abort(w);
        return ct_error_set(CT_ENOMEM, "out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else
        slash[slash == dir] = '\0'; /* "/x" -> "/" */
    int rc = ct_replace_commit(&w->r);
    if (rc == 0)
        rc = ct_fsync_dir(dir);
    free(dir);
    memset(w, 0, sizeof *w);
    return rc;
}

void ct_tokens_writer_abort(struct ct_tokens_writer *w)
{
    ct_replace_abort(&w->r);
    memset(w, 0, sizeof *w);
}

int ct_tokens_write(const char *path, const uint16_t *tok, size_t n)
{
    struct ct_tokens_writer w;
    int rc = ct_tokens_writer_open(&w, path, n);
    if (rc < 0)
        return rc;
    if ((rc = ct_tokens_writer_put(&w, tok, n)) < 0) {
        ct_tokens_writer_abort(&w);
        return rc;
    }
    return ct_tokens_writer_commit(&w);
}

/* ------------------------------------------------------------ the data set */

struct tokens_shard {
    struct ct__mapping map;
    const uint16_t *tok; /* (ntok) in the mapping, after the header */
    size_t ntok;
    size_t nwin;   /* n_s = floor(ntok / W) */
    size_t slack;  /* ntok - nwin W, in [0, W) */
};

struct tokens_ds {
    int n_shards;
    size_t window;                             /* W = T + 1 */
    struct ct_rng_key key;                     /* (seed, CT_RNG_WINDOW) */
    struct tokens_shard s[CT_DATA_MAX_FILES];
    struct ct_filetable files;                 /* which shard holds window i */
};

static void tokens_release(struct tokens_ds *st)
{
    if (!st)
        return;
    for (int s = 0; s < st->n_shards; s++)
        ct__data_unmap(&st->s[s].map);
    free(st);
}

/* Every token below `vocab` (> 0), else the first one that is not refused
 * with its index; the largest token into *max. The max loop has no branch
 * and vectorizes; only a shard holding a bad token is searched again. */
static int scan_tokens(const char *path, const struct tokens_shard *sh, int vocab, int *max)
{
    enum { BLOCK = (1 << 25) }; /* 64 MiB of tokens between liveness marks */
    unsigned m = 0;
    for (size_t at = 0; at < sh->ntok; at += BLOCK) {
        const size_t end = sh->ntok - at < BLOCK ? sh->ntok : at + BLOCK;
        for (size_t k = at; k < end; k++)
            m = sh->tok[k] > m ? sh->tok[k] : m;
        ct_liveness_mark(-1);
    }
    if (vocab > 0 && m >= (unsigned)vocab) {
        size_t k = 0;
        while (sh->tok[k] < (unsigned)vocab)
            k++;
        return ct_error_set(CT_EFORMAT,
                            "%s: token %zu (byte offset %zu) is %u: expected every token below "
                            "data.vocab = %d",
                            path, k, CT_TOKENS_HEADER_BYTES + 2 * k, sh->tok[k], vocab);
    }
    *max = (int)m;
    return 0;
}

/* Maps shard `path` as shard st->n_shards, checks its header against its
 * size, its length against one window, and its tokens. */
static int map_shard(struct tokens_ds *st, const char *path, int vocab, int *max)
{
    struct tokens_shard *sh = &st->s[st->n_shards];
    int rc = ct__data_map(path, &sh->map);
    if (rc < 0)
        return rc;
    st->n_shards++;
    struct ct_tokens_header h;
    if ((rc = ct_tokens_check_header(path, sh->map.data, sh->map.size, sh->map.size, &h)) < 0)
        return rc;
    sh->tok = (const uint16_t *)(const void *)(sh->map.data + CT_TOKENS_HEADER_BYTES);
    sh->ntok = (size_t)h.count;
    if (sh->ntok < st->window)
        return ct_error_set(CT_EFORMAT,
                            "%s: %zu tokens, fewer than one window of %zu (model.block + 1 "
                            "tokens: a window's inputs and, one token later, its targets)",
                            path, sh->ntok, st->window);
    sh->nwin = sh->ntok / st->window;
    sh->slack = sh->ntok - sh->nwin * st->window;
    return scan_tokens(path, sh, vocab, max);
}

static int check_params(const struct ct_dataset_params *p)
{
    if (p->labels && p->labels[0])
        return ct_error_set(CT_EINVAL,
                            "data.train_labels/test_labels must be empty for tokens: a window's "
                            "targets are its own next tokens (found '%s')",
                            p->labels);
    if (!p->images || !p->images[0])
        return ct_error_set(CT_EINVAL, "data: no token shard given (tokens: a comma list of shards)");
    if (p->window < 2)
        return ct_error_set(CT_EINVAL,
                            "%s: a token window of %d tokens: expected at least 2 (model.block + 1, "
                            "model.block >= 1)",
                            p->images, p->window);
    if (p->vocab < 0 || p->vocab > CT_DATA_MAX_TARGET)
        return ct_error_set(CT_EINVAL, "%s: data.vocab = %d: expected 0 .. %d", p->images, p->vocab,
                            CT_DATA_MAX_TARGET);
    if (p->augment != CT_DATA_AUGMENT_NONE)
        return ct_error_set(CT_EINVAL, "%s: data.augment = %s does not apply to token data (give none)",
                            p->images, ct_data_augment_name(p->augment));
    return 0;
}

static int tokens_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    char **paths = NULL;
    int n = 0, max = 0;
    struct tokens_ds *st = NULL;
    int rc = check_params(p);
    if (rc == 0 && !(st = calloc(1, sizeof *st)))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0) {
        st->window = (size_t)p->window;
        st->key = ct_rng_key(p->seed, CT_RNG_WINDOW);
        rc = ct__data_split_list(p->dir, p->images, "token shards", &paths, &n);
    }
    for (int s = 0; rc == 0 && s < n; s++) {
        int m = 0;
        rc = map_shard(st, paths[s], p->vocab, &m);
        max = m > max ? m : max;
        if (rc == 0)
            rc = ct_filetable_add(&st->files, paths[s], st->s[s].nwin, "windows");
    }
    if (rc == 0) {
        const int T = p->window - 1;
        ds->n = ct_filetable_total(&st->files);
        ds->c = 1;
        ds->h = 1;
        ds->w = T;
        ds->sample_numel = (size_t)T;
        ds->targets = T;
        ds->n_classes = p->vocab > 0 ? p->vocab : max + 1;
        ds->dtype = CT_DATA_U16;
        ds->layout = CT_DATA_LAYOUT_NCHW;
        ds->y = NULL;
    }
    for (int s = 0; rc == 0 && s < n; s++)
        rc = ct__data_add_file(ds, paths[s]);
    /* Nothing here is collective (every rank maps the page cache's copy),
     * but a node-shared open returns the same status on every rank of the
     * node (dataset.h). */
    if (p->shared)
        rc = p->shared->ready(p->shared->ctx, rc);
    ct__data_free_list(paths, n);
    if (rc < 0) {
        tokens_release(st);
        return rc;
    }
    ds->impl = st;
    return 0;
}

/* The epoch's offset of every shard's first window into off[]. */
static void window_offsets(const struct tokens_ds *st, int64_t epoch, size_t off[CT_DATA_MAX_FILES])
{
    uint32_t r[4] = {0, 0, 0, 0};
    if (epoch >= 0) {
        const uint64_t e = (uint64_t)epoch;
        ct_rng_block(st->key, (const uint32_t[4]){(uint32_t)e, (uint32_t)(e >> 32), 0, 0}, r);
    }
    for (int s = 0; s < st->n_shards; s++)
        off[s] = epoch >= 0 ? r[0] % (st->s[s].slack + 1) : 0;
}

static void tokens_gather(const struct ct_dataset *ds, const uint32_t *idx, size_t n, int64_t epoch,
                          float *x, int32_t *y)
{
    /* x: (B, T), y: (B, T) */
    const struct tokens_ds *st = ds->impl;
    const size_t T = st->window - 1;
    size_t off[CT_DATA_MAX_FILES];
    window_offsets(st, epoch, off);
    for (size_t j = 0; j < n; j++) {
        const int s = ct_filetable_find(&st->files, idx[j]);
        const size_t start = off[s] + (idx[j] - st->files.first[s]) * st->window;
        const uint16_t *t = st->s[s].tok + start;
        float *xj = x + j * T;
        int32_t *yj = y + j * T;
        for (size_t k = 0; k < T; k++) {
            xj[k] = (float)t[k];
            yj[k] = t[k + 1];
        }
    }
}

static void tokens_close(struct ct_dataset *ds)
{
    tokens_release(ds->impl);
    ds->impl = NULL;
}

const uint16_t *ct_tokens_shard(const struct ct_dataset *ds, int s, size_t *ntok, size_t *nwin)
{
    if (!ds || ds->ops != &ct_dataset_tokens_ops || !ds->impl)
        return NULL;
    const struct tokens_ds *st = ds->impl;
    if (s < 0 || s >= st->n_shards)
        return NULL;
    if (ntok)
        *ntok = st->s[s].ntok;
    if (nwin)
        *nwin = st->s[s].nwin;
    return st->s[s].tok;
}

const struct ct_dataset_ops ct_dataset_tokens_ops = {
    .name = "tokens", .open = tokens_open, .sample = NULL, .close = tokens_close, .gather = tokens_gather};
