/* The run directory's owner record (run/owner.h): its format round trip and
 * refusals, the description in messages, the pure live/dead decision, the
 * wait, the beat record and thread, the process probe, and the check before
 * a commit. The collective claim, a refused second job, a takeover after
 * SIGKILL and a job that lost the directory are tests/e2e/test_owner.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_test.h"
#include "core/error.h"
#include "run/owner.h"

static struct ct_owner_rank g_ranks[3] = {
    {"h0", 100, 5000}, {"h0", 101, 5001}, {"h1", 200, 0}};

static struct ct_owner sample(void)
{
    struct ct_owner o = {.nonce = 0x1ac51ad6f6091345ull, .started_unix = 1796500314,
                         .beat_s = 1.0, .world = 3, .ranks = g_ranks};
    snprintf(o.slurm_job, sizeof o.slurm_job, "77");
    return o;
}

static void test_round_trip(void)
{
    struct ct_owner o = sample(), back;
    char *text;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(ct_owner_format(&o, &text, &len), 0);
    CU_ASSERT_EQUAL(text[len - 1], '\n');
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"nonce\": \"1ac51ad6f6091345\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"state\": \"running\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"started\": \"2026-12-05T19:51:54Z\""));
    CU_ASSERT_EQUAL_FATAL(ct_owner_parse(&back, text, len, "t"), 0);
    CU_ASSERT_EQUAL(back.nonce, o.nonce);
    CU_ASSERT_EQUAL(back.released, 0);
    CU_ASSERT_EQUAL(back.world, 3);
    CU_ASSERT_STRING_EQUAL(back.slurm_job, "77");
    CU_ASSERT_STRING_EQUAL(back.ranks[2].host, "h1");
    CU_ASSERT_EQUAL(back.ranks[1].pid, 101);
    CU_ASSERT_EQUAL(back.ranks[1].pid_start, 5001);
    ct_owner_free(&back);
    free(text);
    /* Released, outside Slurm. */
    o.released = 1;
    o.slurm_job[0] = '\0';
    snprintf(o.end, sizeof o.end, "stopped by signal 15");
    CU_ASSERT_EQUAL_FATAL(ct_owner_format(&o, &text, &len), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"slurm_job_id\": null"));
    CU_ASSERT_EQUAL_FATAL(ct_owner_parse(&back, text, len, "t"), 0);
    CU_ASSERT_EQUAL(back.released, 1);
    CU_ASSERT_STRING_EQUAL(back.end, "stopped by signal 15");
    CU_ASSERT_STRING_EQUAL(back.slurm_job, "");
    ct_owner_free(&back);
    free(text);
}

static void expect_refused(const char *text, const char *want)
{
    struct ct_owner o;
    CU_ASSERT_EQUAL(ct_owner_parse(&o, text, strlen(text), "RUN/owner.json"), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "RUN/owner.json"));
    if (!strstr(ct_error_message(), want))
        printf("\n  message: %s (want %s)\n", ct_error_message(), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), want));
}

static void test_refusals(void)
{
    expect_refused("{", "offset");
    expect_refused("{\"format\": \"ctrain-owner 9\"}", "ctrain-owner 9");
    const char *head = "{\"format\": \"ctrain-owner 1\", \"nonce\": \"%s\", \"state\": \"%s\", "
                       "\"started_unix\": 1, \"beat_s\": 1, \"world\": %d, \"ranks\": %s}";
    char t[512];
    snprintf(t, sizeof t, head, "xyz", "running", 1, "[{\"host\": \"a\", \"pid\": 1, \"pid_start\": 0}]");
    expect_refused(t, "nonce \"xyz\" is not hexadecimal");
    snprintf(t, sizeof t, head, "ab", "gone", 1, "[{\"host\": \"a\", \"pid\": 1, \"pid_start\": 0}]");
    expect_refused(t, "state \"gone\"");
    snprintf(t, sizeof t, head, "ab", "running", 2, "[{\"host\": \"a\", \"pid\": 1, \"pid_start\": 0}]");
    expect_refused(t, "\"world\" (2) entries");
    snprintf(t, sizeof t, head, "ab", "running", 1, "[{\"host\": \"a\", \"pid_start\": 0}]");
    expect_refused(t, "ranks[0]");
}

