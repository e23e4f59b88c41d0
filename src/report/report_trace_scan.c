/* The top level of a trace's text walked without parsing it whole
 * (report-impl.h, for report_trace.c): a trace may hold tens of MiB, and
 * parsed into one tree by the run's JSON reader it would take ten times
 * that. The scanner here only finds where each value ends (strings skipped
 * whole, brackets counted); each element of traceEvents, and otherData, is
 * then parsed on its own by the reader (run/json.h), which checks its syntax.
 *
 * Deliberately not here: what an event means (report_trace.c); checking the
 * syntax inside top-level values other than those two (they are skipped).
 */
#include "report/report-impl.h"

#include <string.h>

#include "core/error.h"

#define MAX_EVENT_BYTES (1 << 20) /* one event's text; otherData's is 4 times that */

struct scan {
    const char *s;
    size_t len, pos;
};

static void ws(struct scan *c)
{
    while (c->pos < c->len && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' || c->s[c->pos] == '\n' ||
                               c->s[c->pos] == '\r'))
        c->pos++;
}

/* "offset N: expected WHAT, found 'x'" (or the end of the text). */
static int expected(const struct scan *c, const char *what)
{
    if (c->pos >= c->len)
        return ct_error_set(CT_EFORMAT, "offset %zu: expected %s, found the end of the text", c->pos, what);
    const unsigned char ch = (unsigned char)c->s[c->pos];
    if (ch >= 0x20 && ch < 0x7f)
        return ct_error_set(CT_EFORMAT, "offset %zu: expected %s, found '%c'", c->pos, what, ch);
    return ct_error_set(CT_EFORMAT, "offset %zu: expected %s, found byte 0x%02x", c->pos, what, ch);
}

/* Past the string at pos (its opening quote). */
static int skip_string(struct scan *c)
{
    const size_t start = c->pos++;
    while (c->pos < c->len) {
        const char ch = c->s[c->pos];
        if (ch == '\\')
            c->pos += 2;
        else if (ch == '"') {
            c->pos++;
            return 0;
        } else
            c->pos++;
    }
    c->pos = c->len;
    return ct_error_set(CT_EFORMAT, "offset %zu: a string that never ends", start);
}

/* Past one value: a string, an array or object (brackets counted, strings
 * skipped whole; the JSON reader checks the rest when it parses it), or a
 * number or literal. */
static int skip_value(struct scan *c)
{
    const size_t start = c->pos;
    if (c->pos >= c->len)
        return expected(c, "a value");
    char ch = c->s[c->pos];
    if (ch == '"')
        return skip_string(c);
    if (ch != '{' && ch != '[') {
        while (c->pos < c->len && !strchr(",]} \t\r\n", c->s[c->pos])) /* a NUL stops too */
            c->pos++;
        return c->pos > start ? 0 : expected(c, "a value");
    }
    size_t depth = 0;
    while (c->pos < c->len) {
        ch = c->s[c->pos];
        if (ch == '"') {
            int rc = skip_string(c);
            if (rc < 0)
                return rc;
            continue;
        }
        c->pos++;
        if (ch == '{' || ch == '[')
            depth++;
        else if ((ch == '}' || ch == ']') && --depth == 0)
            return 0;
    }
    return ct_error_set(CT_EFORMAT, "offset %zu: an %s that never closes", start,
                        c->s[start] == '{' ? "object" : "array");
}

/* A key of the top-level object: is it `want` (compared as written)? */
static int key_is(const struct scan *c, size_t at, const char *want)
{
    const size_t n = strlen(want);
    return c->pos - at == n + 2 && memcmp(c->s + at + 1, want, n) == 0;
}

static int scan_member(struct scan *c, struct ct__trace_top *t)
{
    const size_t key_at = c->pos;
    if (c->pos >= c->len || c->s[c->pos] != '"')
        return expected(c, "a key (a string)");
    int rc = skip_string(c);
    if (rc < 0)
        return rc;
    const int events = key_is(c, key_at, "traceEvents"), other = key_is(c, key_at, "otherData");
    ws(c);
    if (c->pos >= c->len || c->s[c->pos] != ':')
        return expected(c, "':' after the key");
    c->pos++;
    ws(c);
    const size_t at = c->pos;
    if ((events && t->have_events) || (other && t->other.root))
        return ct_error_set(CT_EFORMAT, "offset %zu: a second \"%s\"", key_at,
                            events ? "traceEvents" : "otherData");
    if (events && (c->pos >= c->len || c->s[c->pos] != '['))
        return expected(c, "an array as \"traceEvents\"");
    if ((rc = skip_value(c)) < 0)
        return rc;
    if (events) {
        t->events_at = at;
        t->have_events = 1;
    } else if (other) {
        struct ct_json_parse_params pp = ct_json_parse_default_params();
        pp.max_bytes = 4 * MAX_EVENT_BYTES;
        if ((rc = ct_json_parse(&t->other, c->s + at, c->pos - at, &pp)) < 0)
            return ct_error_wrap(rc, "otherData at offset %zu", at);
    }
    return 0;
}

/* The top-level object: the events' place, otherData; other keys skipped. */
int ct__trace_scan_top(const char *s, size_t len, struct ct__trace_top *t)
{
    memset(t, 0, sizeof *t);
    struct scan c = {.s = s, .len = len};
    ws(&c);
    if (c.pos >= len || s[c.pos] != '{')
        return expected(&c, "'{' (a trace is one JSON object)");
    c.pos++;
    ws(&c);
    int rc = 0;
    if (c.pos < len && s[c.pos] == '}')
        c.pos++;
    else
        for (;;) {
            if ((rc = scan_member(&c, t)) < 0)
                return rc;
            ws(&c);
            if (c.pos < len && s[c.pos] == ',') {
                c.pos++;
                ws(&c);
                continue;
            }
            if (c.pos < len && s[c.pos] == '}') {
                c.pos++;
                break;
            }
            return expected(&c, "',' or '}'");
        }
    ws(&c);
    if (c.pos < len)
        return expected(&c, "the end of the text after the object");
    return t->have_events ? 0 : ct_error_set(CT_EFORMAT, "no \"traceEvents\" array");
}

/* fn on each element of the traceEvents array at `at`, parsed on its own. */
int ct__trace_each_event(const char *s, size_t len, size_t at, ct__trace_event_fn fn, void *ctx)
{
    struct scan c = {.s = s, .len = len, .pos = at + 1};
    ws(&c);
    if (c.pos < len && s[c.pos] == ']')
        return 0;
    struct ct_json_parse_params pp = ct_json_parse_default_params();
    pp.max_bytes = MAX_EVENT_BYTES;
    for (size_t i = 0;; i++) {
        ws(&c);
        const size_t start = c.pos;
        struct ct_json_doc d;
        int rc = skip_value(&c);
        if (rc == 0 && (rc = ct_json_parse(&d, s + start, c.pos - start, &pp)) == 0) {
            rc = fn(ctx, d.root);
            ct_json_doc_free(&d);
        }
        if (rc < 0)
            return ct_error_wrap(rc, "traceEvents[%zu] at offset %zu", i, start);
        ws(&c);
        if (c.pos < len && s[c.pos] == ',') {
            c.pos++;
            continue;
        }
        if (c.pos < len && s[c.pos] == ']')
            return 0;
        return expected(&c, "',' or ']' in traceEvents");
    }
}
