/* The checkpoint writer's test-only failpoints (CT_FAILPOINT, the table of
 * phases in ckpt.h and docs/checkpoints.md): the names of the phases and
 * actions, and what an armed one does when a rank reaches it. The syntax and
 * its parser are core/failpoint.h's, shared with the step's test hooks; the
 * places where each phase fires are in write.c, data.c, dirs.c and chain.c
 * ("open" does not fail a call: data.c hides the temporary directory from
 * that rank).
 * Not here: deciding what a failure means (the caller reports it like any
 * other error at that point). */
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "ckpt/write-impl.h"
#include "core/error.h"
#include "core/failpoint.h"

/* What an armed failpoint does: die (no action), fail with a generic
 * message (":fail"), or fail as the system call at that point would with an
 * errno (a full disk on one rank only, a failing fsync), so the message is
 * the one a user would see. The syntax and the parser: core/failpoint.h. */
static const char *const fp_actions[] = {"fail", "enospc", "eio", "erofs", "edquot", NULL};
static const int fp_errnos[] = {0, ENOSPC, EIO, EROFS, EDQUOT}; /* by action */
static const char *const fp_phases[CT__FP_COUNT + 1] = {"data",   "synced", "agreed", "manifest", "renamed",
                                                        "latest", "chain",  "sync",   "retain",   "open",
                                                        NULL};
static const struct ct_failpoint_spec fp_spec = {"CT_FAILPOINT", fp_phases, fp_actions};

static struct ct_failpoint g_fp;

int ct__ckpt_fp_read(void) { return ct_failpoint_get(&g_fp, &fp_spec); }

int ct__ckpt_fp_at(enum ct__ckpt_phase phase, int rank, const char *path, const char *op)
{
    if (!ct_failpoint_hit(&g_fp, (int)phase, rank))
        return 0;
    if (g_fp.action < 0)
        raise(SIGKILL);
    if (g_fp.action > 0)
        return ct_error_set(CT_EIO, "%s: %s failed: %s (injected: CT_FAILPOINT=%s)", path, op,
                            strerror(fp_errnos[g_fp.action]), g_fp.text);
    return ct_error_set(CT_EIO, "failpoint %s on rank %d (CT_FAILPOINT=%s)", fp_phases[phase], rank,
                        g_fp.text);
}

int ct__ckpt_fp_hit(enum ct__ckpt_phase phase, int rank) { return ct_failpoint_hit(&g_fp, (int)phase, rank); }

int ct__ckpt_fp(enum ct__ckpt_phase phase, int rank, const char *path)
{
    return ct__ckpt_fp_at(phase, rank, path, "write");
}

int ct__ckpt_failpoint_armed(const char *phase, int rank)
{
    struct ct_failpoint fp;
    int p = -1;
    for (int i = 0; i < CT__FP_COUNT; i++)
        if (strcmp(phase, fp_phases[i]) == 0)
            p = i;
    return ct_failpoint_get(&fp, &fp_spec) == 0 && ct_failpoint_hit(&fp, p, rank);
}

int ct__ckpt_failpoint(const char *phase, int rank)
{
    int rc = ct__ckpt_fp_read();
    if (rc < 0)
        return rc;
    if (strcmp(phase, fp_phases[CT__FP_CHAIN]) == 0)
        return ct__ckpt_fp_at(CT__FP_CHAIN, rank, "chain.jsonl", "write");
    return 0;
}
