/* ctrain-dist data inspect|stats|tokenize: what a data file holds, before a
 * config points at it; and byte-level token shards made from text.
 *
 * Dims legend: N = samples, C, H, W = an image's channels, height, width,
 * HW = H*W, K = targets per sample; for token shards, W = window = T + 1
 * tokens (model.block + 1).
 *
 * `inspect` prints the header facts (format, count, per-sample shape, dtype,
 * stored layout, file size, gzip) without reading the pixels: the data set
 * is opened through ct_dataset_open with no labels, which maps the file and
 * checks its header against its size, exactly as training will read it.
 * The one exception is a gzipped IDX file, whose open would decode it all:
 * there only the header is read (ct_idx_read_header). `stats` opens the set
 * with its labels and reads every value: the class histogram, the
 * per-channel mean and std that data.mean / data.std want, and each file's
 * SHA-256 (the digest the run's manifest will record). For token shards
 * (data/tokens.h) inspect reads the 1024-byte header alone, and stats the
 * tokens: count, windows, vocabulary and the most frequent tokens.
 * `tokenize --bytes` writes one shard of the text files' bytes, each byte a
 * token (vocabulary 256), atomically.
 *
 * The work is rank 0's alone; under mpirun the other ranks only learn the
 * status (ct_comm_agree), so every rank exits with the same one. This file
 * deliberately is not a general converter nor a viewer: the one thing it
 * writes is a byte-level token shard, and it knows no other tokenizer.
 */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/sha256.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "data/npy.h"
#include "data/tokens.h"

static const char data_synopsis[] =
    "data inspect FILE [--format F] [--layout L] [--window W]\n"
    "                   | stats IMAGES [LABELS] [--format F] [--layout L] [--window W] [--vocab V]\n"
    "                   | tokenize --bytes TEXT... -o SHARD";
static const char data_summary[] =
    "print a data file's header facts, or its classes, mean/std and SHA-256; tokenize text";
static const char data_help[] =
    "  inspect FILE         format, count, per-sample shape (C x H x W), dtype, stored\n"
    "                       layout, file size, gzip: the header only, no pixel is read\n"
    "                       (float32 .npy: the open also checks every value is finite);\n"
    "                       a token shard: its header's version and token count\n"
    "  stats IMAGES [LABELS]\n"
    "                       count, shape, dtype, class histogram (with LABELS, or\n"
    "                       cifar10), per-channel mean and population std of the values\n"
    "                       as training scales them (uint8: v/255; float32: as stored)\n"
    "                       from exact sums, as `mean = ...` / `std = ...` lines for the\n"
    "                       config's [data] section, and each file's SHA-256; token\n"
    "                       shards: tokens, windows, vocabulary, the most frequent tokens\n"
    "  tokenize --bytes TEXT... -o SHARD\n"
    "                       one token shard (llm.c's layout: data.format = tokens) of the\n"
    "                       files' bytes one after another, each byte a token\n"
    "                       (data.vocab = 256); written atomically, with its SHA-256\n"
    "  --format F           auto (default: by the first bytes), idx, npy, cifar10 or\n"
    "                       tokens (cifar10, and tokens for stats: a comma list of files)\n"
    "  --layout L           .npy images: auto (default: a last axis of 1, 3 or 4 is\n"
    "                       channels), nchw or nhwc (data.layout)\n"
    "  --window W           token shards: tokens per sample, model.block + 1; counts the\n"
    "                       windows (N) training will see\n"
    "  --vocab V            stats of token shards: refuse a token >= V (data.vocab)\n";

static const char exit_line[] = "Exit status: 0 success, 1 a bad data file, 2 a bad command line.\n";

struct data_args {
    const char *sub; /* "inspect", "stats" or "tokenize" */
    const char **files; /* (argc) malloc'd, pointing into argv */
    int n_files;
    enum ct_data_format format;
    enum ct_data_layout layout;
    int window, vocab;  /* token shards; 0: not given */
    int bytes;          /* tokenize --bytes */
    const char *output; /* tokenize -o */
    int help;
};

/* ------------------------------------------------------------ arguments */

/* The value of option `arg` (--name=V or --name V); NULL with the message
 * set when there is none. */
static const char *option_value(const struct data_args *a, int argc, char **argv, int *i,
                                size_t name_len)
{
    const char *arg = argv[*i];
    const char *v = arg[name_len] == '=' ? arg + name_len + 1 : *i + 1 < argc ? argv[++*i] : NULL;
    if (!v)
        ct_error_set(CT_EUSAGE, "data %s: option %s needs a value", a->sub, arg);
    return v;
}

