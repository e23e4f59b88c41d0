/* Printing configs: the resolved config as INI (every key, defaults
 * included: what run directories and checkpoints record), the key-by-key
 * diff that resume and audit use, and the schema for people
 * (`ctrain-dist config --list`, also as TSV). */
#include "config/config-impl.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ct_config_diff(const struct ct_config *a, const struct ct_config *b, char *out, size_t n,
                   int *n_runtime)
{
    int state = 0, runtime = 0;
    size_t used = 0;
    if (out && n)
        out[0] = '\0';
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        const struct ct__config_key *k = &ct__config_keys[i];
        char va[512], vb[512];
        ct__config_format_value(k, a, va, sizeof va);
        ct__config_format_value(k, b, vb, sizeof vb);
        if (strcmp(va, vb) == 0)
            continue;
        if (k->flags & KF_RUNTIME)
            runtime++;
        else
            state++;
        if (out && used < n) {
            int w = snprintf(out + used, n - used, "%s%s.%s: %s -> %s%s", used ? "\n" : "",
                             k->section, k->name, va, vb,
                             (k->flags & KF_RUNTIME) ? "" : " (changes the experiment)");
            if (w > 0)
                used += (size_t)w < n - used ? (size_t)w : n - used - 1;
        }
    }
    if (n_runtime)
        *n_runtime = runtime;
    return state;
}

