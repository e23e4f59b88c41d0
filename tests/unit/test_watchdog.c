/* The watchdog's pure parts (decision, message, heartbeat records) and its
 * thread in one process: a heartbeat file appears and advances, progress
 * keeps on_stall from being called, and a process that makes no progress
 * for the deadline gets on_stall with a message naming it. The whole job
 * (a SIGSTOPped rank under Slurm) is tested in tests/cluster/test_faults.sh. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_test.h"
#include "core/liveness.h"
#include "parallel/watchdog.h"

static struct ct_watchdog_peer peer(int alive, int64_t step, double idle)
{
    struct ct_watchdog_peer p = {.valid = 1, .alive = alive, .step = step, .idle_s = idle};
    snprintf(p.host, sizeof p.host, "node%d", (int)step % 7);
    return p;
}

static void test_decide(void)
{
    int lag[8], n = -1;
    /* One rank still progressing: no verdict, whatever the others do. */
    struct ct_watchdog_peer a[4] = {peer(1, 10, 50), peer(1, 10, 2), peer(0, 9, 99), peer(1, 10, 50)};
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 4, 10, lag, &n), 0);
    CU_ASSERT_EQUAL(n, 0);
    /* Everyone idle; rank 2 does not respond: it alone is behind. */
    a[1].idle_s = 11;
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 4, 10, lag, &n), 1);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(lag[0], 2);
    /* A dead rank counts as stalled even when its last record said it was busy. */
    a[2].idle_s = 0;
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 4, 10, lag, &n), 1);
    CU_ASSERT_EQUAL(lag[0], 2);
    /* All alive, steps differ: the lowest steps are behind. */
    struct ct_watchdog_peer b[4] = {peer(1, 10, 20), peer(1, 8, 20), peer(1, 10, 20), peer(1, 8, 20)};
    CU_ASSERT_EQUAL(ct_watchdog_decide(b, 4, 10, lag, &n), 1);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(lag[0], 1);
    CU_ASSERT_EQUAL(lag[1], 3);
    /* All alive at the same step: all of them. */
    b[1].step = b[3].step = 10;
    CU_ASSERT_EQUAL(ct_watchdog_decide(b, 4, 10, lag, &n), 1);
    CU_ASSERT_EQUAL(n, 4);
    /* No record at all (never started, run directory not shared). */
    b[0].valid = 0;
    CU_ASSERT_EQUAL(ct_watchdog_decide(b, 4, 10, lag, &n), 1);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(lag[0], 0);
    /* Exactly at the deadline is stalled; just under is not. */
    struct ct_watchdog_peer c[1] = {peer(1, 3, 10)};
    CU_ASSERT_EQUAL(ct_watchdog_decide(c, 1, 10, lag, &n), 1);
    c[0].idle_s = 9.999;
    CU_ASSERT_EQUAL(ct_watchdog_decide(c, 1, 10, lag, &n), 0);
}

static void test_message(void)
{
    struct ct_watchdog_peer a[3] = {peer(1, 5, 20), peer(0, 4, 20), {0}};
    snprintf(a[1].host, sizeof a[1].host, "nodeB");
    int lag[2] = {1, 2};
    char msg[512];
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, 2, 10);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rank 1 (host nodeB, last step 4, not responding"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rank 2 (no heartbeat"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "10 s (dist.watchdog_s)"));
    /* A small buffer is cut, never overrun. */
    char tiny[16];
    memset(tiny, 'x', sizeof tiny);
    ct_watchdog_message(tiny, 8, a, 3, lag, 2, 10);
    CU_ASSERT_EQUAL(strlen(tiny), 7);
    CU_ASSERT_EQUAL(tiny[8], 'x');
}

static struct ct_watchdog_peer waiting(const char *host, const char *what, uint64_t seq)
{
    struct ct_watchdog_peer p = peer(1, 46, 25);
    snprintf(p.host, sizeof p.host, "%s", host);
    snprintf(p.wait, sizeof p.wait, "%s", what);
    p.seq = seq;
    p.wait_s = 24;
    return p;
}

