/* The timeline recorder (see trace.h). One per process: the spans of every
 * thread go into one array, so the writer sees them all without merging. */
#include "core/trace.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"

atomic_int ct__trace_flag;

static struct {
    struct ct_trace_event *ev;
    size_t cap;
    atomic_size_t next;        /* slots reserved (may pass cap: those are dropped) */
    atomic_uint_least64_t dropped;
    double skew;               /* seconds added to this process's trace clock */
} g;

/* CT_TRACE_CLOCK_SKEW="<rank>:<seconds>": the named rank's trace clock runs
 * that far ahead, so a test can prove the alignment removes a real offset. */
static int read_skew(int rank, double *skew)
{
    *skew = 0.0;
    const char *v = getenv("CT_TRACE_CLOCK_SKEW");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long r = strtol(v, &end, 10);
    if (end == v || *end != ':' || r < 0 || errno)
        goto bad;
    const char *s = end + 1;
    double sec = strtod(s, &end);
    if (end == s || *end || !(sec > -1e6 && sec < 1e6))
        goto bad;
    if (r == rank)
        *skew = sec;
    return 0;
bad:
    return ct_error_set(CT_EINVAL, "CT_TRACE_CLOCK_SKEW='%.64s': expected <rank>:<seconds>", v);
}

int ct_trace_init(size_t max_bytes, int rank)
{
    ct_trace_free();
    double skew;
    int rc = read_skew(rank, &skew);
    if (rc < 0)
        return rc;
    size_t cap = max_bytes / sizeof(struct ct_trace_event);
    cap = cap > 0 ? cap : 1;
    /* calloc: the pages are touched only as spans fill them. */
    g.ev = calloc(cap, sizeof *g.ev);
    if (!g.ev)
        return ct_error_set(CT_ENOMEM, "log.trace: out of memory for %zu MiB of spans",
                            max_bytes >> 20);
    g.cap = cap;
    g.skew = skew;
    atomic_store(&g.next, 0);
    atomic_store(&g.dropped, 0);
    return 0;
}

void ct_trace_free(void)
{
    atomic_store(&ct__trace_flag, 0);
    free(g.ev);
    g.ev = NULL;
    g.cap = 0;
    atomic_store(&g.next, 0);
    atomic_store(&g.dropped, 0);
}

void ct_trace_set_on(int on) { atomic_store(&ct__trace_flag, on && g.ev != NULL); }

double ct_trace_skew(void) { return g.skew; }

double ct_trace_now(void) { return ct_now_s() + g.skew; }

void ct_trace_span_args(int tid, const char *cat, const char *name, double t0, double t1,
                        const char *k0, int64_t v0, const char *k1, int64_t v1)
{
    if (!ct_trace_on())
        return;
    size_t i = atomic_fetch_add_explicit(&g.next, 1, memory_order_relaxed);
    if (i >= g.cap) {
        atomic_fetch_add_explicit(&g.dropped, 1, memory_order_relaxed);
        return;
    }
    struct ct_trace_event *e = &g.ev[i];
    e->t0 = t0 + g.skew;
    e->t1 = (t1 >= t0 ? t1 : t0) + g.skew;
    e->cat = cat;
    e->name = name;
    e->k0 = k0;
    e->v0 = v0;
    e->k1 = k1;
    e->v1 = v1;
    e->tid = tid;
    atomic_store_explicit(&e->ready, 1, memory_order_release);
}

void ct_trace_span(int tid, const char *cat, const char *name, double t0, double t1)
{
    ct_trace_span_args(tid, cat, name, t0, t1, NULL, 0, NULL, 0);
}

size_t ct_trace_snapshot(const struct ct_trace_event **ev)
{
    size_t n = atomic_load_explicit(&g.next, memory_order_acquire);
    *ev = g.ev;
    return n < g.cap ? n : g.cap;
}

uint64_t ct_trace_dropped(void) { return atomic_load(&g.dropped); }

void ct_trace_reset(void)
{
    atomic_store(&ct__trace_flag, 0);
    if (g.ev)
        memset(g.ev, 0, g.cap * sizeof *g.ev);
    atomic_store(&g.next, 0);
    atomic_store(&g.dropped, 0);
}

/* ------------------------------------------------------------ comm lanes */

/* A comm span's begin and index, sorted by begin (then index: stable). */
struct by_begin_key {
    double t0;
    size_t i;
};

static int by_begin(const void *a, const void *b)
{
    const struct by_begin_key *x = a, *y = b;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    return x->i < y->i ? -1 : 1;
}

int ct_trace_assign_lanes(const struct ct_trace_event *ev, size_t n, int *tid_out)
{
    size_t n_comm = 0;
    for (size_t i = 0; i < n; i++) {
        int ready = atomic_load_explicit(&ev[i].ready, memory_order_acquire);
        tid_out[i] = ready ? ev[i].tid : -1;
        n_comm += ready && ev[i].tid == CT_TRACE_COMM;
    }
    if (n_comm == 0)
        return 0;
    struct by_begin_key *order = malloc(n_comm * sizeof *order);
    double *lane_end = malloc(n_comm * sizeof *lane_end);
    if (!order || !lane_end) {
        free(order);
        free(lane_end);
        return ct_error_set(CT_ENOMEM, "trace: out of memory for %zu comm spans", n_comm);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (tid_out[i] == CT_TRACE_COMM)
            order[k++] = (struct by_begin_key){ev[i].t0, i};
    qsort(order, n_comm, sizeof *order, by_begin);
    int lanes = 0;
    for (k = 0; k < n_comm; k++) {
        const struct ct_trace_event *e = &ev[order[k].i];
        int l = 0;
        while (l < lanes && lane_end[l] > e->t0)
            l++;
        if (l == lanes)
            lanes++;
        lane_end[l] = e->t1;
        tid_out[order[k].i] = CT_TRACE_COMM + l;
    }
    free(order);
    free(lane_end);
    return lanes;
}

/* ------------------------------------------------------------ the window */

static int why_set(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* A step number: digits only, 1 .. 2^62. */
static const char *parse_step(const char *s, int64_t *out)
{
    if (!isdigit((unsigned char)*s))
        return NULL;
    int64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (v > ((int64_t)1 << 62) / 10)
            return NULL;
        v = v * 10 + (*s - '0');
    }
    *out = v;
    return s;
}

int ct_trace_parse_window(const char *text, int64_t *first, int64_t *last, char *why, size_t n)
{
    *first = *last = 0;
    if (strcmp(text, "off") == 0)
        return 0;
    int64_t a = 0, b = 0;
    const char *p = strncmp(text, "steps:", 6) == 0 ? parse_step(text + 6, &a) : NULL;
    if (p && *p == '-')
        p = parse_step(p + 1, &b);
    else
        p = NULL;
    if (!p || *p)
        return why_set(why, n, "expected off or steps:A-B (global steps counted from 1, as in "
                       "steps.jsonl), found '%.64s'", text);
    if (a < 1 || b < a)
        return why_set(why, n, "'%.64s': the window's steps must satisfy 1 <= A <= B", text);
    *first = a;
    *last = b;
    return 0;
}
