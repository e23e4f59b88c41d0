/* Reading RUN_DIR/trace.json for the report's timeline (report-impl.h), in
 * the format log.trace writes (docs/performance.md, "Timeline trace"):
 * one object {"traceEvents": [...], "otherData": {"ctrain": {...}}}, complete
 * events ("ph": "X") with pid = rank, tid 0 main, 1 loader, 2 + K comm lane K.
 *
 * A trace may hold tens of MiB: its events are read one at a time
 * (report_trace_scan.c), in two passes: the first finds the steps each rank
 * traced and picks one, the second keeps the events of that step (at most
 * CT__TL_MAX_SPANS). Memory: the file's text and what is kept, never a tree
 * of the whole file.
 *
 * Deliberately not here: drawing (report_timeline.c), events other than
 * complete ones and metadata (Chrome's instant or counter events are
 * skipped), repairing a trace (a contract broken is an error: the page says
 * which event and what).
 */
#include "report/report-impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "run/json.h"

#define MAX_PID (1 << 20)        /* ranks beyond are no rank of ours */
#define MAX_STEP_EVENTS (1 << 18) /* "step" events kept by the first pass */
#define MAX_LABELS 4096          /* process names kept */

/* ================================================================ one event */

struct event {
    const char *ph, *name, *cat;
    int64_t pid, tid;
    double ts, dur;
    const struct ct_json_value *args; /* NULL when absent */
};

static int number(const struct ct_json_value *o, const char *key, double *out)
{
    const struct ct_json_value *v = ct_json_get(o, key);
    if (!v)
        return ct_error_set(CT_EFORMAT, "missing key \"%s\"", key);
    if (v->type != CT_JSON_NUMBER)
        return ct_error_set(CT_EFORMAT, "key \"%s\": expected a number, found %s", key,
                            ct_json_type_name(v->type));
    *out = v->number;
    return fabs(*out) <= 1e15 ? 0 : ct_error_set(CT_EFORMAT, "key \"%s\": %g us is beyond 30 years", key, *out);
}

/* A missing key is CT_ENOENT here, CT_EFORMAT once out of the parse. */
static int id(const struct ct_json_value *o, const char *key, int64_t max, int64_t *out)
{
    int rc = ct_json_get_int64(o, key, out);
    if (rc == 0 && (*out < 0 || *out >= max))
        return ct_error_set(CT_EFORMAT, "key \"%s\": %lld is outside 0..%lld", key, (long long)*out,
                            (long long)max - 1);
    return rc;
}

/* The fields of an event the contract fixes; e->ph NULL for kinds that are
 * skipped (neither "X" nor "M"). */
static int read_event(const struct ct_json_value *v, struct event *e)
{
    memset(e, 0, sizeof *e);
    if (v->type != CT_JSON_OBJECT)
        return ct_error_set(CT_EFORMAT, "expected an object, found %s", ct_json_type_name(v->type));
    const char *ph;
    int rc = ct_json_get_string(v, "ph", &ph);
    if (rc < 0)
        return rc;
    const int complete = strcmp(ph, "X") == 0;
    if (!complete && strcmp(ph, "M") != 0)
        return 0;
    if ((rc = ct_json_get_string(v, "name", &e->name)) < 0 || (rc = id(v, "pid", MAX_PID, &e->pid)) < 0)
        return rc;
    e->args = ct_json_get(v, "args");
    if (e->args && e->args->type != CT_JSON_OBJECT)
        return ct_error_set(CT_EFORMAT, "key \"args\": expected an object, found %s",
                            ct_json_type_name(e->args->type));
    if (complete && ((rc = ct_json_get_string(v, "cat", &e->cat)) < 0 || (rc = id(v, "tid", INT32_MAX, &e->tid)) < 0 ||
                     (rc = number(v, "ts", &e->ts)) < 0 || (rc = number(v, "dur", &e->dur)) < 0))
        return rc;
    if (complete && e->dur < 0)
        return ct_error_set(CT_EFORMAT, "key \"dur\": %g is negative", e->dur);
    e->ph = ph;
    return 0;
}

/* An integer of the args, -1 when absent or no integer. */
static int64_t arg_int(const struct event *e, const char *key)
{
    int64_t v;
    return e->args && ct_json_get_int64(e->args, key, &v) == 0 ? v : -1;
}

