/* The trace window (see trace_window.h): when recording is on, and the
 * collective end that aligns the clocks and writes trace.json. */
#include "train/trace_window.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/path.h"
#include "core/trace.h"
#include "run/provenance.h"
#include "train/trace_json.h"

/* Bytes of one rank's part moved by one gatherv: rank 0 holds no more
 * (a variable so that tests can make it small). */
size_t ct__trace_piece = (size_t)8 << 20;
#define PIECE ct__trace_piece
#define HOST_MAX 256

int ct_trace_window_init(struct ct_trace_window *tw, struct ct_comm *comm, const char *run_dir,
                         int64_t first, int64_t last, int max_mb, int64_t step)
{
    memset(tw, 0, sizeof *tw);
    tw->comm = comm;
    tw->run_dir = run_dir;
    tw->first = first;
    tw->last = last;
    tw->max_mb = max_mb;
    tw->state = 2;
    if (first <= 0 || step >= last) {
        if (first > 0)
            ct_log_info("trace: steps %lld-%lld are past (resumed at step %lld): not traced again",
                        (long long)first, (long long)last, (long long)step);
        return 0;
    }
    tw->start = calloc((size_t)comm->world, sizeof *tw->start);
    tw->end = calloc((size_t)comm->world, sizeof *tw->end);
    if (!tw->start || !tw->end) {
        ct_trace_window_free(tw);
        return ct_error_set(CT_ENOMEM, "log.trace: out of memory");
    }
    int rc = ct_trace_init((size_t)max_mb << 20, comm->rank);
    if (rc < 0) {
        ct_trace_window_free(tw);
        return rc;
    }
    tw->state = 0;
    return 0;
}

void ct_trace_window_free(struct ct_trace_window *tw)
{
    if (tw->start || tw->end)
        ct_trace_free();
    free(tw->start);
    free(tw->end);
    tw->start = tw->end = NULL;
    tw->state = 2;
}

/* Measure the offsets, agree on the origin (rank 0's clock; every rank
 * returns from the broadcast after rank 0 entered it, so no rank records
 * before the origin by more than its bound), then record. */
static int open_window(struct ct_trace_window *tw, int64_t step)
{
    struct ct_clock_sample mine;
    int rc = ct_clocksync_measure(tw->comm, CT_TRACE_CLOCK_ROUNDS, ct_trace_now, &mine, tw->start);
    if (rc < 0)
        return ct_error_wrap(rc, "log.trace: aligning the clocks at step %lld", (long long)step);
    tw->origin = ct_trace_now();
    if ((rc = ct_comm_bcast(tw->comm, &tw->origin, sizeof tw->origin, 0)) < 0)
        return ct_error_wrap(rc, "log.trace: the window's start");
    tw->traced_first = step;
    tw->state = 1;
    ct_trace_set_on(1);
    return 0;
}

/* Rank 0: the file's bytes, appended at *off; the first failure is kept in
 * *wrc and nothing more is written (the peers' parts are still received). */
static void put(int fd, const char *path, const void *data, size_t n, uint64_t *off, int *wrc)
{
    if (*wrc < 0 || fd < 0 || n == 0)
        return;
    *wrc = ct_pwrite_all(fd, data, n, *off, path);
    *off += n;
}

struct writing {
    int fd;
    char tmp[CT_PATH_MAX], final[CT_PATH_MAX];
    uint64_t off;
    int rc;       /* rank 0: the first failure to write */
    int any;      /* rank 0: a part is in the file (the next needs a separator) */
};

/* Rank r's part to rank 0, PIECE bytes per gatherv; rank 0 writes it. */
static int move_part(struct ct_trace_window *tw, struct writing *wr, int r, const char *part,
                     int64_t size, char *recv)
{
    struct ct_comm *c = tw->comm;
    int *counts = calloc((size_t)c->world * 2, sizeof *counts);
    if (!counts)
        return ct_error_set(CT_ENOMEM, "log.trace: out of memory");
    int rc = 0;
    if (c->rank == 0 && size > 0 && wr->any)
        put(wr->fd, wr->tmp, ",\n", 2, &wr->off, &wr->rc);
    wr->any |= size > 0;
    for (int64_t at = 0; at < size && rc == 0; at += (int64_t)PIECE) {
        const int n = (int)(size - at < (int64_t)PIECE ? size - at : (int64_t)PIECE);
        counts[r] = n;
        static const char none = 0;
        rc = r == 0 ? 0
                    : ct_comm_gatherv(c, c->rank == r ? part + at : &none, c->rank == r ? n : 0,
                                      recv, counts, counts + c->world, CT_ELEM_BYTE, 0);
        if (rc == 0 && c->rank == 0)
            put(wr->fd, wr->tmp, r == 0 ? part + at : recv, (size_t)n, &wr->off, &wr->rc);
    }
    free(counts);
    return rc < 0 ? ct_error_wrap(rc, "log.trace: gathering rank %d's events", r) : 0;
}