/* Every rank alive and waiting in one collective: a partition between the
 * hosts, named as such; some waiting in a collective that others never
 * entered: those others named. */
static void test_message_partition(void)
{
    struct ct_watchdog_peer a[3] = {waiting("h0", "allreduce", 812), waiting("h0", "allreduce", 812),
                                    waiting("h1", "allreduce", 812)};
    int lag[3], n;
    char msg[1024];
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 3, 20, lag, &n), 1);
    CU_ASSERT_EQUAL(n, 3);
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, n, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "every rank is alive (heartbeats fresh) and blocked in communication"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "every rank waits in allreduce #812 (for 24 s) at step 46"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "the hosts h0 (ranks 0,1), h1 (rank 2) have not answered each other"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "network partition"));
    CU_ASSERT_PTR_NULL(strstr(msg, "behind:"));
    /* All on one host: no partition to blame. */
    snprintf(a[2].host, sizeof a[2].host, "h0");
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, n, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "all on host h0"));
    CU_ASSERT_PTR_NULL(strstr(msg, "partition"));
    /* Rank 2 alive but busy elsewhere (an earlier collective done, not in
     * this one): it is the one that has not answered. */
    snprintf(a[2].host, sizeof a[2].host, "h1");
    a[2].wait[0] = '\0';
    a[2].seq = 811;
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 3, 20, lag, &n), 1);
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, n, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "behind: rank 0 (host h0, last step 46, still running)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "ranks on h0 (ranks 0,1) wait in allreduce #812 (for 24 s), which h1 (rank 2) never entered"));
    /* Cut inside a collective: rank 2's share never arrived, so it is still
     * in #811 a step behind while ranks 0 and 1 went on to #812; everyone
     * alive and in communication: a partition all the same. */
    a[2] = waiting("h1", "allreduce", 811);
    a[2].step = 45;
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 3, 20, lag, &n), 1);
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, n, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "every rank is alive (heartbeats fresh) and blocked in communication"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "ranks wait in allreduce #812 (for 24 s) at step 46 and, still in an "
                                       "earlier one, allreduce #811 at step 45"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "the hosts h0 (ranks 0,1), h1 (rank 2) have not answered each other"));
    CU_ASSERT_PTR_NULL(strstr(msg, "behind:"));
    /* A stopped rank is not a partition. */
    a[2] = waiting("h1", "allreduce", 812);
    a[2].alive = 0;
    CU_ASSERT_EQUAL(ct_watchdog_decide(a, 3, 20, lag, &n), 1);
    ct_watchdog_message(msg, sizeof msg, a, 3, lag, n, 20);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "rank 2 (host h1, last step 46, not responding"));
    CU_ASSERT_PTR_NULL(strstr(msg, "partition"));
}

