/* Reading a config: INI parsing (inih) into the schema's fields, defaults,
 * required keys, the rules that involve more than one key, and loading (see
 * config.h). `--set` overrides are override.c's; values are value.c's.
 *
 * Line numbers: Debian's inih is built without INI_HANDLER_LINENO, so we feed
 * inih through our own line reader (read_line) and the handler reads the
 * current line number from the shared parse state. The reader hands inih
 * exactly one physical line per call, so its count and ours agree, and the
 * line numbers inih returns for its own syntax errors match too.
 */
#include "config/config-impl.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/error.h"
#include "optim/optimizer.h"
#include "parallel/compress.h"

int ct__config_origin_error(const struct ct__origin *o, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (o->set)
        return ct_error_set(CT_ECONFIG, "--set %.*s: %s", QUOTE_MAX, o->set, msg);
    return ct_error_set(CT_ECONFIG, "%s:%d: %s", o->path, o->line, msg);
}

int ct__config_apply_key(struct ct__parse_state *st, const struct ct__origin *o,
                         const char *section, const char *name, const char *value)
{
    char hint[128];
    if (section[0] == '\0')
        return ct__config_origin_error(o, "key '%.*s' appears before any [section]", QUOTE_MAX,
                                       name);
    if (!ct__config_section_known(section)) {
        ct__config_suggest_section(section, hint, sizeof hint);
        return ct__config_origin_error(o, "unknown section [%.*s]%s", QUOTE_MAX, section, hint);
    }
    int i = ct__config_find_key(section, name);
    if (i < 0) {
        ct__config_suggest_key(section, name, hint, sizeof hint);
        return ct__config_origin_error(o, "unknown key '%.*s' in section [%s]%s", QUOTE_MAX,
                                       name, section, hint);
    }
    const struct ct__config_key *k = &ct__config_keys[i];
    /* Overrides exist to replace file values, so only a file repeating
     * itself is a duplicate. */
    if (!o->set && st->set_line[i])
        return ct__config_origin_error(o, "duplicate key %s.%s (first set on line %d)",
                                       k->section, k->name, st->set_line[i]);
    char why[1024];
    if (ct__config_parse_value(k, value, st->recorded, st->cfg, why, sizeof why) < 0) {
        /* inih only treats ';' after whitespace as a comment, not '#'. */
        int hash = strstr(value, " #") || strstr(value, "\t#");
        return ct__config_origin_error(o, "%s.%s: %s%s", k->section, k->name, why,
                            hash ? " ('#' starts a comment only at the beginning of a line;"
                                   " use ';' after a value)"
                                 : "");
    }
    if (!o->set)
        st->set_line[i] = o->line;
    st->given[i] = 1;
    return 0;
}

/* inih handler: one "name = value" line of the file. */
static int on_pair(void *user, const char *section, const char *name, const char *value)
{
    struct ct__parse_state *st = user;
    if (st->err)
        return 1; /* the reader has stopped; nothing more to say */
    if (!name)
        return 1; /* a section line, if inih was built to report them */
    struct ct__origin o = {.path = st->path, .line = st->lineno, .set = NULL};
    int rc = ct__config_apply_key(st, &o, section, name, value ? value : "");
    if (rc < 0) {
        st->err = rc;
        st->err_line = st->lineno;
        return 0;
    }
    return 1;
}

/* inih reader: one physical line per call, so that our line count is inih's.
 *
 * It also strips leading blanks: inih (built with multi-line values) takes an
 * indented line after a key for a continuation of that key's value, so an
 * indented "lr = 0.1" would silently become part of the previous value. None
 * of our values span lines, and an indented key should still be a key.
 *
 * Section headers are checked here rather than in the handler so that an
 * unknown section is reported at its own line, even when it holds no keys.
 *
 * After an error it returns NULL, which ends the parse: we report only the
 * first problem. */
