/* Internals of src/config, shared by its files and by nothing else (not
 * installed):
 *   schema.c    the key table (one line per key) and lookups in it, "did you mean"
 *   value.c     one parser and one formatter per key type
 *   parse.c     INI reading (inih), defaults, required keys, cross-key rules, loading
 *   override.c  `--set section.key=value`
 *   print.c     the resolved config, diffs, `config --list`
 */
#ifndef CT_CONFIG_CONFIG_IMPL_H
#define CT_CONFIG_CONFIG_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <ini.h>

#include "config/config.h"

enum key_type {
    KT_INT,      /* int, range [imin, imax] */
    KT_INT64,    /* int64_t, range [imin, imax] */
    KT_UINT64,   /* uint64_t, full range */
    KT_DOUBLE,   /* finite double, range dmin..dmax, ends open per flags */
    KT_BOOL,     /* int 0/1 */
    KT_STRING,   /* char[size], non-empty; restricted to the key's choices if it has any */
    KT_ENUM,     /* enum stored as int: index into `choices` */
    KT_INT_LIST, /* int[size/sizeof(int)] plus a count at count_off */
    KT_DOUBLE_LIST, /* double[size/sizeof(double)] plus a count at count_off; each as KT_DOUBLE */
};

enum {
    KF_REQUIRED = 1u << 0, /* the file or an override must name it */
    KF_LO_OPEN = 1u << 1,  /* doubles: the lower bound itself is excluded */
    KF_HI_OPEN = 1u << 2,  /* doubles: the upper bound itself is excluded */
    KF_AUTO = 1u << 3,     /* ints: the word "auto" stands for 0 */
    KF_RUNTIME = 1u << 4,  /* does not change the experiment's state: may differ on resume */
    KF_EMPTY = 1u << 5,    /* strings: may be empty */
};

struct ct__config_key {
    const char *section;
    const char *name;
    enum key_type type;
    size_t off, size;         /* the field in struct ct_config */
    size_t count_off;         /* int lists: where the number of entries goes */
    const char *def;          /* default as text; NULL: none */
    int64_t imin, imax;       /* integer types and list entries, inclusive */
    double dmin, dmax;        /* doubles */
    unsigned flags;
    const char *const *choices; /* NULL-terminated */
    /* Choices that grow at run time (the model registry): asked for at each
     * use instead of `choices`. KT_STRING only: an enum's indices must not
     * depend on what a program registered. */
    const char *const *(*choices_fn)(void);
    /* KT_STRING: a value's syntax, checked by the module that owns it (NULL:
     * any); returns 0, or -1 with what is wrong in why. */
    int (*check)(const char *text, char *why, size_t n);
    const char *help;
};

/* The schema (schema.c): ct__config_n_keys entries, sections contiguous. */
extern const struct ct__config_key ct__config_keys[];
extern const size_t ct__config_n_keys;
/* An upper bound on ct__config_n_keys, for per-key arrays (schema.c checks it). */
#define CT__CONFIG_KEYS_MAX 128

/* Values are quoted back to the user; this keeps a pasted novel from pushing
 * the rest of the message out of the error buffer. */
#define QUOTE_MAX 200
/* The longest line the reader takes (read_line: inih's buffer less the
 * newline and the NUL). */
#define LINE_TEXT_MAX ((size_t)INI_MAX_LINE - 2)

/* Lookups (schema.c). The index of section.name, or -1. */
int ct__config_find_key(const char *section, const char *name);
int ct__config_section_known(const char *section);
/* The key's allowed values, NULL-terminated, or NULL: any value. */
const char *const *ct__config_key_choices(const struct ct__config_key *k);
/* " (did you mean [train]?)" or "" */
void ct__config_suggest_section(const char *typed, char *out, size_t n);
/* " (did you mean 'lr'?)" for a near key of the same section, else
 * " (did you mean [train] epochs?)" for a near key elsewhere, else "". */
void ct__config_suggest_key(const char *section, const char *typed, char *out, size_t n);
/* "; did you mean 'adamw'?" for the nearest choice, or "". */
void ct__config_suggest_choice(const char *const *choices, const char *typed, char *out, size_t n);

/* Values (value.c). Parse `text` for key `k` and store it in *cfg. On
 * failure returns -1 with what was wrong in `why` (without the location or
 * key name). `recorded`: a registry's names (choices_fn) are not checked. */
int ct__config_parse_value(const struct ct__config_key *k, const char *text, int recorded,
                           struct ct_config *cfg, char *why, size_t n);
/* The key's value in cfg as the config file writes it. */
void ct__config_format_value(const struct ct__config_key *k, const struct ct_config *cfg,
                             char *out, size_t n);
/* The shortest of %.15g..%.17g that reads back as the same double. */
void ct__config_format_double(double v, char *out, size_t n);

/* Applying keys (parse.c). */
struct ct__parse_state {
    struct ct_config *cfg;
    const char *path;
    const char *text; /* parse this instead of opening path */
    FILE *f;
    char *buf; /* getline buffer */
    size_t cap;
    int lineno;       /* physical line last handed to inih */
    int set_line[CT__CONFIG_KEYS_MAX]; /* where the file set each key; 0 = not in the file */
    int given[CT__CONFIG_KEYS_MAX];    /* set by the file or an override */
    int err;          /* first error of our own (0: none) ... */
    int err_line;     /* ... and its line, to compare with inih's */
    int recorded;     /* ct_config_load_recorded: registry names are not checked */
};

/* Where a value came from, for messages: a file line or a --set argument. */
struct ct__origin {
    const char *path;
    int line;
    const char *set; /* the whole --set argument, or NULL */
};

/* CT_ECONFIG with "FILE:LINE: message" or "--set ARG: message". */
int ct__config_origin_error(const struct ct__origin *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* One section.name = value, from the file or an override: checked and stored. */
int ct__config_apply_key(struct ct__parse_state *st, const struct ct__origin *o,
                         const char *section, const char *name, const char *value);
/* "section.key=value" (override.c), with the same parsing and messages as a file line. */
int ct__config_apply_override(struct ct__parse_state *st, const char *arg);

#endif
