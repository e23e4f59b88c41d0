/* The text of trace.json (see trace_json.h). Every value goes through the
 * run's JSON writer (run/json.h), which escapes names; timestamps are whole
 * nanoseconds written as microseconds with three decimals, so that a
 * child's end never passes its parent's by a rounding. */
#include "train/trace_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "run/json.h"

static int append(struct ct_trace_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *b = realloc(t->buf, cap);
        if (!b)
            return ct_error_set(CT_ENOMEM, "trace: out of memory for %zu bytes of JSON", cap);
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
    return 0;
}

/* One finished object of w, after a separator when the text has one. */
static int append_object(struct ct_trace_text *t, struct ct_json_writer *w)
{
    int rc = ct_json_writer_status(w);
    if (rc < 0)
        return rc;
    if (t->len > 0 && (rc = append(t, ",\n", 2)) < 0)
        return rc;
    return append(t, w->buf, w->len);
}

int64_t ct_trace_align_ns(const struct ct_trace_align *al, double t)
{
    double off = al->offset0;
    if (al->local1 > al->local0)
        off += (al->offset1 - al->offset0) * (t - al->local0) / (al->local1 - al->local0);
    return llround((t - off - al->origin) * 1e9);
}

static int metadata(struct ct_trace_text *out, struct ct_json_writer *w, int rank, int tid,
                    const char *what, const char *key, const char *s, int64_t v)
{
    ct_json_writer_reset(w);
    ct_json_begin_object(w);
    ct_json_kv_string(w, "ph", "M");
    ct_json_kv_string(w, "name", what);
    ct_json_kv_int(w, "pid", rank);
    ct_json_kv_int(w, "tid", tid);
    ct_json_key(w, "args");
    ct_json_begin_object(w);
    if (s)
        ct_json_kv_string(w, key, s);
    else
        ct_json_kv_int(w, key, v);
    ct_json_end_object(w);
    ct_json_end_object(w);
    return append_object(out, w);
}

static int span(struct ct_trace_text *out, struct ct_json_writer *w, int rank, int tid,
                const struct ct_trace_event *e, const struct ct_trace_align *al)
{
    const int64_t b = ct_trace_align_ns(al, e->t0), d = ct_trace_align_ns(al, e->t1) - b;
    ct_json_writer_reset(w);
    ct_json_begin_object(w);
    ct_json_kv_string(w, "ph", "X");
    ct_json_kv_string(w, "name", e->name);
    ct_json_kv_string(w, "cat", e->cat);
    ct_json_kv_int(w, "pid", rank);
    ct_json_kv_int(w, "tid", tid);
    ct_json_kv_fixed(w, "ts", (double)b / 1e3, 3);
    ct_json_kv_fixed(w, "dur", (double)(d > 0 ? d : 0) / 1e3, 3);
    ct_json_key(w, "args");
    ct_json_begin_object(w);
    if (e->k0)
        ct_json_kv_int(w, e->k0, e->v0);
    if (e->k1)
        ct_json_kv_int(w, e->k1, e->v1);
    ct_json_end_object(w);
    ct_json_end_object(w);
    return append_object(out, w);
}

/* A span's place in the output: by begin, then the longer first (a parent
 * before the children it starts with), then by index. */
struct order_key {
    double t0, t1;
    size_t i;
};

static int by_begin(const void *a, const void *b)
{
    const struct order_key *x = a, *y = b;
    if (x->t0 != y->t0)
        return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1)
        return x->t1 > y->t1 ? -1 : 1;
    return x->i < y->i ? -1 : 1;
}

