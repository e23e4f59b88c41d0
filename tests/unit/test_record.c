/* Unit tests for the run's JSON (src/run/json) and records (src/run/record):
 * the writer's exact text, escaping of every control character, doubles and
 * their nulls, nested containers, misuse; the reader's round trips and every
 * class of malformed input rejected with its offset; getters' messages;
 * run.json, metrics.jsonl and steps.jsonl written and read back (key names
 * and precision as the README and the e2e tests expect); log trimming.
 */
#include "core/error.h"
#include "core/path.h"
#include "ct_test.h"
#include "run/json.h"
#include "run/record.h"

#include <dirent.h>
#include <stdint.h>

static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static void expect_text(const char *got, const char *want)
{
    if (!got || strcmp(got, want) != 0)
        fprintf(stderr, "\n    got:  %s\n    want: %s\n", got ? got : "(null)", want);
    CU_ASSERT(got && strcmp(got, want) == 0);
}

/* Whole file into a static buffer ("" when absent). */
static const char *slurp(const char *path)
{
    static char buf[65536];
    buf[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

/* ================================================================ writer */

static void test_writer_text(void)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_kv_int(&w, "i", -42);
    ct_json_kv_int(&w, "big", INT64_MIN);
    ct_json_kv_bool(&w, "t", 1);
    ct_json_kv_bool(&w, "f", 0);
    ct_json_kv_null(&w, "n");
    ct_json_kv_string(&w, "s", "h\xc3\xa9llo \xe2\x82\xac"); /* UTF-8 passes through */
    ct_json_kv_string(&w, "null_s", NULL);
    ct_json_kv_double(&w, "g", 0.1, 9);
    ct_json_kv_double(&w, "g17", 0.1, 17);
    ct_json_kv_fixed(&w, "f4", 2.0 / 3.0, 4);
    ct_json_kv_fixed(&w, "nan", NAN, 4);
    ct_json_kv_double(&w, "inf", INFINITY, 6);
    ct_json_kv_double(&w, "minf", -INFINITY, 6);
    ct_json_kv_fixed(&w, "huge", 1e300, 1);
    ct_json_key(&w, "a");
    const double v[3] = {0.5, NAN, 1.25};
    ct_json_fixed_array(&w, v, 3, 2);
    ct_json_key(&w, "e");
    ct_json_int_array(&w, NULL, 0);
    ct_json_end_object(&w);
    CU_ASSERT_EQUAL_FATAL(ct_json_writer_status(&w), 0);
    char want[1024];
    snprintf(want, sizeof want,
             "{\"i\": -42, \"big\": -9223372036854775808, \"t\": true, \"f\": false, \"n\": null, "
             "\"s\": \"h\xc3\xa9llo \xe2\x82\xac\", \"null_s\": null, \"g\": 0.1, "
             "\"g17\": 0.10000000000000001, \"f4\": 0.6667, \"nan\": null, \"inf\": null, "
             "\"minf\": null, \"huge\": %.1f, \"a\": [0.50, null, 1.25], \"e\": []}",
             1e300);
    expect_text(w.buf, want);
    CU_ASSERT_EQUAL(w.len, strlen(want));

    /* Reset keeps the buffer for the next line. */
    ct_json_writer_reset(&w);
    ct_json_int(&w, 7);
    expect_text(w.buf, "7");
    ct_json_writer_free(&w);
}

static void test_writer_escapes_every_control(void)
{
    /* Every byte 0x00..0x1f, then quote, backslash, slash and DEL. */
    char in[36];
    for (int c = 0; c < 32; c++)
        in[c] = (char)c;
    in[32] = '"';
    in[33] = '\\';
    in[34] = '/';
    in[35] = 0x7f;
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_string_n(&w, in, sizeof in);
    CU_ASSERT_EQUAL_FATAL(ct_json_writer_status(&w), 0);
    char want[512];
    size_t k = 0;
    want[k++] = '"';
    for (int c = 0; c < 32; c++)
        k += (size_t)snprintf(want + k, sizeof want - k, "\\u%04x", c);
    k += (size_t)snprintf(want + k, sizeof want - k, "\\\"\\\\/\x7f\"");
    expect_text(w.buf, want);
    /* No raw control byte is left in the output. */
    for (size_t i = 0; i < w.len; i++)
        CU_ASSERT((unsigned char)w.buf[i] >= 0x20);

    /* And the reader gives back exactly the 36 bytes. */
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, w.buf, w.len, NULL), 0);
    CU_ASSERT_EQUAL(d.root->type, CT_JSON_STRING);
    CU_ASSERT_EQUAL(d.root->string_len, sizeof in);
    CU_ASSERT_EQUAL(memcmp(d.root->string, in, sizeof in), 0);
    ct_json_doc_free(&d);
    ct_json_writer_free(&w);

    /* Keys are escaped the same way. */
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_kv_int(&w, "a\"b\n", 1);
    ct_json_end_object(&w);
    expect_text(w.buf, "{\"a\\\"b\\u000a\": 1}");
    ct_json_writer_free(&w);
}

static void test_writer_nested_and_misuse(void)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_array(&w);
    ct_json_begin_array(&w);
    ct_json_int(&w, 1);
    ct_json_begin_array(&w);
    ct_json_int(&w, 2);
    ct_json_begin_array(&w);
    ct_json_end_array(&w);
    ct_json_end_array(&w);
    ct_json_end_array(&w);
    ct_json_begin_object(&w);
    ct_json_key(&w, "k");
    ct_json_begin_object(&w);
    ct_json_end_object(&w);
    ct_json_end_object(&w);
    ct_json_end_array(&w);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), 0);
    expect_text(w.buf, "[[1, [2, []]], {\"k\": {}}]");
    ct_json_writer_free(&w);

    /* A value inside an object without its key. */
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_int(&w, 1);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_writer_free(&w);
    /* A key inside an array. */
    ct_json_writer_init(&w);
    ct_json_begin_array(&w);
    ct_json_key(&w, "k");
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_writer_free(&w);
    /* Mismatched and missing ends; a dangling key. */
    ct_json_writer_init(&w);
    ct_json_begin_array(&w);
    ct_json_end_object(&w);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_writer_free(&w);
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_key(&w, "k");
    ct_json_end_object(&w);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_writer_free(&w);
    /* Two top-level values. */
    ct_json_writer_init(&w);
    ct_json_int(&w, 1);
    ct_json_int(&w, 2);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ESTATE);
    ct_json_writer_free(&w);
    /* Deeper than the writer tracks. */
    ct_json_writer_init(&w);
    for (int i = 0; i <= CT_JSON_WRITER_MAX_DEPTH; i++)
        ct_json_begin_array(&w);
    CU_ASSERT_EQUAL(ct_json_writer_status(&w), CT_ERANGE);
    ct_json_writer_free(&w);
}

