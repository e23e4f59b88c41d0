/* GPT-2's byte-level BPE: the vocabulary (encoder.json, 50,257 tokens) and
 * the merges (vocab.bpe) read from a directory, text encoded into token ids
 * and ids decoded back into bytes, as OpenAI's encoder does:
 *
 *   1. pre-tokenization by GPT-2's expression
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      written out by hand over UTF-8 code points (the classes as the
 *      reference encoder's JavaScript engine has them: bpe_unicode.inc);
 *   2. each piece's bytes as the 256 one-byte tokens, then merges by rank:
 *      the lowest-ranked adjacent pair is merged everywhere (left to right),
 *      until no pair is a merge.
 *
 * Any byte string round-trips: bytes that are not UTF-8 each count as one
 * code point of the "other" class (the reference, reading text as UTF-8,
 * would have replaced them), so decode(encode(x)) == x for every x.
 *
 *     struct ct_bpe *b;
 *     if ((rc = ct_bpe_load(&b, "data/gpt2-bpe")) < 0) return rc;
 *     struct ct_bpe_ids ids = {0};
 *     rc = ct_bpe_encode(b, text, len, &ids);        // appends to ids
 *     rc = ct_bpe_decode(b, ids.v, ids.n, out, &n);  // out: n bytes
 *     ct_bpe_ids_free(&ids);
 *     ct_bpe_free(b);
 */
#ifndef CT_DATA_BPE_H
#define CT_DATA_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/sha256.h"

#define CT_BPE_ENCODER_FILE "encoder.json"
#define CT_BPE_MERGES_FILE "vocab.bpe"
#define CT_BPE_EOT_NAME "<|endoftext|>"

struct ct_bpe;

/* A growing array of token ids. */
struct ct_bpe_ids {
    uint16_t *v;
    size_t n, cap;
};

/* Reads DIR/encoder.json and DIR/vocab.bpe. Errors name the file and what
 * is wrong (line of a merge, the token): CT_ENOENT, CT_EIO, CT_EFORMAT. The
 * vocabulary must hold every one-byte token and every merge's parts and
 * result, at most 65,536 tokens (uint16 shards). */
int ct_bpe_load(struct ct_bpe **out, const char *dir);
void ct_bpe_free(struct ct_bpe *b);

/* Vocabulary size, the id of <|endoftext|> (-1 when absent) and the
 * tokenizer's digest: SHA-256 of encoder.json's bytes then vocab.bpe's. */
int ct_bpe_vocab(const struct ct_bpe *b);
int ct_bpe_eot(const struct ct_bpe *b);
const uint8_t *ct_bpe_digest(const struct ct_bpe *b);

/* Appends the ids of text[0..len) to ids (CT_ENOMEM). */
int ct_bpe_encode(const struct ct_bpe *b, const char *text, size_t len, struct ct_bpe_ids *ids);
int ct_bpe_ids_push(struct ct_bpe_ids *ids, uint16_t id);
void ct_bpe_ids_free(struct ct_bpe_ids *ids);

/* The bytes of token id (NULL when id is out of range), *len their number. */
const char *ct_bpe_token(const struct ct_bpe *b, int id, size_t *len);
/* The concatenated bytes of ids into a malloc'd *out (NUL-terminated),
 * *len bytes; CT_EINVAL naming the first id out of range. */
int ct_bpe_decode(const struct ct_bpe *b, const uint16_t *ids, size_t n, char **out, size_t *len);

#endif