static void test_records(void)
{
    char rec[CT_WATCHDOG_RECORD];
    struct ct_watchdog_peer self = peer(1, 42, 1.5);
    snprintf(self.host, sizeof self.host, "node2");
    snprintf(self.wait, sizeof self.wait, "bcast");
    self.seq = 99;
    self.wait_s = 0.25;
    ct_watchdog_format(rec, 0xabcdef, 3, &self, 7);
    CU_ASSERT_EQUAL(rec[CT_WATCHDOG_RECORD - 1], '\n');
    CU_ASSERT_PTR_NULL(memchr(rec, '\0', sizeof rec));
    struct ct_watchdog_peer p;
    uint64_t beat = 0;
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 0xabcdef, 3, &p, &beat), 0);
    CU_ASSERT_EQUAL(p.valid, 1);
    CU_ASSERT_EQUAL(p.step, 42);
    CU_ASSERT_EQUAL(beat, 7);
    CU_ASSERT_DOUBLE_EQUAL(p.idle_s, 1.5, 1e-9);
    CU_ASSERT_STRING_EQUAL(p.host, "node2");
    CU_ASSERT_STRING_EQUAL(p.wait, "bcast");
    CU_ASSERT_EQUAL(p.seq, 99);
    CU_ASSERT_DOUBLE_EQUAL(p.wait_s, 0.25, 1e-9);
    /* Not waiting: "-" in the record, "" once read. */
    self.wait[0] = '\0';
    ct_watchdog_format(rec, 0xabcdef, 3, &self, 8);
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 0xabcdef, 3, &p, &beat), 0);
    CU_ASSERT_STRING_EQUAL(p.wait, "");
    CU_ASSERT_EQUAL(p.seq, 99);
    ct_watchdog_format(rec, 0xabcdef, 3, &self, 7);
    /* Another job's record, another rank's, a torn or short one: refused. */
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 0xabcdee, 3, &p, &beat), -1);
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 0xabcdef, 2, &p, &beat), -1);
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec - 1, 0xabcdef, 3, &p, &beat), -1);
    rec[CT_WATCHDOG_RECORD - 1] = ' ';
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 0xabcdef, 3, &p, &beat), -1);
    char garbage[CT_WATCHDOG_RECORD];
    memset(garbage, 'z', sizeof garbage);
    garbage[sizeof garbage - 1] = '\n';
    CU_ASSERT_EQUAL(ct_watchdog_parse(garbage, sizeof garbage, 0xabcdef, 3, &p, &beat), -1);
}

static atomic_int g_stalls;
static char g_msg[4096];
static void stall(const char *message, void *ctx)
{
    (void)ctx;
    snprintf(g_msg, sizeof g_msg, "%s", message);
    atomic_fetch_add(&g_stalls, 1);
}

static void test_thread(void)
{
    const char *dir = ct_test_tmpdir();
    struct ct_watchdog wd;
    struct ct_watchdog_params p = {.run_dir = dir, .rank = 0, .world = 1, .host = "here",
                                   .deadline_s = 1, .nonce = 99, .on_stall = stall};
    CU_ASSERT_EQUAL_FATAL(ct_watchdog_start(&wd, &p), 0);
    /* Progress every 0.1 s for 2.5 s (beyond the deadline): no stall. */
    for (int i = 0; i < 25; i++) {
        ct_liveness_mark(i);
        usleep(100000);
    }
    CU_ASSERT_EQUAL(atomic_load(&g_stalls), 0);
    char path[1200], rec[CT_WATCHDOG_RECORD];
    snprintf(path, sizeof path, "%s/heartbeat/rank-00000", dir);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fread(rec, 1, sizeof rec, f), sizeof rec);
    fclose(f);
    struct ct_watchdog_peer peer0;
    uint64_t beat = 0;
    CU_ASSERT_EQUAL(ct_watchdog_parse(rec, sizeof rec, 99, 0, &peer0, &beat), 0);
    CU_ASSERT(beat >= 2);
    CU_ASSERT(peer0.step >= 20);
    /* No progress: on_stall within deadline + the check (3 periods) + slack. */
    for (int i = 0; i < 100 && atomic_load(&g_stalls) == 0; i++)
        usleep(100000);
    CU_ASSERT_EQUAL(atomic_load(&g_stalls), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_msg, "rank 0 (host here, last step 24, still running)"));
    ct_watchdog_stop(&wd);
    /* Stopping twice, and a watchdog that cannot make its directory. */
    ct_watchdog_stop(&wd);
    snprintf(path, sizeof path, "%s/heartbeat/rank-00000", dir);
    p.run_dir = path; /* a file, not a directory */
    CU_ASSERT_NOT_EQUAL(ct_watchdog_start(&wd, &p), 0);
    ct_watchdog_stop(&wd);
    ct_test_rmtree(dir);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"decide: who is behind", test_decide},
        {"message", test_message},
        {"message: a partition, a collective not entered", test_message_partition},
        {"heartbeat records", test_records},
        {"thread: beats, progress, stall", test_thread},
        {NULL, NULL},
    };
    return ct_test_run("watchdog", cases);
}