static int is_option(const char *arg, const char *name)
{
    const size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* --window W / --vocab V: a whole number in [lo, hi]. */
static int parse_int_option(const struct data_args *a, const char *opt, const char *v, int lo,
                            int hi, int *out)
{
    char *end;
    errno = 0;
    const long k = strtol(v, &end, 10);
    if (errno || end == v || *end || k < lo || k > hi)
        return ct_error_set(CT_EUSAGE, "data %s: %s '%s': expected a whole number in %d .. %d",
                            a->sub, opt, v, lo, hi);
    *out = (int)k;
    return 0;
}

/* tokenize --bytes TEXT... -o SHARD: argv[2..]. */
static int parse_tokenize(struct data_args *a, int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--bytes") == 0) {
            a->bytes = 1;
        } else if (is_option(arg, "-o") || is_option(arg, "--output")) {
            const char *v = option_value(a, argc, argv, &i, arg[1] == 'o' ? 2 : 8);
            if (!v)
                return CT_EUSAGE;
            if (!v[0])
                return ct_error_set(CT_EUSAGE, "data tokenize: an empty output file name");
            a->output = v;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return ct_error_set(CT_EUSAGE, "data tokenize: unknown option '%s' (known: --bytes, -o)",
                                arg);
        } else if (!arg[0]) {
            return ct_error_set(CT_EUSAGE, "data tokenize: an empty file name");
        } else {
            a->files[a->n_files++] = arg;
        }
    }
    if (!a->bytes)
        return ct_error_set(CT_EUSAGE, "data tokenize needs --bytes (the one tokenizer: each byte "
                            "of the text one token, vocabulary 256)");
    if (a->n_files == 0)
        return ct_error_set(CT_EUSAGE, "data tokenize needs at least one TEXT file");
    if (!a->output)
        return ct_error_set(CT_EUSAGE, "data tokenize needs -o SHARD (the token shard to write)");
    return 0;
}

/* argv[0] is "data". 0, or CT_EUSAGE with the message set; a->files is
 * malloc'd either way (free it). */
static int parse(struct data_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->format = CT_DATA_FORMAT_AUTO;
    a->layout = CT_DATA_LAYOUT_AUTO;
    if (!(a->files = calloc((size_t)argc + 1, sizeof *a->files)))
        return ct_error_set(CT_ENOMEM, "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = 1;
            return 0;
        }
    }
    if (argc < 2)
        return ct_error_set(CT_EUSAGE, "data needs a subcommand: inspect, stats or tokenize");
    a->sub = argv[1];
    if (strcmp(a->sub, "tokenize") == 0)
        return parse_tokenize(a, argc, argv);
    if (strcmp(a->sub, "inspect") != 0 && strcmp(a->sub, "stats") != 0)
        return ct_error_set(CT_EUSAGE, "unknown data subcommand '%s' (known: inspect, stats, tokenize)",
                            a->sub);
    const int stats = strcmp(a->sub, "stats") == 0;
    const int max_files = stats ? 2 : 1;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        const int is_format = is_option(arg, "--format"), is_layout = is_option(arg, "--layout");
        const int is_window = is_option(arg, "--window"), is_vocab = stats && is_option(arg, "--vocab");
        if (is_format || is_layout) {
            const char *v = option_value(a, argc, argv, &i, 8);
            if (!v)
                return CT_EUSAGE;
            const int k = is_format ? ct_data_format_parse(v) : ct_data_layout_parse(v);
            if (k < 0)
                return ct_error_set(CT_EUSAGE, "data %s: %s '%s' (known: %s)", a->sub,
                                    is_format ? "--format" : "--layout", v,
                                    is_format ? "auto, idx, npy, cifar10, tokens" : "auto, nchw, nhwc");
            if (is_format)
                a->format = (enum ct_data_format)k;
            else
                a->layout = (enum ct_data_layout)k;
        } else if (is_window || is_vocab) {
            const char *v = option_value(a, argc, argv, &i, is_window ? 8 : 7);
            if (!v)
                return CT_EUSAGE;
            const int rc = is_window ? parse_int_option(a, "--window", v, 2, INT_MAX, &a->window)
                                     : parse_int_option(a, "--vocab", v, 1, CT_DATA_MAX_TARGET, &a->vocab);
            if (rc < 0)
                return rc;
        } else if (arg[0] == '-' && arg[1] != '\0') {
            return ct_error_set(CT_EUSAGE, "data %s: unknown option '%s'", a->sub, arg);
        } else if (a->n_files == max_files) {
            return ct_error_set(CT_EUSAGE, "data %s: too many files: '%s' (%s)", a->sub, arg,
                                max_files == 1 ? "inspect takes one FILE"
                                               : "stats takes IMAGES and at most one LABELS file");
        } else if (!arg[0]) {
            return ct_error_set(CT_EUSAGE, "data %s: an empty file name", a->sub);
        } else {
            a->files[a->n_files++] = arg;
        }
    }
    if (a->n_files == 0)
        return ct_error_set(CT_EUSAGE, "data %s needs a file (%s)", a->sub,
                            max_files == 1 ? "FILE" : "IMAGES [LABELS]");
    const int lists = a->format == CT_DATA_FORMAT_CIFAR10 || (stats && a->format == CT_DATA_FORMAT_TOKENS);
    if (!lists && strchr(a->files[0], ','))
        return ct_error_set(CT_EUSAGE, "data %s: '%s' is a list of files: only %s (%s)", a->sub,
                            a->files[0], stats ? "cifar10 and tokens take several" : "cifar10 takes several",
                            stats ? "--format cifar10 or tokens" : "--format cifar10");
    if (a->format == CT_DATA_FORMAT_CIFAR10 && a->n_files == 2)
        return ct_error_set(CT_EUSAGE, "data stats: cifar10 batches hold their labels: give no "
                            "LABELS file (found '%s')", a->files[1]);
    if (a->format == CT_DATA_FORMAT_TOKENS && a->n_files == 2)
        return ct_error_set(CT_EUSAGE, "data stats: a token window's targets are its own next "
                            "tokens: give no LABELS file (found '%s')", a->files[1]);
    return 0;
}

