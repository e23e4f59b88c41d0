/* TensorBoard event files (see tbevents.h). */
#include "run/tbevents.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "core/log.h"
#include "core/path.h"
#include "proto/tfevent.pb-c.h"

#define TB_PREFIX "events.out.tfevents."

/* A row's scalars: the TensorBoard tag and the record key it mirrors. */
struct tb_tag {
    const char *tag;
    const char *key;
};

static const struct tb_tag step_tags[] = {
    {"train/loss", "loss"}, {"train/acc", "acc"}, {"lr", "lr"},
    {"throughput/tokens_per_s", "tokens_per_s"},
};

/* The epoch's values are tagged apart from the steps' (epoch/...): both
 * rows can land on one step, and a tag must hold one value per step. The
 * phases are the largest rank's (metrics.jsonl's *_max). */
static const struct tb_tag epoch_tags[] = {
    {"epoch/train_loss", "train_loss"},
    {"epoch/train_acc", "train_acc"},
    {"test/loss", "test_loss"},
    {"test/acc", "test_acc"},
    {"test/bpb", "val_bpb"},
    {"epoch/lr", "lr"},
    {"throughput/samples_per_s", "samples_per_s"},
    {"throughput/epoch_tokens_per_s", "tokens_per_s"},
    {"mfu", "mfu"},
    {"time/epoch_s", "epoch_s"},
    {"time/eval_s", "eval_s"},
    {"phase/data_wait_s", "data_wait_s_max"},
    {"phase/forward_backward_s", "forward_backward_s_max"},
    {"phase/exposed_comm_s", "exposed_comm_s_max"},
    {"phase/optim_s", "optim_s_max"},
    {"memory/peak_rss_mib", "peak_rss_mib"},
    {"memory/pss_mib", "pss_mib"},
};
#define TB_MAX_TAGS (sizeof epoch_tags / sizeof *epoch_tags)

/* Test hook: CT_TB_FAILPOINT=<step>:0 turns the event file into /dev/full
 * before the first row at or past <step>, so that the real write fails
 * with ENOSPC as on a full disk. */
static const struct ct_failpoint_spec fail_spec = {"CT_TB_FAILPOINT", NULL, NULL};

struct ct_tb {
    int fd;
    uint64_t off;            /* bytes written and synced */
    char path[CT_PATH_MAX];
    struct ct_failpoint fp;
};

