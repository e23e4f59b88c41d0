/* Test-only failpoints: one syntax and one parser for every test hook.
 *
 * A failpoint is an environment variable whose value is
 *
 *     <at>:<rank>[:<action>]
 *
 * <at> says when: one of the phase names the caller lists
 * (CT_FAILPOINT=data:1:enospc) or, when the caller lists none, a step number
 * (CT_INJECT_NONFINITE=3:1, CT_DIVERGE=3:1); <rank> is the rank that acts
 * (a number >= 0); <action>, optional, is one of the words the caller lists
 * (":fail", ":eio", ":params"); without it the caller's default applies.
 * Unset or empty: not armed. Anything else is refused with a message naming
 * the variable, its value, what is wrong and the expected form, so a typo in
 * a test never passes as "no failure injected".
 *
 *     static const char *const phases[] = {"data", "sync", NULL};
 *     static const char *const actions[] = {"fail", "eio", NULL};
 *     const struct ct_failpoint_spec spec = {"CT_FAILPOINT", phases, actions};
 *     struct ct_failpoint fp;
 *     if ((rc = ct_failpoint_get(&fp, &spec)) < 0) return rc;
 *     if (ct_failpoint_hit(&fp, PHASE_SYNC, rank)) ... fp.action ...
 *
 * Deliberately not here: what a failpoint does (src/ckpt/failpoints.c kills or
 * fails a checkpoint phase, src/train/step.c injects a non-finite value or
 * nudges a parameter); the callers own their names and their effects.
 */
#ifndef CT_CORE_FAILPOINT_H
#define CT_CORE_FAILPOINT_H

#include <stdint.h>

/* What a variable may hold. */
struct ct_failpoint_spec {
    const char *var;             /* the environment variable, for getenv and messages */
    const char *const *phases;   /* NULL-terminated names for <at>; NULL: <at> is a step number */
    const char *const *actions;  /* NULL-terminated words for <action>; NULL: none allowed */
};

/* A parsed value. */
struct ct_failpoint {
    int armed;      /* set, non-empty and valid */
    int64_t at;     /* index into spec->phases, or the step number */
    int rank;
    int action;     /* index into spec->actions; -1: none given */
    char text[128]; /* the value as given (cut at 127 bytes), for messages */
};

/* Parse `value` (NULL or "": not armed, 0) as spec->var's value. A malformed
 * value returns CT_EINVAL with a message such as
 * "CT_FAILPOINT='dat:0': unknown phase 'dat'; expected <phase>:<rank>[:fail|:eio]
 * with <phase> one of data, sync"; fp is then not armed. */
int ct_failpoint_parse(struct ct_failpoint *fp, const struct ct_failpoint_spec *spec,
                       const char *value);

/* ct_failpoint_parse of getenv(spec->var). */
int ct_failpoint_get(struct ct_failpoint *fp, const struct ct_failpoint_spec *spec);

/* Is fp armed for this <at> and this rank? */
static inline int ct_failpoint_hit(const struct ct_failpoint *fp, int64_t at, int rank)
{
    return fp->armed && fp->at == at && fp->rank == rank;
}

#endif
