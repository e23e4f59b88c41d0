/* Weights in from the rest of the ecosystem: the named tensors of an npz or
 * a safetensors file, the reader behind train.init_from (train/init_from.h)
 * and the twin of report/export.h's writer.
 *
 *  - npz: a ZIP archive of .npy files, `<name>.npy` each: what `ctrain-dist
 *    export`, numpy.savez and numpy.savez_compressed write. Entries stored
 *    or deflated (zlib), ZIP64 records read, every entry's CRC-32 checked.
 *    Each .npy must be '<f4' or '<f2', C order (data/npy.h parses it).
 *  - safetensors: an 8-byte little-endian header length, a JSON header
 *    (name: {"dtype", "shape", "data_offsets"}, and "__metadata__"), then
 *    the bytes. Dtypes F32, F16 and BF16.
 * The format is told by the file's first bytes, not its name. An entry
 * called `__metadata__` (export's JSON of strings, either format) is no
 * tensor and is skipped.
 *
 * Everything is checked before a tensor is handed out: the archive's
 * records and offsets inside the file, sizes that match dtype x shape,
 * names unique and non-empty. A failure is CT_EFORMAT (CT_ENOENT / CT_EIO
 * for the file itself) whose message names the file, the entry and what is
 * wrong. The file is read whole into memory (a deflated entry is inflated
 * into a buffer of its own): a GPT-2-small is 0.5 GB in float32.
 *
 *     struct ct_weights w;
 *     if (ct_weights_open(&w, "gpt2.safetensors") < 0) ... ct_error_message() ...
 *     const struct ct_weights_tensor *t = ct_weights_find(&w, "transformer.wte.weight");
 *     ct_weights_to_f32(t, dst);    // t->numel floats, widened
 *     ct_weights_close(&w);
 */
#ifndef CT_REPORT_WEIGHTS_H
#define CT_REPORT_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "report/export.h"

enum ct_weights_dtype { CT_WEIGHTS_F32, CT_WEIGHTS_F16, CT_WEIGHTS_BF16, CT_WEIGHTS_DTYPE_COUNT };

/* More axes than this are refused (ours have at most 4). */
#define CT_WEIGHTS_MAX_DIMS 8

struct ct_weights_tensor {
    const char *name;            /* without npz's ".npy" */
    enum ct_weights_dtype dtype;
    int ndim;
    int64_t shape[CT_WEIGHTS_MAX_DIMS];
    uint64_t numel;              /* product of shape (1 for ndim 0) */
    const uint8_t *data;         /* numel elements, little-endian, maybe unaligned */
};

struct ct_weights {
    char path[4096];
    enum ct_export_format format;
    int n;                       /* tensors, in the file's order */
    struct ct_weights_tensor *t;
    /* private */
    uint8_t *file;
    size_t size;
    uint8_t **inflated;          /* (n) a deflated entry's bytes, else NULL */
    char *names;                 /* every name, NUL-separated */
};

/* Reads and checks the file at path. On failure w is empty (closing it is
 * harmless). */
int ct_weights_open(struct ct_weights *w, const char *path);
/* The same over size bytes at buf (a fuzz target's input, a test's): takes
 * ownership of buf (malloc'd; freed on failure too); path only names it. */
int ct_weights_parse(struct ct_weights *w, const char *path, uint8_t *buf, size_t size);
void ct_weights_close(struct ct_weights *w);

/* The tensor called name, or NULL. */
const struct ct_weights_tensor *ct_weights_find(const struct ct_weights *w, const char *name);
/* t's numel elements into out, widened to float32 (exactly: every f16 and
 * bf16 value is a float32 value). */
void ct_weights_to_f32(const struct ct_weights_tensor *t, float *out);
/* "float32", "float16", "bfloat16". */
const char *ct_weights_dtype_name(enum ct_weights_dtype d);
/* "(768, 3072)": the shape as PyTorch prints one; buf of cap >= 16 bytes,
 * truncated with "...)". Returns buf. */
char *ct_weights_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

#endif
