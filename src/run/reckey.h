/* Key tables of the run's records: each JSON record (run.json, a line of
 * metrics.jsonl, steps.jsonl or chain.jsonl) is described once, as
 * config's keys[] describes the config: one row per key with its name,
 * type, place in the C struct, precision and "optional since". The row
 * drives the writer (key order, number format, null), the parser (which
 * keys are required, the default of an absent one), the report's CSV
 * columns and metric look-ups, and the key list in docs/records.md.
 *
 *     #define E(m) CT_REC_AT(struct ct_epoch_record, m)
 *     static const struct ct_rec_key keys[] = {
 *         // name, type, member, prec, flags, gate, gate member, since, default, csv, doc
 *         {"step", CT_REC_INT64, E(step), 0, 0, 0, 0, NULL, 0, 2, "global steps completed"},
 *         ...};
 *     ct_json_begin_object(&w); ct_rec_write(&w, &schema, &rec); ct_json_end_object(&w);
 *     rc = ct_rec_read(doc.root, &schema, &rec, CT_REC_ALL, strs);
 *
 * Adding a key: one row here plus the struct member that holds its value.
 * Deliberately not here: each record's own checks (a world in range, digests
 * in hex), which record.c applies around these calls.
 */
#ifndef CT_RUN_RECKEY_H
#define CT_RUN_RECKEY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "run/json.h"

enum ct_rec_type {
    CT_REC_INT,       /* int */
    CT_REC_INT64,     /* int64_t */
    CT_REC_BOOL,      /* int, written true/false */
    CT_REC_FIXED,     /* double, prec digits after the point (%.*f); NaN/Inf: null */
    CT_REC_DOUBLE,    /* double, prec significant digits (%.*g); NaN/Inf: null */
    CT_REC_STRING,    /* const char * (NULL: null) */
    CT_REC_CHARS,     /* char[size], NUL-terminated */
    CT_REC_RANKS,     /* const double *, one per rank (the record's world), %.*f each; NULL: null */
    CT_REC_RANKS_MAX, /* written only: the largest non-NaN value of the CT_REC_RANKS at offset */
    CT_REC_TYPE_COUNT
};

/* Flags of a key. */
enum {
    CT_REC_NULLABLE = 1,   /* null is read as the default; an int below 0 is written as null */
    CT_REC_EMPTY_NULL = 2, /* CT_REC_CHARS: "" is written as null */
};

/* When a key is written at all. */
enum ct_rec_gate {
    CT_REC_ALWAYS,
    CT_REC_IF_POSITIVE, /* the double at gate is > 0 */
    CT_REC_IF_SET,      /* the pointer at gate is not NULL */
};

struct ct_rec_key {
    const char *name;
    enum ct_rec_type type;
    size_t offset;         /* of the member in the record's struct */
    size_t size;           /* of the member (CT_REC_CHARS: its capacity) */
    int prec;              /* CT_REC_FIXED, _RANKS, _RANKS_MAX: decimals; CT_REC_DOUBLE: digits */
    unsigned flags;        /* CT_REC_NULLABLE, CT_REC_EMPTY_NULL */
    enum ct_rec_gate gate; /* written only when ... */
    size_t gate_offset;    /* ... the member here says so */
    const char *since;     /* NULL: required; else optional when read, absent in files before this */
    double dflt;           /* an optional key's value when absent (ints: converted; strings: NULL / "") */
    int csv;               /* metrics: column of the report's CSV (1, 2, ...); 0: not a column */
    const char *doc;       /* one line for docs/records.md */
};

/* The row of member m of struct T. */
#define CT_REC_AT(T, m) offsetof(T, m), sizeof(((T *)0)->m)

/* A record: its file, keys in written order, and where the struct keeps
 * the rank count (for CT_REC_RANKS) and the storage of arrays read. */
struct ct_rec_schema {
    const char *file;      /* "metrics.jsonl" */
    const char *doc;       /* a sentence for docs/records.md */
    const struct ct_rec_key *keys;
    size_t n_keys;
    size_t world_offset;   /* int world, for CT_REC_RANKS */
    size_t owned_offset;   /* void *owned: the reader's malloc'd array storage */
    const char *oom;       /* message when that storage cannot be had ("%d" = world) */
};

/* Write each key of s whose gate holds, from rec, into the open object. */
void ct_rec_write(struct ct_json_writer *w, const struct ct_rec_schema *s, const void *rec);

/* The most keys a record has: the size of ct_rec_read's strs array. */
#define CT_REC_MAX_KEYS 64

/* Which keys ct_rec_read reads. */
enum ct_rec_which { CT_REC_REQUIRED, CT_REC_OPTIONAL, CT_REC_ALL };

/* Read the chosen keys of object o into rec, in table order: a required key
 * must be there (the getter's message names it); an optional one absent
 * gets its default. CT_REC_CHARS values are left in strs[key index] (NULL:
 * absent or null; strs holds CT_REC_MAX_KEYS, and may be NULL for a record
 * without such keys) for the caller to copy with its own bounds message;
 * CT_REC_RANKS arrays need the world read and checked first, and go into
 * one malloc'd block at owned_offset. */
int ct_rec_read(const struct ct_json_value *o, const struct ct_rec_schema *s, void *rec,
                enum ct_rec_which which, const char **strs);

/* The key named name; NULL when s has none. */
const struct ct_rec_key *ct_rec_find(const struct ct_rec_schema *s, const char *name);
/* A key's value as a number, NaN when not recorded (a gated key whose gate
 * fails, a nullable int below 0, a NULL array; strings are NaN). A
 * CT_REC_RANKS_MAX is the largest finite value of its array. */
double ct_rec_number(const struct ct_rec_key *k, const void *rec, const struct ct_rec_schema *s);

/* An integer key's value (CT_REC_INT, _INT64, _BOOL) exactly: 1 when
 * recorded, 0 when not (a nullable int below 0) or not an integer key. */
int ct_rec_integer(const struct ct_rec_key *k, const void *rec, int64_t *v);

/* The key list of s as a Markdown section (docs/records.md). */
void ct_rec_markdown(FILE *f, const struct ct_rec_schema *s);

#endif