static int names(struct ct_trace_text *out, struct ct_json_writer *w, int rank, const char *host,
                 int lanes, int loader)
{
    char label[320];
    snprintf(label, sizeof label, "rank %d (%s)", rank, host);
    int rc = metadata(out, w, rank, 0, "process_name", "name", label, 0);
    if (rc == 0)
        rc = metadata(out, w, rank, 0, "process_sort_index", "sort_index", NULL, rank);
    if (rc == 0)
        rc = metadata(out, w, rank, CT_TRACE_MAIN, "thread_name", "name", "main", 0);
    if (rc == 0 && loader)
        rc = metadata(out, w, rank, CT_TRACE_LOADER, "thread_name", "name", "loader", 0);
    for (int k = 0; k < lanes && rc == 0; k++) {
        snprintf(label, sizeof label, "comm %d", k);
        rc = metadata(out, w, rank, CT_TRACE_COMM + k, "thread_name", "name", label, 0);
    }
    return rc;
}

int ct_trace_json_part(struct ct_trace_text *out, const struct ct_trace_event *ev, size_t n,
                       int rank, const char *host, const struct ct_trace_align *al)
{
    int *tid = malloc((n ? n : 1) * sizeof *tid);
    struct order_key *order = malloc((n ? n : 1) * sizeof *order);
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    int rc = tid && order ? ct_trace_assign_lanes(ev, n, tid)
                          : ct_error_set(CT_ENOMEM, "trace: out of memory for %zu spans", n);
    int lanes = rc, loader = 0;
    size_t m = 0;
    for (size_t i = 0; rc >= 0 && i < n; i++) {
        loader |= tid[i] == CT_TRACE_LOADER;
        if (tid[i] >= 0)
            order[m++] = (struct order_key){ev[i].t0, ev[i].t1, i};
    }
    if (rc >= 0)
        rc = names(out, &w, rank, host, lanes, loader);
    if (rc == 0)
        qsort(order, m, sizeof *order, by_begin);
    for (size_t k = 0; k < m && rc == 0; k++)
        rc = span(out, &w, rank, tid[order[k].i], &ev[order[k].i], al);
    ct_json_writer_free(&w);
    free(order);
    free(tid);
    return rc;
}

const char *ct_trace_json_head(void) { return "{\"traceEvents\": [\n"; }

static void clock_object(struct ct_json_writer *w, const struct ct_trace_meta *m)
{
    ct_json_key(w, "clock");
    ct_json_begin_object(w);
    ct_json_kv_int(w, "reference_rank", 0);
    ct_json_key(w, "offset_us");
    ct_json_fixed_array(w, m->offset_us, (size_t)m->world, 3);
    ct_json_key(w, "bound_us");
    ct_json_fixed_array(w, m->bound_us, (size_t)m->world, 3);
    ct_json_kv_int(w, "rounds", m->rounds);
    ct_json_key(w, "offset_end_us");
    ct_json_fixed_array(w, m->offset_end_us, (size_t)m->world, 3);
    ct_json_end_object(w);
}

int ct_trace_json_tail(struct ct_trace_text *out, const struct ct_trace_meta *m)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_key(&w, "ctrain");
    ct_json_begin_object(&w);
    ct_json_key(&w, "steps");
    ct_json_begin_array(&w);
    ct_json_int(&w, m->first);
    ct_json_int(&w, m->last);
    ct_json_end_array(&w);
    ct_json_kv_int(&w, "world", m->world);
    ct_json_key(&w, "hosts");
    ct_json_begin_array(&w);
    for (int r = 0; r < m->world; r++)
        ct_json_string(&w, m->hosts[r]);
    ct_json_end_array(&w);
    clock_object(&w, m);
    ct_json_key(&w, "dropped_events");
    ct_json_int_array(&w, m->dropped, (size_t)m->world);
    ct_json_kv_int(&w, "max_mb", m->max_mb);
    ct_json_kv_string(&w, "code_version", m->code_version);
    ct_json_end_object(&w);
    ct_json_end_object(&w);
    static const char open[] = "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": ";
    int rc = ct_json_writer_status(&w);
    if (rc == 0)
        rc = append(out, open, sizeof open - 1);
    if (rc == 0)
        rc = append(out, w.buf, w.len);
    if (rc == 0)
        rc = append(out, "}\n", 2);
    ct_json_writer_free(&w);
    return rc;
}
