/* Internals shared by the checkpoint writer, reader and inspector: small
 * POSIX file helpers (durable writes, directory syncs, flat removals), the
 * checkpoint directory naming rules and the manifest loader (common.c). Not
 * installed; nothing outside src/ckpt includes it (tests may). The writer's
 * own pieces: write-impl.h, and the data.bin planner: layout-impl.h. */
#ifndef CT_CKPT_IMPL_H
#define CT_CKPT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "proto/checkpoint.pb-c.h"

/* Sections start at multiples of this in data.bin. */
#define CT__CKPT_ALIGN 64
/* More dimensions than a reader accepts in a manifest entry. */
#define CT__CKPT_MAX_DIMS 8
/* `latest` holds "ckpt-<step>\n"; anything longer is damaged. */
#define CT__CKPT_MAX_LATEST_BYTES 256

/* The failpoints of files written after the commit (phase "chain", in
 * chain.c): SIGKILL, CT_EIO for ":fail", CT_EINVAL for a malformed
 * CT_FAILPOINT, or 0 when it does not name that phase and rank. */
int ct__ckpt_failpoint(const char *phase, int rank);
/* Does CT_FAILPOINT (valid) name this phase and rank? For the writer that
 * must prepare the crash it stands for (a torn chain line) before calling
 * ct__ckpt_failpoint. */
int ct__ckpt_failpoint_armed(const char *phase, int rank);

/* "ckpt-<digits>" exactly (no suffix): its step in *step, returns 1; else 0. */
int ct__ckpt_parse_name(const char *name, int64_t *step);
/* "ckpt-<digits>.tmp-<anything>": a temporary directory of a write. */
int ct__ckpt_is_tmp_name(const char *name);

/* fsync a directory, so the renames and unlinks inside it are durable. */
int ct__ckpt_fsync_dir(const char *dir);
/* Write DIR/NAME and fsync it (not the directory). */
int ct__ckpt_write_file(const char *dir, const char *name, const void *data, size_t len);
/* Write `len` bytes to `path` durably and atomically: path.tmp, fsync,
 * rename, fsync the directory. *renamed (if not NULL) says whether the
 * rename happened, i.e. whether `path` may already hold the new bytes. */
int ct__ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                          int *renamed);
/* 0 when DIR is a real directory (not a symlink) that holds nothing but
 * regular files named as a checkpoint's (manifest.pb, manifest.sha256,
 * data.bin, any of them missing, and MPI-IO's data.bin.locktest.* probe):
 * a checkpoint, a temporary one, or
 * the remains of an interrupted write or deletion. CT_ESTATE (the message
 * says what is foreign) when it is not ours, CT_ENOENT when it is gone. */
int ct__ckpt_dir_is_ours(const char *dir);
/* Remove a checkpoint directory: refused (CT_ESTATE, nothing touched)
 * unless ct__ckpt_dir_is_ours; `first` (if not NULL) is unlinked and the
 * directory synced before the rest, so a crash mid-way leaves a directory
 * that is no longer a checkpoint. A directory already gone is not an error. */
int ct__ckpt_remove_dir(const char *dir, const char *first);
/* Read a whole small file into a malloc'd buffer (NUL-terminated), refusing
 * files larger than `cap`. Errors name the file. */
int ct__ckpt_read_small(const char *path, size_t cap, uint8_t **out, size_t *len);

/* Load and unpack DIR/manifest.pb (size capped), check its version and
 * structure (one rank entry per rank, digest lengths); its SHA-256 in
 * digest. The caller frees with ctrain__manifest__free_unpacked(m, NULL). */
int ct__ckpt_load_manifest(const char *dir, Ctrain__Manifest **out, uint8_t digest[CT_SHA256_LEN]);
/* Read DIR/data.bin whole after checking its size against the manifest;
 * 64-byte aligned buffer, free(). */
int ct__ckpt_load_data(const char *dir, const Ctrain__Manifest *m, uint8_t **out);
/* Bytes [begin, end) of DIR/data.bin (its size checked as above). */
int ct__ckpt_load_range(const char *dir, const Ctrain__Manifest *m, uint64_t begin, uint64_t end,
                        uint8_t **out);
/* Check one tensor / rank entry against the data: bounds, alignment, dtype,
 * shape, SHA-256. Errors name the file and the section. */
int ct__ckpt_verify_tensor(const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                           size_t i);
int ct__ckpt_verify_rank(const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                         size_t i);
/* The same, data holding data.bin from byte `base` on (through the record). */
int ct__ckpt_verify_rank_at(const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                            uint64_t base, size_t i);
/* dtype by name; -1 if unknown. */
int ct__ckpt_dtype_parse(const char *s);
/* "ab12cd34ef56.." : the first `n` hex digits of a digest. */
void ct__ckpt_hex_prefix(const uint8_t *d, size_t dlen, char *out, size_t n);

#endif
