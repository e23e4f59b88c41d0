/* A checkpoint described for people: `ctrain-dist inspect CKPT`.
 *
 *     rc = ct_ckpt_inspect("runs/cnn/ckpt-40", stdout);   // 0: every digest holds
 *
 * Deliberately not here: reading a checkpoint to use it (ckpt/ckpt.h, which
 * refuses a damaged one as a whole; this prints what it can of it).
 */
#ifndef CT_CKPT_INSPECT_H
#define CT_CKPT_INSPECT_H

#include <stdio.h>

/* Print the manifest (provenance, tensors with shapes and digests, rank
 * records) and verify every digest, reporting each section OK or BAD and a
 * verdict line; returns the verification result. */
int ct_ckpt_inspect(const char *dir, FILE *out);

#endif