/* ------------------------------------------------------------ printing */

static int file_size(const char *path, uint64_t *size)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot stat: %s", path,
                            strerror(errno));
    *size = (uint64_t)st.st_size;
    return 0;
}

static int print_file(FILE *out, const char *path)
{
    uint64_t size = 0;
    int rc = file_size(path, &size);
    if (rc == 0)
        fprintf(out, "file     %s (%llu bytes)\n", path, (unsigned long long)size);
    return rc;
}

/* The facts every image data set shares, from an open one. */
static void print_shape(FILE *out, const struct ct_dataset *ds)
{
    fprintf(out, "samples  %zu\n", ds->n);
    fprintf(out, "shape    %d x %d x %d (C x H x W)\n", ds->c, ds->h, ds->w);
    fprintf(out, "dtype    %s\n", ct_data_dtype_name(ds->dtype));
    fprintf(out, "layout   %s (as stored; the model gets NCHW)\n", ct_data_layout_name(ds->layout));
}

/* ------------------------------------------------------------ inspect */

static struct ct_dataset_params params_of(const struct data_args *a, const char *labels)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = a->format;
    p.layout = a->layout;
    p.images = a->files[0];
    p.labels = labels;
    /* Token shards: without --window, windows of 2 (every shard of 2 or
     * more tokens opens; the window count is then not printed). */
    p.window = a->window ? a->window : 2;
    p.vocab = a->vocab;
    return p;
}

/* Opens the set as training would (labels none: cifar10's are in the
 * records) and prints what the open found. */
static int inspect_open(FILE *out, const struct data_args *a, enum ct_data_format f)
{
    struct ct_dataset ds;
    struct ct_dataset_params p = params_of(a, NULL);
    p.format = f;
    int rc = ct_dataset_open(&ds, &p);
    if (rc < 0)
        return rc;
    if (f == CT_DATA_FORMAT_CIFAR10) {
        for (int i = 0; rc == 0 && i < ds.n_files; i++)
            rc = print_file(out, ds.files[i]);
        fprintf(out, "format   cifar10, records of 1 label byte + 3x32x32 pixel bytes\n");
    }
    if (rc == 0)
        print_shape(out, &ds);
    if (rc == 0 && f == CT_DATA_FORMAT_CIFAR10)
        fprintf(out, "labels   in the records: %d classes\n", ds.n_classes);
    ct_dataset_close(&ds);
    return rc;
}

