/* The key tables of the run's records (see reckey.h): one row per key, in
 * the order the writer puts them on the line. Adding a key to a record is
 * one row here plus the struct member (record.h) that holds its value; the
 * writer, the reader, the report's CSV and docs/records.md follow. */
#include "run/record.h"

#include <math.h>
#include <stdint.h>

#define ROWS(a) (a), sizeof(a) / sizeof *(a)

/* ================================================================ run.json */

#define R(m) CT_REC_AT(struct ct_run_record, m)
#define MFU_R "2026-12-04 (MFU)"
#define IF_PEAK CT_REC_IF_SET, offsetof(struct ct_run_record, peak_source)
#define TRANSPORT_R "2026-12-05 (transport)"
/* Written when probed (transport_mpi set), so older writers' lines stay as they were. */
#define TRANSPORT(m, doc)                                                                            \
    {#m, CT_REC_STRING, R(m), 0, CT_REC_NULLABLE, CT_REC_IF_SET,                                     \
     offsetof(struct ct_run_record, transport_mpi), TRANSPORT_R, 0, 0, doc}
static const struct ct_rec_key run_keys[] = {
    {"version", CT_REC_STRING, R(version), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "CT_VERSION of the code"},
    {"git", CT_REC_STRING, R(git), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "git describe of the code"},
    {"config", CT_REC_STRING, R(config), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "the config file's path as given"},
    {"world", CT_REC_INT, R(world), 0, 0, 0, 0, NULL, 0, 0, "number of ranks"},
    {"blas_threads", CT_REC_INT, R(blas_threads), 0, 0, 0, 0, NULL, 0, 0, "BLAS threads per rank"},
    {"blas", CT_REC_STRING, R(blas), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "OpenBLAS's configuration string"},
    {"gemm", CT_REC_STRING, R(gemm), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "the sgemm implementation that ran"},
    {"host0", CT_REC_STRING, R(host0), 0, CT_REC_NULLABLE, 0, 0, NULL, 0, 0, "rank 0's host name"},
    {"params", CT_REC_INT64, R(params), 0, 0, 0, 0, NULL, 0, 0, "number of model parameters"},
    {"steps_per_epoch", CT_REC_INT64, R(steps_per_epoch), 0, 0, 0, 0, NULL, 0, 0, "global steps of one epoch"},
    {"total_steps", CT_REC_INT64, R(total_steps), 0, 0, 0, 0, NULL, 0, 0, "global steps of the run"},
    {"flops_per_sample", CT_REC_FIXED, R(flops_per_sample), 0, 0, IF_PEAK, MFU_R, 0, 0,
     "matmul FLOPs of one sample, forward + backward"},
    {"peak_gflops", CT_REC_FIXED, R(peak_gflops), 2, 0, IF_PEAK, MFU_R, NAN, 0,
     "one rank's peak, 1e9 FLOP/s"},
    {"peak_source", CT_REC_STRING, R(peak_source), 0, CT_REC_NULLABLE, IF_PEAK, MFU_R, 0, 0,
     "\"probe\" (measured at start) or \"config\" (dist.peak_gflops)"},
    {"peak_kernel", CT_REC_STRING, R(peak_kernel), 0, CT_REC_NULLABLE, IF_PEAK, MFU_R, 0, 0,
     "the probe's kernel, shape and threads; null for config"},
    TRANSPORT(transport_mpi, "the MPI: \"openmpi\", \"mpich\", \"other\"; \"none\" without MPI"),
    TRANSPORT(transport_pml, "Open MPI's PML in use (the only one left registered after MPI_Init) "
                             "and the one requested; MPICH's device"),
    TRANSPORT(transport_btl, "Open MPI's BTLs: requested (MPI_T), initialised, and per peer (derived)"),
    TRANSPORT(transport_tcp_if, "the interfaces asked for: btl_tcp_if_include (MPI_T) or "
                                "UCX_NET_DEVICES (environment)"),
    TRANSPORT(transport_ucx, "UCX_TLS as requested in the environment"),
    TRANSPORT(transport_links, "in use: each host's interfaces with established TCP connections "
                               "to other hosts (from its rank's sockets)"),
    TRANSPORT(transport_hosts, "hosts and ranks per host: whether ranks can share memory"),
    TRANSPORT(allreduce, "the gradients' allreduce (dist.allreduce): \"ring\" (ours) or \"mpi\""),
};
const struct ct_rec_schema ct_run_schema = {
    "run.json", "How the run started (one line); more string keys may follow the fixed ones.",
    ROWS(run_keys), SIZE_MAX, SIZE_MAX, NULL};

/* ================================================================ metrics.jsonl */

