/* Weights out to the rest of the ecosystem: a list of named float32 tensors
 * (a model's state_dict: PyTorch names and shapes) written as a file that
 * NumPy and PyTorch users load directly.
 *
 *  - npz: a ZIP archive (stored, not compressed) of one NPY v1.0 file per
 *    tensor, `<name>.npy`, little-endian '<f4', C order, plus
 *    `__metadata__.npy`: a 0-d '<U' array holding a JSON object of strings
 *    (checkpoint, step, config, ...). `numpy.load(f)[name]` gives the
 *    array; `json.loads(str(numpy.load(f)["__metadata__"]))` the metadata.
 *  - safetensors: an 8-byte little-endian header length, a JSON header
 *    ({"__metadata__": {...}, name: {"dtype": "F32", "shape": [...],
 *    "data_offsets": [begin, end]}}, padded with spaces to 8 bytes), then the
 *    tensors' bytes in order. Hugging Face's format: a header to read, no
 *    code to run.
 *
 * The file is written under a temporary name and renamed when complete
 * (core/path's ct_replace): a reader never sees a part of it.
 *
 * Names: ours (a model's `layers.N...` state_dict), except a gpt's, which
 * are nanoGPT's (ct_export_gpt_names), the names a PyTorch GPT user expects.
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
#ifndef CT_REPORT_EXPORT_H
#define CT_REPORT_EXPORT_H

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

/* The longest name ct_export_gpt_names writes, with its NUL. */
#define CT_EXPORT_NAME_MAX 96

/* A gpt's tensors (src/models/gpt.c), given in our state_dict order, under
 * nanoGPT's state_dict names, so that `GPT.load_state_dict` of a nanoGPT-style
 * model takes the file as it is:
 *
 *     layers.E.wte.weight (V, C), layers.E.wpe.weight (T, C)
 *                                  -> transformer.wte.weight, transformer.wpe.weight
 *     the k-th residual block, layers.L.body.J.* (k = 0, 1, ...; i = k / 2):
 *       k even (attention): body.0.{weight,bias}        -> transformer.h.i.ln_1.*
 *                           body.1.qkv.{weight,bias}    -> transformer.h.i.attn.c_attn.* (3C, C)
 *                           body.1.proj.{weight,bias}   -> transformer.h.i.attn.c_proj.*
 *       k odd (MLP):        body.0.{weight,bias}        -> transformer.h.i.ln_2.*
 *                           body.1.{weight,bias}        -> transformer.h.i.mlp.c_fc.*
 *                           body.3.{weight,bias}        -> transformer.h.i.mlp.c_proj.*
 *     layers.F.{weight,bias}       -> transformer.ln_f.*
 *     and last lm_head.weight: transformer.wte.weight's data again (the tied head).
 *
 * Layer numbers are read, not assumed, so dropout modules (which hold no
 * tensor) may sit between the layers. Our Linear weights are (out, in), as
 * nn.Linear's. out has room for n + 1 tensors and names for n + 1 names; the
 * out tensors point into names and into in's shapes and data. Returns the
 * number of tensors in out, or CT_EINVAL naming a tensor that has no nanoGPT
 * name (or saying which part of a gpt is missing). */
int ct_export_gpt_names(const struct ct_export_tensor *in, int n, struct ct_export_tensor *out,
                        char (*names)[CT_EXPORT_NAME_MAX]);

/* ct_export_write under the names of `model`'s usual PyTorch twin: a gpt's
 * nanoGPT's (ct_export_gpt_names); every other model's as given. Returns
 * the number of tensors the file holds (a gpt's tied lm_head.weight is one
 * more than n), or a negative code. */
int ct_export_write_model(const char *path, enum ct_export_format format, const char *model,
                          const struct ct_export_tensor *t, int n, const struct ct_export_meta *meta,
                          int n_meta);

#endif
