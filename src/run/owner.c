/* The run directory's owner record and beat (see owner.h): the pure record
 * format and decision first, then the file and process probes, then the
 * beat thread. */
#include "run/owner.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/path.h"
#include "core/proc.h"
#include "run/json.h"

#define OWNER_FORMAT "ctrain-owner 1"
#define OWNER_MAX_BYTES ((size_t)64 << 20)

void ct_owner_free(struct ct_owner *o)
{
    free(o->ranks);
    memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------ the record */

int ct_owner_format(const struct ct_owner *o, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    char nonce[32], started[32] = "unknown";
    snprintf(nonce, sizeof nonce, "%016" PRIx64, o->nonce);
    time_t t = (time_t)o->started_unix;
    struct tm tm;
    if (t > 0 && gmtime_r(&t, &tm))
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_kv_string(&w, "format", OWNER_FORMAT);
    ct_json_kv_string(&w, "nonce", nonce);
    ct_json_kv_string(&w, "state", o->released ? "released" : "running");
    if (o->released)
        ct_json_kv_string(&w, "end", o->end);
    ct_json_kv_string(&w, "started", started);
    ct_json_kv_int(&w, "started_unix", o->started_unix);
    ct_json_kv_string(&w, "slurm_job_id", o->slurm_job[0] ? o->slurm_job : NULL);
    ct_json_kv_fixed(&w, "beat_s", o->beat_s, 3);
    ct_json_kv_int(&w, "world", o->world);
    ct_json_key(&w, "ranks");
    ct_json_begin_array(&w);
    for (int r = 0; r < o->world; r++) {
        ct_json_begin_object(&w);
        ct_json_kv_string(&w, "host", o->ranks[r].host);
        ct_json_kv_int(&w, "pid", o->ranks[r].pid);
        ct_json_kv_int(&w, "pid_start", o->ranks[r].pid_start);
        ct_json_end_object(&w);
    }
    ct_json_end_array(&w);
    ct_json_end_object(&w);
    int rc = ct_json_writer_status(&w);
    if (rc == 0) {
        size_t n = w.len;
        char *s = realloc(w.buf, n + 2);
        if (!s) {
            ct_json_writer_free(&w);
            return ct_error_set(CT_ENOMEM, "owner record: out of memory");
        }
        s[n] = '\n';
        s[n + 1] = '\0';
        *text = s;
        *len = n + 1;
        return 0;
    }
    ct_json_writer_free(&w);
    return ct_error_wrap(rc, "owner record");
}

static int parse_ranks(struct ct_owner *o, const struct ct_json_value *arr, const char *what)
{
    if (!arr || arr->type != CT_JSON_ARRAY || arr->n != (size_t)o->world || o->world < 1)
        return ct_error_set(CT_EFORMAT, "%s: \"ranks\" must be an array of \"world\" (%d) entries",
                            what, o->world);
    if (!(o->ranks = calloc((size_t)o->world, sizeof *o->ranks)))
        return ct_error_set(CT_ENOMEM, "%s: out of memory", what);
    for (int r = 0; r < o->world; r++) {
        const struct ct_json_value *e = ct_json_at(arr, (size_t)r);
        const char *host;
        int rc = ct_json_get_string(e, "host", &host);
        if (rc == 0)
            rc = ct_json_get_int64(e, "pid", &o->ranks[r].pid);
        if (rc == 0)
            rc = ct_json_get_int64(e, "pid_start", &o->ranks[r].pid_start);
        if (rc < 0)
            return ct_error_wrap(CT_EFORMAT, "%s: ranks[%d]", what, r);
        snprintf(o->ranks[r].host, sizeof o->ranks[r].host, "%s", host);
    }
    return 0;
}

static int parse_root(struct ct_owner *o, const struct ct_json_value *root, const char *what)
{
    const char *fmt, *nonce, *state, *end = "";
    int rc = ct_json_get_string(root, "format", &fmt);
    if (rc == 0 && strcmp(fmt, OWNER_FORMAT) != 0)
        return ct_error_set(CT_EFORMAT, "%s: format \"%s\", expected \"%s\"", what, fmt, OWNER_FORMAT);
    if (rc == 0)
        rc = ct_json_get_string(root, "nonce", &nonce);
    if (rc == 0)
        rc = ct_json_get_string(root, "state", &state);
    if (rc == 0)
        rc = ct_json_get_int64(root, "started_unix", &o->started_unix);
    if (rc == 0)
        rc = ct_json_get_double(root, "beat_s", &o->beat_s);
    if (rc == 0)
        rc = ct_json_get_int(root, "world", &o->world);
    if (rc < 0)
        return ct_error_wrap(CT_EFORMAT, "%s", what);
    char *e;
    o->nonce = strtoull(nonce, &e, 16);
    if (!*nonce || *e)
        return ct_error_set(CT_EFORMAT, "%s: nonce \"%s\" is not hexadecimal", what, nonce);
    if (strcmp(state, "running") != 0 && strcmp(state, "released") != 0)
        return ct_error_set(CT_EFORMAT, "%s: state \"%s\", expected running or released", what, state);
    o->released = strcmp(state, "released") == 0;
    const struct ct_json_value *v = ct_json_get(root, "slurm_job_id");
    if (v && v->type == CT_JSON_STRING)
        snprintf(o->slurm_job, sizeof o->slurm_job, "%s", v->string);
    if (o->released && ct_json_get_string(root, "end", &end) < 0)
        ct_error_clear(); /* how it ended is for people; released is what counts */
    snprintf(o->end, sizeof o->end, "%s", end);
    return parse_ranks(o, ct_json_get(root, "ranks"), what);
}

int ct_owner_parse(struct ct_owner *o, const char *text, size_t len, const char *what)
{
    memset(o, 0, sizeof *o);
    struct ct_json_doc d;
    int rc = ct_json_parse(&d, text, len, NULL);
    if (rc < 0)
        return ct_error_wrap(CT_EFORMAT, "%s", what);
    rc = parse_root(o, d.root, what);
    ct_json_doc_free(&d);
    if (rc < 0)
        ct_owner_free(o);
    return rc;
}

#define ADD(...)                                                                    \
    do {                                                                            \
        int k_ = snprintf(out + len, len < cap ? cap - len : 0, __VA_ARGS__);       \
        if (k_ > 0)                                                                 \
            len = len + (size_t)k_ < cap ? len + (size_t)k_ : cap;                  \
    } while (0)

void ct_owner_describe(const struct ct_owner *o, char *out, size_t cap)
{
    size_t len = 0;
    char started[32] = "at an unknown time";
    time_t t = (time_t)o->started_unix;
    struct tm tm;
    if (t > 0 && gmtime_r(&t, &tm))
        strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
    ADD("job %016" PRIx64, o->nonce);
    if (o->slurm_job[0])
        ADD(" (Slurm job %s)", o->slurm_job);
    ADD(", started %s, on", started);
    /* Hosts in rank order, each with its pids; a list too long ends "...". */
    for (int r = 0; r < o->world && len + 1 < cap; r++) {
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = strcmp(o->ranks[q].host, o->ranks[r].host) == 0;
        if (seen)
            continue;
        int n = 0;
        for (int q = r; q < o->world; q++)
            n += strcmp(o->ranks[q].host, o->ranks[r].host) == 0;
        ADD("%s %s (pid%s", r ? "," : "", o->ranks[r].host, n > 1 ? "s" : "");
        for (int q = r, k = 0; q < o->world && len + 1 < cap; q++)
            if (strcmp(o->ranks[q].host, o->ranks[r].host) == 0)
                ADD("%s %" PRId64, k++ ? "," : "", o->ranks[q].pid);
        ADD(")");
    }
    if (len + 1 >= cap && cap > 4)
        memcpy(out + cap - 4, "...", 4);
}

/* ------------------------------------------------------------ the decision */

enum ct_owner_verdict ct_owner_decide(const struct ct_owner *o, uint64_t nonce, const int8_t *pids,
                                      int beat, char *out, size_t cap)
{
    size_t len = 0;
    if (cap)
        out[0] = '\0';
    if (!o)
        return CT_OWNER_FREE;
    if (o->nonce == nonce)
        return CT_OWNER_OURS;
    if (o->released) {
        ADD("it ended (%s) and released the directory", o->end[0] ? o->end : "released");
        return CT_OWNER_RELEASED;
    }
    for (int r = 0; r < o->world; r++)
        if (pids[r] == CT_OWNER_PID_ALIVE) {
            ADD("its rank %d (pid %" PRId64 ") is alive on host %s", r, o->ranks[r].pid, o->ranks[r].host);
            return CT_OWNER_LIVE;
        }
    if (pids[0] == CT_OWNER_PID_GONE) {
        ADD("its rank 0 (pid %" PRId64 " on host %s), the rank that commits, is gone", o->ranks[0].pid,
            o->ranks[0].host);
        return CT_OWNER_DEAD;
    }
    if (beat < 0)
        return CT_OWNER_ASK_BEAT;
    if (beat > 0) {
        ADD("its beat in %s advanced within %.1f s", CT_OWNER_BEAT_FILE, ct_owner_wait_s(o));
        return CT_OWNER_LIVE;
    }
    ADD("its beat in %s did not advance in %.1f s", CT_OWNER_BEAT_FILE, ct_owner_wait_s(o));
    return CT_OWNER_DEAD;
}
#undef ADD

double ct_owner_wait_s(const struct ct_owner *o)
{
    double w = 2.5 * o->beat_s;
    return w < 1.0 || w != w ? 1.0 : w > 10.0 ? 10.0 : w;
}

/* ------------------------------------------------------------ files, processes */

int ct_owner_read(const char *run_dir, struct ct_owner *o)
{
    memset(o, 0, sizeof *o);
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, run_dir, CT_OWNER_FILE);
    if (rc < 0)
        return rc;
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    if (size > OWNER_MAX_BYTES) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: %" PRIu64 " bytes, more than an owner record holds", path, size);
    }
    char *text = malloc(size + 1);
    ssize_t n = text ? pread(fd, text, size, 0) : -1;
    close(fd);
    if (!text || n != (ssize_t)size) {
        free(text);
        return ct_error_set(text ? CT_EIO : CT_ENOMEM, "%s: cannot read it", path);
    }
    rc = ct_owner_parse(o, text, size, path);
    free(text);
    return rc;
}