static char *read_line(char *str, int num, void *stream)
{
    struct ct__parse_state *st = stream;
    if (st->err)
        return NULL;
    errno = 0;
    ssize_t got = getline(&st->buf, &st->cap, st->f);
    if (got < 0) {
        if (ferror(st->f)) {
            st->err = ct_error_set(CT_EIO, "%s: cannot read config file: %s", st->path,
                                   strerror(errno ? errno : EIO));
            st->err_line = st->lineno + 1;
        } else if (errno == ENOMEM) {
            st->err = ct_error_set(CT_ENOMEM, "%s: out of memory reading line %d", st->path,
                                   st->lineno + 1);
            st->err_line = st->lineno + 1;
        }
        return NULL;
    }
    st->lineno++;
    char *s = st->buf;
    /* A UTF-8 byte order mark is not part of the first line's text. */
    if (st->lineno == 1 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
        (unsigned char)s[2] == 0xBF)
        s += 3;
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    size_t text_len = len && s[len - 1] == '\n' ? len - 1 : len;
    /* inih's buffer is fixed; a longer line would reach it in pieces and be
     * misparsed, so refuse it. */
    if (num < 2 || text_len > (size_t)num - 2) {
        st->err = ct_error_set(CT_ECONFIG, "%s:%d: line is too long (at most %d characters)",
                               st->path, st->lineno, num - 2);
        st->err_line = st->lineno;
        return NULL;
    }
    if (s[0] == '[') {
        char *close = strchr(s, ']');
        if (close) {
            char section[QUOTE_MAX + 1];
            size_t sl = (size_t)(close - s - 1);
            if (sl > QUOTE_MAX)
                sl = QUOTE_MAX;
            memcpy(section, s + 1, sl);
            section[sl] = '\0';
            if (!ct__config_section_known(section)) {
                char hint[128];
                struct ct__origin o = {.path = st->path, .line = st->lineno, .set = NULL};
                ct__config_suggest_section(section, hint, sizeof hint);
                st->err = ct__config_origin_error(&o, "unknown section [%s]%s", section, hint);
                st->err_line = st->lineno;
                return NULL;
            }
        }
        /* Without ']' inih reports a syntax error on this line. */
    }
    memcpy(str, s, len + 1);
    return str;
}

static int parse_file(struct ct__parse_state *st)
{
    errno = 0;
    st->f = st->text ? fmemopen((void *)st->text, strlen(st->text), "r") : fopen(st->path, "r");
    if (!st->f) {
        int e = errno;
        return ct_error_set(e == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open config file: %s",
                            st->path, strerror(e));
    }
    int rc = ini_parse_stream(read_line, st, on_pair, st);
    free(st->buf);
    st->buf = NULL;
    fclose(st->f);
    st->f = NULL;
    if (rc == -2)
        return ct_error_set(CT_ENOMEM, "%s: out of memory while parsing", st->path);
    /* inih keeps going past its own syntax errors and returns the first
     * error line, ours included; whichever came first is the one to report. */
    if (rc > 0 && (!st->err || rc < st->err_line))
        return ct_error_set(CT_ECONFIG,
                            "%s:%d: syntax error (expected [section], key = value or a comment)",
                            st->path, rc);
    if (st->err)
        return st->err;
    if (rc < 0)
        return ct_error_set(CT_EIO, "%s: cannot parse config file (inih error %d)", st->path, rc);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Defaults, required keys, validation                                      */
/* ------------------------------------------------------------------------ */

void ct_config_defaults(struct ct_config *cfg)
{
    /* memset first: padding and unused array entries are zero, so two
     * configs with the same values compare equal with memcmp. */
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        char why[256];
        if (!ct__config_keys[i].def)
            continue;
        int rc = ct__config_parse_value(&ct__config_keys[i], ct__config_keys[i].def, 0, cfg, why,
                                        sizeof why);
        /* Defaults are ours: one that does not parse is a bug in ct__config_keys[]
         * (the unit test loads every default, so it cannot ship). */
        assert(rc == 0);
        (void)rc;
    }
}

static int check_required(const struct ct__parse_state *st)
{
    for (size_t i = 0; i < ct__config_n_keys; i++) {
        const struct ct__config_key *k = &ct__config_keys[i];
        if ((k->flags & KF_REQUIRED) && !st->given[i])
            return ct_error_set(CT_ECONFIG, "%s: missing required key %s.%s (%s)", st->path,
                                k->section, k->name, k->help);
    }
    return 0;
}

