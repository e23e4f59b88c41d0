/* Unit tests for the run configuration (src/config): a full file, defaults,
 * every class of error with its file, line and phrase, `--set` overrides,
 * cross-key validation and the write -> load round trip.
 *
 * Each test writes its INI text into a fresh temporary directory and checks
 * the exact "PATH:LINE: phrase" the user would see, so a wrong line number or
 * a lost suggestion fails the test, not only a wrong return code.
 */
#include "config/config.h"
#include "core/error.h"
#include "optim/optim.h"
#include "parallel/compress.h"
#include "ct_test.h"

#include <stdint.h>

static char g_dir[256];
static char g_path[512];

/* Write `text` as <tmpdir>/<fname>, load it with the overrides, remove the
 * directory. g_path keeps the path for message checks. */
static int load_named(struct ct_config *cfg, const char *fname, const char *text,
                      const char *const *sets, int n_sets)
{
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, fname);
    if (ct_test_write_file(g_path, text, strlen(text)) != 0) {
        CU_FAIL("cannot write the test config");
        ct_test_rmtree(g_dir);
        return -1000;
    }
    ct_error_clear();
    int rc = ct_config_load(cfg, g_path, sets, n_sets);
    ct_test_rmtree(g_dir);
    return rc;
}

static int load_text(struct ct_config *cfg, const char *text, const char *const *sets, int n_sets)
{
    return load_named(cfg, "x.ini", text, sets, n_sets);
}

/* The message contains `want`; prints both on failure. */
static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

/* The message contains "PATH:LINE: phrase" (LINE 0: "PATH: phrase"). */
static void expect_at(int line, const char *phrase)
{
    char want[1024];
    if (line > 0)
        snprintf(want, sizeof want, "%s:%d: %s", g_path, line, phrase);
    else
        snprintf(want, sizeof want, "%s: %s", g_path, phrase);
    expect_msg(want);
}

static void expect_no(const char *unwanted)
{
    const char *msg = ct_error_message();
    if (strstr(msg, unwanted))
        fprintf(stderr, "\n    message: \"%s\"\n    has:     \"%s\"\n", msg, unwanted);
    CU_ASSERT_PTR_NULL(strstr(msg, unwanted));
}

/* Every required key and nothing else; the line numbers are used below:
 *  1 [data]  2 dir  4 [model]  5 name  7 [optim]  8 lr
 * 10 [train] 11 epochs 12 global_batch 13 seed 14 max_steps
 * Text appended to it starts at line 15, still in [train]. */
static const char MIN_TEXT[] = "[data]\n"
                               "dir = /data/fm\n"
                               "\n"
                               "[model]\n"
                               "name = mlp\n"
                               "\n"
                               "[optim]\n"
                               "lr = 0.05\n"
                               "\n"
                               "[train]\n"
                               "epochs = 3\n"
                               "global_batch = 128\n"
                               "seed = 42\n"
                               "max_steps = 0\n";

static const char *with_extra(const char *extra)
{
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s%s", MIN_TEXT, extra);
    return buf;
}

/* Load MIN_TEXT + extra, expect CT_ECONFIG and "PATH:LINE: phrase". */
static void expect_extra_error(const char *extra, int line, const char *phrase)
{
    struct ct_config cfg;
    int rc = load_text(&cfg, with_extra(extra), NULL, 0);
    CU_ASSERT_EQUAL(rc, CT_ECONFIG);
    expect_at(line, phrase);
}

/* Load MIN_TEXT + extra, expect success. */
static int load_extra_ok(struct ct_config *cfg, const char *extra)
{
    int rc = load_text(cfg, with_extra(extra), NULL, 0);
    if (rc != 0)
        fprintf(stderr, "\n    unexpected error: %s\n", ct_error_message());
    CU_ASSERT_EQUAL(rc, 0);
    return rc;
}

/* ------------------------------------------------------------------------ */

static void test_defaults(void)
{
    struct ct_config c;
    memset(&c, 0x5a, sizeof c);
    ct_config_defaults(&c);
    CU_ASSERT_STRING_EQUAL(c.data.dir, "/usr/share/datasets/fashion-mnist");
    CU_ASSERT_STRING_EQUAL(c.data.train_images, "train-images-idx3-ubyte.gz");
    CU_ASSERT_STRING_EQUAL(c.data.train_labels, "train-labels-idx1-ubyte.gz");
    CU_ASSERT_STRING_EQUAL(c.data.test_images, "t10k-images-idx3-ubyte.gz");
    CU_ASSERT_STRING_EQUAL(c.data.test_labels, "t10k-labels-idx1-ubyte.gz");
    CU_ASSERT_EQUAL(c.data.n_mean, 1);
    CU_ASSERT_EQUAL(c.data.mean[0], 0.2860);
    CU_ASSERT_EQUAL(c.data.n_std, 1);
    CU_ASSERT_EQUAL(c.data.std[0], 0.3530);
    CU_ASSERT_STRING_EQUAL(c.model.name, ""); /* required: left unset */
    CU_ASSERT_EQUAL(c.model.n_hidden, 2);
    CU_ASSERT_EQUAL(c.model.hidden[0], 256);
    CU_ASSERT_EQUAL(c.model.hidden[1], 128);
    CU_ASSERT_EQUAL(c.model.hidden[2], 0);
    CU_ASSERT_STRING_EQUAL(c.optim.name, "sgd");
    CU_ASSERT_EQUAL(c.optim.lr, 0.0);
    CU_ASSERT_EQUAL(c.optim.momentum, 0.0);
    CU_ASSERT_EQUAL(c.optim.dampening, 0.0);
    CU_ASSERT_EQUAL(c.optim.weight_decay, 0.0);
    CU_ASSERT_EQUAL(c.optim.nesterov, 0);
    CU_ASSERT_EQUAL(c.schedule.kind, CT_SCHED_CONSTANT);
    CU_ASSERT_EQUAL(c.schedule.warmup_steps, 0);
    CU_ASSERT_EQUAL(c.schedule.step_size, 1000);
    CU_ASSERT_EQUAL(c.schedule.gamma, 0.1);
    CU_ASSERT_EQUAL(c.schedule.min_lr, 0.0);
    CU_ASSERT_EQUAL(c.train.epochs, 0);
    CU_ASSERT_EQUAL(c.train.global_batch, 0);
    CU_ASSERT_EQUAL(c.train.seed, 0);
    CU_ASSERT_EQUAL(c.train.max_steps, 0);
    CU_ASSERT_EQUAL(c.train.eval_batch, 0); /* auto */
    CU_ASSERT_EQUAL(c.train.eval_every, 1);
    CU_ASSERT_EQUAL(c.dist.threads, 0);
    CU_ASSERT_EQUAL(c.log.every_steps, 50);
    CU_ASSERT_STRING_EQUAL(c.path, "");
    CU_ASSERT_STRING_EQUAL(c.name, "");
}