/* ================================================================ reader */

static void test_reader_values(void)
{
    const char *text = " {\"i\": -12, \"max\": 9223372036854775807, \"over\": 9223372036854775808,"
                       " \"d\": 1.5e-3, \"neg0\": -0, \"s\": \"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9"
                       "\\ud83d\\ude00\", \"arr\": [1, [2, [3, []]], {}], \"t\": true, \"f\": false,"
                       " \"n\": null, \"\": \"empty key\"} \n";
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, text, strlen(text), NULL), 0);
    const struct ct_json_value *o = d.root;
    CU_ASSERT_EQUAL(o->type, CT_JSON_OBJECT);
    CU_ASSERT_EQUAL(o->n, 11);
    int64_t i;
    CU_ASSERT_EQUAL(ct_json_get_int64(o, "i", &i), 0);
    CU_ASSERT_EQUAL(i, -12);
    CU_ASSERT_EQUAL(ct_json_get_int64(o, "max", &i), 0);
    CU_ASSERT_EQUAL(i, INT64_MAX);
    /* Beyond int64: still a number, but not an integer. */
    const struct ct_json_value *over = ct_json_get(o, "over");
    CU_ASSERT_EQUAL(over->type, CT_JSON_NUMBER);
    CU_ASSERT_FALSE(over->is_int);
    CU_ASSERT_DOUBLE_EQUAL(over->number, 9223372036854775808.0, 1.0);
    CU_ASSERT_EQUAL(ct_json_get_int64(o, "over", &i), CT_EFORMAT);
    double x;
    CU_ASSERT_EQUAL(ct_json_get_double(o, "d", &x), 0);
    CU_ASSERT_EQUAL(x, 1.5e-3);
    CU_ASSERT_EQUAL(ct_json_get_double(o, "i", &x), 0); /* an integer is a number too */
    CU_ASSERT_EQUAL(x, -12.0);
    CU_ASSERT_EQUAL(ct_json_get_double(o, "n", &x), 0); /* null reads as NaN */
    CU_ASSERT(isnan(x));
    const char *s;
    CU_ASSERT_EQUAL(ct_json_get_string(o, "s", &s), 0);
    expect_text(s, "a\"b\\c/\b\f\n\r\t\xc3\xa9\xf0\x9f\x98\x80");
    CU_ASSERT_EQUAL(ct_json_get_string(o, "", &s), 0);
    expect_text(s, "empty key");
    int b;
    CU_ASSERT_EQUAL(ct_json_get_bool(o, "t", &b), 0);
    CU_ASSERT_EQUAL(b, 1);
    CU_ASSERT_EQUAL(ct_json_get_bool(o, "f", &b), 0);
    CU_ASSERT_EQUAL(b, 0);
    /* Nested arrays by index. */
    const struct ct_json_value *arr = ct_json_get(o, "arr");
    CU_ASSERT_EQUAL(arr->n, 3);
    const struct ct_json_value *deep = ct_json_at(ct_json_at(ct_json_at(arr, 1), 1), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(deep);
    CU_ASSERT_EQUAL(ct_json_as_int64(deep, &i), 0);
    CU_ASSERT_EQUAL(i, 3);
    CU_ASSERT_EQUAL(ct_json_at(ct_json_at(ct_json_at(arr, 1), 1), 1)->n, 0);
    CU_ASSERT_EQUAL(ct_json_at(arr, 2)->type, CT_JSON_OBJECT);
    CU_ASSERT_PTR_NULL(ct_json_at(arr, 3));
    CU_ASSERT_PTR_NULL(ct_json_at(o, 0)); /* not an array */
    ct_json_doc_free(&d);
}

static void test_reader_getter_errors(void)
{
    const char *text = "{\"step\": \"ten\", \"x\": 1.5, \"big\": 3000000000}";
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, text, strlen(text), NULL), 0);
    int64_t i;
    int n;
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_json_get_int64(d.root, "epoch", &i), CT_ENOENT);
    expect_msg("missing key \"epoch\"");
    CU_ASSERT_EQUAL(ct_json_get_int64(d.root, "step", &i), CT_EFORMAT);
    expect_msg("offset 9: key \"step\": expected an integer, found a string");
    CU_ASSERT_EQUAL(ct_json_get_int64(d.root, "x", &i), CT_EFORMAT);
    expect_msg("key \"x\": expected an integer, found a number with a fraction");
    CU_ASSERT_EQUAL(ct_json_get_int(d.root, "big", &n), CT_ERANGE);
    expect_msg("key \"big\": 3000000000 does not fit an int");
    const char *s;
    CU_ASSERT_EQUAL(ct_json_get_string(d.root, "x", &s), CT_EFORMAT);
    expect_msg("expected a string, found a number");
    CU_ASSERT_EQUAL(ct_json_get_int64(ct_json_get(d.root, "x"), "k", &i), CT_EFORMAT);
    expect_msg("expected an object holding key \"k\", found number");
    ct_json_doc_free(&d);
}

struct bad_case {
    const char *text;
    const char *msg; /* a part of the message, with the offset */
};

