/* The model registry: names and builders (with their ctx) side by side in one
 * append-only table, so that a program linking libctrain can add a model that
 * configs then select by name (see models.h).
 *
 * The zoo's five models are registered through the same call as anyone's,
 * once, before the first use of the registry (pthread_once): there is no
 * second, static list of names for the config or the error messages to
 * drift from. The table is small and fixed (CT_MODEL_MAX_MODELS); a lookup
 * is a linear scan, done once per model build.
 */
#include "models/models.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"

struct entry {
    char name[CT_MODEL_NAME_MAX];
    ct_model_build_fn build;
    void *ctx;
};

static struct entry entries[CT_MODEL_MAX_MODELS];
/* names[i] points at entries[i].name; names[n_entries] is NULL. The lock
 * serializes registrations and lookups; the array ct_model_names() hands out
 * is read without it, which is why registering is a start-up step (before
 * configs are loaded and threads that load them are started). */
static const char *names[CT_MODEL_MAX_MODELS + 1];
static int n_entries;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t zoo_once = PTHREAD_ONCE_INIT;

static int name_ok(const char *name)
{
    if (!name || name[0] < 'a' || name[0] > 'z')
        return 0;
    size_t len = strlen(name);
    if (len >= CT_MODEL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Under the lock. */
static int find(const char *name)
{
    for (int i = 0; i < n_entries; i++)
        if (strcmp(entries[i].name, name) == 0)
            return i;
    return -1;
}

static int add(const char *name, ct_model_build_fn build, void *ctx)
{
    if (!name_ok(name))
        return ct_error_set(CT_EINVAL,
                            "model name '%.*s': expected a lowercase letter then [a-z0-9_-], at most "
                            "%d characters",
                            CT_MODEL_NAME_MAX, name ? name : "(null)", CT_MODEL_NAME_MAX - 1);
    if (!build)
        return ct_error_set(CT_EINVAL, "model '%s': no build function", name);
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (find(name) >= 0) {
        rc = ct_error_set(CT_EINVAL, "model '%s' is already registered", name);
    } else if (n_entries == CT_MODEL_MAX_MODELS) {
        rc = ct_error_set(CT_ERANGE, "model '%s': the registry is full (%d models)", name,
                          CT_MODEL_MAX_MODELS);
    } else {
        struct entry *e = &entries[n_entries];
        memcpy(e->name, name, strlen(name) + 1);
        e->build = build;
        e->ctx = ctx;
        names[n_entries] = e->name;
        n_entries++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The zoo, in the order `config --list` and error messages show it. Its
 * names are valid and new, so these cannot fail. */
static void register_zoo(void)
{
    add("mlp", ct_mlp_build, NULL);
    add("cnn", ct_cnn_build, NULL);
    add("resnet", ct_resnet_build, NULL);
    add("vit", ct_vit_build, NULL);
    add("gpt", ct_gpt_build, NULL);
}

int ct_model_register(const char *name, ct_model_build_fn build, void *ctx)
{
    pthread_once(&zoo_once, register_zoo);
    return add(name, build, ctx);
}

const char *const *ct_model_names(void)
{
    pthread_once(&zoo_once, register_zoo);
    return names;
}

/* "mlp, cnn, resnet, vit, tinynet" (cut short where out ends). */
static void list_names(char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n_entries && used < n; i++) {
        int w = snprintf(out + used, n - used, "%s%s", i ? ", " : "", entries[i].name);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch)
{
    pthread_once(&zoo_once, register_zoo);
    ct_model_init(m, (size_t)spec->in_c * spec->in_h * spec->in_w);
    pthread_mutex_lock(&lock);
    int i = find(spec->name);
    struct entry e = i >= 0 ? entries[i] : (struct entry){.build = NULL};
    char known[512];
    if (i < 0)
        list_names(known, sizeof known);
    pthread_mutex_unlock(&lock);

    int rc = i < 0 ? ct_error_set(CT_EINVAL, "unknown model '%s' (registered: %s)", spec->name, known)
                   : e.build(m, spec, e.ctx);
    if (rc == 0)
        rc = ct_model_finalize(m, max_batch);
    if (rc < 0) {
        ct_error_wrap(rc, "building model %s", spec->name);
        ct_model_free(m);
    }
    return rc;
}