int ct_owner_write(const char *run_dir, const struct ct_owner *o)
{
    char path[CT_PATH_MAX], *text;
    size_t len;
    int rc = ct_path_join(path, sizeof path, run_dir, CT_OWNER_FILE);
    if (rc == 0)
        rc = ct_owner_format(o, &text, &len);
    if (rc < 0)
        return rc;
    rc = ct_file_replace(path, text, len);
    free(text);
    return rc < 0 ? rc : ct_fsync_dir(run_dir);
}

int ct_owner_check(const char *run_dir, uint64_t nonce)
{
    struct ct_owner o;
    int rc = ct_owner_read(run_dir, &o);
    if (rc == CT_ENOENT)
        return ct_error_set(CT_EBUSY, "%s/%s: gone: this job (job %016" PRIx64 ") no longer owns the "
                            "run directory; not committing", run_dir, CT_OWNER_FILE, nonce);
    if (rc < 0)
        return ct_error_wrap(rc, "cannot tell whether this job (job %016" PRIx64 ") still owns %s",
                             nonce, run_dir);
    int ours = o.nonce == nonce;
    if (ours && !o.released) {
        ct_owner_free(&o);
        return 0;
    }
    char who[640];
    ct_owner_describe(&o, who, sizeof who);
    ct_owner_free(&o);
    if (ours) /* released by this job itself: a commit after the end is a bug of ours */
        return ct_error_set(CT_EBUSY, "%s/%s: this job (job %016" PRIx64 ") released the run directory "
                            "already; not committing", run_dir, CT_OWNER_FILE, nonce);
    return ct_error_set(CT_EBUSY, "%s: this job (job %016" PRIx64 ") no longer owns the run directory: "
                        "%s took it over (%s); not committing, so that two jobs never mix in "
                        "chain.jsonl", run_dir, nonce, who, CT_OWNER_FILE);
}

