/* GPT-2's byte-level BPE (data/bpe.h): the files' parsers, the
 * pre-tokenizer and the merges. Tokens are handled as ids throughout: every
 * merge's parts and result are vocabulary tokens (checked at load), so a
 * piece starts as one-byte token ids and each merge replaces a pair of ids
 * by one. */
#include "data/bpe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/path.h"

struct bpe_range {
    uint32_t lo, hi;
};
#include "data/bpe_unicode.inc"

enum { BPE_MAX_VOCAB = 65536, TOKEN_SLOTS = 1 << 17, MERGE_SLOTS = 1 << 17 };

struct merge_slot {
    uint32_t key;  /* (a << 16 | b) + 1; 0: empty */
    uint32_t rank;
    uint16_t result;
};

struct ct_bpe {
    int n;                           /* vocabulary size */
    int eot;                         /* <|endoftext|>, or -1 */
    uint32_t *off, *len;             /* token id -> its bytes in pool */
    char *pool;
    size_t pool_len, pool_cap;
    int32_t *tok_slots;              /* bytes -> id (open addressing; -1 empty) */
    struct merge_slot *merges;       /* (a, b) -> rank and result */
    uint16_t byte_id[256];           /* the one-byte tokens */
    uint8_t digest[CT_SHA256_LEN];
};

/* ------------------------------------------------------------ bytes <-> the alphabet */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others for 256, 257, ... in byte order. */
static int byte_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae); }

/* The byte a code point of the alphabet stands for, -1 when none. */
static int alphabet_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_printable((int)cp) ? (int)cp : -1;
    /* the 68 others in order: 0x00-0x20, 0x7f-0xa0, 0xad */
    const uint32_t n = cp - 256;
    return n < 33 ? (int)n : n < 67 ? 0x7f + (int)(n - 33) : n == 67 ? 0xad : -1;
}

/* One UTF-8 code point at s[0..len): its length, or 0 when s does not start
 * with a valid, shortest-form one. */
static int utf8_next(const unsigned char *s, size_t len, uint32_t *cp)
{
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || (size_t)n > len)
        return 0;
    uint32_t c = n == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> n));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

/* ------------------------------------------------------------ tables */

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int find_token(const struct ct_bpe *b, const char *s, size_t n)
{
    for (uint32_t i = hash_bytes(s, n) & (TOKEN_SLOTS - 1);; i = (i + 1) & (TOKEN_SLOTS - 1)) {
        int32_t id = b->tok_slots[i];
        if (id < 0)
            return -1;
        if (b->len[id] == n && memcmp(b->pool + b->off[id], s, n) == 0)
            return id;
    }
}

static const struct merge_slot *find_merge(const struct ct_bpe *b, uint32_t a, uint32_t c)
{
    const uint32_t key = (a << 16 | c) + 1;
    for (uint32_t i = (key * 2654435761u) & (MERGE_SLOTS - 1);; i = (i + 1) & (MERGE_SLOTS - 1)) {
        if (b->merges[i].key == key)
            return &b->merges[i];
        if (b->merges[i].key == 0)
            return NULL;
    }
}

static struct merge_slot *merge_slot_for(struct ct_bpe *b, uint32_t key)
{
    uint32_t i = (key * 2654435761u) & (MERGE_SLOTS - 1);
    while (b->merges[i].key != 0 && b->merges[i].key != key)
        i = (i + 1) & (MERGE_SLOTS - 1);
    return &b->merges[i];
}

/* ------------------------------------------------------------ encoder.json */

struct src {
    const char *path;
    const unsigned char *s;
    size_t n, i;
};

static void skip_ws(struct src *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\r' || p->s[p->i] == '\t'))
        p->i++;
}

static int bad(const struct src *p, const char *what)
{
    return ct_error_set(CT_EFORMAT, "%s: byte %zu: %s", p->path, p->i, what);
}