static int inspect_idx(FILE *out, const struct data_args *a)
{
    const char *path = a->files[0];
    struct ct_idx h;
    int rc = ct_idx_read_header(&h, path);
    if (rc < 0)
        return rc;
    char dims[64] = "";
    for (int i = 0; i < h.rank; i++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lu", i ? " x " : "",
                 (unsigned long)h.dims[i]);
    fprintf(out, "format   idx%s, uint8 dims %s\n", h.gzip ? " (gzip)" : "", dims);
    if (h.rank == 1) {
        fprintf(out, "labels   %lu (uint8): a labels file\n", (unsigned long)h.dims[0]);
        return 0;
    }
    /* Gzipped, the open would decode every pixel; the header says it all:
     * IDX images are (N, H, W) or (N, C, H, W), as idx.c reads them. A raw
     * file is only mapped, and a header training refuses is refused before
     * anything is decoded: both go through the open, for its checks. */
    const int four = h.rank == 4;
    int refused = h.rank != 3 && h.rank != 4;
    for (int i = 1; i < h.rank; i++)
        refused |= h.dims[i] > INT_MAX;
    refused |= four && h.dims[1] > CT_DATA_MAX_CHANNELS;
    if (!h.gzip || refused)
        return inspect_open(out, a, CT_DATA_FORMAT_IDX);
    struct ct_dataset ds = {.n = h.dims[0],
                            .c = four ? (int)h.dims[1] : 1,
                            .h = (int)h.dims[1 + four],
                            .w = (int)h.dims[2 + four],
                            .dtype = CT_DATA_U8,
                            .layout = CT_DATA_LAYOUT_NCHW};
    print_shape(out, &ds);
    return 0;
}

static int inspect_npy(FILE *out, const struct data_args *a)
{
    const char *path = a->files[0];
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(path, &h, &size);
    if (rc < 0)
        return rc;
    char shape[96];
    fprintf(out, "format   npy %d.%d, descr '%s' (%s), shape %s\n", h.major, h.minor, h.descr,
            ct_npy_dtype_name(h.dtype), ct_npy_shape_str(&h, shape, sizeof shape));
    if (h.ndim == 1) {
        fprintf(out, "labels   %llu (%s): a labels file\n", (unsigned long long)h.shape[0],
                ct_npy_dtype_name(h.dtype));
        return 0;
    }
    return inspect_open(out, a, CT_DATA_FORMAT_NPY);
}

/* The windows of W tokens that ntok tokens hold, as a line. */
static void print_windows(FILE *out, uint64_t ntok, uint64_t nwin, int window)
{
    if (!window) {
        fprintf(out, "windows  give --window W (model.block + 1) to count them\n");
        return;
    }
    fprintf(out, "windows  %llu of %d tokens (model.block %d), %llu tokens left over for the "
            "epochs' offsets\n",
            (unsigned long long)nwin, window, window - 1,
            (unsigned long long)(ntok - nwin * (uint64_t)window));
}

/* A token shard's header alone: no token is read. */
static int inspect_tokens(FILE *out, const struct data_args *a)
{
    struct ct_tokens_header h;
    int rc = ct_tokens_read_header(a->files[0], &h);
    if (rc < 0)
        return rc;
    fprintf(out, "format   tokens (llm.c's shard layout), version %d: a %d-byte header, then "
            "uint16 tokens\n", h.version, CT_TOKENS_HEADER_BYTES);
    fprintf(out, "tokens   %llu\n", (unsigned long long)h.count);
    print_windows(out, h.count, a->window ? h.count / (uint64_t)a->window : 0, a->window);
    return 0;
}

static int cmd_inspect(FILE *out, const struct data_args *a)
{
    enum ct_data_format f = a->format;
    int rc = 0;
    if (f == CT_DATA_FORMAT_AUTO && (rc = ct_data_format_detect(a->files[0], &f)) < 0)
        return rc;
    if (f == CT_DATA_FORMAT_CIFAR10)
        return inspect_open(out, a, f); /* a list of files, no header */
    if ((rc = print_file(out, a->files[0])) < 0)
        return rc;
    return f == CT_DATA_FORMAT_IDX      ? inspect_idx(out, a)
           : f == CT_DATA_FORMAT_TOKENS ? inspect_tokens(out, a)
                                        : inspect_npy(out, a);
}

/* ------------------------------------------------------------ stats */

