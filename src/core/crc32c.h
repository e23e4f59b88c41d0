/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * TFRecord files (TensorBoard's event files), and the TFRecord "masked" form
 * of it. A small table-driven implementation: event files are a few records
 * per logged step, so speed does not matter and no SSE4.2 path is kept.
 *
 *     uint32_t c = ct_crc32c(0, data, len);       // whole buffer
 *     c = ct_crc32c(ct_crc32c(0, a, na), b, nb);  // the same over a then b
 *     uint32_t m = ct_crc32c_mask(c);             // what a TFRecord stores
 *
 * Deliberately not here: the record framing (run/tbevents.c).
 */
#ifndef CT_CORE_CRC32C_H
#define CT_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of len bytes, continuing from crc (0 to start). */
uint32_t ct_crc32c(uint32_t crc, const void *data, size_t len);

/* TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t ct_crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
