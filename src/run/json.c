/* The JSON reader of the run's records (see json.h); the writer is
 * json_write.c.
 *
 * The reader is a recursive-descent parser bounded by max_depth. Nodes and
 * strings go into an arena owned by the document, freed in one call; while a
 * container is open its members wait on one scratch stack shared by all
 * levels (an inner container always closes before its parent takes its next
 * member), and are copied into the arena, exactly sized, when it closes.
 */
#include "run/json.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ================================================================ arena */

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    alignas(max_align_t) unsigned char data[];
};

static void *arena_alloc(void **arena, size_t size)
{
    const size_t align = alignof(max_align_t);
    size = (size + align - 1) / align * align;
    struct arena_block *b = *arena;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 16384 ? size : 16384;
        struct arena_block *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        *arena = b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    return p;
}

static void arena_free(void *arena)
{
    for (struct arena_block *b = arena, *next; b; b = next) {
        next = b->next;
        free(b);
    }
}

/* ================================================================ parser */

struct member {
    const char *key; /* NULL inside an array */
    struct ct_json_value value;
};

struct parser {
    const char *s;
    size_t len, pos;
    int depth, max_depth;
    void *arena;
    struct member *stack; /* members of the open containers */
    size_t top, cap;
    char *text; /* a string or number being decoded */
    size_t text_len, text_cap;
};

struct ct_json_parse_params ct_json_parse_default_params(void)
{
    return (struct ct_json_parse_params){.max_bytes = (size_t)16 << 20, .max_depth = 32};
}

/* "'x'", "byte 0x01" or "end of input": what the parser found at pos. */
static const char *found_at(const struct parser *p, size_t pos, char buf[16])
{
    if (pos >= p->len)
        return "end of input";
    unsigned char c = (unsigned char)p->s[pos];
    if (c >= 0x20 && c < 0x7f)
        snprintf(buf, 16, "'%c'", c);
    else
        snprintf(buf, 16, "byte 0x%02x", c);
    return buf;
}

static int perr(const struct parser *p, size_t pos, const char *expected)
{
    char b[16];
    return ct_error_set(CT_EFORMAT, "offset %zu: expected %s, found %s", pos, expected,
                        found_at(p, pos, b));
}

static int nomem(void) { return ct_error_set(CT_ENOMEM, "JSON parser: out of memory"); }

static void skip_ws(struct parser *p)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int text_put(struct parser *p, const char *b, size_t n)
{
    if (p->text_len + n + 1 > p->text_cap) {
        size_t cap = p->text_cap ? p->text_cap : 128;
        while (p->text_len + n + 1 > cap)
            cap *= 2;
        char *t = realloc(p->text, cap);
        if (!t)
            return nomem();
        p->text = t;
        p->text_cap = cap;
    }
    memcpy(p->text + p->text_len, b, n);
    p->text_len += n;
    p->text[p->text_len] = '\0';
    return 0;
}