static void test_reader_malformed(void)
{
    static const struct bad_case cases[] = {
        {"", "offset 0: expected a value, found end of input"},
        {"   ", "offset 3: expected a value, found end of input"},
        {"{", "offset 1: expected a string key, found end of input"},
        {"{\"a\": 1", "offset 7: expected ',' or '}', found end of input"},
        {"{\"a\" 1}", "offset 5: expected ':' after the key, found '1'"},
        {"{\"a\": 1,}", "offset 8: expected a string key, found '}'"},
        {"{a: 1}", "offset 1: expected a string key, found 'a'"},
        {"[1,]", "offset 3: expected a value"},
        {"[1 2]", "offset 3: expected ',' or ']', found '2'"},
        {"[1, 2", "offset 5: expected ',' or ']', found end of input"},
        {"{\"step\": 1} x", "offset 12: expected the end of the input after the value, found 'x'"},
        {"{} {}", "offset 3: expected the end of the input"},
        {"1 2", "offset 2: expected the end of the input"},
        {"01", "offset 1: expected the end of the input"},
        {"1.", "offset 2: expected a digit after the decimal point"},
        {"-", "offset 1: expected a digit, found end of input"},
        {"+1", "offset 0: expected a value"},
        {"1e", "offset 2: expected a digit in the exponent"},
        {".5", "offset 0: expected a value"},
        {"1e999", "offset 0: number 1e999 is beyond the range of a double"},
        {"NaN", "offset 0: expected a value"},
        {"tru", "offset 0: expected a value"},
        {"nul", "offset 0: expected a value"},
        {"\"abc", "offset 4: unterminated string (opened at offset 0)"},
        {"[\"a\\x\"]", "offset 3: invalid escape '\\x'"},
        {"\"\\", "offset 2: expected an escape after '\\', found end of input"},
        {"\"\\u12\"", "offset 5: expected four hex digits after \\u, found '\"'"},
        {"\"\\u12g4\"", "offset 5: expected four hex digits after \\u, found 'g'"},
        {"\"\\ud800\"", "offset 1: \\ud800 is a high surrogate not followed by a low surrogate"},
        {"\"\\ud800\\u0041\"", "offset 1: \\ud800 is a high surrogate not followed"},
        {"\"\\udc00\"", "offset 1: \\udc00 is a low surrogate without a high surrogate"},
        {"\"a\tb\"", "offset 2: control character 0x09 inside a string"},
        {"\"a\nb\"", "offset 2: control character 0x0a inside a string"},
        {"{\"a\": 1, \"a\": 2}", "offset 9: duplicate key \"a\""},
        {"[1]\x01", "offset 3: expected the end of the input after the value, found byte 0x01"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        struct ct_json_doc d;
        ct_error_clear();
        int rc = ct_json_parse(&d, cases[k].text, strlen(cases[k].text), NULL);
        if (rc != CT_EFORMAT)
            fprintf(stderr, "\n    input %zu <%s>: rc %d\n", k, cases[k].text, rc);
        CU_ASSERT_EQUAL(rc, CT_EFORMAT);
        CU_ASSERT_PTR_NULL(d.root);
        expect_msg(cases[k].msg);
        ct_json_doc_free(&d); /* harmless on a failed parse */
    }
    /* A NUL byte inside the given length is not the end of the text. */
    struct ct_json_doc d;
    CU_ASSERT_EQUAL(ct_json_parse(&d, "[1]\0", 4, NULL), CT_EFORMAT);
    expect_msg("offset 3: expected the end of the input after the value, found byte 0x00");
}

static void test_reader_limits(void)
{
    /* Nesting: exactly max_depth levels parse, one more is refused. */
    struct ct_json_parse_params pp = ct_json_parse_default_params();
    CU_ASSERT_EQUAL(pp.max_depth, 32);
    char text[256];
    for (int depth = 32; depth <= 33; depth++) {
        size_t k = 0;
        for (int i = 0; i < depth; i++)
            text[k++] = '[';
        for (int i = 0; i < depth; i++)
            text[k++] = ']';
        struct ct_json_doc d;
        ct_error_clear();
        int rc = ct_json_parse(&d, text, k, NULL);
        CU_ASSERT_EQUAL(rc, depth <= 32 ? 0 : CT_EFORMAT);
        if (depth > 32)
            expect_msg("offset 32: nesting deeper than 32 levels");
        ct_json_doc_free(&d);
    }
    /* Objects count as levels too. */
    const char *objs = "{\"a\": {\"b\": {\"c\": 1}}}";
    pp.max_depth = 2;
    struct ct_json_doc d;
    CU_ASSERT_EQUAL(ct_json_parse(&d, objs, strlen(objs), &pp), CT_EFORMAT);
    expect_msg("offset 12: nesting deeper than 2 levels");
    pp.max_depth = 3;
    CU_ASSERT_EQUAL(ct_json_parse(&d, objs, strlen(objs), &pp), 0);
    ct_json_doc_free(&d);
    /* Size: refused before parsing. */
    pp.max_bytes = 10;
    CU_ASSERT_EQUAL(ct_json_parse(&d, objs, strlen(objs), &pp), CT_ERANGE);
    expect_msg("22 bytes exceeds the limit of 10 bytes");
    pp = ct_json_parse_default_params();
    pp.max_depth = 0;
    CU_ASSERT_EQUAL(ct_json_parse(&d, "1", 1, &pp), CT_EINVAL);
    /* A large array (the arena grows beyond one block). */
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_array(&w);
    for (int i = 0; i < 5000; i++)
        ct_json_int(&w, i);
    ct_json_end_array(&w);
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, w.buf, w.len, NULL), 0);
    CU_ASSERT_EQUAL(d.root->n, 5000);
    int64_t last;
    CU_ASSERT_EQUAL(ct_json_as_int64(ct_json_at(d.root, 4999), &last), 0);
    CU_ASSERT_EQUAL(last, 4999);
    ct_json_doc_free(&d);
    ct_json_writer_free(&w);
}

static void test_round_trip(void)
{
    /* Doubles at 17 digits come back bit for bit; strings byte for byte. */
    const double vals[] = {0.0, -0.0, 1.0 / 3.0, 1e-300, 6.02214076e23, -123456.789, 5e-324};
    const char *strs[] = {"", "plain", "tab\there", "quote\"back\\slash", "\xe6\x97\xa5\xe6\x9c\xac",
                          "\x1f\x01end"};
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_key(&w, "d");
    ct_json_double_array(&w, vals, sizeof vals / sizeof *vals, 17);
    ct_json_key(&w, "s");
    ct_json_begin_array(&w);
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        ct_json_string(&w, strs[i]);
    ct_json_end_array(&w);
    ct_json_key(&w, "i");
    const int64_t ints[] = {INT64_MIN, -1, 0, INT64_MAX};
    ct_json_int_array(&w, ints, 4);
    ct_json_end_object(&w);
    CU_ASSERT_EQUAL_FATAL(ct_json_writer_status(&w), 0);
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, w.buf, w.len, NULL), 0);
    const struct ct_json_value *a = ct_json_get(d.root, "d");
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        double x = NAN;
        CU_ASSERT_EQUAL(ct_json_as_double(ct_json_at(a, i), &x), 0);
        CU_ASSERT_EQUAL(memcmp(&x, &vals[i], sizeof x), 0);
    }
    a = ct_json_get(d.root, "s");
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        const char *s = NULL;
        CU_ASSERT_EQUAL(ct_json_as_string(ct_json_at(a, i), &s), 0);
        expect_text(s, strs[i]);
    }
    a = ct_json_get(d.root, "i");
    for (size_t i = 0; i < 4; i++) {
        int64_t x = 0;
        CU_ASSERT_EQUAL(ct_json_as_int64(ct_json_at(a, i), &x), 0);
        CU_ASSERT_EQUAL(x, ints[i]);
    }
    ct_json_doc_free(&d);
    ct_json_writer_free(&w);
}

