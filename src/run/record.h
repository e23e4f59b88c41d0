/* The run's records, written AND read here: run.json, metrics.jsonl,
 * steps.jsonl, and the trimming of the logs on an in-place resume.
 *
 * One place knows each file's keys, so the trainer that writes them and the
 * tests and tools that read them cannot drift apart. All JSON goes through
 * run/json.h (escaped strings, NaN written as null, parsed with offsets in
 * the errors); every error names the file (and the line, for .jsonl).
 *
 *     struct ct_epoch_record r = {.epoch = 1, .step = 234, ..., .world = 2,
 *                                 .data_wait_s = wait, ...};
 *     r.slowest_rank = ct_epoch_record_slowest_rank(&r);
 *     if ((rc = ct_metrics_append(f, path, &r)) < 0) return rc;
 *
 * Readers fill a record whose strings and arrays live in storage the record
 * owns: release it with the matching _free() (also after a failed read).
 *
 * Deliberately not here: which directory holds the files and what happens to
 * an earlier run's files (run/rundir.h), computing the numbers (src/train),
 * what goes into a chain entry and when it is appended (src/ckpt/chain.c).
 */
#ifndef CT_RUN_RECORD_H
#define CT_RUN_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "run/reckey.h"

/* ---------------------------------------------------------------- run.json */

/* A key/value pair of run.json beyond the fixed fields (string values). */
struct ct_run_extra {
    const char *key;
    const char *value;
};

/* How the run started; a resumed run's changes are in its checkpoints'
 * manifests, not here. The strings are borrowed when writing; after
 * ct_run_record_read they point into storage that ct_run_record_free releases. */
struct ct_run_record {
    const char *version;     /* "version": CT_VERSION */
    const char *git;         /* "git": git describe of the code */
    const char *config;      /* "config": the config file's path as given */
    int world;               /* "world": number of ranks */
    int blas_threads;        /* "blas_threads": per rank */
    const char *blas;        /* "blas": OpenBLAS's configuration string */
    const char *gemm;        /* "gemm": the sgemm implementation that ran */
    const char *host0;       /* "host0": rank 0's host name */
    int64_t params;          /* "params": number of model parameters */
    int64_t steps_per_epoch; /* "steps_per_epoch" */
    int64_t total_steps;     /* "total_steps" */
    /* Model FLOP utilization's terms, written when peak_source is not NULL
     * (optional when read: 0, NaN, NULL, NULL when absent). */
    double flops_per_sample; /* "flops_per_sample": matmul FLOPs, forward + backward */
    double peak_gflops;      /* "peak_gflops": one rank's peak, 1e9 FLOP/s */
    const char *peak_source; /* "peak_source": "probe" (measured at start) or "config"
                              * (dist.peak_gflops) */
    const char *peak_kernel; /* "peak_kernel": the probe's kernel, shape and threads
                              * ("ctrain-avx512 384x384x384, 1 thread"); NULL for config */
    /* The transport (parallel/transport.h), each value saying how it is
     * known (optional when read: NULL when absent, before 2026-12-05). */
    const char *transport_mpi;       /* "openmpi", "mpich", "other", "none" */
    const char *transport_pml;       /* Open MPI's PML, MPICH's device */
    const char *transport_btl;       /* Open MPI's BTLs */
    const char *transport_tcp_if;    /* the TCP interfaces asked for */
    const char *transport_ucx;       /* UCX_TLS */
    const char *transport_links;     /* in use: interfaces with TCP connections to other hosts */
    const char *transport_hosts;     /* hosts, ranks per host */
    const char *allreduce;           /* the gradients' allreduce: "ring", "mpi" */
    const struct ct_run_extra *extra; /* more string keys, written after the fixed ones */
    size_t n_extra;
    void *owned;             /* reader's storage; NULL when the caller filled the record */
};

/* Write <dir>/run.json (one line), atomically: a temporary file renamed
 * over it. NULL strings are written as null. An extra key that repeats a
 * fixed one is CT_EINVAL (the reader refuses duplicate keys). */
int ct_run_record_write(const char *dir, const struct ct_run_record *r);
/* Read a run.json. Every fixed key is required (a string may be null);
 * other string-valued keys land in extra, other keys are ignored, so a newer
 * writer's additions do not stop an older reader. */
int ct_run_record_read(const char *path, struct ct_run_record *r);

/* The whole of a small file of a run directory (run.json, config.ini,
 * placement.txt), NUL-terminated, malloc'd to its size; more than max
 * bytes is CT_EFORMAT, a missing file CT_ENOENT. len may be NULL. */
int ct_run_read_file(const char *path, size_t max, char **text, size_t *len);
void ct_run_record_free(struct ct_run_record *r);

/* ---------------------------------------------------------------- metrics.jsonl */

