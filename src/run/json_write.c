/* The JSON writer of the run's records (see json.h): values appended to a
 * growable buffer in the house layout, the first failure sticky. The reader
 * is json.c. */
#include "run/json.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* ================================================================ writer */

void ct_json_writer_init(struct ct_json_writer *w) { memset(w, 0, sizeof *w); }

void ct_json_writer_free(struct ct_json_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

void ct_json_writer_reset(struct ct_json_writer *w)
{
    char *buf = w->buf;
    size_t cap = w->cap;
    memset(w, 0, sizeof *w);
    w->buf = buf;
    w->cap = cap;
    if (buf)
        buf[0] = '\0';
}

int ct_json_writer_status(const struct ct_json_writer *w)
{
    if (w->status < 0)
        return w->status;
    if (w->depth != 0 || w->key_pending)
        return ct_error_set(CT_ESTATE, "JSON writer: %d container(s) still open", w->depth);
    return 0;
}

/* Record the first failure only: later calls become no-ops, so a record is
 * written with plain calls and checked once at the end. */
static void fail(struct ct_json_writer *w, int code, const char *what)
{
    if (w->status == 0)
        w->status = ct_error_set(code, "JSON writer: %s", what);
}

static void put(struct ct_json_writer *w, const char *s, size_t n)
{
    if (w->status < 0)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (w->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(w->buf, cap);
        if (!b) {
            fail(w, CT_ENOMEM, "out of memory");
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void puts_(struct ct_json_writer *w, const char *s) { put(w, s, strlen(s)); }

static int top_is_object(const struct ct_json_writer *w)
{
    return w->depth > 0 && ((w->in_object >> (w->depth - 1)) & 1u);
}

/* Separator and state before any value: inside an array a comma after the
 * first element; inside an object only right after a key; at the top level
 * only once. Returns 0 when the value may be written. */
static int before_value(struct ct_json_writer *w)
{
    if (w->status < 0)
        return -1;
    if (w->depth == 0) {
        if (w->len > 0) {
            fail(w, CT_ESTATE, "a second value at the top level");
            return -1;
        }
        return 0;
    }
    uint64_t bit = (uint64_t)1 << (w->depth - 1);
    if (top_is_object(w)) {
        if (!w->key_pending) {
            fail(w, CT_ESTATE, "a value inside an object without a key");
            return -1;
        }
        w->key_pending = 0;
        return 0;
    }
    if (w->has_items & bit)
        puts_(w, ", ");
    w->has_items |= bit;
    return w->status;
}

static void write_escaped(struct ct_json_writer *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    put(w, "\"", 1);
    size_t run = 0; /* bytes copied as they are, written in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        put(w, s + run, i - run);
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(w, e, 2);
        } else {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            put(w, e, 6);
        }
        run = i + 1;
    }
    put(w, s + run, n - run);
    put(w, "\"", 1);
}

static void begin(struct ct_json_writer *w, int object)
{
    if (before_value(w) < 0)
        return;
    if (w->depth >= CT_JSON_WRITER_MAX_DEPTH) {
        fail(w, CT_ERANGE, "nesting deeper than CT_JSON_WRITER_MAX_DEPTH");
        return;
    }
    uint64_t bit = (uint64_t)1 << w->depth;
    w->depth++;
    w->has_items &= ~bit;
    if (object)
        w->in_object |= bit;
    else
        w->in_object &= ~bit;
    put(w, object ? "{" : "[", 1);
}

static void end(struct ct_json_writer *w, int object)
{
    if (w->status < 0)
        return;
    if (w->depth == 0 || top_is_object(w) != object) {
        fail(w, CT_ESTATE, object ? "end of an object that is not open" : "end of an array that is not open");
        return;
    }
    if (w->key_pending) {
        fail(w, CT_ESTATE, "end of an object after a key without its value");
        return;
    }
    w->depth--;
    put(w, object ? "}" : "]", 1);
}

void ct_json_begin_object(struct ct_json_writer *w) { begin(w, 1); }
void ct_json_end_object(struct ct_json_writer *w) { end(w, 1); }
void ct_json_begin_array(struct ct_json_writer *w) { begin(w, 0); }
void ct_json_end_array(struct ct_json_writer *w) { end(w, 0); }

void ct_json_key(struct ct_json_writer *w, const char *key)
{
    if (w->status < 0)
        return;
    if (!top_is_object(w) || w->key_pending || !key) {
        fail(w, CT_ESTATE, "a key outside an object, twice in a row, or NULL");
        return;
    }
    uint64_t bit = (uint64_t)1 << (w->depth - 1);
    if (w->has_items & bit)
        puts_(w, ", ");
    w->has_items |= bit;
    write_escaped(w, key, strlen(key));
    puts_(w, ": ");
    w->key_pending = 1;
}

void ct_json_null(struct ct_json_writer *w)
{
    if (before_value(w) == 0)
        puts_(w, "null");
}

void ct_json_bool(struct ct_json_writer *w, int v)
{
    if (before_value(w) == 0)
        puts_(w, v ? "true" : "false");
}

void ct_json_int(struct ct_json_writer *w, int64_t v)
{
    char b[32];
    if (before_value(w) == 0)
        put(w, b, (size_t)snprintf(b, sizeof b, "%" PRId64, v));
}

void ct_json_string_n(struct ct_json_writer *w, const char *s, size_t len)
{
    if (before_value(w) == 0)
        write_escaped(w, s, len);
}

void ct_json_string(struct ct_json_writer *w, const char *s)
{
    if (!s)
        ct_json_null(w);
    else
        ct_json_string_n(w, s, strlen(s));
}

/* JSON has no NaN or infinity: such a value was not measured or not a
 * number, and null says so without breaking every reader of the line. */
static void number(struct ct_json_writer *w, double v, int prec, int fixed)
{
    if (!isfinite(v)) {
        ct_json_null(w);
        return;
    }
    if (before_value(w) != 0)
        return;
    prec = prec < 0 ? 0 : prec > 17 ? 17 : prec;
    if (!fixed && prec == 0)
        prec = 1;
    char small[64];
    int n = snprintf(small, sizeof small, fixed ? "%.*f" : "%.*g", prec, v);
    if (n >= 0 && (size_t)n < sizeof small) {
        put(w, small, (size_t)n);
        return;
    }
    /* %f of a large magnitude: up to 309 digits before the point. */
    char big[400];
    n = snprintf(big, sizeof big, "%.*f", prec, v);
    put(w, big, (size_t)n);
}

void ct_json_double(struct ct_json_writer *w, double v, int digits) { number(w, v, digits, 0); }
void ct_json_fixed(struct ct_json_writer *w, double v, int decimals) { number(w, v, decimals, 1); }

void ct_json_double_array(struct ct_json_writer *w, const double *v, size_t n, int digits)
{
    ct_json_begin_array(w);
    for (size_t i = 0; i < n; i++)
        number(w, v[i], digits, 0);
    ct_json_end_array(w);
}

void ct_json_fixed_array(struct ct_json_writer *w, const double *v, size_t n, int decimals)
{
    ct_json_begin_array(w);
    for (size_t i = 0; i < n; i++)
        number(w, v[i], decimals, 1);
    ct_json_end_array(w);
}

void ct_json_int_array(struct ct_json_writer *w, const int64_t *v, size_t n)
{
    ct_json_begin_array(w);
    for (size_t i = 0; i < n; i++)
        ct_json_int(w, v[i]);
    ct_json_end_array(w);
}

void ct_json_kv_null(struct ct_json_writer *w, const char *key)
{
    ct_json_key(w, key);
    ct_json_null(w);
}

void ct_json_kv_bool(struct ct_json_writer *w, const char *key, int v)
{
    ct_json_key(w, key);
    ct_json_bool(w, v);
}

void ct_json_kv_int(struct ct_json_writer *w, const char *key, int64_t v)
{
    ct_json_key(w, key);
    ct_json_int(w, v);
}

void ct_json_kv_string(struct ct_json_writer *w, const char *key, const char *s)
{
    ct_json_key(w, key);
    ct_json_string(w, s);
}

void ct_json_kv_double(struct ct_json_writer *w, const char *key, double v, int digits)
{
    ct_json_key(w, key);
    ct_json_double(w, v, digits);
}

void ct_json_kv_fixed(struct ct_json_writer *w, const char *key, double v, int decimals)
{
    ct_json_key(w, key);
    ct_json_fixed(w, v, decimals);
}

