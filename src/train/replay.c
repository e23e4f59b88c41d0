/* audit replay (see replay.h): restore A, train to B's step with B's
 * recorded config in a run directory of its own, compare the result with B
 * section by section (ckpt/compare.h) and write the certificate. The one
 * audit that trains, so it lives with training; the read-only audits
 * (verify, diff, summary) are src/report/audit.c. Nothing here writes into
 * the audited run directory. */
#include "train/replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/compare.h"
#include "config/config.h"
#include "core/error.h"
#include "core/path.h"
#include "run/json.h"
#include "run/shared.h"
#include "ckpt/chain.h"
#include "train/trainer-impl.h"

struct replay_result {
    struct ct_chain_entry b, r;     /* B's and the replay's provenance */
    struct ct_ckpt_cmp tc;
    int scalars_differ;
    char records[256];              /* what of the rank records was compared, and how it went */
    int records_differ;
    char cause[512];
};

/* path copied into buf without its trailing slashes; its last slash (NULL:
 * none). */
static char *trimmed_copy(const char *path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", path);
    size_t l = strlen(buf);
    while (l > 1 && buf[l - 1] == '/')
        buf[--l] = '\0';
    return strrchr(buf, '/');
}

/* "ckpt-40" from "runs/x/ckpt-40/" (for the certificate's name). */
static void ckpt_label(const char *path, char *out, size_t cap)
{
    char tmp[CT_PATH_MAX];
    const char *s = trimmed_copy(path, tmp, sizeof tmp);
    snprintf(out, cap, "%s", s ? s + 1 : tmp);
}

/* Is train.deterministic = true in a recorded config? Read from the INI
 * text so that this code works before and after the key exists. */
static int config_deterministic(const char *text)
{
    int in_train = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        while (*l == ' ' || *l == '\t')
            l++;
        if (*l == '[')
            in_train = strncmp(l, "[train]", 7) == 0;
        else if (in_train && strncmp(l, "deterministic", 13) == 0) {
            const char *v = strchr(l, '=');
            while (v && (*++v == ' ' || *v == '\t'))
                ;
            return v && strncmp(v, "true", 4) == 0;
        }
    }
    return 0;
}

static void guess_cause(struct replay_result *R, const char *b_config)
{
    const struct ct_chain_entry *b = &R->b, *r = &R->r;
    if (strcmp(b->gemm, r->gemm) != 0)
        snprintf(R->cause, sizeof R->cause, "different gemm: B ran %s, the replay %s", b->gemm, r->gemm);
    else if (strcmp(b->blas, r->blas) != 0)
        snprintf(R->cause, sizeof R->cause, "different BLAS library or kernels: B ran '%.200s', the replay "
                 "'%.200s'", b->blas, r->blas);
    else if (strcmp(b->code_version, r->code_version) != 0)
        snprintf(R->cause, sizeof R->cause, "different code version: B %.200s, the replay %.200s",
                 b->code_version, r->code_version);
    else if (strcmp(b->libraries, r->libraries) != 0)
        snprintf(R->cause, sizeof R->cause, "different library versions: B '%.200s', the replay '%.200s'",
                 b->libraries, r->libraries);
    else if (b->world != r->world && !config_deterministic(b_config))
        snprintf(R->cause, sizeof R->cause, "world size %d vs %d in a non-deterministic run "
                 "(train.deterministic = false: sums depend on the number of ranks)", b->world, r->world);
    else if (strcmp(b->hosts, r->hosts) != 0)
        snprintf(R->cause, sizeof R->cause, "different machine: B on %.200s, the replay on %.200s",
                 b->hosts, r->hosts);
    else
        snprintf(R->cause, sizeof R->cause, "none visible in the provenance (same gemm, libraries, code, "
                 "world size and hosts): a non-deterministic kernel or a damaged interval");
}

/* Comparable parts of the rank records: everything but host and binding at
 * the same world size; only the sampler position at another. */
