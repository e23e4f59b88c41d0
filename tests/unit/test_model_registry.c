/* The model registry (src/models/registry.c): the zoo is registered first and
 * in order, a program's model is built through its own function and ctx, bad
 * and taken names are refused without changing the list, a full registry says
 * so, and the config's model.name, its "did you mean" and `config --list` go
 * through the registry. The registry is process-wide and append-only, so the
 * cases run in this order and each one builds on the last. */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "core/error.h"
#include "ct_test.h"
#include "models/models.h"
#include "nn/activation.h"
#include "nn/linear.h"

static int count_names(void)
{
    int n = 0;
    for (const char *const *p = ct_model_names(); *p; p++)
        n++;
    return n;
}

static void test_zoo_first(void)
{
    const char *const *names = ct_model_names();
    static const char *const zoo[] = {"mlp", "cnn", "resnet", "vit", "gpt"};
    CU_ASSERT_EQUAL_FATAL(count_names(), 5);
    for (int i = 0; i < 5; i++)
        CU_ASSERT_STRING_EQUAL(names[i], zoo[i]);
}

/* Linear(in, width)-ReLU-Linear(width, classes), width from the ctx. */
struct tiny_ctx {
    int width;
    int calls;
};

static int tiny_build(struct ct_model *m, const struct ct_model_spec *s, void *ctx)
{
    struct tiny_ctx *t = ctx;
    t->calls++;
    int in = s->in_c * s->in_h * s->in_w, rc;
    if ((rc = ct_model_add(m, ct_linear_new(in, t->width, 1))) < 0 ||
        (rc = ct_model_add(m, ct_relu_new((size_t)t->width))) < 0)
        return rc;
    return ct_model_add(m, ct_linear_new(t->width, s->n_classes, 1));
}

static struct tiny_ctx tiny = {.width = 5};

static void test_register_and_build(void)
{
    CU_ASSERT_EQUAL_FATAL(ct_model_register("tinynet", tiny_build, &tiny), 0);
    CU_ASSERT_EQUAL(count_names(), 6);
    CU_ASSERT_STRING_EQUAL(ct_model_names()[5], "tinynet");

    struct ct_model_spec spec = ct_model_default_spec();
    spec.name = "tinynet";
    spec.in_c = 1, spec.in_h = 3, spec.in_w = 4, spec.n_classes = 3;
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, 2), 0);
    CU_ASSERT_EQUAL(tiny.calls, 1);
    CU_ASSERT_EQUAL(m.n, 3);
    CU_ASSERT_EQUAL(ct_model_param_count(&m), (size_t)(12 * 5 + 5 + 5 * 3 + 3));
    ct_model_free(&m);

    /* A zoo model still builds through its own entry. */
    spec.name = "mlp";
    spec.hidden[0] = 7, spec.n_hidden = 1;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, 2), 0);
    CU_ASSERT_EQUAL(tiny.calls, 1);
    CU_ASSERT_EQUAL(ct_model_param_count(&m), (size_t)(12 * 7 + 7 + 7 * 3 + 3));
    ct_model_free(&m);
}

static void expect_refused(const char *name, ct_model_build_fn fn, int code, const char *phrase)
{
    ct_error_clear();
    int before = count_names();
    CU_ASSERT_EQUAL(ct_model_register(name, fn, NULL), code);
    CU_ASSERT_EQUAL(count_names(), before);
    if (!strstr(ct_error_message(), phrase))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", ct_error_message(), phrase);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), phrase));
}

static void test_bad_names(void)
{
    char long_name[CT_MODEL_NAME_MAX + 1];
    memset(long_name, 'a', CT_MODEL_NAME_MAX);
    long_name[CT_MODEL_NAME_MAX] = '\0';
    expect_refused("tinynet", tiny_build, CT_EINVAL, "model 'tinynet' is already registered");
    expect_refused("cnn", tiny_build, CT_EINVAL, "model 'cnn' is already registered");
    expect_refused("", tiny_build, CT_EINVAL, "expected a lowercase letter");
    expect_refused(NULL, tiny_build, CT_EINVAL, "expected a lowercase letter");
    expect_refused("Tiny", tiny_build, CT_EINVAL, "model name 'Tiny'");
    expect_refused("9net", tiny_build, CT_EINVAL, "model name '9net'");
    expect_refused("tiny net", tiny_build, CT_EINVAL, "model name 'tiny net'");
    expect_refused(long_name, tiny_build, CT_EINVAL, "at most 63 characters");
    expect_refused("other", NULL, CT_EINVAL, "model 'other': no build function");
    /* One character short of the limit is a valid name. */
    long_name[CT_MODEL_NAME_MAX - 1] = '\0';
    CU_ASSERT_EQUAL(ct_model_register(long_name, tiny_build, &tiny), 0);
}