static void test_schedule_names(void)
{
    CU_ASSERT_STRING_EQUAL(ct_sched_kind_name(CT_SCHED_CONSTANT), "constant");
    CU_ASSERT_STRING_EQUAL(ct_sched_kind_name(CT_SCHED_STEP), "step");
    CU_ASSERT_STRING_EQUAL(ct_sched_kind_name(CT_SCHED_COSINE), "cosine");
    CU_ASSERT_STRING_EQUAL(ct_sched_kind_name(CT_SCHED_COUNT), "unknown");
}

/* Every key set to a non-default value, with the INI features people use:
 * a byte order mark, comments of both kinds, inline ';' comments, indented
 * keys (which inih would otherwise read as continuation lines), ':' as the
 * separator and blank lines. */
static const char FULL_TEXT[] = "\xEF\xBB\xBF# Fashion-MNIST MLP\n"
                                "[data]\n"
                                "dir = /srv/data/fashion\n"
                                "train_images = a-images.gz\n"
                                "train_labels = a-labels.gz\n"
                                "test_images = b-images.gz\n"
                                "test_labels = b-labels.gz\n"
                                "mean = 0.5\n"
                                "std = 0.25\n"
                                "\n"
                                "[model]\n"
                                "name = mlp\n"
                                "hidden = 512, 256 ,64\n"
                                "\n"
                                "; optimizer\n"
                                "[optim]\n"
                                "  name = sgd\n"
                                "  lr = 0.1 ; the base rate\n"
                                "  momentum = 0.9\n"
                                "  dampening = 0\n"
                                "  weight_decay = 5e-4\n"
                                "  nesterov = yes\n"
                                "\n"
                                "[schedule]\n"
                                "name = cosine\n"
                                "warmup_steps = 100\n"
                                "step_size = 30\n"
                                "gamma = 0.5\n"
                                "min_lr = 1e-5\n"
                                "\n"
                                "[train]\n"
                                "epochs = 12\n"
                                "global_batch = 256\n"
                                "seed = 18446744073709551615\n"
                                "max_steps = 5000\n"
                                "eval_batch = 500\n"
                                "eval_every: 2\n"
                                "\n"
                                "[dist]\n"
                                "threads = 4\n"
                                "\n"
                                "[log]\n"
                                "every_steps = 0\n";