int ct_config_text(const struct ct_config *cfg, char **text)
{
    size_t len = 0;
    *text = NULL;
    FILE *f = open_memstream(text, &len);
    if (!f)
        return ct_error_set(CT_ENOMEM, "cannot hold the config text");
    int rc = ct_config_write(cfg, f);
    if (fclose(f) != 0 && rc == 0)
        rc = ct_error_set(CT_ENOMEM, "cannot hold the config text");
    if (rc < 0) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

int ct_config_write(const struct ct_config *cfg, FILE *out)
{
    int bad = fprintf(out, "# resolved configuration of %s\n", cfg->path) < 0;
    const char *section = NULL;
    for (size_t i = 0; i < ct__config_n_keys && !bad; i++) {
        char value[CT_CONFIG_PATH_MAX + 64];
        if (!section || strcmp(section, ct__config_keys[i].section) != 0) {
            section = ct__config_keys[i].section;
            bad |= fprintf(out, "\n[%s]\n", section) < 0;
        }
        ct__config_format_value(&ct__config_keys[i], cfg, value, sizeof value);
        bad |= fprintf(out, "%s = %s\n", ct__config_keys[i].name, value) < 0;
    }
    if (bad || fflush(out) != 0 || ferror(out))
        return ct_error_set(CT_EIO, "cannot write the resolved configuration: %s",
                            strerror(errno ? errno : EIO));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The schema, listed (config --list)                                       */
/* ------------------------------------------------------------------------ */

static const char *const type_names[] = {
    [KT_INT] = "int", [KT_INT64] = "int64", [KT_UINT64] = "uint64", [KT_DOUBLE] = "float",
    [KT_BOOL] = "bool", [KT_STRING] = "string", [KT_ENUM] = "choice", [KT_INT_LIST] = "ints",
    [KT_DOUBLE_LIST] = "floats",
};

static void join_choices(const char *const *choices, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; choices[i] && used < n; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? "|" : "", choices[i]);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}

static void format_int_range(int64_t lo, int64_t hi, char *out, size_t n)
{
    if (hi == INT64_MAX || hi == INT_MAX)
        snprintf(out, n, ">= %" PRId64, lo);
    else
        snprintf(out, n, "%" PRId64 "..%" PRId64, lo, hi);
}

/* What a key accepts, as a reader would write it: 0..64, >= 1, (0, 1],
 * a|b|c, a list of 1..65536. */
static void format_allowed(const struct ct__config_key *k, char *out, size_t n)
{
    char lo[64], hi[64];
    switch (k->type) {
    case KT_INT:
    case KT_INT64:
        format_int_range(k->imin, k->imax, out, n);
        if (k->flags & KF_AUTO) {
            size_t l = strlen(out);
            snprintf(out + l, n - l, " or auto");
        }
        return;
    case KT_UINT64:
        snprintf(out, n, "0..18446744073709551615");
        return;
    case KT_DOUBLE: {
        int lo_inf = isinf(k->dmin), hi_inf = isinf(k->dmax);
        ct__config_format_double(k->dmin, lo, sizeof lo);
        ct__config_format_double(k->dmax, hi, sizeof hi);
        const char *lo_op = (k->flags & KF_LO_OPEN) ? ">" : ">=";
        if (lo_inf && hi_inf)
            snprintf(out, n, "any finite number");
        else if (hi_inf)
            snprintf(out, n, "%s %s", lo_op, lo);
        else
            snprintf(out, n, "%s%s, %s%s", (k->flags & KF_LO_OPEN) ? "(" : "[", lo, hi,
                     (k->flags & KF_HI_OPEN) ? ")" : "]");
        return;
    }
    case KT_BOOL:
        snprintf(out, n, "true|false");
        return;
    case KT_STRING:
    case KT_ENUM:
        if (ct__config_key_choices(k))
            join_choices(ct__config_key_choices(k), out, n);
        else
            snprintf(out, n, "text");
        return;
    case KT_DOUBLE_LIST: {
        ct__config_format_double(k->dmin, lo, sizeof lo);
        snprintf(out, n, "up to %zu numbers %s %s, comma separated", k->size / sizeof(double),
                 (k->flags & KF_LO_OPEN) ? ">" : ">=", lo);
        if (isinf(k->dmin))
            snprintf(out, n, "up to %zu finite numbers, comma separated", k->size / sizeof(double));
        return;
    }
    case KT_INT_LIST:
        format_int_range(k->imin, k->imax, lo, sizeof lo);
        snprintf(out, n, "up to %zu of %s, comma separated", k->size / sizeof(int), lo);
        return;
    }
    snprintf(out, n, "?");
}

int ct_config_list(FILE *out, const struct ct_config *cfg, int tsv)
{
    struct ct_config defaults;
    ct_config_defaults(&defaults);
    int bad = 0;
    if (tsv)
        bad |= fprintf(out, "key\ttype\tallowed\tdefault\tkind\tvalue\thelp\n") < 0;
    else if (cfg)
        bad |= fprintf(out, "# keys of %s; '*' marks a value that is not the default\n", cfg->path) < 0;
    const char *section = NULL;
    for (size_t i = 0; i < ct__config_n_keys && !bad; i++) {
        const struct ct__config_key *k = &ct__config_keys[i];
        char allowed[512], value[CT_CONFIG_PATH_MAX + 64] = "", def_value[CT_CONFIG_PATH_MAX + 64];
        format_allowed(k, allowed, sizeof allowed);
        const char *def = k->def ? k->def : "(required)";
        const char *kind = (k->flags & KF_RUNTIME) ? "runtime" : "experiment";
        int differs = 0;
        if (cfg) {
            ct__config_format_value(k, cfg, value, sizeof value);
            ct__config_format_value(k, &defaults, def_value, sizeof def_value);
            differs = !k->def || strcmp(value, def_value) != 0;
        }
        if (tsv) {
            bad |= fprintf(out, "%s.%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k->section, k->name,
                           type_names[k->type], allowed, k->def ? k->def : "", kind, value,
                           k->help) < 0;
            continue;
        }
        if (!section || strcmp(section, k->section) != 0) {
            section = k->section;
            bad |= fprintf(out, "%s[%s]\n", i ? "\n" : "", section) < 0;
        }
        bad |= fprintf(out, "  %-16s %-8s %-34s default %s%s, %s\n", k->name, type_names[k->type],
                       allowed, def, (k->flags & KF_REQUIRED) && k->def ? " (required)" : "",
                       (k->flags & KF_RUNTIME) ? "runtime: may differ on resume"
                                               : "changes the experiment") < 0;
        if (cfg)
            bad |= fprintf(out, "  %-16s %s value %s\n", differs ? "*" : "", "", value) < 0;
        bad |= fprintf(out, "  %-16s %s\n", "", k->help) < 0;
    }
    if (bad || fflush(out) != 0 || ferror(out))
        return ct_error_set(CT_EIO, "cannot write the list of config keys: %s",
                            strerror(errno ? errno : EIO));
    return 0;
}
