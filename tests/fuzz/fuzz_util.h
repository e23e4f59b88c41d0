/* Helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c).
 *
 * The readers under test take paths, so each harness process works in its
 * own temporary directory (made once, in LLVMFuzzerInitialize, under
 * /dev/shm when it exists so the per-input writes stay in memory, removed at
 * exit). Inputs are split into parts by ct_fuzz_take(): a little-endian
 * 32-bit length, clamped to what is left, then that many bytes; so every
 * input, however mutated, decodes to something. See tests/fuzz/README.md
 * for each harness's encoding. */
#ifndef CT_FUZZ_UTIL_H
#define CT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* The process's scratch directory (absolute path), created on first call;
 * aborts when it cannot be made: a harness that cannot write its files
 * would fuzz nothing. */
const char *ct_fuzz_dir(void);

/* Write `len` bytes to DIR/NAME (replacing it); aborts on an I/O error
 * (the scratch directory is ours, so a failure is the harness's bug). */
void ct_fuzz_write(const char *name, const void *data, size_t len);
/* Remove DIR/NAME if it exists. */
void ct_fuzz_remove(const char *name);
/* DIR/NAME into buf (aborts when it does not fit). */
void ct_fuzz_path(char *buf, size_t cap, const char *name);

/* Take the next part of an input: 4 bytes of little-endian length (fewer
 * bytes left: length 0), clamped to the bytes that remain. Advances *p and
 * *n past it. */
void ct_fuzz_take(const uint8_t **p, size_t *n, const uint8_t **part, size_t *part_len);

/* With CT_FUZZ_VERBOSE=1 in the environment, print what the reader said
 * (its return code and ct_error_message()) to stderr: for replaying an
 * input by hand. Silent otherwise (fuzzing at full speed). */
void ct_fuzz_verbose(const char *what, int rc);

#endif