static int compare_records(const struct ct_ckpt *r, const struct ct_ckpt *b, struct replay_result *R)
{
    int wr = ct_ckpt_world_size(r), wb = ct_ckpt_world_size(b);
    int n = wr == wb ? wb : 1;
    for (int i = 0; i < n; i++) {
        struct ct_rank_record x, y;
        int rc = ct_ckpt_read_rank_record(r, i, &x);
        if (rc == 0)
            rc = ct_ckpt_read_rank_record(b, i, &y);
        if (rc < 0)
            return rc;
        int same = x.loader_epoch == y.loader_epoch && x.loader_step == y.loader_step;
        if (wr == wb) {
            same = same && x.loader_first == y.loader_first && x.loader_count == y.loader_count &&
                   x.n_rng == y.n_rng;
            for (int k = 0; same && k < x.n_rng; k++)
                same = strcmp(x.rng[k].purpose, y.rng[k].purpose) == 0 && x.rng[k].key0 == y.rng[k].key0 &&
                       x.rng[k].key1 == y.rng[k].key1 && x.rng[k].counter == y.rng[k].counter;
        }
        R->records_differ += !same;
    }
    if (wr == wb)
        snprintf(R->records, sizeof R->records, "%d rank records: random streams and loader positions "
                 "compared (host and binding are the machine's), %d differ", n, R->records_differ);
    else
        snprintf(R->records, sizeof R->records, "world sizes differ (B %d, replay %d): only the sampler "
                 "position compared, %s", wb, wr, R->records_differ ? "differs" : "identical");
    return 0;
}

static int compare_scalars(const struct ct_ckpt *r, const struct ct_ckpt *b)
{
    int differ = ct_ckpt_n_scalars(r) != ct_ckpt_n_scalars(b);
    for (int i = 0; i < ct_ckpt_n_scalars(b) && !differ; i++) {
        struct ct_ckpt_kv kv;
        const char *v;
        differ = ct_ckpt_scalar_at(b, i, &kv) < 0 || ct_ckpt_scalar(r, kv.key, &v) < 0 ||
                 strcmp(v, kv.value) != 0;
    }
    return differ;
}

static void write_env(struct ct_json_writer *w, const char *key, const struct ct_chain_entry *e)
{
    ct_json_key(w, key);
    ct_json_begin_object(w);
    ct_json_kv_string(w, "ckpt_digest", e->digest);
    ct_json_kv_int(w, "world", e->world);
    ct_json_kv_string(w, "hosts", e->hosts);
    ct_json_kv_string(w, "code_version", e->code_version);
    ct_json_kv_string(w, "gemm", e->gemm);
    ct_json_kv_string(w, "blas", e->blas);
    ct_json_kv_string(w, "libraries", e->libraries);
    ct_json_end_object(w);
}

/* The certificate, replaced atomically (temporary file, fsync, rename). */
static int write_certificate(const char *path, const struct ct_audit_replay_params *p,
                             const struct ct_chain_entry *a, const struct replay_result *R, int same)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_kv_string(&w, "verdict", same ? "identical" : "differs");
    ct_json_kv_string(&w, "a", p->ckpt_a);
    ct_json_kv_string(&w, "a_digest", a->digest);
    ct_json_kv_int(&w, "a_step", a->step);
    ct_json_kv_string(&w, "b", p->ckpt_b);
    ct_json_kv_string(&w, "b_digest", R->b.digest);
    ct_json_kv_int(&w, "b_step", R->b.step);
    write_env(&w, "b_environment", &R->b);
    write_env(&w, "replay_environment", &R->r);
    ct_json_kv_int(&w, "tensors_differ", R->tc.n_differ + R->tc.n_missing);
    if (R->tc.first[0]) {
        ct_json_kv_string(&w, "first_differing_tensor", R->tc.first);
        ct_json_kv_double(&w, "max_abs_difference", R->tc.first_abs, 9);
    } else {
        ct_json_kv_null(&w, "first_differing_tensor");
        ct_json_kv_null(&w, "max_abs_difference");
    }
    ct_json_kv_bool(&w, "scalars_identical", !R->scalars_differ);
    ct_json_kv_string(&w, "rank_records", R->records);
    ct_json_kv_bool(&w, "rank_records_identical", !R->records_differ);
    if (same)
        ct_json_kv_null(&w, "likely_cause");
    else
        ct_json_kv_string(&w, "likely_cause", R->cause);
    ct_json_end_object(&w);
    int rc = ct_json_writer_status(&w);
    if (rc == 0) {
        w.buf[w.len] = '\n';
        rc = ct_file_replace(path, w.buf, w.len + 1);
    }
    ct_json_writer_free(&w);
    return rc;
}

/* B's recorded config with the replay's runtime overrides and a stop at B's
 * step; an override of a key that changes the experiment is refused. */