/* An exact sum of doubles: Shewchuk's non-overlapping partials, as Python's
 * math.fsum. Each addition keeps the running sum as an exact expansion
 * p[0] + ... + p[n-1] (increasing magnitudes, no two sharing a bit), so
 * nothing is lost until the one rounding of ct_xsum_value. The terms added
 * here are float32 values and their squares (exact in a double: 48-bit
 * significands), all multiples of 2^-298 below 2^300 in magnitude, so at
 * most ~600 bit positions and as many partials. */
#define XSUM_MAX 640
struct xsum {
    int n;
    double p[XSUM_MAX];
};

static void xsum_add(struct xsum *s, double x)
{
    int k = 0;
    for (int j = 0; j < s->n; j++) {
        double y = s->p[j];
        if (fabs(x) < fabs(y)) {
            const double t = x;
            x = y;
            y = t;
        }
        const double hi = x + y;
        const double lo = y - (hi - x); /* exact: the bits of x + y that hi dropped */
        if (lo != 0.0)
            s->p[k++] = lo;
        x = hi;
    }
    if (k < XSUM_MAX) /* k <= the bound above; never false for finite float32 input */
        s->p[k++] = x;
    s->n = k;
}

/* The expansion rounded once to the nearest double (math.fsum's last step). */
static double xsum_value(const struct xsum *s)
{
    int n = s->n;
    if (n == 0)
        return 0.0;
    double hi = s->p[--n], lo = 0.0;
    while (n > 0) {
        const double x = hi, y = s->p[--n];
        hi = x + y;
        lo = y - (hi - x);
        if (lo != 0.0)
            break;
    }
    /* Round half to even across the partials: if the remainder below lo has
     * the same sign, the tie goes the other way. */
    if (n > 0 && ((lo < 0.0 && s->p[n - 1] < 0.0) || (lo > 0.0 && s->p[n - 1] > 0.0))) {
        const double y = lo * 2.0, x = hi + y;
        if (y == x - hi)
            hi = x;
    }
    return hi;
}

struct channel_sums {
    /* uint8: sum of v and of v^2 over the channel's N*HW values, exact in
     * integers (s1 <= 255 * count, s2 <= 65025 * count, count <= 2^48). */
    unsigned __int128 s1, s2;
    /* float32: the same sums, as exact expansions. */
    struct xsum x1, x2;
};

/* One sample's values of channel c, in either layout, into the sums. */
static int add_sample(struct channel_sums *cs, const struct ct_dataset *ds, size_t i)
{
    const void *src = ds->ops->sample(ds, i);
    const size_t HW = (size_t)ds->h * ds->w, C = (size_t)ds->c;
    const int nchw = ds->layout == CT_DATA_LAYOUT_NCHW;
    for (size_t c = 0; c < C; c++) {
        const size_t first = nchw ? c * HW : c, step = nchw ? 1 : C;
        if (ds->dtype == CT_DATA_U8) {
            const uint8_t *v = (const uint8_t *)src + first;
            uint64_t a1 = 0, a2 = 0; /* one sample: HW * 65025 fits easily */
            for (size_t k = 0; k < HW; k++) {
                const uint64_t b = v[k * step];
                a1 += b;
                a2 += b * b;
            }
            cs[c].s1 += a1;
            cs[c].s2 += a2;
        } else {
            const float *v = (const float *)src + first;
            for (size_t k = 0; k < HW; k++) {
                const double x = v[k * step];
                if (!isfinite(x))
                    return ct_error_set(CT_EFORMAT, "%s: sample %zu holds a non-finite value (%g)",
                                        ds->files[0], i, x);
                xsum_add(&cs[c].x1, x);
                xsum_add(&cs[c].x2, x * x); /* exact: 24-bit significand squared */
            }
        }
    }
    return 0;
}

/* Mean and population std (divided by count = N*HW) of channel c, scaled as
 * training scales the values (uint8: v/255). */
