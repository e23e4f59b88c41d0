/* What the command files share: the one way an agreed error is printed, a
 * checkpoint opened with its recorded config, numbers from options. */
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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
