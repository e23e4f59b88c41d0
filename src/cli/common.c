/* What the command files share: the one way an agreed error is printed, a
 * checkpoint opened with its recorded config, numbers and formats from
 * options. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ct_cli_fail(const struct ct_comm *c, int status)
{
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    return status;
}

int ct_cli_config_status(int rc)
{
    return rc == CT_ECONFIG ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
}

int ct_cli_open_recorded(struct ct_comm *comm, const char *dir, const char *const *sets, int n_sets,
                         struct ct_ckpt *ck, struct ct_config *cfg, int *opened)
{
    *opened = 0;
    int rc = ct_comm_agree(comm, ct_ckpt_open(ck, dir));
    if (rc < 0)
        return rc;
    *opened = 1;
    char label[1200];
    snprintf(label, sizeof label, "%s/manifest.pb", dir);
    return ct_comm_agree(comm, ct_config_load_text(cfg, ct_ckpt_config_text(ck), label, sets, n_sets));
}

int ct_cli_recorded_open(struct ct_comm *comm, struct ct_cli_recorded *r, const char *dir,
                         const char *const *sets, int n_sets)
{
    r->ck = calloc(1, sizeof *r->ck);
    r->cfg = malloc(sizeof *r->cfg);
    r->opened = 0;
    int rc = ct_comm_agree(comm, r->ck && r->cfg ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    return rc < 0 ? rc : ct_cli_open_recorded(comm, dir, sets, n_sets, r->ck, r->cfg, &r->opened);
}

void ct_cli_recorded_close(struct ct_cli_recorded *r)
{
    ct_ckpt_close(r->ck); /* a no-op on one that did not open */
    free(r->ck);
    free(r->cfg);
    r->ck = NULL;
    r->cfg = NULL;
}

int ct_cli_recorded_status(const struct ct_comm *comm, const struct ct_cli_recorded *r, int rc)
{
    if (!r->opened)
        return ct_cli_fail(comm, CT_EXIT_RUNTIME);
    return rc < 0 ? ct_cli_fail(comm, ct_cli_config_status(rc)) : 0;
}

int ct_cli_parse_format(const char *value, const char *const *names, int dflt, int *format)
{
    *format = dflt;
    if (!value)
        return 0;
    int n = 0;
    for (; names[n]; n++)
        if (strcmp(value, names[n]) == 0) {
            *format = n;
            return 0;
        }
    char expected[256] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof expected; i++)
        len += (size_t)snprintf(expected + len, sizeof expected - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    return ct_error_set(CT_EUSAGE, "--format '%s': expected %s", value, expected);
}

int ct_cli_parse_number(const char *opt, const char *text, double lo, double hi, int integer,
                        double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || errno || !(v >= lo && v <= hi) || (integer && v != floor(v)))
        return ct_error_set(CT_EUSAGE, "%s '%s': expected %s in [%g, %g]", opt, text,
                            integer ? "a whole number" : "a number", lo, hi);
    *out = v;
    return 0;
}
