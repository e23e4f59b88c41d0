/* Config values: one parser and one formatter per key type (see
 * config-impl.h). A parser checks the text against the key's type, range and
 * choices and stores it in its field of struct ct_config; a formatter writes
 * the field back as the text a config file holds, so that a written config
 * parses back to the same bytes. Messages say what was wrong with the value;
 * the caller adds where it came from and the key's name.
 */
#include "config/config-impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Parse a whole string as a base-10 signed integer. Returns 0, -1 when it is
 * not an integer at all, -2 when it is one but does not fit in 64 bits.
 * Base 10 on purpose: base 0 would read "010" as octal. */
static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || isspace((unsigned char)*s))
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (int64_t)v;
    return 0;
}

/* As parse_i64 for unsigned; strtoull would quietly wrap "-1" to 2^64-1. */
static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (*s == '-' || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0')
        return -1;
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)v;
    return 0;
}

static void format_choices(const char *const *choices, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *const *c = choices; *c && used < n; c++) {
        int w = snprintf(out + used, n - used, "%s%s", c == choices ? "" : ", ", *c);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static int choice_index(const char *const *choices, const char *s)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(choices[i], s) == 0)
            return i;
    return -1;
}

static int set_why(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_why(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_int_list(const struct ct__config_key *k, const char *text, struct ct_config *cfg,
                          char *why, size_t n)
{
    int vals[CT_CONFIG_MAX_HIDDEN];
    size_t cap = k->size / sizeof(int);
    size_t count = 0;
    const char *p = text;
    if (cap > CT_CONFIG_MAX_HIDDEN)
        cap = CT_CONFIG_MAX_HIDDEN;
    for (;;) {
        char *end;
        while (isspace((unsigned char)*p))
            p++;
        const char *tok = p;
        errno = 0;
        long long v = strtoll(tok, &end, 10);
        if (end == tok)
            return set_why(why, n, "expected a comma-separated list of integers, found '%.*s'",
                           QUOTE_MAX, text);
        int overflow = errno == ERANGE;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p != ',' && *p != '\0')
            return set_why(why, n, "expected a comma-separated list of integers, found '%.*s'",
                           QUOTE_MAX, text);
        if (overflow || v < k->imin || v > k->imax)
            return set_why(why, n, "entry %zu (%.*s) is out of range [%" PRId64 ", %" PRId64 "]",
                           count + 1, (int)(end - tok), tok, k->imin, k->imax);
        if (count == cap)
            return set_why(why, n, "too many entries in '%.*s' (at most %zu)", QUOTE_MAX, text,
                           cap);
        vals[count++] = (int)v;
        if (*p == '\0')
            break;
        p++; /* past ',' */
    }
    memset((char *)cfg + k->off, 0, k->size);
    memcpy((char *)cfg + k->off, vals, count * sizeof(int));
    int c = (int)count;
    memcpy((char *)cfg + k->count_off, &c, sizeof c);
    return 0;
}

/* One finite number of key k (KT_DOUBLE or an entry of KT_DOUBLE_LIST),
 * in its range. */
static int parse_double(const struct ct__config_key *k, const char *text, double *out, char *why,
                        size_t n)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || isspace((unsigned char)*text))
        return set_why(why, n, "expected a number, found '%.*s'", QUOTE_MAX, text);
    if (!isfinite(v))
        return set_why(why, n, "expected a finite number, found '%.*s'", QUOTE_MAX, text);
    int lo_ok = (k->flags & KF_LO_OPEN) ? v > k->dmin : v >= k->dmin;
    int hi_ok = (k->flags & KF_HI_OPEN) ? v < k->dmax : v <= k->dmax;
    if (!lo_ok || !hi_ok)
        return set_why(why, n, "%.*s is out of range %c%g, %g%c", QUOTE_MAX, text,
                       (k->flags & KF_LO_OPEN) ? '(' : '[', k->dmin, k->dmax,
                       (k->flags & KF_HI_OPEN) ? ')' : ']');
    *out = v;
    return 0;
}

#define DOUBLE_LIST_MAX 16

