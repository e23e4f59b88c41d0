/* Unit tests for train.init_from's load (src/train/init_from.c): a model's
 * parameters and buffers exported (report/export.h: ours' names, a gpt's
 * nanoGPT's) load bit for bit into a fresh model of the same spec, in both
 * formats, for the mlp, the cnn (BatchNorm running statistics: buffers) and
 * the gpt; a file of another width, with a tied head of another shape or
 * lacking a tensor is refused naming it,
 * and nothing is written to the model before the names and shapes pass.
 * tests/e2e/test_init_from.sh does the same with PyTorch's files. */
#include "core/error.h"
#include "ct_model_test.h"
#include "ct_test.h"
#include "models/models.h"
#include "report/export.h"
#include "train/init_from.h"

#include <stdlib.h>
#include <string.h>

static struct ct_model_spec spec_of(const char *name, int width)
{
    if (strcmp(name, "gpt") != 0)
        return ct_test_image_spec(name);
    struct ct_model_spec s = ct_model_default_spec();
    s.name = "gpt";
    s.in_c = 1, s.in_h = 1, s.in_w = 8; /* T = 8 token ids */
    s.block = 8, s.n_classes = 16, s.depth = 2, s.width = width, s.heads = 3;
    s.mlp_ratio = 4;
    return s;
}

/* Every parameter and buffer of m, state_dict order, written by export. */
static int export_model(const char *path, enum ct_export_format f, const char *name, const struct ct_model *m,
                        int skip)
{
    int n = m->layout.n + m->buffer_layout.n, k = 0;
    struct ct_export_tensor *t = calloc((size_t)n, sizeof *t);
    const struct ct_layout *lay[2] = {&m->layout, &m->buffer_layout};
    const struct ct_flat *flat[2] = {&m->params, &m->buffers};
    for (int l = 0; l < 2; l++)
        for (int i = 0; i < lay[l]->n; i++) {
            const struct ct_view *v = &lay[l]->views[i];
            t[k++] = (struct ct_export_tensor){v->name, v->ndim, v->shape, flat[l]->data + v->offset};
        }
    if (skip >= 0) { /* drop tensor `skip` */
        memmove(&t[skip], &t[skip + 1], (size_t)(n - skip - 1) * sizeof *t);
        k--;
    }
    int rc = ct_export_write_model(path, f, name, t, k, NULL, 0);
    free(t);
    return rc;
}

/* The views' values equal (the padding between views is no tensor's). */
static int same_views(const struct ct_layout *lay, const float *x, const float *y)
{
    for (int i = 0; i < lay->n; i++)
        if (memcmp(x + lay->views[i].offset, y + lay->views[i].offset, lay->views[i].numel * sizeof(float)))
            return 0;
    return 1;
}

static void fill(struct ct_flat *f, float base)
{
    for (size_t i = 0; i < f->numel; i++)
        f->data[i] = base + 0.001f * (float)(i % 997) - 0.25f;
}

