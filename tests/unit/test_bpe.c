/* GPT-2's byte-level BPE (src/data/bpe.c) on a small vocabulary written
 * here in GPT-2's file formats (the 256 one-byte tokens, a few merges,
 * <|endoftext|>): merges by rank, the pre-tokenizer's pieces (seen through
 * merges that would cross them), decode(encode(x)) == x for random bytes,
 * invalid UTF-8 included, and every malformed vocabulary refused naming the
 * file and what is wrong. The whole vocabulary against the reference
 * encoder (npm gpt-3-encoder under node) is tests/e2e/test_bpe.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "ct_test.h"
#include "data/bpe.h"
#include "data/tokenize.h"
#include "data/tokens.h"

static char g_dir[256];

/* GPT-2's alphabet: the character standing for byte b, as UTF-8. */
static int alphabet_char(int b, char *out)
{
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int x = 0; x < b; x++)
            n += !((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || x >= 0xae);
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* A token's bytes in the alphabet, JSON-escaped when `json`. */
static void spell(const char *bytes, char *out, int json)
{
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)bytes; *p; p++) {
        if (json && (*p == '"' || *p == '\\'))
            out[k++] = '\\';
        k += (size_t)alphabet_char(*p, out + k);
    }
    out[k] = '\0';
}

/* The merges, by rank; the vocabulary is the bytes, then each merge's
 * result in this order, then <|endoftext|>. */
static const char *const g_merges[][2] = {
    {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"in", "g"}, {"'", "s"}, {" ", " "},
    {"a", "a"}, {"aa", "aa"}, {" ", "a"}, {"1", "2"}, {"\"", "\\"},
};
enum { N_MERGES = sizeof g_merges / sizeof g_merges[0], EOT = 256 + N_MERGES };

static int write_text(const char *name, const char *text)
{
    return ct_test_write_file(ct_test_path(g_dir, name), text, strlen(text));
}

/* encoder.json and vocab.bpe of the small vocabulary into g_dir. */
static int write_vocab(void)
{
    static char enc[65536], mer[8192];
    char tok[64], sp[256];
    size_t k = (size_t)snprintf(enc, sizeof enc, "{");
    for (int b = 0; b < 256; b++) {
        tok[0] = (char)(b ? b : 'x'); /* byte 0 spelled below */
        tok[1] = '\0';
        if (b == 0) {
            size_t m = (size_t)alphabet_char(0, sp);
            sp[m] = '\0';
        } else {
            spell(tok, sp, 1);
        }
        k += (size_t)snprintf(enc + k, sizeof enc - k, "\"%s\": %d, ", sp, b);
    }
    size_t m = (size_t)snprintf(mer, sizeof mer, "#version: 0.2\n");
    for (int i = 0; i < N_MERGES; i++) {
        char a[64], c[64], both[64];
        snprintf(both, sizeof both, "%s%s", g_merges[i][0], g_merges[i][1]);
        spell(both, sp, 1);
        k += (size_t)snprintf(enc + k, sizeof enc - k, "\"%s\": %d, ", sp, 256 + i);
        spell(g_merges[i][0], a, 0);
        spell(g_merges[i][1], c, 0);
        m += (size_t)snprintf(mer + m, sizeof mer - m, "%s %s\n", a, c);
    }
    snprintf(enc + k, sizeof enc - k, "\"<|endoftext|>\": %d}", EOT);
    return write_text("encoder.json", enc) < 0 || write_text("vocab.bpe", mer) < 0 ? -1 : 0;
}

static int id_of(const char *merged)
{
    for (int i = 0; i < N_MERGES; i++) {
        char both[64];
        snprintf(both, sizeof both, "%s%s", g_merges[i][0], g_merges[i][1]);
        if (strcmp(both, merged) == 0)
            return 256 + i;
    }
    return strlen(merged) == 1 ? (unsigned char)merged[0] : -1;
}

/* text's ids equal the tokens named (one-byte tokens or merges), in order. */
static int encodes_to(const struct ct_bpe *b, const char *text, const char *const *want, int n)
{
    struct ct_bpe_ids ids = {0};
    int ok = ct_bpe_encode(b, text, strlen(text), &ids) == 0 && ids.n == (size_t)n;
    for (int i = 0; ok && i < n; i++)
        ok = ids.v[i] == id_of(want[i]);
    if (!ok) {
        printf("\n  '%s': got", text);
        for (size_t i = 0; i < ids.n; i++)
            printf(" %u", ids.v[i]);
        printf(", want");
        for (int i = 0; i < n; i++)
            printf(" %d", id_of(want[i]));
        printf("\n");
    }
    ct_bpe_ids_free(&ids);
    return ok;
}
#define ENCODES(b, text, ...)                                                                       \
    CU_ASSERT(encodes_to(b, text, (const char *const[]){__VA_ARGS__},                              \
                         (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))))