static int parse_double_list(const struct ct__config_key *k, const char *text,
                             struct ct_config *cfg, char *why, size_t n)
{
    double vals[DOUBLE_LIST_MAX];
    size_t cap = k->size / sizeof(double), count = 0;
    if (cap > DOUBLE_LIST_MAX)
        cap = DOUBLE_LIST_MAX;
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && isspace((unsigned char)*p))
            p++, len--;
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        char tok[64];
        if (len == 0 || len >= sizeof tok)
            return set_why(why, n, "expected a comma-separated list of numbers, found '%.*s'",
                           QUOTE_MAX, text);
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (count == cap)
            return set_why(why, n, "too many entries in '%.*s' (at most %zu)", QUOTE_MAX, text,
                           cap);
        char inner[256];
        if (parse_double(k, tok, &vals[count], inner, sizeof inner) < 0)
            return count == 0 && !comma ? set_why(why, n, "%s", inner)
                                        : set_why(why, n, "entry %zu: %s", count + 1, inner);
        count++;
        if (!comma)
            break;
        p = comma + 1;
    }
    memset((char *)cfg + k->off, 0, k->size);
    memcpy((char *)cfg + k->off, vals, count * sizeof(double));
    int c = (int)count;
    memcpy((char *)cfg + k->count_off, &c, sizeof c);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* One parser per key type                                                  */
/* ------------------------------------------------------------------------ */

/* Each stores the value of `text` for key k in *cfg, or returns -1 with what
 * was wrong in `why`. */
typedef int (*parse_fn)(const struct ct__config_key *k, const char *text, int recorded,
                        struct ct_config *cfg, char *why, size_t n);

static void *field(const struct ct__config_key *k, struct ct_config *cfg)
{
    return (char *)cfg + k->off;
}

/* KT_INT and KT_INT64: base 10, in [imin, imax]; "auto" for 0 where allowed. */
static int parse_int(const struct ct__config_key *k, const char *text, int recorded,
                     struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    int64_t v;
    if ((k->flags & KF_AUTO) && strcasecmp(text, "auto") == 0) {
        v = 0;
    } else {
        int rc = parse_i64(text, &v);
        if (rc == -1)
            return set_why(why, n, "expected an integer%s, found '%.*s'",
                           (k->flags & KF_AUTO) ? " or 'auto'" : "", QUOTE_MAX, text);
        if (rc == -2 || v < k->imin || v > k->imax)
            return set_why(why, n, "%.*s is out of range [%" PRId64 ", %" PRId64 "]%s",
                           QUOTE_MAX, text, k->imin, k->imax,
                           (k->flags & KF_AUTO) ? " (or 'auto')" : "");
    }
    if (k->type == KT_INT) {
        int iv = (int)v;
        memcpy(field(k, cfg), &iv, sizeof iv);
    } else {
        memcpy(field(k, cfg), &v, sizeof v);
    }
    return 0;
}

static int parse_uint64(const struct ct__config_key *k, const char *text, int recorded,
                        struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    uint64_t v;
    int rc = parse_u64(text, &v);
    if (rc == -1)
        return set_why(why, n, "expected a non-negative integer, found '%.*s'", QUOTE_MAX, text);
    if (rc == -2)
        return set_why(why, n, "%.*s is out of range [0, %" PRIu64 "]", QUOTE_MAX, text,
                       UINT64_MAX);
    memcpy(field(k, cfg), &v, sizeof v);
    return 0;
}

static int parse_double_key(const struct ct__config_key *k, const char *text, int recorded,
                            struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    double v = 0;
    if (parse_double(k, text, &v, why, n) < 0)
        return -1;
    memcpy(field(k, cfg), &v, sizeof v);
    return 0;
}

static int parse_bool(const struct ct__config_key *k, const char *text, int recorded,
                      struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int b = 0; b < 4; b++) {
        int v = -1;
        if (strcasecmp(text, yes[b]) == 0)
            v = 1;
        else if (strcasecmp(text, no[b]) == 0)
            v = 0;
        if (v >= 0) {
            memcpy(field(k, cfg), &v, sizeof v);
            return 0;
        }
    }
    return set_why(why, n, "expected true or false (or yes/no, on/off, 1/0), found '%.*s'",
                   QUOTE_MAX, text);
}

/* The index of `text` among the key's choices (-1 when it has none), or -2
 * with the choices and the nearest one in `why`. A recorded config may name a
 * model that the program which wrote it registered and this one has not (see
 * ct_config_load_recorded). */