#define E(m) CT_REC_AT(struct ct_epoch_record, m)
#define PHASES_E "2026-12-03 (per-rank phases)"
#define MFU_E "2026-12-04 (MFU)"
#define TOKENS_E "2026-12-04 (token data)"
#define IF_TOKENS CT_REC_IF_POSITIVE, offsetof(struct ct_epoch_record, tokens_per_s)
#define IF_FLOPS CT_REC_IF_POSITIVE, offsetof(struct ct_epoch_record, flops_per_sample)
#define PHASE(m, csv, what)                                                                              \
    {#m, CT_REC_RANKS, E(m), 4, 0, 0, 0, PHASES_E, 0, 0, "seconds " what " over the epoch's steps, per rank"}, \
    {#m "_max", CT_REC_RANKS_MAX, E(m), 4, 0, 0, 0, NULL, 0, csv, "its largest over the ranks"}
static const struct ct_rec_key epoch_keys[] = {
    {"epoch", CT_REC_INT, E(epoch), 0, 0, 0, 0, NULL, 0, 1, "1-based: epochs begun"},
    {"step", CT_REC_INT64, E(step), 0, 0, 0, 0, NULL, 0, 2, "global steps completed"},
    {"partial", CT_REC_BOOL, E(partial), 0, 0, 0, 0, NULL, 0, 3, "stopped inside this epoch"},
    {"train_loss", CT_REC_FIXED, E(train_loss), 6, 0, 0, 0, NULL, 0, 4, "mean over the epoch's samples, all ranks"},
    {"train_acc", CT_REC_FIXED, E(train_acc), 4, 0, 0, 0, "2026-12-03 (train_acc)", NAN, 5,
     "fraction classified right in training mode"},
    {"test_loss", CT_REC_FIXED, E(test_loss), 6, 0, 0, 0, NULL, 0, 6, "null when not evaluated"},
    {"test_acc", CT_REC_FIXED, E(test_acc), 4, 0, 0, 0, NULL, 0, 7, "null when not evaluated"},
    {"samples_per_s", CT_REC_FIXED, E(samples_per_s), 1, 0, 0, 0, NULL, 0, 8, "global, training only"},
    {"tokens_per_s", CT_REC_FIXED, E(tokens_per_s), 1, 0, IF_TOKENS, TOKENS_E, 0, 21,
     "token data: samples_per_s times the tokens of a sample"},
    {"val_bpb", CT_REC_FIXED, E(val_bpb), 4, 0, IF_TOKENS, TOKENS_E, NAN, 22,
     "byte vocabulary: test_loss in bits per byte"},
    {"epoch_s", CT_REC_FIXED, E(epoch_s), 4, 0, 0, 0, NULL, 0, 9, "training wall time of the epoch (max over ranks)"},
    {"eval_s", CT_REC_FIXED, E(eval_s), 4, 0, 0, 0, NULL, 0, 10, "evaluation wall time"},
    {"lr", CT_REC_DOUBLE, E(lr), 8, 0, 0, 0, NULL, 0, 11, "learning rate of the epoch's last step"},
    {"peak_rss_mib", CT_REC_FIXED, E(peak_rss_mib), 1, 0, 0, 0, NULL, 0, 12, "max over ranks of ru_maxrss"},
    {"pss_mib", CT_REC_FIXED, E(pss_mib), 1, 0, 0, 0, "2026-12-03 (pss_mib)", NAN, 13,
     "max over ranks of the proportional set size at the epoch's end"},
    {"optim_state_bytes", CT_REC_INT64, E(optim_state_bytes), 0, CT_REC_NULLABLE, 0, 0,
     "2026-12-04 (issue 25)", -1, 27, "optimizer state one rank holds (max over ranks)"},
    {"world", CT_REC_INT, E(world), 0, 0, 0, 0, NULL, 0, 14, "ranks: the length of each per-rank array"},
    PHASE(data_wait_s, 15, "waiting for the loader's batch"),
    PHASE(forward_backward_s, 16, "of compute (overlapped communication included)"),
    PHASE(exposed_comm_s, 17, "of communication not hidden behind compute"),
    PHASE(optim_s, 18, "of clipping and the optimizer step"),
    {"slowest_rank", CT_REC_INT, E(slowest_rank), 0, CT_REC_NULLABLE, 0, 0, PHASES_E, -1, 19,
     "the rank whose own work took longest"},
    {"nonfinite_skipped", CT_REC_INT64, E(nonfinite_skipped), 0, 0, 0, 0, "2026-12-03 (train.on_nonfinite)",
     0, 0, "steps dropped in the epoch (train.on_nonfinite = skip)"},
    {"nonfinite_skipped_total", CT_REC_INT64, E(nonfinite_skipped_total), 0, 0, 0, 0,
     "2026-12-03 (train.on_nonfinite)", 0, 0, "... in the run so far, across resumes"},
    {"flops_per_sample", CT_REC_FIXED, E(flops_per_sample), 0, 0, IF_FLOPS, MFU_E, 0, 23,
     "matmul FLOPs of one sample, forward + backward"},
    {"achieved_gflops", CT_REC_RANKS, E(achieved_gflops), 2, 0, IF_FLOPS, MFU_E, 0, 24,
     "per rank, 1e9 FLOP/s over the epoch's wall time (the CSV: their mean)"},
    {"peak_gflops", CT_REC_FIXED, E(peak_gflops), 2, 0, IF_FLOPS, MFU_E, NAN, 25, "one rank's peak"},
    {"mfu", CT_REC_FIXED, E(mfu), 4, 0, IF_FLOPS, MFU_E, NAN, 26, "sum(achieved_gflops) / (world x peak_gflops)"},
    {"samples", CT_REC_FIXED, E(samples), 0, 0, CT_REC_IF_POSITIVE, offsetof(struct ct_epoch_record, samples),
     "2026-12-05 (samples)", 0, 0, "training samples the epoch's steps drew (skipped steps included)"},
    {"param_sha256", CT_REC_CHARS, E(param_sha256), 0, 0, 0, 0, NULL, 0, 20,
     "SHA-256 of the parameters at the epoch's end, hex"},
};
const struct ct_rec_schema ct_epoch_schema = {
    "metrics.jsonl", "One line per epoch (or the part of it a run did before max_steps or a signal).",
    ROWS(epoch_keys), offsetof(struct ct_epoch_record, world), offsetof(struct ct_epoch_record, owned),
    "out of memory for %d ranks' phase times"};

/* ================================================================ steps.jsonl */

#define S(m) CT_REC_AT(struct ct_step_record, m)
static const struct ct_rec_key step_keys[] = {
    {"step", CT_REC_INT64, S(step), 0, 0, 0, 0, NULL, 0, 0, "global steps completed"},
    {"loss", CT_REC_DOUBLE, S(loss), 9, 0, 0, 0, NULL, 0, 0, "mean training loss since the previous line"},
    {"acc", CT_REC_FIXED, S(acc), 6, 0, 0, 0, "2026-12-03 (train_acc)", NAN, 0,
     "fraction of those samples classified right in training mode"},
    {"lr", CT_REC_DOUBLE, S(lr), 9, 0, 0, 0, NULL, 0, 0, "learning rate of the last of those steps"},
    {"tokens_per_s", CT_REC_FIXED, S(tokens_per_s), 1, 0, CT_REC_IF_POSITIVE,
     offsetof(struct ct_step_record, tokens_per_s), "2026-12-04 (token data)", 0, 0,
     "token data: tokens per second of wall time (rank 0's clock)"},
};
const struct ct_rec_schema ct_step_schema = {
    "steps.jsonl", "One line every log.every_steps global steps.", ROWS(step_keys), SIZE_MAX, SIZE_MAX,
    NULL};

/* ================================================================ chain.jsonl */

#define C(m) CT_REC_AT(struct ct_chain_entry, m)
static const struct ct_rec_key chain_keys[] = {
    {"step", CT_REC_INT64, C(step), 0, 0, 0, 0, NULL, 0, 0, "global step of the checkpoint"},
    {"epoch", CT_REC_INT64, C(epoch), 0, 0, 0, 0, NULL, 0, 0, "its epoch"},
    {"ckpt", CT_REC_CHARS, C(ckpt), 0, 0, 0, 0, NULL, 0, 0, "its directory name (\"ckpt-40\")"},
    {"digest", CT_REC_CHARS, C(digest), 0, 0, 0, 0, NULL, 0, 0, "SHA-256 of its manifest.pb, hex"},
    {"parent", CT_REC_CHARS, C(parent), 0, CT_REC_NULLABLE | CT_REC_EMPTY_NULL, 0, 0, NULL, 0, 0,
     "the parent's digest; null for the first checkpoint of a lineage"},
    {"config_digest", CT_REC_CHARS, C(config_digest), 0, 0, 0, 0, NULL, 0, 0,
     "SHA-256 of the resolved config text"},
    {"code_version", CT_REC_CHARS, C(code_version), 0, 0, 0, 0, NULL, 0, 0, "version and git describe"},
    {"world", CT_REC_INT, C(world), 0, 0, 0, 0, NULL, 0, 0, "ranks"},
    {"hosts", CT_REC_CHARS, C(hosts), 0, 0, 0, 0, NULL, 0, 0, "the ranks' distinct host names, comma-separated"},
    {"gemm", CT_REC_CHARS, C(gemm), 0, 0, 0, 0, NULL, 0, 0, "the sgemm implementation"},
    {"blas", CT_REC_CHARS, C(blas), 0, 0, 0, 0, NULL, 0, 0, "OpenBLAS's configuration"},
    {"libraries", CT_REC_CHARS, C(libraries), 0, CT_REC_NULLABLE, 0, 0, "2026-12-02 (libraries)", 0, 0,
     "the manifest's other library versions, \"mpi=...; hwloc=...\""},
    {"time", CT_REC_CHARS, C(time), 0, 0, 0, 0, NULL, 0, 0, "commit time, UTC ISO 8601"},
};
const struct ct_rec_schema ct_chain_schema = {
    "chain.jsonl", "One line per committed checkpoint, kept when retention deletes it.", ROWS(chain_keys),
    SIZE_MAX, SIZE_MAX, NULL};

const struct ct_rec_schema *const ct_rec_schemas[] = {&ct_run_schema, &ct_epoch_schema, &ct_step_schema,
                                                      &ct_chain_schema, NULL};