/* ================================================================ run.json */

static void test_run_record(void)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/run.json", dir);
    const struct ct_run_extra extra[] = {{"mpi", "Open MPI v4.1.4"}, {"note", "a \"quoted\"\nline"}};
    struct ct_run_record r = {
        .version = "0.1.0", .git = "c777258-dirty", .config = "configs/my \"odd\"\\dir/x.ini",
        .world = 4, .blas_threads = 2, .blas = "OpenBLAS 0.3.21 Haswell", .gemm = "avx512",
        .host0 = "node-01", .params = 5000000000LL, .steps_per_epoch = 234, .total_steps = 1170,
        .extra = extra, .n_extra = 2,
    };
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &r), 0);
    CU_ASSERT_EQUAL(count_entries(dir), 1); /* no temporary left */
    const char *text = slurp(path);
    CU_ASSERT_EQUAL(strncmp(text, "{\"version\": \"0.1.0\", \"git\": \"c777258-dirty\", \"config\": "
                                  "\"configs/my \\\"odd\\\"\\\\dir/x.ini\", \"world\": 4, ",
                        strlen("{\"version\": \"0.1.0\", \"git\": \"c777258-dirty\", \"config\": "
                               "\"configs/my \\\"odd\\\"\\\\dir/x.ini\", \"world\": 4, ")),
                    0);
    CU_ASSERT(text[strlen(text) - 1] == '\n');

    struct ct_run_record back;
    CU_ASSERT_EQUAL_FATAL(ct_run_record_read(path, &back), 0);
    expect_text(back.version, r.version);
    expect_text(back.git, r.git);
    expect_text(back.config, r.config);
    expect_text(back.blas, r.blas);
    expect_text(back.gemm, r.gemm);
    expect_text(back.host0, r.host0);
    CU_ASSERT_EQUAL(back.world, 4);
    CU_ASSERT_EQUAL(back.blas_threads, 2);
    CU_ASSERT_EQUAL(back.params, 5000000000LL);
    CU_ASSERT_EQUAL(back.steps_per_epoch, 234);
    CU_ASSERT_EQUAL(back.total_steps, 1170);
    CU_ASSERT_EQUAL_FATAL(back.n_extra, 2);
    expect_text(back.extra[0].key, "mpi");
    expect_text(back.extra[1].value, "a \"quoted\"\nline");
    ct_run_record_free(&back);

    /* NULL strings: null, read back as NULL. Rewriting replaces the file. */
    r.host0 = NULL;
    r.n_extra = 0;
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &r), 0);
    CU_ASSERT_EQUAL_FATAL(ct_run_record_read(path, &back), 0);
    CU_ASSERT_PTR_NULL(back.host0);
    CU_ASSERT_EQUAL(back.n_extra, 0);
    ct_run_record_free(&back);

    /* An extra key that repeats a fixed one, or another extra. */
    const struct ct_run_extra dup[] = {{"world", "8"}};
    r.extra = dup;
    r.n_extra = 1;
    CU_ASSERT_EQUAL(ct_run_record_write(dir, &r), CT_EINVAL);
    const struct ct_run_extra dup2[] = {{"a", "1"}, {"a", "2"}};
    r.extra = dup2;
    r.n_extra = 2;
    CU_ASSERT_EQUAL(ct_run_record_write(dir, &r), CT_EINVAL);
    expect_msg("extra key \"a\" given twice");

    /* Reading: a missing key, a malformed file, a missing file. */
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, "{\"version\": \"x\"}\n", 17), 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_run_record_read(path, &back), CT_ENOENT);
    char want[600];
    snprintf(want, sizeof want, "%s: missing key \"git\"", path);
    expect_msg(want);
    CU_ASSERT_PTR_NULL(back.owned);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, "{\"version\": 1,", 14), 0);
    CU_ASSERT_EQUAL(ct_run_record_read(path, &back), CT_EFORMAT);
    snprintf(want, sizeof want, "%s: offset 14: expected a string key, found end of input", path);
    expect_msg(want);
    snprintf(path, sizeof path, "%s/none.json", dir);
    CU_ASSERT_EQUAL(ct_run_record_read(path, &back), CT_ENOENT);
    expect_msg(path);
    /* Writing into a path under a regular file fails with the path. */
    snprintf(path, sizeof path, "%s/run.json/sub", dir);
    CU_ASSERT_EQUAL(ct_run_record_write(path, &r), CT_EINVAL); /* dup2 still set */
    r.n_extra = 0;
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_run_record_write(path, &r), CT_EIO);
    expect_msg(path);
    ct_test_rmtree(dir);
}

/* ================================================================ metrics.jsonl */

static struct ct_epoch_record sample_epoch(const double *wait, const double *fb, const double *comm,
                                           const double *opt)
{
    struct ct_epoch_record r = {
        .epoch = 1, .step = 234, .partial = 0, .train_loss = 0.5, .train_acc = 0.83125, .test_loss = NAN,
        .test_acc = NAN, .samples_per_s = 12345.67, .epoch_s = 4.5, .eval_s = 0.0, .lr = 0.1,
        .peak_rss_mib = 321.04, .pss_mib = 123.44, .optim_state_bytes = 1884160, .world = 3,
        .data_wait_s = wait,
        .forward_backward_s = fb,
        .exposed_comm_s = comm, .optim_s = opt, .slowest_rank = 2,
    };
    memset(r.param_sha256, 'a', 64);
    r.param_sha256[64] = '\0';
    return r;
}