static int replay_config(struct ct_config *cfg, const struct ct_ckpt *b, const struct ct_audit_replay_params *p)
{
    const char **sets = calloc((size_t)p->n_sets + 2, sizeof *sets);
    char stop[64];
    if (!sets)
        return ct_error_set(CT_ENOMEM, "out of memory");
    for (int i = 0; i < p->n_sets; i++)
        sets[i] = p->sets[i];
    snprintf(stop, sizeof stop, "train.max_steps=%" PRId64, ct_ckpt_step(b));
    sets[p->n_sets] = stop;
    int rc = ct_config_load_text(cfg, ct_ckpt_config_text(b), b->dir, sets, p->n_sets + 1);
    free(sets);
    struct ct_config *orig = rc == 0 ? malloc(sizeof *orig) : NULL;
    if (rc == 0 && !orig)
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0 && (rc = ct_config_load_text(orig, ct_ckpt_config_text(b), b->dir, NULL, 0)) == 0) {
        char diff[4096];
        int n_runtime;
        if (ct_config_diff(orig, cfg, diff, sizeof diff, &n_runtime) > 0)
            rc = ct_error_set(CT_ECONFIG, "audit replay: --set may change runtime keys only; these "
                              "change the experiment B recorded:\n%s", diff);
    }
    free(orig);
    return rc;
}

/* Collective: train from A to B's step in run_dir. */
static int replay_train(struct ct_comm *c, const struct ct_config *cfg, const char *run_dir, const char *a)
{
    struct ct_trainer *tr = calloc(1, sizeof *tr);
    if (!tr)
        return ct_comm_agree(c, ct_error_set(CT_ENOMEM, "out of memory"));
    int rc = ct_run_shared_check(c, run_dir); /* every rank writes its checkpoints */
    if (rc == 0)
        rc = ct_trainer_init(tr, cfg, c, run_dir, a);
    if (rc == 0) {
        struct ct_train_summary sum;
        rc = ct_trainer_run(tr, &sum);
        if (rc < 0 && !tr->error_agreed)
            rc = ct_comm_agree(c, rc); /* the trainer's own failure paths agree; this is a guard */
        ct_trainer_free(tr);
    }
    free(tr);
    return rc;
}

/* Rank 0: the replay's checkpoint against B; prints, fills R. */
static int replay_compare(const char *replayed, const char *pb, const char *b_config, FILE *out,
                          struct replay_result *R)
{
    struct ct_ckpt *r, *b;
    int rc = ct_ckpt_open_pair(&r, &b, replayed, pb);
    if (rc == 0)
        rc = ct__chain_entry_from_ckpt(b, &R->b);
    if (rc == 0)
        rc = ct__chain_entry_from_ckpt(r, &R->r);
    if (rc == 0 && ct_ckpt_step(r) != ct_ckpt_step(b))
        rc = ct_error_set(CT_EMISMATCH, "the replay stopped at step %" PRId64 ", B is step %" PRId64,
                          ct_ckpt_step(r), ct_ckpt_step(b));
    if (rc == 0) {
        fprintf(out, "tensors that differ (replay against B):\n");
        rc = ct_ckpt_compare(b, r, out, 0, &R->tc);
    }
    if (rc == 0) {
        R->scalars_differ = compare_scalars(r, b);
        rc = compare_records(r, b, R);
        guess_cause(R, b_config);
    }
    ct_ckpt_close_pair(r, b);
    return rc;
}

/* Without --out: "<B's run directory>-audit", beside the audited run (B's
 * run directory is the one holding B; the working directory when B's path
 * has no directory part), so that a replay leaves nothing in the directory it
 * is run from nor in the audited run. */
static int default_out_dir(const char *ckpt_b, char *out, size_t cap)
{
    char run[CT_PATH_MAX];
    char *slash = trimmed_copy(ckpt_b, run, sizeof run);
    if (slash && slash != run)
        *slash = '\0';
    else if (slash)
        run[1] = '\0'; /* B directly under "/" */
    else if (!getcwd(run, sizeof run))
        return ct_error_set(CT_EIO, "audit replay: the working directory: %s", strerror(errno));
    if (strlen(run) + sizeof "-audit" > cap)
        return ct_error_set(CT_ERANGE, "audit replay: %s-audit: path too long", run);
    snprintf(out, cap, "%s", strcmp(run, "/") == 0 ? "/audit" : run);
    if (strcmp(run, "/") != 0)
        strcat(out, "-audit");
    return 0;
}