/* The four phases of a step, per rank. */
enum ct_run_phase {
    CT_RUN_PHASE_DATA_WAIT,        /* waiting for the loader's batch */
    CT_RUN_PHASE_FORWARD_BACKWARD, /* compute, including overlapped communication */
    CT_RUN_PHASE_EXPOSED_COMM,     /* communication not hidden behind compute */
    CT_RUN_PHASE_OPTIM,            /* clipping and the optimizer step */
    CT_RUN_PHASE_COUNT
};

/* One line of metrics.jsonl: one epoch (or the part of it a run did before
 * max_steps or a signal stopped it). Its keys, their order and precision,
 * which are written only for token data or with MFU, and which are optional
 * when read: the table in record_keys.c (listed in docs/records.md). A NULL
 * per-rank array is written as null (and its max too). */
struct ct_epoch_record {
    int epoch;            /* 1-based: epochs begun */
    int partial;          /* stopped inside this epoch */
    int64_t step;         /* global steps completed */
    double train_loss;    /* mean over the epoch's samples, all ranks */
    double train_acc;     /* fraction of them classified right in training mode; NaN: unknown */
    double test_loss;     /* NaN when not evaluated: written as null */
    double test_acc;      /* NaN when not evaluated: written as null */
    double samples_per_s; /* global, training only */
    /* Token data only (written when tokens_per_s > 0): samples_per_s times
     * the tokens of a sample, and for a byte vocabulary test_loss in bits
     * per byte (test_loss / ln 2; NaN: not evaluated or not bytes, null). */
    double tokens_per_s;
    double val_bpb;
    double epoch_s;       /* training wall time of the epoch (max over ranks) */
    double eval_s;
    double lr;            /* learning rate of the epoch's last step */
    double peak_rss_mib;  /* max over ranks (ru_maxrss: counts every shared page it touched) */
    double pss_mib;       /* max over ranks of the proportional set size at the epoch's end
                           * (shared pages divided among the ranks mapping them); NaN: unknown */
    /* Bytes of optimizer state one rank holds (max over ranks): the whole
     * model's momentum or moments, or 1/N of them with dist.shard_optimizer;
     * -1: unknown (older lines). */
    int64_t optim_state_bytes;
    int world;            /* ranks; the length of each phase array */
    /* Seconds per phase summed over the epoch's steps, one value per rank in
     * rank order (world of them), or NULL when not measured. */
    const double *data_wait_s;
    const double *forward_backward_s;
    const double *exposed_comm_s;
    const double *optim_s;
    int slowest_rank;     /* the rank with the largest step time; -1 = unknown (null) */
    int64_t nonfinite_skipped;       /* steps dropped in the epoch (train.on_nonfinite = skip) */
    int64_t nonfinite_skipped_total; /* ... in the run so far, across resumes */
    /* Model FLOP utilization (written when flops_per_sample > 0; read as 0,
     * NULL, NaN, NaN from older lines). FLOPs are matrix-product FLOPs of
     * forward and backward (nn/module.h, "FLOPs"). */
    double flops_per_sample;
    const double *achieved_gflops; /* (world) flops_per_sample x the samples the rank computed
                                    * / its wall time of the epoch's steps, all included
                                    * (data wait, communication, optimizer); 1e9 FLOP/s */
    double peak_gflops;            /* one rank's peak (dist.peak_gflops or the gemm probe) */
    double mfu;                    /* sum(achieved_gflops) / (world x peak_gflops) */
    double samples;       /* training samples the epoch's steps drew (skipped steps included);
                           * 0: unknown, and the key not written */
    char param_sha256[65]; /* hex, NUL-terminated */
    void *owned;          /* reader's storage for the arrays; NULL when written by hand */
};

/* JSON key of a phase ("data_wait_s"); its maximum is the key + "_max". NULL
 * for a value outside the enum. */
const char *ct_run_phase_key(enum ct_run_phase p);
/* The record's array for phase p (NULL when absent). */
const double *ct_epoch_record_phase(const struct ct_epoch_record *r, enum ct_run_phase p);
/* The slowest rank: the one whose own work (data wait, forward/backward,
 * optimizer) sums to the most, the lowest such rank on a tie. Exposed
 * communication is left out: it is time spent waiting for the others, so
 * the slowest rank is the one that waits least. -1 when a phase array is
 * NULL or world < 1. */
int ct_epoch_record_slowest_rank(const struct ct_epoch_record *r);

/* Append r as one line to f, flush it; a write error names path. */
int ct_metrics_append(FILE *f, const char *path, const struct ct_epoch_record *r);
/* Parse one line (a trailing newline is fine) into r: every required key
 * of the table, then, once world is checked (1..2^20) and param_sha256 fits,
 * the optional ones (their defaults when absent). A per-rank array must hold
 * `world` numbers. The message names what is wrong with its offset in the
 * line. */