static void test_round_trip(void)
{
    const char *names[] = {"mlp", "cnn", "gpt"};
    const char *dir = ct_test_tmpdir();
    for (int k = 0; k < 3; k++)
        for (int f = 0; f < CT_EXPORT_FORMAT_COUNT; f++) {
            struct ct_model_spec spec = spec_of(names[k], 12);
            struct ct_model a, b;
            CU_ASSERT_EQUAL_FATAL(ct_model_build(&a, &spec, 2), 0);
            CU_ASSERT_EQUAL_FATAL(ct_model_build(&b, &spec, 2), 0);
            fill(&a.params, 0.5f);
            fill(&a.buffers, 1.5f);
            ct_model_init_params(&b, 3);
            if (strcmp(names[k], "cnn") == 0)
                CU_ASSERT(a.buffers.numel > 0); /* BatchNorm's running statistics */
            char path[512];
            snprintf(path, sizeof path, "%s/%s.%s", dir, names[k], ct_export_format_names[f]);
            CU_ASSERT_FATAL(export_model(path, (enum ct_export_format)f, names[k], &a, -1) > 0);
            int rc = ct_init_from_load(&b, names[k], path);
            if (rc < 0)
                fprintf(stderr, "\n  %s: %s\n", names[k], ct_error_message());
            CU_ASSERT_EQUAL(rc, 0);
            CU_ASSERT(same_views(&a.layout, a.params.data, b.params.data));
            CU_ASSERT(same_views(&a.buffer_layout, a.buffers.data, b.buffers.data));

            /* A tensor missing (export refuses to write a gpt without one:
             * tests/e2e/test_init_from.sh edits such a file by hand). */
            if (strcmp(names[k], "gpt") == 0) {
                ct_model_free(&a);
                ct_model_free(&b);
                continue;
            }

            ct_model_init_params(&b, 3); /* refused by name, b untouched */
            float before = b.params.data[0];
            CU_ASSERT_FATAL(export_model(path, (enum ct_export_format)f, names[k], &a, 1) > 0);
            CU_ASSERT_EQUAL(ct_init_from_load(&b, names[k], path), CT_EFORMAT);
            CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), a.layout.views[1].name));
            CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "missing from the file"));
            CU_ASSERT_EQUAL(b.params.data[0], before);
            ct_model_free(&a);
            ct_model_free(&b);
        }
    /* Another width: the first tensor's shape named with the model's. */
    struct ct_model_spec s16 = spec_of("gpt", 15), s12 = spec_of("gpt", 12);
    struct ct_model a, b;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&a, &s16, 2), 0);
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&b, &s12, 2), 0);
    char path[512];
    snprintf(path, sizeof path, "%s/wide.safetensors", dir);
    CU_ASSERT_FATAL(export_model(path, CT_EXPORT_SAFETENSORS, "gpt", &a, -1) > 0);
    CU_ASSERT_EQUAL(ct_init_from_load(&b, "gpt", path), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "'transformer.wte.weight' has shape (16, 15), the model's is (16, 12)"));
    /* A tied head of another shape: refused before any value is read (it
     * would not fit wte's). */
    {
        int n = b.layout.n;
        struct ct_export_tensor *in = calloc((size_t)n + 1, sizeof *in), *out = calloc((size_t)n + 1, sizeof *out);
        char(*nm)[CT_EXPORT_NAME_MAX] = calloc((size_t)n + 1, sizeof *nm);
        for (int i = 0; i < n; i++)
            in[i] = (struct ct_export_tensor){b.layout.views[i].name, b.layout.views[i].ndim,
                                              b.layout.views[i].shape, b.params.data + b.layout.views[i].offset};
        CU_ASSERT_EQUAL_FATAL(ct_export_gpt_names(in, n, out, nm), n + 1);
        static float big[32 * 12];
        out[n].shape = (const int64_t[]){32, 12};
        out[n].data = big;
        snprintf(path, sizeof path, "%s/head.safetensors", dir);
        CU_ASSERT_EQUAL_FATAL(ct_export_write(path, CT_EXPORT_SAFETENSORS, out, n + 1, NULL, 0), 0);
        CU_ASSERT_EQUAL(ct_init_from_load(&b, "gpt", path), CT_EFORMAT);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "'lm_head.weight' has shape (32, 12), the model's is (16, 12)"));
        free(in);
        free(out);
        free(nm);
    }
    /* The mlp's names are not the gpt's: every one of them listed. */
    CU_ASSERT_EQUAL(ct_init_from_load(&b, "mlp", path), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "in the file, not in the model"));
    ct_model_free(&a);
    ct_model_free(&b);
    ct_test_rmtree(dir);
}

static const struct ct_test_case cases[] = {
    {"round_trip_and_refusals", test_round_trip},
    {NULL, NULL},
};

int main(void) { return ct_test_run("init_from", cases); }