void ct_tb_frame(uint8_t *rec, size_t len)
{
    for (int i = 0; i < 8; i++)
        rec[i] = (uint8_t)((uint64_t)len >> (8 * i));
    uint32_t c = ct_crc32c_mask(ct_crc32c(0, rec, 8));
    for (int i = 0; i < 4; i++)
        rec[8 + i] = (uint8_t)(c >> (8 * i));
    c = ct_crc32c_mask(ct_crc32c(0, rec + CT_TB_HEADER, len));
    for (int i = 0; i < 4; i++)
        rec[CT_TB_HEADER + len + i] = (uint8_t)(c >> (8 * i));
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The writer stops at its first error, with one warning; the file is cut
 * back to its last whole record so a reader sees no torn one. */
static void tb_fail(struct ct_tb *tb)
{
    ct_log_warn("tensorboard: %s; no more events are written (training goes on)",
                ct_error_message());
    ct_error_clear();
    if (tb->fd >= 0) {
        if (ftruncate(tb->fd, (off_t)tb->off) == 0)
            (void)fsync(tb->fd);
        close(tb->fd);
    }
    tb->fd = -1;
}

/* Frame, append and fsync one Event. */
static int tb_write_event(struct ct_tb *tb, const Tensorflow__Event *ev)
{
    size_t len = tensorflow__event__get_packed_size(ev);
    uint8_t *rec = malloc(CT_TB_HEADER + len + CT_TB_FOOTER);
    if (!rec)
        return ct_error_set(CT_ENOMEM, "%s: out of memory for an event", tb->path);
    tensorflow__event__pack(ev, rec + CT_TB_HEADER);
    ct_tb_frame(rec, len);
    const uint64_t n = CT_TB_HEADER + len + CT_TB_FOOTER;
    int rc = ct_pwrite_all(tb->fd, rec, n, tb->off, tb->path);
    free(rec);
    if (rc == 0 && (rc = ct_fsync_file(tb->fd, tb->path)) == 0)
        tb->off += n;
    return rc;
}

/* The value of key as the JSON line writes it (same rounding); NaN when
 * the line has null or no such key. */
static double row_value(const struct ct_rec_schema *s, const void *rec, const char *key)
{
    const struct ct_rec_key *k = ct_rec_find(s, key);
    double v = k ? ct_rec_number(k, rec, s) : NAN;
    if (!isfinite(v))
        return NAN;
    int prec = k->prec < 0 ? 0 : k->prec > 17 ? 17 : k->prec;
    const int fixed = k->type != CT_REC_DOUBLE;
    if (!fixed && prec == 0)
        prec = 1;
    if (k->type == CT_REC_INT || k->type == CT_REC_INT64 || k->type == CT_REC_BOOL)
        return v;
    char buf[400];
    snprintf(buf, sizeof buf, fixed ? "%.*f" : "%.*g", prec, v);
    return strtod(buf, NULL);
}

static void tb_row(struct ct_tb *tb, const struct ct_rec_schema *s, const void *rec, int64_t step,
                   const struct tb_tag *tags, size_t n_tags)
{
    if (!tb || tb->fd < 0)
        return;
    if (ct_failpoint_hit(&tb->fp, tb->fp.at <= step ? tb->fp.at : -1, 0)) {
        int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
        if (full >= 0) {
            dup2(full, tb->fd);
            close(full);
        }
        tb->fp.armed = 0;
    }
    Tensorflow__Summary__Value vals[TB_MAX_TAGS], *pv[TB_MAX_TAGS];
    size_t n = 0;
    for (size_t i = 0; i < n_tags && n < TB_MAX_TAGS; i++) {
        double v = row_value(s, rec, tags[i].key);
        if (isnan(v))
            continue;
        tensorflow__summary__value__init(&vals[n]);
        vals[n].tag = (char *)tags[i].tag;
        vals[n].has_simple_value = 1;
        vals[n].simple_value = (float)v;
        pv[n] = &vals[n];
        n++;
    }
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = n;
    sum.value = pv;
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = ev.has_step = 1;
    ev.wall_time = wall_now();
    ev.step = step;
    ev.summary = &sum;
    if (tb_write_event(tb, &ev) < 0)
        tb_fail(tb);
}

void ct_tb_steps(struct ct_tb *tb, const struct ct_step_record *r)
{
    tb_row(tb, &ct_step_schema, r, r->step, step_tags, sizeof step_tags / sizeof *step_tags);
}

void ct_tb_epoch(struct ct_tb *tb, const struct ct_epoch_record *r)
{
    tb_row(tb, &ct_epoch_schema, r, r->step, epoch_tags, TB_MAX_TAGS);
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Where a file of size bytes in buf stops being kept: after the last whole
 * record whose step is <= max_step. */
static uint64_t keep_until(const uint8_t *buf, uint64_t size, int64_t max_step)
{
    uint64_t off = 0;
    while (size - off >= CT_TB_HEADER + CT_TB_FOOTER) {
        const uint64_t len = le64(buf + off);
        if (le32(buf + off + 8) != ct_crc32c_mask(ct_crc32c(0, buf + off, 8)) ||
            len > size - off - CT_TB_HEADER - CT_TB_FOOTER)
            break;
        const uint8_t *data = buf + off + CT_TB_HEADER;
        if (le32(data + len) != ct_crc32c_mask(ct_crc32c(0, data, len)))
            break;
        Tensorflow__Event *ev = tensorflow__event__unpack(NULL, len, data);
        if (!ev)
            break;
        const int past = ev->has_step && ev->step > max_step;
        tensorflow__event__free_unpacked(ev, NULL);
        if (past)
            break;
        off += CT_TB_HEADER + len + CT_TB_FOOTER;
    }
    return off;
}

int ct_tb_trim(const char *path, int64_t max_step, uint64_t *cut)
{
    if (cut)
        *cut = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = ct_error_set(CT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail_stat;
    }
    const uint64_t size = (uint64_t)st.st_size;
    if (!(buf = malloc(size ? size : 1))) {
        rc = ct_error_set(CT_ENOMEM, "%s: out of memory reading %llu bytes", path,
                          (unsigned long long)size);
        goto fail_stat;
    }
    for (uint64_t got = 0; got < size;) {
        ssize_t k = pread(fd, buf + got, size - got, (off_t)got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rc = ct_error_set(CT_EIO, "%s: read failed at offset %llu: %s", path,
                              (unsigned long long)got, k < 0 ? strerror(errno) : "end of file");
            goto fail_read;
        }
        got += (uint64_t)k;
    }
    const uint64_t keep = keep_until(buf, size, max_step);
    if (keep < size) {
        if (ftruncate(fd, (off_t)keep) != 0)
            rc = ct_error_set(CT_EIO, "%s: cannot truncate to %llu bytes: %s", path,
                              (unsigned long long)keep, strerror(errno));
        else
            rc = ct_fsync_file(fd, path);
        if (rc == 0 && cut)
            *cut = size - keep;
    }
fail_read:
    free(buf);
fail_stat:
    close(fd);
    return rc;
}

/* A run continued in place: cut every earlier event file to the resumed step. */
static int trim_all(const char *dir, int64_t step)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : ct_error_set(CT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char path[CT_PATH_MAX];
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, TB_PREFIX, strlen(TB_PREFIX)) != 0)
            continue;
        uint64_t cut = 0;
        if ((rc = ct_path_join(path, sizeof path, dir, e->d_name)) == 0 &&
            (rc = ct_tb_trim(path, step, &cut)) == 0 && cut)
            ct_log_info("tensorboard: %s: cut %llu bytes of events past step %lld (redone now)", path,
                        (unsigned long long)cut, (long long)step);
    }
    closedir(d);
    return rc;
}