int64_t ct_owner_self_start(void)
{
    struct ct_proc_stat ps;
    return ct_proc_stat((int64_t)getpid(), &ps) == 0 ? ps.start : 0;
}

enum ct_owner_pid ct_owner_pid_state(const struct ct_owner_rank *r, const char *host)
{
    if (strcmp(r->host, host) != 0 || r->pid <= 0)
        return CT_OWNER_PID_UNKNOWN;
    if (kill((pid_t)r->pid, 0) != 0 && errno != EPERM)
        return CT_OWNER_PID_GONE;
    /* A zombie is gone, and a pid of another start is another process. */
    struct ct_proc_stat ps;
    if (ct_proc_stat(r->pid, &ps) == 0 &&
        (ps.state == 'Z' || ps.state == 'X' || (r->pid_start && ps.start != r->pid_start)))
        return CT_OWNER_PID_GONE;
    return CT_OWNER_PID_ALIVE;
}

/* ------------------------------------------------------------ the beat */

void ct_owner_beat_format(char out[CT_OWNER_BEAT_RECORD], uint64_t nonce, uint64_t beat)
{
    memset(out, ' ', CT_OWNER_BEAT_RECORD);
    int n = snprintf(out, CT_OWNER_BEAT_RECORD, "ctrain-owner-beat 1 nonce=%016" PRIx64 " beat=%" PRIu64,
                     nonce, beat);
    if (n >= 0 && n < CT_OWNER_BEAT_RECORD)
        out[n] = ' ';
    out[CT_OWNER_BEAT_RECORD - 1] = '\n';
}