static void test_describe(void)
{
    struct ct_owner o = sample();
    char s[256];
    ct_owner_describe(&o, s, sizeof s);
    CU_ASSERT_STRING_EQUAL(s, "job 1ac51ad6f6091345 (Slurm job 77), started 2026-12-05T19:51:54Z, on h0 "
                              "(pids 100, 101), h1 (pid 200)");
    /* Cut to the buffer, marked. */
    char small[48];
    ct_owner_describe(&o, small, sizeof small);
    CU_ASSERT_EQUAL(strlen(small), sizeof small - 1);
    CU_ASSERT_STRING_EQUAL(small + sizeof small - 4, "...");
}

static void test_decide(void)
{
    struct ct_owner o = sample();
    char why[256];
    int8_t pids[3] = {CT_OWNER_PID_UNKNOWN, CT_OWNER_PID_UNKNOWN, CT_OWNER_PID_UNKNOWN};
    CU_ASSERT_EQUAL(ct_owner_decide(NULL, 5, pids, -1, why, sizeof why), CT_OWNER_FREE);
    CU_ASSERT_EQUAL(ct_owner_decide(&o, o.nonce, pids, -1, why, sizeof why), CT_OWNER_OURS);
    /* Nothing seen on our hosts: ask the beat; then it decides. */
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, -1, why, sizeof why), CT_OWNER_ASK_BEAT);
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, 1, why, sizeof why), CT_OWNER_LIVE);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "beat in heartbeat/owner advanced within 2.5 s"));
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, 0, why, sizeof why), CT_OWNER_DEAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "did not advance in 2.5 s"));
    /* Any process alive wins over everything but a release. */
    pids[0] = CT_OWNER_PID_GONE;
    pids[2] = CT_OWNER_PID_ALIVE;
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, 0, why, sizeof why), CT_OWNER_LIVE);
    CU_ASSERT_STRING_EQUAL(why, "its rank 2 (pid 200) is alive on host h1");
    /* Rank 0 gone (and nothing alive): dead without waiting for the beat. */
    pids[2] = CT_OWNER_PID_UNKNOWN;
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, -1, why, sizeof why), CT_OWNER_DEAD);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "rank 0 (pid 100 on host h0), the rank that commits, is gone"));
    /* Only rank 1 gone: the beat decides. */
    pids[0] = CT_OWNER_PID_UNKNOWN;
    pids[1] = CT_OWNER_PID_GONE;
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, -1, why, sizeof why), CT_OWNER_ASK_BEAT);
    /* Released: free, even with its processes still there. */
    o.released = 1;
    pids[0] = CT_OWNER_PID_ALIVE;
    CU_ASSERT_EQUAL(ct_owner_decide(&o, 5, pids, -1, why, sizeof why), CT_OWNER_RELEASED);
    /* The wait: 2.5 beats, bounded. */
    o.beat_s = 0.1;
    CU_ASSERT_DOUBLE_EQUAL(ct_owner_wait_s(&o), 1.0, 1e-9);
    o.beat_s = 100;
    CU_ASSERT_DOUBLE_EQUAL(ct_owner_wait_s(&o), 10.0, 1e-9);
}

static void test_pids(void)
{
    char host[64];
    struct ct_owner_rank me = {"here", (int64_t)getpid(), ct_owner_self_start()};
    snprintf(host, sizeof host, "here");
    CU_ASSERT_NOT_EQUAL(me.pid_start, 0); /* Linux: /proc is there */
    CU_ASSERT_EQUAL(ct_owner_pid_state(&me, host), CT_OWNER_PID_ALIVE);
    CU_ASSERT_EQUAL(ct_owner_pid_state(&me, "elsewhere"), CT_OWNER_PID_UNKNOWN);
    /* The same pid with another start time is another process. */
    struct ct_owner_rank reused = me;
    reused.pid_start = me.pid_start + 1;
    CU_ASSERT_EQUAL(ct_owner_pid_state(&reused, host), CT_OWNER_PID_GONE);
    /* A child that exited: gone, whether still a zombie or reaped. */
    pid_t c = fork();
    if (c == 0)
        _exit(0);
    struct ct_owner_rank child = {"here", (int64_t)c, 0};
    usleep(100000);
    CU_ASSERT_EQUAL(ct_owner_pid_state(&child, host), CT_OWNER_PID_GONE); /* a zombie */
    waitpid(c, NULL, 0);
    CU_ASSERT_EQUAL(ct_owner_pid_state(&child, host), CT_OWNER_PID_GONE);
}