static void channel_moments(const struct channel_sums *cs, int dtype_u8, uint64_t count, double *mean,
                            double *std)
{
    if (dtype_u8) {
        /* mean = s1 / (255 n): the exact integer sum, one division.
         * var = (n s2 - s1^2) / (255^2 n^2): the numerator exact in 128-bit
         * integers (no cancellation can happen in floating point), one
         * division. Both in long double (64-bit significands on x86-64), so
         * that the doubles printed are the correctly rounded ones (but for
         * a rare double rounding), not a few ulps off. */
        const long double nl = (long double)count;
        *mean = (double)((long double)cs->s1 / (255.0L * nl));
        const unsigned __int128 num = (unsigned __int128)count * cs->s2 - cs->s1 * cs->s1;
        *std = (double)sqrtl((long double)num / (65025.0L * nl * nl));
        return;
    }
    /* float32: S1 and S2 are exact until rounded once each; var = S2/n -
     * mean^2 then loses at most a few ulps of (mean^2 + var) / var, far
     * below the digits printed for any data whose std is not tiny next to
     * its mean. */
    const double n = (double)count, s1 = xsum_value(&cs->x1), s2 = xsum_value(&cs->x2);
    *mean = s1 / n;
    const double var = s2 / n - *mean * *mean;
    *std = sqrt(var > 0.0 ? var : 0.0);
}

static int print_histogram(FILE *out, const struct ct_dataset *ds, const char *labels)
{
    if (ds->targets != 1 || !ds->y)
        return 0;
    uint64_t *count = calloc((size_t)ds->n_classes, sizeof *count);
    if (!count)
        return ct_error_set(CT_ENOMEM, "out of memory for %d class counts", ds->n_classes);
    for (size_t i = 0; i < ds->n; i++)
        count[ds->y[i]]++;
    fprintf(out, "classes  %d (labels 0..%d, from %s)\n", ds->n_classes, ds->n_classes - 1,
            labels ? labels : "the records");
    for (int k = 0; k < ds->n_classes; k++)
        fprintf(out, "  class %d: %llu (%.2f%%)\n", k, (unsigned long long)count[k],
                100.0 * (double)count[k] / (double)ds->n);
    free(count);
    return 0;
}

static int print_channel_stats(FILE *out, const struct ct_dataset *ds)
{
    const size_t C = (size_t)ds->c;
    const uint64_t count = (uint64_t)ds->n * (uint64_t)ds->h * (uint64_t)ds->w;
    if (count == 0 || count > ((uint64_t)1 << 48))
        return ct_error_set(CT_ERANGE, "%s: %llu values per channel: expected 1 .. 2^48",
                            ds->files[0], (unsigned long long)count);
    struct channel_sums *cs = calloc(C, sizeof *cs);
    if (!cs)
        return ct_error_set(CT_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ds->n; i++)
        rc = add_sample(cs, ds, i);
    if (rc < 0) {
        free(cs);
        return rc;
    }
    double mean[CT_DATA_MAX_CHANNELS], std[CT_DATA_MAX_CHANNELS];
    for (size_t c = 0; c < C; c++)
        channel_moments(&cs[c], ds->dtype == CT_DATA_U8, count, &mean[c], &std[c]);
    free(cs);
    fprintf(out,
            "per channel, of the values as training scales them (%s), from exact sums;\n"
            "std is the population std (divided by N*H*W = %llu values), as torchvision users "
            "compute it:\n",
            ds->dtype == CT_DATA_U8 ? "uint8: v/255" : "float32: as stored", (unsigned long long)count);
    for (size_t c = 0; c < C; c++)
        fprintf(out, "  channel %zu: mean %.17g  std %.17g\n", c, mean[c], std[c]);
    fprintf(out, "for the config's [data] section:\n");
    for (int k = 0; k < 2; k++) {
        fprintf(out, "%s = ", k ? "std" : "mean");
        for (size_t c = 0; c < C; c++)
            fprintf(out, "%s%.4f", c ? "," : "", k ? std[c] : mean[c]);
        fputc('\n', out);
    }
    return 0;
}

static int print_digests(FILE *out, const struct ct_dataset *ds)
{
    for (int i = 0; i < ds->n_files; i++) {
        uint8_t d[CT_SHA256_LEN];
        char hex[CT_SHA256_HEX_LEN];
        int rc = ct_sha256_file(ds->files[i], d);
        if (rc < 0)
            return rc;
        ct_sha256_hex(d, hex);
        fprintf(out, "sha256   %s  %s\n", hex, ds->files[i]);
    }
    return 0;
}

/* How many tokens of each value, and the most frequent. */
enum { TOP_TOKENS = 10 };