static void test_load(void)
{
    struct ct_bpe *b = NULL;
    CU_ASSERT_EQUAL_FATAL(write_vocab(), 0);
    CU_ASSERT_EQUAL_FATAL(ct_bpe_load(&b, g_dir), 0);
    CU_ASSERT_EQUAL(ct_bpe_vocab(b), EOT + 1);
    CU_ASSERT_EQUAL(ct_bpe_eot(b), EOT);
    size_t len = 0;
    const char *t = ct_bpe_token(b, id_of(" the"), &len);
    CU_ASSERT(t && len == 4 && memcmp(t, " the", 4) == 0);
    CU_ASSERT_PTR_NULL(ct_bpe_token(b, EOT + 1, &len));
    ct_bpe_free(b);
}

static void test_merges_and_pieces(void)
{
    struct ct_bpe *b = NULL;
    CU_ASSERT_EQUAL_FATAL(ct_bpe_load(&b, g_dir), 0);
    /* by rank: " t"+"he" after " t" and "he"; "ing" from "in" */
    ENCODES(b, " the thing", " the", " t", "h", "ing");
    /* "aaaa": aa twice, then aaaa; "aaaaa": aaaa + a (left to right) */
    ENCODES(b, "aaaaa", "aaaa", "a");
    /* contractions are pieces: "'s" merges; "'S" is not one */
    ENCODES(b, "it's", "i", "t", "'s");
    ENCODES(b, "'S", "'", "S");
    /* a space run before a word leaves its last space to the word: "  a" is
     * " " + " a", never "  " + "a"; at the end of text the run stays whole */
    ENCODES(b, "x  a", "x", " ", " a");
    ENCODES(b, "x  ", "x", "  ");
    ENCODES(b, "x   ", "x", "  ", " ");
    /* a newline before a word is its own piece */
    ENCODES(b, "\na", "\n", "a");
    /* letters and numbers are separate runs: "a12" never merges 1 with a */
    ENCODES(b, "a12", "a", "12");
    ENCODES(b, " 12", " ", "12");
    /* an "other" run keeps a leading space and crosses quotes */
    ENCODES(b, " \"\\", " ", "\"\\");
    ct_bpe_free(b);
}

static void test_round_trip(void)
{
    struct ct_bpe *b = NULL;
    CU_ASSERT_EQUAL_FATAL(ct_bpe_load(&b, g_dir), 0);
    uint64_t x = 7; /* a fixed LCG: the same texts every run */
#define NEXT() ((uint32_t)((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 33))
    static const char *const alpha[] = {"a", " ", "t", "h", "e", "'", "s", "\n", "1", "\xc3\xa9",
                                        "\xf0\x9f\x98\x80", "\xff", "\xc3", "\t", "\r\n", "\xe2\x80\xa8"};
    for (int trial = 0; trial < 200; trial++) {
        char text[512];
        size_t n = 0;
        int len = (int)(NEXT() % 64);
        for (int i = 0; i < len; i++) {
            const char *piece = alpha[NEXT() % (sizeof alpha / sizeof *alpha)];
            memcpy(text + n, piece, strlen(piece));
            n += strlen(piece);
        }
        struct ct_bpe_ids ids = {0};
        char *back = NULL;
        size_t back_len = 0;
        CU_ASSERT_EQUAL(ct_bpe_encode(b, text, n, &ids), 0);
        CU_ASSERT_EQUAL(ct_bpe_decode(b, ids.v, ids.n, &back, &back_len), 0);
        CU_ASSERT(back && back_len == n && memcmp(back, text, n) == 0);
        free(back);
        ct_bpe_ids_free(&ids);
    }
#undef NEXT
    uint16_t bad = (uint16_t)(EOT + 1);
    char *out = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL(ct_bpe_decode(b, &bad, 1, &out, &n), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "id 269 is not in the vocabulary"));
    ct_bpe_free(b);
}