int ct_owner_beat_parse(const char *text, size_t len, uint64_t nonce, uint64_t *beat)
{
    char buf[CT_OWNER_BEAT_RECORD + 1];
    if (len != CT_OWNER_BEAT_RECORD || text[len - 1] != '\n')
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    uint64_t n, b;
    if (sscanf(buf, "ctrain-owner-beat 1 nonce=%" SCNx64 " beat=%" SCNu64, &n, &b) != 2 || n != nonce)
        return -1;
    *beat = b;
    return 0;
}

int ct_owner_beat_read(const char *run_dir, uint64_t nonce, uint64_t *beat)
{
    char path[CT_PATH_MAX], rec[CT_OWNER_BEAT_RECORD];
    if (ct_path_join(path, sizeof path, run_dir, CT_OWNER_BEAT_FILE) < 0) {
        ct_error_clear();
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, rec, sizeof rec, 0);
    close(fd);
    return n > 0 ? ct_owner_beat_parse(rec, (size_t)n, nonce, beat) : -1;
}

/* One beat: open, write the whole record at offset 0, close (the close
 * makes it visible to other hosts on NFS). Failures are not fatal: the
 * worst a missing beat does is let a job on another host take over, which
 * the commit check then refuses this job. */
static int write_beat(struct ct_owner_beat *b)
{
    char rec[CT_OWNER_BEAT_RECORD];
    ct_owner_beat_format(rec, b->nonce, ++b->beat);
    int fd = open(b->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    ssize_t n = pwrite(fd, rec, sizeof rec, 0);
    return close(fd) == 0 && n == (ssize_t)sizeof rec ? 0 : -1;
}

static void *beat_main(void *arg)
{
    struct ct_owner_beat *b = arg;
    while (!ct_ticker_nap(&b->tick, b->period_s))
        write_beat(b);
    return NULL;
}

int ct_owner_beat_start(struct ct_owner_beat *b, const char *run_dir, uint64_t nonce, double period_s)
{
    memset(b, 0, sizeof *b);
    b->nonce = nonce;
    b->period_s = period_s > 0 ? period_s : CT_OWNER_BEAT_S;
    char dir[CT_PATH_MAX];
    int rc = ct_path_join(dir, sizeof dir, run_dir, "heartbeat");
    if (rc == 0)
        rc = ct_mkdir_p(dir, 0777);
    if (rc == 0)
        rc = ct_path_join(b->path, sizeof b->path, run_dir, CT_OWNER_BEAT_FILE);
    if (rc < 0)
        return rc;
    if (write_beat(b) < 0)
        return ct_error_set(CT_EIO, "%s: cannot write the run directory owner's beat: %s", b->path,
                            strerror(errno));
    if (ct_ticker_start(&b->tick, beat_main, b) < 0)
        return ct_error_set(CT_EIO, "cannot start the run directory owner's beat thread");
    return 0;
}

void ct_owner_beat_stop(struct ct_owner_beat *b)
{
    ct_ticker_stop(&b->tick);
}
