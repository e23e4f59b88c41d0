/* libFuzzer harness: the rank-record decoder (ct_rank_record_unpack,
 * src/ckpt/codec.c), on the raw input bytes.
 *
 * What it accepts must survive a round trip: pack it again, unpack that,
 * and get the same struct (checked here, abort otherwise): a record the
 * reader takes is one the writer can write back, as a resumed run does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ct_rank_record r, back;
    int rc = ct_rank_record_unpack(data, size, "fuzz input", &r);
    ct_fuzz_verbose("ct_rank_record_unpack", rc);
    if (rc < 0)
        return 0;
    uint8_t *bytes;
    size_t len;
    if (ct_rank_record_pack(&r, &bytes, &len) < 0) {
        fprintf(stderr, "fuzz_record: an accepted record does not pack again\n");
        abort();
    }
    if (ct_rank_record_unpack(bytes, len, "repacked", &back) < 0 || memcmp(&r, &back, sizeof r) != 0) {
        fprintf(stderr, "fuzz_record: an accepted record does not survive pack + unpack\n");
        abort();
    }
    free(bytes);
    return 0;
}