static void test_metrics(void)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    const double wait[3] = {0.1, 0.2, 0.05}, fb[3] = {3.0, 3.1, 3.3}, comm[3] = {0.4, 0.3, 0.0},
                 opt[3] = {0.01, 0.01, 0.02};
    struct ct_epoch_record r = sample_epoch(wait, fb, comm, opt);
    /* Rank 2 works longest (3.37 s; rank 0's 0.4 s of waiting for the others
     * does not count). */
    CU_ASSERT_EQUAL(ct_epoch_record_slowest_rank(&r), 2);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_metrics_append(f, path, &r), 0);
    /* Second line: evaluated, partial, no phase split measured. */
    r.epoch = 2;
    r.step = 300;
    r.partial = 1;
    r.test_loss = 0.4567891;
    r.test_acc = 0.88125;
    r.data_wait_s = r.forward_backward_s = r.exposed_comm_s = r.optim_s = NULL;
    r.slowest_rank = -1;
    r.pss_mib = NAN;
    r.optim_state_bytes = -1;
    r.nonfinite_skipped = 2;
    r.nonfinite_skipped_total = 5;
    CU_ASSERT_EQUAL(ct_metrics_append(f, path, &r), 0);
    fclose(f);

    /* The exact text: key names and precision the README and e2e tests use. */
    const char *want =
        "{\"epoch\": 1, \"step\": 234, \"partial\": false, \"train_loss\": 0.500000, "
        "\"train_acc\": 0.8313, \"test_loss\": null, \"test_acc\": null, \"samples_per_s\": 12345.7, \"epoch_s\": 4.5000, "
        "\"eval_s\": 0.0000, \"lr\": 0.1, \"peak_rss_mib\": 321.0, \"pss_mib\": 123.4, "
        "\"optim_state_bytes\": 1884160, \"world\": 3, "
        "\"data_wait_s\": [0.1000, 0.2000, 0.0500], \"data_wait_s_max\": 0.2000, "
        "\"forward_backward_s\": [3.0000, 3.1000, 3.3000], \"forward_backward_s_max\": 3.3000, "
        "\"exposed_comm_s\": [0.4000, 0.3000, 0.0000], \"exposed_comm_s_max\": 0.4000, "
        "\"optim_s\": [0.0100, 0.0100, 0.0200], \"optim_s_max\": 0.0200, \"slowest_rank\": 2, "
        "\"nonfinite_skipped\": 0, \"nonfinite_skipped_total\": 0, "
        "\"param_sha256\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n"
        "{\"epoch\": 2, \"step\": 300, \"partial\": true, \"train_loss\": 0.500000, "
        "\"train_acc\": 0.8313, \"test_loss\": 0.456789, \"test_acc\": 0.8812, \"samples_per_s\": 12345.7, "
        "\"epoch_s\": 4.5000, \"eval_s\": 0.0000, \"lr\": 0.1, \"peak_rss_mib\": 321.0, "
        "\"pss_mib\": null, \"optim_state_bytes\": null, \"world\": 3, \"data_wait_s\": null, "
        "\"data_wait_s_max\": null, "
        "\"forward_backward_s\": null, \"forward_backward_s_max\": null, "
        "\"exposed_comm_s\": null, \"exposed_comm_s_max\": null, \"optim_s\": null, "
        "\"optim_s_max\": null, \"slowest_rank\": null, "
        "\"nonfinite_skipped\": 2, \"nonfinite_skipped_total\": 5, "
        "\"param_sha256\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}\n";
    expect_text(slurp(path), want);

    /* Read both lines back. */
    char line1[2048];
    const char *nl = strchr(want, '\n');
    memcpy(line1, want, (size_t)(nl - want + 1));
    line1[nl - want + 1] = '\0';
    struct ct_epoch_record b;
    CU_ASSERT_EQUAL_FATAL(ct_epoch_record_parse(line1, &b), 0);
    CU_ASSERT_EQUAL(b.epoch, 1);
    CU_ASSERT_EQUAL(b.step, 234);
    CU_ASSERT_EQUAL(b.partial, 0);
    CU_ASSERT(isnan(b.test_loss) && isnan(b.test_acc));
    CU_ASSERT_DOUBLE_EQUAL(b.train_acc, 0.8313, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(b.samples_per_s, 12345.7, 1e-9);
    CU_ASSERT_EQUAL(b.world, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.forward_backward_s);
    CU_ASSERT_EQUAL(b.forward_backward_s[2], 3.3);
    CU_ASSERT_EQUAL(b.exposed_comm_s[0], 0.4);
    CU_ASSERT_EQUAL(b.slowest_rank, 2);
    CU_ASSERT_EQUAL(b.optim_state_bytes, 1884160);
    CU_ASSERT_EQUAL(ct_epoch_record_slowest_rank(&b), 2);
    CU_ASSERT_EQUAL(strlen(b.param_sha256), 64);
    ct_epoch_record_free(&b);
    CU_ASSERT_EQUAL_FATAL(ct_epoch_record_parse(nl + 1, &b), 0);
    CU_ASSERT_EQUAL(b.partial, 1);
    CU_ASSERT_DOUBLE_EQUAL(b.test_acc, 0.8812, 1e-12);
    CU_ASSERT_PTR_NULL(b.data_wait_s);
    CU_ASSERT_EQUAL(b.slowest_rank, -1);
    CU_ASSERT_EQUAL(ct_epoch_record_slowest_rank(&b), -1);
    CU_ASSERT_EQUAL(b.nonfinite_skipped, 2);
    CU_ASSERT_EQUAL(b.nonfinite_skipped_total, 5);
    CU_ASSERT_EQUAL(b.optim_state_bytes, -1);
    ct_epoch_record_free(&b);

    /* A line written before the per-rank phases existed still reads. */
    const char *old = "{\"epoch\": 1, \"step\": 234, \"partial\": false, \"train_loss\": 0.621000, "
                      "\"test_loss\": 0.500000, \"test_acc\": 0.8100, \"samples_per_s\": 900.0, "
                      "\"epoch_s\": 1.0000, \"eval_s\": 0.1000, \"lr\": 0.1, \"peak_rss_mib\": 90.0, "
                      "\"world\": 2, \"data_s\": 0.1000, \"compute_s\": 0.5000, \"allreduce_s\": "
                      "0.1000, \"optim_s\": 0.0100, \"param_sha256\": \"00\"}";
    /* ...except that its scalar "optim_s" is not a per-rank array: */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_epoch_record_parse(old, &b), CT_EFORMAT);
    expect_msg("key \"optim_s\": expected an array of 2 numbers (one per rank), found number");
    char older[1024];
    snprintf(older, sizeof older, "%.*s\"param_sha256\": \"00\"}",
             (int)(strstr(old, "\"data_s\"") - old), old);
    CU_ASSERT_EQUAL(ct_epoch_record_parse(older, &b), 0);
    CU_ASSERT_PTR_NULL(b.optim_s);
    CU_ASSERT_EQUAL(b.test_acc, 0.81);
    CU_ASSERT(isnan(b.train_acc));           /* written before train_acc */
    CU_ASSERT_EQUAL(b.nonfinite_skipped, 0); /* written before train.on_nonfinite */
    CU_ASSERT_EQUAL(b.nonfinite_skipped_total, 0);
    ct_epoch_record_free(&b);

    /* Missing keys, wrong lengths, malformed lines. */
    CU_ASSERT_EQUAL(ct_epoch_record_parse("{\"epoch\": 1}", &b), CT_ENOENT);
    expect_msg("missing key \"step\"");
    char shortarr[2048];
    snprintf(shortarr, sizeof shortarr, "%s", line1);
    char *p = strstr(shortarr, "[0.1000, 0.2000, 0.0500]");
    memcpy(p, "[0.1000, 0.2000]        ", 24);
    CU_ASSERT_EQUAL(ct_epoch_record_parse(shortarr, &b), CT_EFORMAT);
    expect_msg("key \"data_wait_s\": expected an array of 3 numbers (one per rank), found array of 2");
    CU_ASSERT_EQUAL(ct_epoch_record_parse("{\"epoch\": 1, ", &b), CT_EFORMAT);
    expect_msg("offset 13: expected a string key");
    CU_ASSERT_PTR_NULL(b.owned);

    /* A write error names the path (/dev/full: every write fails). */
    f = fopen("/dev/full", "w");
    if (f) {
        r = sample_epoch(wait, fb, comm, opt);
        ct_error_clear();
        CU_ASSERT_EQUAL(ct_metrics_append(f, "/dev/full", &r), CT_EIO);
        expect_msg("/dev/full: write failed: No space left on device");
        fclose(f);
    }
    ct_test_rmtree(dir);
}

