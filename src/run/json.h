/* A small JSON writer and reader for the run's records (run.json, *.jsonl).
 *
 * Writer: values appended to a growable, NUL-terminated buffer, on one line
 * in the house layout `{"step": 10, "loss": 0.5}`. Strings are escaped
 * (quote, backslash, every control character; UTF-8 bytes pass through),
 * doubles are written with a chosen precision and NaN/Inf as null. The first
 * failure (out of memory, a value where a key is due, unbalanced ends) is
 * sticky and returned by ct_json_writer_status(), so a record is built with
 * plain calls and checked once.
 *
 *     struct ct_json_writer w;
 *     ct_json_writer_init(&w);
 *     ct_json_begin_object(&w);
 *     ct_json_kv_int(&w, "step", 10);
 *     ct_json_kv_double(&w, "loss", loss, 9);
 *     ct_json_end_object(&w);
 *     if ((rc = ct_json_writer_status(&w)) == 0) fputs(w.buf, f);
 *     ct_json_writer_free(&w);
 *
 * Reader: one JSON value (a .jsonl line, a run.json) parsed into a tree that
 * owns all its memory, with limits on size and depth; a malformed input is
 * CT_EFORMAT with the byte offset and what was expected. Getters look up an
 * object's key and convert, with CT_ENOENT for a missing key and CT_EFORMAT
 * for a wrong type; callers wrap the message with the file and line.
 *
 *     struct ct_json_doc d;
 *     if ((rc = ct_json_parse(&d, line, strlen(line), NULL)) < 0) return rc;
 *     int64_t step;
 *     rc = ct_json_get_int64(d.root, "step", &step);
 *     ct_json_doc_free(&d);
 *
 * Deliberately not here: pretty printing, streaming parses of large files,
 * JSON pointer or query syntax, numbers beyond double and int64, UTF-8
 * validation (bytes are passed through; \u escapes are decoded to UTF-8).
 */
#ifndef CT_RUN_JSON_H
#define CT_RUN_JSON_H

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- writer */

/* Nesting the writer tracks; deeper nesting is a CT_ERANGE status. */
#define CT_JSON_WRITER_MAX_DEPTH 64

struct ct_json_writer {
    char *buf;         /* the text so far, NUL-terminated (NULL before the first write) */
    size_t len, cap;
    int status;        /* first error, sticky; 0 while all is well */
    int depth;
    uint64_t in_object; /* bit d: the container at depth d+1 is an object */
    uint64_t has_items; /* bit d: that container already has a member */
    int key_pending;    /* a key was written, its value is due */
};

void ct_json_writer_init(struct ct_json_writer *w);
void ct_json_writer_free(struct ct_json_writer *w);
/* Forget the text and the state, keep the buffer (for one line after another). */
void ct_json_writer_reset(struct ct_json_writer *w);
/* 0, or the first error; CT_ESTATE when a container is still open. */
int ct_json_writer_status(const struct ct_json_writer *w);

void ct_json_begin_object(struct ct_json_writer *w);
void ct_json_end_object(struct ct_json_writer *w);
void ct_json_begin_array(struct ct_json_writer *w);
void ct_json_end_array(struct ct_json_writer *w);
/* Inside an object: the key of the next value. */
void ct_json_key(struct ct_json_writer *w, const char *key);

void ct_json_null(struct ct_json_writer *w);
void ct_json_bool(struct ct_json_writer *w, int v);
void ct_json_int(struct ct_json_writer *w, int64_t v);
/* NUL-terminated; NULL is written as null. */
void ct_json_string(struct ct_json_writer *w, const char *s);
/* s[0..len), which may hold NUL bytes (written as \u0000). */
void ct_json_string_n(struct ct_json_writer *w, const char *s, size_t len);
/* `digits` significant digits (printf %.*g; 17 round-trips any double). */
void ct_json_double(struct ct_json_writer *w, double v, int digits);
/* `decimals` digits after the point (printf %.*f). */
void ct_json_fixed(struct ct_json_writer *w, double v, int decimals);
/* Arrays of per-rank values; v may be NULL only when n is 0. */
void ct_json_double_array(struct ct_json_writer *w, const double *v, size_t n, int digits);
void ct_json_fixed_array(struct ct_json_writer *w, const double *v, size_t n, int decimals);
void ct_json_int_array(struct ct_json_writer *w, const int64_t *v, size_t n);

