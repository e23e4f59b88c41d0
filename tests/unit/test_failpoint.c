/* Unit tests for core/failpoint: the one parser of the test-only hooks
 * (CT_FAILPOINT's phases and actions, CT_INJECT_NONFINITE's and CT_DIVERGE's
 * step numbers): every form the tests use, unset and empty values, and a
 * refusal naming the variable, the value, what is wrong and the expected
 * form for each kind of malformed value.
 */
#include "core/error.h"
#include "core/failpoint.h"
#include "ct_test.h"

#include <stdarg.h>

static const char *const phases[] = {"data", "synced", "chain", "sync", NULL};
static const char *const actions[] = {"fail", "enospc", "eio", NULL};
static const struct ct_failpoint_spec ckpt_spec = {"CT_FAILPOINT", phases, actions};
static const char *const params[] = {"params", NULL};
static const struct ct_failpoint_spec inject_spec = {"CT_INJECT_NONFINITE", NULL, params};
static const struct ct_failpoint_spec diverge_spec = {"CT_DIVERGE", NULL, NULL};

static void expect_armed(const struct ct_failpoint_spec *spec, const char *value, int64_t at,
                         int rank, int action)
{
    struct ct_failpoint fp;
    int rc = ct_failpoint_parse(&fp, spec, value);
    if (rc != 0 || !fp.armed || fp.at != at || fp.rank != rank || fp.action != action)
        fprintf(stderr, "\n    %s=%s: rc %d armed %d at %lld rank %d action %d (%s), want at %lld "
                "rank %d action %d\n", spec->var, value, rc, fp.armed, (long long)fp.at, fp.rank,
                fp.action, ct_error_message(), (long long)at, rank, action);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_TRUE(fp.armed);
    CU_ASSERT_EQUAL(fp.at, at);
    CU_ASSERT_EQUAL(fp.rank, rank);
    CU_ASSERT_EQUAL(fp.action, action);
    CU_ASSERT_STRING_EQUAL(fp.text, value);
}

/* Refused with CT_EINVAL, not armed, and the message holds each of the
 * NULL-terminated fragments. */
static void expect_refused(const struct ct_failpoint_spec *spec, const char *value, ...)
{
    struct ct_failpoint fp;
    ct_error_clear();
    int rc = ct_failpoint_parse(&fp, spec, value);
    CU_ASSERT_EQUAL(rc, CT_EINVAL);
    CU_ASSERT_FALSE(fp.armed);
    const char *msg = ct_error_message();
    va_list ap;
    va_start(ap, value);
    for (const char *want; (want = va_arg(ap, const char *));) {
        if (!strstr(msg, want))
            fprintf(stderr, "\n    %s=%s: message \"%s\"\n    lacks \"%s\"\n", spec->var, value, msg, want);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    }
    va_end(ap);
}

static void test_phases(void)
{
    expect_armed(&ckpt_spec, "data:1", 0, 1, -1);
    expect_armed(&ckpt_spec, "data:1:fail", 0, 1, 0);
    expect_armed(&ckpt_spec, "data:1:enospc", 0, 1, 1);
    expect_armed(&ckpt_spec, "sync:0:eio", 3, 0, 2);
    expect_armed(&ckpt_spec, "chain:0", 2, 0, -1);
    expect_armed(&ckpt_spec, "synced:12", 1, 12, -1);
}

static void test_steps(void)
{
    expect_armed(&inject_spec, "3:1", 3, 1, -1);
    expect_armed(&inject_spec, "5:0", 5, 0, -1);
    expect_armed(&inject_spec, "4:1:params", 4, 1, 0);
    expect_armed(&inject_spec, "10:0", 10, 0, -1);
    expect_armed(&diverge_spec, "3:1", 3, 1, -1);
    expect_armed(&diverge_spec, "0:0", 0, 0, -1);
    expect_armed(&diverge_spec, "9223372036854775807:2147483647", INT64_MAX, 2147483647, -1);
}

static void test_unset(void)
{
    struct ct_failpoint fp;
    CU_ASSERT_EQUAL(ct_failpoint_parse(&fp, &ckpt_spec, NULL), 0);
    CU_ASSERT_FALSE(fp.armed);
    CU_ASSERT_EQUAL(ct_failpoint_parse(&fp, &ckpt_spec, ""), 0);
    CU_ASSERT_FALSE(fp.armed);
    CU_ASSERT_FALSE(ct_failpoint_hit(&fp, 0, 0));
    /* From the environment. */
    setenv("CT_DIVERGE", "7:3", 1);
    CU_ASSERT_EQUAL(ct_failpoint_get(&fp, &diverge_spec), 0);
    CU_ASSERT_TRUE(ct_failpoint_hit(&fp, 7, 3));
    CU_ASSERT_FALSE(ct_failpoint_hit(&fp, 7, 2));
    CU_ASSERT_FALSE(ct_failpoint_hit(&fp, 6, 3));
    unsetenv("CT_DIVERGE");
    CU_ASSERT_EQUAL(ct_failpoint_get(&fp, &diverge_spec), 0);
    CU_ASSERT_FALSE(fp.armed);
}

static void test_refused_phase(void)
{
    const char *form = "expected <phase>:<rank>[:fail|:enospc|:eio] with <phase> one of data, synced, "
                       "chain, sync";
    expect_refused(&ckpt_spec, "dat:0", "CT_FAILPOINT='dat:0': unknown phase 'dat'", form, NULL);
    expect_refused(&ckpt_spec, "data", "CT_FAILPOINT='data': no ':<rank>'", form, NULL);
    expect_refused(&ckpt_spec, "data:", "'' is not a rank", NULL);
    expect_refused(&ckpt_spec, "data:-1", "'-1' is not a rank", NULL);
    expect_refused(&ckpt_spec, "data:1x", "'1x' is not a rank", NULL);
    expect_refused(&ckpt_spec, "data:99999999999", "'99999999999' is not a rank", NULL);
    expect_refused(&ckpt_spec, "data:1:kill", "unknown action 'kill'", form, NULL);
    expect_refused(&ckpt_spec, "data:1:", "unknown action ''", NULL);
    expect_refused(&ckpt_spec, "data:1:fail:2", "unknown action 'fail:2'", NULL);
    expect_refused(&ckpt_spec, ":1", "unknown phase ''", NULL);
    expect_refused(&ckpt_spec, "DATA:1", "unknown phase 'DATA'", NULL);
}

static void test_refused_step(void)
{
    expect_refused(&inject_spec, "x:1", "CT_INJECT_NONFINITE='x:1': 'x' is not a step number",
                   "expected <step>:<rank>[:params]", NULL);
    expect_refused(&inject_spec, "-3:1", "'-3' is not a step number", NULL);
    expect_refused(&inject_spec, "3", "no ':<rank>'", NULL);
    expect_refused(&inject_spec, "3:1:param", "unknown action 'param'", NULL);
    expect_refused(&inject_spec, "99999999999999999999:1", "is not a step number", NULL);
    expect_refused(&diverge_spec, "3:1:params", "CT_DIVERGE='3:1:params': no action expected, found "
                   "'params'", "expected <step>:<rank>", NULL);
    expect_refused(&diverge_spec, " 3:1", "' 3' is not a step number", NULL);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"phases and actions", test_phases},
        {"step numbers", test_steps},
        {"unset, empty, from the environment", test_unset},
        {"malformed phase failpoints refused", test_refused_phase},
        {"malformed step hooks refused", test_refused_step},
        {NULL, NULL},
    };
    return ct_test_run("failpoint", cases);
}