/* MFU: run.json's four keys and metrics' four, written when set, read back;
 * absent (older files), read as unknown. */
static void test_mfu_keys(void)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/run.json", dir);
    struct ct_run_record r = {
        .version = "0.1.0", .world = 2, .blas_threads = 1, .params = 10, .steps_per_epoch = 3,
        .total_steps = 6, .flops_per_sample = 24995328, .peak_gflops = 222.474,
        .peak_source = "probe", .peak_kernel = "ctrain-avx512 384x384x384, 1 thread",
    };
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &r), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(slurp(path), "\"total_steps\": 6, \"flops_per_sample\": 24995328, "
                                               "\"peak_gflops\": 222.47, \"peak_source\": \"probe\", "
                                               "\"peak_kernel\": \"ctrain-avx512 384x384x384, 1 thread\"}"));
    struct ct_run_record back;
    CU_ASSERT_EQUAL_FATAL(ct_run_record_read(path, &back), 0);
    CU_ASSERT_EQUAL(back.flops_per_sample, 24995328);
    CU_ASSERT_DOUBLE_EQUAL(back.peak_gflops, 222.47, 1e-9);
    expect_text(back.peak_source, "probe");
    expect_text(back.peak_kernel, r.peak_kernel);
    CU_ASSERT_EQUAL(back.n_extra, 0); /* fixed keys, not extras */
    ct_run_record_free(&back);
    r.peak_source = NULL; /* no MFU terms: none written, read as unknown */
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &r), 0);
    CU_ASSERT_PTR_NULL(strstr(slurp(path), "peak"));
    CU_ASSERT_EQUAL_FATAL(ct_run_record_read(path, &back), 0);
    CU_ASSERT_EQUAL(back.flops_per_sample, 0);
    CU_ASSERT(isnan(back.peak_gflops));
    CU_ASSERT_PTR_NULL(back.peak_source);
    CU_ASSERT_PTR_NULL(back.peak_kernel);
    ct_run_record_free(&back);

    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    const double wait[3] = {0.1, 0.2, 0.05}, fb[3] = {3.0, 3.1, 3.3}, comm[3] = {0.4, 0.3, 0.0},
                 opt[3] = {0.01, 0.01, 0.02}, achieved[3] = {120.123, 119.5, 110.0};
    struct ct_epoch_record e = sample_epoch(wait, fb, comm, opt);
    e.flops_per_sample = 24995328;
    e.achieved_gflops = achieved;
    e.peak_gflops = 222.474;
    e.mfu = 349.623 / (3 * 222.474);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_metrics_append(f, path, &e), 0);
    fclose(f);
    const char *text = slurp(path);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"nonfinite_skipped_total\": 0, \"flops_per_sample\": 24995328, "
                                        "\"achieved_gflops\": [120.12, 119.50, 110.00], "
                                        "\"peak_gflops\": 222.47, \"mfu\": 0.5238, \"param_sha256\""));
    struct ct_epoch_record b;
    CU_ASSERT_EQUAL_FATAL(ct_epoch_record_parse(text, &b), 0);
    CU_ASSERT_EQUAL(b.flops_per_sample, 24995328);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.achieved_gflops);
    CU_ASSERT_EQUAL(b.achieved_gflops[1], 119.5);
    CU_ASSERT_EQUAL(b.forward_backward_s[2], 3.3); /* the phases' storage is apart */
    CU_ASSERT_EQUAL(b.peak_gflops, 222.47);
    CU_ASSERT_EQUAL(b.mfu, 0.5238);
    ct_epoch_record_free(&b);
    /* Without them (flops_per_sample 0): no MFU keys; read as unknown. */
    e.flops_per_sample = 0;
    f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct_metrics_append(f, path, &e), 0);
    fclose(f);
    text = slurp(path);
    CU_ASSERT_PTR_NULL(strstr(text, "gflops"));
    CU_ASSERT_EQUAL_FATAL(ct_epoch_record_parse(text, &b), 0);
    CU_ASSERT_EQUAL(b.flops_per_sample, 0);
    CU_ASSERT_PTR_NULL(b.achieved_gflops);
    CU_ASSERT(isnan(b.peak_gflops) && isnan(b.mfu));
    ct_epoch_record_free(&b);
    /* A wrong-length achieved_gflops is refused, naming the key. */
    char bad[4096];
    snprintf(bad, sizeof bad, "%.*s, \"achieved_gflops\": [1.0]}", (int)(strrchr(text, '}') - text), text);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_epoch_record_parse(bad, &b), CT_EFORMAT);
    expect_msg("key \"achieved_gflops\": expected an array of 3 numbers (one per rank), found array of 1");
    ct_test_rmtree(dir);
}

