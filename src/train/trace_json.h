/* The text of RUN_DIR/trace.json (Chrome trace event format; the layout is
 * fixed in docs/performance.md, "Timeline trace"): each rank's part, its
 * metadata and spans as "X" events on rank 0's clock, and the frame rank 0
 * writes around the parts. Pure: spans in, text out; the collectives and the
 * file are train/trace_window.c's.
 *
 *     struct ct_trace_text t = {0};
 *     struct ct_trace_align al = {.origin = o, .offset0 = off, ...};
 *     rc = ct_trace_json_part(&t, ev, n, rank, host, &al);   // ",\n"-joined events
 *     ... rank 0: ct_trace_json_head(), the parts joined by ",\n", ct_trace_json_tail()
 *     free(t.buf);
 */
#ifndef CT_TRAIN_TRACE_JSON_H
#define CT_TRAIN_TRACE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/trace.h"

/* A growable text buffer (buf NUL-terminated once anything is in it). */
struct ct_trace_text {
    char *buf;
    size_t len, cap;
};

/* A rank's clock on rank 0's: at this rank's local time t the offset is
 * offset0 + (offset1 - offset0) * (t - local0) / (local1 - local0) (the two
 * measurements, interpolated for drift; offset0 when local1 <= local0), and
 * a span's ts is t - offset(t) - origin, origin being rank 0's time at the
 * window's start. */
struct ct_trace_align {
    double origin;
    double offset0, local0;
    double offset1, local1;
};

/* Append this rank's metadata events (process name "rank R (HOST)", its sort
 * index, the names of its threads "main", "loader", "comm K") and its ready
 * spans, ordered by begin (a parent before its children), each event a JSON
 * object, joined by ",\n" (no trailing separator). CT_ENOMEM. */
int ct_trace_json_part(struct ct_trace_text *out, const struct ct_trace_event *ev, size_t n,
                       int rank, const char *host, const struct ct_trace_align *al);

/* What the file's otherData.ctrain holds. */
struct ct_trace_meta {
    int64_t first, last;      /* the steps traced */
    int world;
    const char *const *hosts; /* (world) */
    const double *offset_us, *offset_end_us, *bound_us; /* (world) */
    int rounds;
    const int64_t *dropped;   /* (world) */
    int max_mb;
    const char *code_version;
};

/* The file's opening, up to the first event. */
const char *ct_trace_json_head(void);
/* The closing after the last event: displayTimeUnit and otherData. */
int ct_trace_json_tail(struct ct_trace_text *out, const struct ct_trace_meta *m);

/* The nanoseconds from origin of local time t (ct_trace_align). */
int64_t ct_trace_align_ns(const struct ct_trace_align *al, double t);

#endif