static int print_token_stats(FILE *out, const struct ct_dataset *ds, int window, int vocab)
{
    uint64_t *count = calloc(CT_DATA_MAX_TARGET, sizeof *count);
    if (!count)
        return ct_error_set(CT_ENOMEM, "out of memory for %d token counts", CT_DATA_MAX_TARGET);
    uint64_t total = 0;
    size_t ntok, nwin;
    const uint16_t *tok;
    for (int s = 0; (tok = ct_tokens_shard(ds, s, &ntok, &nwin)); s++) {
        for (size_t k = 0; k < ntok; k++)
            count[tok[k]]++;
        total += ntok;
    }
    fprintf(out, "format   tokens\n");
    fprintf(out, "tokens   %llu (uint16) in %d shard%s\n", (unsigned long long)total, ds->n_files,
            ds->n_files == 1 ? "" : "s");
    print_windows(out, total, ds->n, window);
    int largest = 0, distinct = 0;
    for (int v = 0; v < CT_DATA_MAX_TARGET; v++)
        if (count[v]) {
            largest = v;
            distinct++;
        }
    fprintf(out, "vocab    %d (%s); the largest token %d; %d distinct tokens occur\n", ds->n_classes,
            vocab ? "--vocab" : "1 + the largest token", largest,
            distinct);
    /* The TOP_TOKENS most frequent, ties to the smaller token: a selection
     * over the table, TOP_TOKENS passes. */
    int top[TOP_TOKENS], ntop = 0;
    for (; ntop < TOP_TOKENS && ntop < distinct; ntop++) {
        int best = -1;
        for (int v = 0; v < CT_DATA_MAX_TARGET; v++) {
            int taken = 0;
            for (int k = 0; k < ntop; k++)
                taken |= top[k] == v;
            if (count[v] && !taken && (best < 0 || count[v] > count[best]))
                best = v;
        }
        top[ntop] = best;
    }
    fprintf(out, "the %d most frequent tokens:\n", ntop);
    for (int k = 0; k < ntop; k++) {
        const int v = top[k];
        char shown[16] = "";
        /* A byte-level vocabulary: show the byte. */
        if (ds->n_classes <= 256 && v < 128 && isprint(v))
            snprintf(shown, sizeof shown, " '%c'", v);
        else if (ds->n_classes <= 256 && v < 128)
            snprintf(shown, sizeof shown, " (0x%02X)", v);
        fprintf(out, "  token %d%s: %llu (%.2f%%)\n", v, shown, (unsigned long long)count[v],
                100.0 * (double)count[v] / (double)total);
    }
    free(count);
    return 0;
}

static int cmd_stats(FILE *out, const struct data_args *a)
{
    struct ct_dataset ds;
    struct ct_dataset_params p = params_of(a, a->n_files > 1 ? a->files[1] : NULL);
    int rc = ct_dataset_open(&ds, &p);
    if (rc < 0)
        return rc;
    for (int i = 0; rc == 0 && i < ds.n_files; i++)
        rc = print_file(out, ds.files[i]);
    if (rc == 0 && ds.format == CT_DATA_FORMAT_TOKENS) {
        rc = print_token_stats(out, &ds, a->window, a->vocab);
        if (rc == 0)
            rc = print_digests(out, &ds);
        ct_dataset_close(&ds);
        return rc;
    }
    if (rc == 0) {
        fprintf(out, "format   %s\n", ct_data_format_name(ds.format));
        print_shape(out, &ds);
        rc = print_histogram(out, &ds, a->n_files > 1 ? a->files[1] : NULL);
    }
    if (rc == 0)
        rc = print_channel_stats(out, &ds);
    if (rc == 0)
        rc = print_digests(out, &ds);
    ct_dataset_close(&ds);
    return rc;
}

/* ------------------------------------------------------------ tokenize */

/* The files' sizes, each a regular file, and their sum. */
static int measure_texts(const struct data_args *a, uint64_t *sizes, uint64_t *total)
{
    *total = 0;
    for (int i = 0; i < a->n_files; i++) {
        struct stat st;
        if (stat(a->files[i], &st) != 0)
            return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot stat: %s",
                                a->files[i], strerror(errno));
        if (!S_ISREG(st.st_mode))
            return ct_error_set(CT_EIO, "%s: not a regular file (tokenize reads files whose size "
                                "it can know before writing the header)", a->files[i]);
        sizes[i] = (uint64_t)st.st_size;
        *total += sizes[i];
    }
    if (*total == 0)
        return ct_error_set(CT_EINVAL, "data tokenize: %s hold%s no bytes: nothing to tokenize",
                            a->n_files == 1 ? a->files[0] : "the text files",
                            a->n_files == 1 ? "s" : "");
    return 0;
}