static int hex4(struct src *p, uint32_t *v)
{
    *v = 0;
    for (int k = 0; k < 4; k++, p->i++) {
        int c = p->i < p->n ? p->s[p->i] : -1, d = c >= '0' && c <= '9' ? c - '0'
                                                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return bad(p, "a \\u escape needs four hex digits");
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* One code point of a JSON string (after its opening quote); 1 at the
 * closing quote. */
static int string_cp(struct src *p, uint32_t *cp)
{
    if (p->i >= p->n)
        return bad(p, "the file ends inside a string");
    unsigned char c = p->s[p->i];
    if (c == '"') {
        p->i++;
        return 1;
    }
    if (c < 0x20)
        return bad(p, "a control character inside a string");
    if (c != '\\') {
        int k = utf8_next(p->s + p->i, p->n - p->i, cp);
        if (k == 0)
            return bad(p, "not UTF-8");
        p->i += (size_t)k;
        return 0;
    }
    if (++p->i >= p->n)
        return bad(p, "the file ends inside an escape");
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *e = strchr(from, p->s[p->i]);
    if (e && *e) {
        *cp = (unsigned char)to[e - from];
        p->i++;
        return 0;
    }
    if (p->s[p->i++] != 'u')
        return bad(p, "an unknown escape");
    int rc = hex4(p, cp);
    if (rc == 0 && *cp >= 0xd800 && *cp <= 0xdbff) { /* a surrogate pair */
        uint32_t lo;
        if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return bad(p, "a lone high surrogate");
        p->i += 2;
        if ((rc = hex4(p, &lo)) == 0 && (lo < 0xdc00 || lo > 0xdfff))
            return bad(p, "a high surrogate without its low one");
        *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    return rc;
}

static int pool_put(struct ct_bpe *b, const char *s, size_t n)
{
    if (b->pool_len + n > b->pool_cap) {
        size_t cap = b->pool_cap ? 2 * b->pool_cap : 1 << 20;
        while (cap < b->pool_len + n)
            cap *= 2;
        char *p = realloc(b->pool, cap);
        if (!p)
            return ct_error_set(CT_ENOMEM, "out of memory");
        b->pool = p;
        b->pool_cap = cap;
    }
    memcpy(b->pool + b->pool_len, s, n);
    b->pool_len += n;
    return 0;
}

/* One "token": id pair; the token's characters stand for bytes. */
static int read_entry(struct ct_bpe *b, struct src *p)
{
    char bytes[1024];
    size_t nb = 0;
    uint32_t cp;
    int rc;
    const size_t at = p->i;
    if (p->i >= p->n || p->s[p->i++] != '"')
        return bad(p, "expected a token string");
    while ((rc = string_cp(p, &cp)) == 0) {
        int byte = alphabet_byte(cp);
        if (byte < 0 || nb == sizeof bytes)
            return ct_error_set(CT_EFORMAT, "%s: byte %zu: %s", p->path, at,
                                byte < 0 ? "a token with a character outside GPT-2's byte alphabet"
                                         : "a token longer than 1024 bytes");
        bytes[nb++] = (char)byte;
    }
    if (rc < 0)
        return rc;
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i++] != ':')
        return bad(p, "expected ':' after a token");
    skip_ws(p);
    long id = 0;
    size_t d0 = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9' && id < BPE_MAX_VOCAB)
        id = id * 10 + (p->s[p->i++] - '0');
    if (p->i == d0 || id >= BPE_MAX_VOCAB)
        return bad(p, "a token's id must be an integer from 0 to 65535");
    if (nb == 0)
        return ct_error_set(CT_EFORMAT, "%s: byte %zu: an empty token", p->path, at);
    if (b->len[id] != UINT32_MAX)
        return ct_error_set(CT_EFORMAT, "%s: byte %zu: id %ld given twice", p->path, at, id);
    if (find_token(b, bytes, nb) >= 0)
        return ct_error_set(CT_EFORMAT, "%s: byte %zu: a token given twice (ids %d and %ld)", p->path,
                            at, find_token(b, bytes, nb), id);
    b->off[id] = (uint32_t)b->pool_len;
    b->len[id] = (uint32_t)nb;
    if ((rc = pool_put(b, bytes, nb)) < 0)
        return rc;
    uint32_t i = hash_bytes(bytes, nb) & (TOKEN_SLOTS - 1);
    while (b->tok_slots[i] >= 0)
        i = (i + 1) & (TOKEN_SLOTS - 1);
    b->tok_slots[i] = (int32_t)id;
    if (id + 1 > b->n)
        b->n = (int)id + 1;
    return 0;
}

static int parse_encoder(struct ct_bpe *b, struct src *p)
{
    skip_ws(p);
    if (p->i >= p->n || p->s[p->i++] != '{')
        return bad(p, "expected a JSON object of token: id");
    skip_ws(p);
    int rc = 0;
    if (p->i < p->n && p->s[p->i] == '}')
        p->i++;
    else
        for (;;) {
            if ((rc = read_entry(b, p)) < 0)
                return rc;
            skip_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                skip_ws(p);
                continue;
            }
            if (p->i < p->n && p->s[p->i] == '}') {
                p->i++;
                break;
            }
            return bad(p, "expected ',' or '}'");
        }
    skip_ws(p);
    if (p->i != p->n)
        return bad(p, "text after the object");
    for (int id = 0; id < b->n; id++)
        if (b->len[id] == UINT32_MAX)
            return ct_error_set(CT_EFORMAT, "%s: no token has id %d (ids must run from 0 to %d)",
                                p->path, id, b->n - 1);
    for (int c = 0; c < 256; c++) {
        char one = (char)c;
        int id = find_token(b, &one, 1);
        if (id < 0)
            return ct_error_set(CT_EFORMAT, "%s: byte 0x%02x has no token of its own", p->path, c);
        b->byte_id[c] = (uint16_t)id;
    }
    b->eot = find_token(b, CT_BPE_EOT_NAME, strlen(CT_BPE_EOT_NAME));
    return 0;
}

