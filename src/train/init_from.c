/* train.init_from (train/init_from.h). */
#include "train/init_from.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "nn/module.h"
#include "report/export.h"
#include "report/weights.h"

/* The names a message lists before "...". */
#define LIST_MAX 8

struct expected {
    int n;                      /* the model's tensors: parameters, then buffers */
    struct ct_export_tensor *t; /* (n + 1) under the file's names; a gpt's [n] is lm_head */
    float **dst;                /* (n) where each one's values go */
    char (*names)[CT_EXPORT_NAME_MAX];
    int tied_head;              /* a gpt: t[n] is lm_head.weight, dst of wte */
};

static void expected_free(struct expected *e)
{
    free(e->t);
    free(e->dst);
    free(e->names);
}

/* The model's tensors in state_dict order, under the names export writes. */
static int expected_init(struct expected *e, struct ct_model *m, const char *model_name)
{
    memset(e, 0, sizeof *e);
    const struct ct_layout *lay[2] = {&m->layout, &m->buffer_layout};
    struct ct_flat *flat[2] = {&m->params, &m->buffers};
    e->n = m->layout.n + m->buffer_layout.n;
    struct ct_export_tensor *in = calloc((size_t)e->n + 1, sizeof *in);
    e->t = calloc((size_t)e->n + 1, sizeof *e->t);
    e->dst = calloc((size_t)e->n + 1, sizeof *e->dst);
    e->names = calloc((size_t)e->n + 1, sizeof *e->names);
    int rc = in && e->t && e->dst && e->names ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    for (int k = 0, i = 0; rc == 0 && k < 2; k++)
        for (int j = 0; j < lay[k]->n; j++, i++) {
            const struct ct_view *v = &lay[k]->views[j];
            e->dst[i] = flat[k]->data + v->offset;
            in[i] = (struct ct_export_tensor){v->name, v->ndim, v->shape, e->dst[i]};
        }
    if (rc == 0 && strcmp(model_name, "gpt") == 0) {
        rc = ct_export_gpt_names(in, e->n, e->t, e->names);
        e->tied_head = rc == e->n + 1;
        rc = rc < 0 ? rc : 0;
    } else if (rc == 0) {
        memcpy(e->t, in, (size_t)e->n * sizeof *in);
    }
    free(in);
    if (rc < 0)
        expected_free(e);
    return rc;
}

static int same_shape(const struct ct_weights_tensor *f, const struct ct_export_tensor *t)
{
    if (f->ndim != t->ndim)
        return 0;
    for (int i = 0; i < t->ndim; i++)
        if (f->shape[i] != t->shape[i])
            return 0;
    return 1;
}

/* Appends name to a list in buf ("a, b, c", then "... (N in all)"). */
static void list_add(char *buf, size_t cap, int *count, const char *name)
{
    size_t at = strlen(buf);
    if (*count < LIST_MAX)
        snprintf(buf + at, cap - at, "%s%s", *count ? ", " : "", name);
    (*count)++;
}

static void list_end(char *buf, size_t cap, int count)
{
    size_t at = strlen(buf);
    if (count > LIST_MAX)
        snprintf(buf + at, cap - at, ", ... (%d in all)", count);
}

