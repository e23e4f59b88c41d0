/* libFuzzer harness: the readers of a run directory's JSON files
 * (src/run/json.c and src/run/record.c): what `audit`, `report`, `summary`
 * and a resume read back, and what a user, a crash or a forger may have
 * left there.
 *
 * Input: flags:u8, then the text (not NUL-terminated; the line parsers get a
 * terminated copy, cut at its first NUL).
 *   always  ct_json_parse. An accepted document is written back with the JSON
 *           writer and parsed again, and must be the same tree: the same
 *           types, keys in order, strings byte for byte (\u0000 included),
 *           numbers to the bit (integers exactly).
 *   0x01    the text as a metrics.jsonl line (ct_epoch_record_parse)
 *   0x02    ... as a steps.jsonl line (ct_step_record_parse)
 *   0x04    ... as a chain.jsonl line (ct_chain_entry_parse)
 *   0x08    the text as files: chain.jsonl for ct_chain_read (torn last
 *           line allowed and not), run.json for ct_run_record_read,
 *           metrics.jsonl for ct_log_trim (max step = flags >> 4)
 * A line record that is accepted must write back (the writer's own format)
 * to a line that is accepted again, and writing that again must give the
 * same line: what the readers take, the writers can carry on (resume, log
 * trimming, chain repair), and nothing drifts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "run/json.h"
#include "run/record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what)
{
    fprintf(stderr, "fuzz_json: %s\n", what);
    abort();
}

/* ------------------------------------------------------------ tree round trip */

static void write_value(struct ct_json_writer *w, const struct ct_json_value *v)
{
    switch (v->type) {
    case CT_JSON_NULL:
        ct_json_null(w);
        break;
    case CT_JSON_BOOL:
        ct_json_bool(w, v->boolean);
        break;
    case CT_JSON_NUMBER:
        if (v->is_int)
            ct_json_int(w, v->integer);
        else
            ct_json_double(w, v->number, 17);
        break;
    case CT_JSON_STRING:
        ct_json_string_n(w, v->string, v->string_len);
        break;
    case CT_JSON_ARRAY:
        ct_json_begin_array(w);
        for (size_t i = 0; i < v->n; i++)
            write_value(w, &v->items[i]);
        ct_json_end_array(w);
        break;
    case CT_JSON_OBJECT:
        ct_json_begin_object(w);
        for (size_t i = 0; i < v->n; i++) {
            ct_json_key(w, v->keys[i]);
            write_value(w, &v->items[i]);
        }
        ct_json_end_object(w);
        break;
    default:
        die("a value of no known type");
    }
}

static int same_value(const struct ct_json_value *a, const struct ct_json_value *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case CT_JSON_NULL:
        return 1;
    case CT_JSON_BOOL:
        return a->boolean == b->boolean;
    case CT_JSON_NUMBER:
        /* An integer literal is written as one; any other number with 17
         * digits, which reads back to the same double (1.0 comes back as
         * the integer 1, whose double is the same). */
        if (a->is_int)
            return b->is_int && a->integer == b->integer;
        return memcmp(&a->number, &b->number, sizeof a->number) == 0;
    case CT_JSON_STRING:
        return a->string_len == b->string_len && memcmp(a->string, b->string, a->string_len) == 0;
    case CT_JSON_ARRAY:
    case CT_JSON_OBJECT:
        if (a->n != b->n)
            return 0;
        for (size_t i = 0; i < a->n; i++) {
            if (a->type == CT_JSON_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0)
                return 0;
            if (!same_value(&a->items[i], &b->items[i]))
                return 0;
        }
        return 1;
    default:
        return 0;
    }
}

