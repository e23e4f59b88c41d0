/* Test-only failpoints: the one parser (see failpoint.h). */
#include "core/failpoint.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* The expected form, for messages: "<phase>:<rank>[:fail|:eio] with <phase>
 * one of data, sync" or "<step>:<rank>[:params]". */
static void expected_form(char *out, size_t cap, const struct ct_failpoint_spec *spec)
{
    size_t n = (size_t)snprintf(out, cap, "%s:<rank>", spec->phases ? "<phase>" : "<step>");
    for (int i = 0; spec->actions && spec->actions[i] && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i == 0 ? "[:" : "|:", spec->actions[i]);
    if (spec->actions && spec->actions[0] && n < cap)
        n += (size_t)snprintf(out + n, cap - n, "]");
    for (int i = 0; spec->phases && spec->phases[i] && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", i == 0 ? " with <phase> one of " : ", ",
                              spec->phases[i]);
}

__attribute__((format(printf, 3, 4)))
static int refuse(const struct ct_failpoint_spec *spec, const char *value, const char *fmt, ...)
{
    char what[192], form[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    expected_form(form, sizeof form, spec);
    return ct_error_set(CT_EINVAL, "%s='%s': %s; expected %s", spec->var, value, what, form);
}

/* A plain decimal number in s[0, len) no greater than max; -1 otherwise
 * (empty, a sign, a space, any other character, an overflow). */
static int parse_count(const char *s, size_t len, int64_t max, int64_t *out)
{
    int64_t v = 0;
    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || v > (max - (s[i] - '0')) / 10)
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* Index of the word s[0, len) in the NULL-terminated list, or -1. */
static int find_word(const char *const *list, const char *s, size_t len)
{
    for (int i = 0; list && list[i]; i++)
        if (strlen(list[i]) == len && strncmp(list[i], s, len) == 0)
            return i;
    return -1;
}

int ct_failpoint_parse(struct ct_failpoint *fp, const struct ct_failpoint_spec *spec,
                       const char *value)
{
    memset(fp, 0, sizeof *fp);
    fp->action = -1;
    if (!value || !*value)
        return 0;
    snprintf(fp->text, sizeof fp->text, "%s", value);
    const char *c1 = strchr(value, ':');
    if (!c1)
        return refuse(spec, value, "no ':<rank>'");
    size_t at_len = (size_t)(c1 - value);
    int64_t at;
    if (spec->phases) {
        if ((at = find_word(spec->phases, value, at_len)) < 0)
            return refuse(spec, value, "unknown phase '%.*s'", (int)at_len, value);
    } else if (parse_count(value, at_len, INT64_MAX, &at) < 0) {
        return refuse(spec, value, "'%.*s' is not a step number", (int)at_len, value);
    }
    const char *rank_s = c1 + 1, *c2 = strchr(rank_s, ':');
    size_t rank_len = c2 ? (size_t)(c2 - rank_s) : strlen(rank_s);
    int64_t rank;
    if (parse_count(rank_s, rank_len, INT_MAX, &rank) < 0)
        return refuse(spec, value, "'%.*s' is not a rank (a number >= 0)", (int)rank_len, rank_s);
    int action = -1;
    if (c2 && (!spec->actions || !spec->actions[0]))
        return refuse(spec, value, "no action expected, found '%s'", c2 + 1);
    if (c2 && (action = find_word(spec->actions, c2 + 1, strlen(c2 + 1))) < 0)
        return refuse(spec, value, "unknown action '%s'", c2 + 1);
    fp->armed = 1;
    fp->at = at;
    fp->rank = (int)rank;
    fp->action = action;
    return 0;
}

int ct_failpoint_get(struct ct_failpoint *fp, const struct ct_failpoint_spec *spec)
{
    return ct_failpoint_parse(fp, spec, getenv(spec->var));
}