static int hex4(const struct parser *p, size_t at, unsigned *out)
{
    unsigned v = 0;
    for (size_t i = 0; i < 4; i++) {
        if (at + i >= p->len)
            return perr(p, at + i, "four hex digits after \\u");
        char c = p->s[at + i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return perr(p, at + i, "four hex digits after \\u");
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

static int put_utf8(struct parser *p, unsigned cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return text_put(p, b, n);
}

/* A string starting at the quote under pos, decoded into p->text. */
static int parse_string_text(struct parser *p)
{
    size_t start = p->pos++;
    p->text_len = 0;
    int rc = text_put(p, "", 0);
    while (rc == 0) {
        size_t run = p->pos;
        while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
               (unsigned char)p->s[p->pos] >= 0x20)
            p->pos++;
        if ((rc = text_put(p, p->s + run, p->pos - run)) < 0)
            return rc;
        if (p->pos >= p->len)
            return ct_error_set(CT_EFORMAT, "offset %zu: unterminated string (opened at offset %zu)",
                                p->pos, start);
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->pos++;
            return 0;
        }
        if (c < 0x20)
            return ct_error_set(CT_EFORMAT, "offset %zu: control character 0x%02x inside a string "
                                "(it must be escaped)", p->pos, c);
        /* A backslash. */
        size_t esc = p->pos++;
        if (p->pos >= p->len)
            return perr(p, p->pos, "an escape after '\\'");
        char e = p->s[p->pos++];
        static const char names[] = "\"\\/bfnrt", bytes[] = "\"\\/\b\f\n\r\t";
        const char *simple = e != '\0' ? strchr(names, e) : NULL;
        if (simple) {
            rc = text_put(p, &bytes[simple - names], 1);
            continue;
        }
        if (e != 'u')
            return ct_error_set(CT_EFORMAT, "offset %zu: invalid escape '\\%c' (valid: \\\" \\\\ \\/ "
                                "\\b \\f \\n \\r \\t \\uXXXX)", esc, e >= 0x20 && e < 0x7f ? e : '?');
        unsigned cp;
        if ((rc = hex4(p, p->pos, &cp)) < 0)
            return rc;
        p->pos += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return ct_error_set(CT_EFORMAT, "offset %zu: \\u%04x is a low surrogate without a "
                                "high surrogate before it", esc, cp);
        if (cp >= 0xd800 && cp <= 0xdbff) {
            unsigned lo;
            if (p->pos + 1 >= p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                hex4(p, p->pos + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                return ct_error_set(CT_EFORMAT, "offset %zu: \\u%04x is a high surrogate not "
                                    "followed by a low surrogate \\udc00-\\udfff", esc, cp);
            p->pos += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        rc = put_utf8(p, cp);
    }
    return rc;
}

static char *arena_strdup(struct parser *p, const char *s, size_t n)
{
    char *d = arena_alloc(&p->arena, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int parse_number(struct parser *p, struct ct_json_value *v)
{
    size_t start = p->pos;
    int integral = 1;
    if (p->s[p->pos] == '-')
        p->pos++;
#define DIGIT(i) ((i) < p->len && p->s[i] >= '0' && p->s[i] <= '9')
    if (!DIGIT(p->pos))
        return perr(p, p->pos, "a digit");
    if (p->s[p->pos] == '0')
        p->pos++;
    else
        while (DIGIT(p->pos))
            p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (!DIGIT(p->pos))
            return perr(p, p->pos, "a digit after the decimal point");
        while (DIGIT(p->pos))
            p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!DIGIT(p->pos))
            return perr(p, p->pos, "a digit in the exponent");
        while (DIGIT(p->pos))
            p->pos++;
    }
#undef DIGIT
    /* strtod needs a terminated copy: the input is not NUL-terminated. */
    p->text_len = 0;
    int rc = text_put(p, p->s + start, p->pos - start);
    if (rc < 0)
        return rc;
    v->type = CT_JSON_NUMBER;
    v->number = strtod(p->text, NULL);
    if (isinf(v->number))
        return ct_error_set(CT_EFORMAT, "offset %zu: number %.40s is beyond the range of a double",
                            start, p->text);
    if (integral) {
        errno = 0;
        long long i = strtoll(p->text, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->integer = (int64_t)i;
        }
    }
    return 0;
}

static int parse_value(struct parser *p, struct ct_json_value *v);

static int push(struct parser *p, const char *key, const struct ct_json_value *v)
{
    if (p->top == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct member *s = realloc(p->stack, cap * sizeof *s);
        if (!s)
            return nomem();
        p->stack = s;
        p->cap = cap;
    }
    p->stack[p->top].key = key;
    p->stack[p->top].value = *v;
    p->top++;
    return 0;
}

/* Move the members pushed since `base` into the arena as v's children. */
static int close_container(struct parser *p, struct ct_json_value *v, size_t base)
{
    size_t n = p->top - base;
    v->n = n;
    if (n > 0) {
        struct ct_json_value *items = arena_alloc(&p->arena, n * sizeof *items);
        const char **keys = v->type == CT_JSON_OBJECT ? arena_alloc(&p->arena, n * sizeof *keys) : NULL;
        if (!items || (v->type == CT_JSON_OBJECT && !keys))
            return nomem();
        for (size_t i = 0; i < n; i++) {
            items[i] = p->stack[base + i].value;
            if (keys)
                keys[i] = p->stack[base + i].key;
        }
        v->items = items;
        v->keys = keys;
    }
    p->top = base;
    p->depth--;
    p->pos++; /* the closing bracket */
    return 0;
}

static int parse_container(struct parser *p, struct ct_json_value *v, int object)
{
    if (p->depth >= p->max_depth)
        return ct_error_set(CT_EFORMAT, "offset %zu: nesting deeper than %d levels", p->pos,
                            p->max_depth);
    p->depth++;
    v->type = object ? CT_JSON_OBJECT : CT_JSON_ARRAY;
    size_t base = p->top;
    char close = object ? '}' : ']';
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close)
        return close_container(p, v, base);
    for (;;) {
        const char *key = NULL;
        int rc;
        skip_ws(p);
        if (object) {
            size_t at = p->pos;
            if (p->pos >= p->len || p->s[p->pos] != '"')
                return perr(p, p->pos, "a string key");
            if ((rc = parse_string_text(p)) < 0)
                return rc;
            for (size_t i = base; i < p->top; i++)
                if (strcmp(p->stack[i].key, p->text) == 0)
                    return ct_error_set(CT_EFORMAT, "offset %zu: duplicate key \"%.200s\"", at, p->text);
            if (!(key = arena_strdup(p, p->text, p->text_len)))
                return nomem();
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':')
                return perr(p, p->pos, "':' after the key");
            p->pos++;
        }
        struct ct_json_value item;
        if ((rc = parse_value(p, &item)) < 0 || (rc = push(p, key, &item)) < 0)
            return rc;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close)
            return close_container(p, v, base);
        return perr(p, p->pos, object ? "',' or '}'" : "',' or ']'");
    }
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return perr(p, p->pos, "a value (object, array, string, number, true, false or null)");
    p->pos += n;
    return 0;
}

static int parse_value(struct parser *p, struct ct_json_value *v)
{
    memset(v, 0, sizeof *v);
    skip_ws(p);
    v->offset = p->pos;
    if (p->pos >= p->len)
        return perr(p, p->pos, "a value");
    int rc;
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, v, 1);
    case '[': return parse_container(p, v, 0);
    case '"':
        if ((rc = parse_string_text(p)) < 0)
            return rc;
        v->type = CT_JSON_STRING;
        v->string_len = p->text_len;
        return (v->string = arena_strdup(p, p->text, p->text_len)) ? 0 : nomem();
    case 't':
        v->type = CT_JSON_BOOL;
        v->boolean = 1;
        return literal(p, "true");
    case 'f':
        v->type = CT_JSON_BOOL;
        return literal(p, "false");
    case 'n':
        v->type = CT_JSON_NULL;
        return literal(p, "null");
    default:
        if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
            return parse_number(p, v);
        return perr(p, p->pos, "a value (object, array, string, number, true, false or null)");
    }
}