static void tree_round_trip(const uint8_t *text, size_t len)
{
    struct ct_json_doc doc;
    int rc = ct_json_parse(&doc, (const char *)text, len, NULL);
    ct_fuzz_verbose("ct_json_parse", rc);
    if (rc < 0)
        return;
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    write_value(&w, doc.root);
    if (ct_json_writer_status(&w) < 0)
        die("an accepted document does not write back");
    struct ct_json_doc back;
    /* The writer's text may be longer than the input (escapes, 17 digits):
     * parse it without the input's size cap. */
    struct ct_json_parse_params pp = ct_json_parse_default_params();
    pp.max_bytes = w.len + 1;
    if (ct_json_parse(&back, w.buf, w.len, &pp) < 0) {
        fprintf(stderr, "fuzz_json: written back: %.200s\n", w.buf);
        die("an accepted document, written back, does not parse");
    }
    if (!same_value(doc.root, back.root)) {
        fprintf(stderr, "fuzz_json: written back: %.200s\n", w.buf);
        die("an accepted document, written back, parses to another tree");
    }
    ct_json_doc_free(&back);
    ct_json_writer_free(&w);
    ct_json_doc_free(&doc);
}

/* ------------------------------------------------------------ line records */

/* What a FILE* writer wrote, as a NUL-terminated string (newline cut). */
struct memline {
    char *buf;
    size_t len;
    FILE *f;
};

static void memline_open(struct memline *m)
{
    memset(m, 0, sizeof *m);
    m->f = open_memstream(&m->buf, &m->len);
    if (!m->f)
        die("open_memstream failed");
}

static void memline_close(struct memline *m)
{
    if (fclose(m->f) != 0)
        die("fclose of a memstream failed");
    m->f = NULL;
    if (m->len > 0 && m->buf[m->len - 1] == '\n')
        m->buf[--m->len] = '\0';
}

/* parse(text) accepted -> write -> line1 -> parse -> write -> line2 == line1 */
static void epoch_round_trip(const char *line)
{
    struct ct_epoch_record r;
    int rc = ct_epoch_record_parse(line, &r);
    ct_fuzz_verbose("ct_epoch_record_parse", rc);
    if (rc < 0)
        return;
    struct memline a, b;
    memline_open(&a);
    if (ct_metrics_append(a.f, "fuzz", &r) < 0)
        die("an accepted metrics line does not write back");
    memline_close(&a);
    struct ct_epoch_record r2;
    if (ct_epoch_record_parse(a.buf, &r2) < 0) {
        fprintf(stderr, "fuzz_json: written back: %.300s\n", a.buf);
        die("an accepted metrics line, written back, does not parse");
    }
    memline_open(&b);
    if (ct_metrics_append(b.f, "fuzz", &r2) < 0)
        die("a metrics line written back does not write again");
    memline_close(&b);
    if (a.len != b.len || memcmp(a.buf, b.buf, a.len) != 0) {
        fprintf(stderr, "fuzz_json: first:  %.300s\nfuzz_json: second: %.300s\n", a.buf, b.buf);
        die("a metrics line drifts when written back twice");
    }
    free(a.buf);
    free(b.buf);
    ct_epoch_record_free(&r2);
    ct_epoch_record_free(&r);
}

static void step_round_trip(const char *line)
{
    struct ct_step_record r, r2;
    int rc = ct_step_record_parse(line, &r);
    ct_fuzz_verbose("ct_step_record_parse", rc);
    if (rc < 0)
        return;
    struct memline a, b;
    memline_open(&a);
    if (ct_steps_append(a.f, "fuzz", &r) < 0)
        die("an accepted steps line does not write back");
    memline_close(&a);
    if (ct_step_record_parse(a.buf, &r2) < 0) {
        fprintf(stderr, "fuzz_json: written back: %.300s\n", a.buf);
        die("an accepted steps line, written back, does not parse");
    }
    memline_open(&b);
    if (ct_steps_append(b.f, "fuzz", &r2) < 0)
        die("a steps line written back does not write again");
    memline_close(&b);
    if (a.len != b.len || memcmp(a.buf, b.buf, a.len) != 0) {
        fprintf(stderr, "fuzz_json: first:  %.300s\nfuzz_json: second: %.300s\n", a.buf, b.buf);
        die("a steps line drifts when written back twice");
    }
    free(a.buf);
    free(b.buf);
}