/* Every name and shape, before a value is written. */
static int check_names(const struct ct_weights *w, const struct expected *e, const char *model_name)
{
    char missing[1024] = "", extra[1024] = "";
    int n_missing = 0, n_extra = 0;
    for (int i = 0; i < e->n; i++) {
        const struct ct_weights_tensor *f = ct_weights_find(w, e->t[i].name);
        if (!f) {
            list_add(missing, sizeof missing, &n_missing, e->t[i].name);
        } else if (!same_shape(f, &e->t[i])) {
            char a[96], b[96];
            return ct_error_set(CT_EFORMAT, "%s: tensor '%s' has shape %s, the model's is %s (is model.* "
                                "in the config the file's model?)", w->path, e->t[i].name,
                                ct_weights_shape_str(f->ndim, f->shape, a, sizeof a),
                                ct_weights_shape_str(e->t[i].ndim, e->t[i].shape, b, sizeof b));
        }
    }
    /* A gpt's lm_head.weight may be absent; present, it has wte's shape. */
    const struct ct_weights_tensor *head = e->tied_head ? ct_weights_find(w, e->t[e->n].name) : NULL;
    if (head && !same_shape(head, &e->t[e->n])) {
        char a[96], b[96];
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' has shape %s, the model's is %s (it is the tied "
                            "head: transformer.wte.weight's)", w->path, head->name,
                            ct_weights_shape_str(head->ndim, head->shape, a, sizeof a),
                            ct_weights_shape_str(e->t[e->n].ndim, e->t[e->n].shape, b, sizeof b));
    }
    for (int i = 0; i < w->n; i++) {
        int known = e->tied_head && strcmp(w->t[i].name, e->t[e->n].name) == 0;
        for (int j = 0; j < e->n && !known; j++)
            known = strcmp(w->t[i].name, e->t[j].name) == 0;
        if (!known)
            list_add(extra, sizeof extra, &n_extra, w->t[i].name);
    }
    list_end(missing, sizeof missing, n_missing);
    list_end(extra, sizeof extra, n_extra);
    if (n_missing || n_extra)
        return ct_error_set(CT_EFORMAT, "%s: not this %s's tensors (the names `ctrain-dist export` writes%s): "
                            "%s%s%s%s%s", w->path, model_name, e->tied_head ? ": nanoGPT's" : "",
                            n_missing ? missing : "", n_missing ? " missing from the file" : "",
                            n_missing && n_extra ? "; " : "", n_extra ? extra : "",
                            n_extra ? " in the file, not in the model" : "");
    return 0;
}

/* The values of f into dst; CT_EFORMAT at the first non-finite one. */
static int widen(const struct ct_weights *w, const struct ct_weights_tensor *f, float *dst)
{
    ct_weights_to_f32(f, dst);
    for (uint64_t i = 0; i < f->numel; i++)
        if (!isfinite(dst[i]))
            return ct_error_set(CT_EFORMAT, "%s: tensor '%s' holds %s at element %llu: not weights to "
                                "start from", w->path, f->name, isnan(dst[i]) ? "NaN" : "an infinity",
                                (unsigned long long)i);
    return 0;
}

/* A gpt's lm_head.weight, when the file has it, must be wte's values (the
 * model has one matrix for both); check_names checked its shape. */
static int check_tied_head(const struct ct_weights *w, const struct expected *e)
{
    const struct ct_weights_tensor *head = e->tied_head ? ct_weights_find(w, e->t[e->n].name) : NULL;
    if (!head)
        return 0;
    const float *wte = e->t[e->n].data; /* wte's values, loaded already */
    float *v = malloc(head->numel * sizeof *v);
    if (!v)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", w->path);
    ct_weights_to_f32(head, v);
    int same = memcmp(v, wte, head->numel * sizeof *v) == 0;
    free(v);
    if (!same)
        return ct_error_set(CT_EFORMAT, "%s: %s differs from %s: this gpt ties its head to the token "
                            "embedding (one matrix, nanoGPT's weight tying); leave %s out or make it "
                            "equal", w->path, head->name, "transformer.wte.weight", head->name);
    return 0;
}

int ct_init_from_load(struct ct_model *m, const char *model_name, const char *path)
{
    struct ct_weights w;
    int rc = ct_weights_open(&w, path);
    if (rc < 0)
        return rc;
    struct expected e;
    if ((rc = expected_init(&e, m, model_name)) < 0) {
        ct_weights_close(&w);
        return rc;
    }
    rc = check_names(&w, &e, model_name);
    for (int i = 0; rc == 0 && i < e.n; i++)
        rc = widen(&w, ct_weights_find(&w, e.t[i].name), e.dst[i]);
    if (rc == 0)
        rc = check_tied_head(&w, &e);
    expected_free(&e);
    ct_weights_close(&w);
    return rc;
}