/* ------------------------------------------------------------ vocab.bpe */

/* One field of a merge line (code points of the alphabet) as a token id. */
static int merge_part(const struct ct_bpe *b, const char *path, int line, const unsigned char *s,
                      size_t n, char *bytes, size_t *nb)
{
    *nb = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = utf8_next(s + i, n - i, &cp), byte = k ? alphabet_byte(cp) : -1;
        if (byte < 0 || *nb == 1024)
            return ct_error_set(CT_EFORMAT, "%s: line %d: %s", path, line,
                                byte < 0 ? "a character outside GPT-2's byte alphabet" : "a part over 1024 bytes");
        bytes[(*nb)++] = (char)byte;
        i += (size_t)k;
    }
    int id = find_token(b, bytes, *nb);
    if (id < 0)
        return ct_error_set(CT_EFORMAT, "%s: line %d: '%.*s' is not in %s", path, line, (int)n, s,
                            CT_BPE_ENCODER_FILE);
    return id;
}

static int merge_line(struct ct_bpe *b, const char *path, int line, const unsigned char *s, size_t n,
                      uint32_t rank)
{
    const unsigned char *sp = memchr(s, ' ', n);
    if (!sp || sp == s || sp + 1 == s + n || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
        return ct_error_set(CT_EFORMAT, "%s: line %d: a merge is two tokens separated by one space",
                            path, line);
    char l[2048];
    size_t nl, nr;
    int a = merge_part(b, path, line, s, (size_t)(sp - s), l, &nl);
    if (a < 0)
        return a;
    int c = merge_part(b, path, line, sp + 1, (size_t)(s + n - sp - 1), l + nl, &nr);
    if (c < 0)
        return c;
    int r = find_token(b, l, nl + nr);
    if (r < 0)
        return ct_error_set(CT_EFORMAT, "%s: line %d: the merge of '%.*s' is not in %s", path, line,
                            (int)n, s, CT_BPE_ENCODER_FILE);
    struct merge_slot *m = merge_slot_for(b, ((uint32_t)a << 16 | (uint32_t)c) + 1);
    if (m->key != 0)
        return ct_error_set(CT_EFORMAT, "%s: line %d: the merge '%.*s' given twice", path, line, (int)n, s);
    *m = (struct merge_slot){((uint32_t)a << 16 | (uint32_t)c) + 1, rank, (uint16_t)r};
    return 0;
}

static int parse_merges(struct ct_bpe *b, const char *path, const unsigned char *s, size_t n)
{
    uint32_t rank = 0;
    int line = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n, len = e - i;
        line++;
        if (len && s[i + len - 1] == '\r')
            len--;
        if (len && !(line == 1 && s[i] == '#')) { /* "#version: 0.2" */
            if (rank >= MERGE_SLOTS / 2)
                return ct_error_set(CT_EFORMAT, "%s: over %d merges", path, MERGE_SLOTS / 2);
            int rc = merge_line(b, path, line, s + i, len, rank++);
            if (rc < 0)
                return rc;
        }
        i = e + 1;
    }
    return 0;
}

/* ------------------------------------------------------------ load */