static void test_full_file(void)
{
    struct ct_config c;
    int rc = load_named(&c, "fmnist-mlp.ini", FULL_TEXT, NULL, 0);
    if (rc)
        fprintf(stderr, "\n    %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.path, g_path);
    CU_ASSERT_STRING_EQUAL(c.name, "fmnist-mlp");
    CU_ASSERT_STRING_EQUAL(c.data.dir, "/srv/data/fashion");
    CU_ASSERT_STRING_EQUAL(c.data.train_images, "a-images.gz");
    CU_ASSERT_STRING_EQUAL(c.data.train_labels, "a-labels.gz");
    CU_ASSERT_STRING_EQUAL(c.data.test_images, "b-images.gz");
    CU_ASSERT_STRING_EQUAL(c.data.test_labels, "b-labels.gz");
    CU_ASSERT_EQUAL(c.data.mean[0], 0.5);
    CU_ASSERT_EQUAL(c.data.std[0], 0.25);
    CU_ASSERT_STRING_EQUAL(c.model.name, "mlp");
    CU_ASSERT_EQUAL(c.model.n_hidden, 3);
    CU_ASSERT_EQUAL(c.model.hidden[0], 512);
    CU_ASSERT_EQUAL(c.model.hidden[1], 256);
    CU_ASSERT_EQUAL(c.model.hidden[2], 64);
    CU_ASSERT_EQUAL(c.model.hidden[3], 0);
    CU_ASSERT_STRING_EQUAL(c.optim.name, "sgd");
    CU_ASSERT_EQUAL(c.optim.lr, 0.1);
    CU_ASSERT_EQUAL(c.optim.momentum, 0.9);
    CU_ASSERT_EQUAL(c.optim.dampening, 0.0);
    CU_ASSERT_EQUAL(c.optim.weight_decay, 5e-4);
    CU_ASSERT_EQUAL(c.optim.nesterov, 1);
    CU_ASSERT_EQUAL(c.schedule.kind, CT_SCHED_COSINE);
    CU_ASSERT_EQUAL(c.schedule.warmup_steps, 100);
    CU_ASSERT_EQUAL(c.schedule.step_size, 30);
    CU_ASSERT_EQUAL(c.schedule.gamma, 0.5);
    CU_ASSERT_EQUAL(c.schedule.min_lr, 1e-5);
    CU_ASSERT_EQUAL(c.train.epochs, 12);
    CU_ASSERT_EQUAL(c.train.global_batch, 256);
    CU_ASSERT_EQUAL(c.train.seed, UINT64_MAX);
    CU_ASSERT_EQUAL(c.train.max_steps, 5000);
    CU_ASSERT_EQUAL(c.train.eval_batch, 500);
    CU_ASSERT_EQUAL(c.train.eval_every, 2);
    CU_ASSERT_EQUAL(c.dist.threads, 4);
    CU_ASSERT_EQUAL(c.log.every_steps, 0);
}

static void test_minimal_file_gets_defaults(void)
{
    struct ct_config c, d;
    CU_ASSERT_EQUAL_FATAL(load_text(&c, MIN_TEXT, NULL, 0), 0);
    ct_config_defaults(&d);
    CU_ASSERT_STRING_EQUAL(c.name, "x");
    CU_ASSERT_STRING_EQUAL(c.data.dir, "/data/fm");
    CU_ASSERT_STRING_EQUAL(c.model.name, "mlp");
    CU_ASSERT_EQUAL(c.optim.lr, 0.05);
    CU_ASSERT_EQUAL(c.train.epochs, 3);
    CU_ASSERT_EQUAL(c.train.global_batch, 128);
    CU_ASSERT_EQUAL(c.train.seed, 42);
    CU_ASSERT_EQUAL(c.train.max_steps, 0);
    /* Everything the file did not name is the default, byte for byte. */
    memcpy(d.path, c.path, sizeof d.path);
    memcpy(d.name, c.name, sizeof d.name);
    memcpy(d.data.dir, c.data.dir, sizeof d.data.dir);
    memcpy(d.model.name, c.model.name, sizeof d.model.name);
    d.optim.lr = c.optim.lr;
    d.train.epochs = c.train.epochs;
    d.train.global_batch = c.train.global_batch;
    d.train.seed = c.train.seed;
    d.train.max_steps = c.train.max_steps;
    CU_ASSERT_EQUAL(memcmp(&c, &d, sizeof c), 0);
}

static void test_names(void)
{
    struct ct_config c;
    CU_ASSERT_EQUAL_FATAL(load_named(&c, "run.conf", MIN_TEXT, NULL, 0), 0);
    CU_ASSERT_STRING_EQUAL(c.name, "run.conf");
    CU_ASSERT_STRING_EQUAL(c.path, g_path);
    CU_ASSERT_EQUAL_FATAL(load_named(&c, "a.b.ini", MIN_TEXT, NULL, 0), 0);
    CU_ASSERT_STRING_EQUAL(c.name, "a.b");
}

static void test_crlf_and_case_insensitive_words(void)
{
    struct ct_config c;
    const char *text = "[data]\r\ndir = /d\r\n[model]\r\nname = mlp\r\n[optim]\r\nlr = 1\r\n"
                       "momentum = 0.5\r\nnesterov = ON\r\n[train]\r\nepochs = 1\r\n"
                       "global_batch = 1\r\nseed = 0\r\nmax_steps = 10\r\n[dist]\r\n"
                       "threads = AUTO\r\n";
    int rc = load_text(&c, text, NULL, 0);
    if (rc)
        fprintf(stderr, "\n    %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.data.dir, "/d");
    CU_ASSERT_EQUAL(c.optim.nesterov, 1);
    CU_ASSERT_EQUAL(c.dist.threads, 0);
    CU_ASSERT_EQUAL(c.train.max_steps, 10);
}

/* ------------------------------------------------------------------------ */
/* Errors in the file                                                       */

static void test_unknown_key(void)
{
    expect_extra_error("[optim]\nlrr = 0.1\n", 16,
                       "unknown key 'lrr' in section [optim] (did you mean 'lr'?)");
    /* Right name, wrong section: point at the section it belongs to. */
    expect_extra_error("[optim]\nepochs = 5\n", 16,
                       "unknown key 'epochs' in section [optim] (did you mean [train] epochs?)");
    expect_extra_error("eval_bacth = 5\n", 15,
                       "unknown key 'eval_bacth' in section [train] (did you mean 'eval_batch'?)");
    /* Long names tolerate more typos: a third of their length (4 of 12). */
    expect_extra_error("[optim]\nweigth_dekay = 0.1\n", 16,
                       "unknown key 'weigth_dekay' in section [optim] (did you mean "
                       "'weight_decay'?)");
    /* Nothing close: no suggestion at all. */
    expect_extra_error("[optim]\nfoobarbaz = 1\n", 16,
                       "unknown key 'foobarbaz' in section [optim]");
    expect_no("did you mean");
}

static void test_unknown_section(void)
{
    expect_extra_error("[trian]\nepochs = 5\n", 15,
                       "unknown section [trian] (did you mean [train]?)");
    /* Reported at the header's line even when the section holds no key. */
    expect_extra_error("\n[optimizer]\n", 16, "unknown section [optimizer]");
    expect_no("did you mean");
}

static void test_key_before_section(void)
{
    struct ct_config c;
    char text[4096];
    snprintf(text, sizeof text, "epochs = 5\n%s", MIN_TEXT);
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(1, "key 'epochs' appears before any [section]");
}

static void test_bad_integers(void)
{
    struct ct_config c;
    const char *text = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n"
                       "[train]\nepochs = five\nglobal_batch = 1\nseed = 1\nmax_steps = 0\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(8, "train.epochs: expected an integer, found 'five'");

    text = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n"
           "[train]\nepochs = 0\nglobal_batch = 1\nseed = 1\nmax_steps = 0\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(8, "train.epochs: 0 is out of range [1, 100000]");

    expect_extra_error("eval_batch = 5x\n", 15,
                       "train.eval_batch: expected an integer or 'auto', found '5x'");
    expect_extra_error("eval_batch = 1048577\n", 15,
                       "train.eval_batch: 1048577 is out of range [1, 1048576] (or 'auto')");
    expect_extra_error("eval_batch = 2.5\n", 15,
                       "train.eval_batch: expected an integer or 'auto', found '2.5'");
    expect_extra_error("eval_batch =\n", 15, "train.eval_batch: expected an integer or 'auto', found ''");
    /* Too big for 64 bits is out of range, not silently clamped. */
    expect_extra_error("[schedule]\nwarmup_steps = 99999999999999999999\n", 16,
                       "schedule.warmup_steps: 99999999999999999999 is out of range");
    expect_extra_error("[schedule]\nstep_size = 0\n", 16,
                       "schedule.step_size: 0 is out of range [1, ");
    expect_extra_error("[log]\nevery_steps = -1\n", 16, "log.every_steps: -1 is out of range [0, ");
}

static void test_seed_is_unsigned_64(void)
{
    struct ct_config c;
    const char *base = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n"
                       "[train]\nepochs = 1\nglobal_batch = 1\nmax_steps = 0\n";
    char text[1024];
    snprintf(text, sizeof text, "%sseed = -1\n", base);
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(11, "train.seed: expected a non-negative integer, found '-1'");
    snprintf(text, sizeof text, "%sseed = 18446744073709551616\n", base);
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(11, "train.seed: 18446744073709551616 is out of range [0, 18446744073709551615]");
    snprintf(text, sizeof text, "%sseed = 9223372036854775808\n", base);
    CU_ASSERT_EQUAL_FATAL(load_text(&c, text, NULL, 0), 0);
    CU_ASSERT_EQUAL(c.train.seed, UINT64_C(9223372036854775808));
}

static void test_bad_doubles(void)
{
    expect_extra_error("[optim]\nmomentum = abc\n", 16,
                       "optim.momentum: expected a number, found 'abc'");
    expect_extra_error("[optim]\nmomentum = nan\n", 16,
                       "optim.momentum: expected a finite number, found 'nan'");
    expect_extra_error("[optim]\nweight_decay = 1e999\n", 16,
                       "optim.weight_decay: expected a finite number, found '1e999'");
    expect_extra_error("[optim]\nmomentum = 1\n", 16, "optim.momentum: 1 is out of range [0, 1)");
    expect_extra_error("[optim]\ndampening = 1.5\n", 16,
                       "optim.dampening: 1.5 is out of range [0, 1]");
    expect_extra_error("[optim]\nweight_decay = -0.1\n", 16,
                       "optim.weight_decay: -0.1 is out of range [0, inf)");
    expect_extra_error("[data]\nstd = 0\n", 16, "data.std: 0 is out of range (0, inf)");
    /* MFU's peak: a rate, 0 = measure it. */
    expect_extra_error("[dist]\npeak_gflops = -5\n", 16,
                       "dist.peak_gflops: -5 is out of range [0, 1e+09]");
    expect_extra_error("[dist]\npeak_gflops = fast\n", 16,
                       "dist.peak_gflops: expected a number, found 'fast'");
    /* Per-channel lists: each entry checked, at most 4. */
    expect_extra_error("[data]\nstd = 0.2, 0, 0.3\n", 16,
                       "data.std: entry 2: 0 is out of range (0, inf)");
    expect_extra_error("[data]\nmean = 0.1,,0.2\n", 16,
                       "data.mean: expected a comma-separated list of numbers, found '0.1,,0.2'");
    expect_extra_error("[data]\nmean = 1,2,3,4,5\n", 16,
                       "data.mean: too many entries in '1,2,3,4,5' (at most 4)");
    expect_extra_error("[schedule]\ngamma = 0\n", 16, "schedule.gamma: 0 is out of range (0, 1]");
    /* '#' after a value is not a comment in inih: say so. */
    expect_extra_error("[optim]\nmomentum = 0.9 # heavy\n", 16,
                       "optim.momentum: expected a number, found '0.9 # heavy' ('#' starts");

    struct ct_config c;
    const char *text = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0\n"
                       "[train]\nepochs = 1\nglobal_batch = 1\nseed = 1\nmax_steps = 0\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(6, "optim.lr: 0 is out of range (0, 100]");

    /* The closed ends are allowed. */
    if (load_extra_ok(&c, "[optim]\ndampening = 1\n[schedule]\ngamma = 1\n") == 0) {
        CU_ASSERT_EQUAL(c.optim.dampening, 1.0);
        CU_ASSERT_EQUAL(c.schedule.gamma, 1.0);
    }
}

static void test_bools(void)
{
    static const struct {
        const char *text;
        int want;
    } cases[] = {{"true", 1}, {"FALSE", 0}, {"Yes", 1}, {"no", 0},
                 {"on", 1},   {"off", 0},   {"1", 1},   {"0", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ct_config c;
        char extra[128];
        snprintf(extra, sizeof extra, "[optim]\nmomentum = 0.5\nnesterov = %s\n", cases[i].text);
        if (load_extra_ok(&c, extra) == 0)
            CU_ASSERT_EQUAL(c.optim.nesterov, cases[i].want);
    }
    expect_extra_error("[optim]\nnesterov = maybe\n", 16,
                       "optim.nesterov: expected true or false (or yes/no, on/off, 1/0), found "
                       "'maybe'");
}

static void test_enums_and_strings(void)
{
    expect_extra_error("[optim]\nname = adam\n", 16,
                       "optim.name: unknown value 'adam' (expected one of: sgd, adamw); did you "
                       "mean 'adamw'?");
    expect_extra_error("[schedule]\nname = cosin\n", 16,
                       "schedule.name: unknown value 'cosin' (expected one of: constant, step, "
                       "cosine)");
    expect_extra_error("[data]\ntrain_images =\n", 16, "data.train_images: must not be empty");

    struct ct_config c;
    const char *text = "[data]\ndir = /d\n[model]\nname = convnext\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(4, "model.name: unknown value 'convnext' (expected one of: mlp, cnn, resnet, vit, gpt)");
    expect_no("did you mean"); /* nothing registered is near it */
    CU_ASSERT_EQUAL(load_text(&c, "[data]\ndir = /d\n[model]\nname = resnt\n", NULL, 0), CT_ECONFIG);
    expect_at(4, "model.name: unknown value 'resnt' (expected one of: mlp, cnn, resnet, vit, gpt); did "
                 "you mean 'resnet'?");

    if (load_extra_ok(&c, "[schedule]\nname = step\n") == 0)
        CU_ASSERT_EQUAL(c.schedule.kind, CT_SCHED_STEP);
}

/* A checkpoint's recorded config may name a model that only the program
 * which trained it registered: ct_config_load_recorded reads it (for audit
 * verify and diffs), ct_config_load_text does not; everything else is still
 * checked. */
static void test_recorded_foreign_model(void)
{
    static char text[1024];
    static struct ct_config c;
    snprintf(text, sizeof text, "%s", MIN_TEXT);
    char *name = strstr(text, "name = mlp");
    CU_ASSERT_PTR_NOT_NULL_FATAL(name);
    memmove(name + 15, name + 10, strlen(name + 10) + 1);
    memcpy(name, "name = othernet", 15);
    CU_ASSERT_EQUAL(ct_config_load_text(&c, text, "ckpt-4", NULL, 0), CT_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "ckpt-4:5: model.name: unknown value 'othernet'"));
    int rc = ct_config_load_recorded(&c, "ckpt-4", text);
    if (rc != 0)
        fprintf(stderr, "\n    unexpected error: %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.model.name, "othernet");
    CU_ASSERT_EQUAL(c.train.global_batch, 128);
    /* Only the registry's names are open: other keys are checked as ever. */
    char *lr = strstr(text, "lr = 0.05");
    CU_ASSERT_PTR_NOT_NULL_FATAL(lr);
    memcpy(lr, "lr = -1.0", 9);
    CU_ASSERT_EQUAL(ct_config_load_recorded(&c, "ckpt-4", text), CT_ECONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "ckpt-4:8: optim.lr"));
    CU_ASSERT_STRING_EQUAL(c.model.name, "othernet"); /* untouched by the failed load */
}

static void test_int_lists(void)
{
    struct ct_config c;
    if (load_extra_ok(&c, "[model]\nhidden = 1000\n") == 0) {
        CU_ASSERT_EQUAL(c.model.n_hidden, 1);
        CU_ASSERT_EQUAL(c.model.hidden[0], 1000);
        CU_ASSERT_EQUAL(c.model.hidden[1], 0); /* the default's second entry is gone */
    }
    if (load_extra_ok(&c, "[model]\nhidden = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,65536\n") == 0) {
        CU_ASSERT_EQUAL(c.model.n_hidden, 16);
        CU_ASSERT_EQUAL(c.model.hidden[15], 65536);
    }
    expect_extra_error("[model]\nhidden = 256,,128\n", 16,
                       "model.hidden: expected a comma-separated list of integers, found "
                       "'256,,128'");
    expect_extra_error("[model]\nhidden = 256,\n", 16,
                       "model.hidden: expected a comma-separated list of integers, found '256,'");
    expect_extra_error("[model]\nhidden = 256 128\n", 16,
                       "model.hidden: expected a comma-separated list of integers");
    expect_extra_error("[model]\nhidden = 256, 0\n", 16,
                       "model.hidden: entry 2 (0) is out of range [1, 65536]");
    expect_extra_error("[model]\nhidden = 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17\n", 16,
                       "model.hidden: too many entries");
}

static void test_threads(void)
{
    struct ct_config c;
    if (load_extra_ok(&c, "[dist]\nthreads = 16\n") == 0)
        CU_ASSERT_EQUAL(c.dist.threads, 16);
    if (load_extra_ok(&c, "[dist]\nthreads = auto\n") == 0)
        CU_ASSERT_EQUAL(c.dist.threads, 0);
    expect_extra_error("[dist]\nthreads = 0\n", 16,
                       "dist.threads: 0 is out of range [1, 1024] (or 'auto')");
    expect_extra_error("[dist]\nthreads = many\n", 16,
                       "dist.threads: expected an integer or 'auto', found 'many'");
}

static void test_duplicate_key(void)
{
    expect_extra_error("eval_batch = 10\n[train]\nseed = 7\n", 17,
                       "duplicate key train.seed (first set on line 13)");
}

static void test_syntax_errors(void)
{
    expect_extra_error("this line has no equals sign\n", 15, "syntax error");
    expect_extra_error("[train\nepochs = 4\n", 15, "syntax error");

    /* Only the first problem is reported: a syntax error before a bad key... */
    struct ct_config c;
    const char *text = "[data]\ndir = /d\noops\n[optim]\nlrr = 1\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(3, "syntax error");
    expect_no("lrr");
    /* ... and a bad key before a syntax error. */
    text = "[data]\ndir = /d\n[optim]\nlrr = 1\noops\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(4, "unknown key 'lrr'");
    expect_no("syntax");
    /* Two bad keys: only the first. */
    text = "[optim]\nmomentun = 0.9\nlrr = 1\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(2, "unknown key 'momentun' in section [optim] (did you mean 'momentum'?)");
    expect_no("lrr");
}

static void test_long_line(void)
{
    char extra[512];
    memset(extra, 0, sizeof extra);
    extra[0] = '#';
    memset(extra + 1, 'x', 300);
    extra[301] = '\n';
    expect_extra_error(extra, 15, "line is too long");
}

static void test_missing_required(void)
{
    struct ct_config c;
    const char *text = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n"
                       "[train]\nepochs = 1\nglobal_batch = 1\nmax_steps = 0\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(0, "missing required key train.seed");
    /* data.dir has a default in the struct, yet the file must name it. */
    text = "[model]\nname = mlp\n[optim]\nlr = 0.1\n"
           "[train]\nepochs = 1\nglobal_batch = 1\nseed = 1\nmax_steps = 0\n";
    CU_ASSERT_EQUAL(load_text(&c, text, NULL, 0), CT_ECONFIG);
    expect_at(0, "missing required key data.dir");
}

static void test_missing_file(void)
{
    struct ct_config c;
    char path[512];
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/nope.ini", g_dir);
    CU_ASSERT_EQUAL(ct_config_load(&c, path, NULL, 0), CT_ENOENT);
    char want[600];
    snprintf(want, sizeof want, "%s: cannot open config file: No such file or directory", path);
    expect_msg(want);
    /* A directory opens but cannot be read. */
    CU_ASSERT_EQUAL(ct_config_load(&c, g_dir, NULL, 0), CT_EIO);
    expect_msg(g_dir);
    ct_test_rmtree(g_dir);
}

static void test_failure_leaves_cfg_alone(void)
{
    struct ct_config c, before;
    memset(&c, 0xab, sizeof c);
    memcpy(&before, &c, sizeof c);
    CU_ASSERT_EQUAL(load_text(&c, with_extra("[optim]\nlrr = 1\n"), NULL, 0), CT_ECONFIG);
    CU_ASSERT_EQUAL(memcmp(&c, &before, sizeof c), 0);
}

/* ------------------------------------------------------------------------ */
/* Overrides                                                                */

static void test_overrides(void)
{
    struct ct_config c;
    const char *sets[] = {"train.epochs=7",       "optim.momentum = 0.9", "dist.threads=4",
                          "schedule.name=cosine", "train.eval_every=3",   "train.epochs=9",
                          "model.hidden=32,16,8"};
    int rc = load_text(&c, MIN_TEXT, sets, 7);
    if (rc)
        fprintf(stderr, "\n    %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(c.train.epochs, 9); /* overrides apply in order: the last wins */
    CU_ASSERT_EQUAL(c.optim.momentum, 0.9);
    CU_ASSERT_EQUAL(c.dist.threads, 4);
    CU_ASSERT_EQUAL(c.schedule.kind, CT_SCHED_COSINE);
    CU_ASSERT_EQUAL(c.train.eval_every, 3);
    CU_ASSERT_EQUAL(c.model.n_hidden, 3);
    CU_ASSERT_EQUAL(c.model.hidden[2], 8);
    CU_ASSERT_EQUAL(c.train.global_batch, 128); /* untouched file value */

    /* An override may supply a required key the file lacks. */
    const char *text = "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n"
                       "[train]\nepochs = 1\nglobal_batch = 1\nmax_steps = 0\n";
    const char *seed[] = {"train.seed=99"};
    CU_ASSERT_EQUAL_FATAL(load_text(&c, text, seed, 1), 0);
    CU_ASSERT_EQUAL(c.train.seed, 99);
}

static void test_override_errors(void)
{
    struct ct_config c;
    const char *bad_type[] = {"train.epochs=1", "train.epochs=x"};
    CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, bad_type, 2), CT_ECONFIG);
    expect_msg("--set train.epochs=x: train.epochs: expected an integer, found 'x'");

    const char *range[] = {"optim.lr=1000"};
    CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, range, 1), CT_ECONFIG);
    expect_msg("--set optim.lr=1000: optim.lr: 1000 is out of range (0, 100]");

    const char *unknown_key[] = {"optim.lrr=0.1"};
    CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, unknown_key, 1), CT_ECONFIG);
    expect_msg("--set optim.lrr=0.1: unknown key 'lrr' in section [optim] (did you mean 'lr'?)");

    const char *wrong_section[] = {"optim.seed=3"};
    CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, wrong_section, 1), CT_ECONFIG);
    expect_msg("--set optim.seed=3: unknown key 'seed' in section [optim] (did you mean [train] "
               "seed?)");

    const char *unknown_section[] = {"trian.epochs=1"};
    CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, unknown_section, 1), CT_ECONFIG);
    expect_msg("--set trian.epochs=1: unknown section [trian] (did you mean [train]?)");

    static const char *const malformed[] = {"train.epochs", "epochs=5", "=5", ".epochs=5",
                                            "train.=5", "a=b.c"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        const char *one[] = {malformed[i]};
        char want[128];
        CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, one, 1), CT_ECONFIG);
        snprintf(want, sizeof want, "--set %s: expected section.key=value", malformed[i]);
        expect_msg(want);
    }
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */

static void test_nesterov(void)
{
    struct ct_config c;
    expect_extra_error("[optim]\nnesterov = true\n", 0,
                       "optim.nesterov = true requires optim.momentum > 0 and optim.dampening = 0");
    expect_extra_error("[optim]\nnesterov = true\nmomentum = 0.9\ndampening = 0.1\n", 0,
                       "optim.nesterov = true requires optim.momentum > 0 and optim.dampening = 0");
    if (load_extra_ok(&c, "[optim]\nnesterov = true\nmomentum = 0.9\n") == 0)
        CU_ASSERT_EQUAL(c.optim.nesterov, 1);
    /* The rule applies to the final values, overrides included. */
    const char *sets[] = {"optim.momentum=0"};
    CU_ASSERT_EQUAL(load_text(&c, with_extra("[optim]\nnesterov = true\nmomentum = 0.9\n"), sets, 1),
                    CT_ECONFIG);
    expect_at(0, "optim.nesterov = true requires");
}

/* dist.grad_compress and its feedback: values, the deterministic mode's
 * refusal naming both keys, feedback only with a compression, and both are
 * experiment keys (a resume may not change them). */
static void test_grad_compress(void)
{
    struct ct_config c, d;
    if (load_extra_ok(&c, "") == 0) {
        CU_ASSERT_EQUAL(c.dist.grad_compress, CT_GRAD_COMPRESS_NONE);
        CU_ASSERT_EQUAL(c.dist.grad_compress_feedback, 0);
    }
    if (load_extra_ok(&c, "[dist]\ngrad_compress = bf16\ngrad_compress_feedback = true\n") == 0) {
        CU_ASSERT_EQUAL(c.dist.grad_compress, CT_GRAD_COMPRESS_BF16);
        CU_ASSERT_EQUAL(c.dist.grad_compress_feedback, 1);
    }
    expect_extra_error("[dist]\ngrad_compress = fp16\n", 16, "dist.grad_compress");
    expect_msg("bf16");
    expect_extra_error("[train]\ndeterministic = true\n[dist]\ngrad_compress = bf16\n", 0,
                       "train.deterministic = true refuses dist.grad_compress = bf16");
    expect_msg("set dist.grad_compress = none or train.deterministic = false");
    if (load_extra_ok(&c, "[train]\ndeterministic = true\n[dist]\ngrad_compress = none\n") == 0)
        CU_ASSERT_EQUAL(c.train.deterministic, 1);
    expect_extra_error("[dist]\ngrad_compress_feedback = true\n", 0,
                       "dist.grad_compress_feedback = true needs a compression "
                       "(dist.grad_compress = bf16)");
    /* Overrides count: the rule sees the final values. */
    const char *sets[] = {"dist.grad_compress=bf16", "train.deterministic=true"};
    CU_ASSERT_EQUAL(load_text(&c, with_extra(""), sets, 2), CT_ECONFIG);
    expect_at(0, "train.deterministic = true refuses dist.grad_compress = bf16");
    /* Experiment keys: a difference is a state difference, not a runtime one. */
    CU_ASSERT_EQUAL_FATAL(load_extra_ok(&c, ""), 0);
    CU_ASSERT_EQUAL_FATAL(load_text(&d, with_extra(""), sets, 1), 0);
    char diff[512];
    int runtime = -1;
    CU_ASSERT_EQUAL(ct_config_diff(&c, &d, diff, sizeof diff, &runtime), 1);
    CU_ASSERT_EQUAL(runtime, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(diff, "dist.grad_compress: none -> bf16"));
    const char *fb[] = {"dist.grad_compress=bf16", "dist.grad_compress_feedback=true"};
    CU_ASSERT_EQUAL_FATAL(load_text(&c, with_extra(""), fb, 2), 0);
    CU_ASSERT_EQUAL(ct_config_diff(&c, &d, diff, sizeof diff, &runtime), 1);
    CU_ASSERT_EQUAL(runtime, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(diff, "dist.grad_compress_feedback"));
}