static void test_files_and_check(void)
{
    const char *dir = ct_test_tmpdir();
    struct ct_owner o = sample(), back;
    CU_ASSERT_EQUAL(ct_owner_read(dir, &back), CT_ENOENT);
    CU_ASSERT_EQUAL(ct_owner_check(dir, o.nonce), CT_EBUSY); /* no record: not ours */
    CU_ASSERT_EQUAL_FATAL(ct_owner_write(dir, &o), 0);
    CU_ASSERT_EQUAL(ct_owner_read(dir, &back), 0);
    CU_ASSERT_EQUAL(back.nonce, o.nonce);
    ct_owner_free(&back);
    CU_ASSERT_EQUAL(ct_owner_check(dir, o.nonce), 0);
    /* Another job's nonce: refused, naming the owner and the directory. */
    CU_ASSERT_EQUAL(ct_owner_check(dir, 0x1234), CT_EBUSY);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "this job (job 0000000000001234) no longer owns"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "job 1ac51ad6f6091345 (Slurm job 77)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), dir));
    /* Released by this job: no more commits either. */
    o.released = 1;
    CU_ASSERT_EQUAL_FATAL(ct_owner_write(dir, &o), 0);
    CU_ASSERT_EQUAL(ct_owner_check(dir, o.nonce), CT_EBUSY);
    /* Garbage: an error naming the file, not a pass. */
    CU_ASSERT_EQUAL(ct_test_write_file(ct_test_path(dir, "owner.json"), "{}", 2), 0);
    CU_ASSERT_EQUAL(ct_owner_check(dir, o.nonce), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "owner.json"));
    ct_test_rmtree(dir);
}

static void test_beat(void)
{
    char rec[CT_OWNER_BEAT_RECORD];
    uint64_t b = 0;
    ct_owner_beat_format(rec, 0xabc, 42);
    CU_ASSERT_EQUAL(rec[CT_OWNER_BEAT_RECORD - 1], '\n');
    CU_ASSERT_EQUAL(ct_owner_beat_parse(rec, sizeof rec, 0xabc, &b), 0);
    CU_ASSERT_EQUAL(b, 42);
    CU_ASSERT_EQUAL(ct_owner_beat_parse(rec, sizeof rec, 0xabd, &b), -1); /* another job's */
    CU_ASSERT_EQUAL(ct_owner_beat_parse(rec, sizeof rec - 1, 0xabc, &b), -1); /* torn */
    /* The thread: the beat is there at once and advances. */
    const char *dir = ct_test_tmpdir();
    struct ct_owner_beat beat;
    uint64_t b1 = 0, b2 = 0;
    CU_ASSERT_EQUAL(ct_owner_beat_read(dir, 0xabc, &b1), -1);
    CU_ASSERT_EQUAL_FATAL(ct_owner_beat_start(&beat, dir, 0xabc, 0.05), 0);
    CU_ASSERT_EQUAL(ct_owner_beat_read(dir, 0xabc, &b1), 0);
    for (int i = 0; i < 200 && (ct_owner_beat_read(dir, 0xabc, &b2) != 0 || b2 == b1); i++)
        usleep(10000);
    CU_ASSERT_TRUE(b2 > b1);
    ct_owner_beat_stop(&beat);
    ct_owner_beat_stop(&beat); /* twice is harmless */
    CU_ASSERT_EQUAL(ct_owner_beat_read(dir, 0xabc, &b1), 0);
    usleep(150000);
    CU_ASSERT_EQUAL(ct_owner_beat_read(dir, 0xabc, &b2), 0);
    CU_ASSERT_EQUAL(b1, b2); /* stopped: no more beats */
    ct_test_rmtree(dir);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"record round trip", test_round_trip},
        {"malformed records refused", test_refusals},
        {"description", test_describe},
        {"decide: live, dead, ask the beat", test_decide},
        {"process probe", test_pids},
        {"files and the commit check", test_files_and_check},
        {"beat record and thread", test_beat},
        {NULL, NULL},
    };
    return ct_test_run("owner", cases);
}