int ct_json_parse(struct ct_json_doc *d, const char *text, size_t len,
                  const struct ct_json_parse_params *params)
{
    memset(d, 0, sizeof *d);
    struct ct_json_parse_params pp = params ? *params : ct_json_parse_default_params();
    if (!text)
        return ct_error_set(CT_EINVAL, "ct_json_parse: NULL text");
    if (pp.max_depth < 1 || pp.max_depth > 10000)
        return ct_error_set(CT_EINVAL, "ct_json_parse: max_depth %d is outside 1..10000 (the "
                            "parser recurses once per level)", pp.max_depth);
    if (len > pp.max_bytes)
        return ct_error_set(CT_ERANGE, "JSON text of %zu bytes exceeds the limit of %zu bytes", len,
                            pp.max_bytes);
    struct parser p = {.s = text, .len = len, .max_depth = pp.max_depth};
    struct ct_json_value *root = NULL;
    int rc = 0;
    if (!(root = arena_alloc(&p.arena, sizeof *root)))
        rc = nomem();
    if (rc == 0)
        rc = parse_value(&p, root);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos < p.len) {
            char b[16];
            rc = ct_error_set(CT_EFORMAT, "offset %zu: expected the end of the input after the "
                              "value, found %s", p.pos, found_at(&p, p.pos, b));
        }
    }
    free(p.stack);
    free(p.text);
    if (rc < 0) {
        arena_free(p.arena);
        return rc;
    }
    d->root = root;
    d->arena = p.arena;
    return 0;
}

void ct_json_doc_free(struct ct_json_doc *d)
{
    arena_free(d->arena);
    d->arena = NULL;
    d->root = NULL;
}

/* ================================================================ getters */

const char *ct_json_type_name(enum ct_json_type t)
{
    static const char *const names[CT_JSON_TYPE_COUNT] = {"null", "boolean", "number", "string",
                                                          "array", "object"};
    return (unsigned)t < CT_JSON_TYPE_COUNT ? names[t] : "?";
}

