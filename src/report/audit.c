/* Read-only audits (see audit.h): verify walks chain.jsonl, diff compares
 * two checkpoints section by section (ckpt/compare.h), summary reads
 * metrics.jsonl. Everything is read through the checkpoint reader (which
 * verifies every digest) and the run-directory reader (run/runread.h); nothing here writes
 * into an audited run directory. The audit that trains, replay, is
 * src/train/replay.c. */
#include "report/audit.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/compare.h"
#include "config/config.h"
#include "core/error.h"
#include "core/path.h"
#include "core/sha256.h"
#include "run/record.h"
#include "run/rundir.h"
#include "run/runread.h"
#include "ckpt/chain.h"

/* ================================================================ verify */

#define MAX_DATA 8

/* What verify keeps of one chain entry after reading its checkpoint. */
struct vnode {
    struct ct_chain_entry e;
    int present;          /* the checkpoint directory holds this entry's checkpoint */
    int superseded;       /* a later entry of the same step replaced it */
    int parent;           /* index of the parent entry, -1 when none in the chain */
    char *config;         /* recorded config text (present only) */
    char *changes;        /* recorded changes, "; "-joined (present only) */
    int n_data;
    char data_path[MAX_DATA][512];
    uint8_t data_sha[MAX_DATA][CT_SHA256_LEN];
    char status[512];     /* "ok", "absent", "BROKEN: ..." */
};

struct verify {
    const char *run_dir;
    FILE *out;
    struct vnode *v;
    size_t n;
    int breaks;
    char first_break[1024];
};