/* ================================================================ pass 1: the steps */

struct step_ev {
    int64_t step;
    double ts, dur;
    int pid;
};

struct label {
    int pid;
    char text[128];
};

struct pass1 {
    struct step_ev *steps;
    size_t n_steps, cap_steps;
    struct label *labels;
    size_t n_labels, cap_labels;
    unsigned char *seen; /* a bit per pid that has a complete event */
    int n_seen;
};

/* s truncated to fit cap bytes, at a UTF-8 character's start; control
 * characters (a "\u0001" in a name) become '?': XML has no way to say them. */
static void copy_text(char *dst, size_t cap, const char *s)
{
    size_t n = strlen(s);
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    for (size_t i = 0; i < n; i++)
        dst[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    dst[n] = '\0';
}

static int keep_step(struct pass1 *p, const struct event *e)
{
    int64_t step;
    int rc = e->args ? ct_json_get_int64(e->args, "step", &step) : CT_ENOENT;
    if (rc == CT_ENOENT)
        return ct_error_set(CT_EFORMAT, "a \"step\" event without args.step");
    if (rc < 0)
        return ct_error_wrap(rc, "args");
    if (p->n_steps == MAX_STEP_EVENTS)
        return 0; /* a window this long: the first steps are enough to pick from */
    if (p->n_steps == p->cap_steps) {
        size_t cap = p->cap_steps ? 2 * p->cap_steps : 256;
        struct step_ev *s = realloc(p->steps, cap * sizeof *s);
        if (!s)
            return ct_error_set(CT_ENOMEM, "out of memory for %zu step events", cap);
        p->steps = s;
        p->cap_steps = cap;
    }
    p->steps[p->n_steps++] = (struct step_ev){step, e->ts, e->dur, (int)e->pid};
    return 0;
}

static int pass1_event(void *ctx, const struct ct_json_value *v)
{
    struct pass1 *p = ctx;
    struct event e;
    int rc = read_event(v, &e);
    if (rc < 0 || !e.ph)
        return rc;
    if (e.ph[0] == 'M') {
        const char *name;
        if (strcmp(e.name, "process_name") != 0 || p->n_labels == MAX_LABELS)
            return 0;
        if ((rc = ct_json_get_string(e.args, "name", &name)) < 0) /* no args: "found nothing" */
            return ct_error_wrap(rc, "process_name of pid %lld: args", (long long)e.pid);
        if (p->n_labels == p->cap_labels) {
            struct label *l = realloc(p->labels, (p->cap_labels ? 2 * p->cap_labels : 16) * sizeof *l);
            if (!l)
                return ct_error_set(CT_ENOMEM, "out of memory for %zu process names", p->n_labels);
            p->labels = l;
            p->cap_labels = p->cap_labels ? 2 * p->cap_labels : 16;
        }
        p->labels[p->n_labels].pid = (int)e.pid;
        copy_text(p->labels[p->n_labels++].text, sizeof p->labels[0].text, name);
        return 0;
    }
    if (!(p->seen[e.pid / 8] & (1u << (e.pid % 8)))) {
        p->seen[e.pid / 8] |= (unsigned char)(1u << (e.pid % 8));
        p->n_seen++;
    }
    return strcmp(e.cat, "step") == 0 && strcmp(e.name, "step") == 0 ? keep_step(p, &e) : 0;
}

static int cmp_step(const void *a, const void *b)
{
    const struct step_ev *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* The ranks of the step at steps[i] (sorted), each once; *end: past its last. */
static int distinct_pids(const struct step_ev *s, size_t n, size_t i, size_t *end)
{
    int count = 0;
    size_t k = i;
    for (; k < n && s[k].step == s[i].step; k++)
        count += k == i || s[k].pid != s[k - 1].pid;
    *end = k;
    return count;
}

/* The step drawn: of the steps traced on the most ranks (every rank, in a
 * whole trace), the middle one (for steps 10-12, step 11: the first may
 * carry the window's start, the last its end). */
static int choose_step(struct pass1 *p, struct ct__timeline *t)
{
    if (p->n_steps == 0)
        return ct_error_set(CT_EFORMAT, "no \"step\" event (cat \"step\"): no step to draw");
    qsort(p->steps, p->n_steps, sizeof *p->steps, cmp_step);
    int best = 0;
    for (size_t i = 0, j; i < p->n_steps; i = j) {
        const int n = distinct_pids(p->steps, p->n_steps, i, &j);
        t->n_candidates = n > best ? 0 : t->n_candidates;
        best = n > best ? n : best;
        if (n == best && t->n_candidates++ == 0)
            t->first = p->steps[i].step;
        if (n == best)
            t->last = p->steps[i].step;
    }
    size_t k = t->n_candidates / 2;
    for (size_t i = 0, j; i < p->n_steps; i = j)
        if (distinct_pids(p->steps, p->n_steps, i, &j) == best && k-- == 0) {
            t->step = p->steps[i].step;
            break;
        }
    t->on_ranks = best;
    if (t->world <= 0)
        t->world = p->n_seen;
    t->full = best >= t->world;
    return 0;
}

/* The ranks drawn: the first CT__TL_MAX_RANKS that traced the step, each
 * with its step (absolute times until pass 2 moves them). */
static void choose_ranks(const struct pass1 *p, struct ct__timeline *t)
{
    for (size_t k = 0; k < p->n_steps; k++) {
        const struct step_ev *s = &p->steps[k];
        if (s->step != t->step || (k > 0 && p->steps[k - 1].step == s->step && p->steps[k - 1].pid == s->pid))
            continue;
        if (t->n_ranks == CT__TL_MAX_RANKS)
            break;
        struct ct__tl_rank *r = &t->ranks[t->n_ranks++];
        r->rank = s->pid;
        r->ts = s->ts;
        r->dur = s->dur;
        r->bound_us = NAN;
        r->label[0] = '\0'; /* otherData's host, or "rank R", when no process_name */
        for (size_t i = 0; i < p->n_labels; i++)
            if (p->labels[i].pid == s->pid)
                memcpy(r->label, p->labels[i].text, sizeof r->label);
    }
}

/* ================================================================ otherData */

/* otherData.ctrain.KEY: NULL when absent; CT_EFORMAT when not of `type`. */
static const struct ct_json_value *ctrain_key(const struct ct_json_value *other, const char *key,
                                              enum ct_json_type type, int *rc)
{
    const struct ct_json_value *c = ct_json_get(other, "ctrain");
    const char *dot = strchr(key, '.');
    char head[32];
    if (dot && (size_t)(dot - key) < sizeof head) { /* clock.bound_us */
        snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
        c = ct_json_get(c, head);
    }
    const struct ct_json_value *v = ct_json_get(c, dot ? dot + 1 : key);
    *rc = 0;
    if (v && v->type != type) {
        *rc = ct_error_set(CT_EFORMAT, "otherData.ctrain.%s: expected %s, found %s", key,
                           type == CT_JSON_ARRAY ? "an array" : "a number", ct_json_type_name(v->type));
        return NULL;
    }
    return v;
}

/* Element i of an array of otherData.ctrain, of `type`; NULL when absent. */
static const struct ct_json_value *ctrain_item(const struct ct_json_value *arr, const char *key, size_t i,
                                               enum ct_json_type type, int *rc)
{
    const struct ct_json_value *v = ct_json_at(arr, i);
    *rc = 0;
    if (v && v->type != type)
        *rc = ct_error_set(CT_EFORMAT, "otherData.ctrain.%s[%zu]: expected %s, found %s", key, i,
                           type == CT_JSON_STRING ? "a string" : "a number", ct_json_type_name(v->type));
    return *rc ? NULL : v;
}

/* What the picking of the step needs: world; and the caption's rounds and
 * dropped events. Every key is optional (a trace of another tool has none). */
static int read_other_counts(const struct ct_json_value *other, struct ct__timeline *t)
{
    int rc;
    const struct ct_json_value *v = ctrain_key(other, "world", CT_JSON_NUMBER, &rc);
    if (v && (!v->is_int || v->integer < 1 || v->integer >= MAX_PID))
        return ct_error_set(CT_EFORMAT, "otherData.ctrain.world: expected a count of ranks, found %g", v->number);
    t->world = v ? (int)v->integer : 0;
    if (rc == 0 && (v = ctrain_key(other, "clock.rounds", CT_JSON_NUMBER, &rc)) != NULL)
        t->rounds = v->is_int ? v->integer : -1;
    const struct ct_json_value *a = rc == 0 ? ctrain_key(other, "dropped_events", CT_JSON_ARRAY, &rc) : NULL;
    for (size_t i = 0; rc == 0 && a && i < a->n; i++)
        if ((v = ctrain_item(a, "dropped_events", i, CT_JSON_NUMBER, &rc)) != NULL && v->is_int && v->integer > 0)
            t->dropped += v->integer;
    return rc;
}

/* The drawn ranks' clock bounds and, without a process_name, their hosts. */
static int read_other_ranks(const struct ct_json_value *other, struct ct__timeline *t)
{
    int rc;
    const struct ct_json_value *hosts = ctrain_key(other, "hosts", CT_JSON_ARRAY, &rc);
    const struct ct_json_value *bounds = rc == 0 ? ctrain_key(other, "clock.bound_us", CT_JSON_ARRAY, &rc) : NULL;
    for (size_t i = 0; rc == 0 && bounds && i < bounds->n; i++) {
        const struct ct_json_value *b = ctrain_item(bounds, "bound_us", i, CT_JSON_NUMBER, &rc);
        if (b && (isnan(t->bound_us) || b->number > t->bound_us))
            t->bound_us = b->number;
    }
    for (size_t k = 0; rc == 0 && k < t->n_ranks; k++) {
        struct ct__tl_rank *r = &t->ranks[k];
        const struct ct_json_value *b = ctrain_item(bounds, "bound_us", (size_t)r->rank, CT_JSON_NUMBER, &rc);
        r->bound_us = b ? b->number : NAN;
        const struct ct_json_value *h = rc == 0 ? ctrain_item(hosts, "hosts", (size_t)r->rank, CT_JSON_STRING, &rc)
                                                : NULL;
        char host[104];
        if (!r->label[0] && h) {
            copy_text(host, sizeof host, h->string);
            snprintf(r->label, sizeof r->label, "rank %d (%s)", r->rank, host);
        } else if (!r->label[0])
            snprintf(r->label, sizeof r->label, "rank %d", r->rank);
    }
    return rc;
}

/* ================================================================ pass 2: the step's events */

struct pass2 {
    struct ct__timeline *t;
    size_t cap, n_modules;
};

static const struct ct__tl_rank *drawn_rank(const struct ct__timeline *t, int64_t pid)
{
    for (size_t k = 0; k < t->n_ranks; k++)
        if (t->ranks[k].rank == pid)
            return &t->ranks[k];
    return NULL;
}

static int pass2_event(void *ctx, const struct ct_json_value *v)
{
    struct pass2 *p = ctx;
    struct ct__timeline *t = p->t;
    struct event e;
    int rc = read_event(v, &e);
    const struct ct__tl_rank *r = rc == 0 && e.ph && e.ph[0] == 'X' ? drawn_rank(t, e.pid) : NULL;
    if (!r)
        return rc;
    const double s = r->ts, end = r->ts + r->dur;
    const int inside = e.dur > 0 ? e.ts < end && e.ts + e.dur > s : e.ts >= s && e.ts <= end;
    const int step = strcmp(e.cat, "step") == 0 && strcmp(e.name, "step") == 0;
    if (!inside || (step && arg_int(&e, "step") != t->step))
        return 0;
    const int module = strcmp(e.cat, "module") == 0;
    if ((module ? p->n_modules : t->n_spans - p->n_modules) >= CT__TL_MAX_SPANS / 2) {
        t->n_left_out++;
        return 0;
    }
    if (t->n_spans == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        struct ct__tl_span *sp = realloc(t->spans, cap * sizeof *sp);
        if (!sp)
            return ct_error_set(CT_ENOMEM, "out of memory for %zu spans", cap);
        t->spans = sp;
        p->cap = cap;
    }
    struct ct__tl_span *sp = &t->spans[t->n_spans];
    *sp = (struct ct__tl_span){.ts = e.ts, .dur = e.dur, .rank = (int)e.pid, .tid = (int)e.tid,
                               .depth = (int)t->n_spans, /* the file's order, until the depths */
                               .bucket = arg_int(&e, "bucket"), .bytes = arg_int(&e, "bytes")};
    copy_text(sp->cat, sizeof sp->cat, e.cat);
    copy_text(sp->name, sizeof sp->name, e.name);
    t->n_spans++;
    p->n_modules += module;
    return 0;
}

/* By rank, tid, start, the longer first (a parent before its children), the
 * file's order. */
static int cmp_span(const void *a, const void *b)
{
    const struct ct__tl_span *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur)
        return x->dur > y->dur ? -1 : 1;
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* Times from the chart's 0; each span's nesting depth on its tid. Ends are
 * compared with a margin of the file's rounding (3 decimals of a us): a
 * child written as ending 0.001 after its parent is still its child. */
static void place_spans(struct ct__timeline *t)
{
    double t0 = INFINITY;
    for (size_t k = 0; k < t->n_ranks; k++)
        t0 = fmin(t0, t->ranks[k].ts);
    for (size_t k = 0; k < t->n_ranks; k++) {
        t->ranks[k].ts -= t0;
        t->span_us = fmax(t->span_us, t->ranks[k].ts + t->ranks[k].dur);
    }
    for (size_t i = 0; i < t->n_spans; i++)
        t->spans[i].ts -= t0;
    qsort(t->spans, t->n_spans, sizeof *t->spans, cmp_span);
    enum { MAX_NEST = 64 };
    double ends[MAX_NEST];
    int top = 0;
    for (size_t i = 0; i < t->n_spans; i++) {
        struct ct__tl_span *s = &t->spans[i];
        if (i == 0 || s->rank != s[-1].rank || s->tid != s[-1].tid)
            top = 0;
        while (top > 0 && ends[top - 1] <= s->ts + 0.0015)
            top--;
        s->depth = top;
        if (top < MAX_NEST)
            ends[top++] = s->ts + s->dur;
    }
}

/* ================================================================ the trace */

int ct__timeline_parse(const char *text, size_t len, struct ct__timeline *t)
{
    memset(t, 0, sizeof *t);
    t->bound_us = NAN;
    t->rounds = -1;
    struct ct__trace_top top;
    struct pass1 p = {0};
    int rc = ct__trace_scan_top(text, len, &top);
    if (rc == 0)
        rc = read_other_counts(top.other.root, t);
    if (rc == 0) {
        p.seen = calloc(MAX_PID / 8, 1);
        if (!p.seen)
            rc = ct_error_set(CT_ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = ct__trace_each_event(text, len, top.events_at, pass1_event, &p);
    if (rc == 0 && (rc = choose_step(&p, t)) == 0) {
        choose_ranks(&p, t);
        rc = read_other_ranks(top.other.root, t);
    }
    struct pass2 p2 = {.t = t};
    if (rc == 0)
        rc = ct__trace_each_event(text, len, top.events_at, pass2_event, &p2);
    if (rc == 0)
        place_spans(t);
    free(p.steps);
    free(p.labels);
    free(p.seen);
    ct_json_doc_free(&top.other);
    if (rc < 0)
        ct__timeline_free(t);
    return rc == CT_ENOENT ? CT_EFORMAT : rc; /* a key missing: the file is there */
}

/* The file is mapped, not read: its pages are the page cache's, and only
 * what is kept of the step is the report's memory. */
int ct__timeline_load(const char *path, struct ct__timeline *t)
{
    memset(t, 0, sizeof *t);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st) == 0 ? 0 : ct_error_set(CT_EIO, "%s: %s", path, strerror(errno));
    if (rc == 0 && !S_ISREG(st.st_mode))
        rc = ct_error_set(CT_EFORMAT, "%s: not a regular file", path);
    if (rc == 0 && (uint64_t)st.st_size > CT__TL_MAX_BYTES)
        rc = ct_error_set(CT_ERANGE, "%s: %lld MiB, over the report's limit of %zu MiB for a trace (trace fewer "
                          "steps)", path, (long long)(st.st_size >> 20), CT__TL_MAX_BYTES >> 20);
    const size_t size = rc == 0 ? (size_t)st.st_size : 0;
    void *map = rc == 0 && size > 0 ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    if (map == MAP_FAILED)
        rc = ct_error_set(CT_EIO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
    close(fd);
    if (rc == 0 && (rc = ct__timeline_parse(map ? map : "", size, t)) < 0)
        rc = ct_error_wrap(rc, "%s", path);
    if (map && map != MAP_FAILED)
        munmap(map, size);
    return rc;
}

void ct__timeline_free(struct ct__timeline *t)
{
    free(t->spans);
    t->spans = NULL;
    t->n_spans = 0;
}