/* ================================================================ steps.jsonl */

static void test_steps(void)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/steps.jsonl", dir);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const struct ct_step_record w[] = {{10, 2.302585093, 0.5, 0.1, 0},
                                       {20, 1.0 / 3.0, 1.0 / 3.0, 0.0999999, 0},
                                       {30, NAN, NAN, 1e-5, 0},
                                       {40, 1.5, 0.25, 3e-3, 123456.78}};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(ct_steps_append(f, path, &w[i]), 0);
    fclose(f);
    expect_text(slurp(path), "{\"step\": 10, \"loss\": 2.30258509, \"acc\": 0.500000, \"lr\": 0.1}\n"
                             "{\"step\": 20, \"loss\": 0.333333333, \"acc\": 0.333333, \"lr\": 0.0999999}\n"
                             "{\"step\": 30, \"loss\": null, \"acc\": null, \"lr\": 1e-05}\n"
                             "{\"step\": 40, \"loss\": 1.5, \"acc\": 0.250000, \"lr\": 0.003, "
                             "\"tokens_per_s\": 123456.8}\n");
    struct ct_step_record s;
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 20, \"loss\": 0.333333333, \"acc\": 0.333333, "
                                         "\"lr\": 0.0999999}\n", &s), 0);
    CU_ASSERT_EQUAL(s.step, 20);
    CU_ASSERT_EQUAL(s.loss, 0.333333333);
    CU_ASSERT_EQUAL(s.acc, 0.333333);
    CU_ASSERT_EQUAL(s.lr, 0.0999999);
    CU_ASSERT_EQUAL(s.tokens_per_s, 0.0); /* image data: no key */
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 40, \"loss\": 1.5, \"acc\": 0.250000, "
                                         "\"lr\": 0.003, \"tokens_per_s\": 123456.8}", &s), 0);
    CU_ASSERT(s.step == 40 && s.lr == 0.003 && s.tokens_per_s == 123456.8);
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 40, \"loss\": 1.5, \"lr\": 0.003, "
                                         "\"tokens_per_s\": \"fast\"}", &s), CT_EFORMAT);
    /* A line written before "acc" existed: NaN. */
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 20, \"loss\": 0.5, \"lr\": 0.1}", &s), 0);
    CU_ASSERT(isnan(s.acc) && s.lr == 0.1);
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 30, \"loss\": null, \"lr\": 1e-05}", &s), 0);
    CU_ASSERT(isnan(s.loss));
    CU_ASSERT_EQUAL(ct_step_record_parse("{\"step\": 1.5, \"loss\": 1, \"lr\": 1}", &s), CT_EFORMAT);
    ct_test_rmtree(dir);
}

/* ================================================================ trimming */

static void test_log_trim(void)
{
    char dir[256], path[512], want[600];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/steps.jsonl", dir);
    /* Missing: nothing to do, nothing created. */
    CU_ASSERT_EQUAL(ct_log_trim(path, 10), 0);
    CU_ASSERT_EQUAL(count_entries(dir), 0);

    /* Keeps step <= max, byte for byte, whatever the key order or spacing. */
    const char *text = "{\"step\": 1, \"loss\": 1}\n"
                       "{\"loss\": 2, \"step\":2}\n"
                       "  {\"step\": 3, \"note\": \"\\\"step\\\": 99\"}  \n"
                       "{\"step\": 4}\n"
                       "{\"step\": 10}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, text, strlen(text)), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 3), 0);
    expect_text(slurp(path), "{\"step\": 1, \"loss\": 1}\n"
                             "{\"loss\": 2, \"step\":2}\n"
                             "  {\"step\": 3, \"note\": \"\\\"step\\\": 99\"}  \n");
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    CU_ASSERT_EQUAL(ct_log_trim(path, 100), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 0), 0);
    expect_text(slurp(path), "");

    /* A line that does not parse, or has no step: an error naming the file
     * and line; the file is left as it was, no temporary remains. */
    const char *bad = "{\"step\": 1}\n{\"step\": 2\n{\"step\": 3}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, bad, strlen(bad)), 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_log_trim(path, 1), CT_EFORMAT);
    snprintf(want, sizeof want, "%s:2: offset 11: expected ',' or '}', found end of input", path);
    expect_msg(want);
    expect_text(slurp(path), bad);
    CU_ASSERT_EQUAL(count_entries(dir), 1);
    const char *nostep = "{\"step\": 1}\n{\"epoch\": 2}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, nostep, strlen(nostep)), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 5), CT_ENOENT);
    snprintf(want, sizeof want, "%s:2: missing key \"step\"", path);
    expect_msg(want);
    const char *blank = "{\"step\": 1}\n\n{\"step\": 2}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, blank, strlen(blank)), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 5), CT_EFORMAT);
    snprintf(want, sizeof want, "%s:2: offset 1: expected a value", path);
    expect_msg(want);

    /* The last line cut short by a kill (no newline, does not parse) is
     * dropped; a complete last line without its newline is kept, with one. */
    const char *cut = "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3, \"lo";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, cut, strlen(cut)), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 5), 0);
    expect_text(slurp(path), "{\"step\": 1}\n{\"step\": 2}\n");
    const char *whole = "{\"step\": 1}\n{\"step\": 2}";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, whole, strlen(whole)), 0);
    CU_ASSERT_EQUAL(ct_log_trim(path, 5), 0);
    expect_text(slurp(path), "{\"step\": 1}\n{\"step\": 2}\n");

    /* Cannot rewrite: a path under a regular file. */
    snprintf(path, sizeof path, "%s/steps.jsonl/x", dir);
    CU_ASSERT_EQUAL(ct_log_trim(path, 1), CT_EIO);
    expect_msg(path);
    ct_test_rmtree(dir);
}

/* ================================================================ chain.jsonl */

