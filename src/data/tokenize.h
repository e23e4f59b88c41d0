/* Tokenization of text files into one token shard (data/tokens.h, llm.c's
 * layout): each byte one token (vocabulary 256; `ctrain-dist data tokenize
 * --bytes`), or GPT-2's BPE (vocabulary 50,257; `data tokenize --gpt2 DIR`).
 *
 *     const char *texts[] = {"a.txt", "b.txt"};
 *     uint64_t n;
 *     if ((rc = ct_tokenize_bytes(texts, 2, "train.bin", &n)) < 0) return rc;
 *     // train.bin holds n tokens: a.txt's bytes, then b.txt's
 */
#ifndef CT_DATA_TOKENIZE_H
#define CT_DATA_TOKENIZE_H

#include <stdint.h>

/* Writes `shard` atomically (a temporary file renamed over it when every
 * byte was put; nothing left behind on failure) from the n_texts files'
 * bytes, one after another; *ntokens = their total size. Each text must be
 * a regular file (its size is the header's count, known before writing) and
 * must not change while read (CT_EIO). CT_EINVAL "<file> holds no bytes:
 * nothing to tokenize" when they are all empty (the message names the one
 * file, or "the text files"). */
int ct_tokenize_bytes(const char *const *texts, int n_texts, const char *shard, uint64_t *ntokens);

/* GPT-2's BPE (data/bpe.h) with the vocabulary of bpe_dir: each text file
 * one document, each document preceded by <|endoftext|> (llm.c's shards),
 * written atomically to `shard`. *ntokens: the tokens written (EOTs
 * included); *vocab: the vocabulary size (data.vocab); digest: the
 * tokenizer's (ct_bpe_digest). Errors as ct_tokenize_bytes, and the
 * vocabulary's (naming its file); CT_EFORMAT when it has no <|endoftext|>. */
int ct_tokenize_gpt2(const char *bpe_dir, const char *const *texts, int n_texts, const char *shard,
                     uint64_t *ntokens, int *vocab, uint8_t digest[32]);

#endif
