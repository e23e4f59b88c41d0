/* Text files' bytes into one token shard (data/tokenize.h). */
#include "data/tokenize.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "data/bpe.h"
#include "data/tokens.h"

/* The files' sizes, each a regular file, and their sum. */
static int measure_texts(const char *const *texts, int n, uint64_t *sizes, uint64_t *total)
{
    *total = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(texts[i], &st) != 0)
            return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot stat: %s", texts[i],
                                strerror(errno));
        if (!S_ISREG(st.st_mode))
            return ct_error_set(CT_EIO, "%s: not a regular file (tokenize reads files whose size "
                                "it can know before writing the header)", texts[i]);
        sizes[i] = (uint64_t)st.st_size;
        *total += sizes[i];
    }
    if (*total == 0)
        return ct_error_set(CT_EINVAL, "%s hold%s no bytes: nothing to tokenize",
                            n == 1 ? texts[0] : "the text files", n == 1 ? "s" : "");
    return 0;
}

/* One text file's bytes as tokens, through buffers of CHUNK bytes. */
enum { CHUNK = 1 << 16 };

static int tokenize_file(struct ct_tokens_writer *w, const char *path, uint64_t size, uint8_t *in,
                         uint16_t *tok)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    uint64_t got = 0;
    int rc = 0;
    size_t k;
    while (rc == 0 && (k = fread(in, 1, CHUNK, f)) > 0) {
        if (got + k > size) {
            got += k; /* it grew: refused below */
            break;
        }
        for (size_t i = 0; i < k; i++)
            tok[i] = in[i];
        rc = ct_tokens_writer_put(w, tok, k);
        got += k;
    }
    if (rc == 0 && ferror(f))
        rc = ct_error_set(CT_EIO, "%s: read error: %s", path, strerror(errno));
    else if (rc == 0 && (got != size || fgetc(f) != EOF))
        rc = ct_error_set(CT_EIO, "%s: changed while being read: %llu bytes when measured, %s", path,
                          (unsigned long long)size, got < size ? "fewer read" : "more read");
    fclose(f);
    return rc;
}

int ct_tokenize_bytes(const char *const *texts, int n_texts, const char *shard, uint64_t *ntokens)
{
    uint64_t *sizes = calloc((size_t)(n_texts > 0 ? n_texts : 1), sizeof *sizes), total = 0;
    uint8_t *in = malloc(CHUNK);
    uint16_t *tok = malloc(CHUNK * sizeof *tok);
    int rc = sizes && in && tok ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = measure_texts(texts, n_texts, sizes, &total);
    struct ct_tokens_writer w;
    if (rc == 0)
        rc = ct_tokens_writer_open(&w, shard, total);
    if (rc == 0) {
        for (int i = 0; rc == 0 && i < n_texts; i++)
            rc = tokenize_file(&w, texts[i], sizes[i], in, tok);
        if (rc == 0)
            rc = ct_tokens_writer_commit(&w);
        else
            ct_tokens_writer_abort(&w);
    }
    free(sizes);
    free(in);
    free(tok);
    *ntokens = rc == 0 ? total : 0;
    return rc;
}

/* A whole text file into memory (a regular file, read to its end). */
static int slurp(const char *path, uint64_t size, char **out)
{
    char *buf = malloc(size + 1);
    if (!buf)
        return ct_error_set(CT_ENOMEM, "%s: out of memory for %llu bytes", path, (unsigned long long)size);
    FILE *f = fopen(path, "rb");
    if (!f) {
        free(buf);
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    }
    size_t got = fread(buf, 1, size, f);
    int rc = 0;
    if (ferror(f))
        rc = ct_error_set(CT_EIO, "%s: read error: %s", path, strerror(errno));
    else if (got != size || fgetc(f) != EOF)
        rc = ct_error_set(CT_EIO, "%s: changed while being read: %llu bytes when measured, %s", path,
                          (unsigned long long)size, got < size ? "fewer read" : "more read");
    fclose(f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

/* Every document's ids, each after an <|endoftext|>. */
static int encode_texts(const struct ct_bpe *b, const char *const *texts, int n, const uint64_t *sizes,
                        struct ct_bpe_ids *ids)
{
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        char *text = NULL;
        if ((rc = slurp(texts[i], sizes[i], &text)) == 0 &&
            (rc = ct_bpe_ids_push(ids, (uint16_t)ct_bpe_eot(b))) == 0)
            rc = ct_bpe_encode(b, text, (size_t)sizes[i], ids);
        free(text);
    }
    return rc;
}

int ct_tokenize_gpt2(const char *bpe_dir, const char *const *texts, int n_texts, const char *shard,
                     uint64_t *ntokens, int *vocab, uint8_t digest[32])
{
    *ntokens = 0;
    struct ct_bpe *b = NULL;
    struct ct_bpe_ids ids = {0};
    uint64_t *sizes = calloc((size_t)(n_texts > 0 ? n_texts : 1), sizeof *sizes), total = 0;
    int rc = sizes ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = measure_texts(texts, n_texts, sizes, &total);
    if (rc == 0)
        rc = ct_bpe_load(&b, bpe_dir);
    if (rc == 0 && ct_bpe_eot(b) < 0)
        rc = ct_error_set(CT_EFORMAT, "%s/%s: no %s token (it separates the documents)", bpe_dir,
                          CT_BPE_ENCODER_FILE, CT_BPE_EOT_NAME);
    if (rc == 0)
        rc = encode_texts(b, texts, n_texts, sizes, &ids);
    if (rc == 0 && ids.n > UINT32_MAX)
        rc = ct_error_set(CT_EINVAL, "%s: %zu tokens, over a shard's 2^32 - 1", shard, ids.n);
    if (rc == 0)
        rc = ct_tokens_write(shard, ids.v, ids.n);
    if (rc == 0) {
        *ntokens = ids.n;
        *vocab = ct_bpe_vocab(b);
        memcpy(digest, ct_bpe_digest(b), 32);
    }
    ct_bpe_ids_free(&ids);
    ct_bpe_free(b);
    free(sizes);
    return rc;
}
