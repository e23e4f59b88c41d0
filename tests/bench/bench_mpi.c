/* bench_mpi: MPI point-to-point and allreduce microbenchmark for the alpha-beta
 * model in tests/bench/scaling_model.py. Run by hand, never by CI.
 *
 * It measures, on whatever MPI transport the launch gives (shared memory on one
 * host, a network across hosts):
 *   pingpong    ranks 0 and 1 bounce one message (8 B .. max), one-way time =
 *               round trip / 2; bandwidth = bytes / one-way time. Other ranks
 *               wait in a barrier.
 *   allreduce   MPI_Allreduce(MPI_IN_PLACE, float, MPI_SUM) on every rank (4 B ..
 *               max), in place because that is how src/parallel/comm_mpi.c reduces the
 *               gradient buffer.
 *   iallreduce  MPI_Iallreduce then MPI_Wait at once: the same reduction through
 *               the non-blocking path that the bucketed gradient sync uses (cost of
 *               the path itself, no overlap).
 *   reduce_scatter, ireduce_scatter, allgatherv, iallgatherv
 *               ZeRO-1's collectives as dist.shard_optimizer calls them: the
 *               bytes cut into N equal parts, MPI_(I)Reduce_scatter and
 *               MPI_(I)Allgatherv in place (the non-blocking ones waited for at
 *               once). "bytes" is the whole buffer, as for the allreduce, so a
 *               reduce-scatter + all-gather pair compares with one allreduce.
 *   overlap     MPI_Iallreduce, then a busy compute loop as long as the measured
 *               blocking allreduce of that size, then MPI_Wait; once without MPI
 *               calls during the compute and once calling MPI_Test every 50 us.
 *               The hidden fraction says how much of the reduction progressed
 *               behind compute (Open MPI's libnbc progresses only inside MPI calls,
 *               so without polling little is expected to hide).
 *
 * Timing: per size, a warm-up, then S samples (default 11); each sample times
 * `iters` back-to-back operations after a barrier and divides. iters is chosen
 * from the warm-up so that a sample lasts about --sample-ms (at least 1, at most
 * 10000), and rank 0's choice is broadcast so that all ranks agree. For the
 * collectives a sample's time is the maximum over ranks (a training step waits
 * for the slowest rank). Reported: median and min over the samples.
 *
 * Output: a table on stdout, and with --json FILE one JSON object per line (one
 * "meta" line, then one line per measurement) for scaling_model.py. The JSON is
 * written with printf: every value is a number or a fixed word except the MPI
 * library string, which is escaped; this keeps the program one file with no
 * dependency beyond MPI (house style otherwise asks for a JSON writer).
 *
 * What it is not: a copy of the OSU benchmarks (written from scratch here), nor a
 * test. It knows nothing of ctrain's code; it does not link libctrain.
 *
 * Build and run (from the project root; no CMake rule, like bench_ckpt.c):
 *     mpicc -std=c11 -O2 -Wall -Wextra tests/bench/bench_mpi.c -o /tmp/bench_mpi -lm
 *     mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/bench_mpi --json /tmp/mpi-np2.jsonl
 *     mpirun --allow-run-as-root --oversubscribe -np 4 /tmp/bench_mpi --no-pingpong --json /tmp/mpi-np4.jsonl
 *     /tmp/bench_mpi --help
 */
#define _POSIX_C_SOURCE 200809L

#include <mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum bench_kind {
    BENCH_KIND_PINGPONG,
    BENCH_KIND_ALLREDUCE,
    BENCH_KIND_IALLREDUCE,
    BENCH_KIND_REDUCE_SCATTER,
    BENCH_KIND_IREDUCE_SCATTER,
    BENCH_KIND_ALLGATHERV,
    BENCH_KIND_IALLGATHERV,
    BENCH_KIND_COUNT
};