static void vbreak(struct verify *V, struct vnode *x, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void vbreak(struct verify *V, struct vnode *x, const char *fmt, ...)
{
    char msg[sizeof x->status];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(V->out, "BROKEN %s (step %" PRId64 "): %s\n", x->e.ckpt, x->e.step, msg);
    if (V->breaks++ == 0)
        snprintf(V->first_break, sizeof V->first_break, "%s: %.900s", x->e.ckpt, msg);
    if (strncmp(x->status, "BROKEN", 6) != 0)
        snprintf(x->status, sizeof x->status, "BROKEN: %.400s", msg);
}

static char *join_changes(const struct ct_ckpt *ck)
{
    size_t len = 1;
    for (int i = 0; i < ct_ckpt_n_changes(ck); i++)
        len += strlen(ct_ckpt_change(ck, i)) + 2;
    char *s = calloc(1, len);
    for (int i = 0; s && i < ct_ckpt_n_changes(ck); i++) {
        if (i)
            strcat(s, "; ");
        strcat(s, ct_ckpt_change(ck, i));
    }
    return s;
}

/* Read entry x's checkpoint (if its directory is there) and check it
 * against the entry. */
static int read_node(struct verify *V, size_t i)
{
    struct vnode *x = &V->v[i];
    char dir[CT_PATH_MAX], expect[64];
    snprintf(expect, sizeof expect, "ckpt-%" PRId64, x->e.step);
    if (strcmp(expect, x->e.ckpt) != 0)
        vbreak(V, x, "its chain entry names %s for step %" PRId64, x->e.ckpt, x->e.step);
    int rc = ct_path_join(dir, sizeof dir, V->run_dir, expect);
    struct stat st;
    if (rc < 0)
        return rc;
    if (stat(dir, &st) != 0) {
        snprintf(x->status, sizeof x->status, "absent (deleted by retention; chain entry kept)");
        return 0;
    }
    struct ct_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", dir);
    struct ct_chain_entry got;
    if (ct_ckpt_open(ck, dir) < 0) {
        vbreak(V, x, "does not verify: %s", ct_error_message());
    } else if ((rc = ct__chain_entry_from_ckpt(ck, &got)) < 0) {
        vbreak(V, x, "cannot read its provenance: %s", ct_error_message());
        rc = 0;
    } else if (strcmp(got.digest, x->e.digest) != 0) {
        /* Another checkpoint of this step: a run resumed from an older one
         * wrote it again, and a later entry must say so. */
        int later = 0;
        for (size_t j = i + 1; j < V->n; j++)
            later |= V->v[j].e.step == x->e.step && strcmp(V->v[j].e.digest, got.digest) == 0;
        if (later) {
            x->superseded = 1;
            snprintf(x->status, sizeof x->status, "superseded (ckpt-%" PRId64 " was written again later)",
                     x->e.step);
        } else {
            vbreak(V, x, "its digest %.16s... is not the chain's %.16s... (replaced or forged)",
                   got.digest, x->e.digest);
        }
    } else {
        x->present = 1;
        if (strcmp(got.parent, x->e.parent) != 0)
            vbreak(V, x, "the chain's parent digest %.16s... is not the manifest's %.16s...",
                   x->e.parent[0] ? x->e.parent : "null", got.parent[0] ? got.parent : "null");
        if (strcmp(got.config_digest, x->e.config_digest) != 0)
            vbreak(V, x, "its config digest differs from the chain's");
        if (got.world != x->e.world || strcmp(got.code_version, x->e.code_version) != 0 ||
            strcmp(got.hosts, x->e.hosts) != 0 || strcmp(got.gemm, x->e.gemm) != 0 ||
            strcmp(got.blas, x->e.blas) != 0 ||
            (x->e.libraries[0] && strcmp(got.libraries, x->e.libraries) != 0))
            vbreak(V, x, "world size, code version, hosts or libraries differ from the chain's entry");
        else if (!x->e.libraries[0])
            /* A chain written before entries had the field: the manifest
             * still tells, for the provenance table. */
            memcpy(x->e.libraries, got.libraries, sizeof got.libraries);
        x->config = strdup(ct_ckpt_config_text(ck));
        x->changes = join_changes(ck);
        x->n_data = ct_ckpt_n_data_files(ck) < MAX_DATA ? ct_ckpt_n_data_files(ck) : MAX_DATA;
        for (int k = 0; k < x->n_data; k++) {
            struct ct_ckpt_data_file df;
            if (ct_ckpt_data_file(ck, k, &df) == 0) {
                snprintf(x->data_path[k], sizeof x->data_path[k], "%s", df.path);
                memcpy(x->data_sha[k], df.sha256, CT_SHA256_LEN);
            }
        }
        if (!x->config || !x->changes)
            rc = ct_error_set(CT_ENOMEM, "%s: out of memory", dir);
        if (strncmp(x->status, "BROKEN", 6) != 0)
            snprintf(x->status, sizeof x->status, "ok");
    }
    ct_ckpt_close(ck);
    free(ck);
    return rc;
}

/* Parent links: each entry's parent is an earlier entry with a lower step
 * (the first entry may descend from a checkpoint outside this run). */
static void check_links(struct verify *V)
{
    for (size_t i = 0; i < V->n; i++) {
        struct vnode *x = &V->v[i];
        x->parent = -1;
        if (!x->e.parent[0]) {
            if (i > 0)
                vbreak(V, x, "has no parent digest but is not the chain's first checkpoint");
            continue;
        }
        for (size_t j = i; j-- > 0;)
            if (strcmp(V->v[j].e.digest, x->e.parent) == 0) {
                x->parent = (int)j;
                break;
            }
        if (x->parent < 0 && i > 0)
            vbreak(V, x, "its parent digest %.16s... is no earlier checkpoint of the chain", x->e.parent);
        else if (x->parent >= 0 && V->v[x->parent].e.step >= x->e.step)
            vbreak(V, x, "step %" PRId64 " is not above its parent's (%s, step %" PRId64 ")", x->e.step,
                   V->v[x->parent].e.ckpt, V->v[x->parent].e.step);
    }
}

/* One lineage: every entry continues the entry before it, or one of that
 * entry's ancestors (a resume from an older checkpoint). An entry whose
 * parent is off that path continues a branch the chain had left: two jobs
 * committing in one run directory at once (docs/checkpoints.md, "One live
 * job per run directory"), which shows as two different checkpoints of one
 * step, the older continued after the newer replaced it. */
static void check_one_lineage(struct verify *V)
{
    for (size_t i = 1; i < V->n; i++) {
        struct vnode *x = &V->v[i];
        int p = x->parent, a = (int)i - 1;
        while (a >= 0 && a != p)
            a = V->v[a].parent;
        if (p < 0 || a == p)
            continue;
        /* The checkpoint of p's lineage that a later line replaced. */
        for (int q = p; q >= 0; q = V->v[q].parent)
            for (size_t k = (size_t)q + 1; k < i; k++)
                if (V->v[k].e.step == V->v[q].e.step && strcmp(V->v[k].e.digest, V->v[q].e.digest) != 0) {
                    const struct ct_chain_entry *eq = &V->v[q].e, *ek = &V->v[k].e;
                    vbreak(V, x, "two different checkpoints of step %" PRId64 " in %s: line %zu (digest "
                           "%.16s..., parent %.16s...) and line %zu (digest %.16s..., parent %.16s...); "
                           "line %zu continues line %zu's lineage after line %zu replaced it: two jobs "
                           "committed in this run directory at once", eq->step, CT_CHAIN_FILE,
                           (size_t)q + 1, eq->digest, eq->parent[0] ? eq->parent : "null", k + 1,
                           ek->digest, ek->parent[0] ? ek->parent : "null", i + 1, (size_t)q + 1, k + 1);
                    goto next;
                }
        vbreak(V, x, "line %zu continues line %zu (%s), which is not in the lineage of line %zu: "
               "two lineages in one %s", i + 1, (size_t)p + 1, V->v[p].e.ckpt, i, CT_CHAIN_FILE);
    next:;
    }
}

/* The nearest present ancestor of x (its recorded config and data). */
static const struct vnode *present_ancestor(const struct verify *V, const struct vnode *x)
{
    for (int p = x->parent; p >= 0; p = V->v[p].parent)
        if (V->v[p].present)
            return &V->v[p];
    return NULL;
}

static int data_change_recorded(const struct vnode *x, const char *path)
{
    return x->changes && strstr(x->changes, path) != NULL;
}

/* Along the lineage: config changes only in runtime keys, same data. */
static int check_lineage(struct verify *V)
{
    struct ct_config *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    int rc = a && b ? 0 : ct_error_set(CT_ENOMEM, "audit verify: out of memory");
    for (size_t i = 0; i < V->n && rc == 0; i++) {
        struct vnode *x = &V->v[i];
        const struct vnode *p = x->present ? present_ancestor(V, x) : NULL;
        if (!p)
            continue;
        if (strcmp(p->e.config_digest, x->e.config_digest) != 0) {
            char diff[4096];
            int n_runtime = 0, n_state;
            /* text NULL would read a file: a failed strdup is no config */
            if (!p->config || !x->config) {
                rc = ct_error_set(CT_ENOMEM, "audit verify: out of memory");
                break;
            }
            if (ct_config_load_recorded(a, p->e.ckpt, p->config) < 0 ||
                ct_config_load_recorded(b, x->e.ckpt, x->config) < 0) {
                vbreak(V, x, "its or %s's recorded config does not load: %s", p->e.ckpt, ct_error_message());
                continue;
            }
            n_state = ct_config_diff(a, b, diff, sizeof diff, &n_runtime);
            if (n_state > 0) {
                for (char *c = diff; (c = strchr(c, '\n')) != NULL;)
                    *c = ';';
                vbreak(V, x, "config changed outside runtime keys since %s: %s", p->e.ckpt, diff);
            }
        }
        for (int k = 0; k < p->n_data; k++) {
            int found = 0;
            for (int m = 0; m < x->n_data; m++)
                if (strcmp(x->data_path[m], p->data_path[k]) == 0)
                    found = 1 + (memcmp(x->data_sha[m], p->data_sha[k], CT_SHA256_LEN) == 0);
            if (found == 1 && !data_change_recorded(x, p->data_path[k]))
                vbreak(V, x, "data file %s has another SHA-256 than at %s and no recorded change says so",
                       p->data_path[k], p->e.ckpt);
        }
    }
    free(a);
    free(b);
    return rc;
}

/* Every committed ckpt-<step> directory (with a manifest, at or below the
 * checkpoint a resume would continue from) must be in the chain: one that is
 * not was committed without its entry (a stop between the two that no resume
 * repaired yet) or put there by hand. One above it was published but never
 * committed (a stop between its rename and `latest`): not part of the run,
 * said but not a break. */
static int check_unchained(struct verify *V)
{
    int64_t committed;
    int rc = ct__chain_committed_step(V->run_dir, &committed);
    if (rc < 0)
        return rc;
    DIR *d = opendir(V->run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", V->run_dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        if (strncmp(de->d_name, "ckpt-", 5) != 0 || !de->d_name[5])
            continue;
        int64_t s = strtoll(de->d_name + 5, &end, 10);
        if (*end)
            continue;
        char mf[CT_PATH_MAX];
        struct stat st;
        snprintf(mf, sizeof mf, "%s/%s/manifest.pb", V->run_dir, de->d_name);
        if (stat(mf, &st) != 0)
            continue;
        int listed = 0;
        for (size_t i = 0; i < V->n; i++)
            listed |= V->v[i].e.step == s;
        if (!listed && s > committed) {
            fprintf(V->out, "note %s: published but never committed (newer than the committed "
                    "checkpoint, step %" PRId64 ": a stop before `latest` was replaced); not part of "
                    "the run, replaced when a resume reaches step %" PRId64 "\n",
                    de->d_name, committed, s);
        } else if (!listed) {
            fprintf(V->out, "BROKEN %s: committed but not in chain.jsonl (a resume of the run repairs "
                    "a stop between its commit and the chain's append)\n", de->d_name);
            if (V->breaks++ == 0)
                snprintf(V->first_break, sizeof V->first_break, "%.256s: not in chain.jsonl", de->d_name);
        }
    }
    closedir(d);
    return 0;
}

/* Entry i continues entry i-1's segment. */
static int same_segment(const struct verify *V, size_t i)
{
    const struct vnode *a = &V->v[i - 1], *b = &V->v[i];
    return a->e.world == b->e.world && strcmp(a->e.hosts, b->e.hosts) == 0 &&
           strcmp(a->e.code_version, b->e.code_version) == 0 && strcmp(a->e.gemm, b->e.gemm) == 0 &&
           strcmp(a->e.blas, b->e.blas) == 0 && strcmp(a->e.libraries, b->e.libraries) == 0 &&
           !(b->changes && b->changes[0]) &&
           b->parent == (int)i - 1;
}

static void print_tables(const struct verify *V)
{
    FILE *o = V->out;
    fprintf(o, "%-14s %10s %6s %5s  %-16s %s\n", "checkpoint", "step", "epoch", "world", "digest", "status");
    for (size_t i = 0; i < V->n; i++) {
        const struct vnode *x = &V->v[i];
        fprintf(o, "%-14s %10" PRId64 " %6" PRId64 " %5d  %.16s %s\n", x->e.ckpt, x->e.step, x->e.epoch,
                x->e.world, x->e.digest, x->status);
    }
    fprintf(o, "\nsegments (a new one where world size, hosts, code, libraries or gemm change, a\n"
               "resume recorded changes, or the lineage branches):\n");
    size_t s = 0;
    for (size_t i = 1; i <= V->n; i++) {
        if (i < V->n && same_segment(V, i))
            continue;
        const struct vnode *f = &V->v[s], *l = &V->v[i - 1];
        fprintf(o, "  steps %" PRId64 "-%" PRId64 ": world %d, hosts %s, code %s, gemm %s, blas %s\n",
                f->e.step, l->e.step, f->e.world, f->e.hosts, f->e.code_version, f->e.gemm, f->e.blas);
        fprintf(o, "    libraries: %s\n", f->e.libraries[0] ? f->e.libraries : "unknown (not in the chain)");
        if (f->parent >= 0 && f->parent != (int)s - 1)
            fprintf(o, "    resumed from %s (steps after it were trained again)\n", V->v[f->parent].e.ckpt);
        fprintf(o, "    changes: %s\n", f->changes && f->changes[0] ? f->changes
                                        : f->present || s == 0 ? "none" : "unknown (checkpoint absent)");
        s = i;
    }
}

int ct_audit_verify(const char *run_dir, FILE *out)
{
    struct verify V = {.run_dir = run_dir, .out = out};
    struct stat st;
    if (stat(run_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return ct_error_set(CT_ENOENT, "%s: no such run directory", run_dir);
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, run_dir, CT_CHAIN_FILE);
    struct ct_run run = {0};
    if (rc == 0)
        rc = ct_run_open(run_dir, CT_RUN_CHAIN_STRICT, &run);
    if (rc == CT_ENOENT)
        return ct_error_set(CT_ENOENT, "%s: no %s (not a run directory, or written before chains "
                            "existed: a resume of the run creates it)", run_dir, CT_CHAIN_FILE);
    if (rc < 0)
        return ct_error_wrap(CT_EMISMATCH, "audit verify");
    V.n = run.n_chain;
    struct vnode *nodes = calloc(V.n ? V.n : 1, sizeof *nodes);
    if (!nodes) {
        ct_run_close(&run);
        return ct_error_set(CT_ENOMEM, "audit verify: out of memory");
    }
    for (size_t i = 0; i < V.n; i++)
        nodes[i].e = run.chain[i];
    ct_run_close(&run);
    V.v = nodes;
    fprintf(out, "chain %s: %zu checkpoint%s\n", path, V.n, V.n == 1 ? "" : "s");
    if (V.n == 0) {
        fprintf(V.out, "BROKEN: the chain is empty\n");
        V.breaks++;
        snprintf(V.first_break, sizeof V.first_break, "%.900s is empty", path);
    }
    check_links(&V);
    check_one_lineage(&V);
    for (size_t i = 0; i < V.n && rc == 0; i++)
        rc = read_node(&V, i);
    if (rc == 0)
        rc = check_lineage(&V);
    if (rc == 0)
        rc = check_unchained(&V);
    if (rc == 0) {
        print_tables(&V);
        size_t absent = 0;
        for (size_t i = 0; i < V.n; i++)
            absent += !V.v[i].present && !V.v[i].superseded && strncmp(V.v[i].status, "BROKEN", 6) != 0;
        if (V.breaks)
            fprintf(out, "verdict: BROKEN (%d break%s)\n", V.breaks, V.breaks == 1 ? "" : "s");
        else
            fprintf(out, "verdict: OK (%zu checkpoints, %zu absent)\n", V.n, absent);
        if (V.breaks)
            rc = ct_error_set(CT_EMISMATCH, "audit verify %s: %d break%s; first: %s", run_dir, V.breaks,
                              V.breaks == 1 ? "" : "s", V.first_break);
    }
    for (size_t i = 0; i < V.n; i++) {
        free(V.v[i].config);
        free(V.v[i].changes);
    }
    free(V.v);
    return rc;
}

/* ================================================================ diff */

static void diff_line(FILE *out, const char *what, const char *a, const char *b)
{
    fprintf(out, "  %-12s %s%s%s\n", what, a, strcmp(a, b) == 0 ? "" : "  ->  ", strcmp(a, b) == 0 ? "" : b);
}

static void provenance_diff(const struct ct_ckpt *a, const struct ct_ckpt *b, FILE *out)
{
    struct ct_chain_entry ea, eb;
    if (ct__chain_entry_from_ckpt(a, &ea) < 0 || ct__chain_entry_from_ckpt(b, &eb) < 0) {
        fprintf(out, "  (provenance unreadable: %s)\n", ct_error_message());
        return;
    }
    char wa[32], wb[32], sa[32], sb[32];
    snprintf(wa, sizeof wa, "%d", ea.world);
    snprintf(wb, sizeof wb, "%d", eb.world);
    snprintf(sa, sizeof sa, "%" PRId64, ea.step);
    snprintf(sb, sizeof sb, "%" PRId64, eb.step);
    diff_line(out, "step", sa, sb);
    diff_line(out, "world", wa, wb);
    diff_line(out, "hosts", ea.hosts, eb.hosts);
    diff_line(out, "code", ea.code_version, eb.code_version);
    diff_line(out, "gemm", ea.gemm, eb.gemm);
    diff_line(out, "blas", ea.blas, eb.blas);
    diff_line(out, "libraries", ea.libraries, eb.libraries);
    diff_line(out, "parent", ea.parent[0] ? ea.parent : "null", eb.parent[0] ? eb.parent : "null");
    for (int i = 0; i < ct_ckpt_n_data_files(b); i++) {
        struct ct_ckpt_data_file fb, fa;
        if (ct_ckpt_data_file(b, i, &fb) < 0)
            continue;
        char ha[CT_SHA256_HEX_LEN] = "absent", hb[CT_SHA256_HEX_LEN];
        ct_sha256_hex(fb.sha256, hb);
        if (ct_ckpt_find_data_file(a, fb.path, &fa) == 0)
            ct_sha256_hex(fa.sha256, ha);
        else
            ct_error_clear();
        char what[64];
        snprintf(what, sizeof what, "data %d", i);
        fprintf(out, "  %-12s %s\n", what, fb.path);
        diff_line(out, "", ha, hb);
    }
    for (int i = 0; i < ct_ckpt_n_changes(b); i++)
        fprintf(out, "  %-12s %s\n", i ? "" : "changes", ct_ckpt_change(b, i));
}

/* The config diff of two checkpoints' recorded configs, printed. */
static int config_diff(const struct ct_ckpt *a, const struct ct_ckpt *b, FILE *out)
{
    struct ct_config *ca = malloc(sizeof *ca), *cb = malloc(sizeof *cb);
    char *diff = malloc(16384);
    int rc = ca && cb && diff ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0 && (rc = ct_config_load_recorded(ca, a->dir, ct_ckpt_config_text(a))) == 0 &&
        (rc = ct_config_load_recorded(cb, b->dir, ct_ckpt_config_text(b))) == 0) {
        int n_runtime = 0;
        int n_state = ct_config_diff(ca, cb, diff, 16384, &n_runtime);
        fprintf(out, "config: %d key%s that change the experiment, %d runtime key%s differ\n", n_state,
                n_state == 1 ? "" : "s", n_runtime, n_runtime == 1 ? "" : "s");
        for (char *l = diff; n_state + n_runtime > 0 && *l;) {
            char *nl = strchr(l, '\n');
            fprintf(out, "  %.*s\n", nl ? (int)(nl - l) : (int)strlen(l), l);
            l = nl ? nl + 1 : l + strlen(l);
        }
    }
    free(ca);
    free(cb);
    free(diff);
    return rc;
}

int ct_audit_diff(const char *pa, const char *pb, FILE *out)
{
    struct ct_ckpt *a, *b;
    int rc = ct_ckpt_open_pair(&a, &b, pa, pb);
    if (rc == 0) {
        fprintf(out, "diff %s (A) -> %s (B)\n", pa, pb);
        rc = config_diff(a, b, out);
    }
    if (rc == 0) {
        fprintf(out, "provenance:\n");
        provenance_diff(a, b, out);
        fprintf(out, "tensors (max abs and rel difference, B against A):\n");
        struct ct_ckpt_cmp tc;
        rc = ct_ckpt_compare(a, b, out, 1, &tc);
        if (rc == 0)
            fprintf(out, "%d of %d tensors differ, %d missing or reshaped\n", tc.n_differ,
                    ct_ckpt_n_sections(b), tc.n_missing);
    }
    ct_ckpt_close_pair(a, b);
    return rc;
}

/* ================================================================ summary */

static int run_seed(const char *dir, char *out, size_t cap)
{
    char p[CT_PATH_MAX];
    snprintf(p, sizeof p, "%s/config.ini", dir);
    struct ct_config *c = malloc(sizeof *c);
    int rc = c ? ct_config_load_recorded(c, p, NULL) : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        snprintf(out, cap, "%" PRIu64, (uint64_t)c->train.seed);
    free(c);
    return rc;
}

int ct_audit_summary(const char *const *dirs, int n_dirs, FILE *out)
{
    char **runs = NULL;
    int n = 0, rc = 0;
    for (int i = 0; i < n_dirs && rc == 0; i++)
        rc = ct_rundir_expand(dirs[i], &runs, &n);
    double *m = rc == 0 ? calloc((size_t)n * 3 + 1, sizeof *m) : NULL;
    if (rc == 0 && !m)
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        fprintf(out, "%-40s %6s %8s %10s %10s %8s\n", "run", "seed", "step", "train_loss", "test_loss",
                "test_acc");
    for (int i = 0; i < n && rc == 0; i++) {
        struct ct_run run;
        char seed[32] = "?";
        if ((rc = ct_run_open(runs[i], CT_RUN_LAST_EPOCH, &run)) < 0)
            break;
        const struct ct_epoch_record r = run.epochs[0]; /* the final epoch */
        if ((rc = run_seed(runs[i], seed, sizeof seed)) < 0) {
            ct_run_close(&run);
            break;
        }
        m[i] = r.train_loss;
        m[n + i] = r.test_loss;
        m[2 * n + i] = r.test_acc;
        fprintf(out, "%-40s %6s %8" PRId64 " %10.6f %10.6f %8.4f\n", runs[i], seed, r.step, r.train_loss,
                r.test_loss, r.test_acc);
        ct_run_close(&run);
    }
    if (rc == 0) {
        const char *names[3] = {"train_loss", "test_loss", "test_acc"};
        fprintf(out, "over %d run%s (mean +- sample std):\n", n, n == 1 ? "" : "s");
        for (int k = 0; k < 3; k++) {
            double mean, std;
            /* A run whose final value is null (never evaluated) is left
             * out, as the report does; one value alone has std 0. */
            size_t used = ct_run_mean_std(&m[(size_t)k * (size_t)n], (size_t)n, &mean, &std);
            fprintf(out, "  %-10s %.6f +- %.6f\n", names[k], mean, n == 1 || used == 1 ? 0.0 : std);
        }
    }
    for (int i = 0; i < n; i++)
        free(runs[i]);
    free(runs);
    free(m);
    return rc;
}