static void test_unknown_model(void)
{
    struct ct_model_spec spec = ct_model_default_spec();
    spec.name = "convnext";
    spec.in_c = 1, spec.in_h = spec.in_w = 4, spec.n_classes = 2;
    struct ct_model m;
    CU_ASSERT_EQUAL(ct_model_build(&m, &spec, 2), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(),
                                  "unknown model 'convnext' (registered: mlp, cnn, resnet, vit, gpt, "
                                  "tinynet, aaa"));
}

/* Write `text` to a temporary INI and load it. */
static int load(struct ct_config *c, const char *text, char *path, size_t n)
{
    const char *dir = ct_test_tmpdir();
    snprintf(path, n, "%s/user.ini", dir);
    int rc = -1000;
    if (ct_test_write_file(path, text, strlen(text)) == 0)
        rc = ct_config_load(c, path, NULL, 0);
    else
        CU_FAIL("cannot write the test config");
    ct_test_rmtree(dir);
    return rc;
}

static void test_config_names_registered_model(void)
{
    static struct ct_config c;
    char path[512], want[1024];
    const char *ok = "[data]\ndir = /d\n[model]\nname = tinynet\n[optim]\nlr = 0.1\n"
                     "[train]\nepochs = 1\nglobal_batch = 8\nseed = 1\nmax_steps = 0\n";
    int rc = load(&c, ok, path, sizeof path);
    if (rc != 0)
        fprintf(stderr, "\n    unexpected error: %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.model.name, "tinynet");

    /* A typo: the file and line, every registered name, the near one. */
    CU_ASSERT_EQUAL(load(&c, "[data]\ndir = /d\n[model]\nname = tinynt\n", path, sizeof path),
                    CT_ECONFIG);
    snprintf(want, sizeof want,
             "%s:4: model.name: unknown value 'tinynt' (expected one of: mlp, cnn, resnet, vit, gpt, "
             "tinynet, aaa",
             path);
    if (!strstr(ct_error_message(), want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", ct_error_message(), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), want));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "; did you mean 'tinynet'?"));
}

static void test_config_list_shows_registered(void)
{
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_config_list(f, NULL, 1), 0);
    rewind(f);
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model.name\tstring\tmlp|cnn|resnet|vit|gpt|tinynet|aaa", 51) == 0)
            found = 1;
    fclose(f);
    CU_ASSERT(found);
}

static int fill_build(struct ct_model *m, const struct ct_model_spec *s, void *ctx)
{
    (void)m, (void)s, (void)ctx;
    return ct_error_set(CT_EINVAL, "never built");
}

static void test_full(void)
{
    int n = count_names(), added = 0;
    char name[32];
    for (int i = n; i < CT_MODEL_MAX_MODELS; i++) {
        snprintf(name, sizeof name, "fill%d", i);
        added += ct_model_register(name, fill_build, NULL) == 0;
    }
    CU_ASSERT_EQUAL(added, CT_MODEL_MAX_MODELS - n);
    CU_ASSERT_EQUAL(count_names(), CT_MODEL_MAX_MODELS);
    expect_refused("onemore", fill_build, CT_ERANGE, "the registry is full (32 models)");
    /* The builder's own error reaches the caller, wrapped with the name. */
    struct ct_model_spec spec = ct_model_default_spec();
    spec.name = "fill31"; /* the last one added */
    spec.in_c = 1, spec.in_h = spec.in_w = 4, spec.n_classes = 2;
    struct ct_model m;
    CU_ASSERT_EQUAL(ct_model_build(&m, &spec, 2), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "building model fill31: never built"));
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"the zoo comes first, in order", test_zoo_first},
        {"a registered model builds through its function and ctx", test_register_and_build},
        {"bad and taken names are refused", test_bad_names},
        {"an unknown model lists the registered ones", test_unknown_model},
        {"model.name accepts a registered model; a typo gets did-you-mean",
         test_config_names_registered_model},
        {"config --list shows registered models", test_config_list_shows_registered},
        {"a full registry says so", test_full},
        {NULL, NULL},
    };
    return ct_test_run("model registry", cases);
}
