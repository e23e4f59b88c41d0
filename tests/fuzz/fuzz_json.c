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
 *   0x0F    (all four low bits) also ct_ckpt_find_latest over a `latest`
 *           pointer and directories made from the text's lines
 * A line record that is accepted must write back (the writer's own format)
 * to a line that is accepted again, and writing that again must give the
 * same line: what the readers take, the writers can carry on (resume, log
 * trimming, chain repair), and nothing drifts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
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

/* One line format: parse a NUL-terminated line into a record of `size`
 * bytes, format a record as a malloc'd line without its newline, release
 * what a parsed record owns (NULL: nothing). */
struct line_codec {
    const char *name;
    size_t size;
    int (*parse)(const char *line, void *rec);
    int (*format)(const void *rec, char **line, size_t *len);
    void (*release)(void *rec);
};

/* What a FILE* writer wrote, newline cut, as a malloc'd string. */
static int format_with(int (*append)(FILE *, const char *, const void *), const void *rec,
                       char **line, size_t *len)
{
    FILE *f = open_memstream(line, len);
    if (!f)
        die("open_memstream failed");
    int rc = append(f, "fuzz", rec);
    if (fclose(f) != 0)
        die("fclose of a memstream failed");
    if (*len > 0 && (*line)[*len - 1] == '\n')
        (*line)[--*len] = '\0';
    return rc;
}

static int epoch_parse(const char *line, void *rec) { return ct_epoch_record_parse(line, rec); }
static int epoch_append(FILE *f, const char *path, const void *rec)
{
    return ct_metrics_append(f, path, rec);
}
static int epoch_format(const void *rec, char **line, size_t *len)
{
    return format_with(epoch_append, rec, line, len);
}
static void epoch_release(void *rec) { ct_epoch_record_free(rec); }

static int step_parse(const char *line, void *rec) { return ct_step_record_parse(line, rec); }
static int step_append(FILE *f, const char *path, const void *rec)
{
    return ct_steps_append(f, path, rec);
}
static int step_format(const void *rec, char **line, size_t *len)
{
    return format_with(step_append, rec, line, len);
}

static int chain_parse(const char *line, void *rec)
{
    return ct_chain_entry_parse(line, strlen(line), rec);
}
static int chain_format(const void *rec, char **line, size_t *len)
{
    return ct_chain_format(rec, line, len);
}

static const struct line_codec codecs[] = {
    {"metrics", sizeof(struct ct_epoch_record), epoch_parse, epoch_format, epoch_release},
    {"steps", sizeof(struct ct_step_record), step_parse, step_format, NULL},
    {"chain", sizeof(struct ct_chain_entry), chain_parse, chain_format, NULL},
};

/* A parsed record (malloc'd) or NULL when the line is refused. */
static void *parse_line(const struct line_codec *c, const char *line)
{
    void *r = malloc(c->size);
    if (!r)
        die("out of memory");
    if (c->parse(line, r) < 0) {
        free(r);
        return NULL;
    }
    return r;
}

static void free_record(const struct line_codec *c, void *r)
{
    if (c->release)
        c->release(r);
    free(r);
}

/* parse(line) accepted -> format -> a -> parse -> format -> b: b == a. */
static void line_round_trip(const struct line_codec *c, const char *line)
{
    void *r = parse_line(c, line);
    ct_fuzz_verbose(c->name, r ? 0 : -1);
    if (!r)
        return;
    char *a, *b;
    size_t alen, blen;
    if (c->format(r, &a, &alen) < 0) {
        fprintf(stderr, "fuzz_json: an accepted %s line does not write back\n", c->name);
        abort();
    }
    void *r2 = parse_line(c, a);
    if (!r2) {
        fprintf(stderr, "fuzz_json: an accepted %s line, written back, does not parse: %.300s\n",
                c->name, a);
        abort();
    }
    if (c->format(r2, &b, &blen) < 0 || alen != blen || memcmp(a, b, alen) != 0) {
        fprintf(stderr, "fuzz_json: a %s line drifts when written back twice:\n  %.300s\n",
                c->name, a);
        abort();
    }
    free(a);
    free(b);
    free_record(c, r2);
    free_record(c, r);
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

/* The checkpoint pointer and the directory scan (ct_ckpt_find_latest): the
 * text's first line becomes `latest`, its next lines (up to 4, without '/')
 * directories of that name, each with an empty manifest.pb. No checkpoint
 * there is valid, so whatever the pointer and the names say, the search must
 * fail (and name the run directory). */
static void find_latest(const uint8_t *text, size_t len)
{
    const char *dir = ct_fuzz_dir();
    const uint8_t *nl = memchr(text, '\n', len);
    size_t first = nl ? (size_t)(nl - text) + 1 : len;
    ct_fuzz_write("latest", text, first);
    char made[4][256];
    int nmade = 0;
    size_t pos = first;
    while (pos < len && nmade < 4) {
        const uint8_t *end = memchr(text + pos, '\n', len - pos);
        size_t n = end ? (size_t)(end - (text + pos)) : len - pos;
        if (n > 0 && n < sizeof made[0] && !memchr(text + pos, '/', n) &&
            !memchr(text + pos, '\0', n)) {
            memcpy(made[nmade], text + pos, n);
            made[nmade][n] = '\0';
            char path[512], file[800];
            ct_fuzz_path(path, sizeof path, made[nmade]);
            if (strcmp(made[nmade], ".") != 0 && strcmp(made[nmade], "..") != 0 &&
                mkdir(path, 0700) == 0) {
                snprintf(file, sizeof file, "%s/manifest.pb", path);
                FILE *f = fopen(file, "wb");
                if (!f || fclose(f) != 0)
                    die("cannot write an empty manifest.pb");
                nmade++;
            }
        }
        pos += n + 1;
    }
    char found[1024];
    int rc = ct_ckpt_find_latest(dir, found, sizeof found);
    ct_fuzz_verbose("ct_ckpt_find_latest", rc);
    if (rc == 0) {
        fprintf(stderr, "fuzz_json: ct_ckpt_find_latest found %s\n", found);
        die("ct_ckpt_find_latest found a checkpoint where none is valid");
    }
    for (int k = 0; k < nmade; k++) {
        char path[512], file[800];
        ct_fuzz_path(path, sizeof path, made[k]);
        snprintf(file, sizeof file, "%s/manifest.pb", path);
        if (unlink(file) != 0 || rmdir(path) != 0)
            die("cannot remove a directory made for ct_ckpt_find_latest");
    }
    ct_fuzz_remove("latest");
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
        for (int k = 0; k < 3; k++)
            if (flags & (1 << k))
                line_round_trip(&codecs[k], line);
        free(line);
    }
    if (flags & 0x08)
        files(text, len, flags >> 4);
    if ((flags & 0x0F) == 0x0F)
        find_latest(text, len);
    return 0;
}