static void chain_round_trip(const char *line)
{
    struct ct_chain_entry *e = malloc(sizeof *e), *e2 = malloc(sizeof *e2);
    if (!e || !e2)
        die("out of memory");
    int rc = ct_chain_entry_parse(line, strlen(line), e);
    ct_fuzz_verbose("ct_chain_entry_parse", rc);
    if (rc == 0) {
        char *a, *b;
        size_t alen, blen;
        if (ct_chain_format(e, &a, &alen) < 0)
            die("an accepted chain line does not format");
        if (ct_chain_entry_parse(a, alen, e2) < 0) {
            fprintf(stderr, "fuzz_json: written back: %.300s\n", a);
            die("an accepted chain line, formatted, does not parse");
        }
        if (ct_chain_format(e2, &b, &blen) < 0)
            die("a chain line formatted back does not format again");
        if (alen != blen || memcmp(a, b, alen) != 0) {
            fprintf(stderr, "fuzz_json: first:  %.300s\nfuzz_json: second: %.300s\n", a, b);
            die("a chain line drifts when formatted twice");
        }
        free(a);
        free(b);
    }
    free(e);
    free(e2);
}

/* ------------------------------------------------------------ files */

static void files(const uint8_t *text, size_t len, int max_step)
{
    char path[512];
    ct_fuzz_write("chain.jsonl", text, len);
    ct_fuzz_path(path, sizeof path, "chain.jsonl");
    struct ct_chain_entry *v = NULL;
    size_t n = 0;
    long torn = -1;
    int rc = ct_chain_read(path, &v, &n, &torn);
    ct_fuzz_verbose("ct_chain_read (torn allowed)", rc);
    if (rc == 0 && (torn < 0 || (n > 0 && !v)))
        die("ct_chain_read accepted a file but left torn or the entries unset");
    free(v);
    v = NULL;
    int strict = ct_chain_read(path, &v, &n, NULL);
    ct_fuzz_verbose("ct_chain_read (strict)", strict);
    if (strict == 0 && rc != 0)
        die("ct_chain_read: a file the strict reader takes is refused with torn lines allowed");
    free(v);

    ct_fuzz_write("run.json", text, len);
    ct_fuzz_path(path, sizeof path, "run.json");
    struct ct_run_record run;
    rc = ct_run_record_read(path, &run);
    ct_fuzz_verbose("ct_run_record_read", rc);
    if (rc == 0)
        ct_run_record_free(&run);

    ct_fuzz_write("metrics.jsonl", text, len);
    ct_fuzz_path(path, sizeof path, "metrics.jsonl");
    rc = ct_log_trim(path, max_step);
    ct_fuzz_verbose("ct_log_trim", rc);
    if (rc == 0) {
        /* Trimming what it just trimmed changes nothing. */
        char *before, *after;
        size_t blen, alen;
        if (ct_run_read_file(path, (size_t)64 << 20, &before, &blen) < 0)
            die("ct_log_trim left no readable file");
        if (ct_log_trim(path, max_step) < 0)
            die("ct_log_trim refuses its own output");
        if (ct_run_read_file(path, (size_t)64 << 20, &after, &alen) < 0)
            die("ct_log_trim left no readable file");
        if (alen != blen || memcmp(before, after, alen) != 0)
            die("ct_log_trim of its own output changed it");
        free(before);
        free(after);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t flags = data[0];
    const uint8_t *text = data + 1;
    const size_t len = size - 1;
    tree_round_trip(text, len);
    if (flags & 0x07) {
        char *line = malloc(len + 1);
        if (!line)
            die("out of memory");
        memcpy(line, text, len);
        line[len] = '\0';
        if (flags & 0x01)
            epoch_round_trip(line);
        if (flags & 0x02)
            step_round_trip(line);
        if (flags & 0x04)
            chain_round_trip(line);
        free(line);
    }
    if (flags & 0x08)
        files(text, len, flags >> 4);
    return 0;
}
