/* SHA-256 of buffers and files (OpenSSL libcrypto), for integrity and audit:
 * parameter digests in metrics, replica checks across ranks, data file digests. */
#ifndef CT_CORE_SHA256_H
#define CT_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define CT_SHA256_LEN 32
#define CT_SHA256_HEX_LEN 65 /* 64 hex digits + NUL */

struct ct_sha256 {
    void *md_ctx; /* EVP_MD_CTX */
};

int ct_sha256_init(struct ct_sha256 *h);
int ct_sha256_update(struct ct_sha256 *h, const void *data, size_t len);
/* Writes the digest and frees the context. */
int ct_sha256_final(struct ct_sha256 *h, uint8_t out[CT_SHA256_LEN]);

/* One shot. */
int ct_sha256_buf(const void *data, size_t len, uint8_t out[CT_SHA256_LEN]);
/* Digest of a whole file; errors name the file. */
int ct_sha256_file(const char *path, uint8_t out[CT_SHA256_LEN]);
/* Lower-case hex. */
void ct_sha256_hex(const uint8_t digest[CT_SHA256_LEN], char hex[CT_SHA256_HEX_LEN]);

#endif