int ct_epoch_record_parse(const char *line, struct ct_epoch_record *r);
void ct_epoch_record_free(struct ct_epoch_record *r);

/* ---------------------------------------------------------------- steps.jsonl */

/* One line of steps.jsonl. */
struct ct_step_record {
    int64_t step; /* global steps completed */
    double loss;  /* mean training loss of the steps since the previous line */
    double acc;   /* fraction of their samples classified right in training mode;
                   * NaN: unknown (optional when read: older lines lack it) */
    double lr;    /* learning rate of the last of them */
    double tokens_per_s; /* token data: the tokens of those steps per second of
                          * wall time (rank 0's clock); 0: not token data, and
                          * the key absent (optional when read) */
};

/* Append {"step": S, "loss": L, "acc": A, "lr": R} (loss and lr %.9g, acc
 * %.6f), then "tokens_per_s" (%.1f) when it is > 0, to f and flush it. */
int ct_steps_append(FILE *f, const char *path, const struct ct_step_record *r);
int ct_step_record_parse(const char *line, struct ct_step_record *r);

/* ---------------------------------------------------------------- chain.jsonl */

/* One line of chain.jsonl: one committed checkpoint, appended at its commit
 * and kept when retention deletes the checkpoint, so that the lineage of a
 * run survives. Keys, in this order: step, epoch, ckpt, digest (SHA-256 of
 * its manifest.pb, hex: the checkpoint's digest as parent digests use it),
 * parent (hex, null for the first checkpoint of a lineage), config_digest
 * (SHA-256 of the resolved config text), code_version, world, hosts (the
 * ranks' distinct host names, comma-separated, rank order), gemm, blas
 * (OpenBLAS's configuration), libraries (the manifest's other library
 * versions, "mpi=...; hwloc=...; ...", in the manifest's order; optional
 * when read: "" from a chain written before it existed), time (UTC, ISO
 * 8601). Strings are bounded by their arrays: a longer value is refused
 * (CT_ERANGE) on either side. */
struct ct_chain_entry {
    int64_t step, epoch;
    char ckpt[64];           /* "ckpt-40" */
    char digest[65];
    char parent[65];         /* "" = null */
    char config_digest[65];
    char code_version[256];
    int world;
    char hosts[1024];
    char gemm[64];
    char blas[256];
    char libraries[1024];    /* "mpi=Open MPI v4.1.4, ...; hwloc=2.8.0; ..." */
    char time[32];           /* "2026-12-03T08:40:00Z" */
};

/* Append e as one line to path, durably: opened O_APPEND (created if
 * missing), the whole line written with one write(2), fsync'd, and the
 * directory fsync'd, so a crash leaves either the line or, at worst, a torn
 * last line that ct_chain_read reports. */
int ct_chain_append(const char *path, const struct ct_chain_entry *e);
/* Format / parse one line (without its newline); the writer's text is
 * NUL-terminated in w->buf. */
int ct_chain_format(const struct ct_chain_entry *e, char **line, size_t *len); /* malloc'd */
int ct_chain_entry_parse(const char *line, size_t len, struct ct_chain_entry *e);
/* Read every entry (malloc'd array, free()). A missing file is CT_ENOENT. A
 * last line without its newline is a write cut short: with torn != NULL it
 * is left out and *torn set to its line number (0: none); with torn == NULL
 * it is an error. Any other malformed line is CT_EFORMAT naming path:line. */
int ct_chain_read(const char *path, struct ct_chain_entry **out, size_t *n, long *torn);
/* Cut a torn last line off (ftruncate to the last newline, fsync). 0 when
 * there is none or the file is missing. */
int ct_chain_drop_torn(const char *path);

/* ---------------------------------------------------------------- trimming */

/* Keep only the lines of a .jsonl log whose "step" is at most max_step: a
 * run resumed in place repeats the steps after its checkpoint, and the log
 * should hold each step once. The file is rewritten atomically (temporary
 * file, rename); a missing file is not an error. A line that does not parse
 * or has no integer "step" is an error naming the file and line, except a
 * last line without its newline (a write cut short by a kill), which is
 * dropped with a warning. */
int ct_log_trim(const char *path, int64_t max_step);

/* ---------------------------------------------------------------- key tables */

/* Each record's keys (record_keys.c): what the writers and readers above
 * follow, what the report's CSV and docs/records.md list. */
extern const struct ct_rec_schema ct_run_schema;   /* run.json */
extern const struct ct_rec_schema ct_epoch_schema; /* metrics.jsonl */
extern const struct ct_rec_schema ct_step_schema;  /* steps.jsonl */
extern const struct ct_rec_schema ct_chain_schema; /* chain.jsonl */
/* The four, then NULL. */
extern const struct ct_rec_schema *const ct_rec_schemas[];

#endif
