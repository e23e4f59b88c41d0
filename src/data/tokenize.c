/* Text files' bytes into one token shard (data/tokenize.h). */
#include "data/tokenize.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
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