/* The shard: EOT before each document, then its ids. */
static void test_tokenize(void)
{
    const char *a = ct_test_path(g_dir, "a.txt");
    char pa[512], pb[512], shard[512];
    snprintf(pa, sizeof pa, "%s", a);
    CU_ASSERT_EQUAL_FATAL(write_text("a.txt", " the"), 0);
    snprintf(pb, sizeof pb, "%s", ct_test_path(g_dir, "b.txt"));
    CU_ASSERT_EQUAL_FATAL(write_text("b.txt", "aa"), 0);
    snprintf(shard, sizeof shard, "%s", ct_test_path(g_dir, "s.bin"));
    const char *texts[] = {pa, pb};
    uint64_t n = 0;
    int vocab = 0;
    uint8_t d[32];
    CU_ASSERT_EQUAL_FATAL(ct_tokenize_gpt2(g_dir, texts, 2, shard, &n, &vocab, d), 0);
    CU_ASSERT_EQUAL(n, 4);
    CU_ASSERT_EQUAL(vocab, EOT + 1);
    size_t len = 0;
    uint8_t *f = ct_test_read_file(shard, &len);
    CU_ASSERT_FATAL(f && len == CT_TOKENS_HEADER_BYTES + 8);
    uint16_t got[4];
    memcpy(got, f + CT_TOKENS_HEADER_BYTES, sizeof got);
    CU_ASSERT(got[0] == EOT && got[1] == id_of(" the") && got[2] == EOT && got[3] == id_of("aa"));
    free(f);
}

/* A vocabulary with one thing wrong: refused, naming the file and what. */
static void refused(const char *enc, const char *mer, const char *file, const char *what)
{
    char d[300];
    snprintf(d, sizeof d, "%s/bad", g_dir);
    ct_test_rmtree(d);
    CU_ASSERT_EQUAL_FATAL(mkdir(d, 0755), 0);
    if (enc)
        ct_test_write_file(ct_test_path(d, "encoder.json"), enc, strlen(enc));
    if (mer)
        ct_test_write_file(ct_test_path(d, "vocab.bpe"), mer, strlen(mer));
    struct ct_bpe *b = (struct ct_bpe *)1;
    int rc = ct_bpe_load(&b, d);
    CU_ASSERT(rc < 0);
    CU_ASSERT_PTR_NULL(b);
    const char *msg = ct_error_message();
    if (!strstr(msg, file) || !strstr(msg, what))
        printf("\n  got '%s', want '%s' and '%s'\n", msg, file, what);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, file));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, what));
}

static void test_bad_vocabularies(void)
{
    char good_enc[65536], good_mer[8192];
    size_t n;
    uint8_t *e = ct_test_read_file(ct_test_path(g_dir, "encoder.json"), &n);
    CU_ASSERT_FATAL(e && n < sizeof good_enc);
    memcpy(good_enc, e, n);
    good_enc[n] = '\0';
    free(e);
    e = ct_test_read_file(ct_test_path(g_dir, "vocab.bpe"), &n);
    CU_ASSERT_FATAL(e && n < sizeof good_mer);
    memcpy(good_mer, e, n);
    good_mer[n] = '\0';
    free(e);
    refused(NULL, good_mer, "encoder.json", "cannot open");
    refused(good_enc, NULL, "vocab.bpe", "cannot open");
    refused("[1, 2]", good_mer, "encoder.json", "expected a JSON object");
    refused("{\"a\": 0", good_mer, "encoder.json", "expected ',' or '}'");
    refused("{\"a\": 0, \"a\": 1}", good_mer, "encoder.json", "a token given twice");
    refused("{\"a\": 0, \"b\": 0}", good_mer, "encoder.json", "id 0 given twice");
    refused("{\"a\": 1}", good_mer, "encoder.json", "no token has id 0");
    refused("{\"a\": 70000}", good_mer, "encoder.json", "from 0 to 65535");
    refused("{\"\\u0000\": 0}", good_mer, "encoder.json", "outside GPT-2's byte alphabet");
    refused("{\"\\ud800\": 0}", good_mer, "encoder.json", "lone high surrogate");
    refused("{\"\xff\": 0}", good_mer, "encoder.json", "not UTF-8");
    refused("{\"a\": 0}", good_mer, "encoder.json", "byte 0x00 has no token of its own");
    refused(good_enc, "#version: 0.2\nt\n", "vocab.bpe", "line 2: a merge is two tokens");
    refused(good_enc, "#version: 0.2\nq z\n", "vocab.bpe", "line 2: the merge of 'q z' is not in");
    refused(good_enc, "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 t\n", "vocab.bpe", "line 3: the merge '");
    refused(good_enc, "#version: 0.2\nab c\n", "vocab.bpe", "line 2: 'ab' is not in encoder.json");
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    static const struct ct_test_case cases[] = {
        {"load", test_load},
        {"merges by rank, pre-tokenized pieces", test_merges_and_pieces},
        {"decode(encode(x)) == x", test_round_trip},
        {"tokenize: EOT before each document", test_tokenize},
        {"bad vocabularies refused by name", test_bad_vocabularies},
        {NULL, NULL},
    };
    int rc = ct_test_run("bpe", cases);
    ct_test_rmtree(g_dir);
    return rc;
}