static int check_choice(const struct ct__config_key *k, const char *text, int recorded, char *why,
                        size_t n)
{
    const char *const *choices = recorded && k->choices_fn ? NULL : ct__config_key_choices(k);
    int idx = -1;
    if (choices && (idx = choice_index(choices, text)) < 0) {
        char list[512], hint[CT_CONFIG_NAME_MAX + 32];
        format_choices(choices, list, sizeof list);
        ct__config_suggest_choice(choices, text, hint, sizeof hint);
        set_why(why, n, "unknown value '%.*s' (expected one of: %s)%s", QUOTE_MAX, text, list,
                hint);
        return -2;
    }
    return idx;
}

static int parse_enum(const struct ct__config_key *k, const char *text, int recorded,
                      struct ct_config *cfg, char *why, size_t n)
{
    if (text[0] == '\0')
        return set_why(why, n, "must not be empty");
    int idx = check_choice(k, text, recorded, why, n);
    if (idx == -2)
        return -1;
    memcpy(field(k, cfg), &idx, sizeof idx);
    return 0;
}

/* The resolved config (ct_config_write: "name = value") is what a checkpoint
 * records and eval and resume parse again, so a value must read back as
 * itself: one line of at most LINE_TEXT_MAX characters, without a ';' that
 * inih would take for the start of a comment (first, or after a blank). Only
 * a --set can bring such a value in (tests/fuzz/fuzz_config checks the round
 * trip). */
static int check_one_line(const struct ct__config_key *k, const char *text, size_t len, char *why,
                          size_t n)
{
    if (strlen(k->name) + 3 + len > LINE_TEXT_MAX)
        return set_why(why, n, "value is too long for one line of a config file (%zu "
                       "characters, at most %zu for %s)", len,
                       LINE_TEXT_MAX - 3 - strlen(k->name), k->name);
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\n' || text[i] == '\r')
            return set_why(why, n, "a value cannot hold a line break");
        if (text[i] == ';' && (i == 0 || isspace((unsigned char)text[i - 1])))
            return set_why(why, n, "'%.*s': a ';' %s starts a comment in a config file, so it "
                           "cannot be part of a value", QUOTE_MAX, text,
                           i == 0 ? "first" : "after a blank");
    }
    return 0;
}

static int parse_string(const struct ct__config_key *k, const char *text, int recorded,
                        struct ct_config *cfg, char *why, size_t n)
{
    void *dst = field(k, cfg);
    if (text[0] == '\0' && (k->flags & KF_EMPTY)) {
        memset(dst, 0, k->size);
        return 0;
    }
    if (text[0] == '\0')
        return set_why(why, n, "must not be empty");
    if (check_choice(k, text, recorded, why, n) == -2)
        return -1;
    size_t len = strlen(text);
    if (len >= k->size)
        return set_why(why, n, "value is too long (%zu characters, at most %zu)", len,
                       k->size - 1);
    if (check_one_line(k, text, len, why, n) < 0)
        return -1;
    if (k->check && k->check(text, why, n) < 0)
        return -1;
    /* Zero the whole field so that equal configs are equal bytes. */
    memset(dst, 0, k->size);
    memcpy(dst, text, len);
    return 0;
}

static int parse_int_list_key(const struct ct__config_key *k, const char *text, int recorded,
                              struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    return parse_int_list(k, text, cfg, why, n);
}

static int parse_double_list_key(const struct ct__config_key *k, const char *text, int recorded,
                                 struct ct_config *cfg, char *why, size_t n)
{
    (void)recorded;
    return parse_double_list(k, text, cfg, why, n);
}

static const parse_fn parsers[] = {
    [KT_INT] = parse_int,          [KT_INT64] = parse_int,
    [KT_UINT64] = parse_uint64,    [KT_DOUBLE] = parse_double_key,
    [KT_BOOL] = parse_bool,        [KT_STRING] = parse_string,
    [KT_ENUM] = parse_enum,        [KT_INT_LIST] = parse_int_list_key,
    [KT_DOUBLE_LIST] = parse_double_list_key,
};

int ct__config_parse_value(const struct ct__config_key *k, const char *text, int recorded,
                           struct ct_config *cfg, char *why, size_t n)
{
    if ((size_t)k->type >= sizeof parsers / sizeof parsers[0] || !parsers[k->type])
        return set_why(why, n, "internal error: unknown key type");
    return parsers[k->type](k, text, recorded, cfg, why, n);
}

/* ------------------------------------------------------------------------ */
/* One formatter per key type                                               */
/* ------------------------------------------------------------------------ */