static struct ct_chain_entry sample_entry(int64_t step, const char *parent)
{
    struct ct_chain_entry e;
    memset(&e, 0, sizeof e);
    e.step = step;
    e.epoch = step / 10;
    snprintf(e.ckpt, sizeof e.ckpt, "ckpt-%lld", (long long)step);
    memset(e.digest, 'a' + (int)(step % 6), 64);
    snprintf(e.parent, sizeof e.parent, "%s", parent ? parent : "");
    memset(e.config_digest, '0', 64);
    snprintf(e.code_version, sizeof e.code_version, "0.1.0 (abc \"q\")");
    e.world = 2;
    snprintf(e.hosts, sizeof e.hosts, "n1,n2");
    snprintf(e.gemm, sizeof e.gemm, "openblas");
    snprintf(e.blas, sizeof e.blas, "OpenBLAS 0.3.21");
    snprintf(e.libraries, sizeof e.libraries, "mpi=Open MPI v4.1.4; hwloc=2.8.0");
    snprintf(e.time, sizeof e.time, "2026-12-03T08:00:00Z");
    return e;
}

static void test_chain(void)
{
    char dir[256], path[600], want[800];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    snprintf(path, sizeof path, "%s/chain.jsonl", dir);
    struct ct_chain_entry *v = NULL;
    size_t n = 9;
    long torn = -1;
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, &torn), CT_ENOENT);
    CU_ASSERT_EQUAL(ct_chain_drop_torn(path), 0);

    /* Exact text of a line (key order as record.h says; null parent). */
    struct ct_chain_entry a = sample_entry(10, NULL), b = sample_entry(20, a.digest);
    char *line;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(ct_chain_format(&a, &line, &len), 0);
    snprintf(want, sizeof want, "{\"step\": 10, \"epoch\": 1, \"ckpt\": \"ckpt-10\", \"digest\": \"%s\", "
             "\"parent\": null, \"config_digest\": \"%s\", \"code_version\": \"0.1.0 (abc \\\"q\\\")\", "
             "\"world\": 2, \"hosts\": \"n1,n2\", \"gemm\": \"openblas\", \"blas\": \"OpenBLAS 0.3.21\", "
             "\"libraries\": \"mpi=Open MPI v4.1.4; hwloc=2.8.0\", "
             "\"time\": \"2026-12-03T08:00:00Z\"}", a.digest, a.config_digest);
    expect_text(line, want);
    free(line);

    /* A line of a chain written before entries had "libraries": read, with
     * the field empty. */
    struct ct_chain_entry old = sample_entry(10, NULL), got;
    old.libraries[0] = '\0';
    CU_ASSERT_EQUAL_FATAL(ct_chain_format(&old, &line, &len), 0);
    char *cut = strstr(line, "\"libraries\": \"\", ");
    CU_ASSERT_PTR_NOT_NULL_FATAL(cut);
    memmove(cut, cut + strlen("\"libraries\": \"\", "), strlen(cut + strlen("\"libraries\": \"\", ")) + 1);
    CU_ASSERT_PTR_NULL(strstr(line, "libraries"));
    memset(&got, 0x55, sizeof got);
    CU_ASSERT_EQUAL(ct_chain_entry_parse(line, strlen(line), &got), 0);
    CU_ASSERT_STRING_EQUAL(got.libraries, "");
    CU_ASSERT_STRING_EQUAL(got.blas, "OpenBLAS 0.3.21");
    free(line);

    /* Appended and read back field for field. */
    CU_ASSERT_EQUAL_FATAL(ct_chain_append(path, &a), 0);
    CU_ASSERT_EQUAL_FATAL(ct_chain_append(path, &b), 0);
    CU_ASSERT_EQUAL_FATAL(ct_chain_read(path, &v, &n, &torn), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(torn, 0);
    CU_ASSERT(n == 2 && memcmp(&v[0], &a, sizeof a) == 0 && memcmp(&v[1], &b, sizeof b) == 0);
    free(v);

    /* A torn last line: left out (torn names it) or an error; cut off. */
    FILE *f = fopen(path, "a");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("{\"step\": 30, \"epo", f);
    fclose(f);
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, &torn), 0);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(torn, 3);
    free(v);
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, NULL), CT_EFORMAT);
    snprintf(want, sizeof want, "%s:3: torn last line", path);
    expect_msg(want);
    CU_ASSERT_EQUAL(ct_chain_drop_torn(path), 0);
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, NULL), 0);
    CU_ASSERT_EQUAL(n, 2);
    free(v);

    /* Malformed complete lines name the file and line. */
    const char *bad_digest = "{\"step\": 1, \"epoch\": 0, \"ckpt\": \"ckpt-1\", \"digest\": \"xyz\", "
                             "\"parent\": null, \"config_digest\": \"xyz\", \"code_version\": \"v\", "
                             "\"world\": 1, \"hosts\": \"h\", \"gemm\": \"g\", \"blas\": \"b\", \"time\": \"t\"}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, bad_digest, strlen(bad_digest)), 0);
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, NULL), CT_EFORMAT);
    snprintf(want, sizeof want, "%s:1: a digest is not 64 lower-case hex digits", path);
    expect_msg(want);
    const char *no_world = "{\"step\": 1}\n";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, no_world, strlen(no_world)), 0);
    CU_ASSERT_EQUAL(ct_chain_read(path, &v, &n, NULL), CT_ENOENT);
    snprintf(want, sizeof want, "%s:1: missing key \"epoch\"", path);
    expect_msg(want);

    /* A string that does not fit its field is refused when writing. */
    struct ct_chain_entry big = a;
    memset(big.gemm, 'x', sizeof big.gemm);
    CU_ASSERT_EQUAL(ct_chain_format(&big, &line, &len), CT_EINVAL);
    expect_msg("gemm is not NUL-terminated");
    /* Cannot append: a path under a regular file. */
    snprintf(path, sizeof path, "%s/chain.jsonl/x", dir);
    CU_ASSERT_EQUAL(ct_chain_append(path, &a), CT_EIO);
    expect_msg(path);
    ct_test_rmtree(dir);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"writer_text", test_writer_text},
        {"writer_escapes_every_control", test_writer_escapes_every_control},
        {"writer_nested_and_misuse", test_writer_nested_and_misuse},
        {"reader_values", test_reader_values},
        {"reader_getter_errors", test_reader_getter_errors},
        {"reader_malformed", test_reader_malformed},
        {"reader_limits", test_reader_limits},
        {"round_trip", test_round_trip},
        {"run_record", test_run_record},
        {"metrics", test_metrics},
        {"mfu_keys", test_mfu_keys},
        {"steps", test_steps},
        {"log_trim", test_log_trim},
        {"chain", test_chain},
        {NULL, NULL},
    };
    return ct_test_run("record", cases);
}