static const char *const bench_kind_names[BENCH_KIND_COUNT] = {
    [BENCH_KIND_PINGPONG] = "pingpong",
    [BENCH_KIND_ALLREDUCE] = "allreduce",
    [BENCH_KIND_IALLREDUCE] = "iallreduce",
    [BENCH_KIND_REDUCE_SCATTER] = "reduce_scatter",
    [BENCH_KIND_IREDUCE_SCATTER] = "ireduce_scatter",
    [BENCH_KIND_ALLGATHERV] = "allgatherv",
    [BENCH_KIND_IALLGATHERV] = "iallgatherv",
};

/* What each sweep calls (in place, float sum), for its table's title. */
static const char *const bench_kind_calls[BENCH_KIND_COUNT] = {
    [BENCH_KIND_ALLREDUCE] = "MPI_Allreduce (sum)",
    [BENCH_KIND_IALLREDUCE] = "MPI_Iallreduce + MPI_Wait (sum)",
    [BENCH_KIND_REDUCE_SCATTER] = "MPI_Reduce_scatter (sum, N equal parts)",
    [BENCH_KIND_IREDUCE_SCATTER] = "MPI_Ireduce_scatter + MPI_Wait (sum, N equal parts)",
    [BENCH_KIND_ALLGATHERV] = "MPI_Allgatherv (N equal parts)",
    [BENCH_KIND_IALLGATHERV] = "MPI_Iallgatherv + MPI_Wait (N equal parts)",
};

struct bench_params {
    size_t min_bytes_p2p, min_bytes_coll, max_bytes;
    int samples;
    double sample_ms;
    int run[BENCH_KIND_COUNT];
    int overlap;
    const char *json_path;
};

struct bench_ctx {
    struct bench_params p;
    int rank, size;
    char *buf;     /* max_bytes, the message / reduction buffer */
    int *counts, *displs; /* (size) the reduce-scatter's and all-gather's parts */
    FILE *json;    /* rank 0 only; NULL: no JSON */
    double *times; /* samples, scratch */
};

struct bench_stat {
    double median_us, min_us, max_us;
    int iters;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpirun -np N bench_mpi [options]\n"
            "  --max-bytes B     largest message / reduction in bytes (default 67108864 = 64 MiB)\n"
            "  --samples S       timed samples per size (default 11)\n"
            "  --sample-ms T     target length of one sample in ms (default 5)\n"
            "  --no-pingpong     skip the ping-pong sweep (needs N >= 2 otherwise)\n"
            "  --no-allreduce    skip the MPI_Allreduce sweep\n"
            "  --no-iallreduce   skip the MPI_Iallreduce + MPI_Wait sweep\n"
            "  --no-zero         skip the (i)reduce_scatter and (i)allgatherv sweeps\n"
            "  --no-overlap      skip the Iallreduce-behind-compute check (sizes >= 64 KiB)\n"
            "  --json FILE       also write one JSON object per line to FILE (rank 0)\n"
            "  --help            this text\n");
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || v == 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