static int replay_paths(const struct ct_audit_replay_params *p, char *run_dir, char *cert, size_t cap)
{
    char la[256], lb[256], name[600], dir[CT_PATH_MAX];
    ckpt_label(p->ckpt_a, la, sizeof la);
    ckpt_label(p->ckpt_b, lb, sizeof lb);
    int rc = 0;
    if (p->out_dir)
        snprintf(dir, sizeof dir, "%s", p->out_dir);
    else
        rc = default_out_dir(p->ckpt_b, dir, sizeof dir);
    snprintf(name, sizeof name, "audit-%s-%s.run", la, lb);
    if (rc == 0)
        rc = ct_path_join(run_dir, cap, dir, name);
    snprintf(name, sizeof name, "audit-%s-%s.json", la, lb);
    if (rc == 0)
        rc = ct_path_join(cert, cap, dir, name);
    return rc;
}

/* Rank 0: compare, print the verdict, write the certificate. */
static int replay_verdict(const struct ct_audit_replay_params *p, const char *run_dir, const char *cert,
                          const char *b_config, int64_t b_step, FILE *out)
{
    struct replay_result *R = calloc(1, sizeof *R);
    struct ct_ckpt *a = calloc(1, sizeof *a);
    struct ct_chain_entry ea;
    char replayed[CT_PATH_MAX + 64];
    snprintf(replayed, sizeof replayed, "%s/ckpt-%" PRId64, run_dir, b_step);
    int rc = R && a ? ct_ckpt_open(a, p->ckpt_a) : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = ct__chain_entry_from_ckpt(a, &ea);
    if (rc == 0)
        rc = replay_compare(replayed, p->ckpt_b, b_config, out, R);
    int same = rc == 0 && R->tc.n_differ == 0 && R->tc.n_missing == 0 && !R->scalars_differ &&
               !R->records_differ;
    if (rc == 0)
        rc = write_certificate(cert, p, &ea, R, same);
    if (rc == 0) {
        fprintf(out, "rank records: %s\nscalars: %s\n", R->records, R->scalars_differ ? "differ" : "identical");
        fprintf(out, "replay of %s -> %s (step %" PRId64 " -> %" PRId64 ") on %d rank%s: %s\ncertificate: %s\n",
                p->ckpt_a, p->ckpt_b, ea.step, b_step, R->r.world, R->r.world == 1 ? "" : "s",
                same ? "IDENTICAL, bit for bit" : "DIFFERS", cert);
        if (!same)
            rc = ct_error_set(CT_EMISMATCH, "audit replay: %s differs from the replay: first differing "
                              "tensor %s (max abs difference %.6g); likely cause: %s", p->ckpt_b,
                              R->tc.first[0] ? R->tc.first : "(none: scalars or rank records)",
                              R->tc.first_abs, R->cause);
    }
    if (a)
        ct_ckpt_close(a);
    free(a);
    free(R);
    return rc;
}

int ct_audit_replay(struct ct_comm *c, const struct ct_audit_replay_params *p, FILE *out)
{
    struct ct_ckpt *b = calloc(1, sizeof *b), *a = calloc(1, sizeof *a);
    struct ct_config *cfg = malloc(sizeof *cfg);
    char run_dir[CT_PATH_MAX], cert[CT_PATH_MAX];
    char *b_config = NULL;
    int64_t b_step = 0;
    int rc = b && a && cfg ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = replay_paths(p, run_dir, cert, sizeof run_dir);
    if (rc == 0 && (rc = ct_ckpt_open(a, p->ckpt_a)) == 0 && (rc = ct_ckpt_open(b, p->ckpt_b)) == 0) {
        b_step = ct_ckpt_step(b);
        if (ct_ckpt_step(a) >= b_step)
            rc = ct_error_set(CT_EUSAGE, "audit replay: A (%s, step %" PRId64 ") must come before B (%s, "
                              "step %" PRId64 ")", p->ckpt_a, ct_ckpt_step(a), p->ckpt_b, b_step);
        if (rc == 0)
            rc = replay_config(cfg, b, p);
        if (rc == 0 && !(b_config = strdup(ct_ckpt_config_text(b))))
            rc = ct_error_set(CT_ENOMEM, "out of memory");
    }
    ct_ckpt_close_pair(a, b);
    rc = ct_comm_agree(c, rc);
    if (rc == 0)
        rc = replay_train(c, cfg, run_dir, p->ckpt_a);
    if (rc == 0)
        rc = ct_comm_agree(c, c->rank == 0 ? replay_verdict(p, run_dir, cert, b_config, b_step, out) : 0);
    free(b_config);
    free(cfg);
    return rc;
}