/* One text file's bytes as tokens, through buffers of CHUNK bytes. */
enum { TOKENIZE_CHUNK = 1 << 16 };

static int tokenize_file(struct ct_tokens_writer *w, const char *path, uint64_t size, uint8_t *in,
                         uint16_t *tok)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    uint64_t got = 0;
    int rc = 0;
    size_t k;
    while (rc == 0 && (k = fread(in, 1, TOKENIZE_CHUNK, f)) > 0) {
        if (got + k > size) {
            got += k; /* it grew: refused below */
            break;
        }
        for (size_t i = 0; i < k; i++)
            tok[i] = in[i];
        rc = ct_tokens_writer_put(w, tok, k);
        got += k;
    }
    if (rc == 0 && ferror(f))
        rc = ct_error_set(CT_EIO, "%s: read error: %s", path, strerror(errno));
    else if (rc == 0 && (got != size || fgetc(f) != EOF))
        rc = ct_error_set(CT_EIO, "%s: changed while being read: %llu bytes when measured, %s",
                          path, (unsigned long long)size, got < size ? "fewer read" : "more read");
    fclose(f);
    return rc;
}

static int cmd_tokenize(FILE *out, const struct data_args *a)
{
    uint64_t *sizes = calloc((size_t)a->n_files, sizeof *sizes), total = 0;
    uint8_t *in = malloc(TOKENIZE_CHUNK);
    uint16_t *tok = malloc(TOKENIZE_CHUNK * sizeof *tok);
    int rc = sizes && in && tok ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = measure_texts(a, sizes, &total);
    struct ct_tokens_writer w;
    if (rc == 0)
        rc = ct_tokens_writer_open(&w, a->output, total);
    if (rc == 0) {
        for (int i = 0; rc == 0 && i < a->n_files; i++)
            rc = tokenize_file(&w, a->files[i], sizes[i], in, tok);
        if (rc == 0)
            rc = ct_tokens_writer_commit(&w);
        else
            ct_tokens_writer_abort(&w);
    }
    free(sizes);
    free(in);
    free(tok);
    if (rc < 0)
        return rc;
    uint8_t d[CT_SHA256_LEN];
    char hex[CT_SHA256_HEX_LEN];
    if ((rc = ct_sha256_file(a->output, d)) < 0)
        return rc;
    ct_sha256_hex(d, hex);
    fprintf(out, "wrote    %s: %llu tokens (the bytes of %d file%s; data.vocab = 256), %llu bytes\n",
            a->output, (unsigned long long)total, a->n_files, a->n_files == 1 ? "" : "s",
            (unsigned long long)(CT_TOKENS_HEADER_BYTES + 2 * total));
    fprintf(out, "sha256   %s  %s\n", hex, a->output);
    return 0;
}

/* ------------------------------------------------------------ the command */

static void print_help(FILE *out)
{
    fprintf(out, "usage: ctrain-dist %s\n\n%s.\n\n%s\n%s", data_synopsis, data_summary,
            data_help, exit_line);
}

static int run_data(struct ct_comm *c, int argc, char **argv)
{
    struct data_args a;
    /* Every rank parses the same arguments; the agreement makes the status
     * (and rank 0's message) every rank's. */
    int rc = ct_comm_agree(c, parse(&a, argc, argv));
    if (rc < 0) {
        if (c->rank == 0) {
            fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
            fprintf(stderr, "usage: ctrain-dist %s\n", data_synopsis);
        }
        free(a.files);
        return rc == CT_EUSAGE ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
    }
    if (a.help) {
        if (c->rank == 0)
            print_help(stdout);
        free(a.files);
        return CT_EXIT_OK;
    }
    if (c->rank == 0) {
        rc = strcmp(a.sub, "inspect") == 0 ? cmd_inspect(stdout, &a)
             : strcmp(a.sub, "stats") == 0 ? cmd_stats(stdout, &a)
                                           : cmd_tokenize(stdout, &a);
        fflush(stdout);
    }
    free(a.files);
    rc = ct_comm_agree(c, rc);
    if (rc == 0)
        return CT_EXIT_OK;
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    return rc == CT_EUSAGE ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
}

const struct ct_cli_command ct_cli_data = {
    .name = "data",
    .synopsis = data_synopsis,
    .summary = data_summary,
    .help = data_help,
    .run_argv = run_data,
};
