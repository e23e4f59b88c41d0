/* libFuzzer harness: GPT-2's BPE (src/data/bpe.c): the parsers of
 * encoder.json and vocab.bpe, and encode/decode over what they accept.
 *
 * Input (README.md):  len:u32le ENCODER  len:u32le MERGES  TEXT (the rest)
 * ENCODER and MERGES are written as DIR/encoder.json and DIR/vocab.bpe and
 * loaded with ct_bpe_load. Invariants (abort otherwise): a refusal has a
 * message naming one of the two files; an accepted vocabulary encodes TEXT
 * into ids below its size that decode to TEXT byte for byte (invalid UTF-8
 * included), and encoding TEXT twice gives the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/bpe.h"
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
    fprintf(stderr, "fuzz_bpe: %s (%s)\n", what, ct_error_message());
    abort();
}

static void check_text(const struct ct_bpe *b, const uint8_t *text, size_t n)
{
    struct ct_bpe_ids a = {0}, c = {0};
    if (ct_bpe_encode(b, (const char *)text, n, &a) < 0 || ct_bpe_encode(b, (const char *)text, n, &c) < 0)
        fail("encode refused a text");
    if (a.n != c.n || (a.n && memcmp(a.v, c.v, a.n * sizeof *a.v) != 0))
        fail("two encodings of one text differ");
    for (size_t i = 0; i < a.n; i++)
        if (a.v[i] >= ct_bpe_vocab(b))
            fail("an id past the vocabulary");
    char *back = NULL;
    size_t len = 0;
    if (ct_bpe_decode(b, a.v, a.n, &back, &len) < 0)
        fail("decode refused encode's ids");
    if (len != n || (n && memcmp(back, text, n) != 0))
        fail("decode(encode(text)) is not the text");
    free(back);
    ct_bpe_ids_free(&a);
    ct_bpe_ids_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *enc, *mer;
    size_t n = size, enc_len, mer_len;
    ct_fuzz_take(&p, &n, &enc, &enc_len);
    ct_fuzz_take(&p, &n, &mer, &mer_len);
    ct_fuzz_write("encoder.json", enc, enc_len);
    ct_fuzz_write("vocab.bpe", mer, mer_len);
    struct ct_bpe *b = NULL;
    ct_error_clear();
    int rc = ct_bpe_load(&b, ct_fuzz_dir());
    ct_fuzz_verbose("ct_bpe_load", rc);
    if (rc < 0) {
        if (b || (!strstr(ct_error_message(), "encoder.json") && !strstr(ct_error_message(), "vocab.bpe") &&
                  !strstr(ct_error_message(), "out of memory")))
            fail("a refusal that names neither file");
        return 0;
    }
    check_text(b, p, n);
    ct_bpe_free(b);
    return 0;
}