/* Returns 0, 1 for --help, -1 for bad arguments (message printed by rank 0). */
static int parse_args(int argc, char **argv, struct bench_params *p, int rank)
{
    *p = (struct bench_params){.min_bytes_p2p = 8, .min_bytes_coll = 4, .max_bytes = (size_t)64 << 20,
                               .samples = 11, .sample_ms = 5.0, .overlap = 1};
    for (int k = 0; k < BENCH_KIND_COUNT; k++)
        p->run[k] = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            if (rank == 0)
                usage(stdout);
            return 1;
        } else if (strcmp(a, "--no-pingpong") == 0) {
            p->run[BENCH_KIND_PINGPONG] = 0;
        } else if (strcmp(a, "--no-allreduce") == 0) {
            p->run[BENCH_KIND_ALLREDUCE] = 0;
        } else if (strcmp(a, "--no-iallreduce") == 0) {
            p->run[BENCH_KIND_IALLREDUCE] = 0;
        } else if (strcmp(a, "--no-zero") == 0) {
            for (int k = BENCH_KIND_REDUCE_SCATTER; k <= BENCH_KIND_IALLGATHERV; k++)
                p->run[k] = 0;
        } else if (strcmp(a, "--no-overlap") == 0) {
            p->overlap = 0;
        } else if (strcmp(a, "--max-bytes") == 0 && v) {
            if (parse_size(v, &p->max_bytes) < 0 || p->max_bytes < 8 || p->max_bytes > ((size_t)1 << 31)) {
                if (rank == 0)
                    fprintf(stderr, "bench_mpi: --max-bytes wants 8 .. 2^31, found '%s'\n", v);
                return -1;
            }
            i++;
        } else if (strcmp(a, "--samples") == 0 && v) {
            p->samples = atoi(v);
            if (p->samples < 1 || p->samples > 1000) {
                if (rank == 0)
                    fprintf(stderr, "bench_mpi: --samples wants 1 .. 1000, found '%s'\n", v);
                return -1;
            }
            i++;
        } else if (strcmp(a, "--sample-ms") == 0 && v) {
            p->sample_ms = atof(v);
            if (!(p->sample_ms > 0 && p->sample_ms <= 10000)) {
                if (rank == 0)
                    fprintf(stderr, "bench_mpi: --sample-ms wants a number in (0, 10000], found '%s'\n", v);
                return -1;
            }
            i++;
        } else if (strcmp(a, "--json") == 0 && v) {
            p->json_path = v;
            i++;
        } else {
            if (rank == 0) {
                fprintf(stderr, "bench_mpi: unknown or incomplete argument '%s'\n", a);
                usage(stderr);
            }
            return -1;
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static struct bench_stat summarize(double *t, int n, int iters)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    return (struct bench_stat){.median_us = med * 1e6, .min_us = t[0] * 1e6, .max_us = t[n - 1] * 1e6,
                               .iters = iters};
}

/* iters so that one sample lasts about sample_ms, given one op's warm-up time;
 * decided on rank 0 and broadcast, so every rank runs the same count. */
static int pick_iters(const struct bench_ctx *c, double one_op_s)
{
    int iters = 1;
    if (c->rank == 0) {
        double want = c->p.sample_ms * 1e-3 / (one_op_s > 1e-9 ? one_op_s : 1e-9);
        iters = want < 1 ? 1 : want > 10000 ? 10000 : (int)want;
    }
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return iters;
}

/* ------------------------------------------------------------ ping-pong */

