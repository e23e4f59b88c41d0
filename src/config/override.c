/* `--set section.key=value` overrides: cut the argument and apply it as a
 * file line would be, with the argument in place of FILE:LINE in messages. */
#include "config/config-impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* "section.key=value", with the same parsing and messages as a file line. */
int ct__config_apply_override(struct ct__parse_state *st, const char *arg)
{
    if (!arg)
        return ct_error_set(CT_EINVAL, "--set: NULL override");
    struct ct__origin o = {.path = st->path, .line = 0, .set = arg};
    char *copy = strdup(arg);
    if (!copy)
        return ct_error_set(CT_ENOMEM, "--set %.*s: out of memory", QUOTE_MAX, arg);
    int rc;
    char *eq = strchr(copy, '=');
    char *dot = strchr(copy, '.');
    if (!eq || !dot || dot > eq) {
        rc = ct__config_origin_error(&o, "expected section.key=value");
        goto out;
    }
    *eq = '\0';
    *dot = '\0';
    char *section = trim(copy), *name = trim(dot + 1), *value = trim(eq + 1);
    if (!*section || !*name) {
        rc = ct__config_origin_error(&o, "expected section.key=value");
        goto out;
    }
    rc = ct__config_apply_key(st, &o, section, name, value);
out:
    free(copy);
    return rc;
}