/* Key and value in one call. */
void ct_json_kv_null(struct ct_json_writer *w, const char *key);
void ct_json_kv_bool(struct ct_json_writer *w, const char *key, int v);
void ct_json_kv_int(struct ct_json_writer *w, const char *key, int64_t v);
void ct_json_kv_string(struct ct_json_writer *w, const char *key, const char *s);
void ct_json_kv_double(struct ct_json_writer *w, const char *key, double v, int digits);
void ct_json_kv_fixed(struct ct_json_writer *w, const char *key, double v, int decimals);

/* ---------------------------------------------------------------- reader */

enum ct_json_type {
    CT_JSON_NULL,
    CT_JSON_BOOL,
    CT_JSON_NUMBER,
    CT_JSON_STRING,
    CT_JSON_ARRAY,
    CT_JSON_OBJECT,
    CT_JSON_TYPE_COUNT
};

struct ct_json_value {
    enum ct_json_type type;
    int boolean;          /* CT_JSON_BOOL */
    int is_int;           /* CT_JSON_NUMBER written without fraction or exponent, fits int64 */
    int64_t integer;      /* valid when is_int */
    double number;        /* CT_JSON_NUMBER (also set when is_int) */
    const char *string;   /* CT_JSON_STRING: decoded UTF-8, NUL-terminated */
    size_t string_len;    /* bytes, without the NUL (a \u0000 may sit inside) */
    size_t n;             /* CT_JSON_ARRAY elements or CT_JSON_OBJECT members */
    const struct ct_json_value *items; /* the elements, or the members' values */
    const char *const *keys;           /* CT_JSON_OBJECT: the members' keys, parallel to items */
    size_t offset;        /* where the value starts in the text (for messages) */
};

struct ct_json_parse_params {
    size_t max_bytes; /* longer inputs are refused before parsing */
    int max_depth;    /* arrays and objects nested deeper are refused */
};

struct ct_json_parse_params ct_json_parse_default_params(void); /* 16 MiB, depth 32 */

struct ct_json_doc {
    const struct ct_json_value *root;
    void *arena; /* every node and string of the tree */
};

/* Parse text[0..len): one value, surrounded by optional whitespace, nothing
 * else. Duplicate keys in an object are refused (which one would count?).
 * params may be NULL (the defaults). On failure d is empty and the message
 * reads "offset N: expected ..., found ...". */
int ct_json_parse(struct ct_json_doc *d, const char *text, size_t len,
                  const struct ct_json_parse_params *params);
void ct_json_doc_free(struct ct_json_doc *d);

/* Name of a type ("string"), for messages. */
const char *ct_json_type_name(enum ct_json_type t);

/* The value of `key` in an object; NULL when absent or obj is no object. */
const struct ct_json_value *ct_json_get(const struct ct_json_value *obj, const char *key);
/* Element i of an array; NULL when out of range or arr is no array. */
const struct ct_json_value *ct_json_at(const struct ct_json_value *arr, size_t i);

/* Conversions of one value. as_double takes null as NaN, the writer's
 * spelling of a value that was not a number. as_int64 wants an integer
 * literal (no fraction, no exponent) that fits. */
int ct_json_as_int64(const struct ct_json_value *v, int64_t *out);
int ct_json_as_double(const struct ct_json_value *v, double *out);
int ct_json_as_string(const struct ct_json_value *v, const char **out);

/* Look up and convert; CT_ENOENT names the missing key, CT_EFORMAT names the
 * key, the expected type and the type found. */
int ct_json_get_int64(const struct ct_json_value *obj, const char *key, int64_t *out);
int ct_json_get_int(const struct ct_json_value *obj, const char *key, int *out);
int ct_json_get_double(const struct ct_json_value *obj, const char *key, double *out);
int ct_json_get_string(const struct ct_json_value *obj, const char *key, const char **out);
int ct_json_get_bool(const struct ct_json_value *obj, const char *key, int *out);

#endif