/* Rank 0: the temporary file (test-only CT_TRACE_FAILPOINT=enospc writes
 * to /dev/full instead, failing as a full disk does). */
static void open_file(struct ct_trace_window *tw, struct writing *wr)
{
    wr->fd = -1;
    int rc = ct_path_join(wr->final, sizeof wr->final, tw->run_dir, "trace.json");
    if (rc == 0)
        rc = ct_path_join(wr->tmp, sizeof wr->tmp, tw->run_dir, "trace.json.tmp");
    if (rc == 0) {
        const char *fp = getenv("CT_TRACE_FAILPOINT");
        const int full = fp && strcmp(fp, "enospc") == 0;
        wr->fd = open(full ? "/dev/full" : wr->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (wr->fd < 0)
            rc = ct_error_set(CT_EIO, "%s: cannot create: %s", wr->tmp, strerror(errno));
    }
    wr->rc = rc;
    put(wr->fd, wr->tmp, ct_trace_json_head(), strlen(ct_trace_json_head()), &wr->off, &wr->rc);
}

/* Rank 0: synced and renamed into place, or a warning and no file. */
static void close_file(struct ct_trace_window *tw, struct writing *wr)
{
    if (wr->rc == 0)
        wr->rc = ct_fsync_file(wr->fd, wr->tmp);
    if (wr->fd >= 0 && close(wr->fd) != 0 && wr->rc == 0)
        wr->rc = ct_error_set(CT_EIO, "%s: close failed: %s", wr->tmp, strerror(errno));
    struct stat st;
    const int replacing = wr->rc == 0 && stat(wr->final, &st) == 0 && S_ISREG(st.st_mode);
    if (wr->rc == 0 && rename(wr->tmp, wr->final) != 0)
        wr->rc = ct_error_set(CT_EIO, "%s: cannot rename it to %s: %s", wr->tmp, wr->final,
                              strerror(errno));
    if (wr->rc < 0) {
        ct_log_warn("trace: %s; no trace.json written (training goes on)", ct_error_message());
        unlink(wr->tmp);
        return;
    }
    (void)ct_fsync_dir(tw->run_dir);
    if (replacing)
        ct_log_info("trace: %s of an earlier job replaced", wr->final);
    ct_log_info("trace: steps %lld-%lld of %d ranks written to %s (%.1f MiB)",
                (long long)tw->traced_first, (long long)tw->traced_last, tw->comm->world,
                wr->final, (double)wr->off / (1 << 20));
}

/* The recorded barrier: no rank leaves it before every rank entered it, so
 * its aligned ends and begins check the alignment (tests/e2e/test_trace.sh).
 * Then recording stops and the clocks are measured again. */
static int end_recording(struct ct_trace_window *tw)
{
    struct ct_clock_sample mine;
    const double b0 = ct_now_s();
    int rc = ct_comm_barrier(tw->comm);
    ct_trace_span(CT_TRACE_MAIN, "clock", "barrier", b0, ct_now_s());
    ct_trace_set_on(0);
    if (rc == 0)
        rc = ct_clocksync_measure(tw->comm, CT_TRACE_CLOCK_ROUNDS, ct_trace_now, &mine, tw->end);
    return rc < 0 ? ct_error_wrap(rc, "log.trace: the window's end") : 0;
}

/* otherData.ctrain from the measurements and the exchanged counts, after
 * the last part. */
static void write_tail(struct ct_trace_window *tw, struct writing *wr, const int64_t *counts,
                      const char *hosts)
{
    const int W = tw->comm->world;
    const char **names = calloc((size_t)W, sizeof *names);
    double *us = calloc((size_t)W * 3, sizeof *us);
    struct ct_trace_text t = {0};
    int rc = names && us ? 0 : ct_error_set(CT_ENOMEM, "log.trace: out of memory");
    for (int r = 0; rc == 0 && r < W; r++) {
        names[r] = hosts + (size_t)r * HOST_MAX;
        us[r] = tw->start[r].offset_s * 1e6;
        us[W + r] = tw->end[r].offset_s * 1e6;
        double b = tw->start[r].bound_s > tw->end[r].bound_s ? tw->start[r].bound_s : tw->end[r].bound_s;
        us[2 * W + r] = b * 1e6;
    }
    const struct ct_trace_meta m = {
        .first = tw->traced_first, .last = tw->traced_last, .world = W, .hosts = names,
        .offset_us = us, .offset_end_us = us + W, .bound_us = us + 2 * W,
        .rounds = CT_TRACE_CLOCK_ROUNDS, .dropped = counts + W, .max_mb = tw->max_mb,
        .code_version = ct_code_version()};
    if (rc == 0)
        rc = ct_trace_json_tail(&t, &m);
    if (rc == 0)
        put(wr->fd, wr->tmp, t.buf, t.len, &wr->off, &wr->rc);
    else if (wr->rc == 0)
        wr->rc = rc;
    free(t.buf);
    free(us);
    free(names);
}

/* Rank 0: what the counts say went wrong on the way (not the file). */
static void warn_counts(const struct ct_trace_window *tw, const int64_t *counts)
{
    const int W = tw->comm->world;
    int64_t dropped = 0;
    for (int r = 0; r < W; r++) {
        dropped += counts[W + r];
        if (counts[2 * W + r])
            ct_log_warn("trace: rank %d could not format its events (out of memory): they are "
                        "left out of trace.json", r);
    }
    if (dropped > 0)
        ct_log_warn("trace: %lld events did not fit in log.trace_max_mb = %d MiB and were "
                    "dropped (otherData.ctrain.dropped_events says per rank)",
                    (long long)dropped, tw->max_mb);
}

/* Every rank's part through rank 0 into the file. counts: (3, world) part
 * sizes, dropped spans, parts that failed; hosts (world, HOST_MAX). */
static int write_parts(struct ct_trace_window *tw, const struct ct_trace_text *part,
                       const int64_t *counts, const char *hosts)
{
    struct ct_comm *c = tw->comm;
    struct writing wr = {.fd = -1};
    char *recv = c->rank == 0 ? malloc(PIECE) : NULL;
    int rc = c->rank == 0 && !recv ? ct_error_set(CT_ENOMEM, "log.trace: out of memory") : 0;
    /* Every rank must take part in every gatherv: out of memory on rank 0
     * ends the job through the agreement, before any of them. */
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return rc;
    if (c->rank == 0) {
        open_file(tw, &wr);
        warn_counts(tw, counts);
    }
    for (int r = 0; r < c->world && rc == 0; r++)
        rc = move_part(tw, &wr, r, part->buf, counts[r], recv);
    if (rc == 0 && c->rank == 0) {
        write_tail(tw, &wr, counts, hosts);
        close_file(tw, &wr);
    } else if (wr.fd >= 0) {
        close(wr.fd);
        unlink(wr.tmp);
    }
    free(recv);
    return rc;
}

static int finish(struct ct_trace_window *tw, int64_t step)
{
    struct ct_comm *c = tw->comm;
    const int W = c->world, r = c->rank;
    tw->state = 2;
    tw->traced_last = step;
    int rc = end_recording(tw);
    if (rc < 0)
        return rc;
    const struct ct_trace_event *ev;
    const size_t n = ct_trace_snapshot(&ev);
    const struct ct_trace_align al = {tw->origin, tw->start[r].offset_s, tw->start[r].local_s,
                                      tw->end[r].offset_s, tw->end[r].local_s};
    struct ct_trace_text part = {0};
    const int failed = ct_trace_json_part(&part, ev, n, r, c->host, &al) < 0;
    int64_t *counts = calloc((size_t)W * 3, sizeof *counts);
    char *hosts = calloc(r == 0 ? (size_t)W : 1, HOST_MAX);
    char host[HOST_MAX] = {0};
    snprintf(host, sizeof host, "%s", c->host);
    rc = counts && hosts ? 0 : ct_error_set(CT_ENOMEM, "log.trace: out of memory");
    if ((rc = ct_comm_agree(c, rc)) == 0) {
        counts[r] = failed ? 0 : (int64_t)part.len;
        counts[W + r] = (int64_t)ct_trace_dropped();
        counts[2 * W + r] = failed;
        rc = ct_comm_allreduce_i64(c, counts, (size_t)W * 3, CT_REDUCE_SUM);
    }
    if (rc == 0)
        rc = ct_comm_gather(c, host, HOST_MAX, r == 0 ? hosts : NULL, 0);
    if (rc == 0)
        rc = write_parts(tw, &part, counts, hosts);
    free(hosts);
    free(counts);
    free(part.buf);
    return rc < 0 ? ct_error_wrap(rc, "log.trace: writing trace.json") : 0;
}

int ct_trace_window_step(struct ct_trace_window *tw, int64_t step)
{
    if (tw->state == 1 && step >= tw->last)
        return finish(tw, step);
    if (tw->state == 0 && step + 1 >= tw->first && step + 1 <= tw->last)
        return open_window(tw, step + 1);
    return 0;
}

int ct_trace_window_close(struct ct_trace_window *tw, int64_t step)
{
    return tw->state == 1 ? finish(tw, step) : 0;
}
