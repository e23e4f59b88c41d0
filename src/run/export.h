/* Weights out to the rest of the ecosystem: a list of named float32 tensors
 * (a model's state_dict: PyTorch names and shapes) written as a file that
 * NumPy and PyTorch users load directly.
 *
 *  - npz: a ZIP archive (stored, not compressed) of one NPY v1.0 file per
 *    tensor, `<name>.npy`, little-endian '<f4', C order, plus `metadata.json`
 *    (a JSON object of strings: checkpoint, step, config digest, ...).
 *    `numpy.load(f)[name]` gives the array.
 *  - safetensors: an 8-byte little-endian header length, a JSON header
 *    ({"__metadata__": {...}, name: {"dtype": "F32", "shape": [...],
 *    "data_offsets": [begin, end]}}, padded with spaces to 8 bytes), then the
 *    tensors' bytes in order. Hugging Face's format: a header to read, no
 *    code to run.
 *
 * The file is written under a temporary name and renamed when complete
 * (core/path's ct_replace): a reader never sees a part of it.
 *
 * What this is not: a checkpoint (no optimizer state, RNG or sampler, no
 * digests; `ctrain-dist export` takes those from a verified checkpoint) and
 * not a general archive writer (no compression, no ZIP64: files above 4 GiB
 * are refused).
 *
 *     struct ct_export_tensor t[] = {{"layers.0.weight", 2, (int64_t[]){256, 784}, w}, ...};
 *     struct ct_export_meta meta[] = {{"checkpoint", "runs/x/ckpt-1170"}};
 *     rc = ct_export_write("model.npz", CT_EXPORT_NPZ, t, n, meta, 1);
 */
#ifndef CT_RUN_EXPORT_H
#define CT_RUN_EXPORT_H

#include <stddef.h>
#include <stdint.h>

enum ct_export_format {
    CT_EXPORT_NPZ,
    CT_EXPORT_SAFETENSORS,
    CT_EXPORT_FORMAT_COUNT
};

/* "npz", "safetensors"; indexed by enum ct_export_format, NULL-terminated. */
extern const char *const ct_export_format_names[];

struct ct_export_tensor {
    const char *name;     /* state_dict key, e.g. "layers.0.weight" */
    int ndim;             /* 0..4 */
    const int64_t *shape; /* (ndim) */
    const float *data;    /* prod(shape) floats, C order */
};

struct ct_export_meta {
    const char *key, *value;
};

/* Write the tensors to path in the given format. Names must be unique,
 * non-empty and free of '/' and control characters (CT_EINVAL otherwise);
 * I/O failures are CT_EIO naming path. Nothing is left at path on failure
 * (an existing file there is kept). */
int ct_export_write(const char *path, enum ct_export_format format,
                    const struct ct_export_tensor *t, int n, const struct ct_export_meta *meta,
                    int n_meta);

#endif
