/* Clock alignment (see clocksync.h). */
#include "parallel/clocksync.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ct_clocksync_intersect(const double *t0, const double *t1, const double *a, int n,
                           double *offset, double *bound)
{
    double lo = -1e300, hi = 1e300;
    for (int i = 0; i < n; i++) {
        if (a[i] - t1[i] > lo)
            lo = a[i] - t1[i];
        if (a[i] - t0[i] < hi)
            hi = a[i] - t0[i];
    }
    if (n < 1 || lo > hi)
        return ct_error_set(CT_EMISMATCH,
                            "clock alignment: the rounds' offset intervals do not intersect "
                            "([%g, %g] s after %d rounds)", lo, hi, n);
    *offset = 0.5 * (lo + hi);
    *bound = 0.5 * (hi - lo);
    return 0;
}

/* The rounds: rank 0 keeps t0, t1 and every rank's a_r per round
 * (a: rounds x world, round-major). */
static int run_rounds(struct ct_comm *c, int rounds, double (*now)(void), double *t0,
                      double *t1, double *a, double *mine_a)
{
    for (int i = 0; i < rounds; i++) {
        double token = 0.0;
        if (c->rank == 0)
            t0[i] = now();
        int rc = ct_comm_bcast(c, &token, sizeof token, 0);
        double ar = now();
        if (rc == 0)
            rc = ct_comm_gather(c, &ar, sizeof ar, c->rank == 0 ? a + (size_t)i * c->world : NULL, 0);
        if (c->rank == 0)
            t1[i] = now();
        if (rc < 0)
            return ct_error_wrap(rc, "clock alignment, round %d", i);
        *mine_a = ar;
    }
    return 0;
}

/* Rank 0: each rank's interval intersection into out (2 per rank). */
static int solve(const struct ct_comm *c, int rounds, const double *t0, const double *t1,
                 const double *a, double *out)
{
    double *ar = malloc((size_t)rounds * sizeof *ar);
    if (!ar)
        return ct_error_set(CT_ENOMEM, "clock alignment: out of memory");
    int rc = 0;
    out[0] = out[1] = 0.0;
    for (int r = 1; r < c->world && rc == 0; r++) {
        for (int i = 0; i < rounds; i++)
            ar[i] = a[(size_t)i * c->world + r];
        rc = ct_clocksync_intersect(t0, t1, ar, rounds, &out[2 * r], &out[2 * r + 1]);
        if (rc < 0)
            rc = ct_error_wrap(rc, "rank %d", r);
    }
    free(ar);
    return rc;
}

int ct_clocksync_measure(struct ct_comm *c, int rounds, double (*now)(void),
                         struct ct_clock_sample *mine, struct ct_clock_sample *all)
{
    const size_t W = (size_t)c->world;
    if (rounds < 1)
        return ct_error_set(CT_EINVAL, "clock alignment: %d rounds", rounds);
    double *buf = calloc((size_t)rounds * (W + 2) + 2 * W, sizeof *buf);
    int rc = buf ? 0 : ct_error_set(CT_ENOMEM, "clock alignment: out of memory");
    if ((rc = ct_comm_agree(c, rc)) < 0) {
        free(buf);
        return rc;
    }
    double *t0 = buf, *t1 = t0 + rounds, *a = t1 + rounds, *res = a + (size_t)rounds * W;
    double mine_a = 0.0;
    rc = run_rounds(c, rounds, now, t0, t1, a, &mine_a);
    if (rc == 0 && c->rank == 0)
        rc = solve(c, rounds, t0, t1, a, res);
    /* Every rank learns rank 0's outcome (and every offset) in one call. */
    if ((rc = ct_comm_agree(c, rc)) == 0)
        rc = ct_comm_bcast(c, res, 2 * W * sizeof *res, 0);
    if (rc == 0) {
        *mine = (struct ct_clock_sample){res[2 * c->rank], res[2 * c->rank + 1], mine_a};
        for (size_t r = 0; all && r < W; r++)
            all[r] = (struct ct_clock_sample){res[2 * r], res[2 * r + 1], 0.0};
        if (all)
            all[c->rank].local_s = mine_a;
    }
    free(buf);
    return rc;
}