/* Ranks 0 and 1 do `iters` round trips of `bytes`; returns rank 0's seconds. */
static double pingpong_once(struct bench_ctx *c, size_t bytes, int iters)
{
    double t = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (c->rank == 0) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            MPI_Send(c->buf, (int)bytes, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(c->buf, (int)bytes, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        t = MPI_Wtime() - t0;
    } else if (c->rank == 1) {
        for (int i = 0; i < iters; i++) {
            MPI_Recv(c->buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(c->buf, (int)bytes, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    return t;
}

static void run_pingpong(struct bench_ctx *c)
{
    if (c->rank == 0) {
        printf("\n# ping-pong, ranks 0 <-> 1 of %d: one-way time = round trip / 2 (%d samples)\n", c->size,
               c->p.samples);
        printf("%12s %8s %12s %12s %12s\n", "bytes", "iters", "median_us", "min_us", "MB/s(med)");
    }
    for (size_t bytes = c->p.min_bytes_p2p; bytes <= c->p.max_bytes; bytes *= 2) {
        double w = pingpong_once(c, bytes, 2);         /* warm-up: pages, eager/rendezvous setup */
        w = pingpong_once(c, bytes, 3) / 3.0;          /* one round trip */
        int iters = pick_iters(c, w);
        for (int s = 0; s < c->p.samples; s++)
            c->times[s] = pingpong_once(c, bytes, iters) / (2.0 * iters);
        if (c->rank != 0)
            continue;
        struct bench_stat st = summarize(c->times, c->p.samples, iters);
        double mbs = (double)bytes / st.median_us; /* bytes/us = MB/s (10^6) */
        printf("%12zu %8d %12.2f %12.2f %12.1f\n", bytes, iters, st.median_us, st.min_us, mbs);
        if (c->json)
            fprintf(c->json,
                    "{\"bench\": \"pingpong\", \"np\": %d, \"bytes\": %zu, \"iters\": %d, \"samples\": %d, "
                    "\"median_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, \"mb_per_s\": %.3f}\n",
                    c->size, bytes, iters, c->p.samples, st.median_us, st.min_us, st.max_us, mbs);
    }
}

/* ------------------------------------------------------------ allreduce */

/* count floats cut into size parts (the last shorter), as shard.c cuts. */
static void cut(struct bench_ctx *c, int count)
{
    const int part = (count + c->size - 1) / c->size;
    for (int r = 0, at = 0; r < c->size; r++) {
        c->counts[r] = count - at < part ? count - at : part;
        c->displs[r] = at;
        at += c->counts[r];
    }
}

static void allreduce_op(struct bench_ctx *c, int count, enum bench_kind kind)
{
    MPI_Request req = MPI_REQUEST_NULL;
    if (kind >= BENCH_KIND_REDUCE_SCATTER)
        cut(c, count);
    switch (kind) {
    case BENCH_KIND_IALLREDUCE:
        MPI_Iallreduce(MPI_IN_PLACE, c->buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        break;
    case BENCH_KIND_REDUCE_SCATTER:
        MPI_Reduce_scatter(MPI_IN_PLACE, c->buf, c->counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case BENCH_KIND_IREDUCE_SCATTER:
        MPI_Ireduce_scatter(MPI_IN_PLACE, c->buf, c->counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                            &req);
        break;
    case BENCH_KIND_ALLGATHERV:
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->buf, c->counts, c->displs, MPI_FLOAT,
                       MPI_COMM_WORLD);
        break;
    case BENCH_KIND_IALLGATHERV:
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->buf, c->counts, c->displs,
                        MPI_FLOAT, MPI_COMM_WORLD, &req);
        break;
    default:
        MPI_Allreduce(MPI_IN_PLACE, c->buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Wait(&req, MPI_STATUS_IGNORE);
}

/* Seconds per op, the maximum over ranks. */
static double allreduce_once(struct bench_ctx *c, int count, int iters, enum bench_kind kind)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        allreduce_op(c, count, kind);
    double t = (MPI_Wtime() - t0) / iters, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static void run_allreduce(struct bench_ctx *c, enum bench_kind kind)
{
    const char *name = bench_kind_names[kind];
    if (c->rank == 0) {
        printf("\n# %s, floats, in place, %d ranks: time per call = max over ranks (%d samples)\n",
               bench_kind_calls[kind], c->size, c->p.samples);
        printf("%12s %8s %12s %12s %12s %12s\n", "bytes", "iters", "median_us", "min_us", "algbw_GB/s",
               "busbw_GB/s");
    }
    /* Zeros stay zeros under summation: no overflow to inf, no denormals. */
    memset(c->buf, 0, c->p.max_bytes);
    for (size_t bytes = c->p.min_bytes_coll; bytes <= c->p.max_bytes; bytes *= 2) {
        int count = (int)(bytes / sizeof(float));
        allreduce_once(c, count, 2, kind);
        double w = allreduce_once(c, count, 3, kind);
        int iters = pick_iters(c, w);
        for (int s = 0; s < c->p.samples; s++)
            c->times[s] = allreduce_once(c, count, iters, kind);
        if (c->rank != 0)
            continue;
        struct bench_stat st = summarize(c->times, c->p.samples, iters);
        /* algbw: bytes / time; busbw: what each rank's link carries in a ring,
         * 2 (p-1)/p * bytes / time for an allreduce, (p-1)/p for a
         * reduce-scatter or an all-gather (NCCL's convention). 10^9 bytes = 1 GB. */
        double alg = (double)bytes / st.median_us * 1e-3;
        double ring = kind <= BENCH_KIND_IALLREDUCE ? 2.0 : 1.0; /* a reduce-scatter or an
                                                                  * all-gather: half a ring */
        double bus = c->size > 1 ? alg * ring * (c->size - 1) / c->size : 0.0;
        printf("%12zu %8d %12.2f %12.2f %12.3f %12.3f\n", bytes, iters, st.median_us, st.min_us, alg, bus);
        if (c->json)
            fprintf(c->json,
                    "{\"bench\": \"%s\", \"np\": %d, \"bytes\": %zu, \"iters\": %d, \"samples\": %d, "
                    "\"median_us\": %.4f, \"min_us\": %.4f, \"max_us\": %.4f, \"algbw_gb_per_s\": %.5f, "
                    "\"busbw_gb_per_s\": %.5f}\n",
                    name, c->size, bytes, iters, c->p.samples, st.median_us, st.min_us, st.max_us, alg, bus);
    }
}

/* ------------------------------------------------------------ overlap */

/* Spin for `s` seconds; with poll_s > 0, call MPI_Test on req every poll_s. */
static void busy_compute(double s, MPI_Request *req, double poll_s)
{
    volatile double sink = 1.0;
    double t0 = MPI_Wtime(), next = t0 + poll_s;
    int done = 0;
    for (;;) {
        for (int i = 0; i < 200; i++)
            sink = sink * 1.0000001 + 1e-9;
        double now = MPI_Wtime();
        if (now - t0 >= s)
            break;
        if (poll_s > 0 && !done && now >= next) {
            MPI_Test(req, &done, MPI_STATUS_IGNORE);
            next = now + poll_s;
        }
    }
}

/* Iallreduce, compute for comp_s, Wait: seconds per op, max over ranks. */
static double overlap_once(struct bench_ctx *c, int count, double comp_s, double poll_s, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, c->buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        busy_compute(comp_s, &req, poll_s);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    double t = (MPI_Wtime() - t0) / iters, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return tmax;
}

static void run_overlap(struct bench_ctx *c)
{
    if (c->size < 2)
        return;
    if (c->rank == 0) {
        printf("\n# overlap: MPI_Iallreduce, compute as long as the blocking allreduce (t_comm), MPI_Wait;\n"
               "# exposed = t_total - t_compute (us); hidden = 1 - exposed / t_comm (1: all hidden, 0: none,\n"
               "# < 0: the non-blocking path costs more than the blocking call); %d ranks\n",
               c->size);
        printf("%12s %12s %12s %14s %14s %10s %10s\n", "bytes", "t_comm_us", "t_compute_us",
               "exposed_nopoll", "exposed_poll50", "hid_nopoll", "hid_poll");
    }
    memset(c->buf, 0, c->p.max_bytes);
    for (size_t bytes = (size_t)64 << 10; bytes <= c->p.max_bytes; bytes *= 4) {
        int count = (int)(bytes / sizeof(float));
        allreduce_once(c, count, 2, BENCH_KIND_ALLREDUCE);
        double w = allreduce_once(c, count, 3, BENCH_KIND_ALLREDUCE);
        int iters = pick_iters(c, 2.0 * w);
        int ns = c->p.samples < 5 ? c->p.samples : 5;
        for (int s = 0; s < ns; s++)
            c->times[s] = allreduce_once(c, count, iters, BENCH_KIND_ALLREDUCE);
        struct bench_stat comm = summarize(c->times, ns, iters);
        double comp_s = comm.median_us * 1e-6;
        MPI_Bcast(&comp_s, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double tot[2];
        for (int mode = 0; mode < 2; mode++) {
            double poll = mode ? 50e-6 : 0.0;
            for (int s = 0; s < ns; s++)
                c->times[s] = overlap_once(c, count, comp_s, poll, iters);
            tot[mode] = summarize(c->times, ns, iters).median_us;
        }
        if (c->rank != 0)
            continue;
        double tc = comm.median_us, tp = comp_s * 1e6;
        double h0 = (tc + tp - tot[0]) / tc, h1 = (tc + tp - tot[1]) / tc;
        printf("%12zu %12.1f %12.1f %14.1f %14.1f %10.2f %10.2f\n", bytes, tc, tp, tot[0] - tp, tot[1] - tp,
               h0, h1);
        if (c->json)
            fprintf(c->json,
                    "{\"bench\": \"overlap\", \"np\": %d, \"bytes\": %zu, \"iters\": %d, \"samples\": %d, "
                    "\"t_comm_us\": %.3f, \"t_compute_us\": %.3f, \"total_nopoll_us\": %.3f, "
                    "\"total_poll_us\": %.3f, \"poll_interval_us\": 50, \"hidden_nopoll\": %.4f, "
                    "\"hidden_poll\": %.4f}\n",
                    c->size, bytes, iters, ns, tc, tp, tot[0], tot[1], h0, h1);
    }
}

/* ------------------------------------------------------------ main */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void write_meta(struct bench_ctx *c)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "", host[MPI_MAX_PROCESSOR_NAME] = "";
    int len;
    MPI_Get_library_version(lib, &len);
    MPI_Get_processor_name(host, &len);
    char *nl = strchr(lib, '\n');
    if (nl)
        *nl = '\0';
    printf("# bench_mpi: %d ranks on %s; %s\n", c->size, host, lib);
    if (!c->json)
        return;
    fprintf(c->json, "{\"bench\": \"meta\", \"np\": %d, \"time\": %lld, \"samples\": %d, \"sample_ms\": %g, ",
            c->size, (long long)time(NULL), c->p.samples, c->p.sample_ms);
    fputs("\"host\": ", c->json);
    json_string(c->json, host);
    fputs(", \"mpi\": ", c->json);
    json_string(c->json, lib);
    fputs("}\n", c->json);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct bench_ctx c = {0};
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.size);
    int rc = parse_args(argc, argv, &c.p, c.rank);
    if (rc != 0) {
        MPI_Finalize();
        return rc > 0 ? 0 : 2;
    }
    c.buf = malloc(c.p.max_bytes);
    c.times = malloc(sizeof *c.times * (size_t)c.p.samples);
    c.counts = malloc(sizeof *c.counts * (size_t)c.size);
    c.displs = malloc(sizeof *c.displs * (size_t)c.size);
    int ok = c.buf && c.times && c.counts && c.displs, all_ok;
    if (ok && c.rank == 0 && c.p.json_path) {
        c.json = fopen(c.p.json_path, "w");
        if (!c.json) {
            perror(c.p.json_path);
            ok = 0;
        }
    }
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (c.rank == 0)
            fprintf(stderr, "bench_mpi: setup failed on some rank (out of memory for %zu bytes, or --json)\n",
                    c.p.max_bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(c.buf, 1, c.p.max_bytes); /* touch every page before timing */
    if (c.rank == 0)
        write_meta(&c);
    if (c.p.run[BENCH_KIND_PINGPONG]) {
        if (c.size >= 2)
            run_pingpong(&c);
        else if (c.rank == 0)
            printf("\n# ping-pong skipped: needs at least 2 ranks\n");
    }
    if (c.p.run[BENCH_KIND_ALLREDUCE])
        run_allreduce(&c, BENCH_KIND_ALLREDUCE);
    for (int k = BENCH_KIND_IALLREDUCE; k < BENCH_KIND_COUNT; k++)
        if (c.p.run[k])
            run_allreduce(&c, (enum bench_kind)k);
    if (c.p.overlap)
        run_overlap(&c);
    if (c.json && fclose(c.json) != 0)
        perror(c.p.json_path);
    free(c.buf);
    free(c.times);
    free(c.counts);
    free(c.displs);
    MPI_Finalize();
    return 0;
}