/* Make tb/ and a new file in it holding the file_version record. */
static int tb_create(struct ct_tb *tb, const char *run_dir, int resumed_in_place, int64_t step)
{
    char dir[CT_PATH_MAX], host[256] = "localhost", name[400];
    int rc = ct_path_join(dir, sizeof dir, run_dir, "tb");
    if (rc == 0)
        rc = ct_mkdir_p(dir, 0755);
    if (rc == 0 && resumed_in_place)
        rc = trim_all(dir, step);
    if (rc < 0)
        return rc;
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    /* A second writer of this process within the same second (a trainer
     * opened again) takes the name with ".1", ".2", ... after it, which
     * TensorBoard's name order reads after the first. */
    const long long t = (long long)time(NULL);
    for (int i = 0; tb->fd < 0 && i < 100; i++) {
        int n = i ? snprintf(name, sizeof name, TB_PREFIX "%lld.%s.%ld.%d", t, host, (long)getpid(), i)
                  : snprintf(name, sizeof name, TB_PREFIX "%lld.%s.%ld", t, host, (long)getpid());
        if (n < 0 || (size_t)n >= sizeof name)
            return ct_error_set(CT_ERANGE, "%s: host name too long for an event file name", dir);
        if ((rc = ct_path_join(tb->path, sizeof tb->path, dir, name)) < 0)
            return rc;
        tb->fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (tb->fd < 0 && errno != EEXIST)
            break;
    }
    if (tb->fd < 0)
        return ct_error_set(CT_EIO, "%s: cannot create: %s", tb->path, strerror(errno));
    Tensorflow__Event ev = TENSORFLOW__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = wall_now();
    ev.file_version = (char *)"brain.Event:2";
    if ((rc = tb_write_event(tb, &ev)) == 0 && (rc = ct_fsync_dir(dir)) == 0)
        rc = ct_fsync_dir(run_dir);
    return rc;
}

struct ct_tb *ct_tb_open(const char *run_dir, int enabled, int resumed_in_place, int64_t step)
{
    if (!enabled) {
        char dir[CT_PATH_MAX];
        if (resumed_in_place && (ct_path_join(dir, sizeof dir, run_dir, "tb") < 0 || trim_all(dir, step) < 0))
            ct_log_warn("tensorboard: %s", ct_error_message());
        ct_error_clear();
        return NULL;
    }
    struct ct_tb *tb = calloc(1, sizeof *tb);
    if (!tb) {
        ct_log_warn("tensorboard: out of memory: no events are written (training goes on)");
        return NULL;
    }
    tb->fd = -1;
    int rc = ct_failpoint_get(&tb->fp, &fail_spec);
    if (rc == 0)
        rc = tb_create(tb, run_dir, resumed_in_place, step);
    if (rc < 0) {
        tb_fail(tb);
        free(tb);
        return NULL;
    }
    return tb;
}

void ct_tb_close(struct ct_tb *tb)
{
    if (!tb)
        return;
    if (tb->fd >= 0 && close(tb->fd) != 0)
        ct_log_warn("tensorboard: %s: close failed: %s", tb->path, strerror(errno));
    free(tb);
}