/* Rules that involve more than one key. */
static int validate(const struct ct_config *c, const char *path)
{
    /* As torch.optim.SGD: Nesterov momentum needs momentum and no dampening. */
    if (c->optim.nesterov && (c->optim.momentum <= 0 || c->optim.dampening != 0))
        return ct_error_set(CT_ECONFIG,
                            "%s: optim.nesterov = true requires optim.momentum > 0 and "
                            "optim.dampening = 0 (found momentum %g, dampening %g)",
                            path, c->optim.momentum, c->optim.dampening);
    if (strcmp(c->model.name, "vit") == 0 && c->model.width % c->model.heads != 0)
        return ct_error_set(CT_ECONFIG, "%s: model.heads (%d) must divide model.width (%d)", path,
                            c->model.heads, c->model.width);
    /* The deterministic mode's sums are exact integer sums of values on a
     * shared grid; a bf16 allreduce rounds partial sums in an order MPI
     * picks, so its bits depend on N. */
    if (c->train.deterministic && c->dist.grad_compress != CT_GRAD_COMPRESS_NONE)
        return ct_error_set(CT_ECONFIG,
                            "%s: train.deterministic = true refuses dist.grad_compress = %s (a "
                            "compressed allreduce rounds partial sums in an order that depends on "
                            "the number of ranks); set dist.grad_compress = none or "
                            "train.deterministic = false",
                            path, ct_grad_compress_names[c->dist.grad_compress]);
    if (c->dist.grad_compress_feedback && c->dist.grad_compress == CT_GRAD_COMPRESS_NONE)
        return ct_error_set(CT_ECONFIG,
                            "%s: dist.grad_compress_feedback = true needs a compression "
                            "(dist.grad_compress = bf16): with none nothing is rounded to feed back",
                            path);
    /* A cosine "floor" above the starting rate would make the schedule rise. */
    if (c->schedule.kind == CT_SCHED_COSINE && c->schedule.min_lr > c->optim.lr)
        return ct_error_set(CT_ECONFIG,
                            "%s: schedule.min_lr (%g) must not exceed optim.lr (%g) for the "
                            "cosine schedule",
                            path, c->schedule.min_lr, c->optim.lr);
    return 0;
}

static int set_names(struct ct_config *c, const char *path)
{
    size_t plen = strlen(path);
    if (plen >= sizeof c->path)
        return ct_error_set(CT_EINVAL, "%.*s...: config path is too long (at most %zu characters)",
                            QUOTE_MAX, path, sizeof c->path - 1);
    memset(c->path, 0, sizeof c->path);
    memcpy(c->path, path, plen);

    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t blen = strlen(base);
    /* Keep ".ini" when it is the whole name, so the name is never empty. */
    if (blen > 4 && strcmp(base + blen - 4, ".ini") == 0)
        blen -= 4;
    if (blen >= sizeof c->name)
        return ct_error_set(CT_ECONFIG, "%s: config name '%.*s' is too long (at most %zu characters)",
                            path, (int)blen, base, sizeof c->name - 1);
    memset(c->name, 0, sizeof c->name);
    memcpy(c->name, base, blen);
    return 0;
}

static int load(struct ct_config *cfg, const char *path, const char *text,
                const char *const *sets, int n_sets, int recorded)
{
    if (!cfg || !path || n_sets < 0 || (n_sets > 0 && !sets))
        return ct_error_set(CT_EINVAL, "ct_config_load: invalid arguments");

    /* Work on a copy so that *cfg is untouched unless everything succeeds. */
    struct ct_config tmp;
    ct_config_defaults(&tmp);
    int rc = set_names(&tmp, path);
    if (rc < 0)
        return rc;

    struct ct__parse_state st;
    memset(&st, 0, sizeof st);
    st.cfg = &tmp;
    st.path = path;
    st.text = text;
    st.recorded = recorded;
    if ((rc = parse_file(&st)) < 0)
        return rc;
    for (int i = 0; i < n_sets; i++)
        if ((rc = ct__config_apply_override(&st, sets[i])) < 0)
            return rc;
    if ((rc = check_required(&st)) < 0)
        return rc;
    if ((rc = validate(&tmp, path)) < 0)
        return rc;
    /* memcpy rather than assignment: assignment need not copy padding. */
    memcpy(cfg, &tmp, sizeof tmp);
    return 0;
}

int ct_config_load(struct ct_config *cfg, const char *path, const char *const *sets, int n_sets)
{
    return load(cfg, path, NULL, sets, n_sets, 0);
}

int ct_config_load_text(struct ct_config *cfg, const char *text, const char *label,
                        const char *const *sets, int n_sets)
{
    if (!text)
        return ct_error_set(CT_EINVAL, "ct_config_load_text: no text");
    return load(cfg, label, text, sets, n_sets, 0);
}

int ct_config_load_recorded(struct ct_config *cfg, const char *path, const char *text)
{
    return load(cfg, path, text, NULL, 0, 1);
}