/* The shortest of %.15g..%.17g that reads back as the same double: exact
 * round trips, without printing 0.1 as 0.10000000000000001. */
void ct__config_format_double(double v, char *out, size_t n)
{
    /* Also tells GCC's -Wformat-truncation (which, in the ASan build,
     * otherwise sees a path with a null out) that out is a buffer. */
    if (!out || n == 0)
        return;
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

typedef void (*format_fn)(const struct ct__config_key *k, const void *src,
                          const struct ct_config *cfg, char *out, size_t n);

static void format_int(const struct ct__config_key *k, const void *src,
                       const struct ct_config *cfg, char *out, size_t n)
{
    (void)cfg;
    int v;
    memcpy(&v, src, sizeof v);
    if ((k->flags & KF_AUTO) && v == 0)
        snprintf(out, n, "auto");
    else
        snprintf(out, n, "%d", v);
}

static void format_int64(const struct ct__config_key *k, const void *src,
                         const struct ct_config *cfg, char *out, size_t n)
{
    (void)k, (void)cfg;
    int64_t v;
    memcpy(&v, src, sizeof v);
    snprintf(out, n, "%" PRId64, v);
}

static void format_uint64(const struct ct__config_key *k, const void *src,
                          const struct ct_config *cfg, char *out, size_t n)
{
    (void)k, (void)cfg;
    uint64_t v;
    memcpy(&v, src, sizeof v);
    snprintf(out, n, "%" PRIu64, v);
}

static void format_double_key(const struct ct__config_key *k, const void *src,
                              const struct ct_config *cfg, char *out, size_t n)
{
    (void)k, (void)cfg;
    double v;
    memcpy(&v, src, sizeof v);
    ct__config_format_double(v, out, n);
}

static void format_bool(const struct ct__config_key *k, const void *src,
                        const struct ct_config *cfg, char *out, size_t n)
{
    (void)k, (void)cfg;
    int v;
    memcpy(&v, src, sizeof v);
    snprintf(out, n, "%s", v ? "true" : "false");
}

static void format_string(const struct ct__config_key *k, const void *src,
                          const struct ct_config *cfg, char *out, size_t n)
{
    (void)cfg;
    snprintf(out, n, "%.*s", (int)k->size, (const char *)src);
}

static void format_enum(const struct ct__config_key *k, const void *src,
                        const struct ct_config *cfg, char *out, size_t n)
{
    (void)cfg;
    int v, count = 0;
    memcpy(&v, src, sizeof v);
    while (k->choices[count])
        count++;
    snprintf(out, n, "%s", v >= 0 && v < count ? k->choices[v] : "?");
}

static void format_double_list(const struct ct__config_key *k, const void *src,
                               const struct ct_config *cfg, char *out, size_t n)
{
    int count;
    size_t used = 0;
    memcpy(&count, (const char *)cfg + k->count_off, sizeof count);
    out[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        double v;
        char one[64];
        memcpy(&v, (const char *)src + (size_t)i * sizeof(double), sizeof v);
        ct__config_format_double(v, one, sizeof one);
        int w = snprintf(out + used, n - used, "%s%s", i ? "," : "", one);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static void format_int_list(const struct ct__config_key *k, const void *src,
                            const struct ct_config *cfg, char *out, size_t n)
{
    int count;
    size_t used = 0;
    memcpy(&count, (const char *)cfg + k->count_off, sizeof count);
    out[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int v;
        memcpy(&v, (const char *)src + (size_t)i * sizeof(int), sizeof v);
        int w = snprintf(out + used, n - used, "%s%d", i ? "," : "", v);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

static const format_fn formatters[] = {
    [KT_INT] = format_int,         [KT_INT64] = format_int64,
    [KT_UINT64] = format_uint64,   [KT_DOUBLE] = format_double_key,
    [KT_BOOL] = format_bool,       [KT_STRING] = format_string,
    [KT_ENUM] = format_enum,       [KT_INT_LIST] = format_int_list,
    [KT_DOUBLE_LIST] = format_double_list,
};

void ct__config_format_value(const struct ct__config_key *k, const struct ct_config *cfg,
                             char *out, size_t n)
{
    if ((size_t)k->type >= sizeof formatters / sizeof formatters[0] || !formatters[k->type]) {
        snprintf(out, n, "?");
        return;
    }
    formatters[k->type](k, (const char *)cfg + k->off, cfg, out, n);
}
