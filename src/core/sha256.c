/* SHA-256 through OpenSSL's EVP interface (see sha256.h). */
#include "core/error.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "core/liveness.h"
#include "core/sha256.h"

int ct_sha256_init(struct ct_sha256 *h)
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c)
        return ct_error_set(CT_ENOMEM, "sha256: cannot allocate a digest context");
    if (EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return ct_error_set(CT_EINVAL, "sha256: EVP_DigestInit_ex failed");
    }
    h->md_ctx = c;
    return 0;
}

/* In pieces of 64 MiB, each a liveness mark: hashing a data set or a
 * checkpoint of many GiB is progress, not a hang. */
int ct_sha256_update(struct ct_sha256 *h, const void *data, size_t len)
{
    const size_t piece = (size_t)64 << 20;
    const unsigned char *p = data;
    do {
        size_t n = len < piece ? len : piece;
        if (EVP_DigestUpdate((EVP_MD_CTX *)h->md_ctx, p, n) != 1)
            return ct_error_set(CT_EINVAL, "sha256: EVP_DigestUpdate failed");
        p += n;
        len -= n;
        if (len)
            ct_liveness_mark(-1);
    } while (len);
    return 0;
}

int ct_sha256_final(struct ct_sha256 *h, uint8_t out[CT_SHA256_LEN])
{
    unsigned int n = 0;
    int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)h->md_ctx, out, &n);
    EVP_MD_CTX_free((EVP_MD_CTX *)h->md_ctx);
    h->md_ctx = NULL;
    if (ok != 1 || n != CT_SHA256_LEN)
        return ct_error_set(CT_EINVAL, "sha256: EVP_DigestFinal_ex failed");
    return 0;
}

int ct_sha256_buf(const void *data, size_t len, uint8_t out[CT_SHA256_LEN])
{
    struct ct_sha256 h = {0};
    int rc = ct_sha256_init(&h);
    if (rc < 0)
        return rc;
    rc = ct_sha256_update(&h, data, len);
    if (rc < 0) {
        uint8_t dummy[CT_SHA256_LEN];
        ct_sha256_final(&h, dummy);
        return rc;
    }
    return ct_sha256_final(&h, out);
}

int ct_sha256_file(const char *path, uint8_t out[CT_SHA256_LEN])
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    struct ct_sha256 h = {0};
    int rc = ct_sha256_init(&h);
    if (rc < 0) {
        fclose(f);
        return rc;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && rc == 0)
        rc = ct_sha256_update(&h, buf, n);
    int read_err = ferror(f);
    fclose(f);
    uint8_t tmp[CT_SHA256_LEN];
    int frc = ct_sha256_final(&h, tmp);
    if (rc < 0)
        return rc;
    if (read_err)
        return ct_error_set(CT_EIO, "%s: read error while computing its SHA-256", path);
    if (frc < 0)
        return frc;
    memcpy(out, tmp, CT_SHA256_LEN);
    return 0;
}

void ct_sha256_hex(const uint8_t digest[CT_SHA256_LEN], char hex[CT_SHA256_HEX_LEN])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < CT_SHA256_LEN; i++) {
        hex[2 * i] = d[digest[i] >> 4];
        hex[2 * i + 1] = d[digest[i] & 15];
    }
    hex[64] = '\0';
}