static int read_all(const char *path, unsigned char **out, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 20, len = 0, k;
    unsigned char *buf = malloc(cap);
    while (buf && (k = fread(buf + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            unsigned char *p = cap < ((size_t)1 << 30) ? realloc(buf, cap * 2) : NULL;
            if (!p) {
                free(buf);
                buf = NULL;
            }
            buf = p;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (!buf)
        return ct_error_set(CT_ENOMEM, "%s: out of memory (or over 1 GiB)", path);
    if (err) {
        free(buf);
        return ct_error_set(CT_EIO, "%s: read error", path);
    }
    *out = buf;
    *n = len;
    return 0;
}

static int load_files(struct ct_bpe *b, const char *dir)
{
    char enc[CT_PATH_MAX], mer[CT_PATH_MAX];
    unsigned char *es = NULL, *ms = NULL;
    size_t en = 0, mn = 0;
    int rc = ct_path_join(enc, sizeof enc, dir, CT_BPE_ENCODER_FILE);
    if (rc == 0)
        rc = ct_path_join(mer, sizeof mer, dir, CT_BPE_MERGES_FILE);
    if (rc == 0)
        rc = read_all(enc, &es, &en);
    if (rc == 0)
        rc = read_all(mer, &ms, &mn);
    if (rc == 0) {
        struct src p = {enc, es, en, 0};
        rc = parse_encoder(b, &p);
    }
    if (rc == 0)
        rc = parse_merges(b, mer, ms, mn);
    struct ct_sha256 h;
    if (rc == 0 && (rc = ct_sha256_init(&h)) == 0) {
        ct_sha256_update(&h, es, en);
        ct_sha256_update(&h, ms, mn);
        rc = ct_sha256_final(&h, b->digest);
    }
    free(es);
    free(ms);
    return rc;
}

int ct_bpe_load(struct ct_bpe **out, const char *dir)
{
    *out = NULL;
    struct ct_bpe *b = calloc(1, sizeof *b);
    if (b) {
        b->off = malloc(BPE_MAX_VOCAB * sizeof *b->off);
        b->len = malloc(BPE_MAX_VOCAB * sizeof *b->len);
        b->tok_slots = malloc(TOKEN_SLOTS * sizeof *b->tok_slots);
        b->merges = calloc(MERGE_SLOTS, sizeof *b->merges);
    }
    if (!b || !b->off || !b->len || !b->tok_slots || !b->merges) {
        ct_bpe_free(b);
        return ct_error_set(CT_ENOMEM, "%s: out of memory for the BPE tables", dir);
    }
    memset(b->len, 0xff, BPE_MAX_VOCAB * sizeof *b->len);
    memset(b->tok_slots, 0xff, TOKEN_SLOTS * sizeof *b->tok_slots);
    int rc = load_files(b, dir);
    if (rc < 0) {
        ct_bpe_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void ct_bpe_free(struct ct_bpe *b)
{
    if (!b)
        return;
    free(b->off);
    free(b->len);
    free(b->pool);
    free(b->tok_slots);
    free(b->merges);
    free(b);
}

int ct_bpe_vocab(const struct ct_bpe *b) { return b->n; }
int ct_bpe_eot(const struct ct_bpe *b) { return b->eot; }
const uint8_t *ct_bpe_digest(const struct ct_bpe *b) { return b->digest; }

/* ------------------------------------------------------------ encode, decode */

enum cls { C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static int in_ranges(const struct bpe_range *r, int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static enum cls classify(uint32_t cp)
{
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
    if (in_ranges(bpe_letter, N_OF(bpe_letter), cp))
        return C_LETTER;
    if (in_ranges(bpe_number, N_OF(bpe_number), cp))
        return C_NUMBER;
    if (in_ranges(bpe_space, N_OF(bpe_space), cp))
        return C_SPACE;
#undef N_OF
    return C_OTHER;
}

int ct_bpe_ids_push(struct ct_bpe_ids *ids, uint16_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 4096;
        uint16_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return ct_error_set(CT_ENOMEM, "out of memory for token ids");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void ct_bpe_ids_free(struct ct_bpe_ids *ids)
{
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

/* One pre-tokenized piece's bytes through the merges, appended to ids.
 * sym: scratch of at least n entries. */
static int bpe_piece(const struct ct_bpe *b, const unsigned char *s, size_t n, uint16_t *sym,
                     struct ct_bpe_ids *ids)
{
    for (size_t i = 0; i < n; i++)
        sym[i] = b->byte_id[s[i]];
    size_t k = n;
    while (k > 1) {
        const struct merge_slot *best = NULL;
        for (size_t i = 0; i + 1 < k; i++) {
            const struct merge_slot *m = find_merge(b, sym[i], sym[i + 1]);
            if (m && (!best || m->rank < best->rank))
                best = m;
        }
        if (!best)
            break;
        const uint16_t x = (uint16_t)((best->key - 1) >> 16), y = (uint16_t)((best->key - 1) & 0xffff);
        size_t w = 0;
        for (size_t i = 0; i < k; i++) {
            if (i + 1 < k && sym[i] == x && sym[i + 1] == y) {
                sym[w++] = best->result;
                i++;
            } else {
                sym[w++] = sym[i];
            }
        }
        k = w;
    }
    for (size_t i = 0; i < k; i++) {
        int rc = ct_bpe_ids_push(ids, sym[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* Code points of text with their byte offsets and classes; bytes that are
 * not UTF-8 are one "other" code point each. */
struct cps {
    size_t n;
    uint32_t *cp, *at;   /* at[n] = len */
    uint8_t *cls;
};

static int decode_text(const unsigned char *s, size_t len, struct cps *c)
{
    c->cp = malloc((len + 1) * sizeof *c->cp);
    c->at = malloc((len + 1) * sizeof *c->at);
    c->cls = malloc(len + 1);
    if (!c->cp || !c->at || !c->cls)
        return ct_error_set(CT_ENOMEM, "out of memory for %zu bytes of text", len);
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int k = utf8_next(s + i, len - i, &cp);
        c->at[n] = (uint32_t)i;
        c->cp[n] = k ? cp : 0xfffffffu;
        c->cls[n] = (uint8_t)(k ? classify(cp) : C_OTHER);
        n++;
        i += k ? (size_t)k : 1;
    }
    c->at[n] = (uint32_t)len;
    c->n = n;
    return 0;
}

/* The end (code point index) of GPT-2's expression's match at i. */
static size_t piece_end(const struct cps *c, size_t i)
{
    const size_t n = c->n;
    const uint32_t *cp = c->cp;
    const uint8_t *cl = c->cls;
    if (cp[i] == '\'' && i + 1 < n) { /* 's 't 'm 'd 're 've 'll */
        uint32_t a = cp[i + 1], b2 = i + 2 < n ? cp[i + 2] : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return i + 2;
        if ((a == 'r' && b2 == 'e') || (a == 'v' && b2 == 'e') || (a == 'l' && b2 == 'l'))
            return i + 3;
    }
    size_t j = i;
    int run = cl[i];
    if (cp[i] == ' ' && i + 1 < n && cl[i + 1] != C_SPACE) { /* " ?" before a letter, number or other run */
        run = cl[i + 1];
        j = i + 1;
    }
    if (run != C_SPACE) {
        while (j < n && cl[j] == run)
            j++;
        return j;
    }
    while (j < n && cl[j] == C_SPACE)
        j++;
    /* \s+(?!\S): a run before text leaves its last space to the text */
    return j == n || j - i < 2 ? j : j - 1;
}

int ct_bpe_encode(const struct ct_bpe *b, const char *text, size_t len, struct ct_bpe_ids *ids)
{
    if (len > UINT32_MAX - 1)
        return ct_error_set(CT_EINVAL, "a text of %zu bytes: encode it in parts under 4 GiB", len);
    const unsigned char *s = (const unsigned char *)text;
    struct cps c = {0};
    int rc = decode_text(s, len, &c);
    uint16_t *sym = rc == 0 ? malloc((len + 1) * sizeof *sym) : NULL;
    if (rc == 0 && !sym)
        rc = ct_error_set(CT_ENOMEM, "out of memory for %zu bytes of text", len);
    for (size_t i = 0; rc == 0 && i < c.n;) {
        size_t e = piece_end(&c, i);
        rc = bpe_piece(b, s + c.at[i], c.at[e] - c.at[i], sym, ids);
        i = e;
    }
    free(sym);
    free(c.cp);
    free(c.at);
    free(c.cls);
    return rc;
}

const char *ct_bpe_token(const struct ct_bpe *b, int id, size_t *len)
{
    if (id < 0 || id >= b->n)
        return NULL;
    *len = b->len[id];
    return b->pool + b->off[id];
}

int ct_bpe_decode(const struct ct_bpe *b, const uint16_t *ids, size_t n, char **out, size_t *len)
{
    size_t total = 0, k;
    for (size_t i = 0; i < n; i++) {
        if (!ct_bpe_token(b, ids[i], &k))
            return ct_error_set(CT_EINVAL, "token %zu: id %u is not in the vocabulary (%d tokens)", i,
                                (unsigned)ids[i], b->n);
        total += k;
    }
    char *p = malloc(total + 1);
    if (!p)
        return ct_error_set(CT_ENOMEM, "out of memory for %zu decoded bytes", total);
    total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t = ct_bpe_token(b, ids[i], &k);
        memcpy(p + total, t, k);
        total += k;
    }
    p[total] = '\0';
    *out = p;
    *len = total;
    return 0;
}
