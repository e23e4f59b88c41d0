/* libFuzzer harness: the weights reader behind train.init_from
 * (src/report/weights.c): npz (the ZIP records, ZIP64 extras, inflate,
 * CRC-32, the .npy headers inside) and safetensors (the length, the JSON
 * header, the offsets).
 *
 * Input: the file's bytes, parsed in memory (ct_weights_parse).
 * Invariants (abort otherwise): a refusal is CT_EFORMAT with a message
 * naming the file; an accepted file's tensors have unique non-empty names,
 * at most CT_WEIGHTS_MAX_DIMS axes, numel = the product of the shape, and
 * data that lies wholly inside the input or an entry's inflated buffer
 * (every element is widened: ASan sees any read past it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/weights.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_weights: ");                                                         \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

static int inside(const uint8_t *p, uint64_t n, const uint8_t *base, uint64_t len)
{
    return base && p >= base && n <= len && (uint64_t)(p - base) <= len - n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    struct ct_weights w;
    int rc = ct_weights_parse(&w, "input.bin", buf, size);
    if (rc < 0) {
        if (rc != CT_EFORMAT && rc != CT_ENOMEM)
            FAIL("refusal with code %d, not CT_EFORMAT: %s", rc, ct_error_message());
        if (!strstr(ct_error_message(), "input.bin"))
            FAIL("message does not name the file: %s", ct_error_message());
        ct_error_clear();
        return 0;
    }
    for (int i = 0; i < w.n; i++) {
        const struct ct_weights_tensor *t = &w.t[i];
        if (!t->name[0] || ct_weights_find(&w, t->name) != t)
            FAIL("tensor %d: empty or repeated name '%s'", i, t->name);
        if (t->ndim < 0 || t->ndim > CT_WEIGHTS_MAX_DIMS)
            FAIL("tensor '%s': %d axes", t->name, t->ndim);
        uint64_t numel = 1;
        for (int k = 0; k < t->ndim; k++)
            numel *= (uint64_t)t->shape[k];
        if (numel != t->numel)
            FAIL("tensor '%s': numel %llu, shape's product %llu", t->name,
                         (unsigned long long)t->numel, (unsigned long long)numel);
        uint64_t bytes = numel * (t->dtype == CT_WEIGHTS_F32 ? 4 : 2);
        /* Or in its entry's inflated buffer: that size is not kept, ASan
         * checks the reads below. */
        int ok = inside(t->data, bytes, w.file, w.size) || (w.inflated[i] && t->data >= w.inflated[i]);
        if (!ok)
            FAIL("tensor '%s': %llu bytes outside the input", t->name, (unsigned long long)bytes);
        float *out = malloc(numel ? numel * sizeof *out : 1);
        if (out)
            ct_weights_to_f32(t, out);
        free(out);
    }
    ct_weights_close(&w);
    return 0;
}