const struct ct_json_value *ct_json_get(const struct ct_json_value *obj, const char *key)
{
    if (!obj || obj->type != CT_JSON_OBJECT || !key)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

const struct ct_json_value *ct_json_at(const struct ct_json_value *arr, size_t i)
{
    if (!arr || arr->type != CT_JSON_ARRAY || i >= arr->n)
        return NULL;
    return &arr->items[i];
}

/* "offset 9: key "step": expected an integer, found a string" */
static int type_error(const struct ct_json_value *v, const char *key, const char *expected)
{
    static const char *const found[CT_JSON_TYPE_COUNT] = {"null", "a boolean", "a number",
                                                          "a string", "an array", "an object"};
    const char *what = (unsigned)v->type < CT_JSON_TYPE_COUNT ? found[v->type] : "?";
    if (v->type == CT_JSON_NUMBER && !v->is_int && strcmp(expected, "an integer") == 0)
        what = "a number with a fraction or an exponent, or beyond int64";
    if (key)
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"%s\": expected %s, found %s", v->offset,
                            key, expected, what);
    return ct_error_set(CT_EFORMAT, "offset %zu: expected %s, found %s", v->offset, expected, what);
}

static int to_int64(const struct ct_json_value *v, const char *key, int64_t *out)
{
    if (v->type != CT_JSON_NUMBER || !v->is_int)
        return type_error(v, key, "an integer");
    *out = v->integer;
    return 0;
}

static int to_double(const struct ct_json_value *v, const char *key, double *out)
{
    if (v->type == CT_JSON_NULL) {
        *out = NAN;
        return 0;
    }
    if (v->type != CT_JSON_NUMBER)
        return type_error(v, key, "a number or null");
    *out = v->number;
    return 0;
}

static int to_string(const struct ct_json_value *v, const char *key, const char **out)
{
    if (v->type != CT_JSON_STRING)
        return type_error(v, key, "a string");
    *out = v->string;
    return 0;
}

static int to_bool(const struct ct_json_value *v, const char *key, int *out)
{
    if (v->type != CT_JSON_BOOL)
        return type_error(v, key, "true or false");
    *out = v->boolean;
    return 0;
}

int ct_json_as_int64(const struct ct_json_value *v, int64_t *out) { return to_int64(v, NULL, out); }
int ct_json_as_double(const struct ct_json_value *v, double *out) { return to_double(v, NULL, out); }
int ct_json_as_string(const struct ct_json_value *v, const char **out) { return to_string(v, NULL, out); }

static const struct ct_json_value *lookup(const struct ct_json_value *obj, const char *key, int *rc)
{
    *rc = 0;
    if (!obj || obj->type != CT_JSON_OBJECT) {
        *rc = ct_error_set(CT_EFORMAT, "offset %zu: expected an object holding key \"%s\", found %s",
                           obj ? obj->offset : 0, key, obj ? ct_json_type_name(obj->type) : "nothing");
        return NULL;
    }
    const struct ct_json_value *v = ct_json_get(obj, key);
    if (!v)
        *rc = ct_error_set(CT_ENOENT, "missing key \"%s\"", key);
    return v;
}

int ct_json_get_int64(const struct ct_json_value *obj, const char *key, int64_t *out)
{
    int rc;
    const struct ct_json_value *v = lookup(obj, key, &rc);
    return v ? to_int64(v, key, out) : rc;
}

int ct_json_get_int(const struct ct_json_value *obj, const char *key, int *out)
{
    int64_t x = 0;
    int rc = ct_json_get_int64(obj, key, &x);
    if (rc < 0)
        return rc;
    if (x < INT_MIN || x > INT_MAX)
        return ct_error_set(CT_ERANGE, "offset %zu: key \"%s\": %" PRId64 " does not fit an int",
                            ct_json_get(obj, key)->offset, key, x);
    *out = (int)x;
    return 0;
}

int ct_json_get_double(const struct ct_json_value *obj, const char *key, double *out)
{
    int rc;
    const struct ct_json_value *v = lookup(obj, key, &rc);
    return v ? to_double(v, key, out) : rc;
}

int ct_json_get_string(const struct ct_json_value *obj, const char *key, const char **out)
{
    int rc;
    const struct ct_json_value *v = lookup(obj, key, &rc);
    return v ? to_string(v, key, out) : rc;
}

int ct_json_get_bool(const struct ct_json_value *obj, const char *key, int *out)
{
    int rc;
    const struct ct_json_value *v = lookup(obj, key, &rc);
    return v ? to_bool(v, key, out) : rc;
}