static void test_cosine_min_lr(void)
{
    expect_extra_error("[schedule]\nname = cosine\nmin_lr = 0.5\n", 0,
                       "schedule.min_lr (0.5) must not exceed optim.lr (0.05)");
    struct ct_config c;
    /* Only the cosine schedule uses the floor. */
    if (load_extra_ok(&c, "[schedule]\nname = step\nmin_lr = 0.5\n") == 0)
        CU_ASSERT_EQUAL(c.schedule.min_lr, 0.5);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                  */

static int write_and_reload(const struct ct_config *c, struct ct_config *back, char *text,
                            size_t text_size)
{
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    snprintf(g_path, sizeof g_path, "%s/resolved.ini", g_dir);
    FILE *f = fopen(g_path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int rc = ct_config_write(c, f);
    CU_ASSERT_EQUAL(rc, 0);
    fclose(f);
    f = fopen(g_path, "r");
    size_t n = fread(text, 1, text_size - 1, f);
    text[n] = '\0';
    fclose(f);
    ct_error_clear();
    rc = ct_config_load(back, g_path, NULL, 0);
    if (rc)
        fprintf(stderr, "\n    reload: %s\n", ct_error_message());
    ct_test_rmtree(g_dir);
    return rc;
}

static void check_round_trip(const struct ct_config *c, char *text, size_t text_size)
{
    struct ct_config back;
    memset(&back, 0x77, sizeof back);
    CU_ASSERT_EQUAL_FATAL(write_and_reload(c, &back, text, text_size), 0);
    CU_ASSERT_STRING_EQUAL(back.name, "resolved");
    memcpy(back.path, c->path, sizeof back.path);
    memcpy(back.name, c->name, sizeof back.name);
    CU_ASSERT_EQUAL(memcmp(&back, c, sizeof back), 0);
}

static void test_round_trip(void)
{
    struct ct_config c;
    char text[8192];
    /* Values that need all 17 digits, and a seed above INT64_MAX. */
    const char *sets[] = {"optim.lr=0.30000000000000004", "data.mean=0.1",
                          "data.std=0.33333333333333331", "optim.nesterov=false",
                          "train.seed=18446744073709551615"};
    CU_ASSERT_EQUAL_FATAL(load_named(&c, "fmnist-mlp.ini", FULL_TEXT, sets, 5), 0);
    check_round_trip(&c, text, sizeof text);
    char want[CT_CONFIG_PATH_MAX + 64];
    snprintf(want, sizeof want, "# resolved configuration of %s\n", c.path);
    CU_ASSERT_EQUAL(strncmp(text, want, strlen(want)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n[train]\nepochs = 12\nglobal_batch = 256\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nlr = 0.30000000000000004\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nmean = 0.1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nhidden = 512,256,64\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n[schedule]\nname = cosine\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nthreads = 4\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nseed = 18446744073709551615\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nnesterov = false\n"));

    /* Defaults only: every key is written, threads as "auto". */
    CU_ASSERT_EQUAL_FATAL(load_text(&c, MIN_TEXT, NULL, 0), 0);
    check_round_trip(&c, text, sizeof text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n[dist]\nthreads = auto\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n[log]\nevery_steps = 50\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\ntest_labels = t10k-labels-idx1-ubyte.gz\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\nstd = 0.353\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\n[schedule]\nname = constant\n"));
}

/* A string value that the resolved config could not write back as itself
 * is refused where it comes in (only a --set can bring one: inih strips
 * comments and cuts lines in a file). Each of these loaded before and then
 * failed or changed on the way back through ct_config_write (caught by
 * tests/fuzz/fuzz_config; regress/config/ replays them). */
static void test_values_that_cannot_be_written(void)
{
    struct ct_config c;
    char text[8192];
    char long_dir[256], longer_dir[256];
    /* "dir = " + 192 characters is the longest line the reader takes (198). */
    memset(long_dir, 'a', sizeof long_dir);
    memcpy(long_dir, "data.dir=/", 10);
    long_dir[9 + 192] = '\0';
    memcpy(longer_dir, long_dir, sizeof longer_dir);
    longer_dir[9 + 193 - 1] = 'b';
    longer_dir[9 + 193] = '\0';
    static const struct {
        const char *set, *phrase;
    } bad[] = {
        {"data.dir=/x ;y", "'/x ;y': a ';' after a blank starts a comment"},
        {"data.dir=/x\t;y", "a ';' after a blank starts a comment"},
        {"data.train_images=;x", "';x': a ';' first starts a comment"},
        {"data.dir=/x\ny", "a value cannot hold a line break"},
        {"data.dir=/x\ry", "a value cannot hold a line break"},
        {NULL, "value is too long for one line of a config file (193 characters, at most 192 for dir)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *one[] = {bad[i].set ? bad[i].set : longer_dir};
        CU_ASSERT_EQUAL(load_text(&c, MIN_TEXT, one, 1), CT_ECONFIG);
        expect_msg(bad[i].phrase);
    }
    /* What is allowed still round-trips: ';' inside a word, '#' after a
     * blank (not a comment in a value), the longest line. */
    const char *ok[] = {"data.dir=/x;y #z", long_dir};
    CU_ASSERT_EQUAL_FATAL(load_text(&c, MIN_TEXT, ok, 1), 0);
    CU_ASSERT_STRING_EQUAL(c.data.dir, "/x;y #z");
    check_round_trip(&c, text, sizeof text);
    CU_ASSERT_EQUAL_FATAL(load_text(&c, MIN_TEXT, ok + 1, 1), 0);
    CU_ASSERT_EQUAL(strlen(c.data.dir), 192);
    check_round_trip(&c, text, sizeof text);
}

/* The TSV listing: one line per key the resolved config writes, in the same
 * order, with that key's value, and kinds and ranges as the schema says. */
static void test_list(void)
{
    struct ct_config c;
    const char *sets[] = {"dist.threads=4"};
    CU_ASSERT_EQUAL_FATAL(load_named(&c, "fmnist-mlp.ini", FULL_TEXT, sets, 1), 0);
    char *written = NULL, *listed = NULL;
    size_t listed_len = 0;
    CU_ASSERT_EQUAL_FATAL(ct_config_text(&c, &written), 0);
    FILE *f = open_memstream(&listed, &listed_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_config_list(f, &c, 1), 0);
    fclose(f);

    char *save_l = NULL, *save_w = NULL;
    char *line = strtok_r(listed, "\n", &save_l);
    CU_ASSERT_STRING_EQUAL(line, "key\ttype\tallowed\tdefault\tkind\tvalue\thelp");
    char section[64] = "";
    int n_keys = 0;
    for (char *w = strtok_r(written, "\n", &save_w); w; w = strtok_r(NULL, "\n", &save_w)) {
        if (w[0] == '#')
            continue;
        if (w[0] == '[') {
            snprintf(section, sizeof section, "%.*s", (int)strcspn(w + 1, "]"), w + 1);
            continue;
        }
        char name[128], value[CT_CONFIG_PATH_MAX + 64];
        const int got = sscanf(w, "%127s = %[^\n]", name, value);
        CU_ASSERT_FATAL(got >= 1); /* an empty value (data.tokenizer's default): "name = " */
        if (got == 1)
            value[0] = '\0';
        line = strtok_r(NULL, "\n", &save_l);
        CU_ASSERT_PTR_NOT_NULL_FATAL(line);
        char *field[7] = {0};
        int n = 0;
        for (char *p = line; n < 7; n++) {
            field[n] = p;
            char *tab = strchr(p, '\t');
            if (!tab) {
                n++;
                break;
            }
            *tab = '\0';
            p = tab + 1;
        }
        CU_ASSERT_EQUAL_FATAL(n, 7);
        char want[256];
        snprintf(want, sizeof want, "%s.%s", section, name);
        CU_ASSERT_STRING_EQUAL(field[0], want);
        CU_ASSERT_STRING_EQUAL(field[5], value);
        CU_ASSERT(field[6][0] != '\0');
        CU_ASSERT(strcmp(field[4], "runtime") == 0 || strcmp(field[4], "experiment") == 0);
        if (strcmp(want, "train.max_steps") == 0 || strcmp(want, "dist.placement") == 0)
            CU_ASSERT_STRING_EQUAL(field[4], "runtime");
        if (strcmp(want, "model.name") == 0 || strcmp(want, "optim.lr") == 0)
            CU_ASSERT_STRING_EQUAL(field[4], "experiment");
        if (strcmp(want, "data.prefetch") == 0)
            CU_ASSERT_STRING_EQUAL(field[2], "0..64");
        if (strcmp(want, "train.eval_batch") == 0)
            CU_ASSERT_STRING_EQUAL(field[2], "1..1048576 or auto");
        if (strcmp(want, "train.eval_every") == 0)
            CU_ASSERT_STRING_EQUAL(field[2], ">= 1");
        if (strcmp(want, "optim.lr") == 0)
            CU_ASSERT_STRING_EQUAL(field[2], "(0, 100]");
        if (strcmp(want, "model.name") == 0)
            CU_ASSERT_PTR_NOT_NULL(strstr(field[2], "mlp|cnn"));
        if (strcmp(want, "dist.threads") == 0)
            CU_ASSERT_STRING_EQUAL(field[3], "auto");
        n_keys++;
    }
    CU_ASSERT(n_keys > 40);
    CU_ASSERT_PTR_NULL(strtok_r(NULL, "\n", &save_l)); /* no line beyond the written keys */
    free(written);
    free(listed);

    /* The human form marks the value that is not the default. */
    listed = NULL;
    f = open_memstream(&listed, &listed_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_config_list(f, &c, 0), 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(listed, "\n[dist]\n  threads "));
    CU_ASSERT_PTR_NOT_NULL(strstr(listed, "  *                 value 4\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(listed, "changes the experiment\n"));
    free(listed);
}

/* The data layer's keys: per-channel lists written back as given, an empty
 * labels key (cifar10), the format, layout and augmentation names. */
static void test_data_keys(void)
{
    struct ct_config c;
    const char *text = "[data]\ndir = /d\nformat = cifar10\nlayout = nhwc\ntrain_images = a.bin, b.bin\n"
                       "train_labels =\ntest_labels =\nmean = 0.4914,0.4822,0.4465\n"
                       "std = 0.247, 0.2435, 0.2616\naugment = crop_flip\ncrop_pad = 2\n"
                       "[model]\nname = mlp\n[optim]\nlr = 0.1\n[train]\nepochs = 1\nglobal_batch = 64\nseed = 0\nmax_steps = 0\n";
    int rc = load_text(&c, text, NULL, 0);
    if (rc)
        fprintf(stderr, "\n    %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_STRING_EQUAL(c.data.format, "cifar10");
    CU_ASSERT_STRING_EQUAL(c.data.layout, "nhwc");
    CU_ASSERT_STRING_EQUAL(c.data.train_labels, "");
    CU_ASSERT_EQUAL(c.data.n_mean, 3);
    CU_ASSERT_EQUAL(c.data.n_std, 3);
    CU_ASSERT_EQUAL(c.data.mean[2], 0.4465);
    CU_ASSERT_EQUAL(c.data.std[1], 0.2435);
    CU_ASSERT_STRING_EQUAL(c.data.augment, "crop_flip");
    CU_ASSERT_EQUAL(c.data.crop_pad, 2);
    /* The written config reads back as the same config. */
    char *written = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&written, &len);
    CU_ASSERT_EQUAL_FATAL(ct_config_write(&c, f), 0);
    fclose(f);
    struct ct_config back;
    CU_ASSERT_EQUAL(load_text(&back, written, NULL, 0), 0);
    CU_ASSERT_EQUAL(memcmp(&back.data, &c.data, sizeof c.data), 0);
    free(written);
    const char *bad[] = {"data.format=hdf5"};
    CU_ASSERT_EQUAL(load_text(&c, "[data]\ndir = /d\n[model]\nname = mlp\n[optim]\nlr = 0.1\n[train]\nepochs = 1\nglobal_batch = 64\nseed = 0\nmax_steps = 0\n", bad, 1),
                    CT_ECONFIG);
    expect_msg("data.format: unknown value 'hdf5' (expected one of: auto, idx, npy, cifar10, tokens)");
}

static const struct ct_test_case cases[] = {
    {"defaults", test_defaults},
    {"list", test_list},
    {"schedule_names", test_schedule_names},
    {"full_file", test_full_file},
    {"minimal_file_gets_defaults", test_minimal_file_gets_defaults},
    {"names", test_names},
    {"crlf_and_case_insensitive_words", test_crlf_and_case_insensitive_words},
    {"unknown_key", test_unknown_key},
    {"unknown_section", test_unknown_section},
    {"key_before_section", test_key_before_section},
    {"bad_integers", test_bad_integers},
    {"seed_is_unsigned_64", test_seed_is_unsigned_64},
    {"bad_doubles", test_bad_doubles},
    {"data keys: lists, empty labels, names", test_data_keys},
    {"bools", test_bools},
    {"enums_and_strings", test_enums_and_strings},
    {"recorded config with a model this program lacks", test_recorded_foreign_model},
    {"int_lists", test_int_lists},
    {"threads", test_threads},
    {"duplicate_key", test_duplicate_key},
    {"syntax_errors", test_syntax_errors},
    {"long_line", test_long_line},
    {"missing_required", test_missing_required},
    {"missing_file", test_missing_file},
    {"failure_leaves_cfg_alone", test_failure_leaves_cfg_alone},
    {"overrides", test_overrides},
    {"override_errors", test_override_errors},
    {"nesterov", test_nesterov},
    {"cosine_min_lr", test_cosine_min_lr},
    {"grad_compress: values, deterministic refusal, experiment keys", test_grad_compress},
    {"round_trip", test_round_trip},
    {"values_that_cannot_be_written", test_values_that_cannot_be_written},
    {NULL, NULL},
};

int main(void) { return ct_test_run("config", cases); }
